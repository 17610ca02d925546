"""Applying and restoring time-slice intervals, crash safe.

The claim transaction (`kubelet_plugin.driver`) checkpoints each claim's
wanted intervals (`dra_driver.planning.time_slices`) before `apply` runs
nvidia-smi, and
drops the claim's entry only after `release` has put its GPUs back, so:

* a crash after the intent is saved but before (or while) the interval is
  set leaves a started claim; recovery rolls it back with `release`, which
  sets each GPU to what the remaining claims want (Default when none);
* a crash during Unprepare leaves the entry; recovery finishes the
  Unprepare, `release` again;
* `recover` at start-up re-applies every completed claim's interval, so
  an interval lost in any other way (a GPU reset) comes back.

Each GPU is set under its per-GPU lock, and `release` reads the checkpoint
under that lock, so a claim being prepared on the same GPU cannot be
overwritten by the reset of one that is going away.
"""

from __future__ import annotations

import logging

from dra_driver import failpoints
from dra_driver.claims.checkpoint import Checkpoint, ClaimEntry
from dra_driver.claims.device_config import TimeSliceInterval
from dra_driver.errors import DraGpuError, GpuSettingError
from dra_driver.hardware.gpu_policy import GpuPolicy
from dra_driver.planning.plan import ClaimPlan
from dra_driver.planning.time_slices import (
    LEVELS,
    intervals,
    plan_time_slicing,
    wanted_interval,
)
from kubelet_plugin.gpu_locks import GpuLocks
from kubelet_plugin.recovery_report import RecoveryReport
from kubelet_plugin.sharing.strategy import ClaimBook

log = logging.getLogger(__name__)

(SET_FAILPOINT,) = failpoints.SHARING_PREPARE_STEPS
(RESET_FAILPOINT,) = failpoints.SHARING_UNPREPARE_STEPS


class TimeSlicing:
    """`SharingStrategy` for `GpuConfig.sharing.strategy: TimeSlicing`."""

    def __init__(self, policy: GpuPolicy, gpu_locks: GpuLocks, book: ClaimBook) -> None:
        self._policy = policy
        self._gpu_locks = gpu_locks
        self._book = book

    def plan(self, plan: ClaimPlan, placed: Checkpoint) -> ClaimPlan:
        return plan_time_slicing(plan, placed)

    def apply(self, plan: ClaimPlan, entry: ClaimEntry) -> None:  # noqa: ARG002 (protocol)
        for uuid, interval in sorted(_wanted_by(entry).items()):
            with self._gpu_locks.hold([uuid]):
                self._set(uuid, interval)
            log.info("%s: GPU %s time-sliced %s", entry.ref, uuid, interval)
            failpoints.hit(SET_FAILPOINT)

    def release(self, entry: ClaimEntry) -> None:
        records = {d.time_slice.gpu_uuid: d for d in entry.devices if d.time_slice is not None}
        for uuid, record in sorted(records.items()):
            with self._gpu_locks.hold([uuid]):
                if wanted_interval(self._book.current(), record, without=entry.uid) is not None:
                    continue  # another claim still wants (and set) this interval
                try:
                    self._policy.set_time_slice(uuid, LEVELS[TimeSliceInterval.DEFAULT])
                except GpuSettingError as exc:
                    if not exc.not_supported:
                        raise
                    log.warning("GPU %s: resetting the time-slice is not supported: %s", uuid, exc)
                log.info("%s: GPU %s time-slice back to Default", entry.ref, uuid)
            failpoints.hit(RESET_FAILPOINT)

    def recover(self, checkpoint: Checkpoint, report: RecoveryReport) -> None:
        problems = []
        for uuid, interval in sorted(intervals(checkpoint).items()):
            try:
                with self._gpu_locks.hold([uuid]):
                    self._set(uuid, interval)
            except DraGpuError as exc:
                problems.append(f"GPU {uuid}: could not restore time-slice {interval}: {exc}")
        for line in problems:
            log.error("%s", line)
        report.sharing_problems.extend(problems)

    def _set(self, uuid: str, interval: str) -> None:
        self._policy.set_compute_mode(uuid, "DEFAULT")
        self._policy.set_time_slice(uuid, LEVELS[interval])


def _wanted_by(entry: ClaimEntry) -> dict[str, str]:
    return {
        device.time_slice.gpu_uuid: device.time_slice.interval
        for device in entry.devices
        if device.time_slice is not None
    }
