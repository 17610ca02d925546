"""Which published device each result of a claim names, and whether it is free.

`plan_devices` checks that every result names a device this node publishes,
in its pool, that no other placed claim holds it (a share of a shared
device is `shares`' business) or overlaps it: a whole GPU (or its vfio
device) and a MIG device, share or vfio device of it, or two MIG placements
sharing memory slices. The scheduler's counters
should have prevented an overlap, so the error names both devices and claims.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from dra_driver.claims.allocated import AllocatedClaim
from dra_driver.claims.checkpoint import Checkpoint, PreparedDevice
from dra_driver.errors import ClaimError
from dra_driver.hardware.nvml.interface import Placement
from dra_driver.node.devices import AllocatableDevice
from dra_driver.planning.plan import PlannedDevice


def plan_devices(
    claim: AllocatedClaim,
    *,
    pool_name: str,
    devices: Mapping[str, AllocatableDevice],
    placed: Checkpoint,
) -> list[PlannedDevice]:
    """The published device of each result of `claim`, refused if another placed claim holds
    or overlaps it. Raises ClaimError naming the claim and the offending result."""
    planned: list[PlannedDevice] = []
    for index, result in enumerate(claim.results):
        where = f"ResourceClaim {claim.namespace}/{claim.name}: status.allocation.devices.results"
        if result.pool != pool_name:
            raise ClaimError(
                f"{where}[{index}] is from pool {result.pool!r}, but this node publishes pool "
                f"{pool_name!r}: the claim was allocated for another node"
            )
        device = devices.get(result.device)
        if device is None:
            raise ClaimError(
                f"{where}[{index}] names device {result.device!r}, which this node does not "
                "publish (it may have been removed or repartitioned since allocation)"
            )
        if not result.admin_access and result.share_id is None:
            # Shares, and exclusive results on shared devices: check_shares.
            owner = placed.device_owner(result.pool, result.device, exclude_uid=claim.uid)
            if owner is not None:
                raise ClaimError(
                    f"{where}[{index}]: device {result.device!r} is already prepared for claim "
                    f"{_describe_owner(placed, owner)}; refusing to hand it out twice"
                )
        planned.append(PlannedDevice(result=result, device=device))
    _refuse_overlaps(claim, planned, placed, devices)
    return planned


def _describe_owner(checkpoint: Checkpoint, uid: str) -> str:
    entry = checkpoint.claims.get(uid)
    if entry is None:
        return uid
    return f"{entry.namespace}/{entry.name} (uid {uid})"


def _refuse_overlaps(
    claim: AllocatedClaim,
    planned: Sequence[PlannedDevice],
    checkpoint: Checkpoint,
    devices: Mapping[str, AllocatableDevice],
) -> None:
    """Refuse a claim whose MIG slices or whole GPUs collide with another claim's or
    its own (see the module docstring); nothing has been touched yet."""
    held: list[tuple[_Footprint, str, str]] = []  # footprint, device name, holder
    for uid, prepared in checkpoint.held_devices():  # one holder per device is enough
        if uid == claim.uid:
            continue  # the claim itself, half-prepared: its devices are re-planned below
        footprint = _prepared_footprint(prepared, devices)
        if footprint is not None:
            entry = checkpoint.claims[uid]
            held.append(
                (
                    footprint,
                    prepared.device,
                    f"prepared for claim {entry.namespace}/{entry.name} (uid {entry.uid})",
                )
            )
    where = f"ResourceClaim {claim.namespace}/{claim.name}: status.allocation.devices.results"
    for index, item in enumerate(planned):
        footprint = None if item.result.admin_access else _footprint(item.device)
        if footprint is None:
            continue
        for other, name, holder in held:
            # The same device twice is plan_claim's business (shared or refused there).
            if name != item.device.name and footprint.collides(other):
                raise ClaimError(
                    f"{where}[{index}]: device {item.device.name!r} ({footprint}) overlaps "
                    f"device {name!r} ({other}) {holder}; the allocation is inconsistent, "
                    "refusing to prepare it"
                )
        held.append((footprint, item.device.name, "of the same claim"))


def _prepared_footprint(
    prepared: PreparedDevice, devices: Mapping[str, AllocatableDevice]
) -> _Footprint | None:
    mig = prepared.mig
    if mig is not None:
        if not mig.created_by_us:
            return None  # an existing (static) MIG device: nothing is created for it
        placement = Placement(mig.placement_start, mig.placement_size)
        return _Footprint(mig.parent_uuid, placement)
    device = devices.get(prepared.device)
    return None if device is None else _footprint(device)


@dataclass(frozen=True)
class _Footprint:
    """What a device takes of its GPU: some memory slices, or (placement None) all of it."""

    gpu_uuid: str
    placement: Placement | None

    def collides(self, other: _Footprint) -> bool:
        if self.gpu_uuid != other.gpu_uuid:
            return False
        if self.placement is None or other.placement is None:
            return True
        return self.placement.overlaps(other.placement)

    def __str__(self) -> str:
        if self.placement is None:
            return f"the whole GPU {self.gpu_uuid}"
        last = self.placement.start + self.placement.size - 1
        return f"memory slices {self.placement.start}..{last} of GPU {self.gpu_uuid}"


def _footprint(device: AllocatableDevice) -> _Footprint | None:
    """A dynamic MIG device's slices or a whole GPU; None for existing MIG devices."""
    if device.dynamic is not None:
        return _Footprint(device.dynamic.parent_uuid, device.dynamic.placement)
    if device.kind in ("gpu", "vfio"):  # a passthrough GPU is the whole GPU too
        return _Footprint(device.gpu.uuid, None)
    return None
