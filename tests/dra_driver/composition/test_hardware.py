"""`open_hardware` builds the real or the simulated backend from the --nvml flag."""

from __future__ import annotations

import gc
from pathlib import Path

import pytest

from dra_driver.composition.hardware import open_hardware, open_simulated
from dra_driver.errors import ConfigError
from dra_driver.hardware.nvml.interface import Placement
from dra_driver.hardware.simulated.gpu_policy import SimGpuPolicy
from dra_driver.hardware.simulated.node_files import sim_proc_root
from dra_driver.hardware.simulated.nvml import SimNvml


def test_sim_shape_without_state_lives_in_memory_with_a_temporary_proc():
    node = open_simulated("dgx-h100", node_name="node-7")
    hw = node.hardware
    assert isinstance(hw.nvml, SimNvml)
    assert isinstance(hw.gpu_policy, SimGpuPolicy)
    assert len(hw.nvml.gpus()) == 8
    assert hw.host.boot_id() == node.sim.boot_id()
    assert hw.host.char_major("nvidia-caps") == 236
    proc = hw.host.proc_root
    assert proc == node.sim.proc_root
    assert proc.is_dir()
    del hw, node
    gc.collect()
    assert not proc.exists()  # the temporary /proc goes with the simulator


def test_sim_state_is_shared_and_its_proc_sits_next_to_it(tmp_path: Path):
    state = tmp_path / "sim" / "state.json"
    first = open_hardware("sim:dgx-a100-40gb", sim_state=state, node_name="n")
    uuid = first.nvml.gpus()[2].uuid
    gi = first.nvml.create_gpu_instance(uuid, 9, Placement(0, 4))
    dev = first.nvml.create_compute_instance(uuid, gi.id, 2)
    assert first.host.proc_root == sim_proc_root(state) == tmp_path / "sim" / "state.json.proc"
    assert first.host.mig_cap(2, gi.id, dev.compute_instance_id)[0] > 0

    second = open_hardware("sim:dgx-a100-40gb", sim_state=state, node_name="n")
    assert second.nvml.mig_devices(uuid) == [dev]


def test_sim_yaml_shape_and_latency(tmp_path: Path):
    shape = tmp_path / "shape.yaml"
    shape.write_text("gpus:\n  - model: A30\n    migEnabled: true\n    count: 2\n")
    node = open_simulated(str(shape), latency={"gi-create": 0.0, "ci-create": 0.0})
    assert [g.product_name for g in node.hardware.nvml.gpus()] == ["NVIDIA A30"] * 2
    assert dict(node.sim.latency) == {"gi-create": 0.0, "ci-create": 0.0}


@pytest.mark.parametrize("spec", ["", "fake", "sim:", "sim:  ", "SIM:dgx-h100", "nvml"])
def test_bad_specs_list_the_accepted_forms(spec: str):
    with pytest.raises(ConfigError) as err:
        open_hardware(spec)
    assert "'real'" in str(err.value)
    assert "sim:<shape>" in str(err.value)


def test_unknown_shape_is_a_config_error():
    with pytest.raises(ConfigError, match="dgx-h100"):
        open_hardware("sim:dgx-b300")


# Real hardware through a real libnvidia-ml.so.1 from a driver root: test_real_library.py
