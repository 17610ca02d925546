"""RealNvml, the pynvml backend, run over the fake pynvml on simulated nodes."""

from __future__ import annotations

from pathlib import Path

import pytest

from dra_driver.errors import NvmlError
from dra_driver.hardware.nvml import codes
from dra_driver.hardware.nvml.interface import Placement
from dra_driver.hardware.nvml.real import RealNvml
from dra_driver.hardware.simulated.hardware import SimHardware
from dra_driver.hardware.simulated.shapes import load_shape
from tests.fakes import FakePynvml, fake_pynvml, fake_sysfs

MIB = 2**20


def open_node(shape: str, sysfs: Path | None = None) -> tuple[RealNvml, FakePynvml, SimHardware]:
    hw = SimHardware(load_shape(shape))
    lib = fake_pynvml(hw)
    return RealNvml(lib, sysfs_root=sysfs), lib, hw


def first_uuid(nvml: RealNvml) -> str:
    return nvml.gpus()[0].uuid


# ---------------------------------------------------------------- discovery


def test_h100_gpu_facts(tmp_path: Path) -> None:
    hw = SimHardware(load_shape("dgx-h100"))
    nvml = RealNvml(fake_pynvml(hw), sysfs_root=fake_sysfs(hw, tmp_path / "sys"))
    gpus = nvml.gpus()
    assert len(gpus) == 8
    gpu = gpus[0]
    assert gpu.index == 0
    assert gpu.uuid.startswith("GPU-")
    assert gpu.product_name == "NVIDIA H100 80GB HBM3"
    assert gpu.brand == "Nvidia"
    assert gpu.architecture == "Hopper"
    assert gpu.cuda_compute_capability == (9, 0)
    assert gpu.memory_bytes == 81559 * MIB
    assert gpu.pci_bus_id == "0000:1b:00.0"
    assert gpu.pci_device_id == (0x2330 << 16) | 0x10DE
    assert (gpu.mig_capable, gpu.mig_enabled, gpu.mig_pending) == (True, False, False)
    assert gpu.mig_toggle_supported
    facts = hw.gpu(0)
    assert (gpu.pcie_root, gpu.numa_node) == (facts.pcie_root, facts.numa_node)
    assert [g.minor for g in gpus] == [hw.gpu(i).minor for i in range(8)]
    assert nvml.gpu(gpus[5].uuid) == gpus[5]


def test_system_info() -> None:
    nvml, _, _ = open_node("dgx-a100-40gb")
    system = nvml.system()
    assert system.driver_version == "550.54.15"
    assert system.cuda_version == "12.4"


def test_a100_and_a30_come_up_in_mig_mode() -> None:
    for shape, name in [("dgx-a100-40gb", "NVIDIA A100-SXM4-40GB"), ("a30-node", "NVIDIA A30")]:
        nvml, _, _ = open_node(shape)
        gpu = nvml.gpus()[0]
        assert gpu.product_name == name
        assert gpu.architecture == "Ampere"
        assert (gpu.mig_capable, gpu.mig_enabled, gpu.mig_pending) == (True, True, True)
        assert not gpu.mig_toggle_supported


def test_l4_is_not_mig_capable_and_has_no_mig_anything() -> None:
    nvml, _, _ = open_node("l4-node")
    gpu = nvml.gpus()[0]
    assert gpu.product_name == "NVIDIA L4"
    assert gpu.architecture == "Ada Lovelace"
    assert gpu.cuda_compute_capability == (8, 9)
    assert not gpu.mig_capable
    assert not gpu.mig_enabled
    assert nvml.gpu_instance_profiles(gpu.uuid) == []
    assert nvml.gpu_instances(gpu.uuid) == []
    assert nvml.mig_devices(gpu.uuid) == []


def test_without_sysfs_topology_is_unknown() -> None:
    nvml, _, _ = open_node("a30-node", sysfs=None)
    gpu = nvml.gpus()[0]
    assert (gpu.pcie_root, gpu.numa_node) == (None, None)


# ---------------------------------------------------------------- profiles

H100_NAMES = {
    19: "1g.10gb",
    20: "1g.10gb+me",
    15: "1g.20gb",
    14: "2g.20gb",
    9: "3g.40gb",
    5: "4g.40gb",
    0: "7g.80gb",
}
A100_40GB_NAMES = {
    19: "1g.5gb",
    20: "1g.5gb+me",
    15: "1g.10gb",
    14: "2g.10gb",
    9: "3g.20gb",
    5: "4g.20gb",
    0: "7g.40gb",
}
A30_NAMES = {14: "1g.6gb", 21: "1g.6gb+me", 5: "2g.12gb", 6: "2g.12gb+me", 0: "4g.24gb"}


@pytest.mark.parametrize(
    ("shape", "names"),
    [("dgx-h100", H100_NAMES), ("dgx-a100-40gb", A100_40GB_NAMES), ("a30-node", A30_NAMES)],
)
def test_profile_names_equal_the_reference_tables(shape: str, names: dict[int, str]) -> None:
    nvml, _, hw = open_node(shape)
    uuid = first_uuid(nvml)
    profiles = nvml.gpu_instance_profiles(uuid)
    assert {p.id: p.name for p in profiles} == names
    reference = {p.id: p for p in hw.gi_profiles(0)}
    for p in profiles:
        ref = reference[p.id]
        assert (p.name, p.slice_count, p.instance_count, p.memory_mib) == (
            ref.name,
            ref.slice_count,
            ref.instance_count,
            ref.memory_mib,
        )
        assert (p.multiprocessors, p.copy_engines, p.decoders, p.encoders) == (
            ref.multiprocessors,
            ref.copy_engines,
            ref.decoders,
            ref.encoders,
        )
        assert (p.jpeg_engines, p.ofa_engines, p.placements) == (
            ref.jpeg_engines,
            ref.ofa_engines,
            ref.placements,
        )


def test_profiles_are_read_with_mig_disabled() -> None:
    nvml, _, _ = open_node("dgx-h100")
    gpu = nvml.gpus()[0]
    assert not gpu.mig_enabled
    assert len(nvml.gpu_instance_profiles(gpu.uuid)) == 7


def test_placements_include_profiles_with_more_placements_than_instances() -> None:
    nvml, _, _ = open_node("dgx-a100-40gb")
    by_id = {p.id: p for p in nvml.gpu_instance_profiles(first_uuid(nvml))}
    assert by_id[19].placements == tuple(Placement(s, 1) for s in range(7))
    me = by_id[20]
    assert me.instance_count == 1
    assert me.placements == tuple(Placement(s, 1) for s in range(7))
    assert by_id[15].placements == tuple(Placement(s, 2) for s in (0, 2, 4, 6))
    assert by_id[9].placements == (Placement(0, 4), Placement(4, 4))
    assert by_id[0].placements == (Placement(0, 8),)
    assert by_id[0].memory_slice_count == 8


def test_a30_placements_use_the_four_slot_grid() -> None:
    nvml, _, _ = open_node("a30-node")
    by_id = {p.id: p for p in nvml.gpu_instance_profiles(first_uuid(nvml))}
    assert by_id[5].placements == (Placement(0, 2), Placement(2, 2))
    assert by_id[0].placements == (Placement(0, 4),)


def test_refused_placement_query_with_mig_off_leaves_profiles_without_placements() -> None:
    nvml, lib, _ = open_node("dgx-h100")
    uuid = first_uuid(nvml)
    lib.fail_next("nvmlDeviceGetGpuInstancePossiblePlacements", codes.ERROR_NOT_SUPPORTED)
    profiles = nvml.gpu_instance_profiles(uuid)
    assert [p.placements for p in profiles].count(()) == 1
    assert len(profiles) == 7


def test_refused_placement_query_with_mig_on_is_an_error() -> None:
    nvml, lib, _ = open_node("dgx-a100-40gb")
    uuid = first_uuid(nvml)
    lib.fail_next("nvmlDeviceGetGpuInstancePossiblePlacements", codes.ERROR_NO_PERMISSION)
    with pytest.raises(NvmlError) as excinfo:
        nvml.gpu_instance_profiles(uuid)
    assert excinfo.value.code == codes.ERROR_NO_PERMISSION
    assert f"possible placements of GPU instance profile 19 on {uuid}" in str(excinfo.value)


def test_ci_profiles_without_a_gpu_instance_are_derived() -> None:
    nvml, lib, _ = open_node("dgx-a100-40gb")
    uuid = first_uuid(nvml)
    cis = nvml.compute_instance_profiles(uuid, 9)  # 3g.20gb
    assert [(c.id, c.name, c.instance_count, c.multiprocessors) for c in cis] == [
        (0, "1c.3g.20gb", 3, 14),
        (1, "2c.3g.20gb", 1, 28),
        (2, "3g.20gb", 1, 42),
    ]
    assert lib.calls["nvmlGpuInstanceGetComputeInstanceProfileInfo"] == 0
    four = nvml.compute_instance_profiles(uuid, 5)  # 4g: no 3c
    assert [c.name for c in four] == ["1c.4g.20gb", "2c.4g.20gb", "4g.20gb"]


def test_ci_profiles_come_from_nvml_once_a_gpu_instance_exists() -> None:
    nvml, lib, _ = open_node("dgx-a100-40gb")
    uuid = first_uuid(nvml)
    derived = nvml.compute_instance_profiles(uuid, 9)
    nvml.create_gpu_instance(uuid, 9, Placement(4, 4))
    measured = nvml.compute_instance_profiles(uuid, 9)
    assert lib.calls["nvmlGpuInstanceGetComputeInstanceProfileInfo"] > 0
    assert measured == derived


def test_hopper_two_slice_1g_gi_is_filled_by_ci_profile_7() -> None:
    nvml, _, _ = open_node("dgx-h100")
    uuid = first_uuid(nvml)
    derived = {c.id: c for c in nvml.compute_instance_profiles(uuid, 15)}
    assert nvml.set_mig_mode(uuid, True) == codes.SUCCESS
    gi = nvml.create_gpu_instance(uuid, 15, Placement(2, 2))
    measured = {c.id: c for c in nvml.compute_instance_profiles(uuid, 15)}
    assert measured == derived
    assert measured[7].name == "1g.20gb"
    assert measured[7].multiprocessors == 26
    mig = nvml.create_compute_instance(uuid, gi.id, 7)
    assert mig.ci_profile_id == 7
    assert mig.multiprocessors == 26


def test_unknown_gi_profile_is_an_invalid_argument() -> None:
    nvml, _, _ = open_node("a30-node")
    with pytest.raises(NvmlError) as excinfo:
        nvml.compute_instance_profiles(first_uuid(nvml), 19)
    assert excinfo.value.code == codes.ERROR_INVALID_ARGUMENT


# ---------------------------------------------------------------- instances and MIG devices


def test_created_instances_appear_as_mig_devices() -> None:
    nvml, _, hw = open_node("dgx-a100-40gb")
    gpu = nvml.gpus()[2]
    uuid = gpu.uuid
    assert nvml.gpu_instances(uuid) == []
    assert nvml.mig_devices(uuid) == []

    big = nvml.create_gpu_instance(uuid, 9, Placement(0, 4))
    small = nvml.create_gpu_instance(uuid, 19, Placement(6, 1))
    assert (big.profile_id, big.placement) == (9, Placement(0, 4))
    assert (small.profile_id, small.placement) == (19, Placement(6, 1))
    assert nvml.gpu_instances(uuid) == sorted([big, small], key=lambda gi: gi.id)

    created = nvml.create_compute_instance(uuid, big.id, 2)  # the full 3g CI
    halves = [nvml.create_compute_instance(uuid, small.id, 0)]
    assert created.uuid.startswith("MIG-")
    assert created.parent_uuid == uuid
    assert created.parent_minor == gpu.minor
    assert created.gi_profile.name == "3g.20gb"
    assert created.placement == Placement(0, 4)
    assert created.multiprocessors == 42
    assert created.memory_bytes == 19968 * MIB
    assert created.uuid == hw.mig_device_uuid(2, big.id, created.compute_instance_id)

    [ci] = nvml.compute_instances(uuid, big.id)
    assert (ci.id, ci.gpu_instance_id, ci.profile_id) == (created.compute_instance_id, big.id, 2)

    devices = nvml.mig_devices(uuid)
    assert devices == sorted([created, *halves], key=lambda d: d.gpu_instance_id)
    assert {d.gi_profile.name for d in devices} == {"3g.20gb", "1g.5gb"}
    assert nvml.mig_devices(nvml.gpus()[0].uuid) == []  # other GPUs untouched


def test_partial_compute_instances_share_a_gpu_instance() -> None:
    nvml, _, _ = open_node("dgx-a100-40gb")
    uuid = first_uuid(nvml)
    gi = nvml.create_gpu_instance(uuid, 9, Placement(4, 4))
    first = nvml.create_compute_instance(uuid, gi.id, 0)
    second = nvml.create_compute_instance(uuid, gi.id, 0)
    assert (first.compute_instance_id, second.compute_instance_id) == (0, 1)
    assert first.multiprocessors == 14
    assert first.uuid != second.uuid
    assert len(nvml.mig_devices(uuid)) == 2


def test_create_and_destroy_round_trip() -> None:
    nvml, _, _ = open_node("a30-node")
    uuid = first_uuid(nvml)
    gi = nvml.create_gpu_instance(uuid, 5, Placement(2, 2))
    mig = nvml.create_compute_instance(uuid, gi.id, 1)
    nvml.destroy_compute_instance(uuid, gi.id, mig.compute_instance_id)
    assert nvml.compute_instances(uuid, gi.id) == []
    assert nvml.mig_devices(uuid) == []
    nvml.destroy_gpu_instance(uuid, gi.id)
    assert nvml.gpu_instances(uuid) == []

    again = nvml.create_gpu_instance(uuid, 5, Placement(2, 2))
    recreated = nvml.create_compute_instance(uuid, again.id, 1)
    assert recreated.uuid != mig.uuid  # a recreated MIG device is a new device


def test_hopper_mig_mode_toggles_at_once() -> None:
    nvml, lib, _ = open_node("dgx-h100")
    uuid = first_uuid(nvml)
    assert nvml.set_mig_mode(uuid, True) == codes.SUCCESS
    gpu = nvml.gpu(uuid)
    assert (gpu.mig_enabled, gpu.mig_pending) == (True, True)
    # the change may reset the GPU, so its handle is looked up again
    assert lib.calls["nvmlDeviceGetHandleByUUID"] == 1
    gi = nvml.create_gpu_instance(uuid, 0, Placement(0, 8))
    assert nvml.set_mig_mode(uuid, False) == codes.ERROR_IN_USE
    nvml.destroy_gpu_instance(uuid, gi.id)
    assert nvml.set_mig_mode(uuid, False) == codes.SUCCESS
    assert not nvml.gpu(uuid).mig_enabled


def test_ampere_mig_mode_change_stays_pending() -> None:
    nvml, _, _ = open_node("dgx-a100-80gb")
    uuid = first_uuid(nvml)
    assert nvml.set_mig_mode(uuid, True) == codes.ERROR_RESET_REQUIRED
    gpu = nvml.gpu(uuid)
    assert (gpu.mig_enabled, gpu.mig_pending) == (False, True)


# ---------------------------------------------------------------- errors


def test_overlapping_placement_is_insufficient_resources() -> None:
    nvml, _, _ = open_node("dgx-a100-40gb")
    uuid = first_uuid(nvml)
    nvml.create_gpu_instance(uuid, 9, Placement(0, 4))
    with pytest.raises(NvmlError) as excinfo:
        nvml.create_gpu_instance(uuid, 19, Placement(3, 1))
    assert excinfo.value.code == codes.ERROR_INSUFFICIENT_RESOURCES
    assert str(excinfo.value) == (
        f"create GPU instance profile 19 at placement 3:1 on {uuid}: Insufficient Resources"
    )
    assert excinfo.value.__cause__ is not None


def test_destroying_a_gpu_instance_with_compute_instances_is_in_use() -> None:
    nvml, _, _ = open_node("dgx-a100-40gb")
    uuid = first_uuid(nvml)
    gi = nvml.create_gpu_instance(uuid, 14, Placement(2, 2))
    nvml.create_compute_instance(uuid, gi.id, 1)
    with pytest.raises(NvmlError) as excinfo:
        nvml.destroy_gpu_instance(uuid, gi.id)
    assert excinfo.value.code == codes.ERROR_IN_USE
    assert f"destroy GPU instance {gi.id} on {uuid}" in str(excinfo.value)
    assert "In use by another client" in str(excinfo.value)


def test_mig_operations_on_l4_are_not_supported() -> None:
    nvml, _, _ = open_node("l4-node")
    uuid = first_uuid(nvml)
    for operation in (
        lambda: nvml.create_gpu_instance(uuid, 19, Placement(0, 1)),
        lambda: nvml.set_mig_mode(uuid, True),
        lambda: nvml.destroy_gpu_instance(uuid, 0),
    ):
        with pytest.raises(NvmlError) as excinfo:
            operation()
        assert excinfo.value.code == codes.ERROR_NOT_SUPPORTED
        assert uuid in str(excinfo.value)


def test_missing_instances_are_not_found() -> None:
    nvml, _, _ = open_node("dgx-a100-40gb")
    uuid = first_uuid(nvml)
    with pytest.raises(NvmlError) as excinfo:
        nvml.destroy_gpu_instance(uuid, 7)
    assert excinfo.value.code == codes.ERROR_NOT_FOUND
    assert str(excinfo.value) == f"look up GPU instance 7 on {uuid}: Not Found"
    gi = nvml.create_gpu_instance(uuid, 0, Placement(0, 8))
    with pytest.raises(NvmlError) as excinfo:
        nvml.destroy_compute_instance(uuid, gi.id, 3)
    assert excinfo.value.code == codes.ERROR_NOT_FOUND
    with pytest.raises(NvmlError) as excinfo:
        nvml.compute_instances(uuid, 12)
    assert excinfo.value.code == codes.ERROR_NOT_FOUND


def test_compute_instance_profile_the_gi_does_not_offer_is_refused() -> None:
    nvml, _, _ = open_node("dgx-a100-40gb")
    uuid = first_uuid(nvml)
    gi = nvml.create_gpu_instance(uuid, 19, Placement(0, 1))
    with pytest.raises(NvmlError) as excinfo:
        nvml.create_compute_instance(uuid, gi.id, 2)  # 3 slices in a 1-slice GI
    assert excinfo.value.code == codes.ERROR_NOT_SUPPORTED
    assert f"compute instance profile 2 in GPU instance {gi.id} on {uuid}" in str(excinfo.value)


def test_unknown_and_mig_uuids_are_refused() -> None:
    nvml, _, _ = open_node("dgx-a100-40gb")
    with pytest.raises(NvmlError) as excinfo:
        nvml.gpu("GPU-00000000-0000-0000-0000-000000000000")
    assert excinfo.value.code == codes.ERROR_NOT_FOUND
    with pytest.raises(NvmlError) as excinfo:
        nvml.gpu("MIG-00000000-0000-0000-0000-000000000000")
    assert excinfo.value.code == codes.ERROR_INVALID_ARGUMENT


def test_a_lost_gpu_is_reported_with_its_uuid() -> None:
    nvml, lib, _ = open_node("dgx-h100")
    uuid = first_uuid(nvml)
    lib.fail_next("nvmlDeviceGetName", codes.ERROR_GPU_IS_LOST)
    with pytest.raises(NvmlError) as excinfo:
        nvml.gpu(uuid)
    assert excinfo.value.code == codes.ERROR_GPU_IS_LOST
    assert str(excinfo.value) == f"read the name of {uuid}: GPU is lost"


def test_init_failure_is_an_nvml_error() -> None:
    lib = fake_pynvml(SimHardware(load_shape("l4-node")))
    lib.fail_next("nvmlInitWithFlags", codes.ERROR_DRIVER_NOT_LOADED)
    with pytest.raises(NvmlError) as excinfo:
        RealNvml(lib)
    assert excinfo.value.code == codes.ERROR_DRIVER_NOT_LOADED
    assert str(excinfo.value) == "initialize NVML (flags 0x0): Driver Not Loaded"


# ---------------------------------------------------------------- lifecycle and caching


def test_use_after_close_is_a_clear_error() -> None:
    nvml, lib, _ = open_node("l4-node")
    uuid = first_uuid(nvml)
    nvml.close()
    assert not lib.initialized
    nvml.close()  # idempotent
    with pytest.raises(NvmlError) as excinfo:
        nvml.gpu(uuid)
    assert excinfo.value.code == codes.ERROR_UNINITIALIZED
    assert "NVML is not initialized" in str(excinfo.value)


def test_library_shut_down_underneath_is_reported_as_uninitialized() -> None:
    nvml, lib, _ = open_node("l4-node")
    lib.nvmlShutdown()  # someone else's shutdown drops the last reference
    with pytest.raises(NvmlError) as excinfo:
        nvml.gpus()
    assert excinfo.value.code == codes.ERROR_UNINITIALIZED
    assert str(excinfo.value) == "count GPUs: Uninitialized"


def test_context_manager_shuts_nvml_down() -> None:
    lib = fake_pynvml(SimHardware(load_shape("l4-node")))
    with RealNvml(lib, init_flags=1) as nvml:
        assert lib.initialized
        assert len(nvml.gpus()) == 4
    assert not lib.initialized


def test_gpu_handles_are_cached_by_uuid() -> None:
    nvml, lib, _ = open_node("dgx-a100-40gb")
    uuids = [g.uuid for g in nvml.gpus()]
    for uuid in uuids:
        nvml.gpu(uuid)
        nvml.mig_devices(uuid)
    assert lib.calls["nvmlDeviceGetHandleByUUID"] == 0

    fresh = RealNvml(lib)
    fresh.gpu(uuids[3])
    fresh.gpu(uuids[3])
    fresh.gpu_instance_profiles(uuids[3])
    assert lib.calls["nvmlDeviceGetHandleByUUID"] == 1


def test_gi_profiles_are_read_once_per_mig_mode() -> None:
    nvml, lib, _ = open_node("dgx-h100")
    uuid = first_uuid(nvml)
    nvml.gpu_instance_profiles(uuid)
    reads = lib.calls["nvmlDeviceGetGpuInstanceProfileInfo"]
    assert reads == 18  # every enum, once
    nvml.gpu_instance_profiles(uuid)
    nvml.mig_devices(uuid)
    assert lib.calls["nvmlDeviceGetGpuInstanceProfileInfo"] == reads
    nvml.set_mig_mode(uuid, True)
    nvml.gpu_instance_profiles(uuid)
    assert lib.calls["nvmlDeviceGetGpuInstanceProfileInfo"] == 2 * reads


# ---------------------------------------------------------------- per-process use, recovery action


def test_per_process_memory_and_utilization_of_a_gpu() -> None:
    nvml, lib, hw = open_node("dgx-h100")
    uuid = first_uuid(nvml)
    assert nvml.running_compute_processes(uuid) == []
    assert nvml.process_utilization(uuid, 0) == []  # NVML answers NOT_FOUND: no sample
    busy = hw.run_workload(uuid, "pod-a", sm_percent=35, memory_bytes=3 * 2**30)
    idle = hw.run_workload(uuid, "pod-b", sm_percent=0, memory_bytes=2**30)
    processes = nvml.running_compute_processes(uuid)
    assert [(p.pid, p.used_memory_bytes) for p in processes] == [
        (busy.pid, 3 * 2**30),
        (idle.pid, 2**30),
    ]
    (sample,) = nvml.process_utilization(uuid, 0)  # only processes with non-zero use
    assert (sample.pid, sample.sm_percent) == (busy.pid, 35)
    assert nvml.process_utilization(uuid, sample.timestamp_us + 10**9) == []
    assert lib.calls["nvmlDeviceGetMPSComputeRunningProcesses"] == 2  # MPS clients asked too


def test_mps_clients_are_optional_and_other_failures_are_errors() -> None:
    nvml, lib, hw = open_node("dgx-h100")
    uuid = first_uuid(nvml)
    hw.run_workload(uuid, "pod-a", sm_percent=1, memory_bytes=1)
    lib.fail_next("nvmlDeviceGetMPSComputeRunningProcesses", codes.ERROR_NOT_SUPPORTED)
    assert len(nvml.running_compute_processes(uuid)) == 1
    lib.fail_next("nvmlDeviceGetComputeRunningProcesses", codes.ERROR_NO_PERMISSION)
    with pytest.raises(NvmlError, match=f"list the compute processes of {uuid}") as error:
        nvml.running_compute_processes(uuid)
    assert error.value.code == codes.ERROR_NO_PERMISSION


def test_mig_devices_give_their_own_processes_and_no_utilization() -> None:
    nvml, _lib, hw = open_node("a30-node")
    uuid = first_uuid(nvml)
    nvml.set_mig_mode(uuid, True)
    gi = nvml.create_gpu_instance(uuid, 14, Placement(0, 1))
    mig = nvml.create_compute_instance(uuid, gi.id, 0)
    hw.run_workload(mig.uuid, "pod-m", sm_percent=50, memory_bytes=2**30)
    (process,) = nvml.running_compute_processes(mig.uuid)
    assert process.used_memory_bytes == 2**30
    assert nvml.running_compute_processes(uuid) == [process]  # the parent's aggregate view
    for device in (mig.uuid, uuid):
        with pytest.raises(NvmlError) as error:
            nvml.process_utilization(device, 0)
        assert error.value.code == codes.ERROR_NOT_SUPPORTED


def test_the_recovery_action_is_read_from_the_field_value() -> None:
    nvml, lib, hw = open_node("dgx-h100")
    uuid = first_uuid(nvml)
    assert nvml.gpu_recovery_action(uuid) == codes.RECOVERY_ACTION_NONE
    hw.inject_health_event(0, "xid", 79)
    assert nvml.gpu_recovery_action(uuid) == codes.RECOVERY_ACTION_GPU_RESET
    lib.unsupported_fields.add(codes.FI_DEV_GET_GPU_RECOVERY_ACTION)  # a driver before R565
    assert nvml.gpu_recovery_action(uuid) is None
    lib.unsupported_fields.clear()
    hw.inject_health_event(0, "gpu-lost")
    with pytest.raises(NvmlError) as error:
        nvml.gpu_recovery_action(uuid)
    assert error.value.code == codes.ERROR_GPU_IS_LOST
    hw.recover(0)
    assert nvml.gpu_recovery_action(uuid) == codes.RECOVERY_ACTION_NONE
