"""Simulated CUDA processes (`dra-gpu sim workload`): what NVML and the fake /proc show of them."""

from __future__ import annotations

from pathlib import Path

import pytest

from dra_driver.cli import main
from dra_driver.errors import ConfigError, NvmlError
from dra_driver.hardware.nvml import codes
from dra_driver.hardware.nvml.interface import Placement
from dra_driver.hardware.simulated.hardware import SimHardware
from dra_driver.hardware.simulated.nvml import SimNvml
from dra_driver.hardware.simulated.shapes import load_shape
from dra_driver.node.cgroups import pod_uid_from_cgroup

POD = "9e2d4b6a-0000-4000-8000-000000000001"


def _node(tmp_path: Path, shape: str = "dgx-h100") -> SimHardware:
    return SimHardware(
        load_shape(shape), state_path=tmp_path / "hw.json", proc_root=tmp_path / "proc"
    )


def test_a_workload_is_a_process_of_its_pod(tmp_path: Path) -> None:
    hw = _node(tmp_path)
    uuid = hw.gpus()[0].uuid
    workload = hw.run_workload(uuid, POD, sm_percent=30, memory_bytes=2**30)
    cgroup = tmp_path / "proc" / str(workload.pid) / "cgroup"
    assert pod_uid_from_cgroup(cgroup.read_text()) == POD
    assert "kubepods.slice" in cgroup.read_text()  # cgroup v2, systemd driver
    # Another process (a new plugin, dra-gpu status) sees it through the state file.
    again = SimHardware(state_path=tmp_path / "hw.json", proc_root=tmp_path / "proc")
    assert [w.pid for w in again.processes_on(uuid)] == [workload.pid]
    changed = again.run_workload(uuid, POD, sm_percent=80, memory_bytes=2**31)
    assert changed.pid == workload.pid  # the same pod's process, new numbers
    assert hw.processes_on(uuid)[0].sm_percent == 80
    assert hw.stop_workload(uuid, POD) == workload.pid
    assert not cgroup.exists()
    assert not cgroup.parent.exists()
    assert hw.stop_workload(uuid, POD) is None


def test_memory_cannot_be_overcommitted(tmp_path: Path) -> None:
    hw = _node(tmp_path, "l4-node")
    uuid = hw.gpus()[0].uuid
    total = hw.gpus()[0].model.memory_bytes
    hw.run_workload(uuid, "pod-a", sm_percent=0, memory_bytes=total - 2**30)
    with pytest.raises(ConfigError, match="out of memory"):
        hw.run_workload(uuid, "pod-b", sm_percent=0, memory_bytes=2**31)
    with pytest.raises(ConfigError, match="0 to 100 percent"):
        hw.run_workload(uuid, "pod-b", sm_percent=101, memory_bytes=0)


def test_mig_rules_for_processes(tmp_path: Path) -> None:
    hw = _node(tmp_path, "a30-node")
    nvml = SimNvml(hw)
    uuid = hw.gpus()[0].uuid
    nvml.set_mig_mode(uuid, True)
    with pytest.raises(ConfigError, match="MIG is enabled"):
        hw.run_workload(uuid, POD, sm_percent=10, memory_bytes=1)
    gi = nvml.create_gpu_instance(uuid, 14, Placement(0, 1))
    mig = nvml.create_compute_instance(uuid, gi.id, 0)
    workload = hw.run_workload(mig.uuid, POD, sm_percent=10, memory_bytes=2**30)
    with pytest.raises(NvmlError) as error:  # NVML refuses while a process runs there
        nvml.destroy_compute_instance(uuid, gi.id, mig.compute_instance_id)
    assert error.value.code == codes.ERROR_IN_USE
    with pytest.raises(NvmlError) as error:
        nvml.process_utilization(mig.uuid, 0)
    assert error.value.code == codes.ERROR_NOT_SUPPORTED
    with pytest.raises(NvmlError) as error:
        hw.reset_gpu(0)
    assert error.value.code == codes.ERROR_IN_USE
    assert hw.stop_workload(mig.uuid, POD) == workload.pid
    nvml.destroy_compute_instance(uuid, gi.id, mig.compute_instance_id)


def test_a_reboot_ends_every_process(tmp_path: Path) -> None:
    hw = _node(tmp_path)
    hw.run_workload(hw.gpus()[1].uuid, POD, sm_percent=10, memory_bytes=1)
    hw.reboot()
    assert hw.workloads() == []
    assert not any(p.name.isdigit() for p in (tmp_path / "proc").iterdir())


def test_the_command_takes_device_names_the_plugin_publishes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    hw = _node(tmp_path)
    nvml = SimNvml(hw)
    uuid = hw.gpus()[3].uuid
    nvml.set_mig_mode(uuid, True)
    gi = nvml.create_gpu_instance(uuid, 19, Placement(0, 1))
    mig = nvml.create_compute_instance(uuid, gi.id, 0)
    state = f"--sim-state={tmp_path / 'hw.json'}"
    for device, expected in (
        ("gpu-0", hw.gpus()[0].uuid),
        ("gpu-3-mig-1g10gb-19-0", mig.uuid),
        (mig.uuid, mig.uuid),
    ):
        args = ["sim", "workload", state, f"--device={device}", f"--pod-uid={POD}"]
        assert main([*args, "--sm=25", "--memory=1Gi"]) == 0
        assert expected in capsys.readouterr().out
        assert [w.memory_bytes for w in hw.processes_on(expected)] == [2**30]
        assert main([*args, "--stop"]) == 0
        assert "stopped pid" in capsys.readouterr().out
    bad = ["sim", "workload", state, f"--pod-uid={POD}"]
    assert main([*bad, "--device=gpu-42"]) == 2
    assert "no such GPU or MIG device" in capsys.readouterr().err
    assert main([*bad, "--device=gpu-0", "--memory=lots"]) == 2
    assert "--memory 'lots'" in capsys.readouterr().err
    missing = tmp_path / "none.json"
    assert main(["sim", "workload", f"--sim-state={missing}", "--device=gpu-0", "--pod-uid=x"]) == 2
    assert "no such state file" in capsys.readouterr().err


def test_sim_health_healthy_is_a_reset_without_an_event(tmp_path: Path) -> None:
    hw = _node(tmp_path)
    state = f"--sim-state={tmp_path / 'hw.json'}"
    assert main(["sim", "health", state, "--gpu=2", "--xid=48"]) == 0
    assert hw.recovery_action(2) == codes.RECOVERY_ACTION_GPU_RESET
    _, seq = hw.health_events_after(0)
    assert main(["sim", "health", state, "--gpu=2", "--healthy"]) == 0
    assert hw.recovery_action(2) == codes.RECOVERY_ACTION_NONE
    assert hw.health_events_after(0)[1] == seq  # NVML sends nothing when a GPU recovers
    assert main(["sim", "health", state, "--gpu=2", "--xid=13"]) == 0
    assert hw.recovery_action(2) == codes.RECOVERY_ACTION_NONE  # an application error
    assert (
        main(["sim", "health", state, "--gpu=2", "--xid=13", "--recovery-action=node-reboot"]) == 0
    )
    assert hw.recovery_action(2) == codes.RECOVERY_ACTION_NODE_REBOOT
