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
import yaml

from controller.limits import validate_pool, validate_resource_slice, validate_schema
from controller.slices import Layout, build_resource_slices, choose_layout, resource_slice_name
from dra_driver import DEFAULT_DRIVER_NAME
from dra_driver.composition.hardware import open_hardware
from dra_driver.errors import ConfigError, SliceError
from dra_driver.hardware.nvml.interface import Placement
from dra_driver.node.devices import AllocatableDevice, build_devices, inventory_warnings
from dra_driver.node.inventory import NodeInventory, discover
from tests.fakes import (
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
    for version in ("1.34", "1.35", "1.37"):
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
        ({"version": "1.33"}, "limits are known for 1.34, 1.35, 1.36, 1.37"),
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


# --- dynamic MIG: partitionable devices in both layouts -------------------------------


def _dynamic_slices(
    spec: str, layout: Layout, **kwargs: Any
) -> tuple[list[AllocatableDevice], list[dict[str, Any]]]:
    """Publish a simulated node with dynamic MIG. `build_resource_slices` has run every
    per-slice limit check of the layout's version; the pool-wide rules are checked here,
    the schema in `test_every_dynamic_slice_passes_the_schema_and_the_limits`."""
    devices = build_devices(discover(open_hardware(spec).nvml), dynamic_mig=True)
    slices = build_resource_slices(
        devices, driver=DEFAULT_DRIVER_NAME, node_name="node-a", layout=layout, **kwargs
    )
    assert validate_pool(slices, version=layout.removeprefix("v")) == []
    assert {obj["spec"]["pool"]["resourceSliceCount"] for obj in slices} == {len(slices)}
    assert len({obj["spec"]["pool"]["generation"] for obj in slices}) == 1
    assert [obj["metadata"]["name"] for obj in slices] == [
        f"node-a-gpu.nvidia.com-{i}" for i in range(len(slices))
    ]
    return devices, slices


MIXED_NODE: list[dict[str, object]] = [
    {"model": "H100-SXM5-80GB", "count": 9},
    {"model": "L4", "count": 2},
    {"model": "A100-SXM4-40GB", "migEnabled": False},
    {"model": "A100-SXM4-40GB", "migEnabled": True},
]


@pytest.mark.parametrize("layout", ["v1.34", "v1.35"])
@pytest.mark.parametrize(
    "node", ["sim:dgx-h100", "sim:dgx-h200", "sim:dgx-a100-40gb", "sim:a30-node", "mixed"]
)
def test_every_dynamic_slice_passes_the_schema_and_the_limits(
    tmp_path: Path, node: str, layout: Layout
) -> None:
    """Every emitted slice, whole: the limits of the layout's version and the strict
    OpenAPI schema (1.35 and 1.37, and 1.34 too for the v1.34 layout; the v1.35
    layout is also what 1.36 and 1.37 use, under their limits)."""
    spec = _shape(tmp_path, *MIXED_NODE) if node == "mixed" else node
    _, slices = _dynamic_slices(spec, layout)
    version = layout.removeprefix("v")
    versions = {version, "1.36", "1.37"} if version == "1.35" else {version}
    for obj in slices:
        for limits in sorted(versions):
            assert validate_resource_slice(obj, version=limits) == []
        for schema in sorted({"1.35", "1.37", version}):
            validate_schema(obj, schema)


def _shape(tmp_path: Path, *gpus: dict[str, object]) -> str:
    path = tmp_path / "shape.yaml"
    path.write_text(yaml.safe_dump({"gpus": list(gpus)}))
    return f"sim:{path}"


def _counters_in(obj: dict[str, Any]) -> int:
    return sum(len(s["counters"]) for s in obj["spec"].get("sharedCounters", []))


def _set_names(obj: dict[str, Any]) -> list[str]:
    return [s["name"] for s in obj["spec"].get("sharedCounters", [])]


def _consumed_sets(obj: dict[str, Any]) -> set[str]:
    return {
        use["counterSet"]
        for device in obj["spec"].get("devices", [])
        for use in device.get("consumesCounters", [])
    }


def test_dgx_h100_v134_layout_keeps_each_gpu_with_its_counter_set() -> None:
    devices, slices = _dynamic_slices("sim:dgx-h100", "v1.34")
    assert len(devices) == 8 * 26
    assert [len(obj["spec"]["devices"]) for obj in slices] == [52, 52, 52, 52]
    assert [_set_names(obj) for obj in slices] == [
        [f"gpu-{i}-counter-set", f"gpu-{i + 1}-counter-set"] for i in (0, 2, 4, 6)
    ]
    for obj in slices:
        assert _counters_in(obj) == 30  # two sets of 15: the 1.34 limit is 32
        assert _consumed_sets(obj) == set(_set_names(obj))
    # A 1.35 apiserver refuses these: devices and sharedCounters share a slice.
    assert any(
        "only one of `sharedCounters` or `devices`" in message
        for message in validate_resource_slice(slices[0], version="1.35")
    )


def test_dgx_h100_v135_layout_has_a_counter_slice_and_profile_major_device_slices() -> None:
    _, slices = _dynamic_slices("sim:dgx-h100", "v1.35")
    counter_slice, *device_slices = slices
    assert "devices" not in counter_slice["spec"]
    assert _set_names(counter_slice) == [f"gpu-{i}-counter-set" for i in range(8)]
    assert all("sharedCounters" not in obj["spec"] for obj in device_slices)
    assert [len(obj["spec"]["devices"]) for obj in device_slices] == [56, 56, 56, 40]
    profiles = [
        sorted(
            {
                d["attributes"].get("profile", {"string": "gpu"})["string"]
                for d in obj["spec"]["devices"]
            }
        )
        for obj in device_slices
    ]
    assert profiles == [
        ["1g.10gb"],
        ["1g.10gb+me"],
        ["1g.20gb", "2g.20gb"],
        ["3g.40gb", "4g.40gb", "7g.80gb", "gpu"],
    ]
    first = [d["name"] for d in device_slices[0]["spec"]["devices"]]
    assert first[:8] == [
        *(f"gpu-0-mig-1g10gb-19-{s}" for s in (6, 5, 4, 3, 2, 1, 0)),
        "gpu-1-mig-1g10gb-19-6",
    ]
    # A 1.34 apiserver refuses device slices whose counter sets live elsewhere.
    assert any(
        "must reference a counterSet defined in the ResourceSlice" in message
        for message in validate_resource_slice(device_slices[0], version="1.34")
    )


@pytest.mark.parametrize("layout", ["v1.34", "v1.35"])
def test_dgx_a100_with_mig_on_publishes_only_mig_placements(layout: Layout) -> None:
    devices, slices = _dynamic_slices("sim:dgx-a100-40gb", layout)
    assert len(devices) == 8 * 25
    kinds = {
        d["attributes"]["type"]["string"] for obj in slices for d in obj["spec"].get("devices", [])
    }
    assert kinds == {"mig"}
    assert sum(len(obj["spec"].get("devices", [])) for obj in slices) == 200


def test_a30_node_layouts() -> None:
    _, v134 = _dynamic_slices("sim:a30-node", "v1.34")
    assert [(len(obj["spec"]["devices"]), _counters_in(obj)) for obj in v134] == [
        (26, 22),
        (26, 22),
    ]
    _, v135 = _dynamic_slices("sim:a30-node", "v1.35")
    assert [len(_set_names(obj)) for obj in v135] == [4, 0]
    assert len(v135[1]["spec"]["devices"]) == 52


@pytest.mark.parametrize("layout", ["v1.34", "v1.35"])
def test_mixed_node_splits_counter_sets_and_lets_plain_gpus_share_slices(
    tmp_path: Path, layout: Layout
) -> None:
    devices, slices = _dynamic_slices(_shape(tmp_path, *MIXED_NODE), layout)
    assert len(devices) == 9 * 26 + 2 + 1 + 25
    listed = [d["name"] for obj in slices for d in obj["spec"].get("devices", [])]
    assert sorted(listed) == sorted(d.name for d in devices)
    plain = {"gpu-9", "gpu-10", "gpu-11"}  # L4 x2 and the A100 with MIG off: no counters
    for device in devices:
        assert bool(device.consumes_counters) == (device.name not in plain)
    sets = [name for obj in slices for name in _set_names(obj)]
    assert sorted(sets) == sorted(
        [f"gpu-{i}-counter-set" for i in range(9)] + ["gpu-12-counter-set"]
    )
    if layout == "v1.35":
        assert [len(_set_names(obj)) for obj in slices[:2]] == [8, 2]  # at most 8 sets per slice
        assert all(len(obj["spec"].get("devices", [])) <= 64 for obj in slices)
    else:
        assert all(_counters_in(obj) <= 32 for obj in slices)
        holding = [obj for obj in slices if plain & {d["name"] for d in obj["spec"]["devices"]}]
        assert holding
        assert all(_consumed_sets(obj) for obj in holding)  # shared with MIG GPUs


def test_v134_cannot_split_a_gpu_but_v135_can() -> None:
    devices = build_devices(discover(open_hardware("sim:dgx-h100").nvml), dynamic_mig=True)
    with pytest.raises(SliceError, match=r"do not fit in one v1\.34 ResourceSlice"):
        build_resource_slices(
            devices,
            driver=DEFAULT_DRIVER_NAME,
            node_name="n",
            layout="v1.34",
            max_devices_per_slice=20,
        )
    slices = build_resource_slices(
        devices,
        driver=DEFAULT_DRIVER_NAME,
        node_name="node-a",
        layout="v1.35",
        max_devices_per_slice=20,
    )
    assert validate_pool(slices, version="1.35") == []
    assert max(len(obj["spec"].get("devices", [])) for obj in slices) == 20


@pytest.mark.parametrize("layout", ["v1.34", "v1.35"])
def test_dynamic_slices_do_not_depend_on_input_order(layout: Layout) -> None:
    devices = build_devices(discover(open_hardware("sim:a30-node").nvml), dynamic_mig=True)
    expected = build_resource_slices(
        devices, driver=DEFAULT_DRIVER_NAME, node_name="n", layout=layout
    )
    shuffled = list(devices)
    random.Random(7).shuffle(shuffled)
    assert (
        build_resource_slices(shuffled, driver=DEFAULT_DRIVER_NAME, node_name="n", layout=layout)
        == expected
    )


def test_generation_is_carried_by_counter_and_device_slices() -> None:
    devices = build_devices(discover(open_hardware("sim:a30-node").nvml), dynamic_mig=True)
    slices = build_resource_slices(
        devices, driver=DEFAULT_DRIVER_NAME, node_name="n", layout="v1.35", generation=9
    )
    assert {
        (obj["spec"]["pool"]["generation"], obj["spec"]["pool"]["resourceSliceCount"])
        for obj in slices
    } == {(9, 2)}


def test_layout_must_match_the_kubernetes_version() -> None:
    with pytest.raises(SliceError, match=r"slice layout v1\.34 is for Kubernetes 1\.34"):
        build_resource_slices(
            [], driver=DEFAULT_DRIVER_NAME, node_name="n", version="1.35", layout="v1.34"
        )
    (only,) = build_resource_slices([], driver=DEFAULT_DRIVER_NAME, node_name="n", layout="v1.34")
    assert only["spec"]["devices"] == []


def test_counter_sets_defined_differently_are_refused() -> None:
    devices = build_devices(discover(open_hardware("sim:dgx-h100").nvml), dynamic_mig=True)
    full = next(d for d in devices if d.name == "gpu-0")
    (counter_set,) = full.counter_sets
    other = dataclasses.replace(
        counter_set, counters=MappingProxyType({**counter_set.counters, "memory-slice-0": 2})
    )
    with pytest.raises(SliceError, match="counter set 'gpu-0-counter-set' is defined differently"):
        build_resource_slices(
            [*devices, dataclasses.replace(full, name="gpu-0-copy", counter_sets=(other,))],
            driver=DEFAULT_DRIVER_NAME,
            node_name="n",
        )


@pytest.mark.parametrize(
    ("server", "requested", "expected"),
    [
        ((1, 34), "auto", "v1.34"),
        ((1, 35), "auto", "v1.35"),
        ((1, 36), "auto", "v1.35"),
        ((2, 0), "auto", "v1.35"),
        (None, "auto", "v1.35"),
        ((1, 35), "v1.34", "v1.34"),
        ((1, 34), "v1.35", "v1.35"),
    ],
)
def test_choose_layout(server: tuple[int, int] | None, requested: str, expected: str) -> None:
    assert choose_layout(server, requested) == expected


def test_choose_layout_refuses_unknown_layouts() -> None:
    with pytest.raises(ConfigError, match=r"partitionable layout 'v1\.36': must be one of auto"):
        choose_layout((1, 36), "v1.36")
