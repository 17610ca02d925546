"""MpsDaemons against real processes: the simulated control daemon, and misbehaving commands."""

from __future__ import annotations

import os
import signal
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from dra_driver.errors import MpsError
from dra_driver.hardware.simulated.mps_control import read_state
from kubelet_plugin.mps_daemons import MpsDaemons, process_start_ticks
from tests.fakes import wait_until

SIM_CONTROL = (sys.executable, "-m", "dra_driver.hardware.simulated.mps_control")
UUID = "GPU-a2b56268-9156-5930-a747-ffec552f8b3a"

# -d starts a "daemon" (a sleep in its own session) that never reacts to quit.
STUBBORN = textwrap.dedent(
    """
    import os, subprocess, sys
    if "-d" in sys.argv:
        child = subprocess.Popen(["sleep", "300"], start_new_session=True)
        pipe = os.environ["CUDA_MPS_PIPE_DIRECTORY"]
        with open(os.path.join(pipe, "nvidia-cuda-mps-control.pid"), "w") as f:
            f.write(str(child.pid))
    else:
        sys.stdin.read()
    """
)


@pytest.fixture
def root(tmp_path: Path) -> Iterator[Path]:
    yield tmp_path / "mps"
    for paths in MpsDaemons(tmp_path / "mps", ()).daemon_dirs():  # never leak a daemon
        found = MpsDaemons(tmp_path / "mps", ()).find(paths)
        if found is not None:
            os.kill(found.pid, signal.SIGKILL)


def _wait_gone(pid: int) -> bool:
    return wait_until(lambda: process_start_ticks(pid) is None, f"pid {pid} to exit", timeout=5)


def test_start_send_stop_with_the_simulated_daemon(root: Path) -> None:
    daemons = MpsDaemons(root, SIM_CONTROL)
    paths = daemons.paths(UUID)
    running = daemons.start(paths, multi_user=False)
    assert daemons.start(paths, multi_user=False) == running  # already running: same daemon
    daemons.send(paths, ["set_default_active_thread_percentage 40"])
    state = read_state(paths.log)
    assert state is not None
    assert state["visibleDevices"] == UUID
    assert state["defaultActiveThreadPercentage"] == 40
    with pytest.raises(MpsError, match="Invalid command"):
        daemons.send(paths, ["set_everything 1"])
    daemons.stop(paths)
    assert _wait_gone(running.pid)
    assert not paths.root.exists()
    daemons.stop(paths)  # stopping what is gone is fine


def test_a_control_binary_that_fails_gives_its_output(root: Path) -> None:
    failing = (sys.executable, "-c", "import sys; print('no CUDA-capable device'); sys.exit(3)")
    daemons = MpsDaemons(root, failing)
    with pytest.raises(MpsError) as raised:
        daemons.start(daemons.paths(UUID), multi_user=True)
    message = str(raised.value)
    assert f"could not start the MPS control daemon for {UUID}" in message
    assert "-d -M exited with 3: no CUDA-capable device" in message


def test_a_missing_control_binary_is_a_clear_error(root: Path) -> None:
    daemons = MpsDaemons(root, ("/nonexistent/usr/bin/nvidia-cuda-mps-control",))
    with pytest.raises(MpsError, match="/nonexistent/usr/bin/nvidia-cuda-mps-control"):
        daemons.start(daemons.paths(UUID), multi_user=False)


def test_a_daemon_that_ignores_quit_is_killed(root: Path) -> None:
    daemons = MpsDaemons(root, (sys.executable, "-c", STUBBORN), stop_timeout=0.3)
    paths = daemons.paths(UUID)
    running = daemons.start(paths, multi_user=False)
    daemons.stop(paths)
    assert _wait_gone(running.pid)
    assert not paths.root.exists()


def test_a_stale_pid_file_is_not_a_running_daemon(root: Path) -> None:
    daemons = MpsDaemons(root, SIM_CONTROL)
    paths = daemons.paths(UUID)
    paths.pipe.mkdir(parents=True)
    paths.pid_file.write_text("999999999\n")
    assert daemons.find(paths) is None
    running = daemons.start(paths, multi_user=False)
    assert running.pid != 999999999
    daemons.stop(paths)
