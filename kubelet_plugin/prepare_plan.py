"""Deciding what a claim's Prepare must do, without doing any of it.

Given an allocated claim, the devices this node publishes and the current
checkpoint, `plan_claim` checks that every result names a device we own,
that no other prepared claim holds it (the overlap guard), that its opaque
configs decode and can be honoured, and returns the devices to prepare. It
is pure so every refusal can be tested directly; the I/O (CDI files,
checkpoint writes) happens in `kubelet_plugin.driver`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from dra_driver.checkpoint import Checkpoint
from dra_driver.claims import AllocatedClaim, DeviceResult
from dra_driver.device_config import effective_configs, unsupported_sharing
from dra_driver.devices import AllocatableDevice
from dra_driver.errors import ClaimError


@dataclass(frozen=True)
class PlannedDevice:
    """One allocation result this node must prepare."""

    result: DeviceResult
    device: AllocatableDevice


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
        if not result.admin_access:
            owner = checkpoint.device_owner(result.pool, result.device)
            if owner is not None and owner != claim.uid:
                raise ClaimError(
                    f"{where}[{index}]: device {result.device!r} is already prepared for claim "
                    f"{_describe_owner(checkpoint, owner)}; refusing to hand it out twice"
                )
        planned.append(PlannedDevice(result=result, device=device))
    configs = effective_configs(claim, {item.device.name: item.device.kind for item in planned})
    problem = unsupported_sharing(claim, configs)
    if problem is not None:
        raise ClaimError(problem)
    return planned


def _describe_owner(checkpoint: Checkpoint, uid: str) -> str:
    entry = checkpoint.claims.get(uid)
    if entry is None:
        return uid
    return f"{entry.namespace}/{entry.name} (uid {uid})"
