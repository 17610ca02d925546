"""MPS daemons survive plugin crashes, and a crash never leaks or loses one.

The real plugin is SIGKILLed at each step of an MPS daemon's life
(`failpoints.MPS_PREPARE_STEPS`, `MPS_UNPREPARE_STEPS`); the kubelet
repeats the call once the plugin is back. After that, exactly the daemons
that prepared claims use are running: none leaked, none killed under a
running pod. A plain plugin crash or restart adopts the daemon of a live
claim (same process); a daemon that died is restarted; one no claim owns
is stopped.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator

import pytest

from dra_driver import failpoints
from dra_driver.claims.mps import DaemonPaths
from dra_driver.hardware.simulated.mps_control import read_state
from kubelet_plugin.mps_daemons import process_start_ticks
from kubelet_plugin.service import ClaimRef
from tests.fakes import PluginProcess, make_allocated_claim, make_opaque_config, plugin_sim

pytestmark = pytest.mark.slow

FIRST = ClaimRef("default", "c2a50000-0000-4000-8000-000000000001", "first")
SECOND = ClaimRef("default", "c2a50000-0000-4000-8000-000000000002", "second")


def _store(plugin: PluginProcess, ref: ClaimRef, percentage: int, share: int) -> None:
    config = make_opaque_config(
        {
            "apiVersion": "resource.nvidia.com/v1beta1",
            "kind": "GpuConfig",
            "sharing": {
                "strategy": "MPS",
                "mpsConfig": {"defaultActiveThreadPercentage": percentage},
            },
        }
    )
    result = {
        "request": "gpu",
        "device": "gpu-0",
        "shareID": f"5fa1e000-0000-4000-8000-{share:012d}",
    }
    plugin.store_claim(
        make_allocated_claim(ref.name, uid=ref.uid, results=[result], configs=[config])
    )


@pytest.fixture
def plugin() -> Iterator[PluginProcess]:
    """A plugin with two MPS claims stored on gpu-0: first (30 %) and second (60 %)."""
    with PluginProcess(prefix="dra-mpsc-") as process:
        _store(process, FIRST, 30, 1)
        _store(process, SECOND, 60, 2)
        yield process


def _uuid(plugin: PluginProcess) -> str:
    return plugin_sim(plugin).gpu(0).uuid


def _percentage(plugin: PluginProcess) -> float:
    state = read_state(DaemonPaths.of(plugin.mps_root, _uuid(plugin)).log)
    assert state is not None
    value = state["defaultActiveThreadPercentage"]
    assert isinstance(value, float)
    return value


def _prepare(plugin: PluginProcess, ref: ClaimRef) -> None:
    assert plugin.client.prepare([ref])[ref.uid].error == ""


def _unprepare(plugin: PluginProcess, ref: ClaimRef) -> None:
    assert plugin.client.unprepare([ref])[ref.uid].error == ""


def _assert_daemon_records(plugin: PluginProcess) -> None:
    """Every claim's record names the daemon that runs: none lost, none stale."""
    checkpoint = plugin.checkpoint()
    assert checkpoint is not None
    daemons = plugin.mps_daemons()
    for entry in checkpoint.claims.values():
        for device in entry.devices:
            assert device.mps is not None
            assert daemons.get(device.mps.device_uuid) == device.mps.pid, plugin.log_tail()


def _assert_nothing_left(plugin: PluginProcess) -> None:
    checkpoint = plugin.checkpoint()
    assert checkpoint is None or dict(checkpoint.claims) == {}
    assert plugin.cdi_files() == []
    assert plugin.mps_daemons() == {}
    assert plugin.mps_files() == []


@pytest.mark.parametrize("step", failpoints.MPS_PREPARE_STEPS)
def test_crash_starting_the_first_daemon_then_prepare_again_runs_one_daemon(
    plugin: PluginProcess, step: str
) -> None:
    plugin.crash_during("prepare", FIRST, step)
    plugin.restart()
    _prepare(plugin, FIRST)
    assert list(plugin.mps_daemons()) == [_uuid(plugin)]
    _assert_daemon_records(plugin)
    assert _percentage(plugin) == 30
    _unprepare(plugin, FIRST)
    _assert_nothing_left(plugin)


@pytest.mark.parametrize("step", failpoints.MPS_PREPARE_STEPS)
def test_crash_starting_the_first_daemon_then_unprepare_leaks_no_daemon(
    plugin: PluginProcess, step: str
) -> None:
    plugin.crash_during("prepare", FIRST, step)
    plugin.restart()  # the half-prepared claim is rolled back here
    assert plugin.mps_daemons() == {}
    _unprepare(plugin, FIRST)
    _assert_nothing_left(plugin)


@pytest.mark.parametrize("step", ["mps-after-daemon-started", "mps-after-daemon-recorded"])
def test_crash_joining_a_running_daemon_keeps_it_for_the_other_claim(
    plugin: PluginProcess, step: str
) -> None:
    _prepare(plugin, FIRST)
    daemons = plugin.mps_daemons()
    plugin.crash_during("prepare", SECOND, step)
    plugin.restart()  # second is rolled back; first's daemon is adopted, not stopped
    assert plugin.mps_daemons() == daemons
    assert _percentage(plugin) == 30  # back to first's ceiling
    _prepare(plugin, SECOND)
    assert plugin.mps_daemons() == daemons
    assert _percentage(plugin) == 60
    _assert_daemon_records(plugin)
    _unprepare(plugin, FIRST)
    _unprepare(plugin, SECOND)
    _assert_nothing_left(plugin)


@pytest.mark.parametrize("step", failpoints.MPS_UNPREPARE_STEPS + failpoints.UNPREPARE_STEPS)
def test_crash_during_unprepare_then_unprepare_again_stops_the_daemon(
    plugin: PluginProcess, step: str
) -> None:
    _prepare(plugin, FIRST)
    plugin.crash_during("unprepare", FIRST, step)
    plugin.restart()
    _unprepare(plugin, FIRST)
    _assert_nothing_left(plugin)


def test_plugin_crash_and_restart_adopt_the_daemon_of_a_live_claim(plugin: PluginProcess) -> None:
    _prepare(plugin, FIRST)
    daemons = plugin.mps_daemons()
    plugin.kill()  # SIGKILL, as an OOM kill would
    assert plugin.mps_daemons() == daemons  # the pod's daemon lives on without the plugin
    plugin.start()
    assert plugin.mps_daemons() == daemons  # adopted: the same process
    plugin.restart()  # a clean SIGTERM restart (upgrade) adopts it too
    assert plugin.mps_daemons() == daemons
    _assert_daemon_records(plugin)
    _prepare(plugin, SECOND)
    assert plugin.mps_daemons() == daemons
    _unprepare(plugin, FIRST)
    _unprepare(plugin, SECOND)
    _assert_nothing_left(plugin)


def test_a_daemon_that_died_is_restarted_at_start_up(plugin: PluginProcess) -> None:
    _prepare(plugin, FIRST)
    (pid,) = plugin.mps_daemons().values()
    plugin.kill()
    os.kill(pid, signal.SIGKILL)
    plugin.start()
    (restarted,) = plugin.mps_daemons().values()
    assert restarted != pid
    assert _percentage(plugin) == 30  # its limits are set again
    _assert_daemon_records(plugin)
    _unprepare(plugin, FIRST)
    _assert_nothing_left(plugin)


def test_a_daemon_no_claim_owns_is_stopped_at_start_up(plugin: PluginProcess) -> None:
    stray = DaemonPaths.of(plugin.mps_root, "GPU-00000000-0000-0000-0000-00000000abcd")
    for directory in (stray.pipe, stray.log):
        directory.mkdir(parents=True)
    env = {
        **os.environ,
        "CUDA_MPS_PIPE_DIRECTORY": str(stray.pipe),
        "CUDA_MPS_LOG_DIRECTORY": str(stray.log),
    }
    subprocess.run(
        [sys.executable, "-m", "dra_driver.hardware.simulated.mps_control", "-d"],
        env=env,
        check=True,
    )
    (pid,) = plugin.mps_daemons().values()
    plugin.restart()
    assert process_start_ticks(pid) is None
    _assert_nothing_left(plugin)
