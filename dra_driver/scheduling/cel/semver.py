"""Semantic versions, parsed and ordered like github.com/blang/semver/v4.

Kubernetes gives `version` device attributes and `semver()` results the type
`kubernetes.Semver`, backed by blang/semver: strict `MAJOR.MINOR.PATCH` with
optional `-prerelease` and `+build` parts, no leading zeros, and the
semver.org precedence rules (build metadata ignored, a pre-release sorts
before its release, numeric identifiers before alphanumeric ones).
`normalize_and_parse` is the lenient form behind `semver(s, true)`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from dra_driver.memo import memoized

_DIGITS: Final = frozenset("0123456789")
_ALPHANUM: Final = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-")
_UINT64_MAX: Final = 2**64 - 1


class SemverError(ValueError):
    """The string is not a semantic version; the message is blang/semver's."""


@dataclass(frozen=True, slots=True, eq=False)
class Semver:
    """A parsed semantic version (the CEL type `kubernetes.Semver`)."""

    major: int
    minor: int
    patch: int
    pre: tuple[int | str, ...] = ()
    build: tuple[str, ...] = ()

    def compare(self, other: Semver) -> int:
        """-1, 0 or 1, by semver precedence (blang's `Version.Compare`)."""
        for a, b in (
            (self.major, other.major),
            (self.minor, other.minor),
            (self.patch, other.patch),
        ):
            if a != b:
                return 1 if a > b else -1
        if not self.pre and not other.pre:
            return 0
        if not self.pre:
            return 1
        if not other.pre:
            return -1
        for a_id, b_id in zip(self.pre, other.pre, strict=False):
            result = _compare_prerelease(a_id, b_id)
            if result:
                return result
        if len(self.pre) == len(other.pre):
            return 0
        return -1 if len(self.pre) < len(other.pre) else 1

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Semver) and self.compare(other) == 0

    def __hash__(self) -> int:
        return hash((self.major, self.minor, self.patch, self.pre))

    def __str__(self) -> str:
        text = f"{self.major}.{self.minor}.{self.patch}"
        if self.pre:
            text += "-" + ".".join(str(p) for p in self.pre)
        if self.build:
            text += "+" + ".".join(self.build)
        return text


def _compare_prerelease(a: int | str, b: int | str) -> int:
    a_num, b_num = isinstance(a, int), isinstance(b, int)
    if a_num and not b_num:
        return -1
    if b_num and not a_num:
        return 1
    if a == b:
        return 0
    return 1 if a > b else -1  # type: ignore[operator]  # same kind on both sides here


def _only(text: str, allowed: frozenset[str]) -> bool:
    return all(c in allowed for c in text)


def _number(text: str, what: str) -> int:
    if not _only(text, _DIGITS):
        raise SemverError(f"Invalid character(s) found in {what} number {text!r}")
    if len(text) > 1 and text[0] == "0":
        raise SemverError(f"{what.capitalize()} number must not contain leading zeroes {text!r}")
    if not text:
        raise SemverError(f'strconv.ParseUint: parsing "": invalid syntax ({what} number)')
    value = int(text)
    if value > _UINT64_MAX:
        raise SemverError(f"strconv.ParseUint: parsing {text!r}: value out of range")
    return value


@memoized(4096)
def parse_semver(text: str) -> Semver:
    """Parses `text` strictly, like blang/semver's `Parse`; raises SemverError."""
    if not text:
        raise SemverError("Version string empty")
    parts = text.split(".", 2)
    if len(parts) != 3:
        raise SemverError("No Major.Minor.Patch elements found")
    major = _number(parts[0], "major")
    minor = _number(parts[1], "minor")
    patch_text = parts[2]
    build: tuple[str, ...] = ()
    pre: tuple[int | str, ...] = ()
    plus = patch_text.find("+")
    if plus >= 0:
        build = tuple(patch_text[plus + 1 :].split("."))
        patch_text = patch_text[:plus]
    dash = patch_text.find("-")
    if dash >= 0:
        pre = tuple(_prerelease(p) for p in patch_text[dash + 1 :].split("."))
        patch_text = patch_text[:dash]
    patch = _number(patch_text, "patch")
    for item in build:
        if not item:
            raise SemverError("Build meta data is empty")
        if not _only(item, _ALPHANUM):
            raise SemverError(f"Invalid character(s) found in build meta data {item!r}")
    return Semver(major, minor, patch, pre, build)


def _prerelease(text: str) -> int | str:
    if not text:
        raise SemverError("Prerelease is empty")
    if _only(text, _DIGITS):
        if len(text) > 1 and text[0] == "0":
            raise SemverError(
                f"Numeric PreRelease version must not contain leading zeroes {text!r}"
            )
        return int(text)
    if _only(text, _ALPHANUM):
        return text
    raise SemverError(f"Invalid character(s) found in prerelease {text!r}")


def normalize_and_parse(text: str) -> Semver:
    """`semver(s, true)`: drops a leading "v", leading zeros, fills in missing minor/patch."""
    if text.startswith("v"):
        text = text[1:]
    parts = text.split(".", 2)
    for i, part in enumerate(parts):
        if len(part) > 1:
            stripped = part.lstrip("0")
            if not stripped or stripped[0] not in _DIGITS:
                stripped = "0" + stripped
            parts[i] = stripped
    if len(parts) < 3:
        if any(c in parts[-1] for c in "+-"):
            raise SemverError("short version cannot contain PreRelease/Build meta data")
        parts.extend("0" for _ in range(3 - len(parts)))
    return parse_semver(".".join(parts))
