"""Device-health events through both NVML backends: pynvml's event set and the simulator's."""

from __future__ import annotations

from pathlib import Path

import pytest

from dra_driver.hardware.nvml.interface import HealthEvent, HealthEventKind, HealthEventSource
from dra_driver.hardware.nvml.real import RealNvml
from dra_driver.hardware.simulated.hardware import SimHardware
from dra_driver.hardware.simulated.nvml import SimNvml
from dra_driver.hardware.simulated.shapes import load_shape
from dra_driver.hardware.simulated.state import decode
from tests.fakes import fake_pynvml


def _backends(hw: SimHardware) -> dict[str, HealthEventSource]:
    return {"real": RealNvml(fake_pynvml(hw), sysfs_root=None), "sim": SimNvml(hw)}


@pytest.mark.parametrize("backend", ["real", "sim"])
def test_events_after_registration_reach_only_registered_gpus(backend: str) -> None:
    hw = SimHardware(load_shape("dgx-h100"))
    hw.inject_health_event(0, "xid", 48)  # before the registration: never delivered
    uuids = [g.uuid for g in hw.gpus()]
    events = _backends(hw)[backend].health_events(uuids[:4])
    try:
        assert events.wait(0.05) == []
        hw.inject_health_event(6, "xid", 79)  # not registered
        hw.inject_health_event(2, "xid", 79)
        assert events.wait(5) == [HealthEvent(uuids[2], HealthEventKind.XID, xid=79)]
        hw.inject_health_event(1, "double-bit-ecc")
        assert events.wait(5) == [HealthEvent(uuids[1], HealthEventKind.DOUBLE_BIT_ECC)]
    finally:
        events.close()


def test_a_lost_gpu_makes_pynvml_report_every_registered_gpu_lost() -> None:
    hw = SimHardware(load_shape("dgx-h100"))
    uuids = [g.uuid for g in hw.gpus()]
    events = RealNvml(fake_pynvml(hw), sysfs_root=None).health_events(uuids[:2])
    hw.inject_health_event(1, "gpu-lost")
    assert events.wait(5) == [HealthEvent(uuid, HealthEventKind.GPU_LOST) for uuid in uuids[:2]]


def test_the_simulator_delivers_recovery_which_nvml_cannot() -> None:
    hw = SimHardware(load_shape("l4-node"))
    uuid = hw.gpus()[0].uuid
    events = SimNvml(hw).health_events([uuid])
    hw.inject_health_event(0, "recovered")
    assert events.wait(5) == [HealthEvent(uuid, HealthEventKind.RECOVERED)]


def test_state_files_without_health_events_still_load(tmp_path: Path) -> None:
    state_file = tmp_path / "state.json"
    hw = SimHardware(load_shape("l4-node"), state_path=state_file)
    hw.inject_health_event(0, "xid", 79)
    data = state_file.read_bytes()
    assert decode(data, "test").health_events[0].xid == 79
    legacy = data.replace(b'"health_events"', b'"ignored_events"').replace(
        b'"health_seq"', b'"ignored_seq"'
    )
    loaded = decode(legacy, "legacy")
    assert loaded.health_events == []
    assert loaded.health_seq == 0
