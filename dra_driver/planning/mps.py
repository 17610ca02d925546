"""The pure half of MPS sharing: each MPS device's limits, its daemon, and who else uses it.

`plan_mps_limits` gives each result whose config asks for MPS the claim's own
limits on that device (`dra_driver.claims.mps.claim_limits`: its mpsConfig
and what it consumed of a shared device) and the daemon's mode
(`multiUser`), and refuses a claim that asks for MPS on more than one device.

`MpsPlanner` (a `SharingPlanner`) records in the claim's checkpoint records
which control daemon each MPS device will use (`MpsRecord`, the intent saved
before the daemon is started), and refuses a claim whose `multiUser` differs
from that of the claims already using the device's daemon: one daemon runs
in one mode. A dynamic MIG device's daemon is known only once the device
exists; the plugin records its intent then (`mps_intent`), checking the mode
with the same `refuse_mode_conflict`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from dra_driver.claims.allocated import AllocatedClaim
from dra_driver.claims.checkpoint import Checkpoint, MpsRecord
from dra_driver.claims.device_config import mps_config_of
from dra_driver.claims.mps import DaemonPaths, claim_limits, one_mps_device_per_claim
from dra_driver.errors import ClaimError
from dra_driver.planning.plan import ClaimPlan, PlannedDevice

if TYPE_CHECKING:
    from dra_driver.claims.device_config_models import DeviceConfig


def plan_mps_limits(
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
        out.append(dataclasses.replace(item, mps=limits, multi_user=config.multi_user))
    one_mps_device_per_claim(claim.ref, (i.device.name for i in out if i.mps is not None))
    return out


class MpsPlanner:
    """The `SharingPlanner` of MPS; daemons live under `mps_root` (one directory per device)."""

    def __init__(self, mps_root: Path) -> None:
        self.mps_root = mps_root

    def __call__(self, plan: ClaimPlan, placed: Checkpoint) -> ClaimPlan:
        records = list(plan.records)
        for index, item in enumerate(plan.devices):
            if item.mps is None:
                continue
            record = records[index]
            others = (
                held.mps
                for uid, held in placed.device_holders(record.pool, record.device)
                if uid != plan.claim.uid and held.mps is not None
            )
            refuse_mode_conflict(item, others)
            device = item.device
            if device.dynamic is not None:
                continue  # its daemon is known once the MIG device exists
            uuid = device.gpu.uuid if device.mig is None else device.mig.uuid
            records[index] = dataclasses.replace(record, mps=mps_intent(item, uuid, self.mps_root))
        return plan.with_records(records)


def mps_intent(item: PlannedDevice, device_uuid: str, mps_root: Path) -> MpsRecord:
    """The daemon intent of an MPS device: which daemon (the one of `device_uuid`, the GPU or
    MIG device), and the claim's own limits."""
    assert item.mps is not None
    device = item.device
    return MpsRecord(
        device_uuid=device_uuid,
        gpu_uuid=device.gpu.uuid,
        daemon_dir=str(DaemonPaths.of(mps_root, device_uuid).root),
        device_memory_mib=device.capacity.get("memory", 0) // 2**20,
        multi_user=item.multi_user,
        active_thread_percentage=item.mps.active_thread_percentage,
        pinned_memory_mib=item.mps.pinned_memory_mib,
    )


def refuse_mode_conflict(item: PlannedDevice, others: Iterable[MpsRecord]) -> None:
    """ClaimError if the daemon serving `item`'s device runs in the other mode for `others`."""
    for other in others:
        if other.multi_user != item.multi_user:
            mode = "multi-user" if other.multi_user else "single-user"
            raise ClaimError(
                f"{item.device.name}: its MPS control daemon runs in {mode} mode for "
                "other claims; multiUser must match theirs"
            )


def daemon_users(checkpoint: Checkpoint, daemon_dir: str, *, exclude_uid: str) -> list[MpsRecord]:
    """The MPS records of claims other than `exclude_uid` served by the daemon in `daemon_dir`."""
    return [
        device.mps
        for entry in checkpoint.claims.values()
        if entry.uid != exclude_uid
        for device in entry.devices
        if device.mps is not None and device.mps.daemon_dir == daemon_dir
    ]
