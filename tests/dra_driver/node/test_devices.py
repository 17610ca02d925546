"""The device model matches NVIDIA's names, attributes and capacities exactly."""

from __future__ import annotations

import copy
import dataclasses
from types import MappingProxyType

import pytest

from dra_driver.errors import InventoryError
from dra_driver.hardware.nvml import codes
from dra_driver.hardware.nvml.interface import GpuInstanceProfile, Placement
from dra_driver.hardware.nvml.naming import mig_profile_name
from dra_driver.node.devices import (
    AllocatableDevice,
    AttributeValue,
    build_devices,
    inventory_warnings,
    mig_device_name,
    normalize_version,
)
from dra_driver.node.inventory import NodeInventory
from tests.fakes import (
    a100_40gb_gi_profiles,
    a100_static_mig_inventory,
    dgx_h100_inventory,
    h100_80gb_gi_profiles,
    make_gpu_info,
    make_gpu_inventory,
    make_mig_device,
    make_system_info,
)

GPU_ATTRIBUTES = {
    "type",
    "uuid",
    "productName",
    "brand",
    "architecture",
    "cudaComputeCapability",
    "driverVersion",
    "cudaDriverVersion",
    "resource.kubernetes.io/pciBusID",
    "resource.kubernetes.io/pcieRoot",
    "resource.kubernetes.io/numaNode",
    "migCapable",
}
MIG_ATTRIBUTES = {
    "type",
    "uuid",
    "parentUUID",
    "profile",
    "productName",
    "brand",
    "architecture",
    "cudaComputeCapability",
    "driverVersion",
    "cudaDriverVersion",
    "resource.kubernetes.io/pciBusID",
    "resource.kubernetes.io/pcieRoot",
    "resource.kubernetes.io/numaNode",
}
MIG_CAPACITIES = {
    "multiprocessors",
    "copyEngines",
    "decoders",
    "encoders",
    "jpegEngines",
    "ofaEngines",
    "memory",
}


def _node(*gpus: object, driver: str = "550.54.15", cuda: int = 12040) -> NodeInventory:
    return NodeInventory(system=make_system_info(driver, cuda), gpus=tuple(gpus))  # type: ignore[arg-type]


def test_full_gpu_has_exactly_nvidias_attributes() -> None:
    info = make_gpu_info(model="H100-SXM5-80GB", pcie_root="pci0000:15", numa_node=0)
    (device,) = build_devices(_node(make_gpu_inventory(info, h100_80gb_gi_profiles())))
    assert device.name == "gpu-0"
    assert device.kind == "gpu"
    assert device.mig is None
    assert set(device.attributes) == GPU_ATTRIBUTES
    assert {key: value.to_api() for key, value in device.attributes.items()} == {
        "type": {"string": "gpu"},
        "uuid": {"string": info.uuid},
        "productName": {"string": "NVIDIA H100 80GB HBM3"},
        "brand": {"string": "Nvidia"},
        "architecture": {"string": "Hopper"},
        "cudaComputeCapability": {"version": "9.0.0"},
        "driverVersion": {"version": "550.54.15"},
        "cudaDriverVersion": {"version": "12.4.0"},
        "resource.kubernetes.io/pciBusID": {"string": "0000:10:00.0"},
        "resource.kubernetes.io/pcieRoot": {"string": "pci0000:15"},
        "resource.kubernetes.io/numaNode": {"int": 0},
        "migCapable": {"bool": True},
    }
    assert dict(device.capacity) == {"memory": 81559 * 2**20}
    assert device.to_api()["capacity"] == {"memory": {"value": "81559Mi"}}


def test_unknown_topology_is_left_out_not_invented() -> None:
    missing = make_gpu_info(index=0, mig_capable=False)
    negative = make_gpu_info(index=1, numa_node=-1, mig_capable=False)
    for device in build_devices(_node(make_gpu_inventory(missing), make_gpu_inventory(negative))):
        assert set(device.attributes) == GPU_ATTRIBUTES - {
            "resource.kubernetes.io/pcieRoot",
            "resource.kubernetes.io/numaNode",
        }
        assert device.attributes["migCapable"] == AttributeValue.of_bool(False)


def test_device_names_use_the_minor_number() -> None:
    info = make_gpu_info(index=0, minor=5, mig_capable=False)
    assert [d.name for d in build_devices(_node(make_gpu_inventory(info)))] == ["gpu-5"]


def test_static_mig_gpu_advertises_only_its_mig_devices() -> None:
    node = a100_static_mig_inventory()
    devices = build_devices(node)
    parent = node.gpus[0].info
    assert [d.name for d in devices] == [
        "gpu-0-mig-1g5gb-19-2",
        "gpu-0-mig-1g5gb-me-20-3",
        "gpu-0-mig-2g10gb-14-0",
        "gpu-0-mig-3g20gb-9-4",
        "gpu-1",
    ]
    assert "gpu-0" not in {d.name for d in devices}
    assert "gpu-2" not in {d.name for d in devices}
    for device in devices[:4]:
        assert device.kind == "mig"
        assert device.gpu is parent
        assert set(device.attributes) == MIG_ATTRIBUTES
        assert device.attributes["parentUUID"] == AttributeValue.of_string(parent.uuid)
        assert device.attributes["type"] == AttributeValue.of_string("mig")
        assert device.mig is not None
        assert device.attributes["uuid"] == AttributeValue.of_string(device.mig.uuid)


def test_mig_capacities_come_from_the_gi_profile_with_memory_slices() -> None:
    devices = {d.name: d for d in build_devices(a100_static_mig_inventory())}
    three_g = devices["gpu-0-mig-3g20gb-9-4"]
    assert dict(three_g.capacity) == {
        "multiprocessors": 42,
        "copyEngines": 3,
        "decoders": 2,
        "encoders": 0,
        "jpegEngines": 0,
        "ofaEngines": 0,
        "memory": 19968 * 2**20,
        "memorySlice4": 1,
        "memorySlice5": 1,
        "memorySlice6": 1,
        "memorySlice7": 1,
    }
    one_g_me = devices["gpu-0-mig-1g5gb-me-20-3"]
    assert set(one_g_me.capacity) == MIG_CAPACITIES | {"memorySlice3"}
    assert one_g_me.to_api()["capacity"]["memory"] == {"value": "4864Mi"}
    assert one_g_me.attributes["profile"] == AttributeValue.of_string("1g.5gb+me")
    assert one_g_me.capacity["ofaEngines"] == 1


def test_mig_devices_inherit_the_parents_attributes() -> None:
    node = a100_static_mig_inventory()
    parent = node.gpus[0].info
    # The same GPU with MIG off shows what the parent itself would publish.
    as_full_gpu = dataclasses.replace(
        node.gpus[0], info=dataclasses.replace(parent, mig_enabled=False)
    )
    (full,) = build_devices(NodeInventory(node.system, (as_full_gpu,)))
    for mig in build_devices(node)[:4]:
        for key in MIG_ATTRIBUTES - {"type", "uuid", "parentUUID", "profile"}:
            assert mig.attributes[key] == full.attributes[key], key


@pytest.mark.parametrize(
    ("profile_name", "profile_id", "minor", "start", "expected"),
    [
        ("1g.5gb", 19, 0, 0, "gpu-0-mig-1g5gb-19-0"),
        ("1g.10gb+me", 20, 3, 2, "gpu-3-mig-1g10gb-me-20-2"),
        ("7g.80gb", 0, 7, 0, "gpu-7-mig-7g80gb-0-0"),
        ("1g.24gb+me.all", 65, 1, 9, "gpu-1-mig-1g24gb-meall-65-9"),
        ("1g.24gb-me", 67, 1, 3, "gpu-1-mig-1g24gb-me-67-3"),
        ("2g.48gb+gfx", 35, 2, 6, "gpu-2-mig-2g48gb-gfx-35-6"),
    ],
)
def test_mig_names_follow_nvidias_canonical_rule(
    profile_name: str, profile_id: int, minor: int, start: int, expected: str
) -> None:
    profile = GpuInstanceProfile(
        id=profile_id,
        name=profile_name,
        slice_count=int(profile_name[0]),
        instance_count=1,
        memory_mib=1024,
        multiprocessors=1,
        copy_engines=1,
        decoders=0,
        encoders=0,
        jpeg_engines=0,
        ofa_engines=0,
        placements=(Placement(start, 1),),
    )
    parent = make_gpu_info(index=minor, mig_enabled=True)
    assert mig_device_name(make_mig_device(parent, profile, start, gpu_instance_id=7)) == expected


def test_compute_instances_sharing_a_gpu_instance_keep_distinct_names() -> None:
    parent = make_gpu_info(mig_enabled=True)
    three_g = a100_40gb_gi_profiles()[4]
    shared = tuple(
        make_mig_device(
            parent,
            three_g,
            0,
            gpu_instance_id=1,
            compute_instance_id=ci,
            ci_profile_id=0,
            multiprocessors=14,
        )
        for ci in (0, 1)
    )
    node = _node(make_gpu_inventory(parent, a100_40gb_gi_profiles(), shared))
    devices = build_devices(node)
    assert [d.name for d in devices] == [
        "gpu-0-mig-1c3g20gb-9-0-ci0",
        "gpu-0-mig-1c3g20gb-9-0-ci1",
    ]
    assert devices[0].attributes["profile"] == AttributeValue.of_string("1c.3g.20gb")
    assert devices[0].capacity["multiprocessors"] == 14
    assert devices[0].capacity["memory"] == three_g.memory_bytes
    (warning,) = inventory_warnings(node)
    assert "sharing a GPU instance" in warning
    assert "gpu-0-mig-1c3g20gb-9-0-ci1" in warning


def test_h100_default_ci_of_1g20gb_is_not_treated_as_shared() -> None:
    parent = make_gpu_info(model="H100-SXM5-80GB", mig_enabled=True)
    one_g_20 = h100_80gb_gi_profiles()[2]
    mig = make_mig_device(parent, one_g_20, 2, gpu_instance_id=4, ci_profile_id=7)
    (device,) = build_devices(_node(make_gpu_inventory(parent, h100_80gb_gi_profiles(), (mig,))))
    assert device.name == "gpu-0-mig-1g20gb-15-2"
    assert set(device.capacity) == MIG_CAPACITIES | {"memorySlice2", "memorySlice3"}


def test_mig_enabled_gpu_without_mig_devices_is_a_warning() -> None:
    node = a100_static_mig_inventory()
    gpu2 = node.gpus[2].info
    assert inventory_warnings(node) == [
        f"GPU gpu-2 ({gpu2.uuid}) has MIG enabled but no MIG devices: nothing is published for it"
    ]


def test_pending_mig_mode_change_is_a_warning() -> None:
    info = make_gpu_info(mig_enabled=False, mig_pending=True)
    node = _node(make_gpu_inventory(info, a100_40gb_gi_profiles()))
    (warning,) = inventory_warnings(node)
    assert "MIG mode disabled with enabled pending until a GPU reset" in warning
    assert [d.name for d in build_devices(node)] == ["gpu-0"]


def test_clean_node_has_no_warnings() -> None:
    assert inventory_warnings(dgx_h100_inventory()) == []


def test_duplicate_minor_numbers_are_refused() -> None:
    a = make_gpu_info(index=0, minor=3, mig_capable=False)
    b = make_gpu_info(index=1, minor=3, mig_capable=False)
    with pytest.raises(InventoryError, match=r"'gpu-3' is used by GPU .* and GPU"):
        build_devices(_node(make_gpu_inventory(a), make_gpu_inventory(b)))


def test_devices_follow_pci_order_of_the_inventory() -> None:
    devices = build_devices(dgx_h100_inventory())
    assert [d.name for d in devices] == [f"gpu-{i}" for i in range(8)]
    assert devices[4].attributes["resource.kubernetes.io/numaNode"] == AttributeValue.of_int(1)


@pytest.mark.parametrize(
    ("raw", "semver"),
    [
        ("550.54.15", "550.54.15"),
        ("570.172.08", "570.172.8"),
        ("580.95.05", "580.95.5"),
        ("535.183.01", "535.183.1"),
        ("12.4", "12.4.0"),
        ("13.0", "13.0.0"),
        ("8", "8.0.0"),
        ("v1.2.3", "1.2.3"),
        ("1.2.3-rc.1+build.5", "1.2.3-rc.1+build.5"),
        (" 560.35.03\n", "560.35.3"),
    ],
)
def test_driver_versions_become_valid_semver(raw: str, semver: str) -> None:
    assert normalize_version(raw) == semver


@pytest.mark.parametrize("raw", ["", "abc", "1.2.3.4", "1..2", "570.172.08-"])
def test_non_versions_are_refused(raw: str) -> None:
    with pytest.raises(InventoryError, match="not a version"):
        normalize_version(raw)


def test_r570_driver_is_published_as_valid_semver() -> None:
    devices = build_devices(dgx_h100_inventory(make_system_info("570.172.08", 12080)))
    assert devices[0].attributes["driverVersion"] == AttributeValue.of_version("570.172.8")
    assert devices[0].attributes["cudaDriverVersion"] == AttributeValue.of_version("12.8.0")


@pytest.mark.parametrize(
    ("value", "api"),
    [
        (AttributeValue.of_int(3), {"int": 3}),
        (AttributeValue.of_bool(False), {"bool": False}),
        (AttributeValue.of_string("x"), {"string": "x"}),
        (AttributeValue.of_version("8.0.0"), {"version": "8.0.0"}),
        (AttributeValue.of_ints([1]), {"ints": [1]}),
    ],
)
def test_attribute_values_serialize_to_the_api_union(
    value: AttributeValue, api: dict[str, object]
) -> None:
    assert value.to_api() == api
    assert AttributeValue.from_api(api) == value


@pytest.mark.parametrize(
    "make",
    [
        lambda: AttributeValue.of_int(True),
        lambda: AttributeValue.of_int("3"),  # type: ignore[arg-type]
        lambda: AttributeValue.of_bool(1),  # type: ignore[arg-type]
        lambda: AttributeValue.of_string(3),  # type: ignore[arg-type]
        lambda: AttributeValue.of_version("570.172.08"),
        lambda: AttributeValue.of_version("8.0"),
        lambda: AttributeValue.from_api({"int": 1, "string": "x"}),
        lambda: AttributeValue.from_api({}),
        lambda: AttributeValue.from_api({"strings": ["x"]}),  # only int lists are published
        lambda: AttributeValue.of_ints([]),
        lambda: AttributeValue.of_ints([True]),
    ],
)
def test_attribute_values_refuse_mismatched_types(make: object) -> None:
    with pytest.raises(InventoryError):
        make()  # type: ignore[operator]


def test_to_api_carries_counter_consumption_for_partitionable_devices() -> None:
    (device,) = build_devices(_node(make_gpu_inventory(make_gpu_info(mig_capable=False))))
    partitionable = dataclasses.replace(
        device,
        consumes_counters=MappingProxyType(
            {"gpu-0-counter-set": MappingProxyType({"memory": 40 * 2**30, "memory-slice-0": 1})}
        ),
    )
    assert partitionable.to_api()["consumesCounters"] == [
        {
            "counterSet": "gpu-0-counter-set",
            "counters": {"memory": {"value": "40Gi"}, "memory-slice-0": {"value": "1"}},
        }
    ]
    assert "consumesCounters" not in device.to_api()


def test_to_api_is_a_resource_k8s_io_v1_device() -> None:
    device = build_devices(a100_static_mig_inventory())[0]
    api = device.to_api()
    assert set(api) == {"name", "attributes", "capacity"}
    assert list(api["attributes"]) == sorted(api["attributes"])
    assert api["capacity"]["memorySlice2"] == {"value": "1"}


def test_gpu_without_reported_memory_has_no_memory_capacity() -> None:
    info = make_gpu_info(mig_capable=False, memory_bytes=0)
    (device,) = build_devices(_node(make_gpu_inventory(info)))
    assert dict(device.capacity) == {}
    assert device.to_api()["capacity"] == {}


def test_devices_can_be_copied_hashed_and_compared() -> None:
    devices = build_devices(a100_static_mig_inventory())
    again = build_devices(a100_static_mig_inventory())
    assert devices == again
    assert len(set(devices) | set(again)) == len(devices)
    assert copy.deepcopy(devices) == devices
    assert copy.copy(devices[0]) is devices[0]


def test_devices_are_immutable() -> None:
    device: AllocatableDevice = build_devices(dgx_h100_inventory())[0]
    with pytest.raises(dataclasses.FrozenInstanceError):
        device.name = "other"  # type: ignore[misc]
    with pytest.raises(TypeError):
        device.attributes["type"] = AttributeValue.of_string("mig")  # type: ignore[index]


@pytest.mark.parametrize(
    ("profiles", "total_mib"),
    [(a100_40gb_gi_profiles(), 40960), (h100_80gb_gi_profiles(), 81559)],
)
def test_builder_profile_names_match_go_nvlibs_formula(
    profiles: tuple[GpuInstanceProfile, ...], total_mib: int
) -> None:
    enum_by_id = {19: 0x0, 20: 0x7, 15: 0x9, 14: 0x1, 9: 0x2, 5: 0x3, 0: 0x4}
    for profile in profiles:
        gi_enum = enum_by_id[profile.id]
        assert codes.GI_ENUM_SLICES[gi_enum] == profile.slice_count
        assert profile.name == mig_profile_name(gi_enum, profile.memory_mib, total_mib * 2**20)
