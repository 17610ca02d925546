"""matchAttribute and distinctAttribute over list-typed values (KEP-5491): a scalar is a
one-element list, match is a non-empty common intersection, distinct is no shared value."""

from __future__ import annotations

from typing import Any

import pytest

from dra_driver.scheduling.allocator.constraints import DistinctAttribute, MatchAttribute
from dra_driver.scheduling.allocator.trace import ConstraintMismatch, DistinctViolation

NUMA = "resource.kubernetes.io/numaNode"


def _attrs(value: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {NUMA: value}


def _add_all(constraint: MatchAttribute | DistinctAttribute, *values: dict[str, Any]) -> Any:
    """Add devices in order; the first refusal (a Reason) or None."""
    for value in values:
        reason = constraint.add("req", None, _attrs(value), "gpu.nvidia.com")
        if reason is not None:
            return reason
    return None


@pytest.mark.parametrize(
    ("values", "fits"),
    [
        (({"int": 1}, {"int": 1}), True),
        (({"int": 1}, {"int": 0}), False),
        (({"ints": [1]}, {"int": 1}), True),  # a scalar is a one-element list
        (({"ints": [0, 1]}, {"ints": [1, 2]}), True),
        (({"ints": [0, 1]}, {"ints": [1, 2]}, {"ints": [2, 3]}), False),  # common set is empty
        (({"ints": [0, 1]}, {"ints": [2]}), False),
        (({"strings": ["1"]}, {"int": 1}), False),  # types differ
    ],
)
def test_match_needs_a_value_common_to_every_device(
    values: tuple[dict[str, Any], ...], fits: bool
) -> None:
    reason = _add_all(MatchAttribute(NUMA, []), *values)
    assert (reason is None) is fits, reason
    if not fits:
        assert isinstance(reason, ConstraintMismatch)


def test_match_backtracks_to_the_previous_common_values() -> None:
    match = MatchAttribute(NUMA, [])
    assert _add_all(match, {"ints": [0, 1]}, {"ints": [1]}) is None
    assert _add_all(match, {"ints": [0]}) is not None  # common is {1} now
    match.remove("req", None)  # the [1] device is taken back
    assert _add_all(match, {"ints": [0]}) is None


def test_match_mismatch_names_both_value_sets() -> None:
    reason = _add_all(MatchAttribute(NUMA, []), {"ints": [0, 1]}, {"ints": [2, 3]})
    assert isinstance(reason, ConstraintMismatch)
    assert (reason.value, reason.required) == ("[2, 3]", "[0, 1]")


@pytest.mark.parametrize(
    ("values", "fits"),
    [
        (({"int": 1}, {"int": 0}), True),
        (({"int": 1}, {"ints": [1]}), False),
        (({"ints": [0, 1]}, {"ints": [2, 3]}), True),
        (({"ints": [0, 1]}, {"ints": [2, 3]}, {"ints": [3, 4]}), False),  # pairwise
        (({"ints": [0, 1]}, {"ints": [1, 2]}), False),
    ],
)
def test_distinct_needs_no_value_in_common(values: tuple[dict[str, Any], ...], fits: bool) -> None:
    reason = _add_all(DistinctAttribute(NUMA, []), *values)
    assert (reason is None) is fits, reason
    if not fits:
        assert isinstance(reason, DistinctViolation)


def test_distinct_names_the_shared_value() -> None:
    reason = _add_all(DistinctAttribute(NUMA, []), {"ints": [0, 1]}, {"ints": [1, 2]})
    assert isinstance(reason, DistinctViolation)
    assert reason.value == "1"
