"""Go's `strconv.Quote`, which Go and Kubernetes error messages use to quote input.

The messages of the IP, CIDR and URL libraries (`ParseAddr("1.2.3"): ...`,
`parse "x y": ...`) and of `string.format`'s `%s` on lists quote strings with
Go's `%q`: printable runes as they are, `\\a \\b \\f \\n \\r \\t \\v` escaped,
other control characters as `\\xNN`, other unprintable runes as `\\uNNNN` /
`\\UNNNNNNNN`. Python's `repr` and `json.dumps` quote differently, so this is
written here; `str.isprintable` is Go's `unicode.IsPrint` (letters, marks,
numbers, punctuation, symbols and the ASCII space).
"""

from __future__ import annotations

from typing import Final

_ESCAPES: Final = {
    "\a": "\\a",
    "\b": "\\b",
    "\f": "\\f",
    "\n": "\\n",
    "\r": "\\r",
    "\t": "\\t",
    "\v": "\\v",
}


def go_quote(text: str) -> str:
    """`strconv.Quote(text)`: double-quoted with Go's escapes."""
    out = ['"']
    for ch in text:
        code = ord(ch)
        if ch in ('"', "\\"):
            out.append("\\" + ch)
        elif 0xD800 <= code <= 0xDFFF:
            # A lone surrogate is invalid UTF-8 to Go: each byte is escaped.
            out.extend(f"\\x{b:02x}" for b in ch.encode("utf-8", "surrogatepass"))
        elif ch.isprintable():
            out.append(ch)
        elif ch in _ESCAPES:
            out.append(_ESCAPES[ch])
        elif code < 0x20 or code == 0x7F:
            out.append(f"\\x{code:02x}")
        elif code < 0x10000:
            out.append(f"\\u{code:04x}")
        else:
            out.append(f"\\U{code:08x}")
    out.append('"')
    return "".join(out)
