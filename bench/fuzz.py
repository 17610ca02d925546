"""100,000 hostile kubelet calls against the real plugin: no crash, no hang, bounded memory.

`tests.fakes.fuzz.Fuzzer` stores good and bad claims (conflicting devices,
unknown devices, other pools, hostile MPS and time-slicing numbers, opaque
parameters 200 levels deep or 20 KiB large, unknown config kinds) and makes
random NodePrepareResources / NodeUnprepareResources calls of 1 to 8
claims mixed with unknown claims whose UIDs, names and namespaces are
hostile (path traversal, newlines and escape sequences, 300 characters, a
3 MiB name now and then, empty fields). Per-claim errors are the expected
answer; the run fails on a crash, a call without an answer within the
kubelet's 45 s, an RPC that fails as a whole, RSS above `GOAL_RATIO` times
its value after the first 1,000 calls, or anything left once every claim
is unprepared (checkpoint entry, CDI spec, MIG instance, MPS daemon).
"""

from __future__ import annotations

from bench import BenchOptions, BenchResult, real_plugin
from tests.fakes.fuzz import Fuzzer, FuzzReport

NAME = "fuzz"
DESCRIPTION = "hostile Prepare/Unprepare calls: crashes, hangs, failed RPCs and RSS"
DEFAULT_CALLS = 100_000
GOAL_RATIO = 1.5
BASE_CALLS = 1_000


def run(options: BenchOptions) -> BenchResult:
    calls = options.cycles or DEFAULT_CALLS
    with real_plugin(
        prefix="dra-gpu-bench-fz-",
    ) as plugin:
        report = Fuzzer(plugin).run(calls, rss_every=1_000, progress=_progress)
    return _result(report, calls)


def _progress(report: FuzzReport) -> None:
    if report.calls % 10_000 == 0:
        print(f"  {report.calls} calls, RSS {report.rss_kib[-1][1] / 1024:.1f} MiB", flush=True)


def _result(report: FuzzReport, calls: int) -> BenchResult:
    base = next((kib for n, kib in report.rss_kib if n >= BASE_CALLS), None)
    peak = max((kib for n, kib in report.rss_kib if n >= BASE_CALLS), default=0)
    final = report.rss_kib[-1][1] if report.rss_kib else 0
    peak_ratio = peak / base if base else 1.0
    final_ratio = final / base if base else 1.0
    verdict = "within" if peak_ratio <= GOAL_RATIO else "above"
    failures = sum(report.rpc_failures.values())
    return BenchResult(
        name=NAME,
        title=f"{NAME}: {DESCRIPTION} ({calls} calls, dgx-h100)",
        headline=[
            f"{report.calls} calls in {report.elapsed_s:.0f} s: {report.crashes} crashes, "
            f"{report.hangs} hangs, {failures} failed RPCs, "
            f"{len(report.leftovers)} things left after unpreparing everything",
            f"{report.claims_answered} claims answered, {report.claim_errors} of them with "
            "an error (expected: the input is hostile)",
            f"RSS after {BASE_CALLS} calls {(base or 0) / 1024:.1f} MiB, peak after that "
            f"{peak / 1024:.1f} MiB ({peak_ratio:.2f}x, {verdict} the goal of {GOAL_RATIO}x), "
            f"at the end {final / 1024:.1f} MiB ({final_ratio:.2f}x)",
            *(f"left: {item}" for item in report.leftovers[:5]),
        ],
        data={
            "calls": report.calls,
            "elapsed_s": round(report.elapsed_s, 1),
            "crashes": report.crashes,
            "hangs": report.hangs,
            "rpc_failures": report.rpc_failures,
            "claims_answered": report.claims_answered,
            "claim_errors": report.claim_errors,
            "leftovers": report.leftovers,
            "rss_kib": report.rss_kib,
            "rss_peak_ratio": round(peak_ratio, 3),
            "rss_final_ratio": round(final_ratio, 3),
            "goal_ratio": GOAL_RATIO,
            "ok": report.ok and peak_ratio <= GOAL_RATIO,
        },
    )
