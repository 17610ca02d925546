"""Deciding what a claim's Prepare must do, without doing any of it.

Given an allocated claim, the devices this node publishes and the current
checkpoint, `plan_claim` checks that every result names a device we own,
that no other prepared claim holds it or overlaps it (a whole GPU and a
MIG device on it, or two MIG placements sharing memory slices), that shares
of a shared device fit its capacity (`kubelet_plugin.sharing.shares`), that its opaque
configs decode and can be honoured, and returns the devices to prepare. It
is pure so every refusal can be tested directly; the I/O (CDI files,
checkpoint writes) happens in `kubelet_plugin.driver`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from dra_driver.claims.allocated import AllocatedClaim, DeviceResult
from dra_driver.claims.checkpoint import Checkpoint, PreparedDevice
from dra_driver.claims.device_config import (
    DeviceConfig,
    effective_configs,
    mps_config_of,
    unsupported_sharing,
)
from dra_driver.claims.mps import MpsLimits, claim_limits, one_mps_device_per_claim
from dra_driver.container import cdi
from dra_driver.errors import ClaimError
from dra_driver.hardware.nvml.interface import Placement
from dra_driver.node.devices import AllocatableDevice
from kubelet_plugin.mig_lifecycle import mig_target
from kubelet_plugin.sharing.shares import check_shares


@dataclass(frozen=True)
class PlannedDevice:
    """One allocation result this node must prepare.

    `mps` is set when the device is shared through MPS: the claim's own limits
    on it (and `multi_user`, the daemon's mode).
    """

    result: DeviceResult
    device: AllocatableDevice
    mps: MpsLimits | None = None
    multi_user: bool = False


def plan_claim(
    claim: AllocatedClaim,
    *,
    pool_name: str,
    devices: Mapping[str, AllocatableDevice],
    checkpoint: Checkpoint,
) -> list[PlannedDevice]:
    """Check a claim against the node's devices and the prepared claims.

    Raises ClaimError naming the claim and the offending result.
    """
    check_shares(claim, devices, checkpoint)
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
            owner = checkpoint.device_owner(result.pool, result.device, exclude_uid=claim.uid)
            if owner is not None:
                raise ClaimError(
                    f"{where}[{index}]: device {result.device!r} is already prepared for claim "
                    f"{_describe_owner(checkpoint, owner)}; refusing to hand it out twice"
                )
        planned.append(PlannedDevice(result=result, device=device))
    _refuse_overlaps(claim, planned, checkpoint, devices)
    configs = effective_configs(claim, {item.device.name: item.device.kind for item in planned})
    problem = unsupported_sharing(claim, configs)
    if problem is not None:
        raise ClaimError(problem)
    return _with_mps(claim, planned, configs)


def _with_mps(
    claim: AllocatedClaim,
    planned: list[PlannedDevice],
    configs: Mapping[str, DeviceConfig | None],
) -> list[PlannedDevice]:
    """Attach each MPS device's limits (from its mpsConfig and what it consumed)."""
    out = []
    for index, item in enumerate(planned):
        config = mps_config_of(item.result, configs)
        if config is None:
            out.append(item)
            continue
        device = item.device
        uuid = device.mig.uuid if device.mig is not None else device.gpu.uuid
        limits = claim_limits(
            config,
            device_uuid="" if device.dynamic is not None else uuid,
            device_index=index,
            capacity=device.capacity,
            consumed=item.result.consumed_capacity,
            where=f"{claim.ref}: request {item.result.request!r} on {device.name}",
        )
        out.append(replace(item, mps=limits, multi_user=config.multi_user))
    one_mps_device_per_claim(claim.ref, (i.device.name for i in out if i.mps is not None))
    return out


def prepared_device(
    claim_uid: str, result: DeviceResult, device: AllocatableDevice | None
) -> PreparedDevice:
    """The checkpoint record of one allocated device, before any side effect.

    A dynamic MIG device gets a "planned" MIG record (profile and placement);
    `device` None (not published any more) records the result alone.
    """
    target = None if device is None else mig_target(device)
    return PreparedDevice(
        request_names=(result.base_request,),
        pool=result.pool,
        device=result.device,
        cdi_device_ids=(cdi.qualified_device_id(claim_uid, cdi_device(result)),),
        share_id=result.share_id,
        admin_access=result.admin_access,
        consumed_capacity=result.consumed_capacity,
        mig=None if target is None else target.planned_record(),
    )


def cdi_device(result: DeviceResult) -> str:
    """The claim's CDI device for a result: one per device, or one per share of a shared one
    (`<device>-<shareID>`)."""
    share = result.share_id
    return result.device if share is None else f"{result.device}-{share}"


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
    if device.kind == "gpu":
        return _Footprint(device.gpu.uuid, None)
    return None
