"""Running the MPS control daemons claims share, crash safe.

One daemon per GPU or MIG device (`kubelet_plugin.mps_daemons`) serves every
MPS claim on it. The claim transaction (`kubelet_plugin.driver`) checkpoints
each device's daemon intent (`dra_driver.planning.mps`) before `apply`
starts it, so:

* `apply` (under the GPU's lock) records a dynamic MIG device's intent once
  the device exists, starts the daemon unless it runs, records its pid and
  start time in every claim it serves, and sets its defaults to the most
  generous claim's limits;
* `release` stops the daemon when the claim was its last user, and lowers
  its defaults to the remaining claims' otherwise;
* `recover` at start-up adopts the daemons of checkpointed claims (restarting
  dead ones) and stops every daemon no claim uses: daemons outlive the
  plugin process.

A crash between any two steps leaves a record from which the next Prepare,
Unprepare or start-up finishes or undoes the step (the crash tests kill the
plugin at each failpoint below).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence
from pathlib import Path

from dra_driver import failpoints
from dra_driver.claims.checkpoint import Checkpoint, ClaimEntry, MpsRecord
from dra_driver.claims.mps import DaemonPaths, MpsLimits, control_commands, daemon_ceiling
from dra_driver.errors import ClaimError, DraGpuError
from dra_driver.planning.mps import MpsPlanner, daemon_users, mps_intent, refuse_mode_conflict
from dra_driver.planning.plan import ClaimPlan
from kubelet_plugin.gpu_locks import GpuLocks
from kubelet_plugin.mps_daemons import DaemonProcess, MpsDaemons
from kubelet_plugin.recovery_report import RecoveryReport
from kubelet_plugin.sharing.strategy import ClaimBook

log = logging.getLogger(__name__)


class MpsSharing:
    """`SharingStrategy` for `sharing.strategy: MPS`; `daemons` None: no control binary on
    this node, so MPS claims are refused."""

    def __init__(self, daemons: MpsDaemons | None, gpu_locks: GpuLocks, book: ClaimBook) -> None:
        self._daemons = daemons
        self._gpu_locks = gpu_locks
        self._book = book

    def plan(self, plan: ClaimPlan, placed: Checkpoint) -> ClaimPlan:
        if self._daemons is None:
            for item in plan.devices:
                if item.mps is not None:
                    raise ClaimError(
                        f"{item.device.name}: MPS was asked for, but this node has no MPS "
                        "control binary (nvidia-cuda-mps-control in the driver root)"
                    )
            return plan
        return MpsPlanner(self._daemons.root)(plan, placed)

    def apply(self, plan: ClaimPlan, entry: ClaimEntry) -> None:
        """Make sure each MPS device of a started claim has its daemon, with limits for all."""
        uid = entry.uid
        for index, item in enumerate(plan.devices):
            if item.mps is None:
                continue
            daemons = self._require_daemons()
            record = entry.devices[index].mps
            if record is None:  # a dynamic MIG device: its UUID is known now
                mig = entry.devices[index].mig
                if mig is None or mig.uuid is None:
                    raise ClaimError(f"{item.device.name}: its MIG device was not created")
                record = mps_intent(item, mig.uuid, daemons.root)
            paths = DaemonPaths(Path(record.daemon_dir))
            with self._gpu_locks.hold([record.gpu_uuid]):

                def intent(
                    checkpoint: Checkpoint, index: int = index, record: MpsRecord = record
                ) -> Checkpoint:
                    devices = list(checkpoint.claims[uid].devices)
                    devices[index] = dataclasses.replace(devices[index], mps=record)
                    return checkpoint.update_devices(uid, devices)

                others = daemon_users(self._book.update(intent), record.daemon_dir, exclude_uid=uid)
                refuse_mode_conflict(item, others)
                running = daemons.find(paths)
                if running is None:
                    running = daemons.start(paths, multi_user=record.multi_user)
                    failpoints.hit("mps-after-daemon-started")
                self._record_daemon(paths, running)
                failpoints.hit("mps-after-daemon-recorded")
                self._set_ceiling(paths, [record, *others])
                failpoints.hit("mps-after-limits-set")

    def release(self, entry: ClaimEntry) -> None:
        """Stop the MPS daemons only this claim used; lower the others' limits."""
        current = self._book.snapshot().claims.get(entry.uid)
        if current is None:
            return
        for device in current.devices:
            record = device.mps
            if record is None:
                continue
            if self._daemons is None:
                raise ClaimError(
                    f"{current.ref}: uses an MPS daemon, but this plugin was started without MPS"
                )
            paths = DaemonPaths(Path(record.daemon_dir))
            with self._gpu_locks.hold([record.gpu_uuid]):
                others = daemon_users(
                    self._book.snapshot(), record.daemon_dir, exclude_uid=entry.uid
                )
                if others:
                    if self._daemons.find(paths) is not None:
                        self._set_ceiling(paths, others)
                    continue
                self._daemons.stop(paths)
            failpoints.hit("mps-after-daemon-stopped")

    def recover(self, checkpoint: Checkpoint, report: RecoveryReport) -> None:
        """Adopt the MPS daemons of checkpointed claims (restart dead ones), stop the rest.

        A daemon is adopted when its pid file names a live process; the
        checkpoint is updated if its pid or start time changed. A failure
        is reported and logged, never fatal: the claims' next Unprepare
        cleans up.
        """
        if self._daemons is None:
            return
        daemons = self._daemons
        owned: dict[str, list[MpsRecord]] = {}
        for entry in checkpoint.claims.values():
            for device in entry.devices:
                if device.mps is not None:
                    owned.setdefault(device.mps.daemon_dir, []).append(device.mps)
        for daemon_dir, records in sorted(owned.items()):
            paths = DaemonPaths(Path(daemon_dir))
            try:
                with self._gpu_locks.hold([records[0].gpu_uuid]):
                    running = daemons.find(paths)
                    if running is None:
                        log.warning(
                            "MPS control daemon for %s (used by %d claims) is gone: restarting it",
                            paths.device_uuid,
                            len(records),
                        )
                        running = daemons.start(paths, multi_user=records[0].multi_user)
                        self._set_ceiling(paths, records)
                        report.mps_restarted.append(paths.device_uuid)
                    else:
                        log.info(
                            "adopted MPS control daemon pid %d for %s",
                            running.pid,
                            paths.device_uuid,
                        )
                        report.mps_adopted.append(paths.device_uuid)
                    self._record_daemon(paths, running)
            except DraGpuError as exc:
                log.error("MPS control daemon for %s: %s", paths.device_uuid, exc)
                report.mps_failed.append(paths.device_uuid)
        for paths in daemons.daemon_dirs():
            if str(paths.root) in owned:
                continue
            try:
                daemons.stop(paths)
            except DraGpuError as exc:
                log.error(
                    "stopping the MPS daemon for %s no claim owns: %s", paths.device_uuid, exc
                )
                report.mps_failed.append(paths.device_uuid)
                continue
            log.warning("stopped MPS control daemon for %s: no claim uses it", paths.device_uuid)
            report.mps_orphans_stopped.append(paths.device_uuid)

    # -- helpers ------------------------------------------------------------------

    def _require_daemons(self) -> MpsDaemons:
        if self._daemons is None:  # plan refused the claim
            raise ClaimError("MPS was asked for, but this node has no MPS control binary")
        return self._daemons

    def _record_daemon(self, paths: DaemonPaths, running: DaemonProcess) -> None:
        """Write the daemon's pid and start time into every record of it."""

        def record(loaded: Checkpoint) -> Checkpoint:
            checkpoint = loaded
            for entry in list(loaded.claims.values()):
                devices = [
                    dataclasses.replace(
                        d,
                        mps=dataclasses.replace(
                            d.mps, pid=running.pid, start_ticks=running.start_ticks
                        ),
                    )
                    if d.mps is not None and d.mps.daemon_dir == str(paths.root)
                    else d
                    for d in entry.devices
                ]
                if tuple(devices) != entry.devices:
                    checkpoint = checkpoint.replace_devices(entry.uid, devices)
            return checkpoint

        self._book.update(record)

    def _set_ceiling(self, paths: DaemonPaths, records: Sequence[MpsRecord]) -> None:
        """Set the daemon's defaults to the most any of its claims may use."""
        ceiling = daemon_ceiling(
            [MpsLimits(r.active_thread_percentage, r.pinned_memory_mib) for r in records],
            records[0].device_memory_mib,
        )
        self._require_daemons().send(paths, control_commands(ceiling, paths.device_uuid))
