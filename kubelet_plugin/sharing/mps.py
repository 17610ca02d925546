"""MPS sharing: which claims each device's MPS control daemon serves, crash safe.

One daemon per GPU or MIG device serves every MPS claim on it. The plugin
never runs a daemon itself: the node's MPS host (`kubelet_plugin.mps_host`,
its own DaemonSet) does, from the intent the plugin writes for the device
(`kubelet_plugin.mps_intents`), so daemons and their clients survive plugin
upgrades and crashes. The checkpoint is the truth: a device's intent always
lists exactly the checkpointed claims whose records name its daemon, with
the daemon's defaults at the most generous of their limits, and is rewritten
whole, under the device's GPU lock, whenever that set changes:

* `apply` (Prepare) records the claim's daemon intent (`MpsRecord`) in the
  checkpoint, then asks the host for the daemon with every user's limits,
  and records the daemon's pid and start time in every user's record;
* `release` (Unprepare, rollback) first drops the claim's MPS record from the
  checkpoint, then rewrites the intent from the remaining users: when none
  is left the host stops the daemon. Each release removes its own record
  before it looks at the others, under the GPU lock, so of several claims
  released at once (one kubelet call, or two plugin instances) exactly one
  sees the set empty, and the daemon is stopped exactly once, after the last;
* `recover` (start-up) rewrites every device's intent from the checkpoint:
  the host adopts daemons still in use (the same process), restarts dead
  ones, and stops those no claim uses. When the checkpoint had to be
  rebuilt (damaged), a claim an intent names that the rebuild did not find
  keeps the daemon running, as it may be a held claim nothing else recorded.

A crash between any two steps leaves a record from which the next Prepare,
Unprepare or start-up finishes or undoes the step (the crash tests kill the
plugin at each of `failpoints.MPS_PREPARE_STEPS` and `MPS_UNPREPARE_STEPS`).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING

from dra_driver import failpoints
from dra_driver.claims.checkpoint import Checkpoint, ClaimEntry, MpsRecord
from dra_driver.claims.mps import MpsLimits, daemon_ceiling
from dra_driver.claims.mps_intent import DaemonState
from dra_driver.errors import ClaimError, DraGpuError
from dra_driver.planning.mps import MpsPlanner, mps_intent, refuse_mode_conflict
from dra_driver.planning.plan import ClaimPlan
from kubelet_plugin.gpu_locks import GpuLocks
from kubelet_plugin.mps_intents import MpsHostClient
from kubelet_plugin.recovery_report import RecoveryReport
from kubelet_plugin.sharing.strategy import ClaimBook

if TYPE_CHECKING:
    from dra_driver.claims.mps_intent_records import DaemonStatus

log = logging.getLogger(__name__)

(INTENT_RECORDED, DAEMON_STARTED, DAEMON_RECORDED) = failpoints.MPS_PREPARE_STEPS
(RELEASE_RECORDED, DAEMON_STOPPED) = failpoints.MPS_UNPREPARE_STEPS


class MpsSharing:
    """`SharingStrategy` for `sharing.strategy: MPS`; the daemons run in the MPS host."""

    def __init__(self, host: MpsHostClient, gpu_locks: GpuLocks, book: ClaimBook) -> None:
        self._host = host
        self._gpu_locks = gpu_locks
        self._book = book

    def plan(self, plan: ClaimPlan, placed: Checkpoint) -> ClaimPlan:
        return MpsPlanner(self._host.root)(plan, placed)

    def apply(self, plan: ClaimPlan, entry: ClaimEntry) -> None:
        """Make sure each MPS device of a started claim has its daemon, with limits for all."""
        uid = entry.uid
        for index, item in enumerate(plan.devices):
            if item.mps is None:
                continue
            record = entry.devices[index].mps
            if record is None:  # a dynamic MIG device: its UUID is known now
                mig = entry.devices[index].mig
                if mig is None or mig.uuid is None:
                    raise ClaimError(f"{item.device.name}: its MIG device was not created")
                record = mps_intent(item, mig.uuid, self._host.root)
            with self._gpu_locks.hold([record.gpu_uuid]):

                def intent(
                    checkpoint: Checkpoint, index: int = index, record: MpsRecord = record
                ) -> Checkpoint:
                    devices = list(checkpoint.claims[uid].devices)
                    devices[index] = dataclasses.replace(devices[index], mps=record)
                    return checkpoint.update_devices(uid, devices)

                users = daemon_users_by_claim(self._book.update(intent), record.daemon_dir)
                failpoints.hit(INTENT_RECORDED)
                refuse_mode_conflict(item, (r for u, r in users.items() if u != uid))
                status = self._request(record, users)
                failpoints.hit(DAEMON_STARTED)
                if status is not None:
                    self._record_daemon(record.daemon_dir, status)
                failpoints.hit(DAEMON_RECORDED)

    def release(self, entry: ClaimEntry) -> None:
        """Drop the claim from its daemons: stopped when it was the last user, re-limited
        to the remaining users' most generous limits otherwise."""
        if not any(device.mps is not None for device in entry.devices):
            return  # only this claim's Prepare, which holds its lock too, adds MPS records
        current = self._book.current().claims.get(entry.uid)
        if current is None:
            return
        for daemon_dir, record in sorted(
            {d.mps.daemon_dir: d.mps for d in current.devices if d.mps is not None}.items()
        ):
            with self._gpu_locks.hold([record.gpu_uuid]):

                def drop(checkpoint: Checkpoint, daemon_dir: str = daemon_dir) -> Checkpoint:
                    held = checkpoint.claims.get(entry.uid)
                    if held is None:
                        return checkpoint
                    devices = [
                        dataclasses.replace(d, mps=None)
                        if d.mps is not None and d.mps.daemon_dir == daemon_dir
                        else d
                        for d in held.devices
                    ]
                    if tuple(devices) == held.devices:
                        return checkpoint
                    return checkpoint.replace_devices(entry.uid, devices)

                users = daemon_users_by_claim(self._book.update(drop), daemon_dir)
                failpoints.hit(RELEASE_RECORDED)
                status = self._request(record, users, need_daemon=False)
            if status is None or status.state is DaemonState.STOPPED:
                log.info("%s: MPS control daemon for %s stopped", entry.ref, record.device_uuid)
            failpoints.hit(DAEMON_STOPPED)

    def recover(self, checkpoint: Checkpoint, report: RecoveryReport) -> None:
        """Rewrite every device's intent from the checkpoint; the host adopts, restarts or
        stops each daemon. A failure is reported and logged, never fatal: the claims' next
        Prepare or Unprepare writes the intent again."""
        records: dict[str, MpsRecord] = {}
        for entry in checkpoint.claims.values():
            for device in entry.devices:
                if device.mps is not None:
                    records.setdefault(device.mps.device_uuid, device.mps)
        for uuid in sorted(set(records) | set(self._host.devices())):
            try:
                self._recover_device(uuid, records.get(uuid), report)
            except DraGpuError as exc:
                log.error("MPS control daemon for %s: %s", uuid, exc)
                report.mps_failed.append(uuid)

    def _recover_device(self, uuid: str, record: MpsRecord | None, report: RecoveryReport) -> None:
        daemon_dir = str(self._host.paths(uuid).root)
        with self._gpu_locks.hold([self._gpu_of(uuid, record)]):
            checkpoint = self._book.current()
            users = daemon_users_by_claim(checkpoint, daemon_dir)
            unsettled = (
                self._host.claims_of(uuid) - set(checkpoint.claims)
                if report.checkpoint_rebuilt
                else frozenset()
            )
            if unsettled:
                log.warning(
                    "MPS control daemon for %s: kept for claims %s, which the rebuilt "
                    "checkpoint does not hold; it is stopped once they are unprepared",
                    uuid,
                    ", ".join(sorted(unsettled)),
                )
            if not users and not unsettled:
                self._host.request(uuid, claims=())
                log.warning("stopped the MPS control daemon for %s: no claim uses it", uuid)
                report.mps_orphans_stopped.append(uuid)
                return
            if not users:
                report.mps_adopted.append(uuid)
                return
            first = next(iter(users.values()))
            before = self._host.status(uuid)
            status = self._request(first, users, keep=unsettled)
        if status is None:
            return
        if before is not None and (before.pid, before.start_ticks) == (
            status.pid,
            status.start_ticks,
        ):
            log.info("adopted MPS control daemon pid %s for %s", status.pid, uuid)
            report.mps_adopted.append(uuid)
        else:
            log.warning(
                "MPS control daemon for %s (used by %d claims) was not running: restarted",
                uuid,
                len(users),
            )
            report.mps_restarted.append(uuid)
        self._record_daemon(daemon_dir, status)

    # -- helpers ------------------------------------------------------------------

    def _gpu_of(self, uuid: str, record: MpsRecord | None) -> str:
        """The GPU whose lock guards the daemon of device `uuid` (a MIG device's parent)."""
        if record is not None:
            return record.gpu_uuid
        try:
            intent = self._host.intent(uuid)
        except DraGpuError:
            intent = None
        return intent.gpu_uuid if intent is not None and intent.gpu_uuid else uuid

    def _request(
        self,
        record: MpsRecord,
        users: Mapping[str, MpsRecord],
        *,
        keep: frozenset[str] = frozenset(),
        need_daemon: bool = True,
    ) -> DaemonStatus | None:
        """Ask the host for `record`'s daemon to serve exactly `users` (and `keep`)."""
        limits = (
            daemon_ceiling(
                [
                    MpsLimits(r.active_thread_percentage, r.pinned_memory_mib)
                    for r in users.values()
                ],
                record.device_memory_mib,
            )
            if users
            else None
        )
        return self._host.request(
            record.device_uuid,
            claims=set(users) | keep,
            multi_user=record.multi_user,
            limits=limits,
            gpu_uuid=record.gpu_uuid,
            need_daemon=need_daemon,
        )

    def _record_daemon(self, daemon_dir: str, status: DaemonStatus) -> None:
        """Write the daemon's pid and start time into every record of it."""
        if status.state is not DaemonState.RUNNING:
            return

        def record(loaded: Checkpoint) -> Checkpoint:
            checkpoint = loaded
            for entry in list(loaded.claims.values()):
                devices = [
                    dataclasses.replace(
                        d,
                        mps=dataclasses.replace(
                            d.mps, pid=status.pid, start_ticks=status.start_ticks
                        ),
                    )
                    if d.mps is not None
                    and d.mps.daemon_dir == daemon_dir
                    and (d.mps.pid, d.mps.start_ticks) != (status.pid, status.start_ticks)
                    else d
                    for d in entry.devices
                ]
                if tuple(devices) != entry.devices:
                    checkpoint = checkpoint.replace_devices(entry.uid, devices)
            return checkpoint

        self._book.update(record)


def daemon_users_by_claim(checkpoint: Checkpoint, daemon_dir: str) -> dict[str, MpsRecord]:
    """Claim UID -> its MPS record, for every checkpointed claim served by `daemon_dir`."""
    users: dict[str, MpsRecord] = {}
    for entry in checkpoint.claims.values():
        for device in entry.devices:
            if device.mps is not None and device.mps.daemon_dir == daemon_dir:
                users.setdefault(entry.uid, device.mps)
    return users


class MpsUnavailable:
    """`SharingStrategy` for a driver built without the MPS host client (tests of other
    things): a claim that asks for MPS is refused clearly instead of left unshared."""

    def plan(self, plan: ClaimPlan, _placed: Checkpoint) -> ClaimPlan:
        for item in plan.devices:
            if item.mps is not None:
                raise ClaimError(
                    f"{item.device.name}: MPS was asked for, but this plugin runs without MPS"
                )
        return plan

    def apply(self, _plan: ClaimPlan, _entry: ClaimEntry) -> None:
        return None

    def release(self, _entry: ClaimEntry) -> None:
        return None

    def recover(self, _checkpoint: Checkpoint, _report: RecoveryReport) -> None:
        return None
