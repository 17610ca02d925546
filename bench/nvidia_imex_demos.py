"""`python -m bench.nvidia_imex_demos DIR`: NVIDIA's `demo/specs/imex` manifests, unchanged,
through `dra-gpu simulate` on GB200 nodes, each with the outcome its authors expect.

Why it is separate: the tests run our own manifests of the same shapes
(`tests/dra_driver/scheduling/whatif/test_compute_domain_demos.py`), because
fetched files are not committed to this repository. Whether NVIDIA's own
files, as they are, place as their demo says is a question about files we do
not hold, so it is asked here, of a directory given at run time (a checkout of
NVIDIA/k8s-dra-driver-gpu's `demo/specs/imex/`, or a copy of it). Not in
`make test` nor `make bench`; `make nvidia-imex-demos DIR=...` runs it.

Each case runs `python -m dra_driver.cli simulate` as its own process, with the
case's files, a control-plane Node (the launchers' node affinity asks for one,
as the cluster the demo ran on has) and `--feature-gates
DRAExtendedResource=true` (the workers ask for `nvidia.com/gpu`, a
device-plugin resource, which simulated nodes serve only through that gate on
1.35). It prints each pod placed or not (and why not) and whether that is the
outcome expected. A file in DIR with no recorded expectation is run alone on 4
nodes and printed. Exit status: 0 when every case ran as expected, 1 when one
did not, 2 when DIR cannot be read.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from dra_driver.errors import ConfigError

REPO = Path(__file__).resolve().parents[1]
CHANNEL_DRIVER = "compute-domain.nvidia.com"
GPU_DRIVER = "gpu.nvidia.com"
CONTROL_PLANE_NODE = (
    "apiVersion: v1\nkind: Node\nmetadata:\n  name: control-plane\n  labels:\n"
    '    node-role.kubernetes.io/control-plane: ""\n'
)
GATES = ("--feature-gates", "DRAExtendedResource=true")

Placements = Mapping[str, Mapping[str, Any]]
"""Pod (`namespace/name`) -> its entry in `simulate -o yaml`."""
Check = Callable[[Placements], list[str]]
"""Returns what differs from the expectation, nothing when it holds."""


@dataclass(frozen=True)
class Case:
    """Some of NVIDIA's files, simulated together, and what their authors expect."""

    files: tuple[str, ...]
    nodes: str
    expected: str
    unplaced: frozenset[str] = frozenset()
    checks: tuple[Check, ...] = ()


def _results(placement: Mapping[str, Any], driver: str) -> list[Mapping[str, Any]]:
    return [
        result
        for claim in placement.get("claims") or []
        for result in claim.get("results") or []
        if result.get("driver") == driver
    ]


def _allocation_mode(placement: Mapping[str, Any]) -> str | None:
    for claim in placement.get("claims") or []:
        if any(r.get("driver") == CHANNEL_DRIVER for r in claim.get("results") or []):
            for config in claim.get("config") or []:
                mode = ((config.get("opaque") or {}).get("parameters") or {}).get("allocationMode")
                if mode is not None:
                    return str(mode)
    return None


def channel(pod: str, mode: str) -> Check:
    """The pod holds IMEX channel-0 of its domain, in allocation mode `mode`."""

    def check(pods: Placements) -> list[str]:
        placement = pods.get(pod)
        if placement is None or not placement.get("placed"):
            return [f"{pod} is not placed"]
        devices = [r.get("device") for r in _results(placement, CHANNEL_DRIVER)]
        problems = [] if devices == ["channel-0"] else [f"{pod} holds channels {devices}"]
        if (got := _allocation_mode(placement)) != mode:
            problems.append(f"{pod}'s channel has allocationMode {got}, not {mode}")
        return problems

    return check


def workers(job: str, count: int, *, with_channel: bool) -> Check:
    """The job's workers hold 2 GPUs each and, with a domain, its channel, one worker a node."""

    def check(pods: Placements) -> list[str]:
        problems: list[str] = []
        nodes: list[str] = []
        for index in range(count):
            pod = f"default/{job}-worker-{index}"
            placement = pods.get(pod)
            if placement is None or not placement.get("placed"):
                problems.append(f"{pod} is not placed")
                continue
            nodes.append(str(placement.get("node")))
            if (gpus := len(_results(placement, GPU_DRIVER))) != 2:
                problems.append(f"{pod} holds {gpus} GPUs, not 2")
            channels = [r.get("device") for r in _results(placement, CHANNEL_DRIVER)]
            if channels != (["channel-0"] if with_channel else []):
                problems.append(f"{pod} holds channels {channels}")
        if with_channel and len(set(nodes)) != len(nodes):
            problems.append(f"{job}'s workers share nodes: {', '.join(nodes)}")
        return problems

    return check


def launcher_on_control_plane(job: str) -> Check:
    """The job's launcher runs on the control-plane node."""

    def check(pods: Placements) -> list[str]:
        node = (pods.get(f"default/{job}-launcher") or {}).get("node")
        return [] if node == "control-plane" else [f"{job}'s launcher is on {node}"]

    return check


def apart(*jobs: str) -> Check:
    """No two of the jobs have workers on one node."""

    def check(pods: Placements) -> list[str]:
        owners: dict[str, str] = {}
        problems = []
        for pod, placement in pods.items():
            job = next((j for j in jobs if pod.startswith(f"default/{j}-worker-")), None)
            node = placement.get("node")
            if job is None or not placement.get("placed") or not node:
                continue
            if owners.setdefault(str(node), job) != job:
                problems.append(f"{node} runs workers of {owners[node]} and {job}")
        return problems

    return check


def _workers_of(job: str, count: int) -> frozenset[str]:
    return frozenset(f"default/{job}-worker-{i}" for i in range(count))


BIG, SMALL_1, SMALL_2 = (
    "nvbandwidth-test-job.yaml",
    "nvbandwidth-test-job-1.yaml",
    "nvbandwidth-test-job-2.yaml",
)
NO_DOMAIN = "nvbandwidth-test-no-compute-domain-job.yaml"
CASES: tuple[Case, ...] = (
    Case(
        ("channel-injection.yaml",),
        "gb200-node=1",
        "the pod gets channel-0, allocationMode Single",
        checks=(channel("default/imex-channel-injection", "Single"),),
    ),
    Case(
        ("channel-injection-all.yaml",),
        "gb200-node=1",
        "the pod gets channel-0, allocationMode All",
        checks=(channel("default/imex-channel-injection-all", "All"),),
    ),
    Case(
        (BIG,),
        "gb200-node=4",
        "4 workers (2 GPUs + the channel each) on 4 nodes, launcher on the control plane",
        checks=(
            workers("nvbandwidth-test", 4, with_channel=True),
            launcher_on_control_plane("nvbandwidth-test"),
        ),
    ),
    *(
        Case(
            (file,),
            "gb200-node=2",
            "2 workers (2 GPUs + the channel each) on 2 nodes, launcher on the control plane",
            checks=(workers(job, 2, with_channel=True), launcher_on_control_plane(job)),
        )
        for file, job in ((SMALL_1, "nvbandwidth-test-1"), (SMALL_2, "nvbandwidth-test-2"))
    ),
    Case(
        (NO_DOMAIN,),
        "gb200-node=2",
        "4 workers with 2 GPUs each and no channel",
        checks=(workers("nvbandwidth-test", 4, with_channel=False),),
    ),
    Case(
        (SMALL_1, SMALL_2),
        "gb200-node=4",
        "both jobs run, each on its own 2 nodes",
        checks=(
            workers("nvbandwidth-test-1", 2, with_channel=True),
            workers("nvbandwidth-test-2", 2, with_channel=True),
            apart("nvbandwidth-test-1", "nvbandwidth-test-2"),
        ),
    ),
    Case(
        (BIG, SMALL_1, SMALL_2),
        "gb200-node=4",
        "the big job runs; the small jobs' workers wait for its nodes",
        unplaced=_workers_of("nvbandwidth-test-1", 2) | _workers_of("nvbandwidth-test-2", 2),
        checks=(workers("nvbandwidth-test", 4, with_channel=True),),
    ),
)
"""NVIDIA's demo (its README.sh) as `test_compute_domain_demos.py` asserts it of our shapes."""


@dataclass(frozen=True)
class Outcome:
    """One simulation: its pods, or why there are none, and what differs from the case."""

    pods: Placements
    failure: str
    problems: tuple[str, ...]


def simulate(directory: Path, files: Sequence[str], nodes: str, scratch: Path) -> Outcome:
    """Runs `dra-gpu simulate` on the files, with the control-plane Node, as a process."""
    node = scratch / "control-plane.yaml"
    node.write_text(CONTROL_PLANE_NODE)
    paths = [arg for name in files for arg in ("-f", str(directory / name))]
    command = [sys.executable, "-m", "dra_driver.cli", "simulate", *paths, "-f", str(node)]
    command += ["--nodes", nodes, *GATES, "-o", "yaml"]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, (str(REPO), env.get("PYTHONPATH"))))
    done = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
    if done.returncode not in (0, 1):  # 1: some pod unplaced; 2 and up: no simulation
        return Outcome({}, f"simulate exited {done.returncode}: {done.stderr.strip()}", ())
    placements = yaml.safe_load(done.stdout) or []
    return Outcome({str(p["pod"]): p for p in placements}, "", ())


def judge(case: Case, outcome: Outcome) -> Outcome:
    """The outcome with what differs from the case's expectation."""
    if outcome.failure:
        return Outcome(outcome.pods, outcome.failure, (outcome.failure,))
    unplaced = frozenset(pod for pod, p in outcome.pods.items() if not p.get("placed"))
    problems = [f"{pod} is placed, expected to wait" for pod in sorted(case.unplaced - unplaced)]
    problems += [f"{pod} is not placed" for pod in sorted(unplaced - case.unplaced)]
    for check in case.checks:
        problems += [p for p in check(outcome.pods) if p not in problems]
    return Outcome(outcome.pods, "", tuple(problems))


def render(files: Sequence[str], nodes: str, expected: str | None, outcome: Outcome) -> str:
    """A case's report: the pods placed (where) and not (why), and the verdict."""
    lines = [f"{' + '.join(files)}  (--nodes {nodes})"]
    if outcome.failure:
        lines.append(f"  {outcome.failure}")
    for pod, placement in outcome.pods.items():
        if placement.get("placed"):
            lines.append(f"  placed    {pod} -> {placement.get('node')}")
        else:
            lines.append(f"  unplaced  {pod}: {placement.get('reason')}")
    if expected is None:
        lines.append("  expected: nothing recorded for this file")
        return "\n".join(lines)
    lines.append(f"  expected: {expected}")
    if not outcome.problems:
        lines.append("  => as expected")
    for problem in outcome.problems:
        lines.append(f"  => NOT as expected: {problem}")
    return "\n".join(lines)


def run(directory: Path) -> int:
    """Runs every case whose files DIR has, and each other file of DIR alone; prints them."""
    if not directory.is_dir():
        raise ConfigError(f"{directory}: not a directory (give NVIDIA's demo/specs/imex)")
    present = {p.name for p in directory.iterdir() if p.suffix in (".yaml", ".yml")}
    if not present:
        raise ConfigError(f"{directory}: holds no .yaml files (give NVIDIA's demo/specs/imex)")
    ran = failed = others = 0
    with tempfile.TemporaryDirectory(prefix="nvidia-imex-demos-") as scratch:
        for case in CASES:
            missing = [name for name in case.files if name not in present]
            if missing:
                print(
                    f"{' + '.join(case.files)}: not run, {directory} has no {', '.join(missing)}\n"
                )
                continue
            outcome = judge(case, simulate(directory, case.files, case.nodes, Path(scratch)))
            ran += 1
            failed += bool(outcome.problems)
            print(render(case.files, case.nodes, case.expected, outcome) + "\n", flush=True)
        known = {name for case in CASES for name in case.files}
        for name in sorted(present - known):
            outcome = simulate(directory, (name,), "gb200-node=4", Path(scratch))
            others += 1
            failed += bool(outcome.failure)
            print(render((name,), "gb200-node=4", None, outcome) + "\n")
    print(f"{ran - failed} of {ran} cases as their authors expect", end="")
    print(f"; {others} other file(s) run, none expected" if others else "")
    return 1 if failed else 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.nvidia_imex_demos", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("directory", type=Path, metavar="DIR", help="NVIDIA's demo/specs/imex")
    args = parser.parse_args(argv)
    try:
        return run(args.directory)
    except ConfigError as exc:
        print(f"nvidia-imex-demos: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
