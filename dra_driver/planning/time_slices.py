"""Which time-slice interval each GPU must have, decided from claims and the checkpoint.

`GpuConfig.sharing: {strategy: TimeSlicing, timeSlicingConfig: {interval}}`
asks for a GPU-wide scheduler setting (nvidia-smi `--set-timeslice`): it
affects every process on the GPU, so two claims on one GPU (shares, or
several claims over time) must agree. Like NVIDIA's driver, the setting is
applied to full GPUs only; on a MIG device time-slicing does nothing, and a
`MigDeviceConfig` with `strategy: TimeSlicing` is accepted and ignored.

Pure. `plan_time_slices` (the planner: `plan_time_slicing`) records each
full GPU's wanted interval in the claim's checkpoint records, or raises
ClaimError when another prepared claim (or another result of the same claim)
wants a different interval on the same GPU. `wanted_interval` says what a
GPU must be left with once a claim is gone: another claim's interval, or
None (back to Default). The other claims are found through the checkpoint's
index of held devices (an interval is recorded on the full GPU's device), so
the cost does not grow with the number of claims on the node. An
admin-access result (monitoring) never sets an interval.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from operator import itemgetter
from typing import TYPE_CHECKING, Final

from dra_driver.claims.allocated import AllocatedClaim
from dra_driver.claims.checkpoint import Checkpoint, PreparedDevice, TimeSliceRecord
from dra_driver.claims.device_config import SharingStrategy, TimeSliceInterval, config_key
from dra_driver.errors import ClaimError
from dra_driver.node.devices import AllocatableDevice
from dra_driver.planning.plan import ClaimPlan

if TYPE_CHECKING:
    from dra_driver.claims.device_config_models import DeviceConfig

LEVELS: Final[Mapping[str, int]] = {
    TimeSliceInterval.DEFAULT: 0,
    TimeSliceInterval.SHORT: 1,
    TimeSliceInterval.MEDIUM: 2,
    TimeSliceInterval.LONG: 3,
}
"""nvidia-smi `--set-timeslice` values (`TimeSliceInterval.Int()` in NVIDIA's API)."""


def plan_time_slices(
    claim: AllocatedClaim,
    configs: Mapping[str, DeviceConfig | None],
    prepared: Sequence[PreparedDevice],
    devices: Mapping[str, AllocatableDevice],
    checkpoint: Checkpoint,
) -> list[PreparedDevice]:
    """`prepared` (one per claim result, same order) with the wanted intervals recorded."""
    out: list[PreparedDevice] = []
    mine: dict[str, tuple[str, str]] = {}  # GPU UUID -> (interval, request)
    for result, record in zip(claim.results, prepared, strict=True):
        interval = _wanted(configs.get(config_key(result)))
        device = devices.get(result.device)
        if interval is None or device is None or device.kind != "gpu" or result.admin_access:
            out.append(record)
            continue
        uuid = device.gpu.uuid
        where = f"{claim.ref}: request {result.request!r} (device {result.device})"
        earlier = mine.get(uuid)
        if earlier is not None and earlier[0] != interval:
            raise ClaimError(
                f"{where} asks for time-slice interval {interval} on GPU {uuid}, but request "
                f"{earlier[1]!r} of the same claim asks for {earlier[0]}; one GPU has one interval"
            )
        mine[uuid] = (interval, result.request)
        for other, other_interval in _others(checkpoint, record, claim.uid):
            if other_interval != interval:
                raise ClaimError(
                    f"{where} asks for time-slice interval {interval} on GPU {uuid}, but claim "
                    f"{other} prepared on it uses {other_interval}; the interval is GPU-wide, "
                    "so claims sharing a GPU must ask for the same one"
                )
        out.append(dataclasses.replace(record, time_slice=TimeSliceRecord(uuid, interval)))
    return out


def plan_time_slicing(plan: ClaimPlan, placed: Checkpoint) -> ClaimPlan:
    """The `SharingPlanner` of time-slicing: `plan_time_slices` over a claim's plan."""
    return plan.with_records(
        plan_time_slices(plan.claim, plan.configs, plan.records, plan.device_map(), placed)
    )


def wanted_interval(checkpoint: Checkpoint, record: PreparedDevice, *, without: str) -> str | None:
    """The interval other claims than `without` want on `record`'s GPU, or None if none does."""
    for _other, interval in _others(checkpoint, record, without):
        return interval
    return None


def intervals(checkpoint: Checkpoint) -> dict[str, str]:
    """GPU UUID -> the interval the checkpointed claims want on it."""
    out: dict[str, str] = {}
    for uid in sorted(checkpoint.claims):
        for device in checkpoint.claims[uid].devices:
            if device.time_slice is not None:
                out.setdefault(device.time_slice.gpu_uuid, device.time_slice.interval)
    return out


def _wanted(config: DeviceConfig | None) -> str | None:
    if config is None:
        return None
    from dra_driver.claims.device_config_models import GpuConfig  # loaded: `config` is one

    if not isinstance(config, GpuConfig) or config.sharing is None:
        return None
    if config.sharing.strategy is not SharingStrategy.TIME_SLICING:
        return None
    chosen = config.sharing.time_slicing_config
    return str(chosen.interval if chosen is not None else TimeSliceInterval.DEFAULT)


def _others(checkpoint: Checkpoint, record: PreparedDevice, without: str) -> list[tuple[str, str]]:
    """(claim, interval) of the other claims wanting an interval on `record`'s GPU."""
    found = []
    for uid, held in sorted(
        checkpoint.device_holders(record.pool, record.device), key=itemgetter(0)
    ):
        if uid != without and held.time_slice is not None:
            entry = checkpoint.claims[uid]
            found.append((f"{entry.namespace}/{entry.name} (uid {uid})", held.time_slice.interval))
    return found
