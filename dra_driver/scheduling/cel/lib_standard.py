"""CEL's standard operators and functions, with cel-go's semantics.

Arithmetic is 64-bit: int and uint overflow are errors, integer division
truncates toward zero, `%` takes the sign of the dividend, double division by
zero gives an infinity. Ordering is defined within a type and, since
Kubernetes enables cross-type numeric comparisons, across int, uint and
double. Equality is heterogeneous (`values.cel_equal`). Also here: `size`,
`contains`/`startsWith`/`endsWith`, `matches`, the type conversions and
`dyn`/`type`.
"""

from __future__ import annotations

import datetime
import math
from collections.abc import Sequence
from decimal import Decimal
from typing import Any, Final

from dra_driver.scheduling.cel import cost as costs
from dra_driver.scheduling.cel import regex
from dra_driver.scheduling.cel.diagnostics import FunctionError
from dra_driver.scheduling.cel.functions import glob, member, register
from dra_driver.scheduling.cel.lib_time import duration_nanos, time_arith
from dra_driver.scheduling.cel.types import (
    BOOL,
    BYTES,
    DOUBLE,
    DURATION,
    DYN,
    INT,
    PARAM_A,
    PARAM_B,
    STRING,
    TIMESTAMP,
    TYPE,
    UINT,
    list_of,
    map_of,
)
from dra_driver.scheduling.cel.values import Uint, cel_equal, kind_of, map_lookup, type_value_of

INT64_MIN: Final = -(2**63)
INT64_MAX: Final = 2**63 - 1
UINT64_MAX: Final = 2**64 - 1

LIST_A = list_of(PARAM_A)
MAP_AB = map_of(PARAM_A, PARAM_B)


def checked_int(value: int) -> int:
    if not INT64_MIN <= value <= INT64_MAX:
        raise FunctionError("integer overflow")
    return value


def checked_uint(value: int) -> Uint:
    if not 0 <= value <= UINT64_MAX:
        raise FunctionError("unsigned integer overflow")
    return Uint(value)


# -- equality and ordering ---------------------------------------------------


def _eq_cost(args: Sequence[Any], _result: Any) -> int:
    return costs.traversal(min(costs.size_of(args[0]), costs.size_of(args[1])))


def _not_equal(a: Any, b: Any) -> bool:
    return not cel_equal(a, b)


register("_==_", glob("equals", (PARAM_A, PARAM_A), BOOL, cel_equal, _eq_cost))
register("_!=_", glob("not_equals", (PARAM_A, PARAM_A), BOOL, _not_equal, _eq_cost))

_ORDERED: Final = (INT, UINT, DOUBLE, STRING, BYTES, BOOL, TIMESTAMP, DURATION)
_CROSS_NUMERIC: Final = (
    (INT, UINT),
    (INT, DOUBLE),
    (UINT, INT),
    (UINT, DOUBLE),
    (DOUBLE, INT),
    (DOUBLE, UINT),
)


def _lt(a: Any, b: Any) -> bool:
    return bool(a < b)


def _le(a: Any, b: Any) -> bool:
    return bool(a <= b)


def _gt(a: Any, b: Any) -> bool:
    return bool(a > b)


def _ge(a: Any, b: Any) -> bool:
    return bool(a >= b)


def _via_double(impl: Any) -> Any:
    """An int/uint against a double compares as a double, as cel-go (1.35-1.37) converts it:
    `9223372036854775807 < 9223372036854775808.0` is false there (2^63 - 1 rounds to 2^63)."""

    def compare(a: Any, b: Any) -> bool:
        return bool(impl(float(a), float(b)))

    return compare


for _name, _op, _impl in (
    ("_<_", "less", _lt),
    ("_<=_", "less_equals", _le),
    ("_>_", "greater", _gt),
    ("_>=_", "greater_equals", _ge),
):
    for _t in _ORDERED:
        _cost = _eq_cost if _t in (STRING, BYTES) else 1
        register(_name, glob(f"{_op}_{_t.kind}", (_t, _t), BOOL, _impl, _cost))
    for _l, _r in _CROSS_NUMERIC:
        _cross_impl = _via_double(_impl) if DOUBLE in (_l, _r) else _impl
        register(_name, glob(f"{_op}_{_l.kind}_{_r.kind}", (_l, _r), BOOL, _cross_impl))


# -- arithmetic --------------------------------------------------------------


def _add_int(a: int, b: int) -> int:
    return checked_int(a + b)


def _add_uint(a: int, b: int) -> Uint:
    return checked_uint(a + b)


def _add_double(a: float, b: float) -> float:
    return a + b


def _add_seq(a: Any, b: Any) -> Any:
    return a + b


def _add_list(a: list[Any], b: list[Any]) -> list[Any]:
    return [*a, *b]


def _concat_cost(args: Sequence[Any], _result: Any) -> int:
    return costs.traversal(costs.size_of(args[0]) + costs.size_of(args[1]))


def _list_concat_cost(_args: Sequence[Any], result: Any) -> int:
    return 1 + costs.traversal(costs.size_of(result))


# cel-go keeps durations as Go's time.Duration: whole nanoseconds in an int64.
_MAX_DURATION_NANOS: Final = 2**63 - 1


def _time_arith(a: Any, b: Any, op: str) -> Any:
    try:
        result = time_arith(a, b, op)
        if isinstance(result, datetime.timedelta) and abs(duration_nanos(result)) > (
            _MAX_DURATION_NANOS
        ):
            raise OverflowError("duration out of range")
    except (OverflowError, ValueError) as exc:
        raise FunctionError(f"timestamp or duration out of range: {exc}") from exc
    return result


def _add_time(a: Any, b: Any) -> Any:
    return _time_arith(a, b, "+")


def _sub_time(a: Any, b: Any) -> Any:
    return _time_arith(a, b, "-")


register(
    "_+_",
    glob("add_int64", (INT, INT), INT, _add_int),
    glob("add_uint64", (UINT, UINT), UINT, _add_uint),
    glob("add_double", (DOUBLE, DOUBLE), DOUBLE, _add_double),
    glob("add_string", (STRING, STRING), STRING, _add_seq, _concat_cost),
    glob("add_bytes", (BYTES, BYTES), BYTES, _add_seq, _concat_cost),
    glob("add_list", (LIST_A, LIST_A), LIST_A, _add_list, _list_concat_cost),
    glob("add_timestamp_duration", (TIMESTAMP, DURATION), TIMESTAMP, _add_time),
    glob("add_duration_timestamp", (DURATION, TIMESTAMP), TIMESTAMP, _add_time),
    glob("add_duration_duration", (DURATION, DURATION), DURATION, _add_time),
)


def _sub_int(a: int, b: int) -> int:
    return checked_int(a - b)


def _sub_uint(a: int, b: int) -> Uint:
    return checked_uint(a - b)


def _sub_double(a: float, b: float) -> float:
    return a - b


register(
    "_-_",
    glob("subtract_int64", (INT, INT), INT, _sub_int),
    glob("subtract_uint64", (UINT, UINT), UINT, _sub_uint),
    glob("subtract_double", (DOUBLE, DOUBLE), DOUBLE, _sub_double),
    glob("subtract_timestamp_timestamp", (TIMESTAMP, TIMESTAMP), DURATION, _sub_time),
    glob("subtract_timestamp_duration", (TIMESTAMP, DURATION), TIMESTAMP, _sub_time),
    glob("subtract_duration_duration", (DURATION, DURATION), DURATION, _sub_time),
)


def _mul_int(a: int, b: int) -> int:
    return checked_int(a * b)


def _mul_uint(a: int, b: int) -> Uint:
    return checked_uint(a * b)


def _mul_double(a: float, b: float) -> float:
    return a * b


register(
    "_*_",
    glob("multiply_int64", (INT, INT), INT, _mul_int),
    glob("multiply_uint64", (UINT, UINT), UINT, _mul_uint),
    glob("multiply_double", (DOUBLE, DOUBLE), DOUBLE, _mul_double),
)


def _truncated_div(a: int, b: int) -> int:
    quotient = abs(a) // abs(b)
    return quotient if (a >= 0) == (b >= 0) else -quotient


def _div_int(a: int, b: int) -> int:
    if b == 0:
        raise FunctionError("division by zero")
    return checked_int(_truncated_div(a, b))


def _div_uint(a: int, b: int) -> Uint:
    if b == 0:
        raise FunctionError("division by zero")
    return Uint(a // b)


def _div_double(a: float, b: float) -> float:
    if b == 0.0:
        if a == 0.0 or math.isnan(a):
            return math.nan
        return math.copysign(math.inf, a) * math.copysign(1.0, b)
    return a / b


register(
    "_/_",
    glob("divide_int64", (INT, INT), INT, _div_int),
    glob("divide_uint64", (UINT, UINT), UINT, _div_uint),
    glob("divide_double", (DOUBLE, DOUBLE), DOUBLE, _div_double),
)


def _mod_int(a: int, b: int) -> int:
    if b == 0:
        raise FunctionError("modulus by zero")
    remainder = abs(a) % abs(b)
    return -remainder if a < 0 else remainder


def _mod_uint(a: int, b: int) -> Uint:
    if b == 0:
        raise FunctionError("modulus by zero")
    return Uint(a % b)


register(
    "_%_",
    glob("modulo_int64", (INT, INT), INT, _mod_int),
    glob("modulo_uint64", (UINT, UINT), UINT, _mod_uint),
)


def _neg_int(a: int) -> int:
    return checked_int(-a)


def _neg_double(a: float) -> float:
    return -a


def _not(a: bool) -> bool:
    return not a


register(
    "-_",
    glob("negate_int64", (INT,), INT, _neg_int),
    glob("negate_double", (DOUBLE,), DOUBLE, _neg_double),
)
register("!_", glob("logical_not", (BOOL,), BOOL, _not))


def _unused(*_args: Any) -> Any:  # pragma: no cover - the interpreter evaluates these itself
    raise FunctionError("internal error: logical operator called as a function")


# Declared for the checker; the interpreter short-circuits them itself.
register("_&&_", glob("logical_and", (BOOL, BOOL), BOOL, _unused, 0))
register("_||_", glob("logical_or", (BOOL, BOOL), BOOL, _unused, 0))
register("_?_:_", glob("conditional", (BOOL, PARAM_A, PARAM_A), PARAM_A, _unused, 0))


# -- membership --------------------------------------------------------------


def _in_list(item: Any, items: list[Any]) -> bool:
    return any(cel_equal(item, x) for x in items)


def _in_map(key: Any, m: Any) -> bool:
    if type(key) is str:
        return key in m
    return map_lookup(m, key)[0]


def _in_list_cost(args: Sequence[Any], _result: Any) -> int:
    return costs.size_of(args[1])


register(
    "@in",
    glob("in_list", (PARAM_A, LIST_A), BOOL, _in_list, _in_list_cost),
    glob("in_map", (PARAM_A, MAP_AB), BOOL, _in_map),
)


# -- size and string predicates ----------------------------------------------


def _size(value: Any) -> int:
    return len(value)


for _t in (STRING, BYTES, LIST_A, MAP_AB):
    register(
        "size",
        glob(f"size_{_t.kind}", (_t,), INT, _size),
        member(f"{_t.kind}_size", (_t,), INT, _size),
    )


def _contains(s: str, sub: str) -> bool:
    return sub in s


def _starts_with(s: str, prefix: str) -> bool:
    return s.startswith(prefix)


def _ends_with(s: str, suffix: str) -> bool:
    return s.endswith(suffix)


def _contains_cost(args: Sequence[Any], _result: Any) -> int:
    return costs.string_traversal(args[0]) * costs.string_traversal(args[1])


def _first_traversal_cost(args: Sequence[Any], _result: Any) -> int:
    return costs.string_traversal(args[0])


register("contains", member("contains_string", (STRING, STRING), BOOL, _contains, _contains_cost))
register(
    "startsWith",
    member("starts_with_string", (STRING, STRING), BOOL, _starts_with, _first_traversal_cost),
)
register(
    "endsWith",
    member("ends_with_string", (STRING, STRING), BOOL, _ends_with, _first_traversal_cost),
)


def _matches(s: str, pattern: str) -> bool:
    return regex.compile_re2(pattern).search(s) is not None


def _regex_cost(args: Sequence[Any], _result: Any) -> int:
    return costs.regex_cost(args[0], args[1])


register(
    "matches",
    glob("matches", (STRING, STRING), BOOL, _matches, _regex_cost),
    member("matches_string", (STRING, STRING), BOOL, _matches, _regex_cost),
)


# -- conversions ---------------------------------------------------------------


def _to_int(value: Any) -> int:
    kind = kind_of(value)
    if kind == "int":
        return int(value)
    if kind == "uint":
        if value > INT64_MAX:
            raise FunctionError(f"range error converting {int(value)} to int")
        return int(value)
    if kind == "double":
        # cel-go refuses both ends: -2^63 as a double is out of range too.
        if math.isnan(value) or not (INT64_MIN < value < 2.0**63):
            raise FunctionError(f"range error converting {format_double(value)} to int")
        return int(value)
    if kind == "string":
        if not _is_decimal_integer(value):
            raise FunctionError(f"cannot convert {value!r} to int")
        return checked_int(int(value))
    if kind == "google.protobuf.Timestamp":
        return int(value.timestamp())
    raise FunctionError(f"type conversion error from '{kind}' to 'int'")


def _is_decimal_integer(text: str) -> bool:
    digits = text[1:] if text[:1] in ("+", "-") else text
    return bool(digits) and digits.isascii() and digits.isdigit()


def _to_uint(value: Any) -> Uint:
    kind = kind_of(value)
    if kind in ("int", "uint"):
        if not 0 <= value <= UINT64_MAX:
            raise FunctionError(f"range error converting {int(value)} to uint")
        return Uint(value)
    if kind == "double":
        if math.isnan(value) or not (0 <= value < 2.0**64):
            raise FunctionError(f"range error converting {format_double(value)} to uint")
        return Uint(int(value))
    if kind == "string":
        if not (value.isascii() and value.isdigit()):
            raise FunctionError(f"cannot convert {value!r} to uint")
        return checked_uint(int(value))
    raise FunctionError(f"type conversion error from '{kind}' to 'uint'")


def _to_double(value: Any) -> float:
    kind = kind_of(value)
    if kind in ("int", "uint", "double"):
        return float(value)
    if kind == "string":
        if "_" in value or value.strip() != value:
            raise FunctionError(f"cannot convert {value!r} to double")
        try:
            return float(value)
        except ValueError as exc:
            raise FunctionError(f"cannot convert {value!r} to double") from exc
    raise FunctionError(f"type conversion error from '{kind}' to 'double'")


def format_double(value: float) -> str:
    """A double as Go's `%g` prints it (shortest representation), as cel-go's string() does."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if value == 0.0:
        return "-0" if math.copysign(1.0, value) < 0 else "0"
    sign = "-" if value < 0 else ""
    dec = Decimal(repr(abs(value))).normalize()
    _, digit_tuple, exponent = dec.as_tuple()
    assert isinstance(exponent, int)
    digits = "".join(str(d) for d in digit_tuple)
    point = len(digits) + exponent  # position of the decimal point
    exp = point - 1
    if exp < -4 or exp >= 6:
        mantissa = digits[0] + ("." + digits[1:] if len(digits) > 1 else "")
        return f"{sign}{mantissa}e{'-' if exp < 0 else '+'}{abs(exp):02d}"
    if point <= 0:
        return f"{sign}0.{'0' * -point}{digits}"
    if point >= len(digits):
        return f"{sign}{digits}{'0' * (point - len(digits))}"
    return f"{sign}{digits[:point]}.{digits[point:]}"


def to_string(value: Any) -> str:
    kind = kind_of(value)
    if kind == "string":
        return str(value)
    if kind == "bool":
        return "true" if value else "false"
    if kind in ("int", "uint"):
        return str(int(value))
    if kind == "double":
        return format_double(value)
    if kind == "bytes":
        try:
            return str(value.decode("utf-8"))
        except UnicodeDecodeError as exc:
            raise FunctionError("invalid UTF-8 in bytes, cannot convert to string") from exc
    if kind in ("google.protobuf.Timestamp", "google.protobuf.Duration"):
        return str(value)
    if kind == "type":
        return str(value.name)
    raise FunctionError(f"type conversion error from '{kind}' to 'string'")


def _to_bytes(value: Any) -> bytes:
    if isinstance(value, bytes):
        return value
    return str(value).encode("utf-8")


_BOOL_STRINGS: Final = {
    "1": True,
    "t": True,
    "T": True,
    "true": True,
    "TRUE": True,
    "True": True,
    "0": False,
    "f": False,
    "F": False,
    "false": False,
    "FALSE": False,
    "False": False,
}


def _to_bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    result = _BOOL_STRINGS.get(value)
    if result is None:
        raise FunctionError(f"type conversion error from string to bool: {value!r}")
    return result


def _identity(value: Any) -> Any:
    return value


def _first_string_traversal(args: Sequence[Any], _result: Any) -> int:
    return costs.string_traversal(args[0])


register(
    "int",
    *(
        glob(f"{t.kind}_to_int64", (t,), INT, _to_int)
        for t in (INT, UINT, DOUBLE, STRING, TIMESTAMP)
    ),
)
register(
    "uint",
    *(glob(f"{t.kind}_to_uint64", (t,), UINT, _to_uint) for t in (INT, UINT, DOUBLE, STRING)),
)
register(
    "double",
    *(glob(f"{t.kind}_to_double", (t,), DOUBLE, _to_double) for t in (INT, UINT, DOUBLE, STRING)),
)
register(
    "string",
    *(
        glob(
            f"{t.kind}_to_string",
            (t,),
            STRING,
            to_string,
            _first_string_traversal if t == BYTES else 1,
        )
        for t in (INT, UINT, DOUBLE, BOOL, STRING, BYTES, TIMESTAMP, DURATION)
    ),
)
register(
    "bytes",
    glob("string_to_bytes", (STRING,), BYTES, _to_bytes, _first_string_traversal),
    glob("bytes_to_bytes", (BYTES,), BYTES, _identity),
)
register(
    "bool",
    glob("bool_to_bool", (BOOL,), BOOL, _to_bool),
    glob("string_to_bool", (STRING,), BOOL, _to_bool),
)
register("dyn", glob("to_dyn", (PARAM_A,), DYN, _identity))
register("type", glob("type", (PARAM_A,), TYPE, type_value_of))
