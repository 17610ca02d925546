"""The node's DRA service: Prepare and Unprepare of ResourceClaims.

`GpuDriver` implements `kubelet_plugin.service.DraService`. It coordinates;
the work is done by the modules it drives. Each claim goes through one
transaction, recorded in the checkpoint so that a crash at any point is
finished or rolled back later:

    Prepare:   fetch the claim -> plan it (pure, `dra_driver.planning`: our
               devices? held by another claim? shares within capacity?
               sharing settings that agree?) -> checkpoint PrepareStarted
               (MIG devices as "planned", each sharing strategy's intent)
               -> create dynamic MIG devices, checkpointing each GI/CI id
               -> apply each sharing strategy (MPS: the device's control
               daemon; time-slicing: the GPU's interval)
               -> write the CDI spec (`dra_driver.container.claim_spec`, from
               the plan: the devices' own edits) -> checkpoint
               PrepareCompleted -> answer (each device's CDI ids: the node's
               base spec first, then its own)
    Unprepare: remove the CDI spec -> release each sharing strategy (stop an
               MPS daemon no other claim uses, restore a time-slice no other
               claim wants) -> destroy the MIG devices we created
               -> drop the checkpoint entry -> answer

Sharing mechanisms plug in as `SharingStrategy` objects
(`kubelet_plugin.sharing`: MPS, time-slicing), each with its own plan,
apply, release and start-up recovery; the driver knows none of them.

A claim whose CDI spec is all its Prepare makes (whole GPUs or static MIG
devices, no opaque config: `_spec_only`) skips the middle: it is planned,
recorded PrepareStarted, given its spec and recorded PrepareCompleted under
one hold of the checkpoint lock, in one commit (one temp-file create less per
Prepare: about a fifth of its time, waiting on the file system's journal).

A repeated Prepare of a completed claim returns the recorded devices without
side effects. A Prepare that finds the claim PrepareStarted (a crash or an
error half-way) first undoes whatever exists, then starts over. Unprepare of
an unknown claim succeeds. Every step is a failpoint for the crash tests.

Locking: the checkpoint's read-modify-write runs under its file lock (plus a
thread lock), held only for the short bookkeeping steps. Hardware work runs
under per-GPU locks (`gpu_locks`), so claims on different GPUs, including the
claims of one kubelet call, prepare and unprepare in parallel while claims on
one GPU are serialized. One claim is handled by one call at a time (a kubelet
that retries while its first call still runs waits for it instead of rolling
back under it). Claims are fetched from the API before any lock is taken.

Overlap guard: a dynamic MIG device whose memory slices overlap another
prepared (or half-prepared) claim's, or a whole GPU and a MIG device of it,
are refused before anything is touched (`dra_driver.planning.devices`).

Base specs: what every claim's containers get (control nodes, environment,
the driver's files and hooks) is one spec per node and driver
(`dra_driver.container.base_spec`), written at start-up and again when the
driver root or the device numbers change; it is checked under the
checkpoint lock by every Prepare that hands out its id (rewritten if someone
removed it). A base spec no checkpointed claim names and that is not the
current one is removed at start-up, and after a change at the next
Unprepare, under the same lock, so it never goes while a claim uses it.

Sharing: each share of a multi-allocatable device (a result with a
`shareID`) gets its own CDI device, `<claimUID>-<device>-<shareID>`, and
the kubelet learns its `share_id`; `dra_driver.planning.shares` refuses
overcommit.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from dra_driver import failpoints
from dra_driver.claims.allocated import AllocatedClaim, parse_allocated_claim
from dra_driver.claims.checkpoint import (
    Checkpoint,
    ClaimEntry,
    ClaimState,
    MigRecord,
    PreparedDevice,
    to_spec_record,
)
from dra_driver.claims.checkpoint_store import CheckpointStore, LoadOutcome
from dra_driver.container import base_spec, cdi
from dra_driver.container.cdi_store import CdiStore
from dra_driver.container.claim_spec import build_claim_spec
from dra_driver.errors import CheckpointError, ClaimError, DraGpuError, NotFoundError
from dra_driver.kube.cluster import Cluster
from dra_driver.node.devices import AllocatableDevice
from dra_driver.node.host import HostInfo
from dra_driver.planning import ClaimPlan, plan_claim
from dra_driver.planning.plan import MigTarget, mig_target
from kubelet_plugin.claim_calls import claim_error as _claim_error
from kubelet_plugin.claim_calls import error_text as _one_line
from kubelet_plugin.claim_calls import in_parallel as _in_parallel
from kubelet_plugin.claim_locks import ClaimLocks
from kubelet_plugin.gpu_locks import GpuLocks
from kubelet_plugin.mig_lifecycle import MigLifecycle
from kubelet_plugin.rebuild import RebuildSource
from kubelet_plugin.recovery_report import RecoveryReport
from kubelet_plugin.service import ClaimRef, PrepareResult, ResultDevice, UnprepareResult
from kubelet_plugin.sharing import SharingFactory, SharingStrategy, sharing_strategies

log = logging.getLogger(__name__)

_T = TypeVar("_T")


class GpuDriver:
    """Prepares and unprepares claims for the devices this node publishes."""

    def __init__(
        self,
        *,
        driver_name: str,
        pool_name: str,
        cluster: Cluster,
        devices: Sequence[AllocatableDevice],
        host: HostInfo,
        checkpoints: CheckpointStore,
        cdi_store: CdiStore,
        mig: MigLifecycle,
        gpu_locks: GpuLocks,
        driver_edits: Callable[[], cdi.ContainerEdits] | None = None,
        rebuild_sources: Sequence[RebuildSource] = (),
        sharing: SharingFactory | None = None,
        claim_locks: ClaimLocks | None = None,
        cdi_hooks: cdi.CdiHooks | None = None,
        on_claims_changed: Callable[[], None] | None = None,
    ) -> None:
        """`driver_edits` gives the mounts (and hooks) of the driver's user space
        for the current driver version (`DriverUserSpace.edits`, cached); None
        leaves them out (tests of device handling only). `rebuild_sources`
        rebuild a lost checkpoint (`kubelet_plugin.rebuild`); none: start empty.
        `claim_locks` hold one claim for one call at a time (`kubelet_plugin.claim_locks`:
        across plugin instances when given a lock directory); None: this process only.
        `sharing` builds the sharing strategies, given this driver's checkpoint
        (`kubelet_plugin.sharing.sharing_strategies`); None: none can be applied,
        so claims asking for MPS or a time-slice fail clearly. `cdi_hooks` makes the
        per-device hooks (DRM by-path links); None leaves them out. `on_claims_changed` is
        called after each Prepare and Unprepare call (what is published may depend on what
        is prepared: `dra_driver.node.vfio_devices.hidden_siblings`)."""
        self._driver_name = driver_name
        self._pool_name = pool_name
        self._cluster = cluster
        self._devices = {device.name: device for device in devices}
        self._host = host
        self._checkpoints = checkpoints
        self._cdi = cdi_store
        self._mig = mig
        self._gpu_locks = gpu_locks
        self._driver_edits = driver_edits
        self._cdi_hooks = cdi_hooks
        # (driver edits object, uvm major) -> the base spec's device name and document
        self._base: tuple[object, int, str, dict[str, Any]] | None = None
        self._collect_bases = False  # an older base spec may wait for its last claim
        self._thread_lock = threading.Lock()
        self._claim_locks = claim_locks or ClaimLocks(None)
        self._state: Checkpoint | None = None
        self._generation = ""
        self._rebuild_sources = tuple(rebuild_sources)
        self._on_claims_changed = on_claims_changed
        build = sharing or sharing_strategies(gpu_locks=gpu_locks)
        self._sharing: tuple[SharingStrategy, ...] = build(self)

    def set_devices(self, devices: Sequence[AllocatableDevice]) -> None:
        """Replace the devices Prepare accepts (after a re-discovery)."""
        self._devices = {device.name: device for device in devices}

    # -- start-up -----------------------------------------------------------------

    def recover(self) -> RecoveryReport:
        """Make the checkpoint, the hardware and the CDI directory agree before serving.

        A damaged checkpoint directory (missing, a dangling link) or a corrupt
        file (moved aside, kept as evidence) is never read as "no claims":
        the claims are rebuilt from the rebuild sources (`kubelet_plugin.rebuild`:
        the CDI specs' records, the API, the MIG instances). A checkpoint of
        an older dra-gpu is migrated; entries from an earlier boot are dropped;
        temp files of interrupted writes are removed. A CDI spec no entry owns
        is first offered to the rebuild sources (a crash right after the spec
        was written leaves one), and a claim they bring back is kept only if
        the API, where reachable, still has it reserved; what no source
        vouches for is removed. Half-prepared claims are rolled back (MIG
        devices they created are destroyed), except those another plugin
        instance is working on right now (a rolling-upgrade peer holds their
        claim lock); a completed claim without its CDI spec was being
        unprepared, so that Unprepare is finished; completed claims whose MIG
        devices vanished are reported. Last, each sharing strategy makes the
        hardware match the settled checkpoint (MPS daemons, time-slices).
        """
        report = RecoveryReport()
        with self._thread_lock, self._checkpoints.lock():
            outcome = self._checkpoints.load_outcome()
            checkpoint = outcome.checkpoint
            if outcome.rebooted:
                report.discarded_after_reboot = len(outcome.discarded_claims)
                log.warning(
                    "node rebooted since the checkpoint was written (boot %s): "
                    "discarded %d prepared claims",
                    outcome.discarded_boot_id,
                    report.discarded_after_reboot,
                )
            if outcome.incomplete:
                checkpoint = self._repair_locked(outcome, report)
            else:
                if outcome.legacy:
                    log.info(
                        "migrating %d claims of %s to one file per claim in %s",
                        len(checkpoint.claims),
                        self._checkpoints.legacy_file,
                        self._checkpoints.directory,
                    )
                if outcome.needs_save:
                    self._checkpoints.save(checkpoint)
            for temp in self._checkpoints.remove_temp_files():
                log.warning("removed %s, left by an interrupted checkpoint write", temp)
                report.temp_files_removed.append(str(temp))
            if self._cdi.claim_uids() - set(checkpoint.claims):
                before = set(checkpoint.claims)
                checkpoint = self._rebuild(checkpoint, report)
                if set(checkpoint.claims) != before:
                    self._checkpoints.save(checkpoint)
            self._state = checkpoint
            self._generation = self._checkpoints.generation()
        self._settle_rebuilt(report)
        checkpoint = self.snapshot()
        for entry in checkpoint.in_state(ClaimState.PrepareStarted):
            log.warning("%s was left half-prepared; rolling it back", entry.ref)
            if self._recover_roll_back(entry, report):
                report.rolled_back.append(entry.uid)
        for entry in checkpoint.in_state(ClaimState.PrepareCompleted):
            if entry.releasing or not self._cdi.path_for(entry.uid).exists():
                log.warning("%s has no CDI spec: finishing its interrupted Unprepare", entry.ref)
                if self._recover_roll_back(entry, report):
                    report.unprepare_finished.append(entry.uid)

        def remove_orphans(checkpoint: Checkpoint) -> Checkpoint:
            self._start_base(checkpoint)
            for temp in self._cdi.remove_temp_files():
                log.warning("removed %s, left by an interrupted CDI spec write", temp)
                report.temp_files_removed.append(str(temp))
            for uid in sorted(self._cdi.claim_uids() - set(checkpoint.claims)):
                self._cdi.remove(uid)
                report.orphan_cdi_specs_removed.append(uid)
                log.warning("removed CDI spec of claim %s: nothing vouches for it", uid)
            for entry in checkpoint.in_state(ClaimState.PrepareCompleted):
                for device in entry.devices:
                    mig = device.mig
                    if mig is not None and mig.created_by_us and not self._mig_exists(mig):
                        report.missing_mig_devices.append(device.device)
                        log.error(
                            "%s: its MIG device %s (GI %s on %s) no longer exists",
                            entry.ref,
                            device.device,
                            mig.gi_id,
                            mig.parent_uuid,
                        )
            return checkpoint

        self.update(remove_orphans)
        for strategy in self._sharing:
            strategy.recover(self.current(), report)
        return report

    def _start_base(self, checkpoint: Checkpoint) -> None:
        """Under the checkpoint lock at start-up: (re)write the current base spec and
        remove those no claim of `checkpoint` names. A driver root that cannot be read
        now is logged and removes nothing (its first Prepare writes the base spec)."""
        try:
            name, doc = self._current_base()
            self._cdi.write_base(name, doc)
        except DraGpuError as exc:
            log.error("cannot write the node's base CDI spec: %s", exc)
            return
        for removed in self._remove_unused_bases(checkpoint):
            log.info("removed base CDI spec %s: no prepared claim names it", removed)

    def _current_base(self) -> tuple[str, dict[str, Any]]:
        """The device name and document of the base spec for the driver as it is now
        (built again only when the driver's edits or the uvm major changed)."""
        edits = None if self._driver_edits is None else self._driver_edits()
        uvm_major = self._host.char_major("nvidia-uvm")
        cached = self._base
        if cached is not None and cached[0] is edits and cached[1] == uvm_major:
            return cached[2], cached[3]
        common = cdi.common_edits(uvm_major)
        if edits is not None:
            common = common.merged(edits)
        name, doc = base_spec.base_spec(common, owner=self._cdi.owner)
        if cached is not None and cached[2] != name:
            log.info("the node's base CDI spec is now %s (was %s)", name, cached[2])
            self._collect_bases = True
        self._base = (edits, uvm_major, name, doc)
        return name, doc

    def _ensure_base(self, name: str, doc: dict[str, Any]) -> None:
        """Under the checkpoint lock: the base spec `name` exists (written if it does not)."""
        if not self._cdi.base_path(name).exists():
            self._cdi.write_base(name, doc)

    def _remove_unused_bases(self, checkpoint: Checkpoint) -> list[str]:
        """Under the checkpoint lock: remove each base spec of ours that is not the current
        one and that no claim of `checkpoint` names; the removed names."""
        used = {
            name
            for entry in checkpoint.claims.values()
            for device in entry.devices
            for cdi_id in device.cdi_device_ids
            if (name := base_spec.name_of_id(cdi_id)) is not None
        }
        current = self._base[2] if self._base is not None else None
        removed: list[str] = []
        waiting = False
        for name in sorted(self._cdi.base_names()):
            if name == current:
                continue
            if name in used:
                waiting = True
            elif self._cdi.remove_base(name):
                removed.append(name)
        self._collect_bases = waiting
        return removed

    def _settle_rebuilt(self, report: RecoveryReport) -> None:
        """Roll back the rebuilt claims the API says no longer exist.

        A claim rebuilt from its CDI spec alone may be one whose Unprepare the
        kubelet will never send again: deleted from the API (a claim is
        deleted only once nothing reserves it) or replaced by another of the
        same name. Anything else is kept, also where the API cannot be
        reached: holding a device too long is recoverable, tearing down a
        running pod's GPU is not.
        """
        for uid in list(report.rebuilt):
            entry = self.snapshot().claims.get(uid)
            if entry is None:
                continue
            try:
                obj = self._cluster.get_resource_claim(entry.namespace, entry.name)
            except NotFoundError:
                obj = None
            except Exception as exc:  # the API is down or answers garbage: keep the claim
                log.warning("%s: kept, the API cannot say whether it is held: %s", entry.ref, exc)
                continue
            if obj is not None and _same_claim(obj, uid):
                continue
            log.warning("%s: rebuilt, but the API no longer has it: unpreparing it", entry.ref)
            if self._recover_roll_back(entry, report):
                report.rebuilt_but_gone.append(uid)

    def _rebuild(self, checkpoint: Checkpoint, report: RecoveryReport) -> Checkpoint:
        """Ask each rebuild source what it vouches for (see `kubelet_plugin.rebuild`)."""
        for source in self._rebuild_sources:
            try:
                rebuilt = source.rebuild(checkpoint)
            except DraGpuError as exc:
                log.error("rebuilding the checkpoint from %s failed: %s", source.name, exc)
                continue
            for uid in sorted(rebuilt.claims):
                entry = rebuilt.claims[uid]
                if entry is checkpoint.claims.get(uid):
                    continue
                if uid not in report.rebuilt:
                    report.rebuilt.append(uid)
                log.warning(
                    "rebuilt %s from %s: %s, devices %s",
                    entry.ref,
                    source.name,
                    entry.state.value,
                    ", ".join(_describe(device) for device in entry.devices) or "none",
                )
            checkpoint = rebuilt
        return checkpoint

    def _recover_roll_back(self, entry: ClaimEntry, report: RecoveryReport) -> bool:
        """Roll `entry` back at start-up; on failure keep its record for a later try and go on.

        One instance the GPU will not let go of must not keep the plugin from
        serving every other claim of the node (a crash loop would also block
        every Unprepare). The record stays, marked releasing, so its devices
        are free for other claims, and the claim's next Prepare or Unprepare,
        or a Prepare on the same GPU, tries the undo again. A claim another
        plugin instance is working on right now is left to it.
        """
        with self._claim_locks.try_hold(entry.uid) as held:
            if not held:
                log.info("%s: another plugin instance is working on it; left alone", entry.ref)
                return False
            try:
                self._roll_back(entry)
            except DraGpuError as exc:
                log.error("%s: rolling back failed, kept for a later retry: %s", entry.ref, exc)
                self._mark_releasing(entry.uid)
                report.rollback_failed.append(entry.uid)
                return False
        return True

    def reconcile_mig(self, *, reclaim_unknown: bool) -> list[str]:
        """Report MIG instances no claim owns; destroy them only if asked to.

        Instances an admin created are published as static MIG devices and
        left alone (NVIDIA's driver destroys them at start-up). With
        `--mig-reclaim-unknown` they are destroyed. Returns one line each.
        """
        owned = self.owned_instances()
        lines = []
        for uuid, gi_id, profile in self._mig.instances():
            if (uuid, gi_id) in owned:
                continue
            if reclaim_unknown:
                try:
                    with self._gpu_locks.hold([uuid]):
                        self._mig.destroy_instance(uuid, gi_id)
                        self._mig.release_gpu(uuid)
                except DraGpuError as exc:  # one stuck instance must not stop the plugin
                    lines.append(
                        f"could not destroy MIG instance GI {gi_id} ({profile}) on {uuid}: {exc}; "
                        "it stays published as a static MIG device"
                    )
                    continue
                lines.append(
                    f"destroyed MIG instance GI {gi_id} ({profile}) on {uuid}: no claim owns it"
                )
            else:
                lines.append(
                    f"MIG instance GI {gi_id} ({profile}) on {uuid} is not owned by any claim: "
                    "published as a static MIG device; --mig-reclaim-unknown would destroy it"
                )
        for line in lines:
            log.warning("%s", line)
        return lines

    def owned_instances(self) -> set[tuple[str, int]]:
        """(parent UUID, GI id) of every MIG device a checkpointed claim created."""
        return {
            (device.mig.parent_uuid, device.mig.gi_id)
            for entry in self.snapshot().claims.values()
            for device in entry.devices
            if device.mig is not None and device.mig.created_by_us and device.mig.gi_id is not None
        }

    def prepared_counts(self) -> tuple[int, int]:
        """(claims, devices) prepared on this node, from the checkpoint (for metrics)."""
        completed = [
            entry
            for entry in self.snapshot().claims.values()
            if entry.state is ClaimState.PrepareCompleted
        ]
        return len(completed), sum(len(entry.devices) for entry in completed)

    # -- DraService ---------------------------------------------------------------

    def prepare(self, claims: Sequence[ClaimRef]) -> Mapping[str, PrepareResult]:
        results: dict[str, PrepareResult] = {}
        fetched: list[tuple[ClaimRef, AllocatedClaim]] = []
        for ref in claims:
            try:
                fetched.append((ref, self._fetch(ref)))
            except Exception as exc:  # one claim's bad input never fails the others
                results[ref.uid] = PrepareResult(error=_claim_error("prepare", ref, exc))
        for ref, result in zip(
            [ref for ref, _ in fetched],
            _in_parallel(self._prepare_guarded, [claim for _, claim in fetched]),
            strict=True,
        ):
            results[ref.uid] = result
        self._claims_changed()
        return results

    def unprepare(self, claims: Sequence[ClaimRef]) -> Mapping[str, UnprepareResult]:
        results = {
            ref.uid: result
            for ref, result in zip(
                claims, _in_parallel(self._unprepare_guarded, claims), strict=True
            )
        }
        self._claims_changed()
        return results

    def _claims_changed(self) -> None:
        if self._on_claims_changed is not None:
            self._on_claims_changed()

    # -- Prepare of one claim -------------------------------------------------------

    def _prepare_guarded(self, claim: AllocatedClaim) -> PrepareResult:
        """One claim's Prepare, isolated: any exception becomes this claim's one-line error."""
        ref = ClaimRef(claim.namespace, claim.uid, claim.name)
        try:
            with self._claim_locks.hold(claim.uid):
                return PrepareResult(devices=self._prepare_one(claim))
        except Exception as exc:
            return PrepareResult(error=_claim_error("prepare", ref, exc))

    def _unprepare_guarded(self, ref: ClaimRef) -> UnprepareResult:
        """One claim's Unprepare, isolated: any exception becomes this claim's one-line error."""
        try:
            with self._claim_locks.hold(ref.uid):
                self._unprepare_one(ref.uid)
            return UnprepareResult()
        except Exception as exc:
            return UnprepareResult(error=_claim_error("unprepare", ref, exc))

    def _fetch(self, ref: ClaimRef) -> AllocatedClaim:
        try:
            obj = self._cluster.get_resource_claim(ref.namespace, ref.name)
        except NotFoundError as exc:
            raise ClaimError(
                f"ResourceClaim {ref.namespace}/{ref.name} not found: it was deleted, "
                "or the kubelet and the API disagree"
            ) from exc
        return parse_allocated_claim(
            obj,
            driver=self._driver_name,
            expected_uid=ref.uid,
            expected_namespace=ref.namespace,
            expected_name=ref.name,
        )

    def _prepare_one(self, claim: AllocatedClaim) -> tuple[ResultDevice, ...]:
        self._finish_releases(claim)
        plans: list[ClaimPlan] = []
        found: list[ClaimEntry] = []
        # fsync'd only if something must be undone after a crash (see `_undo_needs_record`).
        durable = _undo_needs_record(claim, self._devices)

        def start(checkpoint: Checkpoint) -> Checkpoint:
            """Plan and record the claim, in one look at the checkpoint; an entry it already
            has is left for the caller (a repeated Prepare, or one left half-done). A claim
            with nothing to create or bind is completed in the same commit (`_spec_only`)."""
            entry = checkpoint.claims.get(claim.uid)
            if entry is not None:
                found.append(entry)
                return checkpoint
            plan = plan_claim(
                claim,
                pool_name=self._pool_name,
                devices=self._devices,
                placed=checkpoint,
                sharing=[strategy.plan for strategy in self._sharing],
            )
            plans.append(plan)
            started = checkpoint.start(plan.entry())
            if durable or not _spec_only(plan):
                return started
            failpoints.hit("prepare-after-checkpoint-started")
            try:
                return self._complete_locked(started, plan)
            except Exception:
                self._cdi.remove(claim.uid)  # nothing was recorded: no spec may stay either
                raise

        self.update(start, durable=durable)
        if found:
            existing = found.pop()
            if existing.state is ClaimState.PrepareCompleted and not existing.releasing:
                return _result_devices(existing.devices)
            log.info("%s was left half-prepared; rolling back first", existing.ref)
            self._roll_back(existing)
            self.update(start, durable=durable)
            if found:  # only another call could have started it since: it holds the claim
                raise ClaimError(f"{found[0].ref} is being prepared by another call; retry")
        (plan,) = plans
        done = self.snapshot().claims[claim.uid]
        if done.state is ClaimState.PrepareCompleted:  # completed with its start
            return self._prepared(claim, done.devices)
        failpoints.hit("prepare-after-checkpoint-started")

        try:
            self._create_mig_devices(claim.uid, plan)
            for strategy in self._sharing:
                # this process's view is the claim's truth: it holds the claim's lock
                strategy.apply(plan, self.snapshot().claims[claim.uid])
            completed = (
                self.update(lambda checkpoint: self._complete_locked(checkpoint, plan))
                .claims[claim.uid]
                .devices
            )
        except Exception as exc:
            entry = self.current().claims.get(claim.uid)
            try:
                if entry is not None:
                    self._roll_back(entry, search_unrecorded=False)
            except Exception as undo:
                # Nothing may keep holding the devices of a claim that failed: its record
                # stays, marked releasing, and the undo is finished later.
                self._mark_releasing(claim.uid)
                raise ClaimError(
                    f"{_one_line(exc)}; undoing the partial Prepare also failed: "
                    f"{_one_line(undo)} (its devices are free for other claims; the undo is "
                    "retried on the claim's next Prepare or Unprepare, a Prepare on the same "
                    "GPU, or the plugin's next start)"
                ) from exc
            raise
        return self._prepared(claim, completed)

    def _prepared(
        self, claim: AllocatedClaim, completed: Sequence[PreparedDevice]
    ) -> tuple[ResultDevice, ...]:
        failpoints.hit("prepare-after-checkpoint-completed")
        log.info(
            "prepared %s (%s): %s",
            claim.ref,
            claim.uid,
            ", ".join(device.device for device in completed),
        )
        return _result_devices(completed)

    def _complete_locked(self, checkpoint: Checkpoint, plan: ClaimPlan) -> Checkpoint:
        """Under the checkpoint lock: write the started claim's CDI spec (and the node's
        base spec if it is missing) and record the claim PrepareCompleted."""
        uid = plan.claim.uid
        entry = checkpoint.claims[uid]
        spec = build_claim_spec(plan, entry, host=self._host, hooks=self._cdi_hooks)
        devices = list(entry.devices)
        # A VM's GPUs alone need no base spec (nor a loaded nvidia-uvm for it).
        if not all(device.vfio is not None for device in devices):
            name, doc = self._current_base()
            self._ensure_base(name, doc)
            devices = _with_base(devices, name)
        done = checkpoint.complete(uid, devices)
        record = to_spec_record(self._checkpoints.boot_id, done.claims[uid])
        self._cdi.write(uid, spec, record=record)
        failpoints.hit("prepare-after-cdi-written")
        return done

    def _finish_releases(self, claim: AllocatedClaim) -> None:
        """Retry the undo of claims whose rollback failed on the GPUs `claim` uses, so what
        they left (a MIG instance, a CDI spec) is gone before `claim` is planned there.
        One that fails again is only logged: the GPU's devices are free regardless."""
        gpus = {
            device.gpu.uuid
            for result in claim.results
            if (device := self._devices.get(result.device)) is not None
        }
        # This process's last look at the checkpoint (every lock taken refreshes it): a
        # rollback another instance failed is finished there, or at its start-up.
        for entry in self.snapshot().releasing():
            if entry.uid == claim.uid or not gpus & _gpus_of(entry):
                continue
            with self._claim_locks.try_hold(entry.uid) as held:
                if not held:
                    continue
                try:
                    self._roll_back(entry)
                except DraGpuError as exc:
                    log.warning(
                        "%s: finishing its failed rollback failed again: %s", entry.ref, exc
                    )
                    continue
            log.info("%s: finished its failed rollback", entry.ref)

    def _mark_releasing(self, uid: str) -> None:
        """Record that `uid`'s rollback failed (never raises: at worst only this process
        knows, which still frees the devices here)."""
        try:
            self.update(lambda checkpoint: checkpoint.mark_releasing(uid))
        except Exception as exc:
            log.error("claim %s: cannot record its failed rollback: %s", uid, exc)
            with self._thread_lock:
                if self._state is not None:
                    self._state = self._state.mark_releasing(uid)

    def _create_mig_devices(self, uid: str, plan: ClaimPlan) -> None:
        """Create the dynamic MIG devices of a started claim, GPU by GPU in parallel; each
        GI and CI id is checkpointed as soon as NVML returns it."""
        targets = [
            (index, target)
            for index, item in enumerate(plan.devices)
            if (target := mig_target(item.device)) is not None
        ]
        full_gpus = {
            item.device.gpu.uuid
            for item in plan.devices
            if item.device.kind == "gpu" and item.device.gpu.mig_capable
        }
        for uuid in sorted(full_gpus):  # a whole GPU must not be left in MIG mode
            with self._gpu_locks.hold([uuid]):
                self._mig.ensure_mig_mode(uuid, enabled=False, where=f"GPU {uuid}")
        by_gpu: dict[str, list[tuple[int, MigTarget]]] = {}
        for index, target in targets:
            by_gpu.setdefault(target.parent_uuid, []).append((index, target))

        def on_gpu(items: list[tuple[int, MigTarget]]) -> None:
            with self._gpu_locks.hold([items[0][1].parent_uuid]):
                for index, target in items:

                    def progress(record: MigRecord, index: int = index) -> None:
                        self._record_progress(uid, index, record)

                    self._mig.create(target, progress)

        _run_all(on_gpu, list(by_gpu.values()))

    def _record_progress(self, uid: str, index: int, record: MigRecord) -> None:

        def record_it(checkpoint: Checkpoint) -> Checkpoint:
            devices = list(checkpoint.claims[uid].devices)
            devices[index] = dataclasses.replace(devices[index], mig=record)
            return checkpoint.update_devices(uid, devices)

        self.update(record_it)
        failpoints.hit(f"mig-after-{record.stage}-recorded")

    # -- rollback and Unprepare ---------------------------------------------------

    def _roll_back(self, entry: ClaimEntry, *, search_unrecorded: bool = True) -> None:
        """Undo a half-done Prepare: destroy what it created, forget it.

        After a crash, a GPU instance may exist that was created but not yet
        recorded; it is found by profile and placement (`search_unrecorded`).
        A Prepare that failed in this process recorded everything it created
        (MigLifecycle.create undoes a GI it could not report), so it skips that
        search: an instance at that place is someone else's, typically an
        admin's made after the devices were published, which is why creating
        ours failed. It must survive the rollback.
        """
        for strategy in self._sharing:
            strategy.release(entry)
        self._destroy_mig_devices(entry, search_unrecorded=search_unrecorded)

        def forget(checkpoint: Checkpoint) -> Checkpoint:
            self._cdi.remove(entry.uid)
            return checkpoint.remove(entry.uid)

        self.update(forget)

    def _unprepare_one(self, uid: str) -> None:
        entry = self.current().claims.get(uid)
        if entry is None:

            def remove_orphan(checkpoint: Checkpoint) -> Checkpoint:
                self._cdi.remove(uid)  # a spec without an entry is an orphan
                return checkpoint

            self.update(remove_orphan)
            return
        self._cdi.remove(uid)
        failpoints.hit("unprepare-after-cdi-removed")
        for strategy in self._sharing:
            strategy.release(entry)
        self._destroy_mig_devices(entry)

        def forget(checkpoint: Checkpoint) -> Checkpoint:
            checkpoint = checkpoint.remove(uid)
            if self._collect_bases:
                self._remove_unused_bases(checkpoint)
            return checkpoint

        self.update(forget)
        failpoints.hit("unprepare-after-checkpoint-removed")
        log.info("unprepared %s", entry.ref)

    def _destroy_mig_devices(self, entry: ClaimEntry, *, search_unrecorded: bool = True) -> None:
        """Destroy the MIG devices `entry` created, GPU by GPU in parallel."""
        records = [d.mig for d in entry.devices if d.mig is not None and d.mig.created_by_us]

        def on_gpu(uuid: str) -> None:
            with self._gpu_locks.hold([uuid]):
                others = {
                    (d.mig.parent_uuid, d.mig.gi_id)
                    for other in self.current().claims.values()
                    if other.uid != entry.uid
                    for d in other.devices
                    if d.mig is not None
                }
                for record in records:
                    if record.parent_uuid != uuid:
                        continue
                    found = self._mig.find_unrecorded(record) if search_unrecorded else record
                    if (found.parent_uuid, found.gi_id) in others:
                        continue  # the id now belongs to another claim's instance
                    self._mig.destroy(found)
                self._mig.release_gpu(uuid)

        _run_all(on_gpu, sorted({record.parent_uuid for record in records}))

    def _mig_exists(self, record: MigRecord) -> bool:
        found = self._mig.find_unrecorded(
            dataclasses.replace(record, gi_id=None, ci_id=None, uuid=None)
        )
        return found.gi_id == record.gi_id

    # -- helpers ------------------------------------------------------------------

    def update(
        self, mutate: Callable[[Checkpoint], Checkpoint], *, durable: bool = False
    ) -> Checkpoint:
        """Apply `mutate` to the checkpoint and persist the result; the only path that changes it.

        Runs under the thread lock and the checkpoint's file lock, so
        read-modify-write cycles never interleave, in this process or with a
        rolling-upgrade peer sharing the data directory: the checkpoint is
        reloaded first if another process changed it (`current`). `mutate`
        gets the current checkpoint and returns the next one (or the same
        object for no change); it may do work that must happen atomically with
        the change (writing a CDI spec, planning against the other claims). If
        it raises, nothing is saved. Only the files of the claims that changed
        are written, so the cost does not depend on how many claims the node
        holds.

        The change is written without fsync (`durable=True` flushes it): other
        processes see it at once (a peer must see a reservation), a crash of
        the process loses nothing (the page cache keeps it), and only a crash
        of the machine could lose it. That is a reboot, after which every
        record of the earlier boot is discarded unread (its boot id; devices,
        MIG instances, MPS daemons and CDI specs under /var/run are gone
        too), so a flushed record would never be used. NVIDIA's plugin
        fsyncs its checkpoint three times per Prepare and Unprepare; ours
        none, for a whole GPU (`_undo_needs_record` still flushes the
        PrepareStarted of a claim with hardware side effects, as before).
        """
        with self._thread_lock, self._checkpoints.lock():
            old = self._current_locked()
            new = mutate(old)
            if new is not old:
                token = self._checkpoints.commit(old, new, sync=durable)
                self._state = new
                if token is not None:
                    self._generation = token
            return new

    def current(self) -> Checkpoint:
        """The checkpoint as it is now: reloaded under its lock if another plugin instance
        changed it (or it was damaged) since this one last looked."""
        with self._thread_lock, self._checkpoints.lock():
            return self._current_locked()

    def snapshot(self) -> Checkpoint:
        """The checkpoint as this process last saw it (an immutable value; read it without
        locks). Decisions that another instance's changes could affect use `current`."""
        state = self._state
        if state is None:
            return self.current()
        return state

    def _current_locked(self) -> Checkpoint:
        """Under the locks: the cached checkpoint if no process changed it since, else a
        fresh load; a damaged directory is never read as "no claims" (`_repair_locked`)."""
        generation = self._checkpoints.generation()
        problem = self._checkpoints.directory_problem()
        if self._state is not None and generation == self._generation and problem is None:
            return self._state
        if self._state is not None and generation in (self._generation, ""):
            # Nobody else wrote since we did (a lock file without a token was deleted
            # with its directory, not written by a peer): our copy is the truth.
            log.error(
                "checkpoint directory %s %s while %d claims are prepared: rewriting them "
                "from memory",
                self._checkpoints.directory,
                problem,
                len(self._state.claims),
            )
            self._checkpoints.save(self._state)
            self._generation = self._checkpoints.generation()
            return self._state
        outcome = self._checkpoints.load_outcome()
        checkpoint = outcome.checkpoint
        if outcome.incomplete:
            checkpoint = self._repair_locked(outcome, RecoveryReport())
        self._state = checkpoint
        self._generation = self._checkpoints.generation()
        return checkpoint

    def _repair_locked(self, outcome: LoadOutcome, report: RecoveryReport) -> Checkpoint:
        """Under the locks: rebuild what a damaged or unreadable checkpoint lost from every
        source the node has (CDI records, the API, MIG instances), and save it, so nothing
        held is forgotten, deleted or handed out again."""
        report.checkpoint_rebuilt = True
        if outcome.damaged is not None:
            log.error(
                "checkpoint directory %s %s: rebuilding the claims from the node",
                self._checkpoints.directory,
                outcome.damaged,
            )
        for bad in outcome.unreadable:
            try:
                moved = self._checkpoints.quarantine(bad.path)
            except CheckpointError as exc:
                log.error("checkpoint file %s unreadable (%s): %s", bad.path, bad.error, exc)
                continue
            report.quarantined.append(str(moved))
            log.error("checkpoint unreadable (%s); moved to %s", bad.error, moved)
        checkpoint = self._rebuild(outcome.checkpoint, report)
        self._checkpoints.save(checkpoint)
        return checkpoint


def _spec_only(plan: ClaimPlan) -> bool:
    """Whether the claim's CDI spec is all its Prepare makes: no MIG instance to create, no
    sharing to apply, no GPU to bind to vfio-pci. Such a claim is started and completed in
    one checkpoint commit (a crash before it leaves nothing to undo but an unowned spec,
    which start-up removes), one file write less per Prepare."""
    return all(config is None for config in plan.configs.values()) and all(
        item.device.kind != "vfio" and item.device.dynamic is None and item.mps is None
        for item in plan.devices
    )


def _undo_needs_record(claim: AllocatedClaim, devices: Mapping[str, AllocatableDevice]) -> bool:
    """Whether Prepare's PrepareStarted record must reach the disk before the side effects.

    It must when Prepare creates something that a crash could leave without
    an owner: dynamic MIG devices, and anything an opaque config asks for
    (sharing: MPS daemons, time-slices). Whole GPUs and static MIG devices
    need nothing undone: the CDI spec is their only side effect, and a spec
    without a checkpoint entry is removed at start-up, so one fsync'd write
    per Prepare is saved.
    """
    return bool(claim.configs) or any(
        (device := devices.get(result.device)) is not None and device.dynamic is not None
        for result in claim.results
    )


def _gpus_of(entry: ClaimEntry) -> set[str]:
    """The GPUs whose devices `entry` recorded (a MIG device's parent)."""
    gpus = {d.mig.parent_uuid for d in entry.devices if d.mig is not None}
    gpus |= {d.mps.gpu_uuid for d in entry.devices if d.mps is not None}
    gpus |= {d.time_slice.gpu_uuid for d in entry.devices if d.time_slice is not None}
    return gpus


def _same_claim(obj: Mapping[str, object], uid: str) -> bool:
    """Whether the API object is still claim `uid` (not deleted and created again)."""
    metadata = obj.get("metadata")
    return isinstance(metadata, Mapping) and metadata.get("uid") == uid


def _describe(device: PreparedDevice) -> str:
    mig = device.mig
    if mig is None or not mig.created_by_us:
        return device.device
    return f"{device.device} (GI {mig.gi_id}, CI {mig.ci_id} on {mig.parent_uuid})"


def _with_base(devices: Sequence[PreparedDevice], base: str) -> list[PreparedDevice]:
    """`devices` with the base spec's id first in each one's CDI ids (replacing another);
    a GPU passed through to a VM gets none of the driver's files, so no base id."""
    first = base_spec.qualified_id(base)
    return [
        device
        if device.vfio is not None
        else dataclasses.replace(
            device,
            cdi_device_ids=(
                first,
                *(i for i in device.cdi_device_ids if base_spec.name_of_id(i) is None),
            ),
        )
        for device in devices
    ]


def _result_devices(devices: Sequence[PreparedDevice]) -> tuple[ResultDevice, ...]:
    return tuple(
        ResultDevice(
            request_names=device.request_names,
            pool_name=device.pool,
            device_name=device.device,
            cdi_device_ids=device.cdi_device_ids,
            share_id=device.share_id,
        )
        for device in devices
    )


def _run_all(work: Callable[[_T], None], items: Iterable[_T]) -> None:
    """`work` over `items` in parallel; every item runs to its end even when another
    fails (so nothing is left half-done), then the first error is raised."""
    jobs = list(items)
    if len(jobs) <= 1:
        for job in jobs:
            work(job)
        return
    with ThreadPoolExecutor(max_workers=len(jobs)) as pool:
        futures = [pool.submit(work, job) for job in jobs]
    for future in futures:
        future.result()
