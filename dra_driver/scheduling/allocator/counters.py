"""Shared counters of partitionable devices (DRAPartitionableDevices).

Partitions of one physical GPU (MIG profiles, the full GPU) are published as
separate devices that consume shared counters (memory slices, compute slices,
...). A device fits only if, for every counter of its counter domain, the
counter's value minus what already-allocated devices consume minus what the
devices picked so far in this attempt consume stays >= 0. Already-allocated
consumption depends only on the allocated state, so it is computed once per
domain and state version; the in-attempt part is a ledger that the search
reserves into and releases from while backtracking.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from fractions import Fraction

from dra_driver.kube.quantity import readable
from dra_driver.scheduling.allocator.pools import CounterDomain, DeviceID, DeviceRecord
from dra_driver.scheduling.allocator.state import AllocatedState
from dra_driver.scheduling.allocator.trace import CounterConsumer, CountersExhausted, DeviceRef

CounterKey = tuple[str, str]  # (counter set, counter)
_ZERO = Fraction(0)


@dataclass(slots=True)
class Availability:
    """What is left of a domain's counters after the already-allocated devices."""

    left: dict[CounterKey, Fraction]
    consumers: dict[CounterKey, list[tuple[DeviceID, Fraction]]] = field(default_factory=dict)
    #: counters already over-consumed by allocated devices (sorted); they block every
    #: device of the domain that consumes counters, as upstream checks all counters
    negative: list[CounterKey] = field(default_factory=list)


def availability(domain: CounterDomain, state: AllocatedState) -> Availability:
    """Counter values minus the consumption of allocated member devices (may go negative)."""
    left: dict[CounterKey, Fraction] = {
        (set_name, counter): value
        for set_name, counters in domain.counter_sets.items()
        for counter, value in counters.items()
    }
    consumers: dict[CounterKey, list[tuple[DeviceID, Fraction]]] = {}
    for device in domain.members:
        if not device.consumes or not state.is_allocated(device.id):
            continue
        for set_name, counters in device.consumes:
            for counter, amount in counters.items():
                key = (set_name, counter)
                if key not in left:
                    continue
                left[key] -= amount
                consumers.setdefault(key, []).append((device.id, amount))
    negative = sorted(key for key, value in left.items() if value < 0)
    return Availability(left, consumers, negative)


class CounterLedger:
    """Counters consumed by the devices picked in one allocation attempt."""

    def __init__(self, lookup: Callable[[CounterDomain], Availability]) -> None:
        self._lookup = lookup
        self._consumed: dict[int, dict[CounterKey, Fraction]] = {}
        # Devices reserved in this attempt, with the claim and request they serve.
        self._holders: dict[int, list[tuple[DeviceRecord, str, str]]] = {}

    def reserve(
        self, domain: CounterDomain, device: DeviceRecord, claim: str, request: str
    ) -> CounterKey | None:
        """Add the device's consumption; None if every counter of the domain still fits,
        else the first (sorted) counter that would not, with nothing reserved.

        Upstream checks every counter of the domain after adding the device. A
        counter the device does not consume can only fail if allocated devices
        already over-consumed it (reservations are checked as they are made),
        so checking the device's own counters plus `Availability.negative` is
        the same test.
        """
        available = self._lookup(domain)
        left = available.left
        consumed = self._consumed.setdefault(id(domain), {})
        failing: CounterKey | None = available.negative[0] if available.negative else None
        for set_name, counters in device.consumes:
            for counter, amount in counters.items():
                key = (set_name, counter)
                total = consumed.get(key, _ZERO) + amount
                consumed[key] = total
                limit = left.get(key)
                if limit is not None and limit < total and (failing is None or key < failing):
                    failing = key
        if failing is not None:
            self._subtract(consumed, device)
            return failing
        self._holders.setdefault(id(domain), []).append((device, claim, request))
        return None

    def release(self, domain: CounterDomain, device: DeviceRecord) -> None:
        """Undo a successful `reserve` of the same device."""
        self._subtract(self._consumed[id(domain)], device)
        holders = self._holders[id(domain)]
        for index in range(len(holders) - 1, -1, -1):
            if holders[index][0] is device:
                del holders[index]
                break

    @staticmethod
    def _subtract(consumed: dict[CounterKey, Fraction], device: DeviceRecord) -> None:
        for set_name, counters in device.consumes:
            for counter, amount in counters.items():
                consumed[(set_name, counter)] -= amount

    def explain(
        self,
        domain: CounterDomain,
        device: DeviceRecord,
        key: CounterKey,
        state: AllocatedState,
    ) -> CountersExhausted:
        """Why `reserve` refused `device`: needed vs. available, and who holds the counter."""
        available = self._lookup(domain)
        in_attempt = self._consumed.get(id(domain), {}).get(key, _ZERO)
        needed = sum(
            (
                counters.get(key[1], _ZERO)
                for set_name, counters in device.consumes
                if set_name == key[0]
            ),
            _ZERO,
        )
        consumers = [
            CounterConsumer(DeviceRef(*device_id), state.holder(device_id) or "")
            for device_id, _ in available.consumers.get(key, [])
        ]
        consumers.extend(
            CounterConsumer(DeviceRef(*holder.id), claim, request)
            for holder, claim, request in self._holders.get(id(domain), [])
            if any(s == key[0] and key[1] in c for s, c in holder.consumes)
        )
        return CountersExhausted(
            domain=domain.label,
            counter_set=key[0],
            counter=key[1],
            needed=readable(needed),
            available=readable(available.left[key] - in_attempt),
            consumers=tuple(consumers),
        )
