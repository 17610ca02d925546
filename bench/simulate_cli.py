"""Benchmark: `dra-gpu simulate` end to end, as a user runs it, in claims per second.

`bench allocator` times the placement loop alone; a user waits for the whole
command: the interpreter starting, the files read, 500 simulated nodes and
their ResourceSlices built, every pod placed and the result printed. This
runs the command as a child process at kube-scheduler's benchmark shape, the
same workload as `bench allocator`'s `gpus` case (500 nodes with 10
A100-SXM4-80GB each, one Deployment of 5,000 single-GPU pods with a CEL
selector), with `-o yaml` (every placement written) and the table output.

Bytecode is compiled by a warm-up run first, as `pip install` does. Reported:
the median wall time and CPU time (user + system of the child) of
`runs` runs of each output, claims per second over the wall time, and the
placement loop alone measured in this process in the same run (the baseline
the end-to-end time is compared with). Medians, because the machine may be
shared.

Run: `python -m bench simulate [--cycles N]` (N runs per output, default 3).
"""

from __future__ import annotations

import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
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
    "`dra-gpu simulate` end to end (process start to output) at 500 nodes x 10 GPUs"
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
    installed package has it, even where PYTHONDONTWRITEBYTECODE is set."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPYCACHEPREFIX"] = str(work / "pycache")
    return env


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
    """Run the command `runs` times per output, and the placement loop once."""
    nodes = GPU_NODES // 10 if quick else GPU_NODES
    claims = GPU_CLAIMS // 10 if quick else GPU_CLAIMS
    results: dict[str, Any] = {"nodes": nodes, "gpus_per_node": GPUS_PER_NODE, "claims": claims}
    with tempfile.TemporaryDirectory(prefix="dra-gpu-bench-") as work:
        workload = Path(work) / "workload.yaml"
        workload.write_text(yaml_io.dump_all(_gpu_objects(claims), sort_keys=False))
        shape = Path(work) / "a100x10.yaml"
        shape.write_text(
            f"gpus:\n  - model: A100-SXM4-80GB\n    count: {GPUS_PER_NODE}\n", encoding="utf-8"
        )
        env = _child_env(Path(work))
        warm_up = Path(work) / "warm-up.yaml"
        warm_up.write_text(yaml_io.dump_all(_gpu_objects(1), sort_keys=False))
        _timed(_command(warm_up, shape, 1, "yaml"), Path(work) / "warm-up.out", env)
        for output in ("yaml", "table"):
            command = _command(workload, shape, nodes, output)
            out = Path(work) / f"out.{output}"
            samples = [_timed(command, out, env) for _ in range(runs)]
            wall = statistics.median(sample[0] for sample in samples)
            results[output] = {
                "runs": runs,
                "wall_s": round(wall, 2),
                "cpu_s": round(statistics.median(sample[1] for sample in samples), 2),
                "claims_per_s": round(claims / wall, 1),
                "command": " ".join(["dra-gpu", *command[3:]]),
            }
        built = build_simulated_nodes([NodeRequest(str(shape), nodes)])
    scenario = _scenario(_gpu_objects(claims), built)
    _warm_up_cel(scenario)
    results["engine"] = _engine_run(scenario)
    return results


def format_table(results: dict[str, Any]) -> str:
    lines = [f"{'case':<32}{'wall s':>8}{'cpu s':>8}{'claims/s':>10}"]
    for output in ("yaml", "table"):
        data = results[output]
        lines.append(
            f"{'simulate -o ' + output + ' (end to end)':<32}{data['wall_s']:>8.2f}"
            f"{data['cpu_s']:>8.2f}{data['claims_per_s']:>10.1f}"
        )
    engine = results["engine"]
    loop = f"{engine['seconds']:>8.2f}{'':>8}{engine['claims_per_s']:>10.1f}"
    lines.append(f"{'placement loop alone':<32}{loop}")
    lines.append("")
    lines.append(
        f"{results['claims']} pods on {results['nodes']} nodes x {results['gpus_per_node']} GPUs; "
        f"medians of {results['yaml']['runs']} runs; command: {results['yaml']['command']}"
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
