"""The simulated node's GPU policy: it records what nvidia-smi would set."""

from __future__ import annotations

from pathlib import Path

import pytest

from dra_driver.errors import GpuSettingError
from dra_driver.hardware.simulated import state as sim_state
from dra_driver.hardware.simulated.gpu_policy import SimGpuPolicy
from dra_driver.hardware.simulated.hardware import SimHardware
from dra_driver.hardware.simulated.shapes import load_shape


def test_the_simulated_node_records_the_settings_and_a_reset_clears_them(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    hardware = SimHardware(load_shape("dgx-h100"), state_path=path)
    uuid = hardware.gpus()[0].uuid
    policy = SimGpuPolicy(hardware)

    policy.set_compute_mode(uuid, "PROHIBITED")
    policy.set_time_slice(uuid, 2)

    again = SimHardware(state_path=path)  # another process reading the same node
    assert (again.compute_mode(uuid), again.time_slice(uuid)) == ("PROHIBITED", 2)
    assert policy.time_slice(uuid) == 2  # read back, as `dra-gpu status` shows it
    with pytest.raises(GpuSettingError, match="expected 0 \\(Default\\) to 3 \\(Long\\)"):
        policy.set_time_slice(uuid, 4)
    again.reset_gpu(uuid)
    assert (hardware.compute_mode(uuid), hardware.time_slice(uuid)) == ("DEFAULT", 0)


def test_state_files_from_before_time_slicing_still_load(tmp_path: Path) -> None:
    hardware = SimHardware(load_shape("dgx-h100"), state_path=tmp_path / "state.json")
    doc = sim_state.encode(sim_state.decode((tmp_path / "state.json").read_bytes(), "x"))
    old = doc.replace(b'"compute_mode": "DEFAULT",', b"").replace(b'"time_slice": 0', b'"x": 0')
    assert b"time_slice" not in old
    assert b"compute_mode" not in old
    loaded = sim_state.decode(old, "old")
    assert loaded.gpus[0].time_slice == 0
    assert loaded.gpus[0].compute_mode == "DEFAULT"
    assert hardware.gpu_count() == 8
