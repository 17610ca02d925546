"""CEL optional types (cel-go's `cel.OptionalTypes()`), which Kubernetes enables since 1.28.

The functions of the library: `optional.of(x)`, `optional.ofNonZeroValue(x)`,
`optional.none()`, `o.hasValue()`, `o.value()`, `o.or(o2)`, `o.orValue(x)`,
`optional.unwrap(list)` / `list.unwrapOpt()`, and `list.first()` /
`list.last()` (version 2 of the library; Kubernetes enables the latest).
The syntax (`a.?b`, `a[?b]`, `[?x]`, `{?k: v}`) is parsed in `parser.py`, typed in `checker.py` and
evaluated in `interpreter.py`; `optMap`/`optFlatMap` are macros expanded by
the parser. `or` and `orValue` are planned by the interpreter so that their
argument is only evaluated when the receiver is empty, as in cel-go.
"""

from __future__ import annotations

from typing import Any

from celpy.celtypes import DurationType, TimestampType

from dra_driver.scheduling.cel.diagnostics import FunctionError
from dra_driver.scheduling.cel.functions import glob, member, register
from dra_driver.scheduling.cel.types import BOOL, PARAM_A, list_of, optional_of
from dra_driver.scheduling.cel.values import NONE, Optional, TypeValue, kind_of

OPTIONAL_A = optional_of(PARAM_A)

# The message cel-go gives for `optional.none().value()`.
NONE_DEREFERENCE = "optional.none() dereference"


def of(value: Any) -> Optional:
    return Optional(value)


def of_non_zero_value(value: Any) -> Optional:
    return NONE if is_zero(value) else Optional(value)


def is_zero(value: Any) -> bool:
    """cel-go's `IsZeroValue`: the default value of the value's type."""
    if value is None:
        return True
    if isinstance(value, bool | int | float | str | bytes | list | tuple | dict):
        return not value
    if isinstance(value, DurationType):
        return bool(value == DurationType(0))
    if isinstance(value, TimestampType):
        return bool(value == _ZERO_TIME)
    if isinstance(value, Optional):
        return not value.has_value
    if isinstance(value, TypeValue):
        return False
    return False


# Go's zero time, which cel-go's Timestamp.IsZeroValue tests for.
_ZERO_TIME = TimestampType(1, 1, 1)


def none() -> Optional:
    return NONE


def _optional(value: Any) -> Optional:
    if not isinstance(value, Optional):
        raise FunctionError(f"no such overload: {kind_of(value)} is not an optional")
    return value


def has_value(opt: Any) -> bool:
    return _optional(opt).has_value


def value(opt: Any) -> Any:
    opt = _optional(opt)
    if not opt.has_value:
        raise FunctionError(NONE_DEREFERENCE)
    return opt.value


def or_optional(opt: Any, other: Any) -> Optional:
    opt = _optional(opt)
    return opt if opt.has_value else _optional(other)


def or_value(opt: Any, default: Any) -> Any:
    opt = _optional(opt)
    return opt.value if opt.has_value else default


def first(items: list[Any]) -> Optional:
    return Optional(items[0]) if items else NONE


def last(items: list[Any]) -> Optional:
    return Optional(items[-1]) if items else NONE


def unwrap(items: list[Any]) -> list[Any]:
    return [o.value for o in map(_optional, items) if o.has_value]


register("optional.of", glob("optional_of", (PARAM_A,), OPTIONAL_A, of))
register(
    "optional.ofNonZeroValue",
    glob("optional_ofNonZeroValue", (PARAM_A,), OPTIONAL_A, of_non_zero_value),
)
register("optional.none", glob("optional_none", (), OPTIONAL_A, none))
register("hasValue", member("optional_hasValue", (OPTIONAL_A,), BOOL, has_value))
register("value", member("optional_value", (OPTIONAL_A,), PARAM_A, value))
register("or", member("optional_or_optional", (OPTIONAL_A, OPTIONAL_A), OPTIONAL_A, or_optional))
register("orValue", member("optional_orValue_value", (OPTIONAL_A, PARAM_A), PARAM_A, or_value))
register(
    "optional.unwrap",
    glob("optional_unwrap", (list_of(OPTIONAL_A),), list_of(PARAM_A), unwrap),
)
register("first", member("list_first", (list_of(PARAM_A),), OPTIONAL_A, first))
register("last", member("list_last", (list_of(PARAM_A),), OPTIONAL_A, last))
register(
    "unwrapOpt", member("optional_unwrapOpt", (list_of(OPTIONAL_A),), list_of(PARAM_A), unwrap)
)
