"""How long does one usage sampling pass take on a busy node? (`--usage-interval`)

The plugin samples GPU use per claim every 10 s by default; a pass must stay
cheap however many claims the node holds. This benchmark builds a simulated
dgx-h100 with a state file and its fake `/proc` (as the plugin sees it),
`HELD` prepared claims (shares of the 8 GPUs, as the scheduler allocates
them with `--consumable-shares=unlimited`), each reserved by a pod that runs
a CUDA process (`SimHardware.run_workload`: NVML lists it, its
`/proc/<pid>/cgroup` names the pod), and times `UsageSampler.sample`: the
NVML calls per device, the cgroup reads of new pids and the attribution of
every process to its claim. The first pass reads every pid's cgroup file
(cold); later passes find the pids cached. The goal: a warm pass within
50 ms.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path
from types import MappingProxyType

from bench import BenchOptions, BenchResult, summarize_ns
from dra_driver.claims.checkpoint import Checkpoint, ClaimEntry, ClaimState, PreparedDevice
from dra_driver.composition.hardware import open_simulated
from dra_driver.errors import PluginError
from dra_driver.hardware.simulated.node_files import sim_proc_root
from dra_driver.node.consumable_shares import ConsumableShares
from dra_driver.node.devices import build_devices
from dra_driver.node.inventory import discover
from kubelet_plugin.usage_sampler import ClaimPods, UsageSampler

NAME = "usage-sampling"
DESCRIPTION = "one per-claim GPU usage sampling pass over 400 prepared claims with running pods"
SHAPE = "dgx-h100"
HELD = 400
DEFAULT_CYCLES = 200
DEFAULT_WARMUP = 5
GOAL_MS = 50.0


def run(options: BenchOptions) -> BenchResult:
    cycles = options.cycles or DEFAULT_CYCLES
    warmup = DEFAULT_WARMUP if options.warmup is None else options.warmup
    work = Path(tempfile.mkdtemp(prefix="dra-gpu-bench-usage-", dir="/tmp"))
    try:
        node = open_simulated(SHAPE, sim_state=work / "sim-state.json")
        hardware, sim = node.hardware, node.sim
        devices = build_devices(
            discover(hardware.nvml), consumable_shares=ConsumableShares("unlimited")
        )
        gpus = [d for d in devices if d.kind == "gpu"]
        claim_pods = ClaimPods()
        entries = {}
        for i in range(HELD):
            uid = f"be1d0000-0000-4000-8000-{i:012d}"
            pod = f"90d00000-0000-4000-8000-{i:012d}"
            device = gpus[i % len(gpus)]
            entries[uid] = ClaimEntry(
                uid=uid,
                namespace="bench",
                name=f"held-{i}",
                state=ClaimState.PrepareCompleted,
                devices=(
                    PreparedDevice(
                        request_names=("gpu",),
                        pool="sim-node",
                        device=device.name,
                        cdi_device_ids=(),
                        share_id=f"5ba4e000-0000-4000-8000-{i:012d}",
                        consumed_capacity=MappingProxyType({"memory": "1Gi"}),
                    ),
                ),
            )
            claim_pods.record(
                {
                    "metadata": {"uid": uid},
                    "status": {
                        "reservedFor": [{"resource": "pods", "name": f"held-{i}-0", "uid": pod}]
                    },
                }
            )
            sim.run_workload(device.gpu.uuid, pod, sm_percent=i % 3, memory_bytes=2**30 // 8)
        checkpoint = Checkpoint(boot_id=hardware.host.boot_id(), claims=entries)
        sampler = UsageSampler(
            hardware.nvml,
            sim_proc_root(work / "sim-state.json"),
            prepared=lambda: checkpoint,
            devices=lambda: devices,
            claim_pods=claim_pods,
        )
        started = time.perf_counter_ns()
        first = sampler.sample()
        cold_ns = time.perf_counter_ns() - started
        counted = sum(1 for u in first.claims for p in u.pods if p.processes)
        if len(first.claims) != HELD or counted != HELD:
            raise PluginError(
                f"a pass saw {len(first.claims)} claims, {counted} with their pod's process; "
                f"expected {HELD} of each"
            )
        for _ in range(warmup):
            sampler.sample()
        warm_ns = []
        for _ in range(cycles):
            started = time.perf_counter_ns()
            sampler.sample()
            warm_ns.append(time.perf_counter_ns() - started)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    latencies = {"warm pass": summarize_ns(warm_ns), "first pass (cold)": summarize_ns([cold_ns])}
    p50 = latencies["warm pass"]["p50"]
    verdict = "within" if p50 <= GOAL_MS else "above"
    return BenchResult(
        name=NAME,
        title=f"{NAME}: {DESCRIPTION} ({SHAPE}, simulated NVML over its state file)",
        headline=[
            f"p50 warm pass over {HELD} claims: {p50:.1f} ms "
            f"({verdict} the goal of {GOAL_MS:g} ms)",
            f"first pass, reading {HELD} /proc/<pid>/cgroup files: {cold_ns / 1e6:.1f} ms; "
            f"{cycles} warm passes after {warmup} warm-up passes",
        ],
        latencies=latencies,
        data={
            "shape": SHAPE,
            "claims": HELD,
            "cycles": cycles,
            "warmup": warmup,
            "goal_ms": GOAL_MS,
            "warm_p50_ms": p50,
            "cold_ms": latencies["first pass (cold)"]["p50"],
        },
    )
