"""Benchmark: `dra-gpu simulate` end to end, as a user runs it, in claims per second.

`bench allocator` times the placement loop alone; a user waits for the whole
command: the interpreter starting, the files read and checked as the API
server would, 500 simulated nodes and their ResourceSlices built, every pod
placed and the result printed. This runs the command as a child process at
kube-scheduler's benchmark shape, the same workload as `bench allocator`'s
`gpus` case (500 nodes with 10 A100-SXM4-80GB each, 5,000 single-GPU pods
with a CEL selector), written two ways:

* `deployment`: one Deployment of 5,000 replicas and its claim template
  (two objects to read and validate), with `-o yaml` (every placement
  written) and the table output;
* `pods`: 5,000 Pod documents and the template (5,001 objects, each read
  from YAML and checked against the API schemas), with `-o yaml`;

and each again at 4x the size (2,000 nodes, 20,000 pods), to show how the
cost per claim grows (`growth`: the 4x run's wall and CPU seconds per claim
over the 1x run's, both in this run; the cases run round by round, so a
busy spell on a shared machine slows them alike).

Bytecode is compiled and the CEL parser's tables cached by a warm-up run
first, as an installed package and a user's second run have them (the
cache directory is a fresh one under the run's temporary directory).
Reported: the median wall time and CPU time (user + system of the child) of
`runs` rounds of the cases, claims per second over the wall time, and the
placement loop alone measured in this process in the same run. Medians,
because the machine may be shared.

Run: `python -m bench simulate [--cycles N]` (N rounds, default 3).
"""

from __future__ import annotations

import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from bench import BenchOptions, BenchResult
from bench.allocator import (
    GPU_CLAIMS,
    GPU_NODES,
    GPUS_PER_NODE,
    NAMESPACE,
    _engine_run,
    _gpu_objects,
    _scenario,
    _warm_up_cel,
)
from dra_driver.composition.simulated_nodes import build_simulated_nodes
from dra_driver.kube import yaml_io
from dra_driver.scheduling.whatif.nodes import NodeRequest

NAME: Final = "simulate"
DESCRIPTION: Final = (
    "`dra-gpu simulate` end to end (process start to output) at 500 nodes x 10 GPUs and at 4x that"
)
RUNS: Final = 3


def _command(workload: Path, shape: Path, nodes: int, output: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "dra_driver.cli",
        "simulate",
        "-f",
        str(workload),
        "--nodes",
        f"{shape}={nodes}",
        "-n",
        NAMESPACE,
        "-o",
        output,
    ]


def _child_env(work: Path) -> dict[str, str]:
    """The environment of the runs: bytecode compiled once and kept (in `work`), as an
    installed package has it, even where PYTHONDONTWRITEBYTECODE is set, and a user
    cache directory of the run's own."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPYCACHEPREFIX"] = str(work / "pycache")
    env["XDG_CACHE_HOME"] = str(work / "cache")
    return env


def _pod_objects(claims: int) -> list[dict[str, Any]]:
    """The `gpus` workload as separate Pods: the template and `claims` Pod documents."""
    template, deployment = _gpu_objects(1)
    pod_spec = deployment["spec"]["template"]["spec"]
    pods = [
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"namespace": NAMESPACE, "name": f"infer-{index}"},
            "spec": pod_spec,
        }
        for index in range(claims)
    ]
    return [template, *pods]


@dataclass(frozen=True)
class Case:
    """One command line of the benchmark: a workload, an output format and a size."""

    name: str
    objects: Callable[[int], list[dict[str, Any]]]
    output: str
    scale: int  # 1: 500 nodes and 5,000 pods; 4: 2,000 and 20,000


CASES: Final = (
    Case("deployment", _gpu_objects, "yaml", 1),
    Case("deployment", _gpu_objects, "table", 1),
    Case("pods", _pod_objects, "yaml", 1),
    Case("deployment", _gpu_objects, "yaml", 4),
    Case("pods", _pod_objects, "yaml", 4),
)


def _timed(command: list[str], out: Path, env: dict[str, str]) -> tuple[float, float]:
    """Wall and CPU seconds of one run of `command` (stdout to `out`)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    with out.open("w", encoding="utf-8") as sink:
        subprocess.run(command, stdout=sink, stderr=subprocess.DEVNULL, check=True, env=env)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def measure(*, quick: bool = False, runs: int = RUNS) -> dict[str, Any]:
    """Run the command `runs` times per case, and the placement loop once."""
    nodes = GPU_NODES // 10 if quick else GPU_NODES
    claims = GPU_CLAIMS // 10 if quick else GPU_CLAIMS
    results: dict[str, Any] = {
        "nodes": nodes,
        "gpus_per_node": GPUS_PER_NODE,
        "claims": claims,
        "runs": runs,
        "cases": [],
    }
    with tempfile.TemporaryDirectory(prefix="dra-gpu-bench-") as work:
        shape = Path(work) / "a100x10.yaml"
        shape.write_text(
            f"gpus:\n  - model: A100-SXM4-80GB\n    count: {GPUS_PER_NODE}\n", encoding="utf-8"
        )
        env = _child_env(Path(work))
        warm_up = Path(work) / "warm-up.yaml"
        warm_up.write_text(yaml_io.dump_all(_gpu_objects(1), sort_keys=False))
        _timed(_command(warm_up, shape, 1, "yaml"), Path(work) / "warm-up.out", env)
        commands = []
        for case in CASES:
            count = claims * case.scale
            workload = Path(work) / f"{case.name}-{count}.yaml"
            if not workload.exists():
                workload.write_text(yaml_io.dump_all(case.objects(count), sort_keys=False))
            commands.append(_command(workload, shape, nodes * case.scale, case.output))
        samples: list[list[tuple[float, float]]] = [[] for _ in CASES]
        for _ in range(runs):  # round by round, so a busy spell slows every case alike
            for index, (case, command) in enumerate(zip(CASES, commands, strict=True)):
                samples[index].append(_timed(command, Path(work) / f"out.{case.output}", env))
        for case, command, timings in zip(CASES, commands, samples, strict=True):
            count = claims * case.scale
            wall = statistics.median(sample[0] for sample in timings)
            results["cases"].append(
                {
                    "case": f"{case.name} -o {case.output}",
                    "nodes": nodes * case.scale,
                    "claims": count,
                    "wall_s": round(wall, 2),
                    "cpu_s": round(statistics.median(sample[1] for sample in timings), 2),
                    "claims_per_s": round(count / wall, 1),
                    "command": " ".join(["dra-gpu", *command[3:]]),
                }
            )
        built = build_simulated_nodes([NodeRequest(str(shape), nodes)])
    _add_growth(results["cases"])
    scenario = _scenario(_gpu_objects(claims), built)
    _warm_up_cel(scenario)
    results["engine"] = _engine_run(scenario)
    return results


def _add_growth(cases: list[dict[str, Any]]) -> None:
    """Each larger case's wall and CPU seconds per claim over those of the same case at 1x."""
    base: dict[str, dict[str, Any]] = {}
    for case in cases:
        first = base.setdefault(case["case"], case)
        if first is not case:
            for key in ("wall_s", "cpu_s"):
                ratio = (case[key] / case["claims"]) / (first[key] / first["claims"])
                case[f"growth_{key[:-2]}"] = round(ratio, 2)


def format_table(results: dict[str, Any]) -> str:
    lines = [
        f"{'case':<24}{'nodes':>7}{'claims':>8}{'wall s':>8}{'cpu s':>8}{'claims/s':>10}"
        f"{'growth wall/cpu':>17}"
    ]
    for data in results["cases"]:
        growth = (
            f"{data['growth_wall']:.2f}x / {data['growth_cpu']:.2f}x"
            if "growth_wall" in data
            else ""
        )
        lines.append(
            f"{data['case']:<24}{data['nodes']:>7}{data['claims']:>8}{data['wall_s']:>8.2f}"
            f"{data['cpu_s']:>8.2f}{data['claims_per_s']:>10.1f}{growth:>17}"
        )
    engine = results["engine"]
    lines.append(
        f"{'placement loop alone':<24}{results['nodes']:>7}{results['claims']:>8}"
        f"{engine['seconds']:>8.2f}{'':>8}{engine['claims_per_s']:>10.1f}"
    )
    lines.append("")
    lines.append(
        f"medians of {results['runs']} rounds of every case; growth: wall and CPU seconds per "
        "claim over the 1x case's; "
        f"command: {results['cases'][0]['command']}"
    )
    return "\n".join(lines)


def run(options: BenchOptions) -> BenchResult:
    """`python -m bench simulate`: the registry entry point."""
    results = measure(runs=options.cycles or RUNS)
    return BenchResult(
        name=NAME,
        title=f"{NAME}: {DESCRIPTION}",
        headline=format_table(results).splitlines(),
        data=results,
    )
