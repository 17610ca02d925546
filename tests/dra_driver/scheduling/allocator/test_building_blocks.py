"""Quantities, node selectors, capacity rounding, taints and attribute lookup on their own."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import pytest

from dra_driver.errors import AllocationError
from dra_driver.kube.quantity import Quantity, format_canonical, quantity_format, readable
from dra_driver.scheduling.allocator.capacity import (
    CapacitySpec,
    check_capacity,
    consumed_amount,
    violates_policy,
)
from dra_driver.scheduling.allocator.constraints import (
    DistinctAttribute,
    MatchAttribute,
    attribute_value,
    lookup_attribute,
)
from dra_driver.scheduling.allocator.nodes import Node, node_matches, selector_matches
from dra_driver.scheduling.allocator.pools import SliceRecord
from dra_driver.scheduling.allocator.quantities import to_quantity
from dra_driver.scheduling.allocator.taints import tolerates, untolerated_taint
from dra_driver.scheduling.allocator.trace import CapacityInsufficient, CapacityUndefined


@pytest.mark.parametrize(
    ("text", "canonical"),
    [
        ("1Gi", "1Gi"),
        ("1024Mi", "1Gi"),
        ("1536Mi", "1536Mi"),
        ("1024", "1024"),
        ("2000", "2k"),
        ("1500", "1500"),
        ("0.5", "500m"),
        ("1.5Gi", "1536Mi"),
        ("512Ki", "512Ki"),
        ("1e3", "1e3"),
        ("100m", "100m"),
        ("0", "0"),
        ("0.5Ki", "512"),
    ],
)
def test_quantities_print_like_kubernetes(text: str, canonical: str) -> None:
    assert str(to_quantity(text, "test")) == canonical


def test_quantity_formats_and_rounding() -> None:
    assert quantity_format("80Gi") == "BinarySI"
    assert quantity_format("5e-3") == "DecimalExponent"
    assert quantity_format("12k") == "DecimalSI"
    assert Quantity(Fraction(3, 2)).ceil_int() == 2
    assert format_canonical(Fraction(4 * 2**30), "BinarySI") == "4Gi"
    assert format_canonical(Fraction(1, 3), "DecimalSI") == "333333334n"
    assert readable(Fraction(80 * 2**30)) == "80Gi"
    assert readable(Fraction(1, 2)) == "500m"
    with pytest.raises(AllocationError, match=r"claim c: capacity\.requests"):
        to_quantity("lots", "claim c: capacity.requests")


NODE = Node("node-1", {"region": "eu", "gpus": "8"})


def selector(*requirements: dict[str, Any], fields: bool = False) -> dict[str, Any]:
    key = "matchFields" if fields else "matchExpressions"
    return {"nodeSelectorTerms": [{key: list(requirements)}]}


@pytest.mark.parametrize(
    ("requirement", "matches"),
    [
        ({"key": "region", "operator": "In", "values": ["eu", "us"]}, True),
        ({"key": "region", "operator": "In", "values": ["us"]}, False),
        ({"key": "region", "operator": "NotIn", "values": ["us"]}, True),
        ({"key": "zone", "operator": "NotIn", "values": ["a"]}, True),
        ({"key": "region", "operator": "Exists"}, True),
        ({"key": "zone", "operator": "DoesNotExist"}, True),
        ({"key": "gpus", "operator": "Gt", "values": ["4"]}, True),
        ({"key": "gpus", "operator": "Lt", "values": ["4"]}, False),
        ({"key": "region", "operator": "Gt", "values": ["4"]}, False),
    ],
)
def test_node_selector_requirements(requirement: dict[str, Any], matches: bool) -> None:
    assert selector_matches(NODE, selector(requirement), where="test") is matches


def test_node_selector_terms_fields_and_errors() -> None:
    by_name = {"key": "metadata.name", "operator": "In", "values": ["node-1"]}
    assert selector_matches(NODE, selector(by_name, fields=True), where="t")
    assert not selector_matches(NODE, {"nodeSelectorTerms": [{}]}, where="t")
    two_terms = {
        "nodeSelectorTerms": [
            {"matchExpressions": [{"key": "region", "operator": "In", "values": ["us"]}]},
            {"matchFields": [by_name]},
        ]
    }
    assert selector_matches(NODE, two_terms, where="t")
    assert node_matches(NODE, "node-1", False, None, where="t")
    assert not node_matches(NODE, "node-2", True, None, where="t")
    assert node_matches(NODE, None, True, None, where="t")
    assert not node_matches(NODE, None, False, None, where="t")
    with pytest.raises(AllocationError, match="ResourceSlice s: nodeSelector matchFields key"):
        selector_matches(
            NODE,
            selector({"key": "spec.x", "operator": "In"}, fields=True),
            where="ResourceSlice s",
        )
    with pytest.raises(AllocationError, match="operator 'Near' is not supported"):
        selector_matches(NODE, selector({"key": "region", "operator": "Near"}), where="t")
    with pytest.raises(AllocationError, match="is not an integer"):
        selector_matches(
            NODE, selector({"key": "gpus", "operator": "Gt", "values": ["x"]}), where="t"
        )


def spec(value: str, **policy: Any) -> CapacitySpec:
    def q(text: str | None) -> Quantity | None:
        return None if text is None else to_quantity(text, "t")

    values = policy.get("valid_values")
    return CapacitySpec(
        to_quantity(value, "t"),
        has_policy=bool(policy),
        default=q(policy.get("default")),
        valid_values=None if values is None else tuple(to_quantity(v, "t") for v in values),
        range_min=q(policy.get("min")),
        range_max=q(policy.get("max")),
        range_step=q(policy.get("step")),
        has_range="min" in policy,
    )


@pytest.mark.parametrize(
    ("requested", "expected"),
    [
        (None, "1Gi"),  # default
        ("512Mi", "1Gi"),  # up to min
        ("1Gi", "1Gi"),
        ("2Gi", "3Gi"),  # min + one step
        ("3Gi", "3Gi"),
        ("3.5Gi", "5Gi"),
    ],
)
def test_range_policy_rounding(requested: str | None, expected: str) -> None:
    capacity = spec("16Gi", default="1Gi", min="1Gi", step="2Gi", max="9Gi")
    amount = consumed_amount(None if requested is None else to_quantity(requested, "t"), capacity)
    assert str(amount) == expected
    assert not violates_policy(amount, capacity)


def test_policies_refuse_what_they_cannot_round() -> None:
    ranged = spec("16Gi", default="1Gi", min="1Gi", step="2Gi", max="9Gi")
    assert violates_policy(consumed_amount(to_quantity("10Gi", "t"), ranged), ranged)
    assert violates_policy(to_quantity("2Gi", "t"), ranged)  # off the step grid
    valued = spec("8", default="1", valid_values=["1", "2", "4"])
    assert str(consumed_amount(to_quantity("3", "t"), valued)) == "4"
    assert violates_policy(consumed_amount(to_quantity("5", "t"), valued), valued)
    plain = spec("8")
    assert str(consumed_amount(None, plain)) == "8"
    assert str(consumed_amount(to_quantity("3", "t"), plain)) == "3"


def test_check_capacity_counts_allocated_and_allocating_shares() -> None:
    record = SliceRecord(
        {
            "metadata": {"name": "s"},
            "spec": {
                "driver": "d",
                "pool": {"name": "p"},
                "nodeName": "n",
                "devices": [{"name": "gpu", "capacity": {"memory": {"value": "10Gi"}}}],
            },
        },
        0,
    )
    device = record.devices[0]
    four = {"memory": to_quantity("4Gi", "t")}
    assert check_capacity(device, four, {"memory": Fraction(4 * 2**30)}, None) is None
    assert check_capacity(
        device, four, {"memory": Fraction(4 * 2**30)}, {"memory": Fraction(4 * 2**30)}
    ) == CapacityInsufficient("memory", "4Gi", "8Gi", "10Gi")
    assert check_capacity(device, {"cores": to_quantity("1", "t")}, None, None) == (
        CapacityUndefined(("cores",))
    )


def test_toleration_matching() -> None:
    taint = {"key": "gpu-health", "value": "bad", "effect": "NoSchedule"}
    assert tolerates({"key": "gpu-health", "operator": "Exists"}, taint)
    assert tolerates({"operator": "Exists"}, taint)
    assert tolerates({"key": "gpu-health", "value": "bad"}, taint)
    assert not tolerates({"key": "gpu-health", "value": "good"}, taint)
    assert not tolerates({"key": "gpu-health", "operator": "Exists", "effect": "NoExecute"}, taint)
    assert not tolerates({"key": "other", "operator": "Exists"}, taint)
    assert not tolerates({"key": "gpu-health", "operator": "Matches"}, taint)
    none_effect = {"key": "k", "value": "v", "effect": "None"}
    assert untolerated_taint([none_effect, taint], []) is taint
    assert untolerated_taint([none_effect], []) is None


def test_attribute_lookup_and_typed_values() -> None:
    attributes: dict[str, dict[str, Any]] = {
        "index": {"int": 0},
        "resource.kubernetes.io/pcieRoot": {"string": "pci0000:00"},
    }
    assert lookup_attribute(attributes, "gpu.nvidia.com", "gpu.nvidia.com/index") == {"int": 0}
    assert lookup_attribute(attributes, "other.example.com", "gpu.nvidia.com/index") is None
    assert lookup_attribute(attributes, "gpu.nvidia.com", "resource.kubernetes.io/pcieRoot")
    assert attribute_value({"int": 1}) != attribute_value({"string": "1"})
    assert attribute_value({}) is None


def test_constraints_scope_and_undo() -> None:
    match = MatchAttribute("d/x", ["gpu"])
    assert match.add("gpu", None, {"x": {"int": 1}}, "d") is None
    assert match.add("nic", None, {}, "d") is None  # not in scope
    assert match.add("gpu", "small", {"x": {"int": 2}}, "d") is not None  # "gpu" covers subrequests
    match.remove("gpu", None)
    assert match.add("gpu", None, {"x": {"int": 2}}, "d") is None  # first again after undo

    sub_only = MatchAttribute("d/x", ["gpu/small"])
    assert sub_only.applies("gpu", "small")
    assert not sub_only.applies("gpu", "large")
    assert not sub_only.applies("gpu", None)

    distinct = DistinctAttribute("d/x", [])
    assert distinct.add("a", None, {"x": {"int": 1}}, "d") is None
    assert distinct.add("a", None, {"x": {"int": 2}}, "d") is None
    assert distinct.add("a", None, {"x": {"int": 1}}, "d") is not None
    distinct.remove("a", None)
    assert distinct.add("a", None, {"x": {"int": 2}}, "d") is None
