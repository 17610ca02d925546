"""The plan of one claim's Prepare: what must be done, decided before anything is touched.

`ClaimPlan` is what `dra_driver.planning.plan_claim` returns and what the
node plugin carries through the Prepare transaction: one `PlannedDevice`
per allocation result (the published device it names, and the MPS limits
the claim gets on it), the effective opaque config of each result, and the
checkpoint records Prepare starts with (`records`: the devices as they are
recorded before any side effect, with each sharing mechanism's intent).
`SharingPlanner` is the pure half of a sharing mechanism: it annotates the
records, or raises ClaimError.

`MigTarget` says what a dynamic MIG device needs created; `prepared_device`
and `cdi_device` give a result's checkpoint record and CDI device name.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from dra_driver.claims.allocated import AllocatedClaim, DeviceResult
from dra_driver.claims.checkpoint import Checkpoint, ClaimEntry, MigRecord, PreparedDevice
from dra_driver.claims.mps import MpsLimits
from dra_driver.container import cdi
from dra_driver.hardware.nvml.interface import Placement
from dra_driver.node.devices import AllocatableDevice

if TYPE_CHECKING:
    from dra_driver.claims.device_config_models import DeviceConfig


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


@dataclass(frozen=True)
class ClaimPlan:
    """What Prepare must do for `claim` (see the module docstring).

    `devices` and `records` have one item per result of the claim, in order.
    `configs` is `dra_driver.claims.device_config.effective_configs` of the
    claim, keyed "request/device".
    """

    claim: AllocatedClaim
    devices: tuple[PlannedDevice, ...]
    configs: Mapping[str, DeviceConfig | None]
    records: tuple[PreparedDevice, ...]

    def device_map(self) -> dict[str, AllocatableDevice]:
        """The planned devices by name."""
        return {item.device.name: item.device for item in self.devices}

    def with_records(self, records: Sequence[PreparedDevice]) -> ClaimPlan:
        return dataclasses.replace(self, records=tuple(records))

    def entry(self) -> ClaimEntry:
        """The checkpoint entry Prepare starts with (`Checkpoint.start`); a simulation adds it
        to its placed claims the same way."""
        return ClaimEntry(
            uid=self.claim.uid,
            namespace=self.claim.namespace,
            name=self.claim.name,
            devices=self.records,
        )


class SharingPlanner(Protocol):
    """The pure half of a sharing mechanism: `plan` with its intent recorded in `records`,
    checked against the claims already placed on the node; ClaimError on a conflict."""

    def __call__(self, plan: ClaimPlan, placed: Checkpoint) -> ClaimPlan: ...


@dataclass(frozen=True)
class MigTarget:
    """What Prepare must create for one allocated dynamic MIG device."""

    device_name: str
    parent_uuid: str
    parent_minor: int
    gi_profile_id: int
    ci_profile_id: int
    placement: Placement
    profile_name: str

    def planned_record(self) -> MigRecord:
        return MigRecord(
            parent_uuid=self.parent_uuid,
            profile_id=self.gi_profile_id,
            placement_start=self.placement.start,
            placement_size=self.placement.size,
            created_by_us=True,
        )


def mig_target(device: AllocatableDevice) -> MigTarget | None:
    """What must be created for a dynamic MIG device; None for anything else."""
    spec = device.dynamic
    if spec is None:
        return None
    return MigTarget(
        device_name=device.name,
        parent_uuid=spec.parent_uuid,
        parent_minor=spec.parent_minor,
        gi_profile_id=spec.gi_profile.id,
        ci_profile_id=spec.ci_profile_id,
        placement=spec.placement,
        profile_name=spec.profile_name,
    )


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
