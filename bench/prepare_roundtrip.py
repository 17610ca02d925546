"""How fast the real plugin prepares and unprepares a claim, as the kubelet sees it.

Pod start-up waits for NodePrepareResources and pod deletion for
NodeUnprepareResources, so their latency is what a user of the driver
notices. This benchmark starts the real `dra-gpu kubelet-plugin` process on a
simulated dgx-h100 node (local directory cluster), registers like the
kubelet, stores one allocated whole-GPU claim, and then runs cycles of
NodePrepareResources + NodeUnprepareResources over the v1 DRA socket. Every
call does the full transaction: fetch the claim, checkpoint PrepareStarted,
write the CDI spec, checkpoint PrepareCompleted (each write fsync'd), and
the reverse. Each call is timed with `time.perf_counter_ns` on the client
side, after a warm-up; the plugin's peak RSS (VmHWM) is read at the end.
"""

from __future__ import annotations

import time

import grpc

from bench import BenchOptions, BenchResult, summarize_ns
from dra_driver.errors import PluginError
from kubelet_plugin.service import ClaimRef
from tests.fakes import PluginProcess, make_allocated_claim

NAME = "prepare"
DESCRIPTION = "NodePrepareResources + NodeUnprepareResources round trips over the v1 socket"
SHAPE = "dgx-h100"
DEFAULT_CYCLES = 1000
DEFAULT_WARMUP = 50
CLAIM = ClaimRef("bench", "6e1c7b2a-0d4f-4a8e-9b3c-5f2e1d0a9c87", "one-gpu")


def run(options: BenchOptions) -> BenchResult:
    """Run the benchmark; raises PluginError if any call fails."""
    cycles = options.cycles or DEFAULT_CYCLES
    warmup = DEFAULT_WARMUP if options.warmup is None else options.warmup
    # A long publish interval keeps the slice re-sync out of the measured window.
    with PluginProcess(shape=SHAPE, prefix="dra-gpu-bench-", publish_interval=3600) as plugin:
        version = plugin.client.register()
        plugin.store_claim(
            make_allocated_claim(
                CLAIM.name, CLAIM.namespace, CLAIM.uid, [("gpu", "gpu-0")], pool=plugin.node_name
            )
        )
        for _ in range(warmup):
            _cycle(plugin)
        rss_after_warmup = plugin.rss_peak_kib()

        prepare_ns: list[int] = []
        unprepare_ns: list[int] = []
        started = time.perf_counter_ns()
        for _ in range(cycles):
            prepared, unprepared = _cycle(plugin)
            prepare_ns.append(prepared)
            unprepare_ns.append(unprepared)
        elapsed_s = (time.perf_counter_ns() - started) / 1e9
        rss_peak = plugin.rss_peak_kib()

    cycle_ns = [p + u for p, u in zip(prepare_ns, unprepare_ns, strict=True)]
    rate = cycles / elapsed_s
    return BenchResult(
        name=NAME,
        title=f"{NAME}: {DESCRIPTION} ({SHAPE}, one whole-GPU claim, DRA API {version})",
        headline=[
            f"{cycles} cycles after {warmup} warm-up cycles in {elapsed_s:.1f} s: "
            f"{rate:.1f} cycles/s",
            f"plugin peak RSS (VmHWM): {rss_peak / 1024:.1f} MiB "
            f"({rss_after_warmup / 1024:.1f} MiB after warm-up)",
        ],
        latencies={
            "prepare": summarize_ns(prepare_ns),
            "unprepare": summarize_ns(unprepare_ns),
            "prepare+unprepare": summarize_ns(cycle_ns),
        },
        data={
            "shape": SHAPE,
            "api_version": version,
            "grpc_version": grpc.__version__,
            "cycles": cycles,
            "warmup_cycles": warmup,
            "elapsed_s": round(elapsed_s, 3),
            "cycles_per_s": round(rate, 1),
            "plugin_rss_peak_kib": rss_peak,
            "plugin_rss_peak_after_warmup_kib": rss_after_warmup,
        },
    )


def _cycle(plugin: PluginProcess) -> tuple[int, int]:
    """One Prepare and one Unprepare; their durations in nanoseconds."""
    t0 = time.perf_counter_ns()
    prepared = plugin.client.prepare([CLAIM])
    t1 = time.perf_counter_ns()
    unprepared = plugin.client.unprepare([CLAIM])
    t2 = time.perf_counter_ns()
    if prepared[CLAIM.uid].error or not prepared[CLAIM.uid].devices:
        raise PluginError(f"prepare of {CLAIM} failed: {prepared[CLAIM.uid].error}")
    if unprepared[CLAIM.uid].error:
        raise PluginError(f"unprepare of {CLAIM} failed: {unprepared[CLAIM.uid].error}")
    return t1 - t0, t2 - t1
