"""The real `dra-gpu kubelet-plugin` daemon in a child process, on a simulated node.

`dra-gpu demo` shows the node path as a cluster would run it: the real
daemon as its own process, on simulated hardware, with a local cluster
directory, a kubelet root and a CDI directory of its own. This module starts
and stops that process, waits for its sockets, hands out a kubelet-like
client (`kubelet_plugin.kubelet_client`), stores claims as an API server
would, and reads back what the plugin left on disk (checkpoint, CDI specs).
The tests and benchmarks drive the plugin through the same class.
"""

from __future__ import annotations

import contextlib
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

from dra_driver import DEFAULT_DRIVER_NAME
from dra_driver import failpoints as failpoints_module
from dra_driver.claims.checkpoint import Checkpoint
from dra_driver.claims.checkpoint import decode as decode_checkpoint
from dra_driver.claims.mps import MPS_DIR
from dra_driver.claims.mps_intent import HOST_LOCK_FILE, HOST_WAKE_FIFO
from dra_driver.composition.child_process import ChildProcess, Spawn, file_identity, log_tail, popen
from dra_driver.composition.hardware import SimulatedNode, open_simulated
from dra_driver.composition.mps_host_process import MpsHostProcess
from dra_driver.container import base_spec, injection
from dra_driver.container import cdi as cdi_module
from dra_driver.errors import PluginError
from dra_driver.files.atomic import atomic_write
from dra_driver.hardware.machine import Hardware
from dra_driver.kube import yaml_io
from dra_driver.kube.local_store import LocalCluster
from kubelet_plugin.kubelet_client import KubeletClient
from kubelet_plugin.main import (
    CHECKPOINT_DIR,
    CLEAN_STOP_S,
    LEGACY_CHECKPOINT_FILE,
    plugin_data_dir,
)
from kubelet_plugin.mps_daemons import MpsDaemons
from kubelet_plugin.node_ownership import cdi_owner_lock
from kubelet_plugin.socket_names import dra_socket_path, registration_socket_path

PLUGIN_START_TIMEOUT_S = 30.0
SIM_NODE_NAME = "sim-node"


LONGEST_CLEAN_STOP_S: Final = CLEAN_STOP_S + 5.0
"""How long a SIGTERMed plugin may take to exit: its whole stop budget (sockets, Events,
status writes, threads), plus time for the interpreter to exit."""


class PluginProcess:
    """Runs `python -m dra_driver.cli kubelet-plugin` on a simulated node and talks to it.

    Everything lives in a short work directory under /tmp (Unix socket paths
    may be at most 107 bytes, pytest's tmp_path is too long):

        <work>/sim-state.json (+ .proc/)  the simulated hardware, shared across restarts
        <work>/cluster/                   the LocalCluster the plugin reads and publishes to
        <work>/kubelet/                   the kubelet root: sockets, checkpoint
        <work>/cdi/                       the CDI spec directory
        <work>/plugin.log                 the plugin's stdout and stderr, all runs appended

    `extra_args` are appended to the command line (e.g. a feature flag).
    With `pod_uid` the plugin gets `--pod-uid` and names its sockets per
    instance, as a DaemonSet pod rolling with `maxSurge: 1` does; two
    `PluginProcess`es may then share one work directory (`share_work_with`),
    as an old and a new plugin pod share the node's kubelet root.
    `start()` returns once the registration socket of *this* run appears (the
    DRA socket is created before it), or raises `PluginError` with the tail of
    the log if the process exits first. `failpoints` are armed through the
    file `DRA_GPU_FAILPOINTS_FILE` names (see `dra_driver.failpoints`), at start
    or, with `arm()`, while the plugin runs. Use as a context
    manager: on exit the process is killed and the work directory removed
    (unless `keep`).

        with PluginProcess() as plugin:
            plugin.store_claim(claim)
            plugin.client.prepare([ClaimRef("default", uid, "claim-1")])
    """

    def __init__(
        self,
        *,
        node_name: str = SIM_NODE_NAME,
        shape: str = "dgx-h100",
        driver: str = DEFAULT_DRIVER_NAME,
        failpoints: Sequence[str] = (),
        publish_interval: float | None = None,
        extra_args: Sequence[str] = (),
        prefix: str = "dra-gpu-plugin-",
        keep: bool = False,
        client_timeout: float = 20.0,
        wait_for_ready: bool = False,
        pod_uid: str | None = None,
        share_work_with: PluginProcess | None = None,
        mps_host: bool = True,
        spawn: Spawn = popen,
        armable: bool = False,
    ) -> None:
        self.node_name = node_name
        self.armable = armable  # failpoints may be armed while the plugin runs (`arm`)
        self._spawn = spawn  # how the plugin and the MPS host are started
        self.shape = shape
        self.driver = driver
        self.publish_interval = publish_interval
        self.extra_args = tuple(extra_args)
        self.pod_uid = pod_uid
        self._owns_work = share_work_with is None
        self.keep = keep or not self._owns_work
        if share_work_with is None:
            self.work = Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))
        else:
            self.work = share_work_with.work
        self.sim_state = self.work / "sim-state.json"
        self.cluster_root = self.work / "cluster"
        self.kubelet_root = self.work / "kubelet"
        self.cdi_root = self.work / "cdi"
        self.log_path = self.work / (f"plugin-{pod_uid}.log" if pod_uid else "plugin.log")
        # The failpoints armed (`dra_driver.failpoints`), one per line, read at every hit.
        self.failpoints_path = self.work / (f"failpoints-{pod_uid}" if pod_uid else "failpoints")
        self.checkpoint_dir = plugin_data_dir(self.kubelet_root, driver) / CHECKPOINT_DIR
        self.legacy_checkpoint_path = (
            plugin_data_dir(self.kubelet_root, driver) / LEGACY_CHECKPOINT_FILE
        )
        self.registration_socket = registration_socket_path(self.kubelet_root, driver, pod_uid)
        self.dra_socket = dra_socket_path(self.kubelet_root, driver, pod_uid)
        self.cluster = LocalCluster(self.cluster_root)
        self.client = KubeletClient(
            self.kubelet_root,
            driver,
            timeout=client_timeout,
            wait_for_ready=wait_for_ready,
            pod_uid=pod_uid,
        )
        self.process: ChildProcess | None = None
        # The node's MPS host (its own DaemonSet on a cluster): a process of its own,
        # one per node, so an instance sharing the work directory shares it too.
        self.mps_host: MpsHostProcess | None = (
            share_work_with.mps_host
            if share_work_with is not None
            else MpsHostProcess(
                kubelet_root=self.kubelet_root,
                driver=driver,
                shape=shape,
                sim_state=self.sim_state,
                node_name=node_name,
                log_path=self.work / "mps-host.log",
                spawn=spawn,
            )
            if mps_host
            else None
        )
        self._failpoints = tuple(failpoints)
        self._runs = 0

    # -- life cycle ------------------------------------------------------------------

    @property
    def pid(self) -> int:
        """The pid of the running plugin."""
        return self._require_process().pid

    def start(
        self,
        failpoints: Sequence[str] | None = None,
        timeout: float = PLUGIN_START_TIMEOUT_S,
        *,
        wait: bool = True,
    ) -> Self:
        """Start the plugin and wait until it serves (unless not `wait`); `failpoints`
        replaces the armed ones."""
        if self.process is not None and self.process.poll() is None:
            raise PluginError(f"plugin pid {self.process.pid} is still running; stop it first")
        if failpoints is not None:
            self._failpoints = tuple(failpoints)
        stale = file_identity(self.registration_socket)
        self._runs += 1
        unset = {failpoints_module.ENV_VAR, "POD_UID", "NODE_NAME"}  # only the flags count
        env = {k: v for k, v in os.environ.items() if k not in unset}
        env["PYTHONUNBUFFERED"] = "1"
        if self.armable:  # a file read at every failpoint: off where a benchmark times calls
            self._write_failpoints()
            env[failpoints_module.FILE_ENV_VAR] = str(self.failpoints_path)
        elif self._failpoints:
            env[failpoints_module.ENV_VAR] = ",".join(self._failpoints)
        args = [
            sys.executable,
            "-m",
            "dra_driver.cli",
            "kubelet-plugin",
            f"--node-name={self.node_name}",
            f"--driver-name={self.driver}",
            f"--nvml=sim:{self.shape}",
            f"--sim-state={self.sim_state}",
            f"--cluster=local:{self.cluster_root}",
            f"--kubelet-root={self.kubelet_root}",
            f"--cdi-root={self.cdi_root}",
        ]
        if self.publish_interval is not None:
            args.append(f"--publish-interval={self.publish_interval:g}")
        if self.pod_uid is not None:
            args.append(f"--pod-uid={self.pod_uid}")
        args.extend(self.extra_args)
        if self.mps_host is not None:
            self.mps_host.launch()  # ready by the time the plugin is (checked below)
        with self.log_path.open("ab") as log:
            log.write(
                f"--- run {self._runs}: failpoints {','.join(self._failpoints) or '-'}\n".encode()
            )
            log.flush()
            # A process group of its own, as a container's: tests may SIGKILL all of it.
            self.process = self._spawn(args, env, log.fileno())

        def fresh_socket() -> bool:
            identity = file_identity(self.registration_socket)
            return identity is not None and identity != stale

        if wait:
            self.wait_for(fresh_socket, "registration socket", timeout)
            if self.mps_host is not None:
                self.mps_host.wait_ready(timeout)
        return self

    def wait_for(
        self,
        condition: Callable[[], bool],
        what: str,
        timeout: float = PLUGIN_START_TIMEOUT_S,
    ) -> None:
        """Poll `condition` until true; PluginError with the log tail if the plugin exits first."""
        process = self._require_process()
        deadline = time.monotonic() + timeout
        while not condition():
            if process.poll() is not None:
                raise PluginError(
                    f"the plugin exited with {process.returncode} before its {what} appeared; "
                    f"log:\n{self.log_tail()}"
                )
            if time.monotonic() > deadline:
                raise PluginError(f"no {what} after {timeout:g} s; log:\n{self.log_tail()}")
            time.sleep(0.02)

    def wait_exit(self, timeout: float = 15.0) -> int:
        """Wait for the plugin to exit on its own; its return code (-9: killed by SIGKILL)."""
        return self._require_process().wait(timeout=timeout)

    def kill(self) -> int:
        """SIGKILL the plugin, as an OOM kill or a node crash would; returns the exit code."""
        self.client.close()
        process = self._require_process()
        if process.poll() is None:
            process.kill()
        return process.wait(timeout=15)

    def terminate(self, timeout: float = LONGEST_CLEAN_STOP_S) -> int:
        """SIGTERM the plugin and wait for it to exit (a clean stop); returns the exit code.

        It may take as long as the plugin's clean stop may (`LONGEST_CLEAN_STOP_S`); a
        plugin still running then is a PluginError with its log, not a bare timeout."""
        self.client.close()
        process = self._require_process()
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
        try:
            return process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            process.send_signal(signal.SIGQUIT)  # the plugin logs every thread's stack
            time.sleep(1.0)
            raise PluginError(
                f"the plugin did not stop within {timeout:g} s of SIGTERM; log, ending with "
                f"its threads' stacks (SIGQUIT):\n{self.log_tail(20_000)}"
            ) from None

    def arm(self, failpoints: Sequence[str]) -> None:
        """Arm `failpoints` (replacing the armed ones) in the plugin as it runs: it dies with
        SIGKILL at the next one it reaches. They stay armed across restarts until replaced.
        Needs `armable` (PluginError otherwise)."""
        if not self.armable:
            raise PluginError("this PluginProcess was made without armable=True")
        self._failpoints = tuple(failpoints)
        self._write_failpoints()
        with self.log_path.open("ab") as log:
            log.write(f"--- armed: failpoints {','.join(self._failpoints) or '-'}\n".encode())

    def _write_failpoints(self) -> None:
        text = "".join(f"{name}\n" for name in self._failpoints)
        atomic_write(self.failpoints_path, text.encode(), sync=False)

    def restart(self, failpoints: Sequence[str] | None = None) -> Self:
        """Stop the plugin if it runs (SIGTERM), then start it with `failpoints` (default: none).

        The client's channels are closed so the next call dials the new process.
        """
        if self.process is not None and self.process.poll() is None:
            self.terminate()
        self.client.close()
        return self.start(failpoints=failpoints or ())

    def close(self) -> None:
        """Kill the plugin if it runs, stop the MPS host, kill any MPS daemon left, and
        remove the work directory (unless `keep`)."""
        self.client.close()
        if self.process is not None:
            if self.process.poll() is None:
                self.process.kill()
            self.process.wait(timeout=15)
        if self._owns_work:  # the node's MPS host and daemons go with the node
            if self.mps_host is not None:
                self.mps_host.stop()
            self.kill_mps_daemons()
        if not self.keep:
            shutil.rmtree(self.work, ignore_errors=True)

    def __enter__(self) -> Self:
        try:
            return self.start()
        except BaseException:
            self.close()
            raise

    def __exit__(self, *_exc: object) -> None:
        self.close()

    # -- what the plugin left on disk ---------------------------------------------

    @property
    def mps_root(self) -> Path:
        """Where the plugin keeps its MPS daemons' directories (one per device UUID)."""
        return plugin_data_dir(self.kubelet_root, self.driver) / MPS_DIR

    def mps_daemons(self) -> dict[str, int]:
        """The simulated MPS control daemons alive under `mps_root`: device UUID -> pid."""
        alive = {}
        for paths in MpsDaemons(self.mps_root, ()).daemon_dirs():
            found = MpsDaemons(self.mps_root, ()).find(paths)
            if found is not None:
                alive[paths.device_uuid] = found.pid
        return alive

    def mps_files(self) -> list[str]:
        """What is under `mps_root` besides the MPS host's own lock and FIFO: daemon
        directories, intent and status files (empty once no claim uses MPS)."""
        try:
            names = os.listdir(self.mps_root)
        except FileNotFoundError:
            return []
        return sorted(set(names) - {HOST_LOCK_FILE, HOST_WAKE_FIFO})

    def kill_mps_daemons(self) -> list[int]:
        """SIGKILL every MPS daemon left under `mps_root` (tests must not leak processes)."""
        killed = []
        for pid in self.mps_daemons().values():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
        return killed

    def store_claim(self, claim: Mapping[str, Any]) -> dict[str, Any]:
        """Store a claim as a real API server would get it: create, then write its status.

        A `status` (the allocation) goes through the status subresource; the
        metadata's resourceVersion is dropped for the create. Returns the stored object.
        """
        body = json.loads(json.dumps(claim))
        status = body.pop("status", None)
        body["metadata"].pop("resourceVersion", None)
        stored = self.cluster.put_resource_claim(body)
        if status is None:
            return stored
        stored["status"] = status
        return self.cluster.update_resource_claim_status(stored)

    def checkpoint(self) -> Checkpoint | None:
        """The claim files as written, merged into one checkpoint.

        None when the plugin data directory does not exist yet. A file the plugin removes
        while this reads is left out, as it is gone. Boot ids are
        not checked against the node's, but all files must agree on one.
        """
        if not self.checkpoint_dir.parent.exists():
            return None
        claims: dict[str, Any] = {}
        boot_ids: set[str] = set()
        for path in self.checkpoint_files():
            try:
                data = path.read_bytes()
            except FileNotFoundError:  # unprepared between the listing and the read
                continue
            stored = decode_checkpoint(data, source=str(path))
            claims.update(stored.claims)
            boot_ids.add(stored.boot_id)
        if len(boot_ids) > 1:
            raise PluginError(f"{self.checkpoint_dir}: claim files of boots {sorted(boot_ids)}")
        boot_id = boot_ids.pop() if boot_ids else self.hardware().host.boot_id()
        return Checkpoint(boot_id=boot_id, claims=claims)

    def checkpoint_files(self) -> list[Path]:
        """The claim files of the checkpoint directory (`<uid>.json`), sorted."""
        if not self.checkpoint_dir.exists():
            return []
        return sorted(self.checkpoint_dir.glob("*.json"))

    def cdi_spec_path(self, claim_uid: str) -> Path:
        """Where the plugin writes the CDI spec of `claim_uid`."""
        return self.cdi_root / cdi_module.spec_file_name(claim_uid)

    def cdi_files(self) -> list[str]:
        """Names of every file in the CDI directory (ours, temp files, anything) but the
        plugin's ownership lock of the directory (`kubelet_plugin.node_ownership`) and
        the node's base specs (`base_cdi_files`), which no claim owns."""
        lock = cdi_owner_lock(self.cdi_root, self.driver).name
        try:
            return sorted(
                p.name
                for p in self.cdi_root.iterdir()
                if p.name != lock and base_spec.name_from_file_name(p.name) is None
            )
        except FileNotFoundError:
            return []

    def base_cdi_files(self) -> list[str]:
        """Names of the base spec files in the CDI directory (`dra_driver.container.base_spec`)."""
        try:
            return sorted(
                p.name
                for p in self.cdi_root.iterdir()
                if base_spec.name_from_file_name(p.name) is not None
            )
        except FileNotFoundError:
            return []

    def base_cdi_id(self) -> str:
        """The CDI id of the node's one base spec (`k8s.gpu.nvidia.com/driver=common-...`),
        which Prepare lists first for each device; `PluginError` unless there is one."""
        files = self.base_cdi_files()
        if len(files) != 1:
            raise PluginError(f"{self.cdi_root}: base specs {files}, expected one")
        name = base_spec.name_from_file_name(files[0])
        assert name is not None
        return base_spec.qualified_id(name)

    def container_edits(self, cdi_device_ids: Sequence[str]) -> dict[str, Any]:
        """What a container given `cdi_device_ids` gets from the CDI directory, as a
        runtime injects it (`dra_driver.container.injection`)."""
        specs = [
            yaml_io.load(p.read_text(encoding="utf-8"))
            for p in sorted(self.cdi_root.glob("*.yaml"))
        ]
        return injection.inject(specs, cdi_device_ids)

    def simulated_node(self) -> SimulatedNode:
        """The plugin's simulated node, shared via its state file: what
        `dra-gpu mig status --sim-state` would open, and the simulator behind it."""
        return open_simulated(self.shape, sim_state=self.sim_state, node_name=self.node_name)

    def hardware(self) -> Hardware:
        """The `Hardware` of `simulated_node()`."""
        return self.simulated_node().hardware

    def log_tail(self, chars: int = 3000) -> str:
        """The end of the plugin's log (all runs)."""
        return log_tail(self.log_path, chars)

    def _require_process(self) -> ChildProcess:
        if self.process is None:
            raise PluginError("the plugin was never started")
        return self.process
