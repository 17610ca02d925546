"""Benchmark: how long a small `dra-gpu` command takes, as a whole process.

A user who asks `dra-gpu explain` why one pod does not fit waits for the
interpreter to start, the modules the command uses to import, the files to
be read and checked and the one simulated node to be built; kubectl answers
such questions in well under a second. This times, as child processes,
`dra-gpu explain -f examples/gpu-h100-by-product.yaml --nodes dgx-h100=1`
(every claim of the example placed on one simulated DGX H100, so the
explanation is the "all placed" answer after the full simulation), its
first run in a fresh user cache directory (where the CEL parser's LALR
tables are built and stored) and then `runs` runs from the second on, next
to `dra-gpu --version` (the entry point alone) and `python -c pass` (the
interpreter alone) as yardsticks. Bytecode is compiled by a warm-up run, as
an installed package has it.

Reported: the first run's wall and CPU time, and the median and the
fastest of the later runs. Run: `python -m bench cli-startup [--cycles N]`
(N runs each, default 10).
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

NAME: Final = "cli-startup"
DESCRIPTION: Final = "a small `dra-gpu explain` as a whole process, from the second run on"
RUNS: Final = 10
EXAMPLE: Final = Path(__file__).resolve().parents[1] / "examples" / "gpu-h100-by-product.yaml"
EXPLAIN: Final = ("explain", "-f", str(EXAMPLE), "--nodes", "dgx-h100=1")


def _dra_gpu() -> list[str]:
    """The console script next to this interpreter, as a user runs it (else `-m`)."""
    script = Path(sys.executable).with_name("dra-gpu")
    return [str(script)] if script.exists() else [sys.executable, "-m", "dra_driver.cli"]


def _timed(command: list[str], env: dict[str, str]) -> tuple[float, float]:
    """Wall and CPU seconds of one run of `command` (its output thrown away)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    subprocess.run(
        command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True, env=env
    )
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def _summary(samples: list[tuple[float, float]]) -> dict[str, float]:
    walls = [wall for wall, _ in samples]
    cpus = [cpu for _, cpu in samples]
    return {
        "wall_median_s": round(statistics.median(walls), 3),
        "wall_min_s": round(min(walls), 3),
        "cpu_median_s": round(statistics.median(cpus), 3),
        "cpu_min_s": round(min(cpus), 3),
    }


def measure(*, runs: int = RUNS) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="dra-gpu-bench-") as work:
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        env["PYTHONPYCACHEPREFIX"] = str(Path(work) / "pycache")
        env["XDG_CACHE_HOME"] = str(Path(work) / "compile-cache")
        explain = [*_dra_gpu(), *EXPLAIN]
        _timed(explain, env)  # compiles the bytecode
        env["XDG_CACHE_HOME"] = str(Path(work) / "cache")  # a user's first run
        first = _timed(explain, env)
        cases = {
            "explain": explain,
            "dra-gpu --version": [*_dra_gpu(), "--version"],
            "python -c pass": [sys.executable, "-c", "pass"],
        }
        samples: dict[str, list[tuple[float, float]]] = {name: [] for name in cases}
        for _ in range(runs):  # interleaved, so a busy spell hits every case alike
            for name, command in cases.items():
                samples[name].append(_timed(command, env))
    return {
        "runs": runs,
        "command": " ".join(["dra-gpu", *EXPLAIN]).replace(
            str(EXAMPLE), "examples/" + EXAMPLE.name
        ),
        "first_run": {"wall_s": round(first[0], 3), "cpu_s": round(first[1], 3)},
        "cases": {name: _summary(values) for name, values in samples.items()},
    }


def format_table(results: dict[str, Any]) -> str:
    lines = [f"{'case':<32}{'wall median':>12}{'wall min':>10}{'cpu median':>12}{'cpu min':>10}"]
    first = results["first_run"]
    lines.append(
        f"{'explain, first run':<32}{first['wall_s']:>12.3f}{'':>10}{first['cpu_s']:>12.3f}"
    )
    for name, data in results["cases"].items():
        label = "explain, from the second run" if name == "explain" else name
        lines.append(
            f"{label:<32}{data['wall_median_s']:>12.3f}{data['wall_min_s']:>10.3f}"
            f"{data['cpu_median_s']:>12.3f}{data['cpu_min_s']:>10.3f}"
        )
    lines.append("")
    lines.append(f"seconds, {results['runs']} runs each; command: {results['command']}")
    return "\n".join(lines)


def run(options: BenchOptions) -> BenchResult:
    """`python -m bench cli-startup`: the registry entry point."""
    results = measure(runs=options.cycles or RUNS)
    return BenchResult(
        name=NAME,
        title=f"{NAME}: {DESCRIPTION}",
        headline=format_table(results).splitlines(),
        data=results,
    )
