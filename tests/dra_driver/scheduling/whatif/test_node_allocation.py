"""The demo's claims are allocated by the scheduler's allocator on the published slices."""

from __future__ import annotations

import copy

import pytest

from dra_driver.composition.demo_claims import demo_claims
from dra_driver.composition.hardware import open_hardware
from dra_driver.composition.simulated_nodes import node_slices
from dra_driver.errors import AllocationError
from dra_driver.node.device_classes import default_device_classes
from dra_driver.node.inventory import discover
from dra_driver.scheduling.whatif.node_allocation import allocate_on_node

NODE = "demo-node"


def _slices() -> list[dict[str, object]]:
    inventory = discover(open_hardware("sim:dgx-h100", node_name=NODE).nvml)
    return node_slices(inventory, NODE, mig="static")


def test_demo_claims_get_distinct_h100s_with_a_node_selector() -> None:
    allocated, how = allocate_on_node(demo_claims(), _slices(), default_device_classes(), NODE)

    devices = [
        [r["device"] for r in claim["status"]["allocation"]["devices"]["results"]]
        for claim in allocated
    ]
    assert devices == [["gpu-0", "gpu-1"], ["gpu-2"]]
    selector = allocated[0]["status"]["allocation"]["nodeSelector"]
    assert selector["nodeSelectorTerms"][0]["matchFields"][0]["values"] == [NODE]
    assert "structured allocator" in how
    assert "picks" not in how


def test_a_claim_that_does_not_fit_says_why() -> None:
    greedy = copy.deepcopy(demo_claims()[0])
    greedy["spec"]["devices"]["requests"][0]["exactly"]["count"] = 9

    with pytest.raises(
        AllocationError, match=r"ml-team/trainer-gpus does not fit on node demo-node"
    ):
        allocate_on_node([greedy], _slices(), default_device_classes(), NODE)
