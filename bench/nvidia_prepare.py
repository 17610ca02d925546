"""Prepare+Unprepare of our plugin against NVIDIA's own, behind gRPC with the same client.

Issue #28's yardstick: a whole-GPU claim's NodePrepareResources +
NodeUnprepareResources round trip, as the kubelet sees it, of
`dra-gpu kubelet-plugin` and of NVIDIA's `gpu-kubelet-plugin` (the Go
binary, built from NVIDIA/k8s-dra-driver-gpu), on one node
(`bench.nvidia_node`: NVIDIA's mock NVML for theirs, the same A100s
simulated for ours, one driver root), each reading the claim from an API
server over HTTP, through one `KubeletClient` class over their v1 DRA
sockets. Cycles of the two alternate, so both see the same machine load; the
headline is the ratio of their p50 round trips (below 1: ours is faster).

Before timing, each prepares the claim once and the CDI edits a container
would get from the device IDs each returned are compared
(`bench.cdi_compare`), the claim's UID and this run's directories written as
placeholders; any difference is printed.

Not in `make bench` or `make test`: NVIDIA's binaries are not in this
repository (`bench.nvidia_node.NvidiaBuild` says what is missing), and the
node's device nodes and NVIDIA's mount namespace need root. Run it with
`.venv/bin/python -m bench nvidia-prepare`.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
import time
from pathlib import Path

import grpc

from bench import BenchOptions, BenchResult, real_plugin, summarize_ns
from bench.cdi_compare import ResolvedEdits, differences, resolved_edits
from bench.nvidia_node import (
    DRIVER_VERSION,
    NVIDIA_KUBE_API_QPS,
    NVIDIA_LOG_VERBOSITY,
    NvidiaBuild,
    NvidiaPluginProcess,
    SharedNode,
    kubeconfig,
    make_node,
    store_claim,
)
from bench.prepare_roundtrip import cycle
from dra_driver.errors import PluginError
from kubelet_plugin.kubelet_client import KubeletClient
from kubelet_plugin.service import ClaimRef
from tests.fakes import FakeApiServer, PluginProcess, make_allocated_claim

NAME = "nvidia-prepare"
DESCRIPTION = (
    "NodePrepareResources + NodeUnprepareResources round trips of our plugin and NVIDIA's "
    "gpu-kubelet-plugin, same client, node and driver root"
)
GOAL_RATIO = 1.0
DEFAULT_CYCLES = 300
DEFAULT_WARMUP = 30
NODE_NAME = "a100-node"
NODE_UID = "3f1d9c52-7a0e-4b8e-9d21-6c5e0a4b7f13"
CLAIM_NAME = "one-gpu"
CLAIM_NAMESPACE = "bench"
CLAIM_UID = "placeholder"  # the API servers give the claim its UID


def run(options: BenchOptions) -> BenchResult:
    """Run the benchmark; ConfigError when NVIDIA's build is missing, PluginError if a call
    fails."""
    build = NvidiaBuild.locate()
    cycles = options.cycles or DEFAULT_CYCLES
    warmup = DEFAULT_WARMUP if options.warmup is None else options.warmup
    work = Path(tempfile.mkdtemp(prefix="dra-gpu-nvcmp-", dir="/tmp"))
    try:
        node = make_node(work, build)
        with contextlib.ExitStack() as stack:
            ours_api = stack.enter_context(FakeApiServer(version=("1", "34")))
            nvidia_api = stack.enter_context(FakeApiServer(version=("1", "34")))
            claim = make_allocated_claim(
                CLAIM_NAME, CLAIM_NAMESPACE, CLAIM_UID, [("gpu", "gpu-0")], pool=NODE_NAME
            )
            refs = {}
            for label, server in (("ours", ours_api), ("nvidia", nvidia_api)):
                server.add_node(NODE_NAME, NODE_UID)
                refs[label] = ClaimRef(CLAIM_NAMESPACE, store_claim(server, claim), CLAIM_NAME)
            ours_config = kubeconfig(work / "ours.kubeconfig", ours_api)
            ours = stack.enter_context(_our_plugin(node, ours_config))
            nvidia = stack.enter_context(
                NvidiaPluginProcess(
                    build, node, kubeconfig(work / "nvidia.kubeconfig", nvidia_api), NODE_NAME
                )
            )
            version = ours.client.register()
            nvidia_version = nvidia.client.register()
            ours_edits = _prepared_edits(ours.client, ours.cdi_root, refs["ours"], node)
            nvidia_edits = _prepared_edits(nvidia.client, nvidia.cdi_root, refs["nvidia"], node)
            diff = differences(ours_edits, nvidia_edits)
            return _measure(
                ours,
                nvidia,
                refs,
                cycles=cycles,
                warmup=warmup,
                versions=(version, nvidia_version),
                edits=(ours_edits, nvidia_edits),
                diff=diff,
            )
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _our_plugin(node: SharedNode, kubeconfig_path: Path) -> PluginProcess:
    """`dra-gpu kubelet-plugin` on `node`, reading its claims from the API server of
    `kubeconfig_path` (the flags come after PluginProcess's `--cluster=local:...`; the last
    one counts)."""
    return real_plugin(
        node_name=NODE_NAME,
        shape=str(node.shape_file),
        prefix="dra-gpu-nvcmp-ours-",
        extra_args=(
            "--cluster=kube",
            f"--kubeconfig={kubeconfig_path}",
            "--nvidia-driver-root=/",
            f"--container-driver-root={node.driver_root}",
            "--nvidia-cdi-hook-path=/usr/bin/nvidia-cdi-hook",
        ),
    )


def _prepared_edits(
    client: KubeletClient, cdi_root: Path, ref: ClaimRef, node: SharedNode
) -> ResolvedEdits:
    """Prepare `ref`, resolve the CDI IDs it returned, unprepare it."""
    result = client.prepare([ref])[ref.uid]
    try:
        if result.error or not result.devices:
            raise PluginError(f"prepare of {ref} failed: {result.error or 'no devices'}")
        ids = [i for device in result.devices for i in device.cdi_device_ids]
        placeholders = {ref.uid: "<claim-uid>", str(node.driver_root): "<driver-root>"}
        return resolved_edits(cdi_root, ids, placeholders)
    finally:
        client.unprepare([ref])


def _measure(
    ours: PluginProcess,
    nvidia: NvidiaPluginProcess,
    refs: dict[str, ClaimRef],
    *,
    cycles: int,
    warmup: int,
    versions: tuple[str, str],
    edits: tuple[ResolvedEdits, ResolvedEdits],
    diff: list[str],
) -> BenchResult:
    for _ in range(warmup):
        cycle(ours.client, refs["ours"])
        cycle(nvidia.client, refs["nvidia"])
    ours_ns: list[int] = []
    nvidia_ns: list[int] = []
    ours_prepare: list[int] = []
    nvidia_prepare: list[int] = []
    started = time.perf_counter_ns()
    for _ in range(cycles):
        prepared, unprepared = cycle(ours.client, refs["ours"])
        ours_prepare.append(prepared)
        ours_ns.append(prepared + unprepared)
        prepared, unprepared = cycle(nvidia.client, refs["nvidia"])
        nvidia_prepare.append(prepared)
        nvidia_ns.append(prepared + unprepared)
    elapsed_s = (time.perf_counter_ns() - started) / 1e9
    latencies = {
        "ours prepare+unprepare": summarize_ns(ours_ns),
        "NVIDIA prepare+unprepare": summarize_ns(nvidia_ns),
        "ours prepare": summarize_ns(ours_prepare),
        "NVIDIA prepare": summarize_ns(nvidia_prepare),
    }
    ours_stats, nvidia_stats = (
        latencies["ours prepare+unprepare"],
        latencies["NVIDIA prepare+unprepare"],
    )
    ratio = ours_stats["p50"] / nvidia_stats["p50"]
    ratio_p90 = ours_stats["p90"] / nvidia_stats["p90"]
    verdict = "meets" if ratio <= GOAL_RATIO else "misses"
    cdi_line = (
        f"CDI: the container gets the same edits from both ({_summary(edits[0])})"
        if not diff
        else f"CDI: the edits differ in {len(diff)} entries:"
    )
    ours_rss, nvidia_rss = ours.rss_peak_kib(), nvidia.rss_peak_kib()
    return BenchResult(
        name=NAME,
        title=(
            f"{NAME}: {DESCRIPTION} (8x A100-SXM4-40GB, driver {DRIVER_VERSION}, one whole-GPU "
            f"claim, DRA API {versions[0]} / {versions[1]})"
        ),
        headline=[
            f"p50 ours / NVIDIA: {ratio:.2f}x ({ours_stats['p50']:.2f} ms vs "
            f"{nvidia_stats['p50']:.2f} ms; {verdict} the goal of {GOAL_RATIO:g}x); "
            f"p90: {ratio_p90:.2f}x ({ours_stats['p90']:.2f} ms vs {nvidia_stats['p90']:.2f} ms)",
            f"{cycles} cycles of each, alternating, after {warmup} warm-up cycles, in "
            f"{elapsed_s:.1f} s",
            f"NVIDIA's plugin: -v={NVIDIA_LOG_VERBOSITY} (its chart's), "
            f"--kube-api-qps/--kube-api-burst={NVIDIA_KUBE_API_QPS}; peak RSS ours "
            f"{ours_rss / 1024:.1f} MiB, NVIDIA's {nvidia_rss / 1024:.1f} MiB",
            cdi_line,
            *(f"  {line}" for line in diff),
        ],
        latencies=latencies,
        data={
            "nvidia_plugin": str(nvidia.build.plugin),
            "mock_nvml_library": str(nvidia.build.mock_library),
            "driver_version": DRIVER_VERSION,
            "api_versions": list(versions),
            "grpc_version": grpc.__version__,
            "cycles": cycles,
            "warmup_cycles": warmup,
            "elapsed_s": round(elapsed_s, 3),
            "p50_ratio_ours_vs_nvidia": round(ratio, 3),
            "p90_ratio_ours_vs_nvidia": round(ratio_p90, 3),
            "goal_ratio": GOAL_RATIO,
            "nvidia_log_verbosity": NVIDIA_LOG_VERBOSITY,
            "nvidia_kube_api_qps": NVIDIA_KUBE_API_QPS,
            "ours_rss_peak_kib": ours_rss,
            "nvidia_rss_peak_kib": nvidia_rss,
            "cdi_differences": diff,
            "cdi_spec_files": {"ours": edits[0].spec_files, "nvidia": edits[1].spec_files},
        },
    )


def _summary(edits: ResolvedEdits) -> str:
    return (
        f"{len(edits.env)} env, {len(edits.device_nodes)} device nodes, {len(edits.mounts)} "
        f"mounts, {len(edits.hooks)} hooks"
    )
