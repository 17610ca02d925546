"""Benchmarks of dra-gpu, run with `python -m bench` (`make bench`).

Each benchmark drives the real code paths (the plugin process over its
sockets, not a mock) and returns a `BenchResult`: a readable table for the
terminal and the README, and the raw numbers, which `python -m bench` writes
to `bench/results/<name>.json` so runs can be compared. The helpers here
(percentiles, latency summaries) keep every benchmark's statistics identical.
"""

from __future__ import annotations

import json
import math
import os
import platform
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from dra_driver.composition.child_process import popen
from tests.fakes import PluginProcess

RESULTS_DIR = Path(__file__).resolve().parent / "results"

LATENCY_COLUMNS = ("p50", "p90", "p99", "max", "mean")


@dataclass(frozen=True)
class BenchOptions:
    """Knobs shared by the benchmarks; None means the benchmark's own default."""

    cycles: int | None = None
    warmup: int | None = None


@dataclass
class BenchResult:
    """What one benchmark measured.

    `headline` lines are printed first; `latencies` maps a row label (e.g.
    "prepare") to its `summarize_ns` statistics and is printed as a table;
    `data` is everything, written as JSON.
    """

    name: str
    title: str
    headline: list[str] = field(default_factory=list)
    latencies: dict[str, dict[str, float]] = field(default_factory=dict)
    data: dict[str, Any] = field(default_factory=dict)


def percentile(sorted_values: Sequence[int], q: float) -> int:
    """The nearest-rank `q`-th percentile (0 < q <= 100) of already sorted values."""
    if not sorted_values:
        raise ValueError("percentile of no values")
    rank = max(1, math.ceil(q / 100 * len(sorted_values)))
    return sorted_values[rank - 1]


def summarize_ns(samples_ns: Sequence[int]) -> dict[str, float]:
    """p50, p90, p99, max and mean of durations in nanoseconds, reported in milliseconds."""
    ordered = sorted(samples_ns)
    stats = {
        "p50": percentile(ordered, 50),
        "p90": percentile(ordered, 90),
        "p99": percentile(ordered, 99),
        "max": ordered[-1],
        "mean": sum(ordered) / len(ordered),
    }
    return {key: round(value / 1e6, 3) for key, value in stats.items()}


def environment() -> dict[str, Any]:
    """Where the numbers were taken, stored with them."""
    return {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
    }


def render(result: BenchResult) -> str:
    """The result as the terminal (and the README) shows it."""
    lines = [result.title, *(f"  {line}" for line in result.headline)]
    if result.latencies:
        width = max(len(label) for label in result.latencies)
        header = " " * (width + 2) + "".join(f"{c:>10}" for c in LATENCY_COLUMNS)
        lines += ["", header + "   (ms)"]
        for label, stats in result.latencies.items():
            cells = "".join(f"{stats[c]:>10.3f}" for c in LATENCY_COLUMNS)
            lines.append(f"  {label:<{width}}{cells}")
    return "\n".join(lines)


def write_json(result: BenchResult, directory: Path = RESULTS_DIR) -> Path:
    """Write `<directory>/<name>.json` and return its path."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{result.name}.json"
    document = {
        "name": result.name,
        "title": result.title,
        "latency_ms": result.latencies,
        **result.data,
        "environment": environment(),
    }
    path.write_text(json.dumps(document, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return path


def real_plugin(**options: Any) -> PluginProcess:
    """The plugin as a node runs it, for timing and sizing: a new interpreter (not the test
    suite's fork server), no failpoints file read at every step, and no periodic re-publish
    (`publish_interval` 3600 s unless given)."""
    options.setdefault("publish_interval", 3600)
    return PluginProcess(spawn=popen, armable=False, **options)
