"""A node without nvidia-uvm: the plugin loads it, or serves on and says what to run.

The real plugin process on a simulated node booted without the module
(`dra-gpu sim modules`), as a node whose driver was installed on the host
after boot, before any CUDA program ran.
"""

from __future__ import annotations

import re
import subprocess
import sys
import urllib.request

import yaml

from dra_driver.kube.local_store import LocalCluster
from kubelet_plugin.service import ClaimRef
from tests.fakes import PluginProcess, make_allocated_claim

CLAIM = ClaimRef("default", "0c1e2d3f-0000-4000-8000-00000000a001", "needs-uvm")
REFUSAL = "FATAL: Module nvidia-uvm not found in directory /lib/modules/6.8.0-49-generic"


def _sim_modules(plugin: PluginProcess, *args: str) -> None:
    subprocess.run(
        [
            sys.executable,
            "-m",
            "dra_driver.cli",
            "sim",
            "modules",
            f"--sim-state={plugin.sim_state}",
            f"--shape={plugin.shape}",
            f"--node-name={plugin.node_name}",
            *args,
        ],
        check=True,
        capture_output=True,
    )


def _uvm_metric(plugin: PluginProcess) -> str:
    port = re.search(
        r"serving metrics on http://127\.0\.0\.1:(\d+)/metrics", plugin.log_tail(100_000)
    )
    assert port is not None
    with urllib.request.urlopen(f"http://127.0.0.1:{port.group(1)}/metrics", timeout=10) as r:
        text = r.read().decode()
    found = re.search(r'^dra_gpu_kernel_module_loaded\{module="nvidia-uvm"\} (\S+)$', text, re.M)
    assert found is not None
    return found.group(1)


def test_the_plugin_loads_a_missing_uvm_at_start_and_prepares() -> None:
    plugin = PluginProcess(prefix="dra-uvm-", extra_args=["--metrics-address=127.0.0.1:0"])
    _sim_modules(plugin, "--unload=nvidia-uvm")
    with plugin:
        assert "NVIDIA kernel modules and device nodes: loaded nvidia-uvm" in plugin.log_tail(
            100_000
        )
        assert _uvm_metric(plugin) == "1.0"
        plugin.store_claim(make_allocated_claim(CLAIM.name, uid=CLAIM.uid))
        answers = plugin.client.prepare([CLAIM])
        assert answers[CLAIM.uid].error == ""


def test_a_node_that_cannot_load_it_serves_on_and_says_what_to_run() -> None:
    plugin = PluginProcess(prefix="dra-uvm-", extra_args=["--metrics-address=127.0.0.1:0"])
    _sim_modules(plugin, "--unload=nvidia-uvm", f"--modprobe-error={REFUSAL}")
    with plugin:
        assert _uvm_metric(plugin) == "0.0"
        events = list((plugin.cluster_root / "events" / "default").glob("*.yaml"))
        assert len(events) == 1
        event = yaml.safe_load(events[0].read_text())
        assert (event["type"], event["reason"]) == ("Warning", "KernelModuleNotLoaded")
        assert event["regarding"]["kind"] == "Node"
        assert event["regarding"]["name"] == plugin.node_name
        assert REFUSAL in event["note"]
        assert "nvidia-modprobe -u -c0" in event["note"]

        plugin.store_claim(make_allocated_claim(CLAIM.name, uid=CLAIM.uid))
        error = plugin.client.prepare([CLAIM])[CLAIM.uid].error
        assert "no character device 'nvidia-uvm'" in error
        assert REFUSAL in error
        assert "run `nvidia-modprobe -u -c0` on the node" in error

        _sim_modules(plugin)  # the admin ran it: the next Prepare finds the module
        assert plugin.client.prepare([CLAIM])[CLAIM.uid].error == ""
        assert _uvm_metric(plugin) == "1.0"
        assert LocalCluster(plugin.cluster_root).list_resource_slices()
