"""Kubernetes' quantity CEL library (k8s.io/apiserver/pkg/cel/library/quantity.go).

`quantity(s)`, `isQuantity(s)`, `sign`, `compareTo`, `isGreaterThan`,
`isLessThan`, `add`/`sub` (a quantity or an int), `asInteger` (an error
unless the value is a whole int64), `isInteger`, `asApproximateFloat`, with
upstream's error texts and costs. Capacities are of this type. `sign` is
accepted in receiver style as well as the global style upstream declares,
since both appear in its documentation.
"""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction
from typing import Any

from dra_driver.errors import QuantityError
from dra_driver.kube.quantity import Quantity
from dra_driver.scheduling.cel import cost as costs
from dra_driver.scheduling.cel.diagnostics import FunctionError
from dra_driver.scheduling.cel.functions import glob, member, register
from dra_driver.scheduling.cel.quantity import cel_quantity
from dra_driver.scheduling.cel.types import BOOL, DOUBLE, INT, QUANTITY, STRING


def _quantity(text: str) -> Quantity:
    try:
        return cel_quantity(text)
    except QuantityError as exc:
        raise FunctionError(str(exc)) from exc


def _is_quantity(text: str) -> bool:
    try:
        cel_quantity(text)
    except QuantityError:
        return False
    return True


def _string_traversal(args: Sequence[Any], _result: Any) -> int:
    return costs.string_traversal(args[0])


def _sign(q: Quantity) -> int:
    return q.sign()


def _compare(a: Quantity, b: Quantity) -> int:
    return a.compare(b)


def _greater(a: Quantity, b: Quantity) -> bool:
    return a.compare(b) == 1


def _less(a: Quantity, b: Quantity) -> bool:
    return a.compare(b) == -1


def _as_integer(q: Quantity) -> int:
    value = q.as_int64()
    if value is None:
        raise FunctionError("cannot convert value to integer")
    return value


def _is_integer(q: Quantity) -> bool:
    return q.as_int64() is not None


def _as_float(q: Quantity) -> float:
    return q.as_float()


def _operand(value: Any) -> Fraction:
    """A quantity's value, or an int as `NewQuantity(i, DecimalExponent)` would hold it."""
    return value.value if isinstance(value, Quantity) else Fraction(value)


def _add(a: Quantity, b: Any) -> Quantity:
    return Quantity(a.value + _operand(b))


def _sub(a: Quantity, b: Any) -> Quantity:
    return Quantity(a.value - _operand(b))


register(
    "quantity",
    glob("string_to_quantity", (STRING,), QUANTITY, _quantity, _string_traversal),
)
register(
    "isQuantity",
    glob("is_quantity_string", (STRING,), BOOL, _is_quantity, _string_traversal),
)
register(
    "sign",
    glob("quantity_sign", (QUANTITY,), INT, _sign),
    member("quantity_sign_member", (QUANTITY,), INT, _sign),
)
register("compareTo", member("quantity_compare_to", (QUANTITY, QUANTITY), INT, _compare))
register("isGreaterThan", member("quantity_is_greater_than", (QUANTITY, QUANTITY), BOOL, _greater))
register("isLessThan", member("quantity_is_less_than", (QUANTITY, QUANTITY), BOOL, _less))
register("asInteger", member("quantity_get_int", (QUANTITY,), INT, _as_integer))
register("isInteger", member("quantity_is_integer", (QUANTITY,), BOOL, _is_integer))
register("asApproximateFloat", member("quantity_get_float", (QUANTITY,), DOUBLE, _as_float))
register(
    "add",
    member("quantity_add", (QUANTITY, QUANTITY), QUANTITY, _add),
    member("quantity_add_int", (QUANTITY, INT), QUANTITY, _add),
)
register(
    "sub",
    member("quantity_sub", (QUANTITY, QUANTITY), QUANTITY, _sub),
    member("quantity_sub_int", (QUANTITY, INT), QUANTITY, _sub),
)
