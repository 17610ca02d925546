"""GPU sharing on the node: what each sharing mechanism does at Prepare and Unprepare.

One module per mechanism, each in two halves: pure planning (which GPU gets
which setting, who else holds the device, what a share may consume) that
reads only the claim and the checkpoint, and the I/O that applies the plan.

* `shares` - consumable shares (KEP-5075): the node-side guard against
  overcommit, from the shares' checkpointed `consumedCapacity`.
* `timeslice_plan` / `timeslicing` - `GpuConfig.sharing.strategy:
  TimeSlicing`: the interval a GPU must have, applied through `dra_driver.hardware.gpu_policy`
  (nvidia-smi on a real node, the simulated hardware state on a simulated
  one) and restored when the last claim wanting it is gone.

A mechanism plugs into `kubelet_plugin.driver` through `SharingStrategy`:
`plan` annotates the claim's checkpoint records with what it will do (before
anything is touched), `apply` does it, `release` undoes it once the claim is
gone (rollback or Unprepare), and `reconcile` re-derives the hardware state
from the checkpoint at start-up. Every step is idempotent, so a crash at any
point is repaired by running the same step again.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

from dra_driver.claims.allocated import AllocatedClaim
from dra_driver.claims.checkpoint import Checkpoint, ClaimEntry, PreparedDevice
from dra_driver.claims.device_config import DeviceConfig
from dra_driver.node.devices import AllocatableDevice


class SharingStrategy(Protocol):
    """One sharing mechanism as the claim transaction drives it."""

    def plan(
        self,
        claim: AllocatedClaim,
        configs: Mapping[str, DeviceConfig | None],
        prepared: Sequence[PreparedDevice],
        devices: Mapping[str, AllocatableDevice],
        checkpoint: Checkpoint,
    ) -> list[PreparedDevice]:
        """`prepared` with this mechanism's intent recorded; ClaimError on a conflict.

        Pure. `configs` is `dra_driver.claims.device_config.effective_configs` of
        the claim (keyed "request/device"), in the order of `prepared`.
        """
        ...

    def apply(self, entry: ClaimEntry) -> None:
        """Make the hardware do what `entry` (a started claim) recorded."""
        ...

    def release(self, entry: ClaimEntry) -> None:
        """Undo `entry`'s settings where no other checkpointed claim still wants them."""
        ...

    def reconcile(self, checkpoint: Checkpoint) -> list[str]:
        """At start-up, re-apply what the checkpoint records; one line per problem."""
        ...
