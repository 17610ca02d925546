"""Kubernetes' regex CEL library (k8s.io/apiserver/pkg/cel/library/regex.go).

`<string>.find(re)` returns the leftmost-first match or "", and
`<string>.findAll(re[, limit])` the successive matches with Go's rules for
empty matches. Patterns are RE2, run by `regex.py`; `matches` itself is part
of standard CEL (`lib_standard`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from dra_driver.scheduling.cel import cost as costs
from dra_driver.scheduling.cel import regex
from dra_driver.scheduling.cel.functions import member, register
from dra_driver.scheduling.cel.types import INT, STRING, list_of


def _find(text: str, pattern: str) -> str:
    match = regex.compile_re2(pattern).search(text)
    return "" if match is None else text[match[0] : match[1]]


def _find_all(text: str, pattern: str, limit: int = -1) -> list[str]:
    return regex.compile_re2(pattern).find_all(text, int(limit))


def _regex_cost(args: Sequence[Any], _result: Any) -> int:
    return costs.regex_cost(args[0], args[1])


register("find", member("string_find_string", (STRING, STRING), STRING, _find, _regex_cost))
register(
    "findAll",
    member("string_find_all_string", (STRING, STRING), list_of(STRING), _find_all, _regex_cost),
    member(
        "string_find_all_string_int", (STRING, STRING, INT), list_of(STRING), _find_all, _regex_cost
    ),
)
