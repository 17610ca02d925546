"""Prepare latency with 20 open device-health streams, against none.

A kubelet holds one `NodeWatchResources` stream per plugin instance open
for the plugin's whole life, and a hostile or buggy client may open many.
Each open stream holds a gRPC thread of the DRA socket; before the streams
got their own threads (`kubelet_plugin.server`: capped, on top of the
threads that serve Prepare), 20 streams left NodePrepareResources waiting
for more than 8 s. This benchmark runs the real plugin on a simulated
dgx-h100 node with health checks on, and alternates blocks of
Prepare + Unprepare cycles of a whole-GPU claim without streams and with
`STREAMS` streams open (each read by a thread, as the kubelet does), so
both see the same machine load. The headline is the ratio of the p50
Prepare latencies; the goal is at most 1.2.
"""

from __future__ import annotations

import threading
import time

import grpc

from bench import BenchOptions, BenchResult, real_plugin, summarize_ns
from bench.prepare_roundtrip import cycle
from dra_driver.errors import PluginError
from kubelet_plugin.gen.dra_health.v1alpha1 import api_pb2 as health_pb2
from kubelet_plugin.gen.dra_health.v1alpha1 import api_pb2_grpc as health_grpc
from kubelet_plugin.service import ClaimRef
from tests.fakes import PluginProcess, make_allocated_claim

NAME = "health-streams"
DESCRIPTION = "Prepare latency with 20 open NodeWatchResources streams, against none"
GOAL_RATIO = 1.2
SHAPE = "dgx-h100"
STREAMS = 20
DEFAULT_CYCLES = 300
DEFAULT_WARMUP = 30
BLOCK = 25
CLAIM = ClaimRef("bench", "4ea1700b-5b1e-4c2a-9d3f-6a7b8c9d0e1f", "one-gpu")


class _Streams:
    """`count` health streams on the plugin's DRA socket, each drained by a thread."""

    def __init__(self, plugin: PluginProcess, count: int) -> None:
        self._channel = grpc.insecure_channel(f"unix:{plugin.dra_socket}")
        stub = health_grpc.DRAResourceHealthStub(self._channel)
        self._calls = [
            stub.NodeWatchResources(health_pb2.NodeWatchResourcesRequest()) for _ in range(count)
        ]
        self.answered = [threading.Event() for _ in self._calls]
        self._threads = [
            threading.Thread(target=self._drain, args=(i,), daemon=True)
            for i in range(len(self._calls))
        ]
        for thread in self._threads:
            thread.start()
        for event in self.answered:
            if not event.wait(30):
                raise PluginError("a health stream got no first answer in 30 s")

    def _drain(self, index: int) -> None:
        try:
            for _ in self._calls[index]:
                self.answered[index].set()
        except grpc.RpcError as exc:
            if exc.code() != grpc.StatusCode.CANCELLED:
                raise

    def close(self) -> None:
        for call in self._calls:
            call.cancel()
        for thread in self._threads:
            thread.join(10)
        self._channel.close()


def run(options: BenchOptions) -> BenchResult:
    cycles = options.cycles or DEFAULT_CYCLES
    warmup = DEFAULT_WARMUP if options.warmup is None else options.warmup
    with real_plugin(
        shape=SHAPE,
        prefix="dra-gpu-bench-hs-",
    ) as plugin:
        plugin.client.register()
        plugin.store_claim(
            make_allocated_claim(
                CLAIM.name, CLAIM.namespace, CLAIM.uid, [("gpu", "gpu-0")], pool=plugin.node_name
            )
        )
        for _ in range(warmup):
            cycle(plugin.client, CLAIM)
        quiet: list[int] = []
        busy: list[int] = []
        started = time.perf_counter()
        while len(busy) < cycles:
            for _ in range(min(BLOCK, cycles - len(quiet))):
                quiet.append(cycle(plugin.client, CLAIM)[0])
            streams = _Streams(plugin, STREAMS)
            try:
                for _ in range(min(BLOCK, cycles - len(busy))):
                    busy.append(cycle(plugin.client, CLAIM)[0])
            finally:
                streams.close()
        elapsed = time.perf_counter() - started
    latencies = {
        "prepare, no stream": summarize_ns(quiet),
        f"prepare, {STREAMS} streams open": summarize_ns(busy),
    }
    ratio = (
        latencies[f"prepare, {STREAMS} streams open"]["p50"]
        / latencies["prepare, no stream"]["p50"]
    )
    verdict = "within" if ratio <= GOAL_RATIO else "above"
    return BenchResult(
        name=NAME,
        title=f"{NAME}: {DESCRIPTION} ({SHAPE}, one whole-GPU claim)",
        headline=[
            f"p50 Prepare with {STREAMS} streams vs none: {ratio:.2f}x ({verdict} the goal of "
            f"{GOAL_RATIO}x)",
            f"{cycles} cycles of each, in alternating blocks of {BLOCK}, after {warmup} "
            f"warm-up cycles, in {elapsed:.1f} s",
        ],
        latencies=latencies,
        data={
            "shape": SHAPE,
            "streams": STREAMS,
            "cycles": cycles,
            "block": BLOCK,
            "p50_ratio": round(ratio, 3),
            "goal_ratio": GOAL_RATIO,
        },
    )
