"""The `dra-gpu mps-host` daemon in a child process of its own, on a simulated node.

On a cluster the MPS host is its own DaemonSet (deploy/base/mps-host.yaml);
`dra-gpu demo`, the tests and the benchmarks run it next to the plugin
process (`dra_driver.composition.plugin_process`) the same way: a separate process
in a session of its own, so nothing that happens to the plugin's process
group reaches it or its daemons.
"""

from __future__ import annotations

import sys
from pathlib import Path

from dra_driver.composition.child_process import HostProcess, Spawn, popen
from kubelet_plugin.mps_host_main import mps_root
from kubelet_plugin.mps_intents import MpsHostClient

__all__ = ["MpsHostProcess"]


class MpsHostProcess(HostProcess):
    """Runs `python -m dra_driver.cli mps-host` for a simulated node's kubelet root."""

    label = "MPS host"

    def __init__(
        self,
        *,
        kubelet_root: Path,
        driver: str,
        shape: str,
        sim_state: Path,
        node_name: str,
        log_path: Path,
        spawn: Spawn = popen,
    ) -> None:
        self.root = mps_root(kubelet_root, driver)
        self.client = MpsHostClient(self.root)
        args = [
            sys.executable,
            "-m",
            "dra_driver.cli",
            "mps-host",
            f"--node-name={node_name}",
            f"--driver-name={driver}",
            f"--nvml=sim:{shape}",
            f"--sim-state={sim_state}",
            f"--kubelet-root={kubelet_root}",
        ]
        super().__init__(args, log_path, spawn)

    def _holds_lock(self) -> bool:
        return self.client.host_running()
