"""The simulated nvidia-cuda-mps-control behaves like the real one where the plugin relies on it."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from dra_driver.hardware.simulated.mps_control import PID_FILE, read_state
from kubelet_plugin.mps_daemons import process_start_ticks
from tests.fakes import wait_until

COMMAND = [sys.executable, "-m", "dra_driver.hardware.simulated.mps_control"]


@pytest.fixture
def dirs() -> Iterator[tuple[Path, Path]]:
    with tempfile.TemporaryDirectory(prefix="mps-", dir="/tmp") as work:
        pipe, log = Path(work) / "pipe", Path(work) / "log"
        pipe.mkdir()
        log.mkdir()
        yield pipe, log
        try:
            pid = int((pipe / PID_FILE).read_text())
        except FileNotFoundError:
            return
        os.kill(pid, 9)  # a failed test must not leave the daemon running


def run(dirs: tuple[Path, Path], *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    pipe, log = dirs
    env = {
        **os.environ,
        "CUDA_MPS_PIPE_DIRECTORY": str(pipe),
        "CUDA_MPS_LOG_DIRECTORY": str(log),
        "CUDA_VISIBLE_DEVICES": "MIG-1",
    }
    return subprocess.run(
        [*COMMAND, *args],
        check=False,
        input=stdin,
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
    )


def test_daemon_takes_commands_and_quits(dirs: tuple[Path, Path]) -> None:
    pipe, log = dirs
    assert run(dirs, "-d", "-M").returncode == 0
    pid = int((pipe / PID_FILE).read_text())
    assert process_start_ticks(pid) is not None
    again = run(dirs, "-d")
    assert again.returncode == 1
    assert "already running" in again.stderr

    told = run(
        dirs,
        stdin="set_default_active_thread_percentage 40\n"
        "set_default_device_pinned_mem_limit MIG-1 2048M\n"
        "get_default_active_thread_percentage\n",
    )
    assert told.returncode == 0
    assert told.stdout.splitlines()[-1] == "40"
    state = read_state(log)
    assert state is not None
    assert state["visibleDevices"] == "MIG-1"
    assert state["multiUser"] is True
    assert state["defaultActiveThreadPercentage"] == 40
    assert state["defaultDevicePinnedMemLimits"] == {"MIG-1": "2048M"}

    bad = run(dirs, stdin="set_default_active_thread_percentage 0\n")
    assert bad.returncode == 1
    assert "Invalid active thread percentage" in bad.stdout

    assert run(dirs, stdin="quit\n").returncode == 0
    wait_until(lambda: process_start_ticks(pid) is None, f"daemon pid {pid} to exit", timeout=5)
    assert not (pipe / PID_FILE).exists()
    assert "[CMD] quit" in (log / "control.log").read_text()


def test_control_shell_without_a_daemon_fails(dirs: tuple[Path, Path]) -> None:
    done = run(dirs, stdin="quit\n")
    assert done.returncode == 1
    assert "Cannot find MPS control daemon" in done.stderr
