"""cel-go's set extension (`ext.Sets`), enabled by Kubernetes since 1.29.

`sets.contains(a, b)` (every element of b is in a), `sets.equivalent(a, b)`
(each contains the other) and `sets.intersects(a, b)` (some element in
both), all with CEL's heterogeneous equality, so `sets.contains([1], [1.0])`
is true.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from dra_driver.scheduling.cel.functions import glob, register
from dra_driver.scheduling.cel.lib_standard import LIST_A
from dra_driver.scheduling.cel.types import BOOL
from dra_driver.scheduling.cel.values import cel_equal


def _contains_all(items: list[Any], wanted: list[Any]) -> bool:
    return all(any(cel_equal(x, w) for x in items) for w in wanted)


def _equivalent(a: list[Any], b: list[Any]) -> bool:
    return _contains_all(a, b) and _contains_all(b, a)


def _intersects(a: list[Any], b: list[Any]) -> bool:
    return any(any(cel_equal(x, y) for y in b) for x in a)


def _pairwise_cost(args: Sequence[Any], _result: Any) -> int:
    return max(1, len(args[0]) * len(args[1]))


register(
    "sets.contains",
    glob("sets_contains_list_list", (LIST_A, LIST_A), BOOL, _contains_all, _pairwise_cost),
)
register(
    "sets.equivalent",
    glob("sets_equivalent_list_list", (LIST_A, LIST_A), BOOL, _equivalent, _pairwise_cost),
)
register(
    "sets.intersects",
    glob("sets_intersects_list_list", (LIST_A, LIST_A), BOOL, _intersects, _pairwise_cost),
)
