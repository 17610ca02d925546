"""E11: how fast 256 pods on 64 GB200 nodes get their IMEX channels, and at what API cost.

NVIDIA's ComputeDomain driver was reported to take about 8 minutes to start a
256-pod job, its daemons fighting over one shared object with 409 conflicts
(computedomain.md §7.3, #816). Here every object has one writer
(`dra_driver.compute_domain.membership`), so convergence should take seconds
and conflicts should stay near zero. This benchmark measures both.

What runs, and how (64 nodes times three daemons do not fit two cores as
processes, so the per-node daemons run as threads of a few worker processes,
each the product's own code with its own store client, over real files,
sockets and processes):

- the store: one `LocalCluster` directory, as in the demo;
- the controller: `dra-gpu compute-domain-controller`, a process of its own;
- per node, in one of four worker processes of 16 nodes each
  (`bench.compute_domain_nodes`): the CD kubelet plugin
  (`kubelet_plugin.compute_domain.main.run`: its gRPC DRA socket, slice
  publisher, member watch, fabric checks, checkpoint, CDI specs under the
  node's own directories) and the IMEX host (`kubelet_plugin.imex_host`'s
  `ImexHost` and `serve`, as `imex_host_main.run` wires them), each in a thread;
- per node the IMEX daemon: the `nvidia-imex` stand-in of the node's simulated
  driver root, a real process started by that node's IMEX host, bound to the
  node's loopback address `127.0.1.<k>` and connected over TCP to its peers
  (its SIGUSR1 rate limit 4 s instead of 5 s: see `STANDIN_SIGUSR1_MIN_S`); the
  IMEX host's readiness questions are asked in-process over the daemon's TCP
  command port instead of through a `nvidia-imex-ctl` process
  (`bench.compute_domain_nodes`);
- the pods: the scheduler and kubelet stand-in
  (`dra_driver.composition.compute_domain_kubelet`), one thread per pod:
  claim from the template, allocation with the scheduler's allocator (1.36
  gates: several pods of a domain share a node's channel-0), Prepare over the
  node's socket, retried while the plugin says it waits.

Two runs. (1) 64 nodes in 4 cliques (four NVL72 racks of 16 trays), one
ComputeDomain per clique, 4 pods per node (256 pods): the time from applying
the domains until every pod has its channel and every domain is Ready, the
API writes (the store's resourceVersion counter: every create, update and
delete of any object) and the 409s every writer but the controller met (a
stale resourceVersion, or a create of a name that exists), counted in each
process at the store client; the controller's log is searched for them. (2) 19
nodes in one clique and one domain with a pod on each: 18 nodes get an index
and a channel, the 19th a clear error (NVIDIA's limit of 18 nodes per IMEX
domain), shown as the pod's Prepare error and the domain's condition.
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
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from bench import BenchOptions, BenchResult
from bench.compute_domain_nodes import ConflictCounter
from dra_driver.composition.child_process import popen
from dra_driver.composition.compute_domain_cluster import (
    DRIVER_NAMESPACE,
    channel_pod,
    kill_pids,
    processes_naming,
)
from dra_driver.composition.compute_domain_kubelet import (
    NodeAccess,
    PodPlacementError,
    RunningPod,
    SchedulerKubelet,
)
from dra_driver.compute_domain import manifests
from dra_driver.errors import NotFoundError, PluginError
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
KEEP_ENV = "DRA_GPU_BENCH_KEEP"
"""Set: the run's directory (store, node directories, IMEX logs) is kept for a look."""
SIGUSR1_ENV = "IMEX_STANDIN_SIGUSR1_MIN_INTERVAL"
STANDIN_SIGUSR1_MIN_S = 4.0
"""The stand-in's SIGUSR1 rate limit (NVIDIA's, and the stand-in's default, is 5 s), a
little under the IMEX host's own pacing of its SIGUSR1s (5 s): at equal values a signal
the host sends 5 s after the last may reach a loaded daemon 4.9 s after it handled the
last one, and the daemon ignores it; the host believes the peers reloaded and a peer stays
unresolved (seen at 64 nodes: "node-23 does not see node-22 (I) connected" for minutes)."""


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
            f"409s met by the node daemons and the kubelet stand-in: {scale['conflicts']} "
            f"({', '.join(f'{k}: {v}' for k, v in scale['conflicts_by_cause'].items()) or '-'}); "
            f"controller log lines about conflicts: {scale['controller_conflict_lines']}",
            f"19 nodes in one clique: {full['ready_pods']} pods got a channel; the 19th "
            f"({full['refused_node']}): {full['refused_error']}",
            f"domain condition: {full['condition']}",
            f"setup (64 nodes' daemons started and serving): {scale['setup_s']:.1f} s",
        ],
        data={"scale": scale, "full_clique": full},
    )


# -- a cluster of in-process nodes ---------------------------------------------------------


class _Cluster:
    """The store, the controller process and per node two daemon threads (module docstring)."""

    def __init__(self, work: Path) -> None:
        self.work = work
        self.root = work / "cluster"
        self.store = LocalCluster(self.root)
        for device_class in manifests.device_classes():
            self.store.put_device_class(device_class)
        self.workers: list[Any] = []
        self.worker_conflicts: dict[str, int] = {}
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

    def start_nodes(self, first: int, count: int, clique: int) -> None:
        """Nodes `node-<first>` .. in clique `clique`: a worker process runs their daemons
        (`bench.compute_domain_nodes`); the kubelet stand-in gets their sockets."""
        log = (self.work / f"nodes-{first}.log").open("ab")
        self.workers.append(
            popen(
                [
                    sys.executable,
                    "-m",
                    "bench.compute_domain_nodes",
                    f"--root={self.root}",
                    f"--work={self.work}",
                    f"--first={first}",
                    f"--count={count}",
                    f"--clique={clique}",
                    f"--fabric-check-interval={FABRIC_CHECK_S:g}",
                    f"--prepare-wait={PREPARE_WAIT_S:g}",
                    f"--imex-poll={IMEX_POLL_S:g}",
                    f"--imex-ready-poll={IMEX_READY_POLL_S:g}",
                ],
                {**os.environ, SIGUSR1_ENV: f"{STANDIN_SIGUSR1_MIN_S:g}"},
                log.fileno(),
            )
        )
        log.close()
        for index in range(first, first + count):
            name = f"node-{index}"
            node_dir = self.work / "nodes" / name
            self.access[name] = NodeAccess(
                name, node_dir / "kubelet", node_dir / "cdi", timeout=45.0
            )

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
        for worker in self.workers:
            if worker.poll() is not None:
                logs = sorted(self.work.glob("nodes-*.log"))
                raise PluginError(
                    f"a node worker exited with {worker.returncode}: "
                    + " | ".join(p.read_text(errors="replace")[-2000:] for p in logs)
                )
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
        for worker in self.workers:
            if worker.poll() is None:
                worker.send_signal(signal.SIGTERM)
        for worker in self.workers:
            try:
                worker.wait(timeout=20)
            except subprocess.TimeoutExpired:
                worker.kill()
                worker.wait(timeout=10)
        for report in self.work.glob("conflicts-*.json"):
            for cause, count in json.loads(report.read_text()).items():
                self.worker_conflicts[cause] = self.worker_conflicts.get(cause, 0) + count
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
        if not os.environ.get(KEEP_ENV):
            shutil.rmtree(work, ignore_errors=True)


def _run_scale(*, nodes: int, cliques: int, pods_per_node: int) -> dict[str, Any]:
    conflicts = ConflictCounter()
    per_clique = nodes // cliques
    with conflicts.installed(), _cluster() as cluster:
        began = time.monotonic()
        cluster.start_controller()
        for clique in range(cliques):
            cluster.start_nodes(clique * per_clique + 1, per_clique, clique)
        cluster.wait_serving()
        setup_s = time.monotonic() - began
        writes_before = cluster.resource_version()
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
        result: dict[str, Any] = {
            "nodes": nodes,
            "cliques": cliques,
            "pods": len(pods),
            "pods_with_channel": channels,
            "setup_s": round(setup_s, 2),
            "converged_s": round(converged_s, 2),
            "first_pod_s": round(min(done_at), 2),
            "last_pod_s": round(max(done_at), 2),
            "prepare_p50_s": round(prepare[len(prepare) // 2], 2),
            "scheduled_p50_s": round(
                sorted(p.scheduled_seconds for p in running)[len(running) // 2], 2
            ),
            "scheduled_max_s": round(max(p.scheduled_seconds for p in running), 2),
            "prepare_max_s": round(prepare[-1], 2),
            "writes": writes,
            "writes_per_pod": round(writes / len(pods), 2),
            "slowest_pods": [
                {
                    "pod": p.key,
                    "node": p.node,
                    "prepare_s": round(p.prepare_seconds, 2),
                    "prepare_calls": p.prepare_attempts,
                    "waited_for": p.errors[-1] if p.errors else "",
                }
                for p in sorted(running, key=lambda p: -p.prepare_seconds)[:3]
            ],
            "pods_done_by_s": {
                f"{q}%": round(sorted(done_at)[max(0, len(done_at) * q // 100 - 1)], 2)
                for q in (25, 50, 75, 90, 100)
            },
            "controller_conflict_lines": sum(
                1 for line in controller_log.splitlines() if "onflict" in line or "409" in line
            ),
        }
    # The workers report theirs when they stop (the whole run, setup included).
    by_cause = conflicts.snapshot()
    for cause, count in cluster.worker_conflicts.items():
        by_cause[cause] = by_cause.get(cause, 0) + count
    result["conflicts"] = sum(by_cause.values())
    result["conflicts_by_cause"] = by_cause
    return result


def _run_full_clique(*, nodes: int) -> dict[str, Any]:
    with _cluster() as cluster:
        cluster.start_controller()
        for first in range(1, nodes + 1, 10):
            cluster.start_nodes(first, min(10, nodes + 1 - first), clique=0)
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
