"""Does Prepare get slower as the node holds more claims? (the checkpoint at scale)

A node may hold hundreds of shared claims. This benchmark runs two real
`dra-gpu kubelet-plugin` processes on simulated dgx-h100 nodes: one holds
no claim, the other first prepares `HELD` shared claims on GPUs 1-7
(both run with `--consumable-shares=unlimited`; each held claim's result
carries a `shareID` and `consumedCapacity`, as the scheduler writes them)
and keeps them prepared. Then it measures
NodePrepareResources + NodeUnprepareResources round trips of one
whole-GPU claim on gpu-0 on both plugins, alternating cycle by cycle so
both see the same machine load. The headline is the ratio of the p50 round
trips, held vs empty; the goal is at most 1.2.
"""

from __future__ import annotations

import time

from bench import BenchOptions, BenchResult, real_plugin, summarize_ns
from bench.prepare_roundtrip import CLAIM, cycle
from dra_driver.errors import PluginError
from kubelet_plugin.service import ClaimRef
from tests.fakes import PluginProcess, make_allocated_claim

NAME = "held-claims"
DESCRIPTION = "prepare+unprepare round trips with 0 and with 400 shared claims held on the node"
SHAPE = "dgx-h100"
CONSUMABLE_SHARES = "--consumable-shares=unlimited"
HELD = 400
DEFAULT_CYCLES = 300
DEFAULT_WARMUP = 20
GOAL_RATIO = 1.2
BATCH = 50
"""Held claims are prepared this many per kubelet call, as a kubelet starting many pods would."""


def run(options: BenchOptions) -> BenchResult:
    """Run the benchmark; raises PluginError if any call fails."""
    cycles = options.cycles or DEFAULT_CYCLES
    warmup = DEFAULT_WARMUP if options.warmup is None else options.warmup
    with (
        _plugin("dra-gpu-bench-empty-") as empty,
        _plugin("dra-gpu-bench-held-") as held,
    ):
        for plugin in (empty, held):
            plugin.client.register()
            plugin.store_claim(
                make_allocated_claim(
                    CLAIM.name,
                    CLAIM.namespace,
                    CLAIM.uid,
                    [("gpu", "gpu-0")],
                    pool=plugin.node_name,
                )
            )
        setup_started = time.perf_counter()
        _hold_claims(held)
        setup_s = time.perf_counter() - setup_started
        checkpoint = held.checkpoint()
        held_files = len(held.checkpoint_files())
        if checkpoint is None or len(checkpoint.claims) != HELD:
            raise PluginError(f"expected {HELD} held claims in the checkpoint")

        for _ in range(warmup):
            cycle(empty.client)
            cycle(held.client)
        empty_ns: list[int] = []
        held_ns: list[int] = []
        for _ in range(cycles):
            empty_ns.append(sum(cycle(empty.client)))
            held_ns.append(sum(cycle(held.client)))

    latencies = {
        "0 claims held": summarize_ns(empty_ns),
        f"{HELD} claims held": summarize_ns(held_ns),
    }
    ratio = latencies[f"{HELD} claims held"]["p50"] / latencies["0 claims held"]["p50"]
    verdict = "within" if ratio <= GOAL_RATIO else "above"
    return BenchResult(
        name=NAME,
        title=f"{NAME}: {DESCRIPTION} ({SHAPE}, one whole-GPU claim, DRA API v1)",
        headline=[
            f"p50 round trip with {HELD} held vs none: {ratio:.2f}x ({verdict} the goal of "
            f"{GOAL_RATIO}x)",
            f"{cycles} cycles on each plugin, alternating, after {warmup} warm-up cycles; "
            f"{HELD} claims ({held_files} checkpoint files) prepared in {setup_s:.1f} s",
        ],
        latencies=latencies,
        data={
            "shape": SHAPE,
            "held_claims": HELD,
            "cycles": cycles,
            "warmup_cycles": warmup,
            "p50_ratio_held_vs_empty": round(ratio, 3),
            "goal_ratio": GOAL_RATIO,
            "setup_s": round(setup_s, 2),
        },
    )


def _plugin(prefix: str) -> PluginProcess:
    return real_plugin(
        shape=SHAPE,
        prefix=prefix,
        extra_args=[CONSUMABLE_SHARES],
    )


def _hold_claims(plugin: PluginProcess) -> None:
    """Store and prepare `HELD` shared claims (one share each) on gpu-1..gpu-7."""
    refs: list[ClaimRef] = []
    for i in range(HELD):
        ref = ClaimRef("bench", f"be1d0000-0000-4000-8000-{i:012d}", f"held-{i}")
        device = f"gpu-{1 + i % 7}"
        plugin.store_claim(
            make_allocated_claim(
                ref.name,
                ref.namespace,
                ref.uid,
                [
                    {
                        "request": "gpu",
                        "device": device,
                        "shareID": f"5ba4e000-0000-4000-8000-{i:012d}",
                        "consumedCapacity": {"memory": "0"},
                    }
                ],
                pool=plugin.node_name,
            )
        )
        refs.append(ref)
    for start in range(0, HELD, BATCH):
        batch = refs[start : start + BATCH]
        answers = plugin.client.prepare(batch)
        failed = {uid: a.error for uid, a in answers.items() if a.error or not a.devices}
        if failed:
            raise PluginError(f"preparing held claims failed: {failed}")
