"""Explain tracing: every rejected device gets a structured reason an admin can act on."""

from __future__ import annotations

from typing import Any

import pytest

from dra_driver.errors import AllocationError
from dra_driver.scheduling.allocator import (
    AllocatedState,
    AllocationFinished,
    Allocator,
    DeviceRef,
    ExplainRecorder,
    Features,
    Node,
    render_explanation,
)
from dra_driver.scheduling.allocator.trace import (
    AlreadyAllocated,
    AttributeMissing,
    CapacityInsufficient,
    CapacityPolicyViolated,
    CapacityUndefined,
    ClassSelectorFalse,
    ConstraintMismatch,
    CounterConsumer,
    CountersExhausted,
    DistinctViolation,
    PickedInThisAttempt,
    PoolIncomplete,
    PoolInvalid,
    Reason,
    RequestSelectorFalse,
    SelectorError,
    TraceEvent,
    UntoleratedTaint,
)
from tests.fakes import (
    make_device_class,
    make_device_request,
    make_resource_claim,
    make_resource_slice,
    make_slice_device,
)

DRIVER = "gpu.nvidia.com"
GPU_CLASS = make_device_class("gpu.nvidia.com", f'device.driver == "{DRIVER}"')
NODE = Node("node-1")


def gpu(name: str, **kwargs: Any) -> dict[str, Any]:
    return make_slice_device(name, **kwargs)


def node_slice(
    *devices: dict[str, Any], name: str = "node-1-gpus", **kwargs: Any
) -> dict[str, Any]:
    return make_resource_slice(name, node="node-1", devices=devices, **kwargs)


def explain(
    allocator: Allocator, *claims: dict[str, Any]
) -> tuple[list[dict[str, Any]] | None, ExplainRecorder]:
    recorder = ExplainRecorder()
    return allocator.allocate(NODE, list(claims), tracer=recorder), recorder


def reasons_for(recorder: ExplainRecorder, request: str, device: str) -> list[Reason]:
    for entry in recorder.explanation.requests:
        if entry.request == request:
            for ref, verdict in entry.devices.items():
                if ref.device == device:
                    return verdict.reasons
    raise AssertionError(f"no verdict for {request} / {device}")


def claim(*requests: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
    return make_resource_claim("claim-0", *requests, **kwargs)


def test_selector_reasons_name_the_class_or_request_and_the_expression() -> None:
    slices = [
        node_slice(gpu("gpu-0", attributes={"type": "gpu"})),
        make_resource_slice("nic", driver="nic.example.com", node="node-1", devices=[gpu("nic-0")]),
    ]
    selector = f'device.attributes["{DRIVER}"].type == "mig"'
    allocator = Allocator(slices, [GPU_CLASS])

    results, recorder = explain(
        allocator, claim(make_device_request("gpu", "gpu.nvidia.com", selectors=[selector]))
    )

    assert results is None
    assert reasons_for(recorder, "gpu", "nic-0") == [
        ClassSelectorFalse("gpu.nvidia.com", 0, f'device.driver == "{DRIVER}"')
    ]
    assert reasons_for(recorder, "gpu", "gpu-0") == [RequestSelectorFalse(0, selector)]
    text = render_explanation(recorder.explanation)
    assert "node node-1: claims do not fit" in text
    assert (
        f"gpu.nvidia.com/node-1/gpu-0: rejected, request selector #0 is false: {selector}" in text
    )


def test_already_allocated_names_the_claim_holding_the_device() -> None:
    holder = make_resource_claim("training", namespace="team-a")
    holder["status"] = {
        "allocation": {
            "devices": {
                "results": [
                    {"request": "gpu", "driver": DRIVER, "pool": "node-1", "device": "gpu-0"}
                ]
            }
        }
    }
    allocator = Allocator(
        [node_slice(gpu("gpu-0"))], [GPU_CLASS], allocated=AllocatedState([holder])
    )

    results, recorder = explain(allocator, claim(make_device_request("gpu", "gpu.nvidia.com")))

    assert results is None
    assert reasons_for(recorder, "gpu", "gpu-0") == [AlreadyAllocated("team-a/training")]
    assert "already allocated to claim team-a/training" in render_explanation(recorder.explanation)


def test_device_picked_by_an_earlier_request_of_the_attempt() -> None:
    allocator = Allocator([node_slice(gpu("gpu-0"))], [GPU_CLASS])

    results, recorder = explain(
        allocator,
        claim(
            make_device_request("a", "gpu.nvidia.com"), make_device_request("b", "gpu.nvidia.com")
        ),
    )

    assert results is None
    assert reasons_for(recorder, "b", "gpu-0") == [PickedInThisAttempt("default/claim-0", "a")]


def test_exhausted_counter_reports_counter_amounts_and_consumers() -> None:
    slices = [
        node_slice(
            gpu("gpu-0-full", capacity={"memory": "40Gi"}, consumes={"gpu-0": {"memory": "40Gi"}}),
            gpu("gpu-0-3g", capacity={"memory": "20Gi"}, consumes={"gpu-0": {"memory": "20Gi"}}),
            name="devices",
            pool="node-1",
            slice_count=2,
        ),
        make_resource_slice(
            "counters",
            node="node-1",
            pool="node-1",
            slice_count=2,
            shared_counters={"gpu-0": {"memory": "40Gi"}},
        ),
    ]
    allocator = Allocator(slices, [GPU_CLASS], features=Features(partitionable_devices=True))
    # The full GPU is taken first; the 3g partition then finds the memory counter used up.
    results, recorder = explain(
        allocator,
        claim(
            make_device_request("big", "gpu.nvidia.com"),
            make_device_request("small", "gpu.nvidia.com"),
        ),
    )

    assert results is None
    exhausted = [
        r for r in reasons_for(recorder, "small", "gpu-0-3g") if isinstance(r, CountersExhausted)
    ]
    assert exhausted == [
        CountersExhausted(
            domain="pool gpu.nvidia.com/node-1",
            counter_set="gpu-0",
            counter="memory",
            needed="20Gi",
            available="0",
            consumers=(
                CounterConsumer(
                    DeviceRef(DRIVER, "node-1", "gpu-0-full"), "default/claim-0", "big"
                ),
            ),
        )
    ]
    assert (
        "counter gpu-0/memory of pool gpu.nvidia.com/node-1 exhausted: needs 20Gi, 0 available"
        in (exhausted[0].describe())
    )


def test_counters_consumed_by_allocated_devices_are_attributed_to_their_claims() -> None:
    holder = make_resource_claim("inference")
    holder["status"] = {
        "allocation": {
            "devices": {
                "results": [
                    {"request": "gpu", "driver": DRIVER, "pool": "node-1", "device": "gpu-0-full"}
                ]
            }
        }
    }
    slices = [
        node_slice(
            gpu("gpu-0-full", consumes={"gpu-0": {"memory": "40Gi"}}),
            gpu("gpu-0-3g", consumes={"gpu-0": {"memory": "20Gi"}}),
            shared_counters={"gpu-0": {"memory": "40Gi"}},
            pool="node-1",
        )
    ]
    allocator = Allocator(
        slices,
        [GPU_CLASS],
        features=Features(partitionable_devices=True, release="1.34"),
        allocated=AllocatedState([holder]),
    )

    _, recorder = explain(allocator, claim(make_device_request("gpu", "gpu.nvidia.com")))

    (reason,) = reasons_for(recorder, "gpu", "gpu-0-3g")
    assert isinstance(reason, CountersExhausted)
    assert reason.domain == "ResourceSlice node-1-gpus"
    assert reason.consumers == (
        CounterConsumer(DeviceRef(DRIVER, "node-1", "gpu-0-full"), "default/inference"),
    )
    assert "(consumed by gpu.nvidia.com/node-1/gpu-0-full (default/inference))" in reason.describe()


def test_constraint_reasons_show_the_values() -> None:
    slices = [
        node_slice(
            gpu("gpu-0", attributes={"productName": "H100"}),
            gpu("gpu-1", attributes={"productName": "A100"}),
            gpu("gpu-2"),
        )
    ]
    allocator = Allocator(slices, [GPU_CLASS])

    results, recorder = explain(
        allocator,
        claim(
            make_device_request("gpus", "gpu.nvidia.com", count=2),
            constraints=[{"matchAttribute": f"{DRIVER}/productName"}],
        ),
    )

    assert results is None
    assert ConstraintMismatch(f"{DRIVER}/productName", '"A100"', '"H100"') in reasons_for(
        recorder, "gpus", "gpu-1"
    )
    assert AttributeMissing(f"{DRIVER}/productName", "matchAttribute") in reasons_for(
        recorder, "gpus", "gpu-2"
    )


def test_distinct_violation_reason() -> None:
    slices = [
        node_slice(gpu("gpu-0", attributes={"numa": 0}), gpu("gpu-1", attributes={"numa": 0}))
    ]
    allocator = Allocator(slices, [GPU_CLASS], features=Features(consumable_capacity=True))

    _, recorder = explain(
        allocator,
        claim(
            make_device_request("gpus", "gpu.nvidia.com", count=2),
            constraints=[{"distinctAttribute": f"{DRIVER}/numa"}],
        ),
    )

    assert reasons_for(recorder, "gpus", "gpu-1") == [DistinctViolation(f"{DRIVER}/numa", "0")]


def test_untolerated_taint_reason_names_key_value_and_effect() -> None:
    taint = {"key": "nvidia.com/xid", "value": "79", "effect": "NoExecute"}
    allocator = Allocator(
        [node_slice(gpu("gpu-0", taints=[taint]))],
        [GPU_CLASS],
        features=Features(device_taints=True),
    )

    _, recorder = explain(allocator, claim(make_device_request("gpu", "gpu.nvidia.com")))

    (reason,) = reasons_for(recorder, "gpu", "gpu-0")
    assert reason == UntoleratedTaint("nvidia.com/xid", "79", "NoExecute")
    assert reason.describe() == "untolerated taint nvidia.com/xid=79:NoExecute"


def test_incomplete_and_invalid_pools_are_reported() -> None:
    slices = [
        make_resource_slice(
            "half", node="node-1", pool="pool-a", slice_count=2, devices=[gpu("a")]
        ),
        make_resource_slice(
            "dup-1", node="node-1", pool="pool-b", slice_count=2, devices=[gpu("b")]
        ),
        make_resource_slice(
            "dup-2", node="node-1", pool="pool-b", slice_count=2, devices=[gpu("b")]
        ),
    ]
    recorder = ExplainRecorder()
    with pytest.raises(AllocationError, match="invalid resource pools were encountered"):
        Allocator(slices, [GPU_CLASS]).allocate(
            NODE, [claim(make_device_request("gpu", "gpu.nvidia.com"))], tracer=recorder
        )

    assert recorder.explanation.pools == [
        (f"{DRIVER}/pool-a", PoolIncomplete()),
        (f"{DRIVER}/pool-b", PoolInvalid("duplicate device name b")),
    ]
    assert recorder.explanation.success is False
    assert "invalid resource pools" in recorder.explanation.error
    text = render_explanation(recorder.explanation)
    assert f"pool {DRIVER}/pool-a: skipped, pool is incomplete" in text


def test_capacity_reasons() -> None:
    policy = {"default": "1Gi", "validRange": {"min": "1Gi", "max": "8Gi", "step": "1Gi"}}
    shared = make_slice_device("gpu-0", allow_multiple_allocations=True)
    shared["capacity"] = {"memory": {"value": "16Gi", "requestPolicy": policy}}
    allocator = Allocator(
        [node_slice(shared)], [GPU_CLASS], features=Features(consumable_capacity=True)
    )

    def rejected(capacity: dict[str, str], requests: int = 1) -> list[Reason]:
        """The reasons the last of `requests` identical requests could not share gpu-0."""
        request = make_device_request("gpu", "gpu.nvidia.com", capacity=capacity)
        copies = [{**request, "name": f"r{i}"} for i in range(requests)]
        _, recorder = explain(allocator, claim(*copies))
        return reasons_for(recorder, f"r{requests - 1}", "gpu-0")

    assert rejected({"cores": "1"}) == [CapacityUndefined(("cores",))]
    assert rejected({"memory": "9Gi"}) == [CapacityPolicyViolated("memory", "9Gi")]
    assert rejected({"memory": "7Gi"}, requests=3) == [
        CapacityInsufficient("memory", "7Gi", "14Gi", "16Gi")
    ]


def test_backtracking_is_visible_and_the_final_choice_is_marked() -> None:
    slices = [
        node_slice(
            gpu("gpu-big", capacity={"memory": "80Gi"}),
            gpu("gpu-small", capacity={"memory": "40Gi"}),
        )
    ]
    at_least = 'device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("{}")) >= 0'
    events: list[TraceEvent] = []
    recorder = ExplainRecorder()

    def tracer(event: TraceEvent) -> None:
        events.append(event)
        recorder(event)

    results = Allocator(slices, [GPU_CLASS]).allocate(
        NODE,
        [
            claim(
                make_device_request("any", "gpu.nvidia.com", selectors=[at_least.format("40Gi")]),
                make_device_request("large", "gpu.nvidia.com", selectors=[at_least.format("80Gi")]),
            )
        ],
        tracer=tracer,
    )

    assert results is not None
    kinds = [type(e).__name__ for e in events]
    assert "DeviceReleased" in kinds
    assert isinstance(events[-1], AllocationFinished)
    assert events[-1].success is True
    verdicts = {
        (entry.request, ref.device): verdict.chosen
        for entry in recorder.explanation.requests
        for ref, verdict in entry.devices.items()
    }
    assert verdicts[("any", "gpu-big")] is False
    assert verdicts[("any", "gpu-small")] is True
    assert verdicts[("large", "gpu-big")] is True
    assert "gpu.nvidia.com/node-1/gpu-small: allocated" in render_explanation(recorder.explanation)


def test_cel_runtime_error_is_traced_then_raised() -> None:
    selector = f'device.attributes["{DRIVER}"].model == "H100"'
    recorder = ExplainRecorder()

    with pytest.raises(AllocationError, match="CEL runtime error"):
        Allocator([node_slice(gpu("gpu-0"))], [GPU_CLASS]).allocate(
            NODE,
            [claim(make_device_request("gpu", "gpu.nvidia.com", selectors=[selector]))],
            tracer=recorder,
        )

    (reason,) = reasons_for(recorder, "gpu", "gpu-0")
    assert isinstance(reason, SelectorError)
    assert "no such key" in reason.message
    assert "CEL runtime error" in recorder.explanation.error


def test_subrequest_fallback_is_noted() -> None:
    allocator = Allocator([node_slice(gpu("gpu-0"))], [GPU_CLASS])
    first_available = {
        "name": "gpu",
        "firstAvailable": [
            {"name": "many", "deviceClassName": "gpu.nvidia.com", "count": 40},
            {"name": "two", "deviceClassName": "gpu.nvidia.com", "count": 2},
            {"name": "one", "deviceClassName": "gpu.nvidia.com", "count": 1},
        ],
    }

    results, recorder = explain(allocator, claim(first_available))

    assert results is not None
    notes = {entry.request: entry.notes for entry in recorder.explanation.requests}
    assert notes["gpu/many"] == ["would exceed the limit of 32 results per claim"]
    assert notes["gpu/two"] == ["could not be satisfied, trying the next subrequest"]
    assert DeviceRef(DRIVER, "node-1", "gpu-0") in next(
        entry.devices for entry in recorder.explanation.requests if entry.request == "gpu/one"
    )


def test_full_node_is_explained_even_though_untraced_calls_skip_the_search() -> None:
    holder = make_resource_claim("holder")
    holder["status"] = {
        "allocation": {
            "devices": {
                "results": [{"request": "g", "driver": DRIVER, "pool": "node-1", "device": "gpu-0"}]
            }
        }
    }
    allocator = Allocator(
        [node_slice(gpu("gpu-0"))], [GPU_CLASS], allocated=AllocatedState([holder])
    )
    request = claim(make_device_request("gpu", "gpu.nvidia.com"))

    assert allocator.allocate(NODE, [request]) is None
    _, recorder = explain(allocator, request)
    assert reasons_for(recorder, "gpu", "gpu-0") == [AlreadyAllocated("default/holder")]
