"""The daemon's start-up order when the API server is not there yet.

Prepare of a prepared claim and every Unprepare work without the API
server, and the kubelet cannot finish terminating pods while the plugin is
down. So a first ResourceSlice publish that fails must not stop the plugin
from serving: it registers anyway, and the republish loop puts the slices
in place once the API answers again.
"""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest

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


def test_an_old_instance_stopped_by_sigterm_removes_only_its_own_sockets() -> None:
    """A rolling upgrade with POD_UIDs: the old pod's SIGTERM removes its sockets and no
    one else's, and the new pod serves on its own names in the same kubelet root."""
    old = PluginProcess(pod_uid="11111111-0000-4000-8000-00000000000a")
    new = PluginProcess(pod_uid="22222222-0000-4000-8000-00000000000b", share_work_with=old)
    try:
        old.start()  # it found the socket under the name the plugin computed
        # /tmp/dra-gpu-plugin-*/kubelet is longer than /var/lib/kubelet: the UID is hashed.
        assert old.registration_socket.name == "gpu.nvidia.com-6Z3p4xeYtSc-reg.sock"
        assert old.dra_socket.name == "dra-11111111-0000-4000-8000-00000000000a.sock"
        new.start(wait=False)  # it serves beside the old one, or once the old one is gone

        assert old.terminate() == 0
        assert not old.registration_socket.exists()
        assert not old.dra_socket.exists()
        new.wait_for(new.registration_socket.exists, "the new instance's registration socket")
        assert new.client.register() == "v1"
        assert new.client.unprepare([claim_ref(1)]) == {claim_ref(1).uid: UnprepareResult()}
        assert new.terminate() == 0
        assert sorted(p.name for p in new.registration_socket.parent.iterdir()) == []
    finally:
        new.close()
        old.close()
