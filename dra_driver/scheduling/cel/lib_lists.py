"""cel-go's list extension (`ext.Lists`, v3 in Kubernetes 1.34+), without the optional-typed parts.

`lists.range(n)`, `slice`, `flatten`, `distinct`, `reverse`, `sort`, and
`sortBy`, a macro the parser expands (as cel-go does) into
`cel.bind(@__sortBy_input__, l, @__sortBy_input__.@sortByAssociatedKeys(
@__sortBy_input__.map(e, key)))`. (`first`/`last` belong to the optional
library, `lib_optional.py`.)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

from dra_driver.scheduling.cel import cost as costs
from dra_driver.scheduling.cel.diagnostics import FunctionError
from dra_driver.scheduling.cel.functions import glob, member, register
from dra_driver.scheduling.cel.lib_standard import LIST_A
from dra_driver.scheduling.cel.parser import SORT_BY_KEYS
from dra_driver.scheduling.cel.types import DYN, INT, list_of
from dra_driver.scheduling.cel.values import cel_equal, kind_of

_SORTABLE: Final = frozenset(
    {
        "int",
        "uint",
        "double",
        "bool",
        "string",
        "bytes",
        "google.protobuf.Duration",
        "google.protobuf.Timestamp",
    }
)
_NUMERIC: Final = frozenset({"int", "uint", "double"})


def _range(n: int) -> list[int]:
    return list(range(n))


def _slice(items: list[Any], start: int, end: int) -> list[Any]:
    if start < 0 or end < 0:
        raise FunctionError(f"cannot slice({start}, {end}), negative indexes not supported")
    if start > end:
        raise FunctionError(
            f"cannot slice({start}, {end}), start index must be less than or equal to end index"
        )
    if end > len(items):
        raise FunctionError(f"cannot slice({start}, {end}), list is length {len(items)}")
    return items[start:end]


def _flatten(items: list[Any], depth: int = 1) -> list[Any]:
    if depth < 0:
        raise FunctionError("level must be non-negative")
    result: list[Any] = []
    for item in items:
        if isinstance(item, list) and depth > 0:
            result.extend(_flatten(item, depth - 1))
        else:
            result.append(item)
    return result


def _distinct(items: list[Any]) -> list[Any]:
    result: list[Any] = []
    for item in items:
        if not any(cel_equal(item, seen) for seen in result):
            result.append(item)
    return result


def _reverse(items: list[Any]) -> list[Any]:
    return items[::-1]


def _sort(items: list[Any]) -> list[Any]:
    kinds = {kind_of(item) for item in items}
    if not kinds <= _SORTABLE or (len(kinds) > 1 and not kinds <= _NUMERIC):
        raise FunctionError("list elements must have the same type")
    return sorted(items)


def _sort_by_keys(items: list[Any], keys: list[Any]) -> list[Any]:
    if len(items) != len(keys):
        raise FunctionError(
            "@sortByAssociatedKeys() expected a list of the same size as the associated keys "
            f"list, but got {len(items)} and {len(keys)} elements respectively."
        )
    _sort(keys)  # the same type checks as sort()
    order = sorted(range(len(keys)), key=lambda i: keys[i])
    return [items[i] for i in order]


def _list_size_cost(args: Sequence[Any], result: Any) -> int:
    return max(1, costs.size_of(args[0]), costs.size_of(result))


register("lists.range", glob("lists_range", (INT,), list_of(INT), _range, _list_size_cost))
register("slice", member("list_slice", (LIST_A, INT, INT), LIST_A, _slice, _list_size_cost))
register(
    "flatten",
    member("list_flatten", (list_of(DYN),), list_of(DYN), _flatten, _list_size_cost),
    member("list_flatten_int", (list_of(DYN), INT), list_of(DYN), _flatten, _list_size_cost),
)
register("distinct", member("list_distinct", (LIST_A,), LIST_A, _distinct, _list_size_cost))
register("reverse", member("list_reverse", (LIST_A,), LIST_A, _reverse, _list_size_cost))
register("sort", member("list_sort", (LIST_A,), LIST_A, _sort, _list_size_cost))
register(
    SORT_BY_KEYS,
    member(
        "list_sortByAssociatedKeys",
        (LIST_A, list_of(DYN)),
        LIST_A,
        _sort_by_keys,
        _list_size_cost,
    ),
)
