"""The `dra-gpu imex-host` daemon in a child process of its own, on a simulated node.

On a cluster the IMEX host is its own DaemonSet (with hostNetwork); `dra-gpu
demo compute-domain` and the tests run it next to the node's CD kubelet
plugin the same way the MPS host runs (`mps_host_process`): a separate
process in a session of its own, so nothing that happens to the plugin's
process group reaches it or its IMEX daemon. A simulated node's address is a
loopback address of its own (127.0.1.x and up), on which its IMEX stand-in
listens.
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
from kubelet_plugin.imex_host import host_running
from kubelet_plugin.imex_host_runner import DOMAINS_DIR, DomainPaths, ProcessImexRunner

HOST_START_TIMEOUT_S = 30.0


class ImexHostProcess:
    """Runs `python -m dra_driver.cli imex-host` for one simulated node."""

    def __init__(
        self,
        *,
        node_name: str,
        node_ip: str,
        cluster_dir: Path,
        namespace: str,
        shape: str,
        sim_state: Path,
        state_dir: Path,
        log_path: Path,
        max_nodes: int | None = None,
        poll_interval: float | None = None,
        extra_args: tuple[str, ...] = (),
        spawn: Spawn = popen,
    ) -> None:
        self.state_dir = state_dir
        self.log_path = log_path
        self._args = [
            sys.executable,
            "-m",
            "dra_driver.cli",
            "imex-host",
            f"--node-name={node_name}",
            f"--node-ip={node_ip}",
            f"--cluster=local:{cluster_dir}",
            f"--namespace={namespace}",
            f"--nvml=sim:{shape}",
            f"--sim-state={sim_state}",
            f"--state-dir={state_dir}",
            # No host service on a simulated node: its socket path is its own.
            f"--host-root={state_dir}",
            *([f"--max-nodes-per-imex-domain={max_nodes}"] if max_nodes else []),
            *([f"--poll-interval={poll_interval}"] if poll_interval else []),
            *extra_args,
        ]
        self.process: ChildProcess | None = None
        self._spawn = spawn

    @property
    def pid(self) -> int:
        if self.process is None:
            raise PluginError("the IMEX host was never started")
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
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as log:
            self.process = self._spawn(self._args, None, log.fileno())

    def wait_ready(self, timeout: float = HOST_START_TIMEOUT_S) -> None:
        """Wait until the launched host holds its lock; PluginError if it exits first."""
        if self.process is None:
            raise PluginError("the IMEX host was never launched")
        deadline = time.monotonic() + timeout
        while not host_running(self.state_dir):
            if self.process.poll() is not None:
                raise PluginError(
                    f"the IMEX host exited with {self.process.returncode}; log:\n{self._tail()}"
                )
            if time.monotonic() > deadline:
                raise PluginError(f"the IMEX host did not start in {timeout:g} s:\n{self._tail()}")
            time.sleep(0.02)

    def stop(self, timeout: float = 15.0) -> int | None:
        """SIGTERM the host and wait; its IMEX daemon keeps running. None if it was not running."""
        if self.process is None:
            return None
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            return self.process.wait(timeout=timeout)

    def stop_imex(self, timeout: float = 10.0) -> int:
        """SIGTERM every IMEX daemon the host left running (the node's teardown); how many."""
        runner = ProcessImexRunner(
            Path("nvidia-imex"), Path("nvidia-imex-ctl"), stop_timeout=timeout
        )
        stopped = 0
        try:
            domains = sorted(p for p in (self.state_dir / DOMAINS_DIR).iterdir() if p.is_dir())
        except FileNotFoundError:
            return 0
        for root in domains:
            paths = DomainPaths(root)
            if runner.find(paths) is not None:
                runner.stop(paths)
                stopped += 1
        return stopped

    def _tail(self, chars: int = 3000) -> str:
        return log_tail(self.log_path, chars)
