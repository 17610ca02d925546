"""`string.format()` as Kubernetes runs it: cel-go's strings library below version 4.

Kubernetes enables `ext.Strings(ext.StringsVersion(2))`, whose `format` is
cel-go's original formatter (ext/formatting.go, not the version 4 one that
cel-spec's current conformance cases describe), with the default `en_US`
locale and its compile-time check of constant calls. This module is that
formatter, clause by clause:

* `%s`: strings, bools, bytes, ints, doubles (Go's shortest `%g`), types,
  durations, timestamps, `null`; lists and maps as CEL literals, where
  doubles print as `%.6f` (`"NaN"`, `"+Inf"` quoted), strings and bytes
  Go-quoted, durations/timestamps as `duration("…")`/`timestamp("…")`,
  map entries sorted by their printed key;
* `%d`, `%b`, `%o`, `%x`, `%X`: Go's `fmt` on ints and uints (`%b` takes
  bools, `%x` strings and bytes as hex of their bytes); `%d` on a double is
  an error, non-finite or not;
* `%f` and `%e`: doubles, or the strings `"NaN"`, `"Infinity"`,
  `"-Infinity"`, printed by golang.org/x/text's number formatter for en_US:
  `%f` groups thousands (`1,234.500000`) and prints infinities as `∞`;
  `%e` prints `2.718280\u202f\u00d7\u202f10\u2070\u2070` and, because cel-go builds the Go verb as
  `%<precision>e` (a width, not a precision), always six fraction digits,
  padding `NaN` and `∞` to six characters;
* errors are cel-go's (`error during formatting: decimal clause can only be
  used on integers, was given double`).

`check_call` is the strings library's AST validator: a constant format
string with a list literal is checked at compile time (clause syntax,
argument count, argument types).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from typing import Any, Final

from dra_driver.scheduling.cel.ast import ListLit, MapLit, Node
from dra_driver.scheduling.cel.diagnostics import FunctionError
from dra_driver.scheduling.cel.gostrings import go_quote
from dra_driver.scheduling.cel.types import CelType
from dra_driver.scheduling.cel.values import kind_of

DEFAULT_PRECISION: Final = 6

_STRING_KINDS: Final = frozenset(
    {
        "list",
        "map",
        "int",
        "uint",
        "double",
        "bool",
        "string",
        "google.protobuf.Timestamp",
        "bytes",
        "google.protobuf.Duration",
        "type",
        "null_type",
    }
)
_SUPERSCRIPT: Final = str.maketrans("0123456789", "⁰¹²³⁴⁵⁶⁷⁸⁹")
_NON_FINITE_STRINGS: Final = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


class FormatError(Exception):
    """A clause failed; `node` is the argument to blame at compile time (None: the call)."""

    def __init__(self, message: str, node: Node | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.node = node


def _clause_error(message: str, kind: str, node: Node | None = None) -> FormatError:
    return FormatError(f"{message}, was given {kind}", node)


_DECIMAL: Final = "decimal clause can only be used on integers"
_FIXED: Final = "fixed-point clause can only be used on doubles"
_SCIENTIFIC: Final = "scientific clause can only be used on doubles"
_BINARY: Final = "only integers and bools can be formatted as binary"
_HEX: Final = "only integers, byte buffers, and strings can be formatted as hex"
_OCTAL: Final = "octal clause can only be used on integers"
_STRING: Final = (
    "string clause can only be used on strings, bools, bytes, ints, doubles, maps, lists, "
    "types, durations, and timestamps"
)

# -- the template ------------------------------------------------------------------


class _Clause:
    """One `%[.precision]verb` of a template."""

    __slots__ = ("precision", "verb")

    def __init__(self, verb: str, precision: int | None) -> None:
        self.verb = verb
        self.precision = precision


def _parse_clause(rest: bytes) -> tuple[int, _Clause]:
    """The clause at the start of `rest` (after its `%`): bytes read and the clause."""
    i = 0
    precision: int | None = None
    if rest[0] == 0x2E:  # '.'
        i = 1
        while True:
            if i >= len(rest):
                raise FormatError(
                    "could not parse formatting clause: error while parsing precision: "
                    "could not find end of precision specifier"
                )
            if not 0x30 <= rest[i] <= 0x39:
                break
            i += 1
        digits = rest[1:i].decode()
        if not digits or len(digits) > 18:
            reason = "invalid syntax" if not digits else "value out of range"
            raise FormatError(
                "could not parse formatting clause: error while parsing precision: "
                "error while converting precision to integer: strconv.Atoi: parsing "
                f'"{digits}": {reason}'
            )
        precision = int(digits)
    verb = chr(rest[i])
    if verb not in "sdfebxXo":
        raise FormatError(
            f'could not parse formatting clause: unrecognized formatting clause "{verb}"'
        )
    return i + 1, _Clause(verb, precision)


def _walk(template: str, count: int, compile_time: bool) -> Iterator[bytes | _Clause]:
    """The template's literal bytes and clauses, in order; raises FormatError on bad syntax.

    Lazy, so that an error in a clause surfaces only after the clauses before
    it were formatted (or checked), as in cel-go. `count` is the number of
    arguments; a clause past them is an error. At run time cel-go fetches the
    argument before it looks for the verb, so `"abc%".format([])` reports
    the index; the compile-time check looks at the verb first.
    """
    data = template.encode("utf-8", "surrogatepass")
    literal = bytearray()
    i = 0
    index = 0
    while i < len(data):
        if data[i] != 0x25:
            literal.append(data[i])
            i += 1
            continue
        if i + 1 < len(data) and data[i + 1] == 0x25:
            literal.append(0x25)
            i += 2
            continue
        if not compile_time and index >= count:
            raise FormatError(f"index {index} out of range")
        if i + 1 >= len(data):
            raise FormatError("unexpected end of string")
        if index >= count:
            raise FormatError(f"index {index} out of range")
        read, clause = _parse_clause(data[i + 1 :])
        yield bytes(literal)
        literal = bytearray()
        yield clause
        i += 1 + read
        index += 1
    yield bytes(literal)


# -- run time ------------------------------------------------------------------------


def format_string(template: str, args: Sequence[Any]) -> str:
    """`template.format(args)`; raises FunctionError with cel-go's message."""
    out = bytearray()
    index = 0
    try:
        for piece in _walk(template, len(args), compile_time=False):
            if isinstance(piece, bytes):
                out += piece
                continue
            try:
                text = _format_clause(piece, args[index])
            except FormatError as exc:
                raise FormatError(f"error during formatting: {exc.message}") from None
            out += text.encode("utf-8", "surrogatepass")
            index += 1
    except FormatError as exc:
        raise FunctionError(exc.message) from None
    return out.decode("utf-8", "surrogatepass")


def _format_clause(clause: _Clause, arg: Any) -> str:
    verb = clause.verb
    if verb == "s":
        return format_value(arg)
    kind = kind_of(arg)
    if verb == "d":
        if kind not in ("int", "uint"):
            raise _clause_error(_DECIMAL, kind)
        return str(int(arg))
    if verb in "fe":
        value = _as_double(arg, kind, _FIXED if verb == "f" else _SCIENTIFIC)
        if verb == "f":
            precision = DEFAULT_PRECISION if clause.precision is None else clause.precision
            return fixed(value, precision)
        return scientific(value)
    if verb == "b":
        if kind == "bool":
            return "1" if arg else "0"
        if kind in ("int", "uint"):
            return format(int(arg), "b")
        raise _clause_error(_BINARY, kind)
    if verb in "xX":
        if kind in ("int", "uint"):
            text = format(int(arg), "x")
        elif kind == "string":
            text = arg.encode("utf-8", "surrogatepass").hex()
        elif kind == "bytes":
            text = arg.hex()
        else:
            raise _clause_error(_HEX, kind)
        return text.upper() if verb == "X" else text
    if kind not in ("int", "uint"):  # 'o'
        raise _clause_error(_OCTAL, kind)
    return format(int(arg), "o")


def _as_double(arg: Any, kind: str, message: str) -> float:
    if kind == "double":
        return float(arg)
    if kind == "string" and arg in _NON_FINITE_STRINGS:
        return _NON_FINITE_STRINGS[arg]
    raise _clause_error(message, kind)


def fixed(value: float, precision: int) -> str:
    """x/text's en_US `%.<precision>f`: thousands grouped, `∞` for infinities."""
    if math.isnan(value):
        return "NaN"
    sign = "-" if value < 0 else ""
    if math.isinf(value):
        return sign + "∞"
    digits = f"{abs(value):.{precision}f}"
    whole, point, fraction = digits.partition(".")
    groups: list[str] = []
    while len(whole) > 3:
        groups.insert(0, whole[-3:])
        whole = whole[:-3]
    groups.insert(0, whole)
    return sign + ",".join(groups) + point + fraction


def scientific(value: float) -> str:
    """x/text's en_US `%6e`: mantissa, `\u00d710`, superscript exponent; `NaN`/`∞` padded to 6."""
    if math.isnan(value):
        return "NaN".rjust(6)
    sign = "-" if value < 0 else ""
    if math.isinf(value):
        return (sign + "∞").rjust(6)
    mantissa, _, exponent = f"{abs(value):.{DEFAULT_PRECISION}e}".partition("e")
    power = int(exponent)
    superscript = ("⁻" if power < 0 else "") + f"{abs(power):02d}".translate(_SUPERSCRIPT)
    return f"{sign}{mantissa}\u202f\u00d7\u202f10{superscript}"


def format_value(arg: Any) -> str:
    """What `%s` prints for a value (cel-go's `FormatString`)."""
    kind = kind_of(arg)
    if kind == "list":
        return "[" + ", ".join(_member(item) for item in arg) + "]"
    if kind == "map":
        return _format_map(arg)
    if kind == "null_type":
        return "null"
    if kind not in _STRING_KINDS:
        raise _clause_error(_STRING, kind)
    return _to_string(arg)


def _to_string(arg: Any) -> str:
    """cel-go's conversion of a value to a string (`string(x)`)."""
    # Imported here: lib_standard registers functions and imports this module's users.
    from dra_driver.scheduling.cel.lib_standard import to_string

    try:
        return to_string(arg)
    except FunctionError as exc:
        raise FormatError(f"could not convert argument {go_quote(exc.message)} to string") from None


def _member(value: Any) -> str:
    """A list or map member as a CEL literal (cel-go's `clauseForType`, `quoteForCEL`)."""
    kind = kind_of(value)
    if kind in ("int", "uint"):
        return str(int(value))
    if kind in ("string", "bool", "null_type", "type"):
        text = format_value(value)
        return go_quote(text) if kind == "string" else text
    if kind == "bytes":
        return "b" + go_quote(_to_string(value))
    if kind == "google.protobuf.Timestamp":
        return f"timestamp({go_quote(str(value))})"
    if kind == "google.protobuf.Duration":
        return f"duration({go_quote(str(value))})"
    if kind == "list":
        return format_value(value)
    if kind == "map":
        return _format_map(value)
    if kind == "double":
        if math.isnan(value):
            return go_quote("NaN")
        if math.isinf(value):
            return go_quote("+Inf" if value > 0 else "-Inf")
        return f"{value:.6f}"
    raise FormatError(f"no formatting function for {kind}")


def _format_map(arg: Any) -> str:
    pairs = []
    for key, value in arg.items():
        kind = kind_of(key)
        if kind == "string":
            printed = go_quote(key)
        elif kind == "bool":
            printed = "true" if key else "false"
        elif kind in ("int", "uint"):
            printed = str(int(key))
        else:
            raise FormatError(f"no formatting function for map key of type {kind}")
        pairs.append((printed, _member(value)))
    pairs.sort(key=lambda pair: pair[0].encode("utf-8", "surrogatepass"))
    return "{" + ", ".join(f"{k}:{v}" for k, v in pairs) + "}"


# -- compile time ------------------------------------------------------------------------

_CHECKS: Final = {
    "d": (_DECIMAL, frozenset({"int", "uint"})),
    "f": (_FIXED, frozenset({"double", "string"})),
    "e": (_SCIENTIFIC, frozenset({"double", "string"})),
    "b": (_BINARY, frozenset({"int", "uint", "bool"})),
    "x": (_HEX, frozenset({"int", "uint", "string", "bytes"})),
    "X": (_HEX, frozenset({"int", "uint", "string", "bytes"})),
    "o": (_OCTAL, frozenset({"int", "uint"})),
}


def check_call(template: str, args: ListLit) -> FormatError | None:
    """The strings library's check of `"<constant>".format([<list literal>])`.

    Returns the error (with the argument node to blame, if any), or None.
    """
    elements = args.elements
    used = 0
    try:
        for piece in _walk(template, len(elements), compile_time=True):
            if isinstance(piece, bytes):
                continue
            error = _check_argument(piece.verb, elements[used])
            if error is not None:
                return FormatError(f"error during formatting: {error.message}", error.node)
            used += 1
    except FormatError as exc:
        return exc
    if len(elements) > used:
        return FormatError(
            f"too many arguments supplied to string.format (expected {used}, got {len(elements)})"
        )
    return None


def _static_kind(node: Node) -> str | None:
    """The argument's static kind, or None for dyn (accepted by every clause)."""
    t: CelType | None = node.type
    if t is None or t.is_dynamic:
        return None
    return t.kind


def _check_argument(verb: str, node: Node) -> FormatError | None:
    if verb == "s":
        return _check_string(node)
    message, allowed = _CHECKS[verb]
    kind = _static_kind(node)
    if kind is None or kind in allowed:
        return None
    return _clause_error(message, kind, node)


def _check_string(node: Node) -> FormatError | None:
    kind = _static_kind(node)
    if kind is not None and kind not in _STRING_KINDS:
        return _clause_error(_STRING, kind, node)
    if isinstance(node, ListLit):
        for element in node.elements:
            error = _check_string(element)
            if error is not None:
                return error
    elif isinstance(node, MapLit):
        for key, value in node.entries:
            error = _check_string(key) or _check_string(value)
            if error is not None:
                return error
    return None
