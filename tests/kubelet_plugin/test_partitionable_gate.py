"""The 1.34/1.35 partitionable-devices gate: an API server that drops the counters gets no
dynamic MIG devices.

Without DRAPartitionableDevices (alpha, off by default on 1.34 and 1.35) the
API server silently drops `sharedCounters` and `consumesCounters`; dynamic MIG
devices would then be published with nothing keeping overlapping placements
apart. The plugin, started with `--dynamic-mig` against the fake API server
dropping those fields, must say so and publish static MIG only.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.fakes import PluginProcess
from tests.fakes.apiserver import FakeApiServer

pytestmark = pytest.mark.slow

NODE = "gate-node"


def _kubeconfig(path: Path, server: FakeApiServer) -> Path:
    path.write_text(
        "apiVersion: v1\nkind: Config\n"
        f"clusters: [{{name: fake, cluster: {{server: '{server.url}'}}}}]\n"
        "users: [{name: fake, user: {}}]\n"
        "contexts: [{name: fake, context: {cluster: fake, user: fake}}]\n"
        "current-context: fake\n"
    )
    return path


def _devices(server: FakeApiServer) -> list[dict[str, Any]]:
    return [d for s in server.objects("resourceslices") for d in s["spec"].get("devices") or []]


def _published(server: FakeApiServer, tmp_path: Path) -> tuple[list[dict[str, Any]], str]:
    server.add_node(NODE, "8c5b5e1c-43a4-4a8e-9b8e-0a3c5d7f2e11")
    plugin = PluginProcess(
        node_name=NODE,
        extra_args=(
            "--cluster=kube",
            f"--kubeconfig={_kubeconfig(tmp_path / 'kubeconfig', server)}",
            "--dynamic-mig",
        ),
    )
    try:
        plugin.start()  # serves only once its slices are published (and withdrawn, if refused)
        return _devices(server), plugin.log_tail(chars=100_000)
    finally:
        plugin.close()


def test_the_plugin_refuses_dynamic_mig_when_the_api_server_drops_the_counters(
    tmp_path: Path,
) -> None:
    with FakeApiServer(version=("1", "35"), disabled_gates={"DRAPartitionableDevices"}) as server:
        devices, log = _published(server, tmp_path)

    # An H100 boots with MIG off: static MIG publishes the eight whole GPUs only.
    assert sorted(d["name"] for d in devices) == [f"gpu-{i}" for i in range(8)]
    assert not any("consumesCounters" in d for d in devices)
    assert "the API server dropped the shared counters of the dynamic MIG devices" in log
    assert "refusing --dynamic-mig" in log


def test_with_the_gate_on_dynamic_mig_is_published(tmp_path: Path) -> None:
    with FakeApiServer(version=("1", "35")) as server:
        devices, log = _published(server, tmp_path)

    assert len(devices) == 8 * 26  # 25 MIG placements and the full GPU on each H100
    assert all("consumesCounters" in d for d in devices)
    assert "refusing --dynamic-mig" not in log
