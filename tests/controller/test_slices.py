"""ResourceSlices: complete, deterministic, split at the API limit, and accepted by the apiserver.

Golden files under tests/golden/ hold the exact objects for two reference
nodes; after an intended change, regenerate them with
`DRA_GPU_UPDATE_GOLDEN=1 .venv/bin/pytest tests/controller/test_slices.py` and
review the diff.
"""

from __future__ import annotations

import dataclasses
import json
import os
import random
from pathlib import Path
from types import MappingProxyType
from typing import Any

import pytest

from controller.limits import validate_pool, validate_resource_slice, validate_schema
from controller.slices import build_resource_slices, resource_slice_name
from dra_driver import DEFAULT_DRIVER_NAME
from dra_driver.devices import AllocatableDevice, build_devices, inventory_warnings
from dra_driver.errors import SliceError
from dra_driver.inventory import NodeInventory, discover
from dra_driver.nvml.backend import open_hardware
from dra_driver.nvml.interface import Placement
from dra_driver.testing import (
    a100_40gb_gi_profiles,
    a100_static_mig_inventory,
    dgx_h100_inventory,
    h100_80gb_gi_profiles,
    make_gpu_info,
    make_gpu_inventory,
    make_system_info,
)

GOLDEN = Path(__file__).resolve().parent.parent / "golden"


def _assert_accepted(slices: list[dict[str, Any]]) -> None:
    for version in ("1.34", "1.35"):
        for obj in slices:
            validate_schema(obj, version)
            assert validate_resource_slice(obj, version=version) == []
        assert validate_pool(slices, version=version) == []


def _assert_golden(name: str, slices: list[dict[str, Any]]) -> None:
    path = GOLDEN / f"{name}.json"
    if os.environ.get("DRA_GPU_UPDATE_GOLDEN"):
        path.write_text(json.dumps(slices, indent=2) + "\n")
    assert json.loads(path.read_text()) == slices


def _many_gpus(count: int) -> NodeInventory:
    """`count` non-MIG GPUs on distinct bus ids (more than any real node, to force splitting)."""
    gpus = tuple(
        make_gpu_inventory(
            make_gpu_info(
                model="H100-SXM5-80GB",
                index=i,
                mig_capable=False,
                pci_bus_id=f"{i // 256:04x}:{i % 256:02x}:00.0",
            )
        )
        for i in range(count)
    )
    return NodeInventory(system=make_system_info(), gpus=gpus)


def test_dgx_h100_slice_matches_golden_and_is_accepted() -> None:
    slices = build_resource_slices(
        build_devices(dgx_h100_inventory()), driver=DEFAULT_DRIVER_NAME, node_name="dgx-h100-a"
    )
    _assert_golden("dgx-h100", slices)
    _assert_accepted(slices)
    (only,) = slices
    assert only["metadata"] == {"name": "dgx-h100-a-gpu.nvidia.com-0"}
    assert only["spec"]["nodeName"] == "dgx-h100-a"
    assert only["spec"]["pool"] == {"name": "dgx-h100-a", "generation": 0, "resourceSliceCount": 1}
    assert [d["name"] for d in only["spec"]["devices"]] == [f"gpu-{i}" for i in range(8)]


def test_a100_static_mig_slice_matches_golden_and_is_accepted() -> None:
    slices = build_resource_slices(
        build_devices(a100_static_mig_inventory()),
        driver=DEFAULT_DRIVER_NAME,
        node_name="a100-mig",
        generation=3,
    )
    _assert_golden("a100-static-mig", slices)
    _assert_accepted(slices)
    names = [d["name"] for d in slices[0]["spec"]["devices"]]
    assert names == [
        "gpu-0-mig-1g5gb-19-2",
        "gpu-0-mig-1g5gb-me-20-3",
        "gpu-0-mig-2g10gb-14-0",
        "gpu-0-mig-3g20gb-9-4",
        "gpu-1",
    ]
    assert slices[0]["spec"]["pool"]["generation"] == 3


def test_200_devices_are_split_into_two_slices() -> None:
    devices = build_devices(_many_gpus(200))
    slices = build_resource_slices(devices, driver=DEFAULT_DRIVER_NAME, node_name="big-node")
    assert [len(s["spec"]["devices"]) for s in slices] == [128, 72]
    assert [s["metadata"]["name"] for s in slices] == [
        "big-node-gpu.nvidia.com-0",
        "big-node-gpu.nvidia.com-1",
    ]
    assert {s["spec"]["pool"]["resourceSliceCount"] for s in slices} == {2}
    listed = [d["name"] for s in slices for d in s["spec"]["devices"]]
    assert listed == [f"gpu-{i}" for i in range(200)]  # PCI order survives the split
    _assert_accepted(slices)


def test_max_devices_per_slice_can_be_lowered() -> None:
    devices = build_devices(dgx_h100_inventory())
    slices = build_resource_slices(
        devices, driver=DEFAULT_DRIVER_NAME, node_name="n", max_devices_per_slice=3
    )
    assert [len(s["spec"]["devices"]) for s in slices] == [3, 3, 2]
    assert {s["spec"]["pool"]["resourceSliceCount"] for s in slices} == {3}
    _assert_accepted(slices)


@pytest.mark.parametrize("bad", [0, 129, -1])
def test_max_devices_per_slice_stays_within_the_api_limit(bad: int) -> None:
    with pytest.raises(SliceError, match="max devices per slice"):
        build_resource_slices(
            [], driver=DEFAULT_DRIVER_NAME, node_name="n", max_devices_per_slice=bad
        )


def test_node_without_devices_publishes_one_empty_slice() -> None:
    slices = build_resource_slices([], driver=DEFAULT_DRIVER_NAME, node_name="cpu-node")
    assert len(slices) == 1
    assert slices[0]["spec"]["devices"] == []
    assert slices[0]["spec"]["pool"]["resourceSliceCount"] == 1
    _assert_accepted(slices)


@pytest.mark.parametrize("inventory", [dgx_h100_inventory(), a100_static_mig_inventory()])
def test_input_order_does_not_change_the_output(inventory: NodeInventory) -> None:
    devices = build_devices(inventory)
    expected = build_resource_slices(devices, driver=DEFAULT_DRIVER_NAME, node_name="n")
    for seed in range(3):
        shuffled = list(devices)
        random.Random(seed).shuffle(shuffled)
        got = build_resource_slices(shuffled, driver=DEFAULT_DRIVER_NAME, node_name="n")
        assert got == expected


def test_pool_name_and_generation_are_carried() -> None:
    slices = build_resource_slices(
        build_devices(dgx_h100_inventory()),
        driver=DEFAULT_DRIVER_NAME,
        node_name="node-a",
        pool_name="rack-1/node-a",
        generation=42,
    )
    assert slices[0]["spec"]["pool"] == {
        "name": "rack-1/node-a",
        "generation": 42,
        "resourceSliceCount": 1,
    }
    _assert_accepted(slices)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"node_name": "Node_A"}, "node name 'Node_A'"),
        ({"node_name": ""}, "node name ''"),
        ({"driver": "gpu_nvidia"}, "driver name 'gpu_nvidia'"),
        ({"driver": "a" * 64 + ".com"}, "longer than 63"),
        ({"generation": -1}, "generation -1"),
        ({"pool_name": "bad pool"}, "spec.pool.name"),
        ({"version": "1.33"}, "limits are known for 1.34, 1.35"),
    ],
)
def test_bad_arguments_raise_slice_error(kwargs: dict[str, Any], message: str) -> None:
    args: dict[str, Any] = {"driver": DEFAULT_DRIVER_NAME, "node_name": "node-a"} | kwargs
    with pytest.raises(SliceError, match=message):
        build_resource_slices(build_devices(dgx_h100_inventory()), **args)


def test_invalid_device_is_refused_before_publishing() -> None:
    good = build_devices(dgx_h100_inventory())[0]
    long_name = "x" * 70
    bad = dataclasses.replace(
        good,
        attributes=MappingProxyType(
            {**good.attributes, "productName": type(good.attributes["type"]).of_string(long_name)}
        ),
    )
    with pytest.raises(SliceError) as info:
        build_resource_slices([bad], driver=DEFAULT_DRIVER_NAME, node_name="node-a")
    assert str(info.value) == (
        'ResourceSlice node-a-gpu.nvidia.com-0: spec.devices[0].attributes["productName"] '
        "(device gpu-0): string longer than 64 characters"
    )


def test_devices_consuming_undefined_counters_are_refused() -> None:
    device: AllocatableDevice = build_devices(dgx_h100_inventory())[0]
    partitionable = dataclasses.replace(
        device,
        consumes_counters=MappingProxyType({"gpu-0-counter-set": MappingProxyType({"memory": 1})}),
    )
    with pytest.raises(SliceError, match="'gpu-0-counter-set' is not defined in the pool"):
        build_resource_slices([partitionable], driver=DEFAULT_DRIVER_NAME, node_name="n")


@pytest.mark.parametrize(
    ("node", "driver", "expected"),
    [
        ("node-a", "gpu.nvidia.com", "node-a-gpu.nvidia.com-0"),
        ("node-a", "GPU.NVIDIA.COM", "node-a-gpu.nvidia.com-0"),
        ("ip-10-0-0-1.ec2.internal", "gpu.nvidia.com", "ip-10-0-0-1.ec2.internal-gpu.nvidia.com-0"),
        ("node..a", "gpu.nvidia.com", "node.a-gpu.nvidia.com-0"),
        ("n", "x_y.example", "n-x-y.example-0"),
    ],
)
def test_slice_names_are_deterministic_dns_subdomains(
    node: str, driver: str, expected: str
) -> None:
    assert resource_slice_name(node, driver, 0) == expected


def test_overlong_slice_names_are_cut_with_a_hash_and_stay_distinct() -> None:
    label = "a" * 63
    node_a = ".".join([label] * 3) + ".b" * 30
    node_b = ".".join([label] * 3) + ".c" * 30
    names = {
        resource_slice_name(node, DEFAULT_DRIVER_NAME, index)
        for node in (node_a, node_b)
        for index in (0, 1)
    }
    assert len(names) == 4
    for name in names:
        assert len(name) <= 253
        assert validate_resource_slice(_named(name)) == []
    assert resource_slice_name(node_a, DEFAULT_DRIVER_NAME, 1) == resource_slice_name(
        node_a, DEFAULT_DRIVER_NAME, 1
    )


def _named(name: str) -> dict[str, Any]:
    (obj,) = build_resource_slices([], driver=DEFAULT_DRIVER_NAME, node_name="n")
    obj["metadata"]["name"] = name
    return obj


# --- end to end on the simulated backend ---------------------------------------------


def _publish(spec: str, node_name: str) -> tuple[NodeInventory, list[dict[str, Any]]]:
    hardware = open_hardware(spec, node_name=node_name)
    inventory = discover(hardware.nvml)
    slices = build_resource_slices(
        build_devices(inventory), driver=DEFAULT_DRIVER_NAME, node_name=node_name
    )
    _assert_accepted(slices)
    return inventory, slices


def test_simulated_dgx_h100_publishes_eight_full_gpus() -> None:
    inventory, slices = _publish("sim:dgx-h100", "sim-dgx-h100")
    (only,) = slices
    devices = only["spec"]["devices"]
    assert [d["name"] for d in devices] == [f"gpu-{i}" for i in range(8)]
    assert {d["attributes"]["productName"]["string"] for d in devices} == {"NVIDIA H100 80GB HBM3"}
    assert {d["capacity"]["memory"]["value"] for d in devices} == {"81559Mi"}
    assert devices[0]["attributes"]["driverVersion"] == {"version": "570.172.8"}
    bus_ids = [d["attributes"]["resource.kubernetes.io/pciBusID"]["string"] for d in devices]
    assert bus_ids == sorted(bus_ids)
    assert inventory.gpus[0].gi_profiles == h100_80gb_gi_profiles()
    assert inventory_warnings(inventory) == []


def test_simulated_dgx_a100_with_mig_on_publishes_its_mig_devices() -> None:
    hardware = open_hardware("sim:dgx-a100-40gb", node_name="sim-a100")
    nvml = hardware.nvml
    gpu0, gpu1 = (gpu.uuid for gpu in nvml.gpus()[:2])
    # GPU 0: the partition of a100_static_mig_inventory(); GPU 1: one 3g GI split into two 1c CIs.
    for profile_id, placement, ci_profile in [
        (9, Placement(4, 4), 2),
        (14, Placement(0, 2), 1),
        (19, Placement(2, 1), 0),
        (20, Placement(3, 1), 0),
    ]:
        gi = nvml.create_gpu_instance(gpu0, profile_id, placement)
        nvml.create_compute_instance(gpu0, gi.id, ci_profile)
    shared_gi = nvml.create_gpu_instance(gpu1, 9, Placement(0, 4))
    nvml.create_compute_instance(gpu1, shared_gi.id, 0)
    nvml.create_compute_instance(gpu1, shared_gi.id, 0)

    inventory = discover(nvml)
    slices = build_resource_slices(
        build_devices(inventory), driver=DEFAULT_DRIVER_NAME, node_name="sim-a100"
    )
    _assert_accepted(slices)
    (only,) = slices
    names = [d["name"] for d in only["spec"]["devices"]]
    assert names == [
        "gpu-0-mig-1g5gb-19-2",
        "gpu-0-mig-1g5gb-me-20-3",
        "gpu-0-mig-2g10gb-14-0",
        "gpu-0-mig-3g20gb-9-4",
        "gpu-1-mig-1c3g20gb-9-0-ci0",
        "gpu-1-mig-1c3g20gb-9-0-ci1",
    ]
    by_name = {d["name"]: d for d in only["spec"]["devices"]}
    assert by_name["gpu-0-mig-3g20gb-9-4"]["capacity"]["memory"] == {"value": "19968Mi"}
    assert by_name["gpu-1-mig-1c3g20gb-9-0-ci1"]["capacity"]["multiprocessors"] == {"value": "14"}
    assert inventory.gpus[0].gi_profiles == a100_40gb_gi_profiles()
    warnings = inventory_warnings(inventory)
    assert len(warnings) == 7  # GPUs 2..7: MIG on without MIG devices; GPU 1: shared GI
    assert sum("nothing is published" in w for w in warnings) == 6
