"""The daemon's start-up order when the API server is not there yet.

Prepare of a prepared claim and every Unprepare work without the API
server, and the kubelet cannot finish terminating pods while the plugin is
down. So a first ResourceSlice publish that fails must not stop the plugin
from serving: it registers anyway, and the republish loop puts the slices
in place once the API answers again.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from dra_driver.kube.local_store import LocalCluster
from kubelet_plugin.service import UnprepareResult
from tests.fakes import PluginProcess, claim_ref

pytestmark = pytest.mark.slow


def test_plugin_serves_while_the_first_publish_fails_and_publishes_later() -> None:
    plugin = PluginProcess(publish_interval=0.2)
    try:
        broken = plugin.cluster_root / "resourceslices" / "broken.yaml"
        broken.write_text("{not yaml: [\n")  # every list of slices fails until it is gone

        plugin.start()

        ref = claim_ref(1)
        assert plugin.client.unprepare([ref]) == {ref.uid: UnprepareResult()}
        broken.unlink()
        plugin.wait_for(
            lambda: bool(plugin.cluster.list_resource_slices(node_name=plugin.node_name)),
            "ResourceSlices",
        )
    finally:
        plugin.close()


def test_a_second_plugin_process_waits_for_the_first_to_exit() -> None:
    """Two instances would roll back each other's half-done claims: only one runs at a time."""
    first = PluginProcess()
    first.start()
    second = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "dra_driver.cli",
            "kubelet-plugin",
            f"--node-name={first.node_name}",
            "--nvml=sim:dgx-h100",
            f"--sim-state={first.sim_state}",
            f"--cluster=local:{first.cluster_root}",
            f"--kubelet-root={first.kubelet_root}",
            f"--cdi-root={first.cdi_root}",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert second.stdout is not None
        waiting = ""
        while "waiting for it to exit" not in waiting:
            line = second.stdout.readline()
            assert line, f"second plugin exited early: {waiting}"
            waiting += line
        assert first.registration_socket.is_socket()  # the first one is still the one serving

        assert first.terminate() == 0
        served = ""
        while "serving gpu.nvidia.com" not in served:
            line = second.stdout.readline()
            assert line, f"second plugin never served: {served}"
            served += line
        second.send_signal(signal.SIGTERM)
        assert second.wait(timeout=30) == 0
    finally:
        if second.poll() is None:
            second.kill()
            second.wait()
        if second.stdout is not None:
            second.stdout.close()
        first.close()


def test_a_plugin_that_cannot_serve_publishes_nothing(tmp_path: Path) -> None:
    """A kubelet root too long for Unix sockets: refused before any device is advertised."""
    kubelet_root = Path("/tmp") / ("k" * 90)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "dra_driver.cli",
            "kubelet-plugin",
            "--node-name=n1",
            "--nvml=sim:l4-node",
            f"--cluster=local:{tmp_path / 'cluster'}",
            f"--kubelet-root={kubelet_root}",
            f"--cdi-root={tmp_path / 'cdi'}",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    try:
        assert done.returncode == 2
        assert "socket path is" in done.stderr
        assert LocalCluster(tmp_path / "cluster").list_resource_slices() == []
    finally:
        shutil.rmtree(kubelet_root, ignore_errors=True)
