"""SimNvml serves the `Nvml` protocol from the simulated hardware."""

from __future__ import annotations

import pytest

from dra_driver.errors import NvmlError
from dra_driver.hardware.nvml import codes
from dra_driver.hardware.nvml.interface import (
    ComputeInstanceInfo,
    GpuInstanceInfo,
    Nvml,
    Placement,
    SystemInfo,
)
from dra_driver.hardware.simulated.hardware import SimHardware
from dra_driver.hardware.simulated.nvml import SimNvml
from dra_driver.hardware.simulated.shapes import load_shape


def sim(shape: str) -> tuple[SimNvml, SimHardware]:
    hw = SimHardware(load_shape(shape))
    return SimNvml(hw), hw


def test_system_info():
    nvml, _ = sim("dgx-h100")
    protocol: Nvml = nvml  # SimNvml implements the protocol
    assert protocol.system() == SystemInfo("570.172.08", 12080)
    assert protocol.system().cuda_version == "12.8"


def test_gpus_of_a_dgx_h100():
    nvml, _ = sim("dgx-h100")
    gpus = nvml.gpus()
    assert [g.index for g in gpus] == list(range(8))
    first = gpus[0]
    assert first.product_name == "NVIDIA H100 80GB HBM3"
    assert first.brand == "Nvidia"
    assert first.architecture == "Hopper"
    assert first.cuda_compute_capability == (9, 0)
    assert first.memory_bytes == 81559 * 2**20
    assert first.pci_device_id == 0x233010DE
    assert first.pci_bus_id == "0000:1b:00.0"
    assert (first.mig_capable, first.mig_enabled, first.mig_pending) == (True, False, False)
    assert first.mig_toggle_supported
    assert nvml.gpu(first.uuid) == first


def test_an_l4_is_not_mig_capable_and_has_no_profiles():
    nvml, _ = sim("l4-node")
    gpu = nvml.gpus()[0]
    assert (gpu.product_name, gpu.architecture, gpu.mig_capable) == (
        "NVIDIA L4",
        "Ada Lovelace",
        False,
    )
    assert nvml.gpu_instance_profiles(gpu.uuid) == []
    assert nvml.gpu_instances(gpu.uuid) == []
    assert nvml.mig_devices(gpu.uuid) == []


def test_profiles_are_listed_with_mig_off():
    nvml, _ = sim("dgx-h100")
    uuid = nvml.gpus()[0].uuid
    profiles = nvml.gpu_instance_profiles(uuid)
    assert [p.id for p in profiles] == [19, 20, 15, 14, 9, 5, 0]
    p15 = next(p for p in profiles if p.id == 15)
    assert (p15.name, p15.slice_count, p15.memory_slice_count, p15.multiprocessors) == (
        "1g.20gb",
        1,
        2,
        26,
    )
    assert p15.placements == (Placement(0, 2), Placement(2, 2), Placement(4, 2), Placement(6, 2))
    cis = nvml.compute_instance_profiles(uuid, 15)
    assert [(c.id, c.multiprocessors) for c in cis] == [(0, 16), (7, 26)]
    assert nvml.gpu_instances(uuid) == []
    assert nvml.mig_devices(uuid) == []


def test_full_mig_device_lifecycle():
    nvml, _ = sim("dgx-h100")
    gpu = nvml.gpus()[5]
    assert nvml.set_mig_mode(gpu.uuid, True) == codes.SUCCESS
    assert nvml.gpu(gpu.uuid).mig_enabled
    gi = nvml.create_gpu_instance(gpu.uuid, 9, Placement(4, 4))
    assert gi == GpuInstanceInfo(id=2, profile_id=9, placement=Placement(4, 4))
    dev = nvml.create_compute_instance(gpu.uuid, gi.id, 2)
    assert (dev.parent_uuid, dev.parent_minor) == (gpu.uuid, 5)
    assert (dev.gpu_instance_id, dev.compute_instance_id, dev.ci_profile_id) == (2, 0, 2)
    assert dev.gi_profile.name == "3g.40gb"
    assert dev.placement == Placement(4, 4)
    assert dev.multiprocessors == 60
    assert dev.memory_bytes == 40448 * 2**20
    assert dev.uuid.startswith("MIG-")
    assert nvml.gpu_instances(gpu.uuid) == [gi]
    assert nvml.compute_instances(gpu.uuid, gi.id) == [ComputeInstanceInfo(0, 2, 2)]
    assert nvml.mig_devices(gpu.uuid) == [dev]
    assert nvml.mig_devices(nvml.gpus()[4].uuid) == []

    with pytest.raises(NvmlError) as err:
        nvml.destroy_gpu_instance(gpu.uuid, gi.id)
    assert err.value.code == codes.ERROR_IN_USE
    nvml.destroy_compute_instance(gpu.uuid, gi.id, dev.compute_instance_id)
    nvml.destroy_gpu_instance(gpu.uuid, gi.id)
    assert nvml.mig_devices(gpu.uuid) == []
    assert nvml.set_mig_mode(gpu.uuid, False) == codes.SUCCESS


def test_ampere_mig_mode_is_reported_pending():
    nvml, hw = sim("dgx-a100-80gb")
    uuid = nvml.gpus()[0].uuid
    assert nvml.set_mig_mode(uuid, True) == codes.ERROR_RESET_REQUIRED
    gpu = nvml.gpu(uuid)
    assert (gpu.mig_enabled, gpu.mig_pending, gpu.mig_toggle_supported) == (False, True, False)
    hw.reset_gpu(uuid)
    assert nvml.gpu(uuid).mig_enabled


def test_unknown_gpu_and_gpu_instance_are_not_found():
    nvml, _ = sim("dgx-a100-40gb")
    with pytest.raises(NvmlError) as err:
        nvml.gpu("GPU-does-not-exist")
    assert err.value.code == codes.ERROR_NOT_FOUND
    with pytest.raises(NvmlError) as err:
        nvml.mig_devices("GPU-does-not-exist")
    assert err.value.code == codes.ERROR_NOT_FOUND
    with pytest.raises(NvmlError) as err:
        nvml.compute_instances(nvml.gpus()[0].uuid, 9)
    assert err.value.code == codes.ERROR_NOT_FOUND


def test_refusals_keep_their_nvml_codes():
    nvml, _ = sim("dgx-a100-40gb")
    uuid = nvml.gpus()[0].uuid
    nvml.create_gpu_instance(uuid, 0, Placement(0, 8))
    with pytest.raises(NvmlError) as err:
        nvml.create_gpu_instance(uuid, 19, Placement(0, 1))
    assert err.value.code == codes.ERROR_INSUFFICIENT_RESOURCES
