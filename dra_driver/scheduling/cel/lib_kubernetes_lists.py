"""Kubernetes' list CEL library (k8s.io/apiserver/pkg/cel/library/lists.go).

`isSorted`, `sum`, `min`, `max` over lists of comparable (or summable)
element types, and `indexOf`/`lastIndexOf` with CEL equality. Each costs one
traversal of the list, as upstream charges.

Also `includes` (Kubernetes 1.36+, DRAListTypeAttributes; k8s lists library
version 1 in 1.37): `x.includes(v)` is true when the list `x` has an element
equal to `v`, or when the scalar `x` equals `v`, so one selector works on
scalar and list attributes alike. As in DRA's own declaration
(dynamic-resource-allocation/cel/compile.go, `dra_includes_dyn_dyn`), a list
longer than ResourceSliceMaxAttributeValuesPerDevice (48) is a run-time error.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

from celpy.celtypes import DurationType

from dra_driver.scheduling.cel import cost as costs
from dra_driver.scheduling.cel.diagnostics import FunctionError
from dra_driver.scheduling.cel.functions import member, register
from dra_driver.scheduling.cel.lib_standard import LIST_A, checked_int, checked_uint
from dra_driver.scheduling.cel.types import (
    BOOL,
    BYTES,
    DOUBLE,
    DURATION,
    DYN,
    INT,
    PARAM_A,
    STRING,
    TIMESTAMP,
    UINT,
    CelType,
    list_of,
)
from dra_driver.scheduling.cel.values import Uint, cel_equal, kind_of

_COMPARABLE: Final[tuple[CelType, ...]] = (
    INT,
    UINT,
    DOUBLE,
    BOOL,
    DURATION,
    TIMESTAMP,
    STRING,
    BYTES,
)
_SUMMABLE: Final[tuple[CelType, ...]] = (INT, UINT, DOUBLE, DURATION)
_COMPARABLE_KINDS: Final = frozenset(t.kind for t in _COMPARABLE)
_NUMERIC: Final = frozenset({"int", "uint", "double"})


def _comparable(value: Any) -> str:
    kind = kind_of(value)
    if kind not in _COMPARABLE_KINDS:
        raise FunctionError(f"no such overload: {kind} is not comparable")
    return kind


def _order(a: Any, b: Any) -> int:
    ka, kb = _comparable(a), _comparable(b)
    if ka != kb and not (ka in _NUMERIC and kb in _NUMERIC):
        raise FunctionError(f"no such overload: cannot compare {ka} and {kb}")
    if a < b:
        return -1
    return 1 if a > b else 0


def _is_sorted(items: list[Any]) -> bool:
    for i in range(1, len(items)):
        if _order(items[i - 1], items[i]) == 1:
            return False
    if len(items) == 1:
        _comparable(items[0])
    return True


def _sum_of(zero: Any) -> Any:
    def total(items: list[Any]) -> Any:
        result = zero
        kind = kind_of(zero)
        for item in items:
            if kind_of(item) != kind:
                raise FunctionError(f"no such overload: sum of {kind} and {kind_of(item)}")
            result = result + item
        if kind == "int":
            return checked_int(result)
        if kind == "uint":
            return checked_uint(result)
        return result

    return total


def _extreme(name: str, prefer: int) -> Any:
    def pick(items: list[Any]) -> Any:
        if not items:
            raise FunctionError(f"{name} called on empty list")
        best = items[0]
        _comparable(best)
        for item in items[1:]:
            if _order(best, item) == prefer:
                best = item
        return best

    return pick


def _list_index_of(items: list[Any], item: Any) -> int:
    for i, value in enumerate(items):
        if cel_equal(value, item):
            return i
    return -1


def _list_last_index_of(items: list[Any], item: Any) -> int:
    for i in range(len(items) - 1, -1, -1):
        if cel_equal(items[i], item):
            return i
    return -1


# k8s.io/api/resource/v1 ResourceSliceMaxAttributeValuesPerDevice
MAX_ATTRIBUTE_VALUES_PER_DEVICE: Final = 48


def includes(target: Any, value: Any) -> bool:
    if isinstance(target, list):
        for i, item in enumerate(target):
            if i >= MAX_ATTRIBUTE_VALUES_PER_DEVICE:
                raise FunctionError(
                    "'includes' function cannot be applied to lists longer than "
                    f"{MAX_ATTRIBUTE_VALUES_PER_DEVICE} values"
                )
            if cel_equal(item, value):
                return True
        return False
    return cel_equal(target, value)


def _traversal_cost(args: Sequence[Any], _result: Any) -> int:
    return costs.data_traversal(args[0])


def _register_lists() -> None:
    zeros: dict[str, Any] = {
        "int": 0,
        "uint": Uint(0),
        "double": 0.0,
        "google.protobuf.Duration": DurationType(0),
    }
    for t in _COMPARABLE:
        lt = list_of(t)
        name = t.kind.rsplit(".", 1)[-1].lower()
        register(
            "isSorted",
            member(f"list_{name}_is_sorted_bool", (lt,), BOOL, _is_sorted, _traversal_cost),
        )
        register(
            "max", member(f"list_{name}_max_{name}", (lt,), t, _extreme("max", -1), _traversal_cost)
        )
        register(
            "min", member(f"list_{name}_min_{name}", (lt,), t, _extreme("min", 1), _traversal_cost)
        )
    for t in _SUMMABLE:
        name = t.kind.rsplit(".", 1)[-1].lower()
        register(
            "sum",
            member(
                f"list_{name}_sum_{name}", (list_of(t),), t, _sum_of(zeros[t.kind]), _traversal_cost
            ),
        )
    register(
        "indexOf",
        member("list_a_index_of_int", (LIST_A, PARAM_A), INT, _list_index_of, _traversal_cost),
    )
    register(
        "lastIndexOf",
        member(
            "list_a_last_index_of_int", (LIST_A, PARAM_A), INT, _list_last_index_of, _traversal_cost
        ),
    )


_register_lists()
register("includes", member("dra_includes_dyn_dyn", (DYN, DYN), BOOL, includes, _traversal_cost))
