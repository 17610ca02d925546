"""The interface every sharing mechanism implements, and what it may ask of the driver.

`GpuDriver` (`kubelet_plugin.driver`) coordinates a claim's transaction and
calls each `SharingStrategy` at the same four points; a strategy reads and
changes the checkpoint only through the `ClaimBook` the driver gives it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from dra_driver.claims.checkpoint import Checkpoint, ClaimEntry
from dra_driver.planning.plan import ClaimPlan
from kubelet_plugin.recovery_report import RecoveryReport


class ClaimBook(Protocol):
    """The driver's checkpoint, as a strategy sees it."""

    def snapshot(self) -> Checkpoint:
        """The checkpoint as last saved (immutable)."""
        ...

    def current(self) -> Checkpoint:
        """The checkpoint as it is now: reloaded, under its lock, if another plugin
        instance changed it since (a rolling upgrade runs two)."""
        ...

    def update(
        self, mutate: Callable[[Checkpoint], Checkpoint], *, durable: bool = False
    ) -> Checkpoint:
        """Apply `mutate` under the checkpoint's lock and persist the result."""
        ...


class SharingStrategy(Protocol):
    """One sharing mechanism as the claim transaction drives it."""

    def plan(self, plan: ClaimPlan, placed: Checkpoint) -> ClaimPlan:
        """`plan` with this mechanism's intent in its records; ClaimError on a conflict.

        Pure, and the same planner `dra-gpu simulate` runs (`dra_driver.planning`);
        `placed` is the checkpoint, under its lock.
        """
        ...

    def apply(self, plan: ClaimPlan, entry: ClaimEntry) -> None:
        """Make the hardware do what `plan` asks; `entry` is the started claim as recorded
        now (its dynamic MIG devices created)."""
        ...

    def release(self, entry: ClaimEntry) -> None:
        """Undo `entry`'s settings where no other checkpointed claim still wants them."""
        ...

    def recover(self, checkpoint: Checkpoint, report: RecoveryReport) -> None:
        """At start-up, make the hardware match what `checkpoint` records; report in `report`."""
        ...
