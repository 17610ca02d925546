"""How fast the real plugin prepares and unprepares a claim, against a minimal plugin.

Pod start-up waits for NodePrepareResources and pod deletion for
NodeUnprepareResources, so their latency is what a user of the driver
notices. This benchmark starts the real `dra-gpu kubelet-plugin` process on a
simulated dgx-h100 node (local directory cluster), registers like the
kubelet, stores one allocated whole-GPU claim, and then runs cycles of
NodePrepareResources + NodeUnprepareResources over the v1 DRA socket. Every
call does the full transaction: fetch the claim, plan it, checkpoint
PrepareStarted, write the claim's CDI spec and checkpoint PrepareCompleted,
and the reverse.

Twice, on two driver roots: the simulated node's own (its fake 570 root),
and a 570-series install as Ubuntu lays it out on a host
(`tests/dra_driver/container/driver_roots.py`: the compute, utility, video
and graphics libraries, 32-bit libraries and an older driver's leftovers
that must not be mounted, the Vulkan, EGL, OpenCL and X.Org config files,
binaries, GSP firmware, every nvcdi hook), read through
`--container-driver-root` as on a real node. The driver's files are in the
node's base spec, written once; a claim's cost must not grow with them.

The baseline is `bench.minimal_plugin`, a separate process that does only
the file work (claim read, CDI spec write, checkpoint write and fsync)
behind a gRPC server on a Unix socket, reading the same claim and writing
the same claim spec content. Cycles of the two alternate, so both see the
same machine load; the headline is the ratio of their p50 round trips. Each
call is timed with `time.perf_counter_ns` on the client side, after a
warm-up; the plugin's peak RSS (VmHWM) is read at the end.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import grpc

from bench import BenchOptions, BenchResult, real_plugin, summarize_ns
from bench.minimal_plugin_process import MinimalPluginProcess
from dra_driver.container.cdi_store import CdiStore
from dra_driver.errors import PluginError
from dra_driver.hardware.simulated.shapes import load_shape
from kubelet_plugin.kubelet_client import KubeletClient
from kubelet_plugin.service import ClaimRef
from tests.dra_driver.container.driver_roots import build_root
from tests.fakes import PluginProcess, make_allocated_claim

NAME = "prepare"
DESCRIPTION = (
    "NodePrepareResources + NodeUnprepareResources round trips over the v1 socket, "
    "against a minimal plugin (claim read, one CDI spec, a fsync'd checkpoint)"
)
GOAL_RATIO = 1.2
GOAL_RATIO_HOST_ROOT = 1.3
SHAPE = "dgx-h100"
DEFAULT_CYCLES = 500
DEFAULT_WARMUP = 50
CLAIM = ClaimRef("bench", "6e1c7b2a-0d4f-4a8e-9b3c-5f2e1d0a9c87", "one-gpu")


def run(options: BenchOptions) -> BenchResult:
    """Run the benchmark on both driver roots; raises PluginError if any call fails."""
    cycles = options.cycles or DEFAULT_CYCLES
    warmup = DEFAULT_WARMUP if options.warmup is None else options.warmup
    simulated = _run_on(cycles, warmup, extra_args=())
    with tempfile.TemporaryDirectory(prefix="dra-gpu-bench-root-") as tmp:
        root = build_root(Path(tmp), "host-mounted", version=load_shape(SHAPE).driver_version)
        host = _run_on(
            cycles,
            warmup,
            extra_args=(
                f"--nvidia-driver-root={root.host_root}",
                f"--container-driver-root={root.container_root}",
            ),
        )
    return _combine(simulated, host, cycles, warmup)


def _run_on(cycles: int, warmup: int, *, extra_args: tuple[str, ...]) -> BenchResult:
    with real_plugin(shape=SHAPE, prefix="dra-gpu-bench-", extra_args=extra_args) as plugin:
        version = plugin.client.register()
        plugin.store_claim(
            make_allocated_claim(
                CLAIM.name, CLAIM.namespace, CLAIM.uid, [("gpu", "gpu-0")], pool=plugin.node_name
            )
        )
        answer = plugin.client.prepare([CLAIM])[CLAIM.uid]
        spec = CdiStore(plugin.cdi_root).read(CLAIM.uid)
        ids = [i for device in answer.devices for i in device.cdi_device_ids]
        container = plugin.container_edits(ids)
        spec_bytes = plugin.cdi_spec_path(CLAIM.uid).stat().st_size
        plugin.client.unprepare([CLAIM])
        if spec is None:
            raise PluginError(f"the plugin wrote no CDI spec for {CLAIM}")
        with MinimalPluginProcess(plugin.cluster_root, spec, prefix="dra-gpu-bench-min-") as min_:
            result = _measure(plugin, min_, version, cycles, warmup)
        result.data["container_mounts"] = len(container.get("mounts", []))
        result.data["container_hooks"] = len(container.get("hooks", []))
        result.data["claim_spec_bytes"] = spec_bytes
        result.data["base_spec_bytes"] = sum(
            (plugin.cdi_root / name).stat().st_size for name in plugin.base_cdi_files()
        )
        return result


def _combine(simulated: BenchResult, host: BenchResult, cycles: int, warmup: int) -> BenchResult:
    """One result: the simulated node's root first, then the host's 570 root."""
    ratio = simulated.data["p50_ratio_vs_minimal_plugin"]
    host_ratio = host.data["p50_ratio_vs_minimal_plugin"]

    def verdict(value: float, goal: float) -> str:
        return f"{'within' if value <= goal else 'above'} the goal of {goal}x"

    rss = max(simulated.data["plugin_rss_peak_kib"], host.data["plugin_rss_peak_kib"])
    latencies = dict(simulated.latencies)
    latencies.update({f"{label} (host 570 root)": stats for label, stats in host.latencies.items()})
    return BenchResult(
        name=NAME,
        title=f"{NAME}: {DESCRIPTION} ({SHAPE}, one whole-GPU claim, DRA API "
        f"{simulated.data['api_version']})",
        headline=[
            f"p50 round trip vs the minimal plugin: {ratio:.2f}x ({verdict(ratio, GOAL_RATIO)})",
            f"on a host's 570 driver root ({host.data['container_mounts']} mounts, "
            f"{host.data['container_hooks']} hooks per container): {host_ratio:.2f}x "
            f"({verdict(host_ratio, GOAL_RATIO_HOST_ROOT)})",
            f"{cycles} cycles of each, alternating, after {warmup} warm-up cycles, per root",
            f"plugin peak RSS (VmHWM): {rss / 1024:.1f} MiB",
        ],
        latencies=latencies,
        data={
            **simulated.data,
            "goal_ratio_host_root": GOAL_RATIO_HOST_ROOT,
            "p50_ratio_vs_minimal_plugin_host_root": host_ratio,
            "host_root": host.data,
        },
    )


def _measure(
    plugin: PluginProcess, minimal: MinimalPluginProcess, version: str, cycles: int, warmup: int
) -> BenchResult:
    """Alternate cycles of the real and the minimal plugin; the result."""
    for _ in range(warmup):
        cycle(plugin.client)
        cycle(minimal.client)
    rss_after_warmup = plugin.rss_peak_kib()

    prepare_ns: list[int] = []
    unprepare_ns: list[int] = []
    minimal_ns: list[int] = []
    started = time.perf_counter_ns()
    for _ in range(cycles):
        prepared, unprepared = cycle(plugin.client)
        prepare_ns.append(prepared)
        unprepare_ns.append(unprepared)
        minimal_ns.append(sum(cycle(minimal.client)))
    elapsed_s = (time.perf_counter_ns() - started) / 1e9
    rss_peak = plugin.rss_peak_kib()

    cycle_ns = [p + u for p, u in zip(prepare_ns, unprepare_ns, strict=True)]
    rate = cycles / elapsed_s
    latencies = {
        "prepare": summarize_ns(prepare_ns),
        "unprepare": summarize_ns(unprepare_ns),
        "prepare+unprepare": summarize_ns(cycle_ns),
        "minimal plugin prepare+unprepare": summarize_ns(minimal_ns),
    }
    ratio = (
        latencies["prepare+unprepare"]["p50"] / latencies["minimal plugin prepare+unprepare"]["p50"]
    )
    verdict = "within" if ratio <= GOAL_RATIO else "above"
    return BenchResult(
        name=NAME,
        title=f"{NAME}: {DESCRIPTION} ({SHAPE}, one whole-GPU claim, DRA API {version})",
        headline=[
            f"p50 round trip vs the minimal plugin: {ratio:.2f}x ({verdict} the goal of "
            f"{GOAL_RATIO}x)",
            f"{cycles} cycles of each, alternating, after {warmup} warm-up cycles, in "
            f"{elapsed_s:.1f} s",
            f"plugin peak RSS (VmHWM): {rss_peak / 1024:.1f} MiB "
            f"({rss_after_warmup / 1024:.1f} MiB after warm-up)",
        ],
        latencies=latencies,
        data={
            "shape": SHAPE,
            "api_version": version,
            "grpc_version": grpc.__version__,
            "cycles": cycles,
            "warmup_cycles": warmup,
            "elapsed_s": round(elapsed_s, 3),
            "cycles_per_s": round(rate, 1),
            "p50_ratio_vs_minimal_plugin": round(ratio, 3),
            "goal_ratio": GOAL_RATIO,
            "plugin_rss_peak_kib": rss_peak,
            "plugin_rss_peak_after_warmup_kib": rss_after_warmup,
        },
    )


def cycle(client: KubeletClient, claim: ClaimRef = CLAIM) -> tuple[int, int]:
    """One Prepare and one Unprepare of `claim`; their durations in nanoseconds."""
    t0 = time.perf_counter_ns()
    prepared = client.prepare([claim])
    t1 = time.perf_counter_ns()
    unprepared = client.unprepare([claim])
    t2 = time.perf_counter_ns()
    if prepared[claim.uid].error or not prepared[claim.uid].devices:
        raise PluginError(f"prepare of {claim} failed: {prepared[claim.uid].error}")
    if unprepared[claim.uid].error:
        raise PluginError(f"unprepare of {claim} failed: {unprepared[claim.uid].error}")
    return t1 - t0, t2 - t1
