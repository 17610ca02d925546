"""The real `dra-gpu compute-domain-kubelet-plugin` in a child process, on a simulated node.

The ComputeDomain counterpart of `plugin_process.PluginProcess` (whose
process handling it reuses: `child_process.popen`, failpoints through a
file): a short work directory under /tmp holds the simulated node's state,
the `LocalCluster` the plugin reads claims and ComputeDomain objects from and
publishes to, the kubelet root and the CDI directory. Tests and the
multi-node composition drive the plugin through a kubelet-like client over
its real Unix socket (`kubelet_plugin.kubelet_client`).

    with ComputeDomainPluginProcess(node_name="gb-0") as plugin:
        plugin.store_claim(claim)
        plugin.client.prepare([ClaimRef("default", uid, "claim-1")])
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Final, Self

from dra_driver import failpoints as failpoints_module
from dra_driver.composition.child_process import ChildProcess, Spawn, file_identity, log_tail, popen
from dra_driver.composition.hardware import SimulatedNode, open_simulated
from dra_driver.compute_domain import channel_cdi
from dra_driver.compute_domain.names import DRIVER_NAME
from dra_driver.errors import PluginError
from dra_driver.files.atomic import atomic_write
from dra_driver.kube.local_store import LocalCluster
from kubelet_plugin.kubelet_client import KubeletClient
from kubelet_plugin.socket_names import plugin_data_dir, registration_socket_path

START_TIMEOUT_S: Final = 30.0
STOP_TIMEOUT_S: Final = 30.0
DEFAULT_NAMESPACE: Final = "nvidia-dra-driver-gpu"


class ComputeDomainPluginProcess:
    """Runs the CD kubelet plugin of one simulated node (`shape`) and talks to it."""

    def __init__(
        self,
        *,
        node_name: str = "gb-0",
        shape: str = "gb200-node",
        namespace: str = DEFAULT_NAMESPACE,
        work: Path | None = None,
        cluster_root: Path | None = None,
        extra_args: Sequence[str] = (),
        keep: bool = False,
        client_timeout: float = 60.0,
        spawn: Spawn = popen,
    ) -> None:
        self.node_name = node_name
        self.shape = shape
        self.namespace = namespace
        self.extra_args = tuple(extra_args)
        self._owns_work = work is None
        self.keep = keep
        self.work = work or Path(tempfile.mkdtemp(prefix="dra-gpu-cd-plugin-", dir="/tmp"))
        self.sim_state = self.work / "sim-state.json"
        self.cluster_root = cluster_root or self.work / "cluster"
        self.kubelet_root = self.work / "kubelet"
        self.cdi_root = self.work / "cdi"
        self.log_path = self.work / "cd-plugin.log"
        self.failpoints_path = self.work / "failpoints"
        self.data_dir = plugin_data_dir(self.kubelet_root, DRIVER_NAME)
        self.registration_socket = registration_socket_path(self.kubelet_root, DRIVER_NAME)
        self.cluster = LocalCluster(self.cluster_root)
        self.client = KubeletClient(self.kubelet_root, DRIVER_NAME, timeout=client_timeout)
        self.process: ChildProcess | None = None
        self._spawn = spawn
        self._runs = 0

    # -- life cycle ------------------------------------------------------------------

    def start(self, timeout: float = START_TIMEOUT_S) -> Self:
        """Start the plugin; return once its registration socket appears."""
        if self.process is not None and self.process.poll() is None:
            raise PluginError(f"plugin pid {self.process.pid} is still running; stop it first")
        self.simulated_node()  # the node's state file and /proc exist before the plugin
        stale = file_identity(self.registration_socket)
        self._runs += 1
        env = {k: v for k, v in os.environ.items() if k not in ("NODE_NAME", "NAMESPACE")}
        env["PYTHONUNBUFFERED"] = "1"
        env[failpoints_module.FILE_ENV_VAR] = str(self.failpoints_path)
        args = [
            sys.executable,
            "-m",
            "dra_driver.cli",
            "compute-domain-kubelet-plugin",
            f"--node-name={self.node_name}",
            f"--namespace={self.namespace}",
            f"--nvml=sim:{self.shape}",
            f"--sim-state={self.sim_state}",
            f"--cluster=local:{self.cluster_root}",
            f"--kubelet-root={self.kubelet_root}",
            f"--cdi-root={self.cdi_root}",
            *self.extra_args,
        ]
        with self.log_path.open("ab") as log:
            log.write(f"--- run {self._runs}\n".encode())
            log.flush()
            self.process = self._spawn(args, env, log.fileno())

        def fresh() -> bool:
            identity = file_identity(self.registration_socket)
            return identity is not None and identity != stale

        self.wait_for(fresh, "registration socket", timeout)
        return self

    def wait_for(self, condition: Callable[[], bool], what: str, timeout: float) -> None:
        """Poll `condition`; PluginError with the log tail if the plugin exits or time runs out."""
        process = self._require_process()
        deadline = time.monotonic() + timeout
        while not condition():
            if process.poll() is not None:
                raise PluginError(
                    f"the CD plugin exited with {process.returncode} before its {what}; "
                    f"log:\n{self.log_tail()}"
                )
            if time.monotonic() > deadline:
                raise PluginError(f"no {what} after {timeout:g} s; log:\n{self.log_tail()}")
            time.sleep(0.02)

    def arm(self, failpoints: Sequence[str]) -> None:
        """Arm `failpoints` in the running plugin (it dies with SIGKILL at the next one)."""
        atomic_write(self.failpoints_path, "".join(f"{n}\n" for n in failpoints).encode())

    def kill(self) -> int:
        self.client.close()
        process = self._require_process()
        if process.poll() is None:
            process.kill()
        return process.wait(timeout=15)

    def terminate(self, timeout: float = STOP_TIMEOUT_S) -> int:
        """SIGTERM and wait (a clean stop); returns the exit code."""
        self.client.close()
        process = self._require_process()
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
        try:
            return process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise PluginError(
                f"the CD plugin did not stop within {timeout:g} s; log:\n{self.log_tail()}"
            ) from None

    def close(self) -> None:
        """Kill the plugin if it runs and remove the work directory (unless `keep`)."""
        self.client.close()
        if self.process is not None:
            if self.process.poll() is None:
                self.process.kill()
            self.process.wait(timeout=15)
        if self._owns_work and not self.keep:
            shutil.rmtree(self.work, ignore_errors=True)

    def __enter__(self) -> Self:
        try:
            return self.start()
        except BaseException:
            self.close()
            raise

    def __exit__(self, *_exc: object) -> None:
        self.close()

    # -- the cluster and the node ------------------------------------------------------

    def store_claim(self, claim: Mapping[str, Any]) -> dict[str, Any]:
        """Store a claim as an API server gets it: create, then its status (the allocation)."""
        body = json.loads(json.dumps(claim))
        status = body.pop("status", None)
        body["metadata"].pop("resourceVersion", None)
        stored = self.cluster.put_resource_claim(body)
        if status is None:
            return stored
        stored["status"] = status
        return self.cluster.update_resource_claim_status(stored)

    def cdi_spec_path(self, claim_uid: str) -> Path:
        return self.cdi_root / channel_cdi.CLAIMS.spec_file_name(claim_uid)

    def simulated_node(self) -> SimulatedNode:
        """The plugin's simulated node (shared through its state file)."""
        return open_simulated(self.shape, sim_state=self.sim_state, node_name=self.node_name)

    def log_tail(self, chars: int = 3000) -> str:
        return log_tail(self.log_path, chars)

    def _require_process(self) -> ChildProcess:
        if self.process is None:
            raise PluginError("the CD plugin was never started")
        return self.process
