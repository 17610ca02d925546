"""Saying in words what a CEL device selector asks for.

"no device has productName matching '^.*b200.*$' (8 devices have 'NVIDIA H100
80GB HBM3')" helps more than "selector #0 is false". To get there this module
splits a selector into its top-level `&&` parts (so the part no device meets
can be named on its own), recognises the common shapes of a part (regex
match, equality, quantity and semver comparison, prefix/suffix/contains) and
finds which attributes and capacities a part reads, so the values the devices
actually have can be shown next to it. Anything it does not recognise is
quoted as written.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

_QUOTED: Final = r"""(?:'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*")"""
_IDENT: Final = r"[A-Za-z_][A-Za-z0-9_]*"
_REF: Final = (
    rf"device\s*\.\s*(?P<kind>attributes|capacity)\s*\[\s*(?P<domain>{_QUOTED})\s*\]\s*"
    rf"(?:\.\s*\??\s*(?P<ident>{_IDENT})|\[\s*\??\s*(?P<key>{_QUOTED})\s*\])"
)
REF_RE: Final = re.compile(_REF)
_CASE: Final = r"(?:\s*\.\s*(?:lowerAscii|upperAscii)\s*\(\s*\))?"
_LITERAL: Final = rf"(?:{_QUOTED}|-?\d+(?:\.\d+)?|true|false)"
# `.?name.orValue(default)` / `[?key].orValue(default)`: an optional lookup with a default.
_OR_VALUE: Final = rf"(?:\s*\.\s*orValue\s*\(\s*{_LITERAL}\s*\))?"

_DRIVER_RE: Final = re.compile(rf"^device\s*\.\s*driver\s*(?P<op>==|!=)\s*(?P<arg>{_QUOTED})$")
DRIVER_REFERENCE_RE: Final = re.compile(r"device\s*\.\s*driver\b")

_PATTERNS: Final = (
    (
        re.compile(rf"^{_REF}{_OR_VALUE}{_CASE}\s*\.\s*matches\s*\(\s*(?P<arg>{_QUOTED})\s*\)$"),
        "matching {arg}",
    ),
    (
        re.compile(rf"^{_REF}{_OR_VALUE}{_CASE}\s*\.\s*startsWith\s*\(\s*(?P<arg>{_QUOTED})\s*\)$"),
        "starting with {arg}",
    ),
    (
        re.compile(rf"^{_REF}{_OR_VALUE}{_CASE}\s*\.\s*endsWith\s*\(\s*(?P<arg>{_QUOTED})\s*\)$"),
        "ending with {arg}",
    ),
    (
        re.compile(rf"^{_REF}{_OR_VALUE}{_CASE}\s*\.\s*contains\s*\(\s*(?P<arg>{_QUOTED})\s*\)$"),
        "containing {arg}",
    ),
    (
        re.compile(rf"^{_REF}{_OR_VALUE}\s*(?P<op>==|!=|>=|<=|>|<)\s*(?P<arg>{_LITERAL})$"),
        "{op} {arg}",
    ),
    (
        re.compile(
            rf"^{_REF}{_OR_VALUE}\s*\.\s*compareTo\s*\(\s*(?:quantity|semver)\s*\(\s*(?P<arg>{_QUOTED})\s*\)\s*\)"
            rf"\s*(?P<op>==|!=|>=|<=|>|<)\s*0$"
        ),
        "{op} {bare}",
    ),
    (
        re.compile(
            rf"^{_REF}{_OR_VALUE}\s*\.\s*isGreaterThan\s*\(\s*(?:quantity|semver)\s*\(\s*(?P<arg>{_QUOTED})\s*\)\s*\)$"
        ),
        "> {bare}",
    ),
    (
        re.compile(
            rf"^{_REF}{_OR_VALUE}\s*\.\s*isLessThan\s*\(\s*(?:quantity|semver)\s*\(\s*(?P<arg>{_QUOTED})\s*\)\s*\)$"
        ),
        "< {bare}",
    ),
)


@dataclass(frozen=True)
class Reference:
    """An attribute or capacity a selector reads: kind, domain and identifier."""

    kind: str  # "attributes", "capacity" or "driver"
    domain: str
    name: str

    def lookup(self, device: Any, driver: str) -> str | None:
        """The value `device` (with `.attributes`/`.capacity` API maps) has, as text."""
        if self.kind == "driver":
            return f"'{driver}'"
        table: Mapping[str, Mapping[str, Any]] = getattr(device, self.kind)
        entry = table.get(f"{self.domain}/{self.name}")
        if entry is None and self.domain == driver:
            entry = table.get(self.name)
        if entry is None:
            return None
        if self.kind == "capacity":
            return str(entry.get("value"))
        if "string" in entry:
            return f"'{entry['string']}'"
        if "bool" in entry:
            return "true" if entry["bool"] else "false"
        for member in ("int", "version"):
            if member in entry:
                return str(entry[member])
        return None


def _unquote(text: str) -> str:
    return text[1:-1]


def references(expression: str) -> list[Reference]:
    """The attributes and capacities an expression reads, in order, without repeats."""
    found: list[Reference] = []
    if DRIVER_REFERENCE_RE.search(expression):
        found.append(Reference("driver", "", "driver"))
    for match in REF_RE.finditer(expression):
        name = match.group("ident") or _unquote(match.group("key"))
        ref = Reference(match.group("kind"), _unquote(match.group("domain")), name)
        if ref not in found:
            found.append(ref)
    return found


def conjuncts(expression: str) -> list[str]:
    """The top-level `&&` parts of an expression, outer parentheses removed.

    Quotes and brackets are respected; an expression that is not a plain
    conjunction comes back as the only part.
    """
    text = _strip_parens(expression.strip())
    parts: list[str] = []
    depth = 0
    quote = ""
    start = 0
    index = 0
    while index < len(text):
        char = text[index]
        if quote:
            if char == "\\":
                index += 2
                continue
            if char == quote:
                quote = ""
        elif char in "'\"":
            quote = char
        elif char in "([{":
            depth += 1
        elif char in ")]}":
            depth -= 1
        elif depth == 0 and (char == "?" or text.startswith("||", index)):
            return [text]
        elif text.startswith("&&", index) and depth == 0:
            parts.append(text[start:index].strip())
            start = index + 2
            index += 1
        index += 1
    parts.append(text[start:].strip())
    if len(parts) == 1:
        return [text]
    return [piece for part in parts for piece in conjuncts(part)]


def _strip_parens(text: str) -> str:
    while text.startswith("(") and text.endswith(")") and _balanced(text[1:-1]):
        text = text[1:-1].strip()
    return text


def _balanced(text: str) -> bool:
    depth = 0
    quote = ""
    skip = False
    for char in text:
        if skip:
            skip = False
            continue
        if quote:
            if char == "\\":
                skip = True
            elif char == quote:
                quote = ""
            continue
        if char in "'\"":
            quote = char
        elif char in "([{":
            depth += 1
        elif char in ")]}":
            depth -= 1
            if depth < 0:
                return False
    return depth == 0


def describe(expression: str) -> str:
    """A short phrase for what one part asks: "productName matching '^.*b200.*$'".

    Unrecognised expressions are quoted: "`<expression>`".
    """
    text = _strip_parens(" ".join(expression.split()))
    driver = _DRIVER_RE.match(text)
    if driver is not None:
        return f"driver {driver.group('op')} {_single_quoted(driver.group('arg'))}"
    for pattern, template in _PATTERNS:
        match = pattern.match(text)
        if match is None:
            continue
        name = match.group("ident") or _unquote(match.group("key"))
        groups = match.groupdict()
        arg = groups.get("arg") or ""
        phrase = template.format(
            arg=_single_quoted(arg),
            bare=_unquote(arg) if arg[:1] in "'\"" else arg,
            op=groups.get("op") or "",
        )
        return f"{name} {phrase}"
    return f"`{text}`"


def _single_quoted(literal: str) -> str:
    if literal[:1] == '"':
        return "'" + literal[1:-1] + "'"
    return literal
