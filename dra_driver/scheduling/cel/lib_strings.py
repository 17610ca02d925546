"""cel-go's string extension library (`ext.Strings`), which Kubernetes enables at v2.

`charAt`, `indexOf`, `lastIndexOf`, `lowerAscii`, `upperAscii`, `replace`,
`split`, `substring`, `trim`, `join`, `format` (`string_format.py`),
`strings.quote`, plus `reverse` (v3). Indices count Unicode code points, as Go's rune slices do;
`trim` strips what Go's `unicode.IsSpace` calls space; `split` and `replace`
follow Go's `strings.Split`/`strings.Replace`, including the empty-separator
cases. Costs are Kubernetes' (`library/cost.go`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

from dra_driver.scheduling.cel import cost as costs
from dra_driver.scheduling.cel.diagnostics import FunctionError
from dra_driver.scheduling.cel.functions import glob, member, register
from dra_driver.scheduling.cel.string_format import format_string
from dra_driver.scheduling.cel.types import DYN, INT, STRING, list_of

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
register(
    "format",
    member("string_format", (STRING, list_of(DYN)), STRING, format_string, _traverse_first),
)
register("strings.quote", glob("strings_quote", (STRING,), STRING, quote, _traverse_first))
register("reverse", member("string_reverse", (STRING,), STRING, _reverse))
