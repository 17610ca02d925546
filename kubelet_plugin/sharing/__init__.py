"""GPU sharing on the node: what each sharing mechanism does at Prepare, Unprepare and start-up.

Each mechanism is a `SharingStrategy` (`strategy`), as NVIDIA's `sharing.go`
holds a manager per mechanism, in two halves: the pure planning (which GPU
gets which setting, who else holds the device) lives in `dra_driver.planning`,
so `dra-gpu simulate` refuses what the node would; the I/O that applies the
plan lives here.

* `mps.MpsSharing` - `sharing.strategy: MPS`: one control daemon per GPU or
  MIG device, shared by every MPS claim on it, with each claim's own limits
  and the daemon's defaults set to the most generous claim's; the node's
  MPS host runs the daemons (`kubelet_plugin.mps_host`), so they outlive the
  plugin;
* `timeslicing.TimeSlicing` - `GpuConfig.sharing.strategy: TimeSlicing`: the
  interval a GPU must have, applied through `dra_driver.hardware.gpu_policy`
  (nvidia-smi on a real node, the simulated hardware state on a simulated
  one) and restored when the last claim wanting it is gone.

Consumable shares (KEP-5075) need no strategy: the node's guard against
overcommit is pure planning (`dra_driver.planning.shares`), and each share
gets its own CDI device.

`plan` records the intent in the claim's checkpoint records (before anything
is touched), `apply` does it, `release` undoes it once the claim is gone
(rollback or Unprepare), and `recover` re-derives the hardware state from
the checkpoint at start-up. Every step is idempotent, so a crash at any
point is repaired by running the same step again. `sharing_strategies` is
the list the driver runs, in order.
"""

from __future__ import annotations

from collections.abc import Callable

from dra_driver.hardware.gpu_policy import GpuPolicy, UnavailableGpuPolicy
from kubelet_plugin.gpu_locks import GpuLocks
from kubelet_plugin.mps_intents import MpsHostClient
from kubelet_plugin.sharing.mps import MpsSharing, MpsUnavailable
from kubelet_plugin.sharing.strategy import ClaimBook, SharingStrategy
from kubelet_plugin.sharing.timeslicing import TimeSlicing

SharingFactory = Callable[[ClaimBook], tuple[SharingStrategy, ...]]
"""Builds the strategies of a driver, given the driver's checkpoint."""


def sharing_strategies(
    *,
    gpu_locks: GpuLocks,
    gpu_policy: GpuPolicy | None = None,
    mps: MpsHostClient | None = None,
) -> SharingFactory:
    """MPS, then time-slicing. `gpu_policy` None makes a claim that asks for a time-slice
    fail clearly; `mps` None leaves MPS out (tests of other things), so MPS claims fail
    clearly."""

    def build(book: ClaimBook) -> tuple[SharingStrategy, ...]:
        return (
            MpsUnavailable() if mps is None else MpsSharing(mps, gpu_locks, book),
            TimeSlicing(gpu_policy or UnavailableGpuPolicy(), gpu_locks, book),
        )

    return build


__all__ = ["ClaimBook", "SharingFactory", "SharingStrategy", "sharing_strategies"]
