"""What the running plugin publishes for a GH200 node: `addressingMode`, and `numaNode` as a list
with `--feature-gates DRAListTypeAttributes=true`, in slices the 1.37 strict schema accepts."""

from __future__ import annotations

import shutil
import signal
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from controller.limits import validate_schema
from dra_driver.composition.hardware import open_hardware
from dra_driver.kube.local_store import LocalCluster
from kubelet_plugin import main as plugin_main
from kubelet_plugin.main import PluginOptions
from tests.fakes import wait_until


@pytest.fixture
def work() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="dra-gpu-attrs-", dir="/tmp"))  # short socket paths
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(autouse=True)
def _signal_handlers() -> Iterator[None]:
    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    yield
    for sig, handler in saved.items():
        signal.signal(sig, handler)


def _published(work: Path, **overrides: Any) -> list[dict[str, Any]]:
    """Run the plugin on a simulated GH200 node until it has published; its devices."""
    options = PluginOptions(
        node_name="gh-1",
        open_hardware=lambda: open_hardware(
            "sim:gh200-node", sim_state=work / "sim-state.json", node_name="gh-1"
        ),
        cluster=f"local:{work / 'cluster'}",
        kubelet_root=work / "kubelet",
        cdi_root=work / "cdi",
        driver_name="gpu.nvidia.com",
        health_checks=False,
        usage_interval=0,
        **overrides,
    )
    cluster = LocalCluster(work / "cluster")
    stop = threading.Event()
    outcome: list[object] = []
    runner = threading.Thread(target=lambda: outcome.append(plugin_main.run(options, stop)))
    runner.start()
    try:
        wait_until(
            lambda: bool(cluster.list_resource_slices()),
            "the plugin's first publish",
            details=lambda: f"run() returned {outcome}",
        )
        slices = [dict(s) for s in cluster.list_resource_slices()]
    finally:
        stop.set()
        runner.join(30)
    assert outcome == [0]
    for obj in slices:
        validate_schema(obj, "1.37")
    return [d for s in slices for d in s["spec"].get("devices", [])]


def test_the_plugin_publishes_addressing_mode_and_list_numa_nodes(work: Path) -> None:
    devices = _published(work, list_attributes=True)
    assert [d["name"] for d in devices] == ["gpu-0", "gpu-1"]
    assert [d["attributes"]["addressingMode"] for d in devices] == [{"string": "ATS"}] * 2
    numa = [d["attributes"]["resource.kubernetes.io/numaNode"] for d in devices]
    assert numa == [{"ints": [0]}, {"ints": [1]}]


def test_without_the_gate_numa_node_stays_scalar(work: Path) -> None:
    devices = _published(work)
    numa = [d["attributes"]["resource.kubernetes.io/numaNode"] for d in devices]
    assert numa == [{"int": 0}, {"int": 1}]
