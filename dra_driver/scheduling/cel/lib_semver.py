"""Kubernetes' semver CEL library (k8s.io/apiserver/pkg/cel/library/semverlib.go, v1).

`semver(s[, normalize])`, `isSemver(s[, normalize])`, `major()`, `minor()`,
`patch()`, `compareTo()`, `isGreaterThan()`, `isLessThan()` on
`kubernetes.Semver` values (version attributes are of that type too).
Equality of two semvers ignores build metadata, as blang/semver's does.
"""

from __future__ import annotations

from dra_driver.scheduling.cel.diagnostics import FunctionError
from dra_driver.scheduling.cel.functions import glob, member, register
from dra_driver.scheduling.cel.lib_standard import checked_int
from dra_driver.scheduling.cel.semver import Semver, SemverError, normalize_and_parse, parse_semver
from dra_driver.scheduling.cel.types import BOOL, INT, SEMVER, STRING


def _semver(text: str, normalize: bool = False) -> Semver:
    try:
        return normalize_and_parse(text) if normalize else parse_semver(text)
    except SemverError as exc:
        raise FunctionError(str(exc)) from exc


def _is_semver(text: str, normalize: bool = False) -> bool:
    try:
        _semver(text, normalize)
    except FunctionError:
        return False
    return True


def _major(v: Semver) -> int:
    return checked_int(v.major)


def _minor(v: Semver) -> int:
    return checked_int(v.minor)


def _patch(v: Semver) -> int:
    return checked_int(v.patch)


def _semver_compare(a: Semver, b: Semver) -> int:
    return a.compare(b)


def _semver_greater(a: Semver, b: Semver) -> bool:
    return a.compare(b) == 1


def _semver_less(a: Semver, b: Semver) -> bool:
    return a.compare(b) == -1


register(
    "semver",
    glob("string_to_semver", (STRING,), SEMVER, _semver),
    glob("string_bool_to_semver", (STRING, BOOL), SEMVER, _semver),
)
register(
    "isSemver",
    glob("is_semver_string", (STRING,), BOOL, _is_semver),
    glob("is_semver_string_bool", (STRING, BOOL), BOOL, _is_semver),
)
register("major", member("semver_major", (SEMVER,), INT, _major))
register("minor", member("semver_minor", (SEMVER,), INT, _minor))
register("patch", member("semver_patch", (SEMVER,), INT, _patch))
register("compareTo", member("semver_compare_to", (SEMVER, SEMVER), INT, _semver_compare))
register("isGreaterThan", member("semver_is_greater_than", (SEMVER, SEMVER), BOOL, _semver_greater))
register("isLessThan", member("semver_is_less_than", (SEMVER, SEMVER), BOOL, _semver_less))
