"""`python -m bench [NAME ...]`: run the registered benchmarks (all but `OPT_IN` when none
is named).

Each result is printed as a table and written to `bench/results/<name>.json`.
To add a benchmark, write a module with `NAME`, `DESCRIPTION` and
`run(options: BenchOptions) -> BenchResult`, and list it in `BENCHMARKS`.
A benchmark that needs what is not there raises ConfigError saying what; it
is printed and the exit status is 2.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from bench import BenchOptions, render, write_json
from dra_driver.errors import ConfigError

BENCHMARKS: dict[str, str] = {
    "prepare": "bench.prepare_roundtrip",
    "held-claims": "bench.held_claims",
    "placement": "bench.placement",
    "allocator": "bench.allocator",
    "simulate": "bench.simulate_cli",
    "cli-startup": "bench.cli_startup",
    "mig-parallel": "bench.mig_parallel",
    "republish": "bench.republish",
    "health-streams": "bench.health_streams",
    "fuzz": "bench.fuzz",
    "usage-sampling": "bench.usage_sampling",
    "nvidia-prepare": "bench.nvidia_prepare",
    "channel-prepare": "bench.channel_prepare",
    "compute-domain-scale": "bench.compute_domain_scale",
}
"""Benchmark name -> module; modules are imported only when their benchmark runs."""

OPT_IN: frozenset[str] = frozenset({"nvidia-prepare"})
"""Run only when named: they need what this repository does not hold (NVIDIA's build)."""


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument(
        "names",
        nargs="*",
        metavar="NAME",
        help=f"benchmarks to run (default: all but {', '.join(sorted(OPT_IN))}): "
        f"{', '.join(BENCHMARKS)}",
    )
    parser.add_argument("--cycles", type=int, help="measured iterations (benchmark default)")
    parser.add_argument("--warmup", type=int, help="warm-up iterations (benchmark default)")
    args = parser.parse_args(argv)
    unknown = [name for name in args.names if name not in BENCHMARKS]
    if unknown:
        parser.error(f"unknown benchmark(s) {', '.join(unknown)}; known: {', '.join(BENCHMARKS)}")
    for value, flag in ((args.cycles, "--cycles"), (args.warmup, "--warmup")):
        if value is not None and value < (1 if flag == "--cycles" else 0):
            parser.error(f"{flag} must be {'positive' if flag == '--cycles' else 'zero or more'}")
    options = BenchOptions(cycles=args.cycles, warmup=args.warmup)
    for name in args.names or [n for n in BENCHMARKS if n not in OPT_IN]:
        module = importlib.import_module(BENCHMARKS[name])
        print(f"running {name} ...", flush=True)
        try:
            result = module.run(options)
        except ConfigError as exc:  # what the benchmark needs is not there: say what
            print(f"{name}: {exc}", file=sys.stderr)
            return 2
        print(render(result))
        print(f"  written to {write_json(result)}\n", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
