"""Dynamic MIG: the counters, the partitionable devices, who gets them, and existing instances."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import yaml

from dra_driver.composition.hardware import open_hardware
from dra_driver.errors import InventoryError, NvmlError
from dra_driver.hardware.nvml import codes
from dra_driver.hardware.nvml.interface import ComputeInstanceProfile, Placement
from dra_driver.node.devices import AllocatableDevice, build_devices, inventory_warnings
from dra_driver.node.dynamic_mig import (
    DynamicMigMode,
    consumption,
    dynamic_mig_mode,
    filling_ci_profile_id,
    partition_gpu,
)
from dra_driver.node.inventory import GpuInventory, NodeInventory, discover
from tests.fakes import (
    a100_40gb_gi_profiles,
    dgx_h100_inventory,
    h100_80gb_gi_profiles,
    make_gpu_info,
    make_gpu_inventory,
    make_mig_device,
    make_system_info,
)

MIB = 2**20
SLICES_8 = {f"memory-slice-{i}": 1 for i in range(8)}
DYNAMIC_MIG_ATTRIBUTES = {
    "type",
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
H100_GPU0_MIG_NAMES = [
    *(f"gpu-0-mig-1g10gb-19-{s}" for s in range(7)),
    *(f"gpu-0-mig-1g10gb-me-20-{s}" for s in range(7)),
    *(f"gpu-0-mig-1g20gb-15-{s}" for s in (0, 2, 4, 6)),
    *(f"gpu-0-mig-2g20gb-14-{s}" for s in (0, 2, 4)),
    "gpu-0-mig-3g40gb-9-0",
    "gpu-0-mig-3g40gb-9-4",
    "gpu-0-mig-4g40gb-5-0",
    "gpu-0-mig-7g80gb-0-0",
]


def _sim(spec: str) -> NodeInventory:
    return discover(open_hardware(spec).nvml)


def _shape(tmp_path: Path, *gpus: dict[str, object]) -> str:
    path = tmp_path / "shape.yaml"
    path.write_text(yaml.safe_dump({"gpus": list(gpus)}))
    return f"sim:{path}"


def _by_name(devices: list[AllocatableDevice]) -> dict[str, AllocatableDevice]:
    return {device.name: device for device in devices}


def _h100(
    *, mig_enabled: bool = False, migs: tuple[tuple[str, int, int], ...] = ()
) -> GpuInventory:
    """One H100 (testing builders, no CI profiles listed) with MIG devices
    (profile name, placement start, GI id)."""
    info = make_gpu_info(model="H100-SXM5-80GB", mig_enabled=mig_enabled, numa_node=0)
    profiles = {p.name: p for p in h100_80gb_gi_profiles()}
    devices = tuple(
        make_mig_device(info, profiles[name], start, gpu_instance_id=gi) for name, start, gi in migs
    )
    return make_gpu_inventory(info, h100_80gb_gi_profiles(), devices)


def _node(*gpus: GpuInventory) -> NodeInventory:
    return NodeInventory(system=make_system_info("570.172.08", 12080), gpus=gpus)


# --- counters -------------------------------------------------------------------------


def test_h100_counter_set_is_the_7g_budget_plus_eight_memory_slices() -> None:
    partitioning = partition_gpu(dgx_h100_inventory().gpus[3])
    assert partitioning is not None
    assert partitioning.counter_set.name == "gpu-3-counter-set"
    assert dict(partitioning.counter_set.counters) == {
        "multiprocessors": 132,
        "copy-engines": 8,
        "decoders": 7,
        "encoders": 0,
        "jpeg-engines": 7,
        "ofa-engines": 1,
        "memory": 81152 * MIB,  # the 7g.80gb profile, not the 81559 MiB outside MIG mode
        **SLICES_8,
    }


def test_a100_counter_set_is_the_7g_budget_plus_eight_memory_slices() -> None:
    info = make_gpu_info(model="A100-SXM4-40GB", mig_enabled=True)
    partitioning = partition_gpu(make_gpu_inventory(info, a100_40gb_gi_profiles()))
    assert partitioning is not None
    assert dict(partitioning.counter_set.counters) == {
        "multiprocessors": 98,
        "copy-engines": 7,
        "decoders": 5,
        "encoders": 0,
        "jpeg-engines": 1,
        "ofa-engines": 1,
        "memory": 40192 * MIB,
        **SLICES_8,
    }


def test_a30_counter_set_has_four_memory_slices() -> None:
    partitioning = partition_gpu(_sim("sim:a30-node").gpus[0])
    assert partitioning is not None
    assert dict(partitioning.counter_set.counters) == {
        "multiprocessors": 56,
        "copy-engines": 4,
        "decoders": 4,
        "encoders": 0,
        "jpeg-engines": 1,
        "ofa-engines": 1,
        "memory": 24000 * MIB,
        **{f"memory-slice-{i}": 1 for i in range(4)},
    }


@pytest.mark.parametrize(
    ("name", "start", "expected"),
    [
        (
            "1g.20gb",
            6,
            {
                "multiprocessors": 26,
                "copy-engines": 1,
                "decoders": 1,
                "jpeg-engines": 1,
                "memory": 20096 * MIB,
                "memory-slice-6": 1,
                "memory-slice-7": 1,
            },
        ),
        (
            "1g.10gb+me",
            2,
            {
                "multiprocessors": 16,
                "copy-engines": 1,
                "decoders": 1,
                "jpeg-engines": 1,
                "ofa-engines": 1,
                "memory": 9984 * MIB,
                "memory-slice-2": 1,
            },
        ),
        (
            "3g.20gb",
            4,
            {
                "multiprocessors": 42,
                "copy-engines": 3,
                "decoders": 2,
                "memory": 19968 * MIB,
                **{f"memory-slice-{i}": 1 for i in range(4, 8)},
            },
        ),
        (
            "1g.5gb",
            3,
            {"multiprocessors": 14, "copy-engines": 1, "memory": 4864 * MIB, "memory-slice-3": 1},
        ),
    ],
)
def test_mig_device_consumes_its_profile_and_its_memory_slices(
    name: str, start: int, expected: dict[str, int]
) -> None:
    profile = next(p for p in h100_80gb_gi_profiles() + a100_40gb_gi_profiles() if p.name == name)
    placement = next(p for p in profile.placements if p.start == start)
    assert consumption(profile, placement) == expected


@pytest.mark.parametrize(
    "model", ["H100-SXM5-80GB", "A100-SXM4-40GB", "A30", "RTX-PRO-6000-BW-SERVER", "B200", "GB200"]
)
def test_counters_accept_exactly_what_nvml_accepts(tmp_path: Path, model: str) -> None:
    """Random create/destroy walks on the simulated GPU: a GPU instance can be
    created iff its consumption fits what the counters have left. This covers the
    placement grid and NVML's media-engine rules (one +me; +me.all only with -me)."""
    hardware = open_hardware(_shape(tmp_path, {"model": model, "migEnabled": True}))
    nvml = hardware.nvml
    uuid = nvml.gpus()[0].uuid
    nvml.set_mig_mode(uuid, True)
    partitioning = partition_gpu(discover(nvml).gpus[0])
    assert partitioning is not None
    left = dict(partitioning.counter_set.counters)
    created: dict[tuple[int, Placement], int] = {}
    rng = random.Random(model)
    outcomes = set()
    for _ in range(400):
        spec = rng.choice(partitioning.dynamic)
        key = (spec.gi_profile.id, spec.placement)
        used = consumption(spec.gi_profile, spec.placement)
        if key in created:
            nvml.destroy_gpu_instance(uuid, created.pop(key))
            for counter, amount in used.items():
                left[counter] += amount
            continue
        fits = all(left[counter] >= amount for counter, amount in used.items())
        refusal: NvmlError | None = None
        try:
            gi = nvml.create_gpu_instance(uuid, spec.gi_profile.id, spec.placement)
        except NvmlError as exc:
            refusal = exc
        where = f"{spec.profile_name} at {spec.placement}"
        if refusal is not None:
            assert refusal.code == codes.ERROR_INSUFFICIENT_RESOURCES
            assert not fits, f"{where}: counters accept it, NVML refuses: {refusal}"
            outcomes.add("refused")
            continue
        assert fits, f"{where}: NVML created it, the counters refuse it"
        outcomes.add("created")
        created[key] = gi.id
        for counter, amount in used.items():
            left[counter] -= amount
    assert outcomes == {"created", "refused"}


def test_without_a_whole_gpu_profile_the_budget_lets_every_profile_fill_the_gpu(
    tmp_path: Path,
) -> None:
    """The simulated B200 lists no 7g profile (its size is unverified): the budget is the
    densest layout NVML allows (three 2g.45gb and a 1g.45gb: 3 x 36 + 30 SMs), so seven
    1g.23gb instances fit the counters too, as they fit the hardware."""
    hardware = open_hardware(_shape(tmp_path, {"model": "B200"}))
    partitioning = partition_gpu(discover(hardware.nvml).gpus[0])
    assert partitioning is not None
    counters = partitioning.counter_set.counters
    assert counters["multiprocessors"] == 3 * 36 + 30
    ones = [spec for spec in partitioning.dynamic if spec.gi_profile.id == 19]
    used: dict[str, int] = {}
    for spec in ones:
        for counter, amount in consumption(spec.gi_profile, spec.placement).items():
            used[counter] = used.get(counter, 0) + amount
    assert len(ones) == 7
    assert all(counters[counter] >= amount for counter, amount in used.items())


# --- devices --------------------------------------------------------------------------


def test_h100_publishes_every_placement_and_the_full_gpu() -> None:
    inventory = _sim("sim:dgx-h100")
    devices = build_devices(inventory, dynamic_mig=True)
    assert len(devices) == 8 * 26
    gpu0 = [d.name for d in devices if d.gpu.minor == 0]
    assert sorted(gpu0) == sorted([*H100_GPU0_MIG_NAMES, "gpu-0"])


def test_dynamic_mig_device_has_nvidias_attributes_and_capacities_but_no_uuid() -> None:
    inventory = _sim("sim:dgx-h100")
    device = _by_name(build_devices(inventory, dynamic_mig=True))["gpu-0-mig-1g20gb-15-6"]
    parent = inventory.gpus[0].info
    assert device.kind == "mig"
    assert device.mig is None
    assert set(device.attributes) == DYNAMIC_MIG_ATTRIBUTES
    assert device.attributes["type"].value == "mig"
    assert device.attributes["parentUUID"].value == parent.uuid
    assert device.attributes["profile"].value == "1g.20gb"
    assert device.attributes["productName"].value == "NVIDIA H100 80GB HBM3"
    assert dict(device.capacity) == {
        "multiprocessors": 26,
        "copyEngines": 1,
        "decoders": 1,
        "encoders": 0,
        "jpegEngines": 1,
        "ofaEngines": 0,
        "memory": 20096 * MIB,
    }
    api = device.to_api()
    assert len(api["attributes"]) + len(api["capacity"]) <= 32
    assert api["consumesCounters"] == [
        {
            "counterSet": "gpu-0-counter-set",
            "counters": {
                "copy-engines": {"value": "1"},
                "decoders": {"value": "1"},
                "jpeg-engines": {"value": "1"},
                "memory": {"value": "20096Mi"},
                "memory-slice-6": {"value": "1"},
                "memory-slice-7": {"value": "1"},
                "multiprocessors": {"value": "26"},
            },
        }
    ]
    spec = device.dynamic
    assert spec is not None
    assert (spec.parent_uuid, spec.parent_minor) == (parent.uuid, 0)
    assert (spec.gi_profile.id, spec.placement, spec.instance) == (15, Placement(6, 2), None)
    assert spec.ci_profile_id == 7  # the 26-SM CI NVML creates for 1g.20gb, not CI 0 (16 SMs)


def test_filling_compute_instance_comes_from_the_listed_ci_profiles() -> None:
    h100 = _sim("sim:dgx-h100").gpus[0]
    a30 = _sim("sim:a30-node").gpus[0]
    assert {p.name: filling_ci_profile_id(h100, p) for p in h100.gi_profiles} == {
        "1g.10gb": 0,
        "1g.10gb+me": 0,
        "1g.20gb": 7,
        "2g.20gb": 1,
        "3g.40gb": 2,
        "4g.40gb": 3,
        "7g.80gb": 4,
    }
    assert {p.name: filling_ci_profile_id(a30, p) for p in a30.gi_profiles}["4g.24gb"] == 3


def test_filling_compute_instance_without_listed_ci_profiles() -> None:
    h100 = _h100()
    a100 = make_gpu_inventory(make_gpu_info(mig_enabled=True), a100_40gb_gi_profiles())
    assert {p.id: filling_ci_profile_id(h100, p) for p in h100.gi_profiles}[15] == 7
    assert {p.id: filling_ci_profile_id(a100, p) for p in a100.gi_profiles} == {
        19: 0,
        20: 0,
        15: 0,
        14: 1,
        9: 2,
        5: 3,
        0: 4,
    }


def test_a_gi_profile_without_a_filling_ci_profile_is_an_error() -> None:
    profile = h100_80gb_gi_profiles()[-1]  # 7g.80gb
    gpu = _h100()
    lacking = GpuInventory(
        info=gpu.info,
        gi_profiles=gpu.gi_profiles,
        mig_devices=(),
        ci_profiles={profile.id: (ComputeInstanceProfile(0, "1c.7g.80gb", 1, 7, 16),)},
    )
    with pytest.raises(InventoryError, match=r"GI profile 0 \(7g\.80gb\) has no compute-instance"):
        filling_ci_profile_id(lacking, profile)


def test_full_gpu_consumes_the_whole_set_and_keeps_its_physical_memory() -> None:
    devices = _by_name(build_devices(_node(_h100()), dynamic_mig=True))
    full = devices["gpu-0"]
    (counter_set,) = full.counter_sets
    assert dict(full.consumes_counters[counter_set.name]) == {
        name: value for name, value in counter_set.counters.items() if value
    }
    assert dict(full.capacity) == {"memory": 81559 * MIB}
    assert full.attributes["uuid"].value == full.gpu.uuid
    assert full.attributes["migCapable"].value is True


def test_full_gpu_and_any_mig_device_exclude_each_other() -> None:
    devices = build_devices(_node(_h100()), dynamic_mig=True)
    full = _by_name(devices)["gpu-0"]
    totals = full.counter_sets[0].counters
    whole = full.consumes_counters["gpu-0-counter-set"]
    migs = [d for d in devices if d.kind == "mig"]
    assert len(migs) == 25
    for mig in migs:
        part = mig.consumes_counters["gpu-0-counter-set"]
        assert any(whole.get(c, 0) + amount > totals[c] for c, amount in part.items()), mig.name


# --- who takes part -------------------------------------------------------------------


def test_dynamic_mig_is_off_unless_asked() -> None:
    devices = build_devices(dgx_h100_inventory())
    assert [d.name for d in devices] == [f"gpu-{i}" for i in range(8)]
    assert all(not d.consumes_counters and d.dynamic is None for d in devices)


@pytest.mark.parametrize("mig_enabled", [False, True])
def test_hopper_offers_the_gpu_and_every_placement_with_mig_on_or_off(mig_enabled: bool) -> None:
    gpu = _h100(mig_enabled=mig_enabled)
    assert dynamic_mig_mode(gpu) is DynamicMigMode.GPU_AND_MIG
    names = [d.name for d in build_devices(_node(gpu), dynamic_mig=True)]
    assert sorted(names) == sorted([*H100_GPU0_MIG_NAMES, "gpu-0"])
    assert inventory_warnings(_node(gpu), dynamic_mig=True) == []


def test_ampere_with_mig_on_offers_only_mig_placements() -> None:
    inventory = _sim("sim:dgx-a100-40gb")
    gpu = inventory.gpus[0]
    assert dynamic_mig_mode(gpu) is DynamicMigMode.MIG_ONLY
    devices = build_devices(inventory, dynamic_mig=True)
    assert len(devices) == 8 * 25
    assert {d.kind for d in devices} == {"mig"}
    assert all(d.dynamic is not None for d in devices)
    assert "gpu-0-mig-1g5gb-19-6" in _by_name(devices)
    assert inventory_warnings(inventory, dynamic_mig=True) == []


def test_ampere_with_mig_off_stays_a_full_gpu_and_says_why() -> None:
    gpu = make_gpu_inventory(make_gpu_info(mig_enabled=False), a100_40gb_gi_profiles())
    node = _node(gpu)
    assert dynamic_mig_mode(gpu) is DynamicMigMode.STATIC
    (device,) = build_devices(node, dynamic_mig=True)
    assert device.name == "gpu-0"
    assert not device.consumes_counters
    (warning,) = inventory_warnings(node, dynamic_mig=True)
    assert "Ampere: dynamic MIG needs MIG mode on" in warning


def test_gpus_without_mig_stay_full_gpus(tmp_path: Path) -> None:
    inventory = _sim(_shape(tmp_path, {"model": "L4", "count": 2}))
    devices = build_devices(inventory, dynamic_mig=True)
    assert [(d.name, dict(d.consumes_counters)) for d in devices] == [("gpu-0", {}), ("gpu-1", {})]


# --- MIG instances found at startup ---------------------------------------------------


def test_foreign_instance_stays_static_and_takes_its_placements_and_resources_away() -> None:
    gpu = _h100(mig_enabled=True, migs=(("3g.40gb", 4, 2),))
    node = _node(gpu)
    devices = _by_name(build_devices(node, dynamic_mig=True))
    static = devices["gpu-0-mig-3g40gb-9-4"]
    assert static.dynamic is None
    assert static.mig is not None
    assert static.attributes["uuid"].value == static.mig.uuid
    assert not static.consumes_counters
    dynamic = sorted(name for name, d in devices.items() if d.dynamic is not None)
    assert dynamic == sorted(
        [
            *(f"gpu-0-mig-1g10gb-19-{s}" for s in range(4)),
            *(f"gpu-0-mig-1g10gb-me-20-{s}" for s in range(4)),
            "gpu-0-mig-1g20gb-15-0",
            "gpu-0-mig-1g20gb-15-2",
            "gpu-0-mig-2g20gb-14-0",
            "gpu-0-mig-2g20gb-14-2",
            "gpu-0-mig-3g40gb-9-0",
            "gpu-0-mig-4g40gb-5-0",
        ]
    )
    assert "gpu-0" not in devices  # MIG mode cannot be turned off under the admin's instance
    (counter_set,) = devices["gpu-0-mig-4g40gb-5-0"].counter_sets
    assert dict(counter_set.counters) == {
        "multiprocessors": 132 - 60,
        "copy-engines": 8 - 3,
        "decoders": 7 - 3,
        "encoders": 0,
        "jpeg-engines": 7 - 3,
        "ofa-engines": 1,
        "memory": (81152 - 40448) * MIB,
        **{f"memory-slice-{i}": int(i < 4) for i in range(8)},
    }
    (warning,) = inventory_warnings(node, dynamic_mig=True)
    assert "gpu-0-mig-3g40gb-9-4" in warning
    assert "never destroyed" in warning
    assert "full GPU is not offered" in warning


def test_foreign_media_extension_instance_withdraws_the_other_me_placements() -> None:
    devices = build_devices(
        _node(_h100(mig_enabled=True, migs=(("1g.10gb+me", 0, 7),))), dynamic_mig=True
    )
    names = {d.name for d in devices}
    assert "gpu-0-mig-1g10gb-me-20-0" in names  # the static one
    assert not any("1g10gb-me" in d.name for d in devices if d.dynamic is not None)
    assert "gpu-0-mig-1g10gb-19-1" in names


def test_the_plugins_own_instances_stay_dynamic_devices() -> None:
    gpu = _h100(mig_enabled=True, migs=(("3g.40gb", 4, 2),))
    devices = _by_name(
        build_devices(_node(gpu), dynamic_mig=True, owned_instances=[(gpu.info.uuid, 2)])
    )
    device = devices["gpu-0-mig-3g40gb-9-4"]
    assert device.dynamic is not None
    assert device.dynamic.instance == gpu.mig_devices[0]
    assert device.mig is None
    assert "uuid" not in device.attributes
    assert sorted(devices) == sorted([*H100_GPU0_MIG_NAMES, "gpu-0"])
    assert dict(device.counter_sets[0].counters)["memory-slice-4"] == 1
    assert (
        inventory_warnings(_node(gpu), dynamic_mig=True, owned_instances=[(gpu.info.uuid, 2)]) == []
    )


def test_instances_owned_on_another_gpu_do_not_count() -> None:
    gpu = _h100(mig_enabled=True, migs=(("3g.40gb", 4, 2),))
    devices = _by_name(
        build_devices(_node(gpu), dynamic_mig=True, owned_instances=[("GPU-other", 2)])
    )
    assert devices["gpu-0-mig-3g40gb-9-4"].dynamic is None


def test_compute_instances_sharing_a_foreign_gi_take_its_resources_once(tmp_path: Path) -> None:
    hardware = open_hardware(_shape(tmp_path, {"model": "H100-SXM5-80GB"}))
    nvml = hardware.nvml
    uuid = nvml.gpus()[0].uuid
    nvml.set_mig_mode(uuid, True)
    gi = nvml.create_gpu_instance(uuid, 9, Placement(0, 4))
    nvml.create_compute_instance(uuid, gi.id, 0)
    nvml.create_compute_instance(uuid, gi.id, 0)
    devices = _by_name(build_devices(discover(nvml), dynamic_mig=True))
    static = sorted(name for name, d in devices.items() if d.mig is not None)
    assert static == ["gpu-0-mig-1c3g40gb-9-0-ci0", "gpu-0-mig-1c3g40gb-9-0-ci1"]
    counters = devices["gpu-0-mig-3g40gb-9-4"].counter_sets[0].counters
    assert counters["multiprocessors"] == 132 - 60
    assert counters["memory"] == (81152 - 40448) * MIB
    assert "gpu-0-mig-4g40gb-5-0" not in devices
