"""The Allocator API as a simulator and `explain` use it (beyond the YAML scenarios)."""

from __future__ import annotations

import re
from typing import Any

import pytest

from dra_driver.errors import AllocationError
from dra_driver.scheduling.allocator import (
    AllocatedState,
    Allocator,
    Features,
    InvalidPoolsError,
    Node,
)
from tests.fakes import (
    PythonSelectors,
    make_device_class,
    make_device_request,
    make_resource_claim,
    make_resource_slice,
    make_slice_device,
)

DRIVER = "gpu.nvidia.com"
IS_GPU = f'device.driver == "{DRIVER}"'
GPU_CLASS = make_device_class("gpu.nvidia.com", IS_GPU)


def node_slices(nodes: int, gpus: int) -> list[dict[str, Any]]:
    return [
        make_resource_slice(
            f"node-{n}-gpus",
            node=f"node-{n}",
            devices=[
                make_slice_device(f"gpu-{g}", attributes={"index": g}, capacity={"memory": "80Gi"})
                for g in range(gpus)
            ],
        )
        for n in range(nodes)
    ]


def gpu_claim(name: str, count: int = 1, **kwargs: Any) -> dict[str, Any]:
    return make_resource_claim(
        name, make_device_request("gpu", "gpu.nvidia.com", count=count, **kwargs)
    )


def place(state: AllocatedState, claim: dict[str, Any], allocation: dict[str, Any]) -> None:
    state.add({**claim, "status": {"allocation": allocation}})


def devices_of(allocation: dict[str, Any]) -> list[str]:
    return [r["device"] for r in allocation["devices"]["results"]]


def test_claims_placed_one_after_another_fill_the_node_then_stop() -> None:
    state = AllocatedState()
    allocator = Allocator(node_slices(1, 4), [GPU_CLASS], allocated=state)
    node = Node("node-0")
    placed = []
    for i in range(5):
        claim = gpu_claim(f"c{i}", count=2 if i == 0 else 1)
        results = allocator.allocate(node, [claim])
        if results is None:
            break
        place(state, claim, results[0])
        placed.append(devices_of(results[0]))

    assert placed == [["gpu-0", "gpu-1"], ["gpu-2"], ["gpu-3"]]
    state.remove("default/c1")
    results = allocator.allocate(node, [gpu_claim("c9")])
    assert results is not None
    assert devices_of(results[0]) == ["gpu-2"]


def test_first_fit_returns_the_first_node_with_room() -> None:
    state = AllocatedState()
    allocator = Allocator(node_slices(3, 1), [GPU_CLASS], allocated=state)
    nodes = [Node(f"node-{n}") for n in range(3)]
    found = allocator.first_fit(nodes, [gpu_claim("a")])
    assert found is not None
    assert found[0].name == "node-0"
    place(state, gpu_claim("a"), found[1][0])

    found = allocator.first_fit(nodes, [gpu_claim("b")])
    assert found is not None
    assert found[0].name == "node-1"
    assert found[1][0]["nodeSelector"]["nodeSelectorTerms"][0]["matchFields"][0]["values"] == [
        "node-1"
    ]
    assert allocator.first_fit(nodes, [gpu_claim("c", count=2)]) is None


def test_first_fit_reports_invalid_pools_only_when_no_node_fits() -> None:
    duplicate = [
        make_resource_slice(
            f"dup-{i}", node="node-0", pool="p", slice_count=2, devices=[make_slice_device("gpu-0")]
        )
        for i in range(2)
    ]
    allocator = Allocator(duplicate + node_slices(2, 1)[1:], [GPU_CLASS])
    nodes = [Node("node-0"), Node("node-1")]

    found = allocator.first_fit(nodes, [gpu_claim("a")])
    assert found is not None
    assert found[0].name == "node-1"
    with pytest.raises(InvalidPoolsError, match="node node-0: invalid resource pools"):
        allocator.first_fit(nodes, [gpu_claim("b", count=2)])


def test_first_fit_with_allocation_mode_all_checks_each_node() -> None:
    allocator = Allocator(node_slices(2, 2), [GPU_CLASS])
    claim = make_resource_claim(
        "all", make_device_request("gpu", "gpu.nvidia.com", allocation_mode="All")
    )
    found = allocator.first_fit([Node("node-1")], [claim])
    assert found is not None
    assert devices_of(found[1][0]) == ["gpu-0", "gpu-1"]


def test_injected_evaluator_is_used_and_results_are_memoized_across_calls() -> None:
    selectors = PythonSelectors(
        {
            "is-gpu": lambda d: d.driver == DRIVER,
            "big": lambda d: d.capacity["memory"]["value"] == "80Gi",
        }
    )
    state = AllocatedState()
    allocator = Allocator(
        node_slices(1, 2),
        [make_device_class("gpu.nvidia.com", "is-gpu")],
        evaluate=selectors,
        allocated=state,
    )
    placed = []
    for name in ("a", "b", "c"):
        claim = gpu_claim(name, selectors=["big"])
        results = allocator.allocate(Node("node-0"), [claim])
        if results is not None:
            place(state, claim, results[0])
            placed.append(name)
    assert placed == ["a", "b"]
    assert selectors.calls == 4  # two devices x two expressions
    state.remove("default/a")
    assert allocator.allocate(Node("node-0"), [gpu_claim("d", selectors=["big"])]) is not None
    assert selectors.calls == 4  # remembered, not evaluated again


def test_unknown_expression_of_injected_evaluator_is_an_allocation_error() -> None:
    allocator = Allocator(node_slices(1, 1), [GPU_CLASS], evaluate=PythonSelectors({}))
    with pytest.raises(AllocationError, match=r"class gpu.nvidia.com: selector #0 on device"):
        allocator.allocate(Node("node-0"), [gpu_claim("a")])


def test_pools_are_searched_in_driver_and_pool_name_order() -> None:
    slices = [
        make_resource_slice(
            "z", driver="z.example.com", node="n", pool="a", devices=[make_slice_device("d")]
        ),
        make_resource_slice(
            "b", driver="a.example.com", node="n", pool="b", devices=[make_slice_device("d")]
        ),
        make_resource_slice(
            "a", driver="a.example.com", node="n", pool="a", devices=[make_slice_device("d")]
        ),
    ]
    allocator = Allocator(slices, [make_device_class("any", "true")])
    results = allocator.allocate(
        Node("n"), [make_resource_claim("c", make_device_request("r", "any", count=3))]
    )
    assert results is not None
    assert [(r["driver"], r["pool"]) for r in results[0]["devices"]["results"]] == [
        ("a.example.com", "a"),
        ("a.example.com", "b"),
        ("z.example.com", "a"),
    ]


def test_node_labels_are_part_of_the_pool_cache() -> None:
    slices = [
        make_resource_slice("rack", pool="rack", devices=[make_slice_device("nic-0")]),
    ]
    slices[0]["spec"].pop("allNodes")
    slices[0]["spec"]["nodeSelector"] = {
        "nodeSelectorTerms": [
            {"matchExpressions": [{"key": "rack", "operator": "In", "values": ["r1"]}]}
        ]
    }
    allocator = Allocator(slices, [make_device_class("any", "true")])
    claim = make_resource_claim("c", make_device_request("r", "any"))

    assert allocator.allocate(Node("n", {"rack": "r2"}), [claim]) is None
    results = allocator.allocate(Node("n", {"rack": "r1"}), [claim])
    assert results is not None
    assert results[0]["nodeSelector"] == slices[0]["spec"]["nodeSelector"]


def test_default_share_ids_are_fresh_lowercase_uuids() -> None:
    device = make_slice_device(
        "gpu-0", allow_multiple_allocations=True, capacity={"memory": "80Gi"}
    )
    allocator = Allocator(
        [make_resource_slice("s", node="n", devices=[device])],
        [GPU_CLASS],
        features=Features(consumable_capacity=True),
    )
    claims = [gpu_claim(name, capacity={"memory": "10Gi"}) for name in ("a", "b")]
    results = allocator.allocate(Node("n"), claims)
    assert results is not None
    share_ids = [r["devices"]["results"][0]["shareID"] for r in results]
    assert all(
        re.fullmatch(r"[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}", s)
        for s in share_ids
    )
    assert share_ids[0] != share_ids[1]
    assert results[0]["devices"]["results"][0]["consumedCapacity"] == {"memory": "10Gi"}


def test_shared_device_capacity_is_tracked_across_placements() -> None:
    device = make_slice_device(
        "gpu-0", allow_multiple_allocations=True, capacity={"memory": "80Gi"}
    )
    state = AllocatedState()
    allocator = Allocator(
        [make_resource_slice("s", node="n", devices=[device])],
        [GPU_CLASS],
        features=Features(consumable_capacity=True),
        allocated=state,
    )
    for name in ("a", "b"):
        claim = gpu_claim(name, capacity={"memory": "40Gi"})
        results = allocator.allocate(Node("n"), [claim])
        assert results is not None
        place(state, claim, results[0])
    assert allocator.allocate(Node("n"), [gpu_claim("c", capacity={"memory": "1"})]) is None
    state.remove("default/a")
    assert allocator.allocate(Node("n"), [gpu_claim("c", capacity={"memory": "40Gi"})]) is not None


def test_many_claims_in_one_call_do_not_hit_the_recursion_limit() -> None:
    allocator = Allocator(node_slices(1, 32), [GPU_CLASS])
    claims = [gpu_claim(f"c{i}") for i in range(32)]
    results = allocator.allocate(Node("node-0"), claims)
    assert results is not None
    assert [devices_of(r) for r in results] == [[f"gpu-{i}"] for i in range(32)]


def test_claim_without_requests_gets_an_empty_allocation() -> None:
    allocator = Allocator(node_slices(1, 1), [GPU_CLASS])
    assert allocator.allocate(Node("node-0"), [make_resource_claim("empty")]) == [{"devices": {}}]


def test_allocated_state_rejects_a_device_held_twice() -> None:
    result = {"request": "gpu", "driver": DRIVER, "pool": "node-0", "device": "gpu-0"}
    first = {**gpu_claim("a"), "status": {"allocation": {"devices": {"results": [result]}}}}
    second = {**gpu_claim("b"), "status": {"allocation": {"devices": {"results": [result]}}}}
    state = AllocatedState([first])
    with pytest.raises(AllocationError, match="already allocated to ResourceClaim default/a"):
        state.add(second)
    with pytest.raises(AllocationError, match="already recorded"):
        state.add(first)
    admin = {
        **gpu_claim("c"),
        "status": {"allocation": {"devices": {"results": [{**result, "adminAccess": True}]}}},
    }
    version = state.version
    state.add(admin)
    assert state.version == version + 1
    assert state.holder((DRIVER, "node-0", "gpu-0")) == "default/a"


def test_allocated_state_ignores_claims_without_allocation() -> None:
    state = AllocatedState([gpu_claim("pending")])
    assert "default/pending" not in state
    assert state.version == 0


def test_shared_results_block_devices_when_consumable_capacity_is_off() -> None:
    shared_result = {
        "request": "gpu",
        "driver": DRIVER,
        "pool": "node-0",
        "device": "gpu-0",
        "shareID": "00000000-0000-4000-8000-000000000001",
    }
    holder = {**gpu_claim("a"), "status": {"allocation": {"devices": {"results": [shared_result]}}}}
    allocator = Allocator(node_slices(1, 1), [GPU_CLASS], allocated=AllocatedState([holder]))
    assert allocator.allocate(Node("node-0"), [gpu_claim("b")]) is None


def test_inputs_are_not_modified_and_results_do_not_alias_them() -> None:
    tolerations = [{"key": "k", "operator": "Exists"}]
    claim = gpu_claim("a", tolerations=tolerations)
    allocator = Allocator(node_slices(1, 1), [GPU_CLASS])
    results = allocator.allocate(Node("node-0"), [claim])
    assert results is not None
    results[0]["devices"]["results"][0]["tolerations"][0]["key"] = "changed"
    assert claim["spec"]["devices"]["requests"][0]["exactly"]["tolerations"] == tolerations


def test_missing_driver_in_slice_is_reported() -> None:
    broken = make_resource_slice("broken", node="n")
    broken["spec"]["driver"] = ""
    with pytest.raises(AllocationError, match=r"ResourceSlice broken: spec\.driver is not set"):
        Allocator([broken], [GPU_CLASS])


def test_same_claims_tried_node_after_node_start_clean_on_each_node() -> None:
    # node-0: two GPUs of different models, so the matchAttribute constraint fails
    # only after one device was added to it; node-1: two equal GPUs of a third model,
    # which a constraint still remembering "H100" from node-0 would refuse.
    slices = [
        make_resource_slice(
            f"node-{n}",
            node=f"node-{n}",
            devices=[
                make_slice_device("gpu-0", attributes={"model": "L4" if n else "H100"}),
                make_slice_device("gpu-1", attributes={"model": "L4" if n else "A100"}),
            ],
        )
        for n in range(2)
    ]
    claim = make_resource_claim(
        "pair",
        make_device_request("gpus", "gpu.nvidia.com", count=2),
        constraints=[{"matchAttribute": f"{DRIVER}/model"}],
    )
    allocator = Allocator(slices, [GPU_CLASS])

    assert allocator.allocate(Node("node-0"), [claim]) is None
    assert allocator.allocate(Node("node-0"), [claim]) is None
    results = allocator.allocate(Node("node-1"), [claim])
    assert results is not None
    assert devices_of(results[0]) == ["gpu-0", "gpu-1"]
    assert results[0]["nodeSelector"]["nodeSelectorTerms"][0]["matchFields"][0]["values"] == [
        "node-1"
    ]


def test_claim_errors_are_reported_to_the_tracer() -> None:
    events: list[Any] = []
    allocator = Allocator(node_slices(1, 1), [GPU_CLASS])
    bad = make_resource_claim("bad", make_device_request("gpu", "no-such-class"))
    with pytest.raises(AllocationError, match="could not retrieve device class no-such-class"):
        allocator.allocate(Node("node-0"), [bad], tracer=events.append)
    assert events[-1].success is False
    assert "no-such-class" in events[-1].error


@pytest.mark.parametrize(("release", "fits"), [("1.35", True), ("1.36", False), ("1.37", False)])
def test_selectors_are_compiled_as_the_releases_scheduler_compiles_them(
    release: str, fits: bool
) -> None:
    # kube-scheduler 1.36 (Go 1.26) parses a URL host with several colons strictly: the same
    # selector that matches under 1.35 matches nothing under 1.36, and the allocator follows.
    claim = make_resource_claim(
        "c",
        make_device_request("gpu", "gpu.nvidia.com", selectors=["isURL('http://a:b:80/')"]),
    )
    allocator = Allocator(
        node_slices(1, 1),
        [GPU_CLASS],
        features=Features.for_release(release),
    )
    assert (allocator.allocate(Node("node-0"), [claim]) is not None) is fits
