"""Both backends describe the same simulated node identically.

`RealNvml` over the fake pynvml and `SimNvml` read the same `SimHardware`, so
every record they return must be equal; a difference means one backend
misreads NVML (names, placements, ids, MIG devices) and the driver would
publish different devices on real GPUs than in the simulator.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from dra_driver.hardware.nvml.interface import Nvml, Placement
from dra_driver.hardware.nvml.real import RealNvml
from dra_driver.hardware.simulated.hardware import SimHardware
from dra_driver.hardware.simulated.nvml import SimNvml
from dra_driver.hardware.simulated.shapes import BUILTIN_SHAPES, load_shape
from tests.fakes import fake_pynvml, fake_sysfs


def backends(shape: str, tmp_path: Path) -> tuple[RealNvml, SimNvml, SimHardware]:
    hw = SimHardware(load_shape(shape))
    real = RealNvml(fake_pynvml(hw), sysfs_root=fake_sysfs(hw, tmp_path / "sys"))
    return real, SimNvml(hw), hw


def assert_same_view(real: Nvml, sim: Nvml) -> None:
    assert real.system() == sim.system()
    assert real.gpus() == sim.gpus()
    for gpu in sim.gpus():
        uuid = gpu.uuid
        real_profiles = sorted(real.gpu_instance_profiles(uuid), key=lambda p: p.id)
        assert real_profiles == sorted(sim.gpu_instance_profiles(uuid), key=lambda p: p.id)
        for profile in real_profiles:
            assert real.compute_instance_profiles(uuid, profile.id) == (
                sim.compute_instance_profiles(uuid, profile.id)
            ), (uuid, profile.name)
        assert real.gpu_instances(uuid) == sim.gpu_instances(uuid)
        for gi in sim.gpu_instances(uuid):
            assert real.compute_instances(uuid, gi.id) == sim.compute_instances(uuid, gi.id)
        assert real.mig_devices(uuid) == sim.mig_devices(uuid)


@pytest.mark.parametrize("shape", sorted(BUILTIN_SHAPES))
def test_fresh_nodes_read_the_same(shape: str, tmp_path: Path) -> None:
    real, sim, _ = backends(shape, tmp_path)
    assert_same_view(real, sim)


# shape -> GI profiles to create, with their placements: a multi-slice GI and a small one
PARTITIONS = {
    "dgx-a100-40gb": ((9, Placement(4, 4)), (19, Placement(0, 1))),
    "dgx-h100": ((9, Placement(4, 4)), (15, Placement(0, 2))),
    "a30-node": ((5, Placement(2, 2)), (14, Placement(0, 1))),
}


@pytest.mark.parametrize("shape", sorted(PARTITIONS))
def test_partitioned_nodes_read_the_same(shape: str, tmp_path: Path) -> None:
    real, sim, _ = backends(shape, tmp_path)
    for gpu in real.gpus()[:2]:
        uuid = gpu.uuid
        if not gpu.mig_enabled:
            assert real.set_mig_mode(uuid, True) == 0
        for profile_id, placement in PARTITIONS[shape]:
            gi = real.create_gpu_instance(uuid, profile_id, placement)
            one_slice = real.compute_instance_profiles(uuid, profile_id)[0]
            for _ in range(min(2, one_slice.instance_count)):  # two CIs share a big GI
                real.create_compute_instance(uuid, gi.id, one_slice.id)
        assert real.gpu_instances(uuid) == sim.gpu_instances(uuid)
        assert len(real.mig_devices(uuid)) == 3
    assert_same_view(real, sim)


def test_changes_through_one_backend_are_seen_by_the_other(tmp_path: Path) -> None:
    real, sim, _ = backends("dgx-a100-40gb", tmp_path)
    uuid = sim.gpus()[1].uuid
    gi = sim.create_gpu_instance(uuid, 14, Placement(4, 2))
    mig = sim.create_compute_instance(uuid, gi.id, 1)
    assert real.mig_devices(uuid) == [mig]
    real.destroy_compute_instance(uuid, gi.id, mig.compute_instance_id)
    real.destroy_gpu_instance(uuid, gi.id)
    assert sim.gpu_instances(uuid) == []
    assert_same_view(real, sim)


def test_per_process_use_and_recovery_read_the_same(tmp_path: Path) -> None:
    real, sim, hw = backends("dgx-h100", tmp_path)
    gpus = [g.uuid for g in sim.gpus()]
    hw.run_workload(gpus[0], "pod-a", sm_percent=20, memory_bytes=2**30)
    hw.run_workload(gpus[1], "pod-b", sm_percent=0, memory_bytes=2**31)
    hw.inject_health_event(2, "double-bit-ecc")
    for uuid in gpus:
        assert real.running_compute_processes(uuid) == sim.running_compute_processes(uuid)
        assert real.gpu_recovery_action(uuid) == sim.gpu_recovery_action(uuid)
        assert [(s.pid, s.sm_percent) for s in real.process_utilization(uuid, 0)] == [
            (s.pid, s.sm_percent) for s in sim.process_utilization(uuid, 0)
        ]
