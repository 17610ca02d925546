"""Devices that other claims already hold, as the scheduler tracks them.

The scheduler feeds its allocator the devices allocated to any claim, minus
results with `adminAccess: true` (admin access never makes a device busy),
plus, with consumable capacity, the share IDs and the summed consumed capacity
of multi-allocatable devices. `AllocatedState` is built from claims that carry
`status.allocation`, remembers which claim holds what (so `explain` can say
"allocated to claim X"), and can grow or shrink one claim at a time, which is
how a simulator places pods one after another.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from fractions import Fraction
from typing import Any

from dra_driver.errors import AllocationError
from dra_driver.scheduling.allocator.pools import DeviceID
from dra_driver.scheduling.allocator.quantities import to_quantity


def claim_key(claim: Mapping[str, Any]) -> str:
    """`namespace/name` (or just the name) of a ResourceClaim dict."""
    meta = claim.get("metadata") or {}
    name = meta.get("name") or meta.get("generateName") or "<unnamed>"
    namespace = meta.get("namespace")
    return f"{namespace}/{name}" if namespace else str(name)


class AllocatedState:
    """Dedicated devices, shared (multi-allocatable) devices and consumed capacity in use."""

    def __init__(self, claims: Iterable[Mapping[str, Any]] = ()) -> None:
        #: device -> claim holding it exclusively
        self.dedicated: dict[DeviceID, str] = {}
        #: device -> [(shareID, claim)] for results that carry a shareID
        self.shared: dict[DeviceID, list[tuple[str, str]]] = {}
        #: device -> capacity name -> summed consumedCapacity of its shares
        self.consumed_capacity: dict[DeviceID, dict[str, Fraction]] = {}
        #: bumped on every change, so caches derived from this state can notice
        self.version = 0
        self._claims: dict[str, Mapping[str, Any]] = {}
        for claim in claims:
            self.add(claim)

    def __contains__(self, claim: str) -> bool:
        return claim in self._claims

    def add(self, claim: Mapping[str, Any]) -> None:
        """Record the devices of a claim with `status.allocation` (no-op without one).

        Raises AllocationError if the claim is already recorded, or if its
        allocation holds a device exclusively that another claim holds.
        """
        allocation = (claim.get("status") or {}).get("allocation")
        if not allocation:
            return
        key = claim_key(claim)
        if key in self._claims:
            raise AllocationError(f"ResourceClaim {key}: already recorded as allocated")
        results = (allocation.get("devices") or {}).get("results") or []
        for index, result in enumerate(results):
            if result.get("adminAccess"):
                continue
            device: DeviceID = (result["driver"], result["pool"], result["device"])
            share_id = result.get("shareID")
            if share_id:
                continue
            holder = self.dedicated.get(device)
            if holder is not None:
                raise AllocationError(
                    f"ResourceClaim {key}: status.allocation.devices.results[{index}] device "
                    f"{'/'.join(device)} is already allocated to ResourceClaim {holder}"
                )
        for index, result in enumerate(results):
            if result.get("adminAccess"):
                continue
            device = (result["driver"], result["pool"], result["device"])
            share_id = result.get("shareID")
            if not share_id:
                self.dedicated[device] = key
                continue
            self.shared.setdefault(device, []).append((str(share_id), key))
            consumed = result.get("consumedCapacity")
            if consumed is not None:
                total = self.consumed_capacity.setdefault(device, {})
                for name, raw in consumed.items():
                    where = (
                        f"ResourceClaim {key}: status.allocation.devices.results[{index}]"
                        f".consumedCapacity[{name}]"
                    )
                    total[name] = total.get(name, Fraction(0)) + to_quantity(raw, where).value
        self._claims[key] = claim
        self.version += 1

    def remove(self, claim: Mapping[str, Any] | str) -> None:
        """Forget a recorded claim (by dict or `namespace/name`); unknown claims are ignored."""
        key = claim if isinstance(claim, str) else claim_key(claim)
        recorded = self._claims.pop(key, None)
        if recorded is None:
            return
        self.dedicated = {d: k for d, k in self.dedicated.items() if k != key}
        shared: dict[DeviceID, list[tuple[str, str]]] = {}
        for device, shares in self.shared.items():
            kept = [share for share in shares if share[1] != key]
            if kept:
                shared[device] = kept
        self.shared = shared
        self.consumed_capacity = {}
        for other in self._claims.values():
            allocation = (other.get("status") or {}).get("allocation") or {}
            for index, result in enumerate((allocation.get("devices") or {}).get("results") or []):
                consumed = result.get("consumedCapacity")
                if result.get("adminAccess") or not result.get("shareID") or consumed is None:
                    continue
                device = (result["driver"], result["pool"], result["device"])
                total = self.consumed_capacity.setdefault(device, {})
                for name, raw in consumed.items():
                    where = (
                        f"ResourceClaim {claim_key(other)}: status.allocation.devices"
                        f".results[{index}].consumedCapacity[{name}]"
                    )
                    total[name] = total.get(name, Fraction(0)) + to_quantity(raw, where).value
        self.version += 1

    def withhold(self, device: DeviceID, holder: str) -> None:
        """Count `device` as held by claim `holder` though no allocation names it: the
        node's plugin withdrew it from its slices because of that claim (the other form of
        a GPU passed through to a VM). Freed with `holder` (`remove`)."""
        if device not in self.dedicated:
            self.dedicated[device] = holder
            self.version += 1

    def holder(self, device: DeviceID) -> str | None:
        """The claim holding a device exclusively or, failing that, its first share."""
        holder = self.dedicated.get(device)
        if holder is not None:
            return holder
        shares = self.shared.get(device)
        return shares[0][1] if shares else None

    def is_allocated(self, device: DeviceID) -> bool:
        """Upstream `IsDeviceAllocated`: dedicated, shared, or with consumed capacity."""
        return device in self.dedicated or device in self.shared or device in self.consumed_capacity
