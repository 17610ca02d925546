"""The `dra-gpu mps-host` daemon in a child process of its own, on a simulated node.

On a cluster the MPS host is its own DaemonSet (deploy/base/mps-host.yaml);
`dra-gpu demo`, the tests and the benchmarks run it next to the plugin
process (`dra_driver.composition.plugin_process`) the same way: a separate process
in a session of its own, so nothing that happens to the plugin's process
group reaches it or its daemons.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Self

from dra_driver.composition.child_process import ChildProcess, Spawn, log_tail, popen
from dra_driver.errors import PluginError
from kubelet_plugin.mps_host_main import mps_root
from kubelet_plugin.mps_intents import MpsHostClient

HOST_START_TIMEOUT_S = 30.0


class MpsHostProcess:
    """Runs `python -m dra_driver.cli mps-host` for a simulated node's kubelet root."""

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
        self.log_path = log_path
        self._args = [
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
        self.process: ChildProcess | None = None
        self._spawn = spawn

    @property
    def pid(self) -> int:
        if self.process is None:
            raise PluginError("the MPS host was never started")
        return self.process.pid

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def start(self, timeout: float = HOST_START_TIMEOUT_S) -> Self:
        """Start the host in a new session and wait until it holds its lock."""
        self.launch()
        self.wait_ready(timeout)
        return self

    def launch(self) -> None:
        """Start the host in a new session (unless it runs), without waiting for it."""
        if self.running():
            return
        with self.log_path.open("ab") as log:
            self.process = self._spawn(self._args, None, log.fileno())

    def wait_ready(self, timeout: float = HOST_START_TIMEOUT_S) -> None:
        """Wait until the launched host holds its lock; PluginError if it exits first."""
        if self.process is None:
            raise PluginError("the MPS host was never launched")
        deadline = time.monotonic() + timeout
        while not self.client.host_running():
            if self.process.poll() is not None:
                raise PluginError(
                    f"the MPS host exited with {self.process.returncode}; log:\n{self._tail()}"
                )
            if time.monotonic() > deadline:
                raise PluginError(f"the MPS host did not start in {timeout:g} s:\n{self._tail()}")
            time.sleep(0.02)

    def stop(self, timeout: float = 15.0) -> int | None:
        """SIGTERM the host and wait; its daemons keep running. None if it was not running."""
        if self.process is None:
            return None
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            return self.process.wait(timeout=timeout)

    def _tail(self, chars: int = 3000) -> str:
        return log_tail(self.log_path, chars)
