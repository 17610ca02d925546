"""cel-go's string extension library (`ext.Strings`), which Kubernetes enables at v2.

`charAt`, `indexOf`, `lastIndexOf`, `lowerAscii`, `upperAscii`, `replace`,
`split`, `substring`, `trim`, `join`, `format`, `strings.quote`, plus
`reverse` (v3). Indices count Unicode code points, as Go's rune slices do;
`trim` strips what Go's `unicode.IsSpace` calls space; `split` and `replace`
follow Go's `strings.Split`/`strings.Replace`, including the empty-separator
cases. Costs are Kubernetes' (`library/cost.go`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Final

from dra_driver.scheduling.cel import cost as costs
from dra_driver.scheduling.cel.diagnostics import FunctionError
from dra_driver.scheduling.cel.functions import glob, member, register
from dra_driver.scheduling.cel.lib_standard import format_double, to_string
from dra_driver.scheduling.cel.types import DYN, INT, STRING, list_of
from dra_driver.scheduling.cel.values import kind_of

# Go's unicode.IsSpace.
_GO_SPACE: Final = (
    "\t\n\v\f\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006"
    "\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000"
)
_LOWER: Final = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")
_UPPER: Final = str.maketrans("abcdefghijklmnopqrstuvwxyz", "ABCDEFGHIJKLMNOPQRSTUVWXYZ")


def _char_at(s: str, index: int) -> str:
    if index < 0 or index > len(s):
        raise FunctionError(f"index out of range: {index}")
    return s[index] if index < len(s) else ""


def _index_of(s: str, sub: str, offset: int = 0) -> int:
    if sub == "":
        return offset
    if offset < 0 or offset >= len(s):
        raise FunctionError(f"index out of range: {offset}")
    return s.find(sub, offset)


def _last_index_of(s: str, sub: str, offset: int | None = None) -> int:
    if offset is None:
        return s.rfind(sub)
    if sub == "":
        return offset
    if offset < 0 or offset >= len(s):
        raise FunctionError(f"index out of range: {offset}")
    return s.rfind(sub, 0, offset + len(sub))


def _lower_ascii(s: str) -> str:
    return s.lower() if s.isascii() else s.translate(_LOWER)


def _upper_ascii(s: str) -> str:
    return s.upper() if s.isascii() else s.translate(_UPPER)


def _replace(s: str, old: str, new: str, limit: int = -1) -> str:
    return s.replace(old, new, limit if limit >= 0 else -1)


def _split(s: str, sep: str, limit: int = -1) -> list[str]:
    if limit == 0:
        return []
    if sep == "":
        chars = list(s)
        if 0 < limit < len(chars):
            return [*chars[: limit - 1], "".join(chars[limit - 1 :])]
        return chars
    return s.split(sep, limit - 1 if limit > 0 else -1)


def _substring(s: str, start: int, end: int | None = None) -> str:
    if end is None:
        if start < 0 or start > len(s):
            raise FunctionError(f"index out of range: {start}")
        return s[start:]
    if start > end:
        raise FunctionError(f"invalid substring range. start: {start}, end: {end}")
    if start < 0 or start > len(s):
        raise FunctionError(f"index out of range: {start}")
    if end < 0 or end > len(s):
        raise FunctionError(f"index out of range: {end}")
    return s[start:end]


def _trim(s: str) -> str:
    return s.strip(_GO_SPACE)


def _join(items: list[Any], sep: str = "") -> str:
    for item in items:
        if not isinstance(item, str):
            raise FunctionError(f"join: invalid input: {item}")
    return sep.join(items)


def _reverse(s: str) -> str:
    return s[::-1]


_QUOTE_ESCAPES: Final = {
    "\a": "\\a",
    "\b": "\\b",
    "\f": "\\f",
    "\n": "\\n",
    "\r": "\\r",
    "\t": "\\t",
    "\v": "\\v",
    "\\": "\\\\",
    '"': '\\"',
}


def quote(s: str) -> str:
    """`strings.quote`: double-quoted, CEL escapes written out, invalid code points replaced."""
    out = []
    for ch in s:
        valid = ch if not 0xD800 <= ord(ch) <= 0xDFFF else "\ufffd"
        out.append(_QUOTE_ESCAPES.get(valid, valid))
    return '"' + "".join(out) + '"'


# -- format ------------------------------------------------------------------------


def _format(template: str, args: list[Any]) -> str:
    out: list[str] = []
    i = 0
    arg_index = 0
    n = len(template)
    while i < n:
        ch = template[i]
        if ch != "%":
            out.append(ch)
            i += 1
            continue
        i += 1
        if i >= n:
            raise FunctionError("unexpected end of string")
        if template[i] == "%":
            out.append("%")
            i += 1
            continue
        precision: int | None = None
        if template[i] == ".":
            j = i + 1
            while j < n and template[j].isdigit():
                j += 1
            if j == i + 1:
                raise FunctionError("unable to find end of precision specifier")
            precision = int(template[i + 1 : j])
            i = j
        if i >= n:
            raise FunctionError("unexpected end of string")
        verb = template[i]
        i += 1
        if arg_index >= len(args):
            raise FunctionError(f"index {arg_index} out of range")
        out.append(_format_clause(verb, precision, args[arg_index]))
        arg_index += 1
    return "".join(out)


def _format_clause(verb: str, precision: int | None, arg: Any) -> str:
    kind = kind_of(arg)
    if verb == "s":
        return format_string(arg)
    if verb == "d":
        if kind not in ("int", "uint"):
            raise FunctionError(f"decimal clause can only be used on integers, was given {kind}")
        return str(int(arg))
    if verb in ("f", "e"):
        value = _as_double(arg, kind)
        digits = 6 if precision is None else precision
        if math.isnan(value):
            return "NaN"
        if math.isinf(value):
            return "Infinity" if value > 0 else "-Infinity"
        return f"{value:.{digits}{verb}}"
    if verb == "b":
        if kind == "bool":
            return "1" if arg else "0"
        if kind in ("int", "uint"):
            return format(int(arg), "b")
        raise FunctionError(f"only integers and bools can be formatted as binary, was given {kind}")
    if verb in ("x", "X", "o"):
        if verb == "o" and kind not in ("int", "uint"):
            raise FunctionError(f"octal clause can only be used on integers, was given {kind}")
        if kind in ("int", "uint"):
            text = format(int(arg), "o" if verb == "o" else "x")
        elif kind in ("string", "bytes"):
            data = arg.encode("utf-8") if isinstance(arg, str) else arg
            text = data.hex()
        else:
            raise FunctionError(
                "only integers, byte buffers, and strings can be formatted as hex, "
                f"was given {kind}"
            )
        return text.upper() if verb == "X" else text
    raise FunctionError(
        f'could not parse formatting clause: unrecognized formatting clause "{verb}"'
    )


def _as_double(arg: Any, kind: str) -> float:
    if kind in ("double", "int", "uint"):
        return float(arg)
    if kind == "string" and arg in ("NaN", "Infinity", "-Infinity"):
        return float(arg.replace("Infinity", "inf"))
    raise FunctionError(f"fixed-point clause can only be used on doubles, was given {kind}")


def format_string(arg: Any) -> str:
    """How `%s` prints a value (cel-go's `FormatString`)."""
    kind = kind_of(arg)
    if kind == "list":
        return "[" + ", ".join(_format_member(item) for item in arg) + "]"
    if kind == "map":
        pairs = sorted((_format_member(k), _format_member(v)) for k, v in arg.items())
        return "{" + ", ".join(f"{k}:{v}" for k, v in pairs) + "}"
    if kind == "null_type":
        return "null"
    if kind == "double":
        return format_double(arg)
    try:
        return to_string(arg)
    except FunctionError as exc:
        raise FunctionError(
            "string clause can only be used on strings, bools, bytes, ints, doubles, maps, lists, "
            f"types, durations, and timestamps, was given {kind}"
        ) from exc


def _format_member(value: Any) -> str:
    kind = kind_of(value)
    if kind == "string":
        return quote(value)
    if kind == "bytes":
        return "b" + quote(value.decode("utf-8", errors="replace"))
    if kind == "double":
        if math.isnan(value) or math.isinf(value):
            return quote(format_double(value))
        return f"{value:.6f}"
    if kind == "google.protobuf.Timestamp":
        return f"timestamp({quote(str(value))})"
    if kind == "google.protobuf.Duration":
        return f"duration({quote(str(value))})"
    if kind == "type":
        return f"type({value.name})"
    return format_string(value)


# -- registration ------------------------------------------------------------------


def _traverse_first(args: Sequence[Any], _result: Any) -> int:
    return costs.string_traversal(args[0])


def _traverse_first_twice(args: Sequence[Any], _result: Any) -> int:
    return costs.traversal(2 * costs.size_of(args[0]))


def _join_cost(_args: Sequence[Any], result: Any) -> int:
    return costs.traversal(2 * costs.size_of(result))


def _index_cost(args: Sequence[Any], _result: Any) -> int:
    return costs.data_traversal(args[0])


LIST_STRING = list_of(STRING)

register("charAt", member("string_char_at_int", (STRING, INT), STRING, _char_at))
register(
    "indexOf",
    member("string_index_of_string", (STRING, STRING), INT, _index_of, _index_cost),
    member("string_index_of_string_int", (STRING, STRING, INT), INT, _index_of, _index_cost),
)
register(
    "lastIndexOf",
    member("string_last_index_of_string", (STRING, STRING), INT, _last_index_of, _index_cost),
    member(
        "string_last_index_of_string_int", (STRING, STRING, INT), INT, _last_index_of, _index_cost
    ),
)
register(
    "lowerAscii", member("string_lower_ascii", (STRING,), STRING, _lower_ascii, _traverse_first)
)
register(
    "upperAscii", member("string_upper_ascii", (STRING,), STRING, _upper_ascii, _traverse_first)
)
register(
    "replace",
    member(
        "string_replace_string_string",
        (STRING, STRING, STRING),
        STRING,
        _replace,
        _traverse_first_twice,
    ),
    member(
        "string_replace_string_string_int",
        (STRING, STRING, STRING, INT),
        STRING,
        _replace,
        _traverse_first_twice,
    ),
)
register(
    "split",
    member("string_split_string", (STRING, STRING), LIST_STRING, _split, _traverse_first_twice),
    member(
        "string_split_string_int", (STRING, STRING, INT), LIST_STRING, _split, _traverse_first_twice
    ),
)
register(
    "substring",
    member("string_substring_int", (STRING, INT), STRING, _substring, _traverse_first),
    member("string_substring_int_int", (STRING, INT, INT), STRING, _substring, _traverse_first),
)
register("trim", member("string_trim", (STRING,), STRING, _trim, _traverse_first))
register(
    "join",
    member("list_join", (LIST_STRING,), STRING, _join, _join_cost),
    member("list_join_string", (LIST_STRING, STRING), STRING, _join, _join_cost),
)
register("format", member("string_format", (STRING, list_of(DYN)), STRING, _format))
register("strings.quote", glob("strings_quote", (STRING,), STRING, quote))
register("reverse", member("string_reverse", (STRING,), STRING, _reverse))
