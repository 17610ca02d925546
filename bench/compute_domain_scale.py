"""E11: how fast 256 pods on 64 GB200 nodes get their IMEX channels, and at what API cost.

NVIDIA's ComputeDomain driver was reported to take about 8 minutes to start a
256-pod job, its daemons fighting over one shared object with 409 conflicts
(computedomain.md §7.3, #816). Here every object has one writer
(`dra_driver.compute_domain.membership`), so convergence should take seconds
and conflicts should stay near zero. This benchmark measures both.

What runs, and how (64 nodes times three daemons do not fit two cores as
processes, so the per-node daemons run as threads of this process, each the
product's own `run` with its own store client, over real files, sockets and
processes):

- the store: one `LocalCluster` directory, as in the demo;
- the controller: `dra-gpu compute-domain-controller`, a process of its own;
- per node, in this process: the CD kubelet plugin
  (`kubelet_plugin.compute_domain.main.run`: its gRPC DRA socket, slice
  publisher, member watch, fabric checks, checkpoint, CDI specs under the
  node's own directories) and the IMEX host
  (`kubelet_plugin.imex_host_main.run`), each in a thread;
- per node the IMEX daemon: the `nvidia-imex` stand-in of the node's simulated
  driver root, a real process started by that node's IMEX host, bound to the
  node's loopback address `127.0.1.<k>` and connected over TCP to its peers;
- the pods: the scheduler and kubelet stand-in
  (`dra_driver.composition.compute_domain_kubelet`), one thread per pod:
  claim from the template, allocation with the scheduler's allocator (1.36
  gates: several pods of a domain share a node's channel-0), Prepare over the
  node's socket, retried while the plugin says it waits.

Two runs. (1) 64 nodes in 4 cliques (four NVL72 racks of 16 trays), one
ComputeDomain per clique, 4 pods per node (256 pods): the time from applying
the domains until every pod has its channel and every domain is Ready, the
API writes (the store's resourceVersion counter: every create, update and
delete of any object) and the conflicts the in-process writers met. (2) 19
nodes in one clique and one domain with a pod on each: 18 nodes get an index
and a channel, the 19th a clear error (NVIDIA's limit of 18 nodes per IMEX
domain), shown as the pod's Prepare error and the domain's condition.
"""

from __future__ import annotations

import contextlib
import functools
import json
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from kubelet_plugin.compute_domain.main import CdPluginOptions
from kubelet_plugin.compute_domain.main import run as run_cd_plugin
from kubelet_plugin.imex_host import HostConfig
from kubelet_plugin.imex_host_main import HostOptions
from kubelet_plugin.imex_host_main import run as run_imex_host

from bench import BenchOptions, BenchResult
from dra_driver.composition.child_process import popen
from dra_driver.composition.compute_domain_cluster import (
    DRIVER_NAMESPACE,
    SHAPE,
    channel_pod,
    create_node_object,
    kill_pids,
    processes_naming,
    set_clique,
)
from dra_driver.composition.compute_domain_kubelet import (
    NodeAccess,
    PodPlacementError,
    RunningPod,
    SchedulerKubelet,
)
from dra_driver.composition.hardware import open_simulated
from dra_driver.compute_domain import manifests
from dra_driver.errors import AlreadyExistsError, ConflictError, NotFoundError, PluginError
from dra_driver.kube.local_store import LocalCluster
from dra_driver.kube.object_store import COMPUTE_DOMAIN
from kubelet_plugin.socket_names import registration_socket_path

NAME = "compute-domain-scale"
DESCRIPTION = (
    "E11: 64 GB200 nodes in 4 cliques, 256 pods with channel claims: time until every pod has "
    "its channel and every domain is Ready, API writes and conflicts; 19 nodes in one clique"
)
GOAL_S = 30.0
NAMESPACE = "bench"
FABRIC_CHECK_S = 5.0
IMEX_POLL_S = 0.25
IMEX_READY_POLL_S = 2.0
PREPARE_WAIT_S = 20.0
POD_TIMEOUT_S = 120.0


def run(options: BenchOptions) -> BenchResult:
    del options  # one run each: the numbers are times to converge, not repeated latencies
    scale = _run_scale(nodes=64, cliques=4, pods_per_node=4)
    full = _run_full_clique(nodes=19)
    return BenchResult(
        name=NAME,
        title="E11: ComputeDomain convergence, 64 simulated GB200 nodes in 4 cliques, 256 pods",
        headline=[
            f"256 pods with channels, 4 domains Ready: {scale['converged_s']:.1f} s after the "
            f"domains were applied (goal < {GOAL_S:g} s; NVIDIA reported ~8 min, #816); "
            f"first pod {scale['first_pod_s']:.1f} s, Prepare p50 {scale['prepare_p50_s']:.1f} s",
            f"API writes: {scale['writes']} in all ({scale['writes_per_pod']:.1f} per pod); "
            f"conflicts (409) met by the node daemons and the stand-ins: {scale['conflicts']}; "
            f"controller log lines about conflicts: {scale['controller_conflict_lines']}",
            f"19 nodes in one clique: {full['ready_pods']} pods got a channel; the 19th "
            f"({full['refused_node']}): {full['refused_error']}",
            f"domain condition: {full['condition']}",
            f"setup (64 nodes' daemons started and serving): {scale['setup_s']:.1f} s",
        ],
        data={"scale": scale, "full_clique": full},
    )


# -- counting the in-process writers' conflicts --------------------------------------------


class _Conflicts:
    """Counts the 409s LocalCluster writes in this process answer: a stale resourceVersion
    (ConflictError) and a create of a name that exists (AlreadyExistsError), by method and
    kind."""

    def __init__(self) -> None:
        self.by_cause: dict[str, int] = {}
        self._lock = threading.Lock()

    @property
    def count(self) -> int:
        return sum(self.by_cause.values())

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return dict(self.by_cause)

    @contextlib.contextmanager
    def installed(self) -> Iterator[None]:
        names = (
            "create_object",
            "update_object",
            "update_object_status",
            "put_resource_claim",
            "update_resource_claim_status",
            "create_resource_slice",
            "update_resource_slice",
        )
        originals = {name: getattr(LocalCluster, name) for name in names}

        def wrap(method: Callable[..., Any]) -> Callable[..., Any]:
            @functools.wraps(method)
            def counted(*args: Any, **kwargs: Any) -> Any:
                try:
                    return method(*args, **kwargs)
                except ConflictError as exc:
                    kind = next(
                        (a.kind for a in args if hasattr(a, "kind") and hasattr(a, "plural")),
                        method.__name__.split("_", 1)[-1],
                    )
                    cause = "exists" if isinstance(exc, AlreadyExistsError) else "stale"
                    key = f"{method.__name__} {kind} ({cause})"
                    with self._lock:
                        self.by_cause[key] = self.by_cause.get(key, 0) + 1
                    raise

            return counted

        for name, method in originals.items():
            setattr(LocalCluster, name, wrap(method))
        try:
            yield
        finally:
            for name, method in originals.items():
                setattr(LocalCluster, name, method)


# -- a cluster of in-process nodes ---------------------------------------------------------


class _Cluster:
    """The store, the controller process and per node two daemon threads (module docstring)."""

    def __init__(self, work: Path) -> None:
        self.work = work
        self.root = work / "cluster"
        self.store = LocalCluster(self.root)
        for device_class in manifests.device_classes():
            self.store.put_device_class(device_class)
        self.stop = threading.Event()
        self.threads: list[threading.Thread] = []
        self.errors: list[str] = []
        self.access: dict[str, NodeAccess] = {}
        self.controller: Any = None
        self.kubelet = SchedulerKubelet(
            self.store, self.access.get, node_names=lambda: sorted(self.access, key=_order)
        )

    def start_controller(self) -> None:
        log = (self.work / "controller.log").open("ab")
        self.controller = popen(
            [
                sys.executable,
                "-m",
                "dra_driver.cli",
                "compute-domain-controller",
                f"--cluster=local:{self.root}",
                f"--namespace={DRIVER_NAMESPACE}",
            ],
            None,
            log.fileno(),
        )
        log.close()

    def add_node(self, index: int, clique: int) -> None:
        name = f"node-{index}"
        ip = f"127.0.1.{index}"
        node_dir = self.work / "nodes" / name
        sim_state = node_dir / "sim-state.json"
        for sub in ("kubelet", "cdi", "imex"):
            (node_dir / sub).mkdir(parents=True, exist_ok=True)
        set_clique(sim_state, name, clique)
        create_node_object(self.store, name, ip)

        def hardware() -> Any:
            return open_simulated(SHAPE, sim_state=sim_state, node_name=name).hardware

        plugin = CdPluginOptions(
            node_name=name,
            namespace=DRIVER_NAMESPACE,
            open_hardware=hardware,
            cluster=f"local:{self.root}",
            kubelet_root=node_dir / "kubelet",
            cdi_root=node_dir / "cdi",
            fabric_check_interval=FABRIC_CHECK_S,
            prepare_wait=PREPARE_WAIT_S,
            publish_interval=3600.0,
        )
        host = HostOptions(
            open_hardware=hardware,
            open_store=lambda: LocalCluster(self.root),
            host=HostConfig(
                node_name=name, node_ip=ip, namespace=DRIVER_NAMESPACE, state_dir=node_dir / "imex"
            ),
            fast_interval=IMEX_POLL_S,
            ready_interval=IMEX_READY_POLL_S,
        )
        self._thread(f"cd-plugin-{name}", lambda: run_cd_plugin(plugin, self.stop))
        self._thread(f"imex-host-{name}", lambda: run_imex_host(host, self.stop))
        self.access[name] = NodeAccess(name, node_dir / "kubelet", node_dir / "cdi", timeout=45.0)

    def _thread(self, name: str, target: Callable[[], Any]) -> None:
        def guarded() -> None:
            try:
                target()
            except BaseException as exc:  # a daemon that dies is a failed benchmark
                self.errors.append(f"{name}: {type(exc).__name__}: {exc}")

        thread = threading.Thread(target=guarded, name=name, daemon=True)
        thread.start()
        self.threads.append(thread)

    def wait_serving(self, timeout: float = 120.0) -> None:
        deadline = time.monotonic() + timeout
        for name in self.access:
            socket = registration_socket_path(self.work / "nodes" / name / "kubelet", _CD, None)
            while not socket.exists():
                self._check()
                if time.monotonic() > deadline:
                    raise PluginError(f"the CD plugin of {name} did not serve in {timeout:g} s")
                time.sleep(0.05)

    def _check(self) -> None:
        if self.errors:
            raise PluginError("; ".join(self.errors))
        if self.controller is not None and self.controller.poll() is not None:
            raise PluginError(
                f"the controller exited with {self.controller.returncode}: "
                f"{(self.work / 'controller.log').read_text()[-3000:]}"
            )

    def domain_condition(self, name: str, kind: str) -> dict[str, Any] | None:
        try:
            domain = self.store.get_object(COMPUTE_DOMAIN, NAMESPACE, name)
        except NotFoundError:
            return None
        for condition in (domain.get("status") or {}).get("conditions") or []:
            if condition.get("type") == kind:
                return dict(condition)
        return None

    def apply_domain(self, name: str) -> None:
        self.store.create_object(
            COMPUTE_DOMAIN,
            {
                "apiVersion": "resource.nvidia.com/v1beta1",
                "kind": "ComputeDomain",
                "metadata": {"namespace": NAMESPACE, "name": name},
                "spec": {"channel": {"resourceClaimTemplate": {"name": f"{name}-channel"}}},
            },
        )

    def resource_version(self) -> int:
        text = (self.root / ".resource-version").read_text().strip()
        return int(text or 0)

    def close(self) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(timeout=10.0)
        for access in self.access.values():
            access.close()
        if self.controller is not None:
            self.controller.kill()
            self.controller.wait(timeout=10)
        kill_pids(processes_naming(self.work))  # the IMEX stand-ins (the hosts leave them)


_CD = "compute-domain.nvidia.com"


def _order(name: str) -> int:
    return int(name.rsplit("-", 1)[1])


@contextlib.contextmanager
def _cluster() -> Iterator[_Cluster]:
    work = Path(tempfile.mkdtemp(prefix="dra-gpu-bench-e11-", dir="/tmp"))
    cluster = _Cluster(work)
    try:
        yield cluster
    finally:
        cluster.close()
        shutil.rmtree(work, ignore_errors=True)


def _run_scale(*, nodes: int, cliques: int, pods_per_node: int) -> dict[str, Any]:
    conflicts = _Conflicts()
    per_clique = nodes // cliques
    with conflicts.installed(), _cluster() as cluster:
        began = time.monotonic()
        cluster.start_controller()
        for index in range(1, nodes + 1):
            cluster.add_node(index, clique=(index - 1) // per_clique)
        cluster.wait_serving()
        setup_s = time.monotonic() - began
        writes_before = cluster.resource_version()
        conflicts_before = conflicts.snapshot()
        domains = [f"rack-{k}" for k in range(cliques)]
        t0 = time.monotonic()
        for domain in domains:
            cluster.apply_domain(domain)
        pods = [
            channel_pod(
                NAMESPACE,
                f"rack-{(i - 1) // per_clique}-n{i}-p{j}",
                f"rack-{(i - 1) // per_clique}-channel",
                node=f"node-{i}",
            )
            for i in range(1, nodes + 1)
            for j in range(pods_per_node)
        ]
        done_at: list[float] = []
        running: list[RunningPod] = []

        def one(pod: dict[str, Any]) -> RunningPod:
            result = cluster.kubelet.run_pod(pod, timeout=POD_TIMEOUT_S)
            done_at.append(time.monotonic() - t0)
            return result

        with ThreadPoolExecutor(max_workers=len(pods)) as pool:
            running = list(pool.map(one, pods))
        channels = sum(
            1 for p in running if any(n["path"].endswith("/channel0") for n in p.device_nodes)
        )
        deadline = time.monotonic() + 60.0
        while not all(
            (c := cluster.domain_condition(d, "Ready")) is not None and c.get("status") == "True"
            for d in domains
        ):
            cluster._check()
            if time.monotonic() > deadline:
                raise PluginError(
                    "domains not Ready 60 s after the pods: "
                    + json.dumps({d: cluster.domain_condition(d, "Ready") for d in domains})
                )
            time.sleep(0.1)
        converged_s = time.monotonic() - t0
        writes = cluster.resource_version() - writes_before
        controller_log = (cluster.work / "controller.log").read_text(errors="replace")
        prepare = sorted(p.prepare_seconds for p in running)
        return {
            "nodes": nodes,
            "cliques": cliques,
            "pods": len(pods),
            "pods_with_channel": channels,
            "setup_s": round(setup_s, 2),
            "converged_s": round(converged_s, 2),
            "first_pod_s": round(min(done_at), 2),
            "last_pod_s": round(max(done_at), 2),
            "prepare_p50_s": round(prepare[len(prepare) // 2], 2),
            "prepare_max_s": round(prepare[-1], 2),
            "writes": writes,
            "writes_per_pod": round(writes / len(pods), 2),
            "conflicts": conflicts.count - sum(conflicts_before.values()),
            "conflicts_by_cause": {
                k: v - conflicts_before.get(k, 0)
                for k, v in conflicts.snapshot().items()
                if v > conflicts_before.get(k, 0)
            },
            "controller_conflict_lines": sum(
                1 for line in controller_log.splitlines() if "onflict" in line or "409" in line
            ),
        }


def _run_full_clique(*, nodes: int) -> dict[str, Any]:
    with _cluster() as cluster:
        cluster.start_controller()
        for index in range(1, nodes + 1):
            cluster.add_node(index, clique=0)
        cluster.wait_serving()
        cluster.apply_domain("full")
        outcomes: dict[str, RunningPod | str] = {}

        def one(index: int) -> None:
            pod = channel_pod(NAMESPACE, f"full-n{index}", "full-channel", node=f"node-{index}")
            try:
                outcomes[f"node-{index}"] = cluster.kubelet.run_pod(pod, timeout=30.0)
            except PodPlacementError as exc:
                outcomes[f"node-{index}"] = str(exc)

        with ThreadPoolExecutor(max_workers=nodes) as pool:
            list(pool.map(one, range(1, nodes + 1)))
        refused = {n: o for n, o in outcomes.items() if isinstance(o, str)}
        condition = cluster.domain_condition("full", "CliqueFull") or {}
        refused_node, refused_error = next(iter(refused.items()), ("none", "none"))
        return {
            "nodes": nodes,
            "ready_pods": sum(1 for o in outcomes.values() if not isinstance(o, str)),
            "refused": refused,
            "refused_node": refused_node,
            "refused_error": refused_error.rsplit("last error: ", 1)[-1],
            "condition": f"{condition.get('type')}={condition.get('status')}: "
            f"{condition.get('message')}",
        }
