"""One typed codec for the checkpoint's records: frozen dataclasses to JSON objects and back.

Every record of the checkpoint (and of the copy each CDI spec carries) is a
frozen dataclass deriving from `Record`, whose fields name their JSON key
(`json_key("parentUuid")`). The codec reads the field types, so a record is
declared once and the reading and writing rules hold for all of them alike:

* writing (`to_dict`): every field, defaults and `None` included (the
  checkpoint's rule 1: what was hashed is what any reader sees); tuples as
  lists, mappings with sorted keys, enums as their value, nested records as
  objects;
* reading (`from_dict`): unknown keys are ignored (rule 2); a missing or
  `null` field takes its default (rule 3), and is an error naming the field
  only when the field has none; every value is type-checked (`True` is not
  an int), and an error names the field's path (`claims['u'].devices[0].pool
  must be str, got 3`).

Written here rather than with pydantic because the on-disk format, the
defaults for fields older files lack and every error message must stay
exactly as they are, and these records also carry transitions and indexes
of their own; the rules fit in one page.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Mapping
from enum import Enum
from types import MappingProxyType
from typing import Any, ClassVar, Self, TypeVar

from dra_driver.errors import CheckpointError

T = TypeVar("T")

_KEY: typing.Final = "json"
_MISSING: typing.Final = "json-missing"


class _Required:
    def __repr__(self) -> str:
        return "REQUIRED"


REQUIRED: typing.Final = _Required()
"""`json_key(missing=REQUIRED)`: the key must be present even though the field has a default."""


def json_key(name: str, *, missing: object = dataclasses.MISSING, **field_options: Any) -> Any:
    """A dataclass field stored under the JSON key `name`.

    When a file lacks the key (or holds `null`), the field gets `missing` if
    given, else the field's default; a field with neither is an error, and
    so is `missing=REQUIRED`. Other options go to `dataclasses.field`.
    """
    return dataclasses.field(metadata={_KEY: name, _MISSING: missing}, **field_options)


class Record:
    """Base of the records: `to_dict` and `from_dict` through the codec."""

    __dataclass_fields__: ClassVar[dict[str, dataclasses.Field[Any]]]
    WHERE: ClassVar[str] = "record"
    """How an error names a record read without a path."""

    def to_dict(self) -> dict[str, Any]:
        return {
            key: _encode(getattr(self, name)) for name, key, _type, _missing in _layout(type(self))
        }

    @classmethod
    def from_dict(cls, obj: object, where: str | None = None) -> Self:
        where = cls.WHERE if where is None else where
        m = object_at(obj, where)
        values = {}
        for name, key, kind, missing in _layout(cls):
            raw = m.get(key)
            if raw is not None:
                values[name] = _decode(kind, raw, key, where)
            elif missing is REQUIRED:
                raise CheckpointError(f"{where}.{key} is missing")
            elif missing is not dataclasses.MISSING:
                values[name] = missing
            # else: the field's own default
        return cls(**values)


def object_at(value: object, where: str) -> Mapping[str, Any]:
    """`value` as a JSON object, or CheckpointError naming `where`."""
    if not isinstance(value, Mapping):
        raise CheckpointError(f"{where} must be an object")
    return value


def typed(value: object, key: str, kind: type[T], where: str) -> T:
    """`value` if it is a `kind` (a bool is not an int), else CheckpointError naming the field."""
    wrong_bool = kind is int and isinstance(value, bool)
    if not isinstance(value, kind) or wrong_bool:
        raise CheckpointError(f"{where}.{key} must be {kind.__name__}, got {value!r}")
    return value


# -- the rules by type ----------------------------------------------------------


_Layout = tuple[tuple[str, str, Any, object], ...]
_LAYOUTS: dict[type, _Layout] = {}


def _layout(cls: type) -> _Layout:
    """(field name, JSON key, type, value when missing) of each stored field of `cls`; the
    value is REQUIRED, or MISSING for the field's own default. Worked out once per class."""
    layout = _LAYOUTS.get(cls)
    if layout is None:
        layout = _LAYOUTS[cls] = _read_layout(cls)
    return layout


def _read_layout(cls: type) -> _Layout:
    hints = typing.get_type_hints(cls)
    out = []
    for f in dataclasses.fields(cls):
        if _KEY not in f.metadata:
            continue
        missing = f.metadata[_MISSING]
        has_default = (
            f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING
        )
        if missing is dataclasses.MISSING and not has_default:
            missing = REQUIRED
        out.append((f.name, f.metadata[_KEY], _without_none(hints[f.name]), missing))
    return tuple(out)


def _without_none(kind: Any) -> Any:
    """`X` for `X | None` (an absent value is the field's default)."""
    if isinstance(kind, types.UnionType) or typing.get_origin(kind) is typing.Union:
        rest = [arg for arg in typing.get_args(kind) if arg is not type(None)]
        if len(rest) == 1:
            return rest[0]
    return kind


def _encode(value: object) -> object:
    if isinstance(value, Record):
        return value.to_dict()
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, tuple):
        return [_encode(item) for item in value]
    if isinstance(value, Mapping):
        return {k: _encode(value[k]) for k in sorted(value)}
    return value


def _decode(kind: Any, raw: object, key: str, where: str) -> object:
    origin = typing.get_origin(kind)
    if origin is tuple:
        (item,) = [arg for arg in typing.get_args(kind) if arg is not Ellipsis]
        if isinstance(item, type) and issubclass(item, Record):
            if not isinstance(raw, list):
                raise CheckpointError(f"{where}.{key} must be a list")
            return tuple(item.from_dict(v, f"{where}.{key}[{i}]") for i, v in enumerate(raw))
        if not isinstance(raw, list) or not all(isinstance(v, str) for v in raw):
            raise CheckpointError(f"{where}.{key} must be a list of strings")
        return tuple(raw)
    if origin is Mapping:
        if not isinstance(raw, Mapping) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in raw.items()
        ):
            raise CheckpointError(f"{where}.{key} must be an object of strings")
        return MappingProxyType(dict(raw))
    if isinstance(kind, type) and issubclass(kind, Record):
        return kind.from_dict(raw, f"{where}.{key}")
    if isinstance(kind, type) and issubclass(kind, Enum):
        text = typed(raw, key, str, where)
        try:
            return kind(text)
        except ValueError as exc:
            raise CheckpointError(
                f"{where}.{key} is {text!r}, expected one of "
                f"{', '.join(str(member.value) for member in kind)}"
            ) from exc
    return typed(raw, key, kind, where)
