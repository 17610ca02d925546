"""A multi-node ComputeDomain cluster on one machine: simulated GB200 nodes, real daemons.

A ComputeDomain only means something across nodes: the controller on one side,
per node a CD kubelet plugin and an IMEX host, and IMEX daemons that must find
and connect to each other. `dra-gpu demo compute-domain`, the end-to-end tests
and the channel benchmark run all of it as a cluster would, with the real
programs as processes of their own, on one `LocalCluster` directory standing
in for the API server:

    <work>/cluster/                    the LocalCluster every process reads and writes
    <work>/nodes/<node>/sim-state.json the node's simulated hardware (+ .proc/, .driver-root/:
                                       its own /proc/devices and NVIDIA driver root, with
                                       the nvidia-imex stand-in)
    <work>/nodes/<node>/kubelet/       the node's kubelet root (plugin sockets, checkpoint)
    <work>/nodes/<node>/cdi/           the node's CDI spec directory
    <work>/nodes/<node>/imex/          the IMEX host's state directory: per domain its
                                       imexd.cfg, nodes.cfg and the hosts file the IMEX
                                       stand-in resolves names in (never /etc/hosts)
    <work>/nodes/<node>/*.log          each process's output

Each simulated node is a `gb200-node` (one NVL72 compute tray, clique
`00000000-0000-0000-0000-000000000001.0` unless the fabric is changed) with
an IP address of its own on the loopback network, `127.0.1.<k>` (the IMEX
stand-ins bind it), and a `Node` object with a `Ready` condition and that
`InternalIP`. Per node it starts `dra-gpu compute-domain-kubelet-plugin` and
`dra-gpu imex-host` (and, for the demo, the GPU driver's `kubelet-plugin`),
each in a session of its own through a `child_process.Spawn`; beside them one
or more `dra-gpu compute-domain-controller`s. Pods go through
`compute_domain_kubelet.SchedulerKubelet` (claims from templates, the
scheduler's allocator, Prepare over each node's socket).

The scenario controls are what an operator or a failure does to a cluster:
lose a node (its processes and IMEX daemons killed, the Node marked
NotReady), reboot a node (a new boot id, its disk kept), bring a new node up
on a freed IP address, change a node's NVLink
fabric with `dra-gpu sim fabric`, run two controllers and kill the leader,
delete a ComputeDomain or a pod.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Self

from dra_driver import DEFAULT_DRIVER_NAME
from dra_driver.composition.child_process import (
    ChildProcess,
    Spawn,
    file_identity,
    log_tail,
    popen,
    terminate,
)
from dra_driver.composition.compute_domain_kubelet import NodeAccess, SchedulerKubelet
from dra_driver.composition.hardware import open_simulated
from dra_driver.compute_domain import manifests
from dra_driver.compute_domain.names import DRIVER_NAME
from dra_driver.errors import ClusterError, NotFoundError, PluginError
from dra_driver.hardware.simulated.shapes import NVL72_RACK
from dra_driver.kube.apiserver_rules import NODE, timestamp_now
from dra_driver.kube.local_store import LocalCluster
from dra_driver.kube.object_store import COMPUTE_DOMAIN, LEASE
from dra_driver.kube.objects import Obj
from kubelet_plugin.socket_names import registration_socket_path

__all__ = [
    "CONTROLLER_LEASE",
    "DRIVER_NAMESPACE",
    "ClusterTiming",
    "ComputeDomainCluster",
    "ControllerProcess",
    "SimNode",
]

DRIVER_NAMESPACE: Final = "dra-gpu"
"""Where the driver's own objects live (members, cliques, the Lease): deploy/base's."""
CONTROLLER_LEASE: Final = "dra-gpu-compute-domain-controller"
SHAPE: Final = "gb200-node"
START_TIMEOUT_S: Final = 60.0
STOP_TIMEOUT_S: Final = 15.0
_UNSET_ENV: Final = frozenset(
    {
        "NODE_NAME",
        "NODE_IP",
        "POD_NAME",
        "POD_UID",
        "NAMESPACE",
        "IMEX_MODE",
        "IMEX_HOST_SOCKET_PATH",
        "GPU_CLIQUE_LABEL_ENABLED",
        "MAX_NODES_PER_IMEX_DOMAIN",
        "DRA_GPU_FAILPOINTS",
        "DRA_GPU_FAILPOINTS_FILE",
    }
)


@dataclass(frozen=True)
class ClusterTiming:
    """The daemons' intervals: short in tests, the products' defaults elsewhere (None)."""

    fabric_check_interval: float | None = None  # CD plugin --fabric-check-interval
    prepare_wait: float | None = None  # CD plugin --prepare-wait
    lease_duration: float | None = None  # controller --leader-elect-lease-duration
    renew_deadline: float | None = None
    retry_period: float | None = None
    imex_poll: float | None = None  # IMEX host --poll-interval (until Ready and connected)
    imex_ready_poll: float | None = None  # IMEX host --ready-poll-interval


def _flag(name: str, value: float | None) -> list[str]:
    return [] if value is None else [f"--{name}={value:g}"]


def _child_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in _UNSET_ENV}
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra or {})
    return env


class _Daemon:
    """One started program: its process, log, and how to stop it."""

    def __init__(self, what: str, argv: Sequence[str], log_path: Path, spawn: Spawn) -> None:
        self.what = what
        self.argv = list(argv)
        self.log_path = log_path
        self._spawn = spawn
        self.process: ChildProcess | None = None
        self.env: dict[str, str] | None = None

    def start(self, env: Mapping[str, str] | None = None) -> None:
        if self.running():
            raise PluginError(f"{self.what} (pid {self.pid}) is still running; stop it first")
        self.env = _child_env(env)
        with self.log_path.open("ab") as log:
            log.write(f"--- start {time.strftime('%H:%M:%S')}: {' '.join(self.argv)}\n".encode())
            log.flush()
            self.process = self._spawn(self.argv, self.env, log.fileno())

    @property
    def pid(self) -> int:
        if self.process is None:
            raise PluginError(f"{self.what} was never started")
        return self.process.pid

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def kill(self) -> None:
        """SIGKILL, as a node crash or an OOM kill would."""
        if self.process is None:
            return
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(timeout=STOP_TIMEOUT_S)

    def send_term(self) -> None:
        """SIGTERM without waiting (`terminate` then waits), so many stop at once."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)

    def terminate(self, timeout: float = STOP_TIMEOUT_S) -> int | None:
        """SIGTERM and wait (SIGKILL after `timeout`); the exit code, None if never started."""
        return None if self.process is None else terminate(self.process, timeout)

    def log_tail(self, chars: int = 3000) -> str:
        return log_tail(self.log_path, chars)

    def require_running(self) -> None:
        if self.process is not None and self.process.poll() is not None:
            raise PluginError(
                f"{self.what} exited with {self.process.returncode}; log:\n{self.log_tail()}"
            )


class ControllerProcess(_Daemon):
    """One `dra-gpu compute-domain-controller` replica."""

    def __init__(self, argv: Sequence[str], log_path: Path, spawn: Spawn, pod_name: str) -> None:
        super().__init__(f"controller {pod_name}", argv, log_path, spawn)
        self.pod_name = pod_name


class SimNode:
    """One simulated GB200 node and the daemons on it."""

    def __init__(self, cluster: ComputeDomainCluster, name: str, ip: str, work: Path) -> None:
        self.cluster = cluster
        self.name = name
        self.ip = ip
        self.work = work
        self.sim_state = work / "sim-state.json"
        self.kubelet_root = work / "kubelet"
        self.cdi_root = work / "cdi"
        self.imex_state_dir = work / "imex"
        for directory in (self.kubelet_root, self.cdi_root, self.imex_state_dir):
            directory.mkdir(parents=True, exist_ok=True)
        self.registration_socket = registration_socket_path(self.kubelet_root, DRIVER_NAME, None)
        self.access = NodeAccess(name, self.kubelet_root, self.cdi_root, timeout=30.0)
        self.down = False
        common = [
            f"--node-name={name}",
            f"--cluster=local:{cluster.cluster_root}",
            f"--nvml=sim:{SHAPE}",
            f"--sim-state={self.sim_state}",
        ]
        timing = cluster.timing
        self.plugin = _Daemon(
            f"CD plugin on {name}",
            [
                sys.executable,
                "-m",
                "dra_driver.cli",
                "compute-domain-kubelet-plugin",
                *common,
                f"--namespace={DRIVER_NAMESPACE}",
                f"--kubelet-root={self.kubelet_root}",
                f"--cdi-root={self.cdi_root}",
                "--gpu-clique-label",
                *_flag("fabric-check-interval", timing.fabric_check_interval),
                *_flag("prepare-wait", timing.prepare_wait),
                *cluster.plugin_args,
            ],
            work / "cd-plugin.log",
            cluster.spawn,
        )
        self.imex_host = _Daemon(
            f"IMEX host on {name}",
            [
                sys.executable,
                "-m",
                "dra_driver.cli",
                "imex-host",
                *common,
                f"--node-ip={ip}",
                f"--namespace={DRIVER_NAMESPACE}",
                f"--state-dir={self.imex_state_dir}",
                *_flag("poll-interval", timing.imex_poll),
                *_flag("ready-poll-interval", timing.imex_ready_poll),
                *cluster.imex_host_args,
            ],
            work / "imex-host.log",
            cluster.spawn,
        )
        self.gpu_plugin = _Daemon(
            f"GPU plugin on {name}",
            [
                sys.executable,
                "-m",
                "dra_driver.cli",
                "kubelet-plugin",
                *common,
                f"--driver-name={DEFAULT_DRIVER_NAME}",
                f"--kubelet-root={self.kubelet_root}",
                f"--cdi-root={self.cdi_root}",
            ],
            work / "gpu-plugin.log",
            cluster.spawn,
        )

    def __repr__(self) -> str:
        return f"SimNode({self.name!r}, {self.ip})"

    def ensure_state(self) -> None:
        """Create the node's simulated hardware state (as its first daemon would), so that
        it can be changed (`ComputeDomainCluster.set_fabric`) before anything starts."""
        if not self.sim_state.exists():
            open_simulated(SHAPE, sim_state=self.sim_state, node_name=self.name)

    def daemons(self) -> list[_Daemon]:
        return [self.plugin, self.imex_host, self.gpu_plugin]

    def launch(self, *, gpu_plugin: bool = False) -> None:
        """Start the IMEX host and the CD plugin (and the GPU plugin), without waiting."""
        self.imex_host.start()
        self.plugin.start()
        if gpu_plugin:
            self.gpu_plugin.start()

    def wait_serving(self, timeout: float = START_TIMEOUT_S) -> None:
        """Wait for the CD plugin's registration socket, then register it as the kubelet
        does; PluginError with the log of whichever daemon exited."""
        deadline = time.monotonic() + timeout
        while not self.registration_socket.exists():
            for daemon in self.daemons():
                daemon.require_running()
            if time.monotonic() > deadline:
                raise PluginError(
                    f"{self.plugin.what}: no registration socket after {timeout:g} s; log:\n"
                    f"{self.plugin.log_tail()}"
                )
            time.sleep(0.05)
        self.access.client(DRIVER_NAME).register()
        if self.gpu_plugin.running():
            gpu_socket = registration_socket_path(self.kubelet_root, DEFAULT_DRIVER_NAME, None)
            while not gpu_socket.exists():
                self.gpu_plugin.require_running()
                if time.monotonic() > deadline:
                    raise PluginError(
                        f"{self.gpu_plugin.what}: no registration socket after {timeout:g} s; "
                        f"log:\n{self.gpu_plugin.log_tail()}"
                    )
                time.sleep(0.05)
            self.access.client(DEFAULT_DRIVER_NAME).register()

    def restart_plugin(self, timeout: float = START_TIMEOUT_S) -> None:
        """SIGKILL the CD plugin (a crash, an upgrade's hard stop) and start it again; returns
        once the new one serves and the kubelet registered it."""
        self.plugin.kill()
        self.access.close()
        stale = file_identity(self.registration_socket)
        self.plugin.start()
        self._await_new_plugin(stale, timeout)

    def reboot(self, timeout: float = START_TIMEOUT_S) -> str:
        """Reboot the node: every process of it dies (daemons, IMEX daemons), the simulated
        hardware comes back with a new boot id (`/proc/sys/kernel/random/boot_id`), the
        kubelet, CDI and IMEX state directories stay (a persistent disk), the daemons start
        again. Returns the new boot id once the CD plugin serves and is registered."""
        self.kill()
        stale = file_identity(self.registration_socket)
        hardware = open_simulated(SHAPE, sim_state=self.sim_state, node_name=self.name).sim
        hardware.reboot()
        self.launch()
        self._await_new_plugin(stale, timeout)
        return hardware.boot_id()

    def _await_new_plugin(self, stale: tuple[int, int] | None, timeout: float) -> None:
        """Wait for a registration socket other than `stale` (the dead plugin's file), then
        register the plugin as the kubelet does."""
        deadline = time.monotonic() + timeout
        while file_identity(self.registration_socket) in (None, stale):
            self.plugin.require_running()
            if time.monotonic() > deadline:
                raise PluginError(
                    f"{self.plugin.what}: no new registration socket after {timeout:g} s; "
                    f"log:\n{self.plugin.log_tail()}"
                )
            time.sleep(0.05)
        self.access.client(DRIVER_NAME).register()

    def restart_imex_host(self) -> None:
        """SIGKILL the IMEX host and start it again (its IMEX daemons keep running)."""
        self.imex_host.kill()
        self.imex_host.start()

    def imex_log(self, domain_uid: str) -> str:
        """What the node's IMEX daemon of the domain logged (all its runs)."""
        path = self.imex_state_dir / "domains" / domain_uid / "nvidia-imex.log"
        try:
            return path.read_text(encoding="utf-8", errors="replace")
        except FileNotFoundError:
            return ""

    def imex_daemon_pids(self) -> list[int]:
        """The IMEX daemons (stand-ins) running for this node: processes whose command line
        names a domain's config under the node's IMEX state directory (`-c <dir>/domains/
        <uid>/imexd.cfg`; the IMEX host's own names only the directory)."""
        return [
            pid
            for pid in processes_naming(self.imex_state_dir / "domains")
            if any(arg.endswith(b"/nvidia-imex") for arg in _cmdline(pid))  # not -ctl queries
        ]

    def imex_ctl(self, domain_uid: str, *args: str) -> subprocess.CompletedProcess[str]:
        """Run the node's `nvidia-imex-ctl <args> -c <the domain's imexd.cfg>`."""
        config = self.imex_state_dir / "domains" / domain_uid / "imexd.cfg"
        ctl = self.driver_root / "usr" / "bin" / "nvidia-imex-ctl"
        return subprocess.run(
            [str(ctl), *args, "-c", str(config)],
            capture_output=True,
            text=True,
            timeout=30,
            env=_child_env(),
            check=False,
        )

    def imex_peers(self, domain_uid: str, *, unresolved: bool = False) -> dict[str, str]:
        """`nvidia-imex-ctl -N -j`: IMEX node name -> connection state (C, N, R, D, I) of
        the names that resolve to an address (with `unresolved`, of every line of the nodes
        file: the unused indices' names resolve to nothing and read I)."""
        answer = self.imex_ctl(domain_uid, "-N", "-j")
        if answer.returncode != 0:
            raise PluginError(
                f"nvidia-imex-ctl -N -j on {self.name} for {domain_uid}: exit "
                f"{answer.returncode}: {answer.stderr.strip() or answer.stdout.strip()}"
            )
        data = json.loads(answer.stdout)
        return {
            row["host"]: row["status"]
            for row in (data.get("nodes") or {}).values()
            if unresolved or row.get("address")
        }

    @property
    def driver_root(self) -> Path:
        return self.sim_state.with_name(self.sim_state.name + ".driver-root")

    def stop(self) -> None:
        """Stop the node's daemons (SIGTERM) and kill the IMEX daemons left."""
        self.access.close()
        for daemon in self.daemons():
            daemon.terminate()
        kill_pids(self.imex_daemon_pids())

    def kill(self) -> None:
        """SIGKILL every process of the node, IMEX daemons included (a lost node)."""
        self.access.close()
        for daemon in self.daemons():
            daemon.kill()
        kill_pids(self.imex_daemon_pids())


class ComputeDomainCluster:
    """N simulated GB200 nodes, their daemons and the controller(s) (module docstring).

    with ComputeDomainCluster(nodes=4, timing=ClusterTiming(fabric_check_interval=0.5)) as c:
        c.start()
        domain = c.apply_compute_domain("default", "imex", "imex-channel")
        pod = c.run_pod(channel_pod("default", "w0", "imex-channel", node="node-1"))
    """

    def __init__(
        self,
        *,
        nodes: int = 4,
        spawn: Spawn = popen,
        timing: ClusterTiming = ClusterTiming(),
        plugin_args: Sequence[str] = (),
        imex_host_args: Sequence[str] = (),
        controller_args: Sequence[str] = (),
        gpu_plugins: bool = False,
        keep: bool = False,
        prefix: str = "dra-gpu-cd-",
        ip_prefix: str = "127.0.1",
    ) -> None:
        self.work = Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))
        self.cluster_root = self.work / "cluster"
        self.store = LocalCluster(self.cluster_root)
        self.spawn = spawn
        self.timing = timing
        self.plugin_args = tuple(plugin_args)
        self.imex_host_args = tuple(imex_host_args)
        self.controller_args = tuple(controller_args)
        self.gpu_plugins = gpu_plugins
        self.keep = keep
        self.nodes: dict[str, SimNode] = {}
        self.controllers: list[ControllerProcess] = []
        # Nodes get `<ip_prefix>.<k>`; clusters running at once (parallel tests) need prefixes
        # of their own, or their IMEX daemons would bind each other's addresses.
        self._ip_prefix = ip_prefix
        self._next_ip = 1
        self._initial_nodes = nodes
        self.kubelet = SchedulerKubelet(
            self.store,
            self._node_access,
            node_names=lambda: sorted(self.nodes, key=_node_order),
        )
        for device_class in manifests.device_classes():
            self.store.put_device_class(device_class)

    # -- life cycle ----------------------------------------------------------------------

    def start(self, *, controllers: int = 1) -> Self:
        """Create the nodes, start every daemon, wait until each CD plugin serves."""
        new = [self.add_node(launch=False) for _ in range(self._initial_nodes)]
        for _ in range(controllers):
            self.start_controller()
        for node in new:
            node.launch(gpu_plugin=self.gpu_plugins)
        for node in new:
            node.wait_serving()
        return self

    def add_node(
        self, name: str | None = None, *, ip: str | None = None, launch: bool = True
    ) -> SimNode:
        """A new simulated node (`node-<k>`, IP `<ip_prefix>.<k>` unless given), its Node object
        Ready; with `launch` its daemons started and its plugin serving."""
        if ip is None:
            used = {n.ip for n in self.nodes.values()}
            while f"{self._ip_prefix}.{self._next_ip}" in used:
                self._next_ip += 1
            ip = f"{self._ip_prefix}.{self._next_ip}"
            self._next_ip += 1
        if name is None:
            index = len(self.nodes) + 1
            while f"node-{index}" in self.nodes:
                index += 1
            name = f"node-{index}"
        if name in self.nodes:
            raise ClusterError(f"node {name} exists already")
        node = SimNode(self, name, ip, self.work / "nodes" / name)
        self.nodes[name] = node
        self._create_node_object(node)
        if launch:
            node.launch(gpu_plugin=self.gpu_plugins)
            node.wait_serving()
        return node

    def _create_node_object(self, node: SimNode) -> None:
        create_node_object(self.store, node.name, node.ip)

    def set_node_ready(self, name: str, ready: bool, reason: str = "") -> None:
        """Write the Node's Ready condition (and InternalIP), as the node lifecycle
        controller would after missed heartbeats."""
        set_node_ready(self.store, name, self.nodes[name].ip, ready, reason)

    def start_controller(self, *, leader_elect: bool | None = None) -> ControllerProcess:
        """Start one more controller replica (with leader election when there is more than
        one, or when asked)."""
        index = len(self.controllers)
        pod_name = f"compute-domain-controller-{index}"
        timing = self.timing
        elect = leader_elect if leader_elect is not None else index > 0
        if index > 0 and not any("--leader-elect" in a for a in self.controllers[0].argv):
            raise ClusterError(
                "a second controller needs the first to run with leader election: "
                "start_controller(leader_elect=True) first"
            )
        argv = [
            sys.executable,
            "-m",
            "dra_driver.cli",
            "compute-domain-controller",
            f"--cluster=local:{self.cluster_root}",
            f"--namespace={DRIVER_NAMESPACE}",
            *self.controller_args,
        ]
        if elect:
            argv += [
                "--leader-elect",
                *_flag("leader-elect-lease-duration", timing.lease_duration),
                *_flag("leader-elect-renew-deadline", timing.renew_deadline),
                *_flag("leader-elect-retry-period", timing.retry_period),
            ]
        controller = ControllerProcess(
            argv, self.work / f"controller-{index}.log", self.spawn, pod_name
        )
        self.controllers.append(controller)
        controller.start({"POD_NAME": pod_name, "HOSTNAME": f"controller-host-{index}"})
        return controller

    def close(self) -> None:
        """Stop everything started (controllers, node daemons, IMEX daemons), remove the
        work directory unless `keep`."""
        daemons = [*self.controllers, *(d for n in self.nodes.values() for d in n.daemons())]
        for daemon in daemons:  # all at once: each takes a moment to stop cleanly
            daemon.send_term()
        for daemon in daemons:
            with contextlib.suppress(Exception):
                daemon.terminate(timeout=5.0)
        for node in self.nodes.values():
            with contextlib.suppress(Exception):
                node.stop()
        # Anything still naming the work directory (an IMEX daemon of a removed node).
        kill_pids(processes_naming(self.work))
        if not self.keep:
            shutil.rmtree(self.work, ignore_errors=True)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    # -- scenario controls ---------------------------------------------------------------

    def kill_node(self, name: str) -> None:
        """Lose a node: SIGKILL its daemons and IMEX daemons, mark its Node NotReady."""
        node = self.nodes[name]
        node.kill()
        node.down = True
        self.set_node_ready(name, False)

    def remove_node(self, name: str) -> SimNode:
        """Take a (killed) node out of the cluster for good: its Node object deleted, its
        IP address free for a new node."""
        node = self.nodes.pop(name)
        if not node.down:
            node.kill()
            node.down = True
        with contextlib.suppress(NotFoundError):
            self.store.delete_object(NODE, None, name)
        return node

    def set_fabric(self, name: str, state: str, *args: str) -> None:
        """`dra-gpu sim fabric --state-file <node's> --state <state> [args]`: change the
        NVLink fabric every GPU of the node reports."""
        node = self.nodes[name]
        answer = subprocess.run(
            [
                sys.executable,
                "-m",
                "dra_driver.cli",
                "sim",
                "fabric",
                f"--state-file={node.sim_state}",
                f"--state={state}",
                *args,
            ],
            capture_output=True,
            text=True,
            env=_child_env(),
            timeout=60,
            check=False,
        )
        if answer.returncode != 0:
            raise PluginError(
                f"dra-gpu sim fabric on {name}: exit {answer.returncode}: "
                f"{answer.stderr.strip() or answer.stdout.strip()}"
            )

    def lease_holder(self) -> str | None:
        """`spec.holderIdentity` of the controller's Lease (None: no Lease)."""
        try:
            lease = self.store.get_object(LEASE, DRIVER_NAMESPACE, CONTROLLER_LEASE)
        except NotFoundError:
            return None
        return (lease.get("spec") or {}).get("holderIdentity")

    # -- ComputeDomains and pods ----------------------------------------------------------

    def apply_compute_domain(
        self,
        namespace: str,
        name: str,
        template: str,
        *,
        num_nodes: int | None = None,
        allocation_mode: str | None = None,
    ) -> Obj:
        """Create a ComputeDomain (NVIDIA's shape); the stored object, with its UID."""
        spec: dict[str, Any] = {"channel": {"resourceClaimTemplate": {"name": template}}}
        if num_nodes is not None:
            spec["numNodes"] = num_nodes
        if allocation_mode is not None:
            spec["channel"]["allocationMode"] = allocation_mode
        return self.apply(
            {
                "apiVersion": "resource.nvidia.com/v1beta1",
                "kind": "ComputeDomain",
                "metadata": {"namespace": namespace, "name": name, "uid": str(uuid.uuid4())},
                "spec": spec,
            }
        )

    def apply(self, obj: Mapping[str, Any]) -> Obj:
        """Create a ComputeDomain given as a manifest (`kubectl apply` of a new one)."""
        body = json.loads(json.dumps(obj))
        meta = body.setdefault("metadata", {})
        meta.setdefault("namespace", "default")
        meta.setdefault("uid", str(uuid.uuid4()))
        if body.get("kind") != "ComputeDomain":
            raise ClusterError(
                f"apply: only ComputeDomains are stored this way, not {body.get('kind')}"
            )
        return self.store.create_object(COMPUTE_DOMAIN, body)

    def compute_domain(self, namespace: str, name: str) -> Obj:
        return self.store.get_object(COMPUTE_DOMAIN, namespace, name)

    def delete_compute_domain(self, namespace: str, name: str) -> None:
        self.store.delete_object(COMPUTE_DOMAIN, namespace, name)

    def run_pod(self, pod: Mapping[str, Any], *, timeout: float = 60.0) -> Any:
        """Schedule the pod, prepare its claims, resolve its container (`SchedulerKubelet`)."""
        return self.kubelet.run_pod(pod, timeout=timeout)

    def delete_pod(self, namespace: str, name: str, *, timeout: float = 30.0) -> dict[str, str]:
        return self.kubelet.delete_pod(namespace, name, timeout=timeout)

    def wait_for(
        self,
        condition: Callable[[], Any],
        what: str,
        timeout: float = 30.0,
        *,
        interval: float = 0.05,
    ) -> Any:
        """Poll `condition` until it returns something true (returned); PluginError naming
        `what` after `timeout`, or at once when a controller or node daemon died."""
        deadline = time.monotonic() + timeout
        while True:
            value = condition()
            if value:
                return value
            self.check_daemons()
            if time.monotonic() > deadline:
                raise PluginError(f"no {what} after {timeout:g} s")
            time.sleep(interval)

    def check_daemons(self) -> None:
        """PluginError with the log of any daemon that exited though it should run."""
        for node in self.nodes.values():
            if node.down:
                continue
            for daemon in (node.plugin, node.imex_host):
                daemon.require_running()
        alive = [c for c in self.controllers if c.process is not None]
        if alive and all(c.process is not None and c.process.poll() is not None for c in alive):
            alive[-1].require_running()

    def _node_access(self, name: str) -> NodeAccess | None:
        node = self.nodes.get(name)
        if node is None or node.down:
            return None
        return node.access


def create_node_object(store: LocalCluster, name: str, ip: str) -> None:
    """The Node of a simulated node (replacing one of that name): hostname label, Ready."""
    with contextlib.suppress(NotFoundError):
        store.delete_object(NODE, None, name)
    store.create_object(
        NODE,
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
        },
    )
    set_node_ready(store, name, ip, True)


def set_node_ready(store: LocalCluster, name: str, ip: str, ready: bool, reason: str = "") -> None:
    """Write the Node's status: its InternalIP and a Ready condition True, or Unknown as the
    node lifecycle controller sets it when the kubelet stops posting status."""
    stored = store.get_object(NODE, None, name)
    now = timestamp_now()
    stored["status"] = {
        "addresses": [
            {"type": "InternalIP", "address": ip},
            {"type": "Hostname", "address": name},
        ],
        "conditions": [
            {
                "type": "Ready",
                "status": "True" if ready else "Unknown",
                "reason": "KubeletReady" if ready else (reason or "NodeStatusUnknown"),
                "message": "kubelet is posting ready status"
                if ready
                else "Kubelet stopped posting node status.",
                "lastHeartbeatTime": now,
                "lastTransitionTime": now,
            }
        ],
    }
    store.update_object_status(NODE, stored)


def set_clique(sim_state: Path, node_name: str, clique_id: int) -> None:
    """Put every GPU of a simulated gb200-node into NVLink clique `clique_id` of the rack's
    cluster (an NVL72 rack per clique: what a cluster topology file gives each node)."""
    node = open_simulated(SHAPE, sim_state=sim_state, node_name=node_name)
    info = dataclasses.replace(NVL72_RACK, clique_id=clique_id)
    for index in range(len(node.hardware.nvml.gpus())):
        node.sim.set_fabric(index, info)


def channel_pod(
    namespace: str,
    name: str,
    template: str,
    *,
    node: str | None = None,
    claim: str = "imex-channel-0",
) -> dict[str, Any]:
    """A pod asking for the domain's channel through its ResourceClaimTemplate (NVIDIA's
    `demo/specs/imex/channel-injection.yaml` shape), pinned to `node` when given."""
    spec: dict[str, Any] = {
        "containers": [
            {
                "name": "ctr",
                "image": "ubuntu:22.04",
                "command": ["bash", "-c"],
                "args": [
                    "ls -la /dev/nvidia-caps-imex-channels; trap 'exit 0' TERM; sleep 9999 & wait"
                ],
                "resources": {"claims": [{"name": claim}]},
            }
        ],
        "resourceClaims": [{"name": claim, "resourceClaimTemplateName": template}],
    }
    if node is not None:
        spec["nodeName"] = node
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"namespace": namespace, "name": name},
        "spec": spec,
    }


def processes_naming(path: Path) -> list[int]:
    """Pids of this user's processes whose command line contains `path` (the IMEX daemons
    of a node: their `-c <state dir>/...` names its state directory)."""
    needle = str(path).encode()
    me = os.getuid()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            if os.stat(f"/proc/{entry}").st_uid != me:
                continue
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmdline = f.read()
        except OSError:
            continue
        if needle in cmdline and int(entry) != os.getpid():
            found.append(int(entry))
    return found


def _cmdline(pid: int) -> list[bytes]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().split(b"\0")
    except OSError:
        return []


def kill_pids(pids: Sequence[int]) -> None:
    """SIGKILL each of `pids` (gone already is fine)."""
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)


def _node_order(name: str) -> tuple[int, str]:
    tail = name.rsplit("-", 1)[-1]
    return (int(tail), name) if tail.isdigit() else (1 << 30, name)
