"""Run-time CEL values as plain Python objects, and CEL's equality on them.

The interpreter works on native values for speed: `int`, `float`, `str`,
`bytes`, `bool`, `None`, `list`, `dict` (`MixedKeyMap` where keys `true`
and `1` meet), plus `Uint` (CEL's uint), `TypeValue`
(what `type(x)` returns), `Semver`, `Quantity`, and cel-python's
`DurationType`/`TimestampType`. `kind_of` names a value's CEL type in the
terms overloads are declared with. Because Python's `True == 1` and
`1 == 1.0`, equality is reimplemented with CEL's heterogeneous rules:
values of different types are unequal, except numbers, which compare by
value across int, uint and double.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from typing import Any, Final

from celpy.celtypes import DurationType, TimestampType

from dra_driver.kube.quantity import Quantity
from dra_driver.scheduling.cel.diagnostics import FunctionError
from dra_driver.scheduling.cel.semver import Semver


class Uint(int):
    """CEL's 64-bit unsigned integer; distinct from `int` in overload resolution."""

    __slots__ = ()

    def __repr__(self) -> str:
        return f"{int(self)}u"


class TypeValue:
    """A CEL type as a value (`type(1) == int`)."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __eq__(self, other: object) -> bool:
        return isinstance(other, TypeValue) and other.name == self.name

    def __hash__(self) -> int:
        return hash(self.name)

    def __repr__(self) -> str:
        return self.name


class Optional:
    """A value of CEL's `optional_type`: `optional.of(x)` or `optional.none()` (`NONE`)."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value

    @property
    def has_value(self) -> bool:
        return self.value is not _ABSENT

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Optional):
            return False
        if self.has_value and other.has_value:
            return cel_equal(self.value, other.value)
        return self.has_value == other.has_value

    def __hash__(self) -> int:
        raise TypeError("optional values cannot be map keys")

    def __repr__(self) -> str:
        return f"optional.of({display(self.value)})" if self.has_value else "optional.none()"


_ABSENT: Final = object()
NONE: Final = Optional(_ABSENT)


class DefaultingMap(dict[str, Any]):
    """A string-keyed map whose lookups of absent keys yield an empty map.

    This is `device.attributes` and `device.capacity`: indexing an unknown
    domain gives `{}` instead of an error, while `in`, `size()` and iteration
    see only the domains that exist.
    """

    __slots__ = ()

    def __missing__(self, key: str) -> dict[str, Any]:
        return EMPTY_MAP


EMPTY_MAP: Final[dict[str, Any]] = {}


class _BoolKey:
    """A bool map key as `MixedKeyMap` stores it: unequal to every number."""

    __slots__ = ("value",)

    def __init__(self, value: bool) -> None:
        self.value = value

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _BoolKey) and other.value is self.value

    def __hash__(self) -> int:
        return hash((_BoolKey, self.value))


def _store_key(key: Any) -> Any:
    return _BoolKey(key) if type(key) is bool else key


def _load_key(key: Any) -> Any:
    return key.value if type(key) is _BoolKey else key


class MixedKeyMap(dict[Any, Any]):
    """A map with a bool key beside a number key that Python thinks equal.

    In CEL `{1: "a", true: "b"}` has two entries, while a Python dict merges
    them (`True == 1`). Maps are plain dicts; `map_insert` switches one to
    this class only when such a collision happens. It stores bool keys
    wrapped and hands them back unwrapped from iteration and lookups.
    """

    __slots__ = ()

    def __setitem__(self, key: Any, value: Any) -> None:
        dict.__setitem__(self, _store_key(key), value)

    def __getitem__(self, key: Any) -> Any:
        return dict.__getitem__(self, _store_key(key))

    def __contains__(self, key: object) -> bool:
        return dict.__contains__(self, _store_key(key))

    def get(self, key: Any, default: Any = None) -> Any:
        return dict.get(self, _store_key(key), default)

    def __iter__(self) -> Iterator[Any]:
        return (_load_key(k) for k in dict.__iter__(self))

    def keys(self) -> Any:
        return list(self)

    def items(self) -> Any:
        return [(_load_key(k), v) for k, v in dict.items(self)]


def map_insert(m: dict[Any, Any], key: Any, value: Any) -> dict[Any, Any]:
    """Adds an entry whose key `map_lookup` found absent; returns the map to keep.

    That is `m` itself unless the key collides in Python with a key of
    another CEL type (`true` and `1`): then a `MixedKeyMap` copy.
    """
    if type(m) is not MixedKeyMap and key in m:
        mixed = MixedKeyMap()
        for k, v in dict.items(m):
            mixed[k] = v
        m = mixed
    m[key] = value
    return m


NULL_TYPE: Final = type(None)

_KINDS: Final[dict[type, str]] = {
    bool: "bool",
    int: "int",
    Uint: "uint",
    float: "double",
    str: "string",
    bytes: "bytes",
    NULL_TYPE: "null_type",
    list: "list",
    dict: "map",
    DefaultingMap: "map",
    MixedKeyMap: "map",
    Semver: "kubernetes.Semver",
    Quantity: "kubernetes.Quantity",
    DurationType: "google.protobuf.Duration",
    TimestampType: "google.protobuf.Timestamp",
    TypeValue: "type",
    Optional: "optional_type",
}

NUMERIC_KINDS: Final = frozenset({"int", "uint", "double"})

# Kubernetes' own types whose `Equal` is an error against a value of another type
# (cel-go's heterogeneous equality says false for its own types).
STRICT_EQUALITY_KINDS: Final = frozenset(
    {"net.IP", "net.CIDR", "kubernetes.URL", "kubernetes.NamedFormat"}
)


def register_kind(cls: type, kind: str) -> None:
    """Lets another module's value class take part in overload resolution."""
    _KINDS[cls] = kind


def kind_of(value: Any) -> str:
    """The CEL type name of a run-time value (the kind overloads are declared with)."""
    kind = _KINDS.get(type(value))
    if kind is not None:
        return kind
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, Uint):
        return "uint"
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "double"
    if isinstance(value, str):
        return "string"
    if isinstance(value, bytes):
        return "bytes"
    if isinstance(value, list | tuple):
        return "list"
    if isinstance(value, Mapping):
        return "map"
    return type(value).__name__


# The Go types of cel-go's values (and Kubernetes' Semver/Quantity), which
# some cel-go messages print with %T.
_GO_TYPE_NAMES: Final = {
    "bool": "types.Bool",
    "int": "types.Int",
    "uint": "types.Uint",
    "double": "types.Double",
    "string": "types.String",
    "bytes": "types.Bytes",
    "null_type": "types.Null",
    "google.protobuf.Duration": "types.Duration",
    "google.protobuf.Timestamp": "types.Timestamp",
    "kubernetes.Semver": "cel.Semver",
    "kubernetes.Quantity": "cel.Quantity",
    "optional_type": "*types.Optional",
    "type": "*types.Type",
    "net.IP": "cel.IP",
    "net.CIDR": "cel.CIDR",
    "kubernetes.URL": "cel.URL",
    "kubernetes.NamedFormat": "cel.Format",
}


def go_type_name(value: Any) -> str:
    """How cel-go's `%T` names the value's type (`types.Int`), for messages that use it."""
    kind = kind_of(value)
    return _GO_TYPE_NAMES.get(kind, kind)


def type_value_of(value: Any) -> TypeValue:
    return TypeValue(kind_of(value))


def cel_equal(a: Any, b: Any) -> bool:
    """CEL's `==`: heterogeneous; an error only where Kubernetes' types compare with others.

    Raises FunctionError("no such overload") when an IP, CIDR, URL or named
    format meets a value of another type (not null), as their `Equal` does.
    """
    ta = type(a)
    if ta is type(b):
        if ta is list:
            return len(a) == len(b) and all(cel_equal(x, y) for x, y in zip(a, b, strict=True))
        if ta is dict or ta is DefaultingMap or ta is MixedKeyMap:
            return _map_equal(a, b)
        return bool(a == b)
    ka = kind_of(a)
    kb = kind_of(b)
    if ka in NUMERIC_KINDS and kb in NUMERIC_KINDS:
        return bool(a == b)
    if ka != kb:
        if (ka in STRICT_EQUALITY_KINDS or kb in STRICT_EQUALITY_KINDS) and None not in (a, b):
            raise FunctionError("no such overload")
        return False
    if ka == "map":
        return _map_equal(a, b)
    if ka == "list":
        return len(a) == len(b) and all(cel_equal(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


def _map_equal(a: Mapping[Any, Any], b: Mapping[Any, Any]) -> bool:
    if len(a) != len(b):
        return False
    for key, value in a.items():
        found, other = map_lookup(b, key)
        if not found or not cel_equal(value, other):
            return False
    return True


def map_lookup(m: Mapping[Any, Any], key: Any) -> tuple[bool, Any]:
    """Looks `key` up with CEL's key rules; `(found, value)`.

    Numeric keys match across int, uint and integral doubles; a bool key
    never matches a number (Python would say `True == 1`).
    """
    kind = kind_of(key)
    if kind == "string":
        if key in m:
            return True, dict.get(m, key) if isinstance(m, dict) else m[key]
        return False, None
    if kind == "double":
        if not math.isfinite(key) or key != int(key):  # no int/uint key can match
            return False, None
        key = int(key)
        kind = "int"
    if kind in NUMERIC_KINDS:
        for k, v in m.items():
            if kind_of(k) in NUMERIC_KINDS and k == key:
                return True, v
        return False, None
    for k, v in m.items():
        if kind_of(k) == kind and k == key:
            return True, v
    return False, None


def display(value: Any) -> str:
    """A value as cel-go prints it in error messages (`no such key: x`)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, bytes):
        return repr(value)[1:]
    if value is None:
        return "null"
    return str(value)
