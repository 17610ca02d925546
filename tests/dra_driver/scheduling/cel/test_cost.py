"""Runtime cost: the same units as cel-go's tracker, and the limit that stops evaluation.

The expected numbers for straight-line expressions are the costs Kubernetes'
own DRA CEL tests (dynamic-resource-allocation/cel/compile_test.go) record
for the same expressions; for these the worst-case estimate and the actual
cost coincide.
"""

from __future__ import annotations

import pytest

from dra_driver.errors import CelError
from dra_driver.scheduling.cel import DeviceView, compile_selector

EXAMPLE = DeviceView(
    driver="dra.example.com",
    attributes={
        "name": {"bool": True},
        "bool": {"bool": True},
        "int": {"int": 1},
        "string": {"string": "fish"},
        "version": {"version": "1.0.0"},
        "a": {"bool": True},
        "b": {"bool": True},
        "c": {"bool": True},
    },
    capacity={"name": {"value": "1Mi"}, "quantity": {"value": "1Mi"}},
)

ALL = """
device.capacity["dra.example.com"].quantity.isGreaterThan(quantity("1Ki")) &&
device.attributes["dra.example.com"].bool &&
device.attributes["dra.example.com"].int > 0 &&
device.attributes["dra.example.com"].string == "fish" &&
device.attributes["dra.example.com"].version.isGreaterThan(semver("0.0.1")) &&
device.capacity["dra.example.com"]["quantity"].isGreaterThan(quantity("1Ki")) &&
device.attributes["dra.example.com"]["bool"] &&
device.attributes["dra.example.com"]["int"] > 0 &&
device.attributes["dra.example.com"]["string"] == "fish" &&
device.attributes["dra.example.com"]["version"].isGreaterThan(semver("0.0.1"))
"""


@pytest.mark.parametrize(
    ("expression", "cost"),
    [
        ('!("no-such-domain" in device.attributes)', 4),
        ('"dra.example.com" in device.attributes', 3),
        ('device.driver == "dra.example.com"', 4),
        ('device.attributes["dra.example.com"].name', 4),
        ('device.attributes["dra.example.com"]["name"]', 4),
        ('cel.bind(dra, device.attributes["dra.example.com"], dra.name)', 15),
        ('device.attributes["dra.example.com"].int > 0', 5),
        ('device.attributes["dra.example.com"].string == "fish"', 5),
        ('device.attributes["dra.example.com"].version.isGreaterThan(semver("0.0.1"))', 6),
        ('device.capacity["dra.example.com"].name.isGreaterThan(quantity("1Ki"))', 6),
        (
            '"name" in device.capacity["dra.example.com"] && '
            'device.capacity["dra.example.com"].name.isGreaterThan(quantity("1Ki"))',
            10,
        ),
        (ALL, 52),
        (
            'device.attributes["dra.example.com"].a && device.attributes["dra.example.com"].b && '
            'device.attributes["dra.example.com"].c',
            12,
        ),
    ],
)
def test_costs_match_kubernetes(expression: str, cost: int) -> None:
    assert compile_selector(expression).matches_with_cost(EXAMPLE) == (True, cost)


def test_allow_multiple_allocations_cost() -> None:
    selector = compile_selector(
        "device.allowMultipleAllocations == false", consumable_capacity=True
    )
    assert selector.matches_with_cost(EXAMPLE) == (True, 3)


def test_string_work_costs_by_length() -> None:
    short = DeviceView(driver="d", attributes={"s": {"string": "asymetric"}}, capacity={})
    long = DeviceView(driver="d", attributes={"s": {"string": "asymetric" * 7}}, capacity={})
    selector = compile_selector('device.attributes["d"].s.matches("[^a]?sym")')
    assert selector.matches_with_cost(short) == (True, 4 + 1 * 2)
    assert selector.matches_with_cost(long) == (True, 4 + 7 * 2)


def test_comprehension_cost_counts_iterations() -> None:
    # 10 for the list; per element 2 (loop condition) + 1 (accumulator) + 2 (x > 0);
    # 1 for the result.
    assert compile_selector("[1, 2, 3].all(x, x > 0)").matches_with_cost(EXAMPLE) == (True, 26)
    # exists stops at 2: two iterations of 3 + 1 + 2, one more loop-condition check (3).
    assert compile_selector("[1, 2, 3].exists(x, x == 2)").matches_with_cost(EXAMPLE) == (True, 26)


def test_short_circuit_skips_cost() -> None:
    selector = compile_selector('false && device.attributes["dra.example.com"].a')
    assert selector.matches_with_cost(EXAMPLE) == (False, 0)


def test_cost_limit_error_is_raised_mid_evaluation() -> None:
    # 1000 * 1000 iterations of a cheap body exceed 1,000,000 long before finishing.
    thousand = "[" + ", ".join(["1"] * 1000) + "]"
    selector = compile_selector(f"{thousand}.all(x, {thousand}.all(y, x == y))")
    with pytest.raises(CelError, match="actual cost limit exceeded"):
        selector.matches(EXAMPLE)
