"""What a claim's Prepare must do on a node, decided without doing any of it (pure).

The node plugin's own validation of an allocated claim, in one call that
both the plugin (`kubelet_plugin.driver`, at Prepare) and the scheduler
emulation (`dra-gpu simulate`/`explain`) run, so a simulation refuses
exactly what a node would refuse, with the same message.

Entry point::

    from dra_driver.planning import plan_claim

    plan = plan_claim(claim, pool_name=node, devices=devices, placed=placed)
    placed = placed.start(plan.entry())      # the claim is now placed too

* `claim`: an `AllocatedClaim` (`dra_driver.claims.allocated.parse_allocated_claim`
  of the ResourceClaim with its allocation; its opaque configs are decoded
  strictly here, through `effective_configs`);
* `devices`: the node's published devices by name (`AllocatableDevice`, from
  `dra_driver.node.devices.build_devices`, with the node's `--consumable-shares`);
* `placed`: the claims already prepared (or placed, in a simulation) on the
  node, as a `Checkpoint` (`Checkpoint(boot_id="")` for an empty node).

It returns a `ClaimPlan` or raises `ClaimError` naming the claim and the
result. It checks, in this order:

1. consumable shares within each device's capacity, and no device used both
   exclusively and shared (`shares`);
2. every result in this node's pool, on a device it publishes, held by no
   other claim, overlapping no other claim's MIG slices or whole GPU (`devices`);
3. opaque configs (`GpuConfig`, `MigDeviceConfig`) decoded strictly, each
   fitting its device type; sharing strategies this release applies;
4. MPS: limits from `mpsConfig` and consumed capacity, MPS on one device per
   claim, the same `multiUser` as the claims already using that device (`mps`);
5. time-slicing: one interval per GPU, the same as the claims already on it
   (`time_slices`);
6. passthrough: each vfio device's GPU and IOMMU settings recorded (`vfio`).

The plugin applies the plan through its `SharingStrategy` objects
(`kubelet_plugin.sharing`), whose `plan` is these same planners.
"""

from dra_driver.planning.claim import SHARING_PLANNERS, plan_claim
from dra_driver.planning.plan import ClaimPlan, PlannedDevice, SharingPlanner

__all__ = ["SHARING_PLANNERS", "ClaimPlan", "PlannedDevice", "SharingPlanner", "plan_claim"]
