"""ResourceSlices indexed once, and the resource pools a node can allocate from.

Every allocation starts from "which devices can this node reach?". The answer
depends only on the slices and the node, so the slices are parsed and indexed
once (`SliceIndex`) and the per-node answer (`NodePools`) is computed once per
node and reused for every claim. Gathering follows the scheduler's
`GatherPools`: node matching, newest generation per pool, complete /
incomplete / obsolete pools, and invalid pools (duplicate device names, broken
counter references).

Pool order: upstream walks a Go map, so its order is unspecified. Here pools
are sorted by (driver, pool name) so results are reproducible; slices keep
their input order within a pool and devices keep their order within a slice.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import TYPE_CHECKING, Any

from dra_driver.errors import AllocationError
from dra_driver.scheduling.allocator.features import Features
from dra_driver.scheduling.allocator.nodes import Node, node_matches
from dra_driver.scheduling.allocator.quantities import to_quantity

if TYPE_CHECKING:
    from dra_driver.scheduling.cel import DeviceView

DeviceID = tuple[str, str, str]
PoolID = tuple[str, str]


def device_id_str(device_id: DeviceID) -> str:
    """`driver/pool/device`, the form upstream error messages use."""
    return "/".join(device_id)


class SliceRecord:
    """One ResourceSlice with the fields the allocator reads, parsed once."""

    __slots__ = (
        "all_nodes",
        "count",
        "counter_set_names",
        "counter_sets",
        "devices",
        "driver",
        "generation",
        "name",
        "node_name",
        "node_selector",
        "order",
        "per_device",
        "pool",
        "raw",
    )

    def __init__(self, raw: Mapping[str, Any], order: int) -> None:
        spec = raw.get("spec") or {}
        meta = raw.get("metadata") or {}
        self.raw = raw
        self.order = order
        self.name: str = meta.get("name") or meta.get("generateName") or f"#{order}"
        where = f"ResourceSlice {self.name}"
        self.driver: str = spec.get("driver") or ""
        if not self.driver:
            raise AllocationError(f"{where}: spec.driver is not set")
        pool = spec.get("pool") or {}
        self.pool: str = pool.get("name") or ""
        self.generation: int = int(pool.get("generation") or 0)
        self.count: int = int(pool.get("resourceSliceCount") or 0)
        self.node_name: str = spec.get("nodeName") or ""
        self.all_nodes: bool = bool(spec.get("allNodes"))
        self.node_selector: Mapping[str, Any] | None = spec.get("nodeSelector")
        self.per_device: bool = bool(spec.get("perDeviceNodeSelection"))
        self.counter_set_names: list[str] = []
        self.counter_sets: dict[str, dict[str, Fraction]] = {}
        for index, counter_set in enumerate(spec.get("sharedCounters") or []):
            set_name = counter_set.get("name") or ""
            self.counter_set_names.append(set_name)
            self.counter_sets[set_name] = _counters(
                counter_set.get("counters"), f"{where}: spec.sharedCounters[{index}]"
            )
        self.devices: list[DeviceRecord] = [
            DeviceRecord(self, index, device)
            for index, device in enumerate(spec.get("devices") or [])
        ]

    @property
    def pool_id(self) -> PoolID:
        return (self.driver, self.pool)

    @property
    def has_counters(self) -> bool:
        return bool(self.counter_set_names)

    def targets(self, node: Node) -> bool:
        """Whether this slice is relevant for `node` (slice-level node selection)."""
        where = f"ResourceSlice {self.name}"
        if self.node_name or self.all_nodes or self.node_selector is not None:
            return node_matches(
                node, self.node_name, self.all_nodes, self.node_selector, where=where
            )
        if self.per_device:
            return any(device.reachable_from(node) for device in self.devices)
        # Some future node-selection mode: not ours to interpret.
        return False


class DeviceRecord:
    """One device of a slice, with parsed counters and a lazily built CEL view."""

    __slots__ = (
        "allow_multiple",
        "attributes",
        "binding_conditions",
        "binding_failure_conditions",
        "binds_to_node",
        "capacity",
        "consumes",
        "id",
        "index",
        "name",
        "parsed_capacity",
        "raw",
        "slice",
        "taints",
        "view",
    )

    def __init__(self, slice_: SliceRecord, index: int, raw: Mapping[str, Any]) -> None:
        self.slice = slice_
        self.index = index
        self.raw = raw
        self.name: str = raw.get("name") or ""
        self.id: DeviceID = (slice_.driver, slice_.pool, self.name)
        self.attributes: Mapping[str, Mapping[str, Any]] = raw.get("attributes") or {}
        self.capacity: Mapping[str, Mapping[str, Any]] = raw.get("capacity") or {}
        self.taints: Sequence[Mapping[str, Any]] = raw.get("taints") or []
        self.allow_multiple: bool = bool(raw.get("allowMultipleAllocations"))
        self.binding_conditions: Sequence[str] = raw.get("bindingConditions") or []
        self.binding_failure_conditions: Sequence[str] = raw.get("bindingFailureConditions") or []
        self.binds_to_node: bool = bool(raw.get("bindsToNode"))
        where = f"ResourceSlice {slice_.name}: device {self.name}"
        self.consumes: list[tuple[str, dict[str, Fraction]]] = [
            (
                consumption.get("counterSet") or "",
                _counters(consumption.get("counters"), f"{where}: consumesCounters[{i}]"),
            )
            for i, consumption in enumerate(raw.get("consumesCounters") or [])
        ]
        self.view: DeviceView | None = None
        #: filled by `capacity.capacity_specs` on first use
        self.parsed_capacity: dict[str, Any] | None = None

    def reachable_from(self, node: Node) -> bool:
        """Per-device node selection (only meaningful in perDeviceNodeSelection slices)."""
        return node_matches(
            node,
            self.raw.get("nodeName") or "",
            bool(self.raw.get("allNodes")),
            self.raw.get("nodeSelector"),
            where=f"ResourceSlice {self.slice.name}: device {self.name}",
        )


def _counters(raw: Mapping[str, Any] | None, where: str) -> dict[str, Fraction]:
    result: dict[str, Fraction] = {}
    for name, counter in (raw or {}).items():
        result[name] = to_quantity((counter or {}).get("value", "0"), f"{where}: {name}").value
    return result


class CounterDomain:
    """A set of counter sets plus the devices whose allocation consumes them.

    [1.35] one domain per pool (counter-only slices, devices of every slice of
    the pool at that generation); [1.34] one domain per slice (the slice's own
    sharedCounters and its own devices).
    """

    __slots__ = ("counter_sets", "label", "members")

    def __init__(
        self, label: str, counter_sets: dict[str, dict[str, Fraction]], members: list[DeviceRecord]
    ) -> None:
        self.label = label
        self.counter_sets = counter_sets
        self.members = members


@dataclass(slots=True, eq=False)
class Pool:
    """A resource pool as seen from one node."""

    driver: str
    name: str
    generation: int
    incomplete: bool = False
    invalid: bool = False
    invalid_reason: str = ""
    device_slices: list[SliceRecord] = field(default_factory=list)
    other_slices: list[SliceRecord] = field(default_factory=list)
    domain: CounterDomain | None = None
    slice_domains: dict[int, CounterDomain] = field(default_factory=dict)

    @property
    def id(self) -> PoolID:
        return (self.driver, self.name)

    def __str__(self) -> str:
        return f"{self.driver}/{self.name}"

    def domain_for(self, device: DeviceRecord) -> CounterDomain | None:
        """The counter domain a device of this pool consumes from."""
        if self.domain is not None:
            return self.domain
        return self.slice_domains.get(device.slice.order)


@dataclass(slots=True, eq=False)
class Candidate:
    """A device reachable from the node, in search order, with its pool and domain."""

    device: DeviceRecord
    pool: Pool
    domain: CounterDomain | None


@dataclass(slots=True)
class NodePools:
    """Everything gathered for one node: pools (sorted) and devices in search order."""

    pools: list[Pool]
    candidates: list[Candidate]
    invalid_pools: list[Pool]


class SliceIndex:
    """All slices parsed once and indexed by node and by pool."""

    def __init__(self, slices: Sequence[Mapping[str, Any]], features: Features) -> None:
        self.features = features
        self.slices = [SliceRecord(raw, order) for order, raw in enumerate(slices)]
        self.by_node: dict[str, list[SliceRecord]] = {}
        self.unnamed: list[SliceRecord] = []
        self.by_pool: dict[PoolID, list[SliceRecord]] = {}
        for record in self.slices:
            if record.node_name:
                self.by_node.setdefault(record.node_name, []).append(record)
            else:
                self.unnamed.append(record)
            self.by_pool.setdefault(record.pool_id, []).append(record)

    def gather(self, node: Node) -> NodePools:
        """Pools reachable from `node`, following the configured release's rules."""
        if self.features.release == "1.34":
            pools = self._gather_134(node)
        else:
            pools = self._gather_135(node)
        pools.sort(key=lambda pool: (pool.driver, pool.name))
        candidates: list[Candidate] = []
        for pool in pools:
            if self.features.release != "1.34" and (pool.incomplete or pool.invalid):
                # [1.35] never allocated from; [1.34] incomplete pools are used and
                # reaching an invalid pool's devices is a hard error in the search.
                continue
            for slice_ in pool.device_slices:
                for device in slice_.devices:
                    if slice_.per_device and not device.reachable_from(node):
                        # Kept out of the search; the per-device node check in
                        # upstream's isSelectable rejects it the same way.
                        continue
                    candidates.append(Candidate(device, pool, pool.domain_for(device)))
        return NodePools(pools, candidates, [pool for pool in pools if pool.invalid])

    def _take(self, record: SliceRecord, node: Node, *, counters_pool_wide: bool) -> bool:
        features = self.features
        if not features.partitionable_devices and (record.per_device or record.has_counters):
            return False
        if counters_pool_wide and record.has_counters:
            return True
        return record.targets(node)

    def _candidate_slices(self, node: Node) -> list[SliceRecord]:
        """Slices naming this node plus slices without a node name, in input order.

        Like newer upstream (`slicesOnNode` + `slicesShared`), slices for other
        nodes are only looked at through a pool this node can see; in particular a
        counter-only slice of another node's pool does not make that pool appear
        here.
        """
        chosen = self.by_node.get(node.name, []) + self.unnamed
        return sorted(chosen, key=lambda r: r.order)

    @staticmethod
    def _by_newest_generation(
        records: Sequence[SliceRecord],
    ) -> dict[PoolID, list[SliceRecord]]:
        taken: dict[PoolID, list[SliceRecord]] = {}
        for record in records:
            current = taken.get(record.pool_id)
            if current is None or record.generation > current[0].generation:
                taken[record.pool_id] = [record]
            elif record.generation == current[0].generation:
                current.append(record)
        return taken

    def _gather_134(self, node: Node) -> list[Pool]:
        records = [
            r for r in self._candidate_slices(node) if self._take(r, node, counters_pool_wide=False)
        ]
        pools: list[Pool] = []
        for (driver, name), slices in self._by_newest_generation(records).items():
            pool = Pool(driver, name, slices[0].generation, device_slices=slices)
            pool.incomplete = len(slices) != slices[0].count
            duplicate = _duplicate_device(slices)
            if duplicate:
                pool.invalid, pool.invalid_reason = True, f"duplicate device name {duplicate}"
            for slice_ in slices:
                if slice_.has_counters:
                    pool.slice_domains[slice_.order] = CounterDomain(
                        f"ResourceSlice {slice_.name}", slice_.counter_sets, list(slice_.devices)
                    )
            pools.append(pool)
        return pools

    def _gather_135(self, node: Node) -> list[Pool]:
        records = [
            r for r in self._candidate_slices(node) if self._take(r, node, counters_pool_wide=True)
        ]
        pools: list[Pool] = []
        for (driver, name), slices in self._by_newest_generation(records).items():
            generation, count = slices[0].generation, slices[0].count
            all_slices: list[SliceRecord] | None = None
            if len(slices) != count:
                same_pool = self.by_pool.get((driver, name), [])
                if any(r.generation > generation for r in same_pool):
                    continue  # obsolete: a newer generation is being published
                all_slices = [r for r in same_pool if r.generation == generation]
                if len(all_slices) != count:
                    pools.append(Pool(driver, name, generation, incomplete=True))
                    continue
            pools.append(self._build_135(driver, name, generation, slices, all_slices))
        return pools

    def _build_135(
        self,
        driver: str,
        name: str,
        generation: int,
        slices: list[SliceRecord],
        all_slices: list[SliceRecord] | None,
    ) -> Pool:
        partitionable = self.features.partitionable_devices
        if partitionable:
            device_slices = [r for r in slices if not r.has_counters]
            # Counter sets are pool-wide: they may sit in a slice for another node.
            counter_slices = [r for r in (all_slices or slices) if r.has_counters]
        else:
            device_slices, counter_slices = list(slices), []
        pool = Pool(driver, name, generation, device_slices=device_slices)
        duplicate = _duplicate_device(device_slices)
        if duplicate:
            pool.invalid, pool.invalid_reason = True, f"duplicate device name {duplicate}"
            return pool
        if not partitionable:
            return pool
        counter_sets: dict[str, dict[str, Fraction]] = {}
        for record in counter_slices:
            for set_name in record.counter_set_names:
                if set_name in counter_sets:
                    pool.invalid = True
                    pool.invalid_reason = f"duplicate counter set name {set_name}"
                    return pool
                counter_sets[set_name] = record.counter_sets[set_name]
        reason = _check_consumption(counter_sets, device_slices)
        if not reason and all_slices is not None and len(all_slices) != len(slices):
            taken = {id(r) for r in slices}
            pool.other_slices = [r for r in all_slices if id(r) not in taken and not r.has_counters]
            reason = _check_consumption(counter_sets, pool.other_slices)
        if reason:
            pool.invalid, pool.invalid_reason = True, reason
            pool.other_slices = []
            return pool
        members = [d for r in (*device_slices, *pool.other_slices) for d in r.devices]
        pool.domain = CounterDomain(f"pool {driver}/{name}", counter_sets, members)
        return pool


def _duplicate_device(slices: Sequence[SliceRecord]) -> str:
    seen: set[str] = set()
    for record in slices:
        for device in record.devices:
            if device.name in seen:
                return device.name
            seen.add(device.name)
    return ""


def _check_consumption(
    counter_sets: Mapping[str, Mapping[str, Fraction]], slices: Sequence[SliceRecord]
) -> str:
    for record in slices:
        for device in record.devices:
            for set_name, counters in device.consumes:
                counter_set = counter_sets.get(set_name)
                if counter_set is None:
                    return f"counter set {set_name} not found"
                for counter in counters:
                    if counter not in counter_set:
                        return f"counter {counter} not found in counter set {set_name}"
    return ""
