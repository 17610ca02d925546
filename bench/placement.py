"""Benchmark: how well the scheduler's first-fit packs dynamic MIG devices in our publish order.

The scheduler places a MIG request on the first matching device, in slice
order, whose counters still fit; it never scores placements. So the device
order `dra_driver.node.placement_order` writes into the slices is the placement
policy. This benchmark publishes two 8-GPU nodes exactly as the plugin does
(simulated DGX A100-40GB with MIG on, and DGX H100, dynamic MIG, layout
v1.35), replays random request streams against them and compares:

* `ours`: first-fit over the slices as published (profile-major device
  slices, placement order inside);
* `nvidia`: what NVIDIA's driver publishes: one device slice per GPU,
  devices sorted by name (small profiles then fill from memory slice 0);
* `name order in our slices` and `our order, 1 GPU per slice` split the
  difference: they show what the in-GPU order and the profile-major slicing
  each buy. The first is also what NVIDIA's slices would give if the
  scheduler kept the slice order (for each profile, both try GPU 0's
  placements by start, then GPU 1's, ...);
* `oracle`: a hindsight bound that ignores placement. Before the first
  refusal it is exact: the longest prefix of the stream that fits on the
  node all at once, found by an exhaustive search over per-GPU
  configurations (every set of devices one GPU's counters admit). Under
  churn it accepts a request whenever everything running plus the request
  would fit if instances could be moved (a defragmenting scheduler). That is
  a reference, not a bound: by accepting every large request it can refuse
  more small ones later, so compare the memory-slice-weighted rate.

The order of slices within a pool is unspecified in the scheduler (it walks an
informer cache), so each request sees the slices in a fresh random order;
only the order inside a slice holds.

Workloads (assumed, inference-heavy: many small slices, some whole GPUs):
A100 1g.5gb 30%, 1g.10gb 10%, 2g.10gb 20%, 3g.20gb 20%, 4g.20gb 10%, 7g.40gb
10%; H100 1g.10gb 30%, 1g.20gb 10%, 2g.20gb 15%, 3g.40gb 15%, 4g.40gb 10%,
7g.80gb 5%, full GPU 15%. Metrics: requests accepted before the first
refusal (mean over streams, no releases), and under churn (one arrival per
step, exponential lifetimes sized so the offered load is 1.2x the node's
memory slices, measured after a warm-up) the share of requests accepted and
the share of requested memory slices accepted.

Seeded and deterministic. Before measuring, the first-fit simulator is
checked against the project's port of the scheduler (`dra_driver.scheduling.allocator`,
real CEL) on a request stream: both must pick the same devices.

Run: `python -m bench placement` (registered benchmark: table, and JSON in
`bench/results/placement.json`), or `python -m bench.placement [--json]
[--quick] [--seed N]` on its own.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from bench import BenchOptions, BenchResult
from controller.slices import build_resource_slices
from dra_driver import DEFAULT_DRIVER_NAME
from dra_driver.composition.hardware import open_hardware
from dra_driver.kube.quantity import parse_quantity
from dra_driver.node.devices import build_devices
from dra_driver.node.inventory import discover

NAME = "placement"
DESCRIPTION = "first-fit packing of dynamic MIG devices in publish order vs name order vs oracle"
DEFAULT_SEED: Final = 20240601

FULL_GPU: Final = "gpu"  # the request type of a whole GPU (DeviceClass gpu.nvidia.com)
DOMAIN: Final = DEFAULT_DRIVER_NAME

Mix = tuple[tuple[str, int], ...]
NODES: Final[dict[str, tuple[str, Mix]]] = {
    "a100-40gb-x8": (
        "sim:dgx-a100-40gb",
        (
            ("1g.5gb", 30),
            ("1g.10gb", 10),
            ("2g.10gb", 20),
            ("3g.20gb", 20),
            ("4g.20gb", 10),
            ("7g.40gb", 10),
        ),
    ),
    "h100-x8": (
        "sim:dgx-h100",
        (
            ("1g.10gb", 30),
            ("1g.20gb", 10),
            ("2g.20gb", 15),
            ("3g.40gb", 15),
            ("4g.40gb", 10),
            ("7g.80gb", 5),
            (FULL_GPU, 15),
        ),
    ),
}
SliceOrder = Literal["random", "fixed"]
Layout = Literal["v1.34", "v1.35"]
#: (row label, policy, layout published with, slice order) per measured row.
ROWS: Final[tuple[tuple[str, str, Layout, SliceOrder], ...]] = (
    ("ours (v1.35 layout)", "ours", "v1.35", "random"),
    ("ours (v1.34 layout)", "ours", "v1.34", "random"),
    ("nvidia: name order, 1 GPU per slice", "nvidia", "v1.35", "random"),
    ("name order in our slices (= nvidia, fixed)", "name-in-our-slices", "v1.35", "random"),
    ("our order, 1 GPU per slice", "ours/gpu-slices", "v1.35", "random"),
)
OFFERED_LOAD: Final = 1.2
LAYOUTS: Final[tuple[Layout, ...]] = ("v1.34", "v1.35")


@dataclass(frozen=True)
class SimDevice:
    """A published device as first-fit sees it."""

    name: str
    request_type: str  # the profile, or FULL_GPU
    gpu: str  # its counter set
    consumes: tuple[tuple[int, int], ...]  # (counter index, amount)


@dataclass(frozen=True)
class PublishedNode:
    """A node's published devices (device slices in order) and counter totals."""

    name: str
    slices: tuple[tuple[SimDevice, ...], ...]
    totals: tuple[int, ...]
    raw_slices: tuple[dict[str, Any], ...]

    @property
    def devices(self) -> list[SimDevice]:
        return [device for chunk in self.slices for device in chunk]


def publish(spec: str, name: str, layout: Layout = "v1.35") -> PublishedNode:
    """Publish a simulated node with dynamic MIG and read the slices back."""
    inventory = discover(open_hardware(spec, node_name=name).nvml)
    slices = build_resource_slices(
        build_devices(inventory, dynamic_mig=True),
        driver=DEFAULT_DRIVER_NAME,
        node_name=name,
        layout=layout,
    )
    counter_index: dict[tuple[str, str], int] = {}
    totals: list[int] = []
    for obj in slices:
        for counter_set in obj["spec"].get("sharedCounters", []):
            for counter, value in sorted(counter_set["counters"].items()):
                counter_index[(counter_set["name"], counter)] = len(totals)
                totals.append(int(parse_quantity(value["value"]).value))
    device_slices: list[tuple[SimDevice, ...]] = []
    for obj in slices:
        if "devices" not in obj["spec"]:
            continue
        chunk = []
        for raw in obj["spec"]["devices"]:
            attributes = raw["attributes"]
            kind = attributes["type"]["string"]
            request_type = FULL_GPU if kind == "gpu" else attributes["profile"]["string"]
            (use,) = raw["consumesCounters"]
            consumes = tuple(
                (counter_index[(use["counterSet"], counter)], int(parse_quantity(v["value"]).value))
                for counter, v in sorted(use["counters"].items())
            )
            chunk.append(SimDevice(raw["name"], request_type, use["counterSet"], consumes))
        device_slices.append(tuple(chunk))
    return PublishedNode(name, tuple(device_slices), tuple(totals), tuple(slices))


def policy_slices(node: PublishedNode, policy: str) -> list[list[SimDevice]]:
    """The device slices a policy publishes (same devices, different order/grouping)."""
    if policy == "ours":
        return [list(chunk) for chunk in node.slices]
    if policy == "name-in-our-slices":
        return [sorted(chunk, key=lambda d: d.name) for chunk in node.slices]
    per_gpu: dict[str, list[SimDevice]] = {}
    for device in node.devices:
        per_gpu.setdefault(device.gpu, []).append(device)
    gpu_order = list(per_gpu)  # publish (PCI bus) order
    if policy == "ours/gpu-slices":
        rank = {device.name: i for i, device in enumerate(_gpu_major(node))}
        return [sorted(per_gpu[gpu], key=lambda d: rank[d.name]) for gpu in gpu_order]
    if policy == "nvidia":
        return [sorted(per_gpu[gpu], key=lambda d: d.name) for gpu in gpu_order]
    raise ValueError(f"unknown policy {policy!r}")


def _gpu_major(node: PublishedNode) -> list[SimDevice]:
    """Our in-GPU order: the published order is profile-major, and within a profile
    GPU-major, so a stable sort by GPU recovers each GPU's placement order."""
    first_seen: dict[str, int] = {}
    for device in node.devices:
        first_seen.setdefault(device.gpu, len(first_seen))
    return sorted(node.devices, key=lambda d: first_seen[d.gpu])


class FirstFit:
    """The scheduler's choice for one single-device request: the first device, in slice
    order, of the requested type that is free and whose counters still fit."""

    def __init__(
        self, node: PublishedNode, slices: list[list[SimDevice]], order: SliceOrder, seed: int
    ) -> None:
        self.left = list(node.totals)
        self.slices = slices
        self.order = order
        self.rng = random.Random(seed)
        self.taken: set[str] = set()

    def allocate(self, request_type: str) -> SimDevice | None:
        slices = list(self.slices)
        if self.order == "random":
            self.rng.shuffle(slices)
        for chunk in slices:
            for device in chunk:
                if device.request_type != request_type or device.name in self.taken:
                    continue
                if all(self.left[i] >= amount for i, amount in device.consumes):
                    for i, amount in device.consumes:
                        self.left[i] -= amount
                    self.taken.add(device.name)
                    return device
        return None

    def release(self, device: SimDevice) -> None:
        self.taken.remove(device.name)
        for i, amount in device.consumes:
            self.left[i] += amount


@dataclass
class Oracle:
    """Can a multiset of requests be placed on the node at once, placements chosen freely?

    Every set of devices one GPU's counters admit is enumerated; a request
    multiset fits iff it is covered by one maximal per-GPU configuration per
    GPU (any sub-multiset of a configuration fits too). The search branches on
    the largest outstanding request type (some GPU must hold one, and GPUs are
    interchangeable), with capacity bounds and memoisation.
    """

    types: tuple[str, ...]
    gpus: int
    maximal: tuple[tuple[int, ...], ...]
    weights: tuple[tuple[int, ...], ...]  # per bound: weight of each type
    capacities: tuple[int, ...]  # per bound: the most one GPU holds
    memo: dict[tuple[tuple[int, ...], int], bool] = field(default_factory=dict)

    @classmethod
    def of(cls, node: PublishedNode, types: Sequence[str]) -> Oracle:
        per_gpu: dict[str, list[SimDevice]] = {}
        for device in node.devices:
            if device.request_type in types:
                per_gpu.setdefault(device.gpu, []).append(device)
        vectors: set[frozenset[tuple[int, ...]]] = set()
        configurations: list[set[tuple[int, ...]]] = []
        for devices in per_gpu.values():
            found = _configurations(devices, node.totals, list(types))
            configurations.append(found)
            vectors.add(frozenset(_maximal(found)))
        if len(vectors) != 1:
            raise ValueError(f"{node.name}: the oracle needs identical GPUs")
        # Largest types first: the branching rule picks the first outstanding one.
        sizes = {t: _size(node, t) for t in types}
        order = sorted(range(len(types)), key=lambda i: (-sizes[types[i]], i))
        ordered_types = tuple(types[i] for i in order)
        maximal = tuple(
            sorted(
                (tuple(vector[i] for i in order) for vector in next(iter(vectors))),
                key=lambda v: (-sum(v), v),
            )
        )
        weights = (
            tuple(sizes[t] for t in ordered_types),
            *(tuple(int(j == k) for j in range(len(types))) for k in range(len(types))),
        )
        capacities = tuple(
            max(sum(w * m for w, m in zip(weight, vector, strict=True)) for vector in maximal)
            for weight in weights
        )
        return cls(ordered_types, len(per_gpu), maximal, weights, capacities)

    def fits(self, counts: dict[str, int]) -> bool:
        remaining = tuple(counts.get(t, 0) for t in self.types)
        return self._fits(remaining, self.gpus)

    def _fits(self, remaining: tuple[int, ...], gpus: int) -> bool:
        if not any(remaining):
            return True
        if gpus == 0:
            return False
        for weight, capacity in zip(self.weights, self.capacities, strict=True):
            if sum(w * r for w, r in zip(weight, remaining, strict=True)) > gpus * capacity:
                return False
        key = (remaining, gpus)
        known = self.memo.get(key)
        if known is not None:
            return known
        first = next(i for i, r in enumerate(remaining) if r)
        result = False
        for vector in self.maximal:
            if vector[first] == 0:
                continue
            rest = tuple(max(0, r - m) for r, m in zip(remaining, vector, strict=True))
            if self._fits(rest, gpus - 1):
                result = True
                break
        self.memo[key] = result
        return result


def _size(node: PublishedNode, request_type: str) -> int:
    """Memory slices a request type takes (consumed counters valued 1 are memory slices)."""
    device = next(d for d in node.devices if d.request_type == request_type)
    return sum(1 for i, amount in device.consumes if node.totals[i] == 1 and amount == 1)


def _configurations(
    devices: list[SimDevice], totals: tuple[int, ...], types: list[str]
) -> set[tuple[int, ...]]:
    """Count vectors of every set of `devices` that fits the counters together."""
    found: set[tuple[int, ...]] = set()
    left = list(totals)
    counts = [0] * len(types)

    def visit(start: int) -> None:
        found.add(tuple(counts))
        for index in range(start, len(devices)):
            device = devices[index]
            if all(left[i] >= amount for i, amount in device.consumes):
                for i, amount in device.consumes:
                    left[i] -= amount
                counts[types.index(device.request_type)] += 1
                visit(index + 1)
                counts[types.index(device.request_type)] -= 1
                for i, amount in device.consumes:
                    left[i] += amount

    visit(0)
    return found


def _maximal(vectors: set[tuple[int, ...]]) -> list[tuple[int, ...]]:
    return [
        v
        for v in vectors
        if not any(o != v and all(a >= b for a, b in zip(o, v, strict=True)) for o in vectors)
    ]


def request_stream(mix: Mix, length: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    types = [t for t, _ in mix]
    weights = [w for _, w in mix]
    return rng.choices(types, weights, k=length)


def before_first_refusal(
    node: PublishedNode, stream: list[str], policy: str, order: SliceOrder, seed: int
) -> int:
    fit = FirstFit(node, policy_slices(node, policy), order, seed)
    for accepted, request_type in enumerate(stream):
        if fit.allocate(request_type) is None:
            return accepted
    return len(stream)


def oracle_before_first_refusal(oracle: Oracle, stream: list[str]) -> int:
    """The longest prefix that fits at once (binary search: fitting is monotone)."""
    low, high = 0, len(stream)
    while low < high:
        middle = (low + high + 1) // 2
        counts: dict[str, int] = {}
        for request_type in stream[:middle]:
            counts[request_type] = counts.get(request_type, 0) + 1
        if oracle.fits(counts):
            low = middle
        else:
            high = middle - 1
    return low


@dataclass(frozen=True)
class ChurnStream:
    """Arrivals (one per step) with their lifetimes in steps and sizes in memory slices."""

    requests: list[str]
    lifetimes: list[int]
    sizes: dict[str, int]
    warmup: int


@dataclass(frozen=True)
class ChurnResult:
    """Shares of the requests, and of their memory slices, accepted after the warm-up."""

    requests: float
    memory_slices: float


def churn_stream(node: PublishedNode, mix: Mix, steps: int, seed: int) -> ChurnStream:
    rng = random.Random(seed)
    requests = request_stream(mix, steps, seed + 1)
    sizes = {t: _size(node, t) for t, _ in mix}
    total_slices = sum(1 for value in node.totals if value == 1)  # memory slices of the node
    mean_size = sum(sizes[t] * w for t, w in mix) / sum(w for _, w in mix)
    mean_life = OFFERED_LOAD * total_slices / mean_size
    lifetimes = [max(1, round(rng.expovariate(1 / mean_life))) for _ in range(steps)]
    return ChurnStream(requests, lifetimes, sizes, warmup=int(3 * mean_life))


def churn_acceptance(
    stream: ChurnStream,
    admit: Callable[[str], object | None],
    release: Callable[[object], None],
) -> ChurnResult:
    """Replay the stream; `admit` returns a handle (accepted) or None (refused)."""
    departures: dict[int, list[object]] = {}
    accepted = offered = accepted_slices = offered_slices = 0
    for step, (request_type, life) in enumerate(
        zip(stream.requests, stream.lifetimes, strict=True)
    ):
        for handle in departures.pop(step, []):
            release(handle)
        handle = admit(request_type)
        if handle is not None:
            departures.setdefault(step + life, []).append(handle)
        if step >= stream.warmup:
            size = stream.sizes[request_type]
            offered += 1
            offered_slices += size
            if handle is not None:
                accepted += 1
                accepted_slices += size
    return ChurnResult(accepted / max(offered, 1), accepted_slices / max(offered_slices, 1))


def first_fit_churn(
    node: PublishedNode, stream: ChurnStream, policy: str, order: SliceOrder, seed: int
) -> ChurnResult:
    fit = FirstFit(node, policy_slices(node, policy), order, seed)

    def release(handle: object) -> None:
        assert isinstance(handle, SimDevice)
        fit.release(handle)

    return churn_acceptance(stream, fit.allocate, release)


def oracle_churn(oracle: Oracle, stream: ChurnStream) -> ChurnResult:
    running: dict[str, int] = {}

    def admit(request_type: str) -> object | None:
        running[request_type] = running.get(request_type, 0) + 1
        if oracle.fits(running):
            return request_type
        running[request_type] -= 1
        return None

    def release(handle: object) -> None:
        running[str(handle)] -= 1

    return churn_acceptance(stream, admit, release)


def verify_against_allocator(node: PublishedNode, stream: list[str]) -> int:
    """Replay `stream` with the project's scheduler port (fixed slice order) and check
    that it picks what `FirstFit` picks; returns the number of decisions compared."""
    from dra_driver.scheduling.allocator import AllocatedState, Allocator, Features, Node

    classes = [
        _device_class("gpu.nvidia.com", "gpu"),
        _device_class("mig.nvidia.com", "mig"),
    ]
    allocated = AllocatedState()
    allocator = Allocator(
        list(node.raw_slices),
        classes,
        features=Features(partitionable_devices=True, release="1.35"),
        allocated=allocated,
    )
    fit = FirstFit(node, policy_slices(node, "ours"), "fixed", 0)
    k8s_node = Node(node.name, {})
    for index, request_type in enumerate(stream):
        claim = _claim(index, request_type)
        results = allocator.allocate(k8s_node, [claim])
        expected = fit.allocate(request_type)
        got = None if results is None else results[0]["devices"]["results"][0]["device"]
        want = None if expected is None else expected.name
        if got != want:
            raise AssertionError(
                f"{node.name}: request {index} ({request_type}): scheduler port picked "
                f"{got}, first-fit simulator {want}"
            )
        if results is not None:
            allocated.add({**claim, "status": {"allocation": results[0]}})
    return len(stream)


def _device_class(name: str, kind: str) -> dict[str, Any]:
    expression = f"device.driver == '{DOMAIN}' && device.attributes['{DOMAIN}'].type == '{kind}'"
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": name},
        "spec": {"selectors": [{"cel": {"expression": expression}}]},
    }


def _claim(index: int, request_type: str) -> dict[str, Any]:
    exactly: dict[str, Any] = {"deviceClassName": "gpu.nvidia.com"}
    if request_type != FULL_GPU:
        expression = f"device.attributes['{DOMAIN}'].profile == '{request_type}'"
        exactly = {
            "deviceClassName": "mig.nvidia.com",
            "selectors": [{"cel": {"expression": expression}}],
        }
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": f"claim-{index}", "namespace": "bench", "uid": f"uid-{index}"},
        "spec": {"devices": {"requests": [{"name": "mig", "exactly": exactly}]}},
    }


def run(options: BenchOptions) -> BenchResult:
    """The `python -m bench placement` entry: `--cycles` sets the number of streams."""
    results = measure(streams=options.cycles)
    return BenchResult(
        name=NAME,
        title=f"{NAME}: {DESCRIPTION}",
        headline=format_table(results).splitlines(),
        data=results,
    )


def measure(
    *, seed: int = DEFAULT_SEED, quick: bool = False, streams: int | None = None
) -> dict[str, Any]:
    """Measure every node and policy; returns the numbers as a dict (JSON-ready).

    `quick` is a smoke run (fewer streams, one short churn run); `streams`
    overrides the number of request streams.
    """
    streams = streams or (60 if quick else 300)
    churn_runs = 1 if quick else 4
    churn_steps = 1200 if quick else 3000
    started = time.monotonic()
    results: dict[str, Any] = {
        "seed": seed,
        "streams": streams,
        "churn": {"runs": churn_runs, "steps": churn_steps, "offered_load": OFFERED_LOAD},
        "nodes": {},
    }
    for node_name, (spec, mix) in NODES.items():
        published = {layout: publish(spec, f"bench-{node_name}", layout) for layout in LAYOUTS}
        node = published["v1.35"]
        verified = verify_against_allocator(node, request_stream(mix, 24, seed))
        oracle = Oracle.of(node, [t for t, _ in mix])
        samples = [request_stream(mix, 80, seed + i) for i in range(streams)]
        churns = [churn_stream(node, mix, churn_steps, seed + 1000 + i) for i in range(churn_runs)]
        rows: dict[str, dict[str, float]] = {}
        for label, policy, layout, order in ROWS:
            shape = published[layout]
            rows[label] = _row(
                [
                    before_first_refusal(shape, stream, policy, order, seed + i)
                    for i, stream in enumerate(samples)
                ],
                [first_fit_churn(shape, c, policy, order, seed + i) for i, c in enumerate(churns)],
            )
        rows["oracle (hindsight)"] = _row(
            [oracle_before_first_refusal(oracle, stream) for stream in samples],
            [oracle_churn(oracle, c) for c in churns],
        )
        results["nodes"][node_name] = {
            "mix": dict(mix),
            "devices": len(node.devices),
            "device_slices": len(node.slices),
            "verified_decisions": verified,
            "policies": rows,
        }
    results["seconds"] = round(time.monotonic() - started, 1)
    return results


def _row(first: list[int], churn: list[ChurnResult]) -> dict[str, float]:
    return {
        "accepted_before_first_refusal": _mean(first),
        "churn_requests_accepted": _mean(c.requests for c in churn),
        "churn_memory_slices_accepted": _mean(c.memory_slices for c in churn),
    }


def _mean(values: Iterable[float]) -> float:
    items = list(values)
    return round(sum(items) / len(items), 4) if items else 0.0


def format_table(results: dict[str, Any]) -> str:
    lines = [
        f"placement benchmark (seed {results['seed']}, "
        f"{results['streams']} streams; churn {results['churn']['runs']}x"
        f"{results['churn']['steps']} steps at load {results['churn']['offered_load']})",
    ]
    for node_name, node in results["nodes"].items():
        lines.append("")
        lines.append(
            f"{node_name}: {node['devices']} devices in {node['device_slices']} device slices "
            "(v1.35); "
            f"simulator = scheduler port on {node['verified_decisions']} decisions"
        )
        lines.append(
            f"  {'policy (slices in random order)':<44} {'before 1st refusal':>18} "
            f"{'churn: requests':>16} {'churn: slices':>14}"
        )
        for label, row in node["policies"].items():
            lines.append(
                f"  {label:<44} {row['accepted_before_first_refusal']:>18.2f} "
                f"{row['churn_requests_accepted']:>16.1%} "
                f"{row['churn_memory_slices_accepted']:>14.1%}"
            )
    lines.append("")
    lines.append(f"({results['seconds']} s)")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.placement", description=__doc__)
    parser.add_argument("--json", action="store_true", help="print the numbers as JSON")
    parser.add_argument("--quick", action="store_true", help="fewer streams (a smoke run)")
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED)
    args = parser.parse_args(argv)
    results = measure(seed=args.seed, quick=args.quick)
    print(json.dumps(results, indent=2) if args.json else format_table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
