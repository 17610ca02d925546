"""Kubernetes' DRA CEL test tables, transcribed: dynamic-resource-allocation/cel/compile_test.go.

Source: kubernetes/dynamic-resource-allocation (the staging copy of
k8s.io/dynamic-resource-allocation) at commit
3d036712930cdac0b0d46c4c21316a78147c551f (2026-07-01, master after
v0.37.0-alpha.2: the 1.37 tables with list-type attributes and `includes()`).
Case names, expressions, devices and expectations are upstream's; the Go
`resourceapi.DeviceAttribute` values are written in API (JSON) form.

Upstream compiles with one of two environments. `StoredExpressions` (the
scheduler's, and the default) has every field and function of the release
whatever the feature gates say; here that is `consumable_capacity=True,
list_type_attributes=True`. `NewExpressions` (the apiserver validating a new
selector) follows the gates; here the two flags are the gates.

`expectCost` upstream is the worst-case *estimate*, which this package does
not compute (it tracks actual cost only); upstream also checks that the
actual cost stays within it, which is what is asserted here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import pytest

from dra_driver.errors import CelError
from dra_driver.scheduling.cel import DeviceView, compile_selector

# resourceapi constants used by the table.
MAX_ATTRIBUTE_VALUES_PER_DEVICE = 48  # ResourceSliceMaxAttributeValuesPerDevice
MAX_ATTRIBUTES_AND_CAPACITIES = 32  # ResourceSliceMaxAttributesAndCapacitiesPerDevice
MAX_ID_LENGTH = 32  # DeviceMaxIDLength
# maxElementsListTypeEnabled: max(DeviceAttributeMaxValueLength,
# ResourceSliceMaxAttributeValuesPerDevice)
MAX_ELEMENTS_LIST_TYPE_ENABLED = max(64, MAX_ATTRIBUTE_VALUES_PER_DEVICE)


@dataclass
class Case:
    expression: str
    driver: str = ""
    attributes: dict[str, dict[str, Any]] = field(default_factory=dict)
    capacity: dict[str, dict[str, Any]] = field(default_factory=dict)
    expect_compile_error: str = ""
    expect_match_error: str = ""
    expect_match: bool = False
    expect_cost: int = 0
    new_expressions: bool = False  # envType: environment.NewExpressions
    consumable_capacity: bool = False
    list_type_attributes: bool | None = None  # nil: run with the gate off and on
    allow_multiple_allocations: bool = False


D = "dra.example.com"


def _values(count: int) -> list[str]:
    return [f"value-{i}" for i in range(count)]


def _expensive_attributes() -> dict[str, dict[str, Any]]:
    attributes = {}
    for i in range(MAX_ATTRIBUTES_AND_CAPACITIES):
        suffix = f"-{i}"
        attributes[D + "/" + "x" * (MAX_ID_LENGTH - len(suffix)) + suffix] = {"string": "abc"}
    return attributes


INCLUDES_COST = 4 + 48  # cost of "includes" is max list length
MACRO_EXISTS_COST = 5 + (3 + 3) * MAX_ELEMENTS_LIST_TYPE_ENABLED
_ALL = """
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
_TEN = "[1, 2, 3, 4, 5, 6, 7, 8, 9, 10]"
_EXPENSIVE = (
    f"{_TEN}.all(x, {_TEN}.all(y, {_TEN}.all(z, {_TEN}.all(z2, {_TEN}.all(z3, "
    f"{_TEN}.all(z4, {_TEN}.all(z5, int('1'.find('[0-9]*')) < 100)))))))"
)


def _includes(attribute: dict[str, Any], arg: str, match: bool, extra: int = 0) -> Case:
    return Case(
        expression=f'device.attributes["dra.example.com"].name.includes({arg})',
        attributes={"name": attribute},
        driver=D,
        expect_match=match,
        expect_cost=INCLUDES_COST + extra,
    )


TESTCASES: dict[str, Case] = {
    "true": Case("true", expect_match=True),
    "false": Case("false", expect_match=False),
    "syntax-error": Case("?!", expect_compile_error="Syntax error"),
    "type-error": Case(
        "1", expect_compile_error="must evaluate to bool or the unknown type, not int"
    ),
    "runtime-error-lookup-identifier": Case(
        'device.attributes["no-such-domain"].noSuchAttr.isGreaterThan(quantity("0"))',
        expect_match_error="no such key: noSuchAttr",
        expect_cost=6,
    ),
    "runtime-error-lookup-map": Case(
        'device.attributes["no-such-domain"]["noSuchAttr"].isGreaterThan(quantity("0"))',
        expect_match_error="no such key: noSuchAttr",
        expect_cost=6,
    ),
    "domain-check-negative": Case(
        '"no-such-domain" in device.attributes', expect_match=False, expect_cost=3
    ),
    "domain-check-positive": Case(
        '"dra.example.com" in device.attributes',
        attributes={"dra.example.com/something": {"bool": True}},
        expect_match=True,
        expect_cost=3,
    ),
    "empty-driver-name": Case('device.driver == ""', expect_match=True, expect_cost=2),
    "real-driver-name": Case(
        'device.driver == "dra.example.com"', driver=D, expect_match=True, expect_cost=4
    ),
    "driver-name-qualifier": Case(
        'device.attributes["dra.example.com"].name',
        driver=D,
        attributes={"name": {"bool": True}},
        expect_match=True,
        expect_cost=4,
    ),
    "driver-name-qualifier-map-lookup": Case(
        'device.attributes["dra.example.com"]["name"]',
        driver=D,
        attributes={"name": {"bool": True}},
        expect_match=True,
        expect_cost=4,
    ),
    "bind": Case(
        'cel.bind(dra, device.attributes["dra.example.com"], dra.name)',
        driver=D,
        attributes={"name": {"bool": True}},
        expect_match=True,
        expect_cost=15,
    ),
    "qualified-attribute-name": Case(
        'device.attributes["other.example.com"].name',
        driver=D,
        attributes={"other.example.com/name": {"bool": True}},
        expect_match=True,
        expect_cost=4,
    ),
    "bool": Case(
        'device.attributes["dra.example.com"].name',
        attributes={"name": {"bool": True}},
        driver=D,
        expect_match=True,
        expect_cost=4,
    ),
    "int": Case(
        'device.attributes["dra.example.com"].name > 0',
        attributes={"name": {"int": 1}},
        driver=D,
        expect_match=True,
        expect_cost=5,
    ),
    "string": Case(
        'device.attributes["dra.example.com"].name == "fish"',
        attributes={"name": {"string": "fish"}},
        driver=D,
        expect_match=True,
        expect_cost=5,
    ),
    "macro-exists-on-int": Case(
        'device.attributes["dra.example.com"].name.exists(x, x > 0)',
        attributes={"name": {"int": 1}},
        driver=D,
        expect_match_error="got 'types.Int', expected iterable type",
        expect_cost=MACRO_EXISTS_COST,
    ),
    "macro-exists-on-bool": Case(
        'device.attributes["dra.example.com"].name.exists(x, x == true)',
        attributes={"name": {"bool": True}},
        driver=D,
        expect_match_error="got 'types.Bool', expected iterable type",
        expect_cost=MACRO_EXISTS_COST,
    ),
    "macro-exists-on-string": Case(
        'device.attributes["dra.example.com"].name.exists(x, x == "fish")',
        attributes={"name": {"string": "fish"}},
        driver=D,
        expect_match_error="got 'types.String', expected iterable type",
        expect_cost=MACRO_EXISTS_COST,
    ),
    "list-result-type-causes-match-error": Case(
        'device.attributes["dra.example.com"].names',
        attributes={"names": {"strings": ["fish", "bird"]}},
        driver=D,
        expect_match_error="CEL result of type list could not be converted to bool",
        expect_cost=4,
    ),
    "includes-function-can-evaluate": _includes(
        {"strings": ["fish", "bird"]}, '"fish"', match=True
    ),
    "list-of-bool": Case(
        'device.attributes["dra.example.com"].names.size() == 2',
        attributes={"names": {"bools": [True, False]}},
        driver=D,
        expect_match=True,
        expect_cost=6,
    ),
    "list-of-int": Case(
        'device.attributes["dra.example.com"].names.size() == 2',
        attributes={"names": {"ints": [1, 2]}},
        driver=D,
        expect_match=True,
        expect_cost=6,
    ),
    "list-of-string": Case(
        'device.attributes["dra.example.com"].names.size() == 2',
        attributes={"names": {"strings": ["fish", "bird"]}},
        driver=D,
        expect_match=True,
        expect_cost=6,
    ),
    "list-of-semver": Case(
        'device.attributes["dra.example.com"].names.size() == 2',
        attributes={"names": {"versions": ["1.0.0", "2.0.0"]}},
        driver=D,
        expect_match=True,
        expect_cost=6,
    ),
    "macro-on-list-of-int": Case(
        'device.attributes["dra.example.com"].names.exists(x, x > 0)',
        attributes={"names": {"ints": [1, 2]}},
        driver=D,
        expect_match=True,
        expect_cost=MACRO_EXISTS_COST,
    ),
    "macro-on-list-of-string": Case(
        'device.attributes["dra.example.com"].names.all(x, x != "")',
        attributes={"names": {"strings": ["fish", "bird"]}},
        driver=D,
        expect_match=True,
        expect_cost=5 + (2 + 2) * MAX_ELEMENTS_LIST_TYPE_ENABLED,
    ),
    "macro-on-list-of-semver": Case(
        'device.attributes["dra.example.com"].names.all(x, x.isGreaterThan(semver("0.0.1")))',
        attributes={"names": {"versions": ["1.0.0", "2.0.0"]}},
        driver=D,
        expect_match=True,
        expect_cost=5 + (2 + 4) * MAX_ELEMENTS_LIST_TYPE_ENABLED,
    ),
    "includes-function-compilation-error": Case(
        'device.attributes["dra.example.com"].attr.includes("fish")',
        list_type_attributes=False,
        new_expressions=True,
        driver=D,
        expect_compile_error="undeclared reference to 'includes'",
    ),
    "includes-function-compilation-and-eval-success": Case(
        'device.attributes["dra.example.com"].attr.includes("fish")',
        list_type_attributes=True,
        new_expressions=True,
        attributes={"attr": {"string": "fish"}},
        driver=D,
        expect_match=True,
        expect_cost=INCLUDES_COST,
    ),
    "includes-function-on-bool-scalar-positive": _includes({"bool": True}, "true", True),
    "includes-function-on-bool-scalar-negative": _includes({"bool": False}, "true", False),
    "includes-function-on-bool-list-positive": _includes({"bools": [True, False]}, "true", True),
    "includes-function-on-bool-list-negative": _includes({"bools": [True, True]}, "false", False),
    "includes-function-on-int-scalar-positive": _includes({"int": 1}, "1", True),
    "includes-function-on-int-scalar-negative": _includes({"int": 2}, "1", False),
    "includes-function-on-int-list-positive": _includes({"ints": [1, 2]}, "1", True),
    "includes-function-on-int-list-negative": _includes({"ints": [1, 2]}, "3", False),
    "includes-function-on-string-scalar-positive": _includes({"string": "fish"}, '"fish"', True),
    "includes-function-on-string-scalar-negative": _includes({"string": "fish"}, '"bird"', False),
    "includes-function-on-string-list-positive": _includes(
        {"strings": ["fish", "bird"]}, '"fish"', True
    ),
    "includes-function-on-string-list-negative": _includes(
        {"strings": ["fish", "bird"]}, '"cat"', False
    ),
    "includes-function-on-semver-scalar-positive": _includes(
        {"version": "1.0.0"}, 'semver("1.0.0")', True, extra=1
    ),
    "includes-function-on-semver-scalar-negative": _includes(
        {"version": "1.0.0"}, 'semver("2.0.0")', False, extra=1
    ),
    "includes-function-on-semver-list-positive": _includes(
        {"versions": ["1.0.0", "2.0.0"]}, 'semver("1.0.0")', True, extra=1
    ),
    "includes-function-on-semver-list-negative": _includes(
        {"versions": ["1.0.0", "2.0.0"]}, 'semver("3.0.0")', False, extra=1
    ),
    "includes-function-on-very-long-list-positive": _includes(
        {"strings": _values(MAX_ATTRIBUTE_VALUES_PER_DEVICE)},
        f'"value-{MAX_ATTRIBUTE_VALUES_PER_DEVICE}"',
        False,
    ),
    "includes-function-on-very-long-list-runtime-error": Case(
        f'device.attributes["dra.example.com"].name.includes('
        f'"value-{MAX_ATTRIBUTE_VALUES_PER_DEVICE + 1}")',
        attributes={"name": {"strings": _values(MAX_ATTRIBUTE_VALUES_PER_DEVICE + 1)}},
        driver=D,
        expect_match_error=(
            "'includes' function cannot be applied to lists longer than "
            f"{MAX_ATTRIBUTE_VALUES_PER_DEVICE} values"
        ),
        expect_cost=INCLUDES_COST,
    ),
    "in-operator-on-list": Case(
        '1 in device.attributes["dra.example.com"].names',
        attributes={"names": {"ints": [1, 2, 3]}},
        driver=D,
        expect_match=True,
        expect_cost=4 + 64,
    ),
    "version": Case(
        'device.attributes["dra.example.com"].name.isGreaterThan(semver("0.0.1"))',
        attributes={"name": {"version": "1.0.0"}},
        driver=D,
        expect_match=True,
        expect_cost=6,
    ),
    "version_v": Case(
        'device.attributes["dra.example.com"].name.isGreaterThan(semver("v0.0.1", true)) '
        '&& isSemver("v1.0.0", true)',
        attributes={"name": {"version": "1.0.0"}},
        driver=D,
        expect_match=True,
        expect_cost=7,
    ),
    "macro-exists-on-version": Case(
        'device.attributes["dra.example.com"].name.exists(x, x.isGreaterThan(semver("0.0.1")))',
        attributes={"name": {"version": "1.0.0"}},
        driver=D,
        expect_match_error="got 'cel.Semver', expected iterable type",
        expect_cost=5 + (3 + 4) * MAX_ELEMENTS_LIST_TYPE_ENABLED,
    ),
    "quantity": Case(
        'device.capacity["dra.example.com"].name.isGreaterThan(quantity("1Ki"))',
        capacity={"name": {"value": "1Mi"}},
        driver=D,
        expect_match=True,
        expect_cost=6,
    ),
    "check-positive": Case(
        '"name" in device.capacity["dra.example.com"] && '
        'device.capacity["dra.example.com"].name.isGreaterThan(quantity("1Ki"))',
        capacity={"name": {"value": "1Mi"}},
        driver=D,
        expect_match=True,
        expect_cost=10,
    ),
    "check-negative": Case(
        '!("name" in device.capacity["dra.example.com"]) || '
        'device.capacity["dra.example.com"].name.isGreaterThan(quantity("1Ki"))',
        expect_match=True,
        expect_cost=11,
    ),
    "all": Case(
        _ALL,
        attributes={
            "bool": {"bool": True},
            "int": {"int": 1},
            "string": {"string": "fish"},
            "version": {"version": "1.0.0"},
        },
        capacity={"quantity": {"value": "1Mi"}},
        driver=D,
        expect_match=True,
        expect_cost=52,
    ),
    "many": Case(
        'device.attributes["dra.example.com"].a && device.attributes["dra.example.com"].b && '
        'device.attributes["dra.example.com"].c',
        attributes={"a": {"bool": True}, "b": {"bool": True}, "c": {"bool": True}},
        driver=D,
        expect_match=True,
        expect_cost=12,
    ),
    "check_attribute_domains": Case(
        'device.attributes.exists_one(x, x == "dra.example.com")',
        attributes={"services": {"string": "some_example_value"}},
        driver=D,
        expect_match=True,
        expect_cost=164,
    ),
    "check_attribute_ids": Case(
        'device.attributes["dra.example.com"].exists_one(x, x == "services")',
        attributes={"services": {"string": "some_example_value"}},
        driver=D,
        expect_match=True,
        expect_cost=133,
    ),
    "split_attribute": Case(
        'device.attributes["dra.example.com"].services.split("example").size() >= 2',
        attributes={"services": {"string": "some_example_value"}},
        driver=D,
        expect_match=True,
        expect_cost=19,
    ),
    "regexp_attribute": Case(
        'device.attributes["dra.example.com"].services.matches("[^a]?sym")',
        attributes={"services": {"string": "asymetric"}},
        driver=D,
        expect_match=True,
        expect_cost=18,
    ),
    "check_capacity_domains": Case(
        'device.capacity.exists_one(x, x == "dra.example.com")',
        capacity={"memory": {"value": "1Mi"}},
        driver=D,
        expect_match=True,
        expect_cost=164,
    ),
    "check_capacity_ids": Case(
        'device.capacity["dra.example.com"].exists_one(x, x == "memory")',
        capacity={"memory": {"value": "1Mi"}},
        driver=D,
        expect_match=True,
        expect_cost=133,
    ),
    "expensive": Case(
        _EXPENSIVE,
        attributes=_expensive_attributes(),
        driver=D,
        expect_match_error="actual cost limit exceeded",
        expect_cost=85555551,
    ),
    "allow_multiple_allocations": Case(
        "device.allowMultipleAllocations == true",
        consumable_capacity=True,
        allow_multiple_allocations=True,
        driver=D,
        expect_match=True,
        expect_cost=3,
    ),
    "allow_multiple_allocations_default": Case(
        "device.allowMultipleAllocations == false",
        consumable_capacity=True,
        driver=D,
        expect_match=True,
        expect_cost=3,
    ),
    "allow_multiple_allocations_false": Case(
        "device.allowMultipleAllocations == false",
        consumable_capacity=True,
        allow_multiple_allocations=False,
        driver=D,
        expect_match=True,
        expect_cost=3,
    ),
    "allow_multiple_allocations_new": Case(
        "device.allowMultipleAllocations == false",
        consumable_capacity=True,
        new_expressions=True,
        driver=D,
        expect_match=True,
        expect_cost=3,
    ),
    "allow_multiple_allocations_enabled": Case(
        "device.allowMultipleAllocations == false",
        new_expressions=True,
        consumable_capacity=True,
        driver=D,
        expect_match=True,
        expect_cost=3,
    ),
    "allow_multiple_allocations_disabled": Case(
        "device.allowMultipleAllocations == false",
        new_expressions=True,
        consumable_capacity=False,
        driver=D,
        expect_compile_error="undefined field 'allowMultipleAllocations'",
    ),
}


def _runs() -> list[Any]:
    runs = []
    for name, case in TESTCASES.items():
        gates = [False, True] if case.list_type_attributes is None else [case.list_type_attributes]
        for gate in gates:
            runs.append(pytest.param(case, gate, id=f"{name}/list-type-attributes={gate}"))
    return runs


def _compile(case: Case, list_type_attributes: bool, *, new_expressions: bool) -> Any:
    if new_expressions:
        return compile_selector(
            case.expression,
            consumable_capacity=case.consumable_capacity,
            list_type_attributes=list_type_attributes,
        )
    # StoredExpressions: every field and function of the release, whatever the gates.
    return compile_selector(case.expression, consumable_capacity=True, list_type_attributes=True)


@pytest.mark.parametrize(("case", "list_type_attributes"), _runs())
def test_cel(case: Case, list_type_attributes: bool) -> None:
    """TestCEL."""
    if case.expect_compile_error:
        with pytest.raises(CelError, match=re.escape(case.expect_compile_error)):
            _compile(case, list_type_attributes, new_expressions=case.new_expressions)
        return
    selector = _compile(case, list_type_attributes, new_expressions=case.new_expressions)
    device = DeviceView(
        driver=case.driver,
        attributes=case.attributes,
        capacity=case.capacity,
        allow_multiple_allocations=case.allow_multiple_allocations,
    )
    if case.expect_match_error:
        with pytest.raises(CelError, match=re.escape(case.expect_match_error)):
            selector.matches_with_cost(device)
        return
    match, cost = selector.matches_with_cost(device)
    assert match == case.expect_match
    assert cost <= case.expect_cost, f"actual cost {cost} above the worst-case {case.expect_cost}"


# -- TestCELFeatureCombinations --------------------------------------------------------

_STORED = {"scalar": True, "list": True, "includes": True, "multi": True}
FEATURE_COMBINATIONS: dict[str, tuple[bool, bool, bool, dict[str, bool]]] = {
    # name: (new_expressions, consumable_capacity, list_type_attributes, what compiles)
    "stored-expressions-no-features": (False, False, False, _STORED),
    "stored-expressions-consumable-capacity": (False, True, False, _STORED),
    "stored-expressions-list-type-attributes": (False, False, True, _STORED),
    "stored-expressions-all-features": (False, True, True, _STORED),
    "new-expressions-no-features": (
        True,
        False,
        False,
        {"scalar": True, "list": False, "includes": False, "multi": False},
    ),
    "new-expressions-consumable-capacity": (
        True,
        True,
        False,
        {"scalar": True, "list": False, "includes": False, "multi": True},
    ),
    "new-expressions-list-type-attributes": (
        True,
        False,
        True,
        {"scalar": True, "list": True, "includes": True, "multi": False},
    ),
    "new-expressions-all-features": (
        True,
        True,
        True,
        {"scalar": True, "list": True, "includes": True, "multi": True},
    ),
}

EXPRESSIONS: dict[str, tuple[str, DeviceView, list[str]]] = {
    "scalar-attribute": (
        'device.attributes["dra.example.com"].ready',
        DeviceView(driver=D, attributes={"ready": {"bool": True}}, capacity={}),
        ["scalar"],
    ),
    "list-attribute": (
        'device.attributes["dra.example.com"].ids.exists(id, id == 1)',
        DeviceView(driver=D, attributes={"ids": {"ints": [1, 2]}}, capacity={}),
        ["list"],
    ),
    "includes-function": (
        'device.attributes["dra.example.com"].name.includes("fish")',
        DeviceView(driver=D, attributes={"name": {"string": "fish"}}, capacity={}),
        ["includes"],
    ),
    "multiple-allocations": (
        "device.allowMultipleAllocations",
        DeviceView(driver=D, attributes={}, capacity={}, allow_multiple_allocations=True),
        ["multi"],
    ),
    "list-attribute-with-multiple-allocations": (
        'device.allowMultipleAllocations && device.attributes["dra.example.com"].ids.exists('
        "id, id == 1)",
        DeviceView(
            driver=D,
            attributes={"ids": {"ints": [1, 2]}},
            capacity={},
            allow_multiple_allocations=True,
        ),
        ["list", "multi"],
    ),
}


@pytest.mark.parametrize("combination", list(FEATURE_COMBINATIONS))
@pytest.mark.parametrize("expression_name", list(EXPRESSIONS))
def test_cel_feature_combinations(combination: str, expression_name: str) -> None:
    """TestCELFeatureCombinations."""
    new_expressions, consumable, lists, compiles = FEATURE_COMBINATIONS[combination]
    expression, device, needs = EXPRESSIONS[expression_name]
    case = Case(expression, consumable_capacity=consumable)
    expects_compile = all(compiles[n] for n in needs)
    try:
        selector = _compile(case, lists, new_expressions=new_expressions)
    except CelError:
        assert not expects_compile, "unexpected compile error"
        return
    assert expects_compile, "expected compile error"
    assert selector.matches(device)
