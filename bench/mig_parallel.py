"""How long eight dynamic MIG prepares take when they land on eight GPUs, and on one.

Creating a GPU instance takes about a second on real hardware. NVIDIA's
driver holds one node-wide lock around Prepare, so eight pods starting at
once on a DGX, one MIG slice per GPU, wait about eight seconds for the last
one. dra-gpu locks per GPU, so the eight should take about as long as one.

The benchmark starts the real plugin (`--dynamic-mig`) on a simulated
dgx-h100 whose NVML calls sleep like hardware
(`--sim-latency gi-create=1,gi-destroy=1,ci-create=0.1`) and measures, on
the kubelet's side of the socket:

* 8 claims, one `1g.10gb` on each of the 8 GPUs, prepared in ONE
  NodePrepareResources call, then unprepared in one call;
* the same as 8 concurrent calls (one per pod, as the kubelet does);
* for contrast, 7 claims on ONE GPU (an H100 holds at most seven MIG
  devices), which must be serialized: one call, then 7 concurrent calls.

Every run checks its outcome (all answers without error, the GPU instances
on the hardware, none left after Unprepare). The "ideal" column is what a
run costs if the GPUs work in parallel and nothing else takes time: one
GI create + CI create (1.1 s) for the 8-GPU cases, 7 of them in a row for
the one-GPU cases.

Run: `python -m bench mig-parallel [--cycles N]` (JSON in
`bench/results/mig-parallel.json`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from bench import BenchOptions, BenchResult, real_plugin, summarize_ns
from dra_driver.errors import PluginError
from kubelet_plugin.service import ClaimRef
from tests.fakes import (
    PluginProcess,
    live_mig_instances,
    make_allocated_claim,
    plugin_sim,
)

NAME = "mig-parallel"
DESCRIPTION = "dynamic MIG prepares on 8 GPUs vs on 1 GPU, with simulated NVML latencies"
SHAPE = "dgx-h100"
LATENCY = {"gi-create": 1.0, "gi-destroy": 1.0, "ci-create": 0.1}
DEFAULT_CYCLES = 3
DEFAULT_WARMUP = 1
ONE_GPU_CLAIMS = 7  # 1g.10gb placements on one H100

Scenario = tuple[str, list[ClaimRef], bool]  # label, claims, concurrent calls?


def run(options: BenchOptions) -> BenchResult:
    """Run every scenario `warmup` times unmeasured, then `cycles` times; raises
    PluginError if any outcome is wrong."""
    cycles = options.cycles or DEFAULT_CYCLES
    warmup = DEFAULT_WARMUP if options.warmup is None else options.warmup
    latency = ",".join(f"{key}={value:g}" for key, value in LATENCY.items())
    with real_plugin(
        shape=SHAPE,
        prefix="dra-gpu-bench-mig-",
        extra_args=["--dynamic-mig", f"--sim-latency={latency}"],
    ) as plugin:
        spread = _store_claims(plugin, [f"gpu-{n}-mig-1g10gb-19-0" for n in range(8)], 1)
        packed = _store_claims(
            plugin, [f"gpu-0-mig-1g10gb-19-{s}" for s in range(ONE_GPU_CLAIMS)], 2
        )
        scenarios: list[Scenario] = [
            ("8 GPUs, 1 call", spread, False),
            ("8 GPUs, 8 calls", spread, True),
            ("1 GPU, 1 call", packed, False),
            (f"1 GPU, {ONE_GPU_CLAIMS} calls", packed, True),
        ]
        samples: dict[str, list[int]] = {}
        for cycle in range(warmup + cycles):
            for label, claims, concurrent in scenarios:
                prepare_ns, unprepare_ns = _measure(plugin, claims, concurrent)
                if cycle >= warmup:
                    samples.setdefault(f"{label}: prepare", []).append(prepare_ns)
                    samples.setdefault(f"{label}: unprepare", []).append(unprepare_ns)

    one_gi = LATENCY["gi-create"] + LATENCY["ci-create"]
    ideal_s = {
        "8 GPUs": one_gi,
        "1 GPU": ONE_GPU_CLAIMS * one_gi,
    }
    latencies = {label: summarize_ns(values) for label, values in samples.items()}
    headline = [
        f"simulated latencies {latency} (seconds), {cycles} cycles per scenario after "
        f"{warmup} warm-up; times are whole calls as the kubelet sees them",
    ]
    for label, stats in latencies.items():
        if label.endswith(": prepare"):
            ideal = ideal_s[label.split(",")[0]]
            headline.append(
                f"{label}: median {stats['p50'] / 1000:.2f} s (ideal {ideal:.1f} s, "
                f"serialized would be {_serialized(label, one_gi):.1f} s)"
            )
    return BenchResult(
        name=NAME,
        title=f"{NAME}: {DESCRIPTION} ({SHAPE}, 1g.10gb per claim)",
        headline=headline,
        latencies=latencies,
        data={
            "shape": SHAPE,
            "latency_s": LATENCY,
            "cycles": cycles,
            "warmup_cycles": warmup,
            "ideal_prepare_s": ideal_s,
            "samples_ms": {k: [round(v / 1e6, 1) for v in vs] for k, vs in samples.items()},
        },
    )


def _serialized(label: str, one_gi: float) -> float:
    return (8 if label.startswith("8 GPUs") else ONE_GPU_CLAIMS) * one_gi


def _store_claims(plugin: PluginProcess, devices: Sequence[str], group: int) -> list[ClaimRef]:
    """One claim per device, named `group-<group>-<i>`."""
    refs = []
    for index, device in enumerate(devices):
        uid = f"b3c40000-0000-4000-8000-{group:06d}{index:06d}"
        name = f"group-{group}-{index}"
        plugin.store_claim(make_allocated_claim(name, "bench", uid, [("mig", device)]))
        refs.append(ClaimRef("bench", uid, name))
    return refs


def _measure(plugin: PluginProcess, claims: list[ClaimRef], concurrent: bool) -> tuple[int, int]:
    """Prepare then unprepare `claims`; the two wall times in nanoseconds."""
    hardware = plugin_sim(plugin)
    prepare_ns, prepared = _timed(plugin.client.prepare, claims, concurrent)
    failed = {uid: r.error for uid, r in prepared.items() if r.error or not r.devices}
    if failed or len(live_mig_instances(hardware)) != len(claims):
        raise PluginError(f"prepare went wrong: {failed or 'instances missing'}")
    unprepare_ns, unprepared = _timed(plugin.client.unprepare, claims, concurrent)
    failed = {uid: r.error for uid, r in unprepared.items() if r.error}
    if failed or live_mig_instances(hardware):
        raise PluginError(f"unprepare went wrong: {failed or 'instances left'}")
    return prepare_ns, unprepare_ns


def _timed(
    call: Callable[[Sequence[ClaimRef]], dict[str, Any]],
    claims: list[ClaimRef],
    concurrent: bool,
) -> tuple[int, dict[str, Any]]:
    """One call with every claim, or one call per claim all at once; wall time and answers."""
    started = time.perf_counter_ns()
    if not concurrent:
        answers = call(claims)
    else:
        with ThreadPoolExecutor(max_workers=len(claims)) as pool:
            answers = {}
            for part in pool.map(lambda ref: call([ref]), claims):
                answers.update(part)
    return time.perf_counter_ns() - started, answers
