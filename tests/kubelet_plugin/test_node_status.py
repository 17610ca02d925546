"""`dra-gpu status` rendering: one line per GPU and per MIG device, MPS at a glance."""

from __future__ import annotations

from pathlib import Path

from dra_driver.composition.hardware import open_simulated
from kubelet_plugin.node_status import (
    GpuStatus,
    MigDeviceStatus,
    MpsStatus,
    collect,
    render_table,
    to_dicts,
)

MPS = MpsStatus(running=True, pid=4242, pipe_directory="/k/mps/GPU-1/pipe", clients=("ml/a",))
GPUS = [
    GpuStatus("gpu-0", "GPU-1", "NVIDIA H100 80GB HBM3", "Disabled", "Long", MPS, ()),
    GpuStatus(
        "gpu-1",
        "GPU-2",
        "NVIDIA H100 80GB HBM3",
        "Enabled",
        None,
        None,
        (
            MigDeviceStatus(
                "MIG-3",
                "1g.10gb",
                9,
                0,
                MpsStatus(running=False, pid=None, pipe_directory="/k/mps/MIG-3/pipe", clients=()),
            ),
        ),
    ),
]


def test_table_shows_time_slice_mps_and_mig_devices() -> None:
    short = render_table(GPUS).splitlines()
    assert short[1].endswith("running pid 4242 (ml/a)")  # the pipe directory is in -o wide
    lines = render_table(GPUS, wide=True).splitlines()
    assert lines[0].split() == ["NAME", "UUID", "MIG", "TIMESLICE", "MPS"]
    assert lines[1].split()[:4] == ["gpu-0", "GPU-1", "Disabled", "Long"]
    assert lines[1].endswith("running pid 4242 (ml/a) /k/mps/GPU-1/pipe")
    assert lines[2].split()[:4] == ["gpu-1", "GPU-2", "Enabled", "-"]
    assert lines[3].split()[:3] == ["1g.10gb", "GI9/CI0", "MIG-3"]
    # A daemon the checkpoint names but that does not run is what the admin must see.
    assert lines[3].endswith("NOT RUNNING (no claims) /k/mps/MIG-3/pipe")


def test_yaml_fields() -> None:
    first, second = to_dicts(GPUS)
    assert first["timeSlice"] == "Long"
    assert first["mps"] == {
        "running": True,
        "pid": 4242,
        "pipeDirectory": "/k/mps/GPU-1/pipe",
        "clients": ["ml/a"],
    }
    assert second["migDevices"][0]["gpuInstanceId"] == 9
    assert second["migDevices"][0]["mps"]["running"] is False


def test_collect_reads_the_time_slice_a_simulated_gpu_was_set_to(tmp_path: Path) -> None:
    node = open_simulated("l4-node", sim_state=tmp_path / "hw.json")
    hardware = node.hardware
    gpu = hardware.nvml.gpus()[0]
    node.sim.set_time_slice(gpu.uuid, 2)  # what `--set-timeslice 2` leaves behind

    statuses = {s.uuid: s for s in collect(hardware, data_dir=None)}

    assert statuses[gpu.uuid].time_slice == "Medium"
    assert all(s.time_slice == "Default" for uuid, s in statuses.items() if uuid != gpu.uuid)
