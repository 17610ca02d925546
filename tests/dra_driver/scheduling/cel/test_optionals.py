"""CEL optional types in selectors: the syntax, cel-go's error texts and the cost charged.

The cel-spec conformance suite (conformance/) covers the semantics case by
case; this file covers what a selector author meets: defensive lookups on a
real device, the messages for misuse, and the cost units.
"""

from __future__ import annotations

import re

import pytest

from dra_driver.errors import CelError
from dra_driver.scheduling.cel import DeviceView, compile_selector

H100 = DeviceView(
    driver="gpu.nvidia.com",
    attributes={"productName": {"string": "NVIDIA H100 80GB HBM3"}, "index": {"int": 3}},
    capacity={"memory": {"value": "80Gi"}},
)
ATTRS = 'device.attributes["gpu.nvidia.com"]'


@pytest.mark.parametrize(
    "expression",
    [
        f'{ATTRS}.?productName.orValue("") == "NVIDIA H100 80GB HBM3"',
        f'{ATTRS}[?"productName"].orValue("") == "NVIDIA H100 80GB HBM3"',
        f'{ATTRS}.?model.orValue("none") == "none"',
        f"!{ATTRS}.?model.hasValue()",
        f"{ATTRS}.?index.optMap(i, i + 1).value() == 4",
        f'device.attributes.?other.orValue({{}}).size() == 0 || "x" in {ATTRS}',
        f'{ATTRS}.?model.or({ATTRS}.?productName).value().startsWith("NVIDIA")',
        'device.?driver.value() == "gpu.nvidia.com"',
        'device.capacity["gpu.nvidia.com"].?memory.value().isGreaterThan(quantity("40Gi"))',
        f"[?{ATTRS}.?model, ?{ATTRS}.?index].size() == 1",
        f'{{?"model": {ATTRS}.?model, "index": {ATTRS}.index}}.size() == 1',
        "optional.ofNonZeroValue(0) == optional.none()",
    ],
)
def test_optional_selectors_match(expression: str) -> None:
    assert compile_selector(expression).matches(H100)


def test_or_value_does_not_evaluate_its_argument_when_the_value_is_there() -> None:
    # The argument would fail (no such key); cel-go evaluates or/orValue lazily.
    assert compile_selector(f"{ATTRS}.?index.orValue({ATTRS}.nosuch) == 3").matches(H100)


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        (f"{ATTRS}.?model.value() == 1", "optional.none() dereference"),
        (f"{ATTRS}.?productName.model.hasValue()", "no such key: model"),
    ],
)
def test_runtime_errors_have_cel_go_texts(expression: str, message: str) -> None:
    with pytest.raises(CelError, match=re.escape(message)):
        compile_selector(expression).matches(H100)


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("[?1].size() == 1", "expected type 'optional_type(int)' but found 'int'"),
        ("{?'a': 1}.size() == 1", "expected type 'optional_type(int)' but found 'int'"),
        ("optional.of(1).orValue('x') == 1", "found no matching overload for 'orValue'"),
        ("optional.none().hasValue(1)", "found no matching overload for 'hasValue'"),
        ("1.?a", "type 'int' does not support field selection"),
        (f"{ATTRS}.?productName.optMap(1, 2).hasValue()", "optMap() variable name"),
    ],
)
def test_misuse_is_a_compile_error(expression: str, message: str) -> None:
    with pytest.raises(CelError, match=re.escape(message)):
        compile_selector(expression)


def test_optional_lookups_are_charged_like_field_selections() -> None:
    # device 1, .attributes 1, ["gpu.nvidia.com"] 1, .?productName 1, orValue 1,
    # == on 21 characters ceil(2.1) = 3.
    selector = compile_selector(f'{ATTRS}.?productName.orValue("") == "NVIDIA H100 80GB HBM3"')
    assert selector.matches_with_cost(H100) == (True, 8)
    # An absent attribute costs the same lookups; the comparison then sees "".
    absent = compile_selector(f'{ATTRS}.?model.orValue("") == "NVIDIA H100 80GB HBM3"')
    assert absent.matches_with_cost(H100) == (False, 5)


@pytest.mark.parametrize(
    "expression",
    [
        "[3, 1, 2].first() == optional.of(3)",
        "[3, 1, 2].last().value() == 2",
        "![].first().hasValue()",
        "[3, 1, 2].sortBy(x, -x) == [3, 2, 1]",
        "['bb', 'a', 'ccc'].sortBy(s, s.size()).last().orValue('') == 'ccc'",
    ],
)
def test_list_functions_built_on_optionals(expression: str) -> None:
    # first()/last() are the optional library's version 2; sortBy is ext lists v2.
    assert compile_selector(expression).matches(H100)


def test_sort_by_keys_must_be_comparable_and_of_one_type() -> None:
    with pytest.raises(CelError, match="list elements must have the same type"):
        compile_selector("[1, 2].sortBy(x, x == 1 ? dyn('a') : dyn(1)) == [1, 2]").matches(H100)
