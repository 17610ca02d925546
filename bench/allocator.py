"""Benchmark: how many claims per second `dra-gpu simulate` allocates, and at what memory cost.

The simulator is only useful on real cluster sizes if the allocator (our port
of kube-scheduler's structured allocator, `dra_driver.scheduling.allocator`) and the
placement loop around it (`dra_driver.scheduling.whatif.engine`) are fast. Shapes:

* `gpus`: 500 nodes with 10 whole GPUs each (A100-SXM4-80GB, MIG off; built
  by our inventory code from a simulated shape), 5,000 single-GPU claims from
  one ResourceClaimTemplate (a Deployment with 5,000 replicas) whose CEL
  selector matches the product name and compares the memory quantity. Every
  claim fits; the last ones land on the last node.
  - `engine`: the simulate placement loop (first fit over all nodes, with
    its resume-where-the-last-identical-pod-landed shortcut);
  - `first_fit`: the allocator alone, `Allocator.first_fit` over all 500
    nodes for every claim, state updated after each: what the allocator costs
    without that shortcut (kube-scheduler's own scheduler_perf runs at this
    shape do about 51-81 pods/s);
* `mig`: 50 DGX H100 nodes published with dynamic MIG (208 partitionable
  devices and 8 counter sets each), 1,500 pods each claiming one MIG device,
  profiles drawn from a seeded mix (1g.10gb 50 %, 2g.20gb 30 %, 3g.40gb 20 %),
  through the simulate engine. The mix asks for about 91 % of the nodes'
  compute slices, so the last pods search nearly full GPUs (a pod that does
  not fit is diagnosed, which is part of the cost).

Reported per run: wall time of the placement only (node and slice building is
reported separately, and the CEL parser is built before timing: a one-off cost
of about a second per process), claims per second, placed count; peak memory as the
tracemalloc peak of a second, traced run of the `gpus` engine case
(allocator indexes, CEL caches and claims included) and the process's
ru_maxrss. Seeded and deterministic; about a minute on two cores.

Run: `python -m bench allocator` or `python -m bench.allocator [--quick] [--json]`.
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

from bench import BenchOptions, BenchResult
from dra_driver.composition.simulated_nodes import build_simulated_nodes
from dra_driver.errors import AllocationError
from dra_driver.node.device_classes import default_device_classes
from dra_driver.scheduling.allocator import AllocatedState, Allocator
from dra_driver.scheduling.cel import compile_selector
from dra_driver.scheduling.whatif.command import Scenario
from dra_driver.scheduling.whatif.documents import SourcedObject
from dra_driver.scheduling.whatif.engine import Simulation, build_workload
from dra_driver.scheduling.whatif.inputs import collect_inputs
from dra_driver.scheduling.whatif.nodes import MigMode, NodeRequest, SimulatedNodes

NAME: Final = "allocator"
DESCRIPTION: Final = "claims allocated per second by the simulate engine (scheduler allocator)"
SEED: Final = 20250601

GPU_NODES: Final = 500
GPUS_PER_NODE: Final = 10
GPU_CLAIMS: Final = 5000
MIG_NODES: Final = 50
MIG_CLAIMS: Final = 1500
MIG_MIX: Final = (("1g.10gb", 0.5), ("2g.20gb", 0.3), ("3g.40gb", 0.2))

GPU_SELECTOR: Final = (
    "device.attributes['gpu.nvidia.com'].productName.lowerAscii().matches('^.*a100.*$') && "
    "device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('40Gi')) >= 0"
)
NAMESPACE: Final = "bench"


def _template(name: str, device_class: str, selector: str) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"namespace": NAMESPACE, "name": name},
        "spec": {
            "spec": {
                "devices": {
                    "requests": [
                        {
                            "name": "dev",
                            "exactly": {
                                "deviceClassName": device_class,
                                "selectors": [{"cel": {"expression": selector}}],
                            },
                        }
                    ]
                }
            }
        },
    }


def _pod_spec(template: str) -> dict[str, Any]:
    return {
        "containers": [
            {"name": "main", "image": "busybox", "resources": {"claims": [{"name": "dev"}]}}
        ],
        "resourceClaims": [{"name": "dev", "resourceClaimTemplateName": template}],
    }


def _gpu_objects(claims: int) -> list[dict[str, Any]]:
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"namespace": NAMESPACE, "name": "infer"},
        "spec": {
            "replicas": claims,
            "selector": {"matchLabels": {"app": "infer"}},
            "template": {"metadata": {"labels": {"app": "infer"}}, "spec": _pod_spec("a100-40g")},
        },
    }
    return [_template("a100-40g", "gpu.nvidia.com", GPU_SELECTOR), deployment]


def _mig_objects(claims: int, seed: int) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    profiles = [profile for profile, _ in MIG_MIX]
    weights = [weight for _, weight in MIG_MIX]
    objects: list[dict[str, Any]] = [
        _template(
            f"mig-{profile.replace('.', '-')}",
            "mig.nvidia.com",
            f"device.attributes['gpu.nvidia.com'].profile == '{profile}'",
        )
        for profile in profiles
    ]
    for index in range(claims):
        profile = rng.choices(profiles, weights)[0]
        objects.append(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"namespace": NAMESPACE, "name": f"mig-{index}"},
                "spec": _pod_spec(f"mig-{profile.replace('.', '-')}"),
            }
        )
    return objects


def _scenario(objects: Sequence[dict[str, Any]], nodes: SimulatedNodes) -> Scenario:
    inputs = collect_inputs([SourcedObject(obj, f"bench#{i}") for i, obj in enumerate(objects)])
    return Scenario(inputs, nodes.nodes, nodes.slices, default_device_classes())


def _simulation(scenario: Scenario) -> tuple[Simulation, list[Any]]:
    workload = build_workload(scenario.inputs)
    simulation = Simulation(
        slices=scenario.slices,
        classes=scenario.classes,
        nodes=scenario.nodes,
        claims=workload.claims,
    )
    return simulation, workload.items


def _engine_run(scenario: Scenario) -> dict[str, Any]:
    simulation, items = _simulation(scenario)
    started = time.perf_counter()
    placements = simulation.run(items)
    elapsed = time.perf_counter() - started
    placed = sum(1 for placement in placements if placement.placed)
    devices = {
        (result["pool"], result["device"])
        for placement in placements
        for claim in placement.claims
        for result in ((claim.allocation or {}).get("devices") or {}).get("results") or []
    }
    if len(devices) != placed:
        raise AllocationError(f"{placed} claims placed on {len(devices)} distinct devices")
    return {
        "claims": len(items),
        "placed": placed,
        "seconds": round(elapsed, 3),
        "claims_per_s": round(len(items) / elapsed, 1),
    }


def _traced_peak(scenario: Scenario) -> int:
    """tracemalloc peak (bytes) of building a Simulation and placing everything."""
    tracemalloc.start()
    try:
        simulation, items = _simulation(scenario)
        simulation.run(items)
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def _first_fit_run(scenario: Scenario, claims: int) -> dict[str, Any]:
    """The allocator alone: first fit over every node per claim, state updated each time."""
    template = scenario.inputs.templates[(NAMESPACE, "a100-40g")].obj
    state = AllocatedState()
    allocator = Allocator(scenario.slices, scenario.classes, allocated=state)
    placed = 0
    started = time.perf_counter()
    for index in range(claims):
        claim = {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"namespace": NAMESPACE, "name": f"claim-{index}"},
            "spec": template["spec"]["spec"],
        }
        found = allocator.first_fit(scenario.nodes, [claim])
        if found is None:
            continue
        claim["status"] = {"allocation": found[1][0]}
        state.add(claim)
        placed += 1
    elapsed = time.perf_counter() - started
    return {
        "claims": claims,
        "placed": placed,
        "seconds": round(elapsed, 3),
        "claims_per_s": round(claims / elapsed, 1),
    }


def _warm_up_cel(scenario: Scenario) -> None:
    """Build the CEL parser once (a one-off cost of the process, about a second)."""
    for device_class in scenario.classes:
        for selector in device_class["spec"]["selectors"]:
            compile_selector(selector["cel"]["expression"])
    compile_selector(GPU_SELECTOR)


def _build(
    requests: Sequence[NodeRequest], *, mig: MigMode = "static"
) -> tuple[SimulatedNodes, float]:
    started = time.perf_counter()
    nodes = build_simulated_nodes(requests, mig=mig)
    return nodes, round(time.perf_counter() - started, 3)


def measure(*, quick: bool = False, seed: int = SEED) -> dict[str, Any]:
    """Run every case and return the numbers (see the module docstring)."""
    gpu_nodes = GPU_NODES // 10 if quick else GPU_NODES
    gpu_claims = GPU_CLAIMS // 10 if quick else GPU_CLAIMS
    mig_nodes = MIG_NODES // 10 if quick else MIG_NODES
    mig_claims = MIG_CLAIMS // 10 if quick else MIG_CLAIMS
    with tempfile.TemporaryDirectory(prefix="dra-gpu-bench-") as work:
        shape = Path(work) / "a100x10.yaml"
        shape.write_text(
            f"gpus:\n  - model: A100-SXM4-80GB\n    count: {GPUS_PER_NODE}\n", encoding="utf-8"
        )
        gpu_built, gpu_build_s = _build([NodeRequest(str(shape), gpu_nodes)])
    gpu = _scenario(_gpu_objects(gpu_claims), gpu_built)
    _warm_up_cel(gpu)
    gpu_engine = _engine_run(gpu)
    peak = _traced_peak(gpu)
    gpu_first_fit = _first_fit_run(gpu, gpu_claims)
    mig_built, mig_build_s = _build([NodeRequest("dgx-h100", mig_nodes)], mig="dynamic")
    mig = _scenario(_mig_objects(mig_claims, seed), mig_built)
    mig_engine = _engine_run(mig)
    return {
        "seed": seed,
        "gpus": {
            "nodes": gpu_nodes,
            "devices": sum(len(s["spec"].get("devices") or []) for s in gpu.slices),
            "build_s": gpu_build_s,
            "engine": gpu_engine,
            "first_fit": gpu_first_fit,
            "tracemalloc_peak_mib": round(peak / 2**20, 1),
        },
        "mig": {
            "nodes": mig_nodes,
            "devices": sum(len(s["spec"].get("devices") or []) for s in mig.slices),
            "build_s": mig_build_s,
            "engine": mig_engine,
        },
        "ru_maxrss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    }


def format_table(results: dict[str, Any]) -> str:
    """The numbers as a table (claims/s is the headline; the bar is 200/s)."""
    rows = [
        ("gpus", "engine", results["gpus"]),
        ("gpus", "first_fit", results["gpus"]),
        ("mig", "engine", results["mig"]),
    ]
    lines = [
        f"{'case':<6}{'path':<11}{'nodes':>7}{'devices':>9}{'claims':>8}{'placed':>8}"
        f"{'seconds':>9}{'claims/s':>10}"
    ]
    for case, path, data in rows:
        run_data = data[path]
        lines.append(
            f"{case:<6}{path:<11}{data['nodes']:>7}{data['devices']:>9}{run_data['claims']:>8}"
            f"{run_data['placed']:>8}{run_data['seconds']:>9.2f}{run_data['claims_per_s']:>10.1f}"
        )
    lines.append("")
    lines.append(
        f"node + slice building: gpus {results['gpus']['build_s']:.1f} s, "
        f"mig {results['mig']['build_s']:.1f} s (not in the seconds above)"
    )
    lines.append(
        f"memory: tracemalloc peak {results['gpus']['tracemalloc_peak_mib']:.1f} MiB "
        f"(gpus engine run incl. allocator indexes), ru_maxrss {results['ru_maxrss_mib']:.1f} MiB"
    )
    return "\n".join(lines)


def run(options: BenchOptions) -> BenchResult:
    """`python -m bench allocator`: the registry entry point."""
    del options  # the shapes are fixed; cycles/warm-up do not apply
    results = measure()
    return BenchResult(
        name=NAME,
        title=f"{NAME}: {DESCRIPTION}",
        headline=format_table(results).splitlines(),
        data=results,
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.allocator", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="a tenth of every size")
    parser.add_argument("--json", action="store_true", help="print the numbers as JSON")
    parser.add_argument("--seed", type=int, default=SEED)
    args = parser.parse_args(argv)
    results = measure(quick=args.quick, seed=args.seed)
    print(json.dumps(results, indent=2) if args.json else format_table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
