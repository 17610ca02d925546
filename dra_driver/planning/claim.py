"""`plan_claim`: the node plugin's validation of one allocated claim, as one pure call.

See `dra_driver.planning` for what it checks and who calls it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from dra_driver.claims.allocated import AllocatedClaim
from dra_driver.claims.checkpoint import Checkpoint
from dra_driver.claims.device_config import effective_configs, unsupported_sharing
from dra_driver.claims.mps import MPS_DIR
from dra_driver.errors import ClaimError
from dra_driver.node.devices import AllocatableDevice
from dra_driver.planning.devices import plan_devices
from dra_driver.planning.mps import MpsPlanner, plan_mps_limits
from dra_driver.planning.plan import ClaimPlan, SharingPlanner, prepared_device
from dra_driver.planning.shares import check_shares
from dra_driver.planning.time_slices import plan_time_slicing
from dra_driver.planning.vfio import plan_vfio

SHARING_PLANNERS: tuple[SharingPlanner, ...] = (
    MpsPlanner(Path(MPS_DIR)),
    plan_time_slicing,
    plan_vfio,
)
"""The pure halves of the sharing mechanisms (and of VFIO passthrough), in the order the
plugin applies them. The
plugin's own (`kubelet_plugin.sharing`) run the same planners with its MPS directory."""


def plan_claim(
    claim: AllocatedClaim,
    *,
    pool_name: str,
    devices: Mapping[str, AllocatableDevice],
    placed: Checkpoint,
    sharing: Sequence[SharingPlanner] = SHARING_PLANNERS,
) -> ClaimPlan:
    """Check `claim` against the node's `devices` and the claims already `placed` on it.

    Returns the plan Prepare carries out; raises ClaimError, with the
    plugin's exact message, naming the claim and the offending result.
    """
    check_shares(claim, devices, placed)
    planned = plan_devices(claim, pool_name=pool_name, devices=devices, placed=placed)
    configs = effective_configs(claim, {item.device.name: item.device.kind for item in planned})
    problem = unsupported_sharing(claim, configs)
    if problem is not None:
        raise ClaimError(problem)
    planned = plan_mps_limits(claim, planned, configs)
    plan = ClaimPlan(
        claim=claim,
        devices=tuple(planned),
        configs=configs,
        records=tuple(prepared_device(claim.uid, item.result, item.device) for item in planned),
    )
    for planner in sharing:
        plan = planner(plan, placed)
    return plan
