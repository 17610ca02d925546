"""How long a pod waits in NodePrepareResources for its ComputeDomain channel.

A channel claim's Prepare is where a multi-node job's pods wait: the first
claim of a domain on a node creates the node's ComputeDomainMember and waits
until the node's IMEX daemon is Ready (the IMEX host starts it once the
controller gave the node an index); later claims of the same domain on that
node find the member Ready and only write their CDI spec and checkpoint.

This benchmark runs one simulated gb200-node with the real programs as
processes (`dra_driver.composition.compute_domain_cluster`): the CD kubelet
plugin, the IMEX host, the controller, the nvidia-imex stand-in. It applies
a ComputeDomain, runs a first pod through the scheduler/kubelet stand-in (its
Prepare is the "first claim" row: member created, index given, IMEX started
and Ready), then, with that pod kept running, cycles claims of the same
domain on the node: store an allocated channel claim (channel-0 of the node,
as the scheduler writes it), NodePrepareResources and
NodeUnprepareResources over the plugin's v1 socket, each call timed on the
client side with `time.perf_counter_ns`. `--cycles` (default 200) and
`--warmup` (default 20) apply to the cycles.
"""

from __future__ import annotations

import copy
import time
import uuid
from typing import Any

from bench import BenchOptions, BenchResult, percentile, summarize_ns
from dra_driver.composition.child_process import popen
from dra_driver.composition.compute_domain_cluster import (
    ClusterTiming,
    ComputeDomainCluster,
    channel_pod,
)
from dra_driver.errors import PluginError
from kubelet_plugin.service import ClaimRef

NAME = "channel-prepare"
DESCRIPTION = (
    "NodePrepareResources of ComputeDomain channel claims over the CD plugin's socket: the "
    "first claim of a domain on a node (waits for IMEX), then claims of a Ready domain"
)
DEFAULT_CYCLES = 200
DEFAULT_WARMUP = 20
NAMESPACE = "bench"
TIMING = ClusterTiming(
    fabric_check_interval=1.0, prepare_wait=30.0, imex_poll=0.1, imex_ready_poll=1.0
)


def run(options: BenchOptions) -> BenchResult:
    cycles = options.cycles or DEFAULT_CYCLES
    warmup = DEFAULT_WARMUP if options.warmup is None else options.warmup
    with ComputeDomainCluster(nodes=1, spawn=popen, timing=TIMING, prefix="dra-gpu-bench-cd-") as c:
        began = time.monotonic()
        c.start()
        started_s = time.monotonic() - began
        c.apply_compute_domain(NAMESPACE, "bench-domain", "bench-channel")
        first = c.run_pod(channel_pod(NAMESPACE, "anchor", "bench-channel", node="node-1"))
        node = c.nodes["node-1"]
        client = node.access.client()
        template = first.claims[0].claim
        prepare_ns: list[int] = []
        unprepare_ns: list[int] = []
        for i in range(warmup + cycles):
            claim = _copy_claim(template, f"cycle-{i}")
            stored = c.store.put_resource_claim(_without_status(claim))
            stored["status"] = claim["status"]
            c.store.update_resource_claim_status(stored)
            ref = ClaimRef(NAMESPACE, claim["metadata"]["uid"], claim["metadata"]["name"])
            t0 = time.perf_counter_ns()
            answer = client.prepare([ref])[ref.uid]
            t1 = time.perf_counter_ns()
            if answer.error:
                raise PluginError(f"Prepare of {ref}: {answer.error}")
            undone = client.unprepare([ref])[ref.uid]
            t2 = time.perf_counter_ns()
            if undone.error:
                raise PluginError(f"Unprepare of {ref}: {undone.error}")
            c.store.delete_resource_claim(NAMESPACE, ref.name)
            if i >= warmup:
                prepare_ns.append(t1 - t0)
                unprepare_ns.append(t2 - t1)
        c.delete_pod(NAMESPACE, "anchor")
    ordered = sorted(prepare_ns)
    p95 = percentile(ordered, 95) / 1e6
    latencies = {
        "prepare (domain Ready on the node)": summarize_ns(prepare_ns),
        "unprepare": summarize_ns(unprepare_ns),
    }
    first_ms = first.prepare_seconds * 1000
    return BenchResult(
        name=NAME,
        title=f"Channel claim Prepare on one simulated gb200-node ({cycles} cycles, "
        f"{warmup} warm-up)",
        headline=[
            f"first claim of the domain on the node (member, index, IMEX start, READY): "
            f"{first_ms:.0f} ms over {first.prepare_attempts} Prepare call(s)",
            f"later claims: p50 {latencies['prepare (domain Ready on the node)']['p50']:.2f} ms, "
            f"p95 {p95:.2f} ms",
            f"cluster start (controller, CD plugin, IMEX host processes): {started_s:.1f} s",
        ],
        latencies=latencies,
        data={
            "cycles": cycles,
            "warmup": warmup,
            "first_claim_ms": round(first_ms, 1),
            "first_claim_calls": first.prepare_attempts,
            "prepare_p95_ms": round(p95, 3),
            "cluster_start_s": round(started_s, 2),
        },
    )


def _copy_claim(claim: dict[str, Any], name: str) -> dict[str, Any]:
    """Another claim of the domain with the same allocation (channel-0 of the node), as the
    scheduler writes it for a second pod where channel-0 allows multiple allocations."""
    out = copy.deepcopy(claim)
    meta = out["metadata"]
    out["metadata"] = {
        "namespace": meta["namespace"],
        "name": name,
        "uid": str(uuid.uuid4()),
        "labels": meta.get("labels") or {},
    }
    out["status"] = {"allocation": claim["status"]["allocation"]}
    return out


def _without_status(claim: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in claim.items() if k != "status"}
