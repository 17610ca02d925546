"""MPS work survives anything that happens to the kubelet plugin (issue: day-2 operation).

The plugin's whole process group is SIGKILLed (what a container runtime does
to a plugin pod that is replaced or OOM-killed) while a simulated MPS client
talks to its daemon. The daemon, its pipe directory and the client keep
running; the next plugin instance adopts the daemon (the same process); the
daemon is stopped only after its last claim is unprepared.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator

import pytest

from dra_driver.claims.mps import DaemonPaths
from dra_driver.claims.mps_intent import DaemonState
from kubelet_plugin.mps_daemons import process_start_ticks
from kubelet_plugin.service import ClaimRef
from tests.fakes import PluginProcess, make_allocated_claim, make_opaque_config, plugin_sim
from tests.fakes.mps_client import MpsClient

pytestmark = pytest.mark.slow

FIRST = ClaimRef("default", "5e7a0000-0000-4000-8000-000000000001", "first")
SECOND = ClaimRef("default", "5e7a0000-0000-4000-8000-000000000002", "second")


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
    with PluginProcess(prefix="dra-mpsu-") as process:
        _store(process, FIRST, 30, 1)
        _store(process, SECOND, 60, 2)
        yield process


def _ok(results: object, ref: ClaimRef) -> None:
    assert isinstance(results, dict)
    assert results[ref.uid].error == ""


def test_mps_clients_survive_a_sigkill_of_the_plugins_process_group_and_the_daemon_is_adopted(
    plugin: PluginProcess,
) -> None:
    uuid = plugin_sim(plugin).gpu(0).uuid
    paths = DaemonPaths.of(plugin.mps_root, uuid)
    _ok(plugin.client.prepare([FIRST]), FIRST)
    daemons = plugin.mps_daemons()
    assert list(daemons) == [uuid]
    client = MpsClient(paths.pipe, plugin.work / "client-progress")
    try:
        assert client.keeps_answering(), client.failure()

        os.killpg(plugin.pid, signal.SIGKILL)  # the plugin pod's container, all of it
        plugin.wait_exit()
        plugin.client.close()
        assert plugin.mps_daemons() == daemons  # the same daemon process
        assert paths.pipe.is_dir()
        assert client.keeps_answering(), client.failure()

        plugin.start()  # the next instance (an upgraded pod)
        assert plugin.mps_daemons() == daemons  # adopted, not restarted
        assert client.keeps_answering(), client.failure()
        if plugin.mps_host is not None:
            status = plugin.mps_host.client.status(uuid)
            assert status is not None
            assert status.state is DaemonState.RUNNING
            assert status.pid == daemons[uuid]  # run by the MPS host, not the plugin

        _ok(plugin.client.prepare([SECOND]), SECOND)
        assert plugin.mps_daemons() == daemons
        _ok(plugin.client.unprepare([FIRST]), FIRST)
        assert plugin.mps_daemons() == daemons  # SECOND still uses it
        assert client.keeps_answering(), client.failure()
        _ok(plugin.client.unprepare([SECOND]), SECOND)
        assert process_start_ticks(daemons[uuid]) is None  # stopped after its last claim
        assert plugin.mps_daemons() == {}
        assert plugin.mps_files() == []
    finally:
        client.stop()
