"""Decoding CEL string and bytes literals with cel-go's escape rules.

cel-python's decoder misses escapes cel-go accepts (`\\?`, `` \\` ``, `\\X4c`) and
no library exposes cel-go's `unescape`, so it is written here, after
cel-go's parser/unescape.go: the prefix says raw (`r`) and bytes (`b`); raw
literals keep every backslash; the others accept `\\a \\b \\f \\n \\r \\t \\v
\\\\ \\' \\" \\` \\?`, three octal digits, `\\x`/`\\X` with two hex digits and (in
strings only) `\\u` with four and `\\U` with eight. In a string an octal or hex
escape is a code point, in bytes a byte.
"""

from __future__ import annotations

from typing import Final

_SIMPLE: Final = {
    "a": "\a",
    "b": "\b",
    "f": "\f",
    "n": "\n",
    "r": "\r",
    "t": "\t",
    "v": "\v",
    "\\": "\\",
    "'": "'",
    '"': '"',
    "`": "`",
    "?": "?",
}
_HEX: Final = frozenset("0123456789abcdefABCDEF")


class LiteralError(ValueError):
    """The literal uses an escape CEL does not define."""


def decode(token: str) -> str | bytes:
    """The value of a string or bytes literal token (quotes and prefix included)."""
    i = 0
    raw = is_bytes = False
    while token[i] not in "'\"":
        raw = raw or token[i] in "rR"
        is_bytes = is_bytes or token[i] in "bB"
        i += 1
    quote = 3 if token[i : i + 3] in ('"""', "'''") else 1
    body = token[i + quote : len(token) - quote]
    if raw:
        return body.encode("utf-8") if is_bytes else body
    return _unescape(body, is_bytes)


def _unescape(body: str, is_bytes: bool) -> str | bytes:
    out: list[int] = []  # code points for strings, bytes for bytes
    n = len(body)
    i = 0
    while i < n:
        c = body[i]
        if c != "\\":
            if is_bytes:
                out.extend(c.encode("utf-8"))
            else:
                out.append(ord(c))
            i += 1
            continue
        if i + 1 >= n:
            raise LiteralError("unterminated escape sequence")
        e = body[i + 1]
        if e in _SIMPLE:
            out.append(ord(_SIMPLE[e]))
            i += 2
        elif e in "01234567":
            digits = body[i + 1 : i + 4]
            if len(digits) != 3 or any(d not in "01234567" for d in digits) or digits[0] > "3":
                raise LiteralError("invalid octal escape")
            out.append(int(digits, 8))
            i += 4
        elif e in "xXuU":
            width = {"x": 2, "X": 2, "u": 4, "U": 8}[e]
            if e in "uU" and is_bytes:
                raise LiteralError("unicode escape sequence not allowed in bytes literal")
            digits = body[i + 2 : i + 2 + width]
            if len(digits) != width or any(d not in _HEX for d in digits):
                raise LiteralError("invalid hex escape")
            value = int(digits, 16)
            if e in "uU" and (0xD800 <= value <= 0xDFFF or value > 0x10FFFF):
                raise LiteralError("invalid unicode code point")
            out.append(value)
            i += 2 + width
        else:
            raise LiteralError(f"invalid escape sequence \\{e}")
    if is_bytes:
        return bytes(out)
    return "".join(map(chr, out))
