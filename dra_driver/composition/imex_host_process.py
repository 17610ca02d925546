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

import sys
from pathlib import Path

from dra_driver.composition.child_process import HostProcess, Spawn, popen
from kubelet_plugin.imex_host import host_running
from kubelet_plugin.imex_host_runner import DOMAINS_DIR, DomainPaths, ProcessImexRunner

__all__ = ["ImexHostProcess"]


class ImexHostProcess(HostProcess):
    """Runs `python -m dra_driver.cli imex-host` for one simulated node."""

    label = "IMEX host"

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
        args = [
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
        super().__init__(args, log_path, spawn)

    def _holds_lock(self) -> bool:
        return host_running(self.state_dir)

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
