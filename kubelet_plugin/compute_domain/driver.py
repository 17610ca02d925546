"""Prepare and Unprepare of `compute-domain.nvidia.com` claims (a `DraService`).

One channel claim, driver-managed IMEX (the default), is one transaction,
recorded in the GPU driver's checkpoint (`dra_driver.claims.checkpoint`, a
`ChannelRecord` per device) so a crash anywhere is finished or rolled back:

    Prepare:   fetch the claim (`Cluster`) -> decode its configs strictly
               (`configs.effective_configs`) -> find the ComputeDomain by
               `domainID` (its UID) and check its namespace -> checkpoint
               PrepareStarted (with the domain and the member's name) ->
               create the node's ComputeDomainMember `<uid>.<node>` if absent
               (refused while the node is a member of another domain) -> wait
               until the IMEX host reports it Ready (`MemberWatch`, up to
               `prepare_wait`) -> write the claim's CDI spec (the channel
               device nodes, `channel_cdi`) -> checkpoint PrepareCompleted
    Unprepare: remove the CDI spec -> delete the member if no other claim of
               this node still holds it -> drop the checkpoint entry

Every step is idempotent and a failpoint (`failpoints.CD_PREPARE_STEPS`,
`CD_UNPREPARE_STEPS`). Unprepare reads the checkpoint alone, never the
ComputeDomain or the claim (NVIDIA #380). A Prepare that times out waiting
keeps its entry and member, and the kubelet's retry resumes the wait; a
restart (`recover`) rolls back every PrepareStarted claim, removes CDI specs
no claim owns, and deletes every member of this node that no completed claim
holds.

A stale Prepare (a late retry of the kubelet's for a claim that is deleted,
being deleted, or re-created under another UID; NVIDIA's `PrepareAborted`
case) is refused with `StaleClaimError` naming the claim, and whatever an
earlier Prepare of it left (entry, member) is rolled back at once: nothing
will ever Unprepare a claim that is gone, so nothing may stay prepared for it.

Errors: bad input (an unknown config field, a config of the wrong kind, a
domain that does not exist or lives in another namespace, a daemon device)
is a per-claim error naming the object and field; the daemon keeps serving.
Waiting that times out is an error saying what IMEX on this node is doing,
from the member's status (state, reason, message).

Daemon devices (`daemon-0`): dra-gpu runs IMEX in its own per-node IMEX host
(`dra-gpu imex-host`), not in a DaemonSet pod that claims `daemon-0`, so a
daemon claim is refused with a permanent error that says so (the device is
published so NVIDIA's DeviceClass and selectors still resolve).

Host-managed IMEX (`host_imex` given): `Single` is forced, no member is
created, and the host's `nvidia-imex-ctl -q` must say READY.

Channel isolation (`isolation_mode="channel"`,
`dra_driver.compute_domain.isolation`): several domains' members share the
node (no refusal), each member is labelled with the mode, and the container
gets the domain's own channel `channel<N>`, N from the annotation the
controller writes on the ComputeDomain (checkpointed as `ChannelRecord.first`,
so Unprepare still needs nothing but the checkpoint). `allocationMode: All`
is refused, naming the domain and the field: all 2048 channels would hand the
pod every other domain's channel. A plugin whose mode differs from the
controller's (an annotation where none should be, or none where one should)
or from a member already on the node says so in the Prepare error.

A node without a multi-node clique (the member's IMEX host reports
`NoFabric`): the claim succeeds with no device nodes, as NVIDIA's, and a
Warning Event says so.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Final

from dra_driver import failpoints
from dra_driver.claims.allocated import AllocatedClaim, DeviceResult, parse_allocated_claim
from dra_driver.claims.checkpoint import (
    ChannelRecord,
    Checkpoint,
    ClaimEntry,
    ClaimState,
    PreparedDevice,
)
from dra_driver.claims.checkpoint_store import CheckpointStore
from dra_driver.claims.device_config import config_key
from dra_driver.compute_domain import channel_cdi, isolation
from dra_driver.compute_domain.api import ComputeDomain, decode_compute_domain
from dra_driver.compute_domain.configs import (
    ComputeDomainChannelConfig,
    device_type,
    effective_configs,
)
from dra_driver.compute_domain.kernel_files import PROC_DEVICES, imex_channels_major
from dra_driver.compute_domain.membership import (
    NODE_LABEL,
    MemberSpec,
    MemberState,
    MemberStatus,
    build_member,
    member_name,
    member_spec,
)
from dra_driver.compute_domain.names import DAEMON_TYPE, DRIVER_NAME
from dra_driver.container.cdi_store import CdiStore
from dra_driver.errors import (
    AlreadyExistsError,
    CdiError,
    ClaimError,
    ClusterError,
    ConfigError,
    DraGpuError,
    NotFoundError,
    StaleClaimError,
)
from dra_driver.kube.cluster import Cluster
from dra_driver.kube.object_store import COMPUTE_DOMAIN, COMPUTE_DOMAIN_MEMBER, ObjectStore
from kubelet_plugin.claim_calls import claim_error as _claim_error
from kubelet_plugin.claim_calls import in_parallel as _in_parallel
from kubelet_plugin.claim_locks import ClaimLocks
from kubelet_plugin.compute_domain.host_imex import HostImex
from kubelet_plugin.compute_domain.member_watch import MemberWatch
from kubelet_plugin.service import ClaimRef, PrepareResult, ResultDevice, UnprepareResult

log = logging.getLogger(__name__)

DEFAULT_PREPARE_WAIT_S: Final = 45.0

DAEMON_REFUSED: Final = (
    "dra-gpu runs IMEX in its per-node IMEX host (`dra-gpu imex-host`), not in a pod that "
    "claims the daemon device: a ComputeDomainDaemonConfig claim has nothing to prepare "
    "here; claim the channel (DeviceClass compute-domain-default-channel.nvidia.com, the "
    "ResourceClaimTemplate the ComputeDomain names)"
)

_WAITING_FOR: Final[Mapping[str, str]] = {
    MemberState.PENDING: "waiting for an index (the controller has not placed this node in "
    "the domain's clique yet, or the node's IMEX host is not running)",
    MemberState.STARTING: "the IMEX daemon is starting (nvidia-imex-ctl -q is not READY yet)",
    MemberState.FAILED: "the IMEX daemon failed",
}
_SETTLED: Final = (MemberState.READY, MemberState.NO_FABRIC)


class ComputeDomainDriver:
    """Prepares and unprepares this node's `compute-domain.nvidia.com` claims."""

    def __init__(
        self,
        *,
        node_name: str,
        namespace: str,
        cluster: Cluster,
        objects: ObjectStore,
        checkpoints: CheckpointStore,
        cdi_store: CdiStore,
        channels_major: Callable[[], int],
        members: MemberWatch,
        clique: Callable[[], str | None],
        prepare_wait: float = DEFAULT_PREPARE_WAIT_S,
        host_imex: HostImex | None = None,
        claim_locks: ClaimLocks | None = None,
        warn: Callable[[ClaimRef, str], None] | None = None,
        isolation_mode: str = isolation.DOMAIN,
    ) -> None:
        self._node = node_name
        self._isolation = isolation_mode
        self._namespace = namespace  # the driver's: where members live
        self._cluster = cluster
        self._objects = objects
        self._checkpoints = checkpoints
        self._cdi = cdi_store
        self._channels_major = channels_major
        self._members = members
        self._clique = clique
        self._prepare_wait = prepare_wait
        self._host_imex = host_imex
        self._claim_locks = claim_locks or ClaimLocks(None, timeout_s=prepare_wait + 15.0)
        self._warn = warn
        self._state_lock = threading.Lock()
        self._membership = threading.Lock()  # member create/delete decisions of this node
        self._state: Checkpoint | None = None
        self._generation = ""

    # -- start-up -------------------------------------------------------------------

    def recover(self) -> list[str]:
        """Roll back half-done Prepares, remove orphan CDI specs, delete members no completed
        claim holds. Returns what was done, one line each (for the start-up log)."""
        done: list[str] = []
        with self._state_lock, self._checkpoints.lock():
            outcome = self._checkpoints.load_outcome()
            checkpoint = outcome.checkpoint
            for entry in outcome.discarded_claims:
                done.append(f"discarded {entry.ref} of an earlier boot")
            for bad in outcome.unreadable:
                self._checkpoints.quarantine(bad.path)
                done.append(f"quarantined unreadable checkpoint file {bad.path}: {bad.error}")
            if outcome.needs_save:
                self._checkpoints.save(checkpoint)
            self._state = checkpoint
            self._generation = self._checkpoints.generation()
        for entry in self.current().in_state(ClaimState.PrepareStarted):
            try:
                self._roll_back(entry)
            except DraGpuError as exc:  # the API is down: the claim's next call finishes it
                done.append(f"cannot roll back the half-done Prepare of {entry.ref} yet: {exc}")
                continue
            done.append(f"rolled back the half-done Prepare of {entry.ref}")
        known = set(self.current().claims)
        for uid in sorted(self._cdi.claim_uids() - known):
            self._cdi.remove(uid)
            done.append(f"removed the CDI spec of claim {uid}, which no claim owns")
        if self._host_imex is None:
            done += self._sweep_members()
        return done

    def _sweep_members(self) -> list[str]:
        """Delete this node's members that no completed claim holds (a crash between
        creating one and recording its claim, or a reboot)."""
        try:
            members = self._objects.list_objects(
                COMPUTE_DOMAIN_MEMBER, self._namespace, labels={NODE_LABEL: self._node}
            )
        except ClusterError as exc:
            log.warning("cannot list this node's ComputeDomainMembers at start: %s", exc)
            return []
        with self._membership:
            held = _held_members(self.current())
            done = []
            for obj in members:
                name = str(obj.get("metadata", {}).get("name", ""))
                if name and name not in held:
                    try:
                        self._objects.delete_object(COMPUTE_DOMAIN_MEMBER, self._namespace, name)
                    except ClusterError as exc:
                        done.append(f"cannot delete ComputeDomainMember {name} yet: {exc}")
                        continue
                    done.append(f"deleted ComputeDomainMember {name}, which no claim holds")
        return done

    # -- DraService -------------------------------------------------------------------

    def prepare(self, claims: Sequence[ClaimRef]) -> Mapping[str, PrepareResult]:
        results = _in_parallel(self._prepare_guarded, claims)
        return {ref.uid: result for ref, result in zip(claims, results, strict=True)}

    def unprepare(self, claims: Sequence[ClaimRef]) -> Mapping[str, UnprepareResult]:
        results = _in_parallel(self._unprepare_guarded, claims)
        return {ref.uid: result for ref, result in zip(claims, results, strict=True)}

    def _prepare_guarded(self, ref: ClaimRef) -> PrepareResult:
        try:
            with self._claim_locks.hold(ref.uid):
                return PrepareResult(devices=self._prepare_one(ref))
        except Exception as exc:
            return PrepareResult(error=_claim_error("prepare", ref, exc))

    def _unprepare_guarded(self, ref: ClaimRef) -> UnprepareResult:
        try:
            with self._claim_locks.hold(ref.uid):
                self._unprepare_one(ref.uid)
            return UnprepareResult()
        except Exception as exc:
            return UnprepareResult(error=_claim_error("unprepare", ref, exc))

    # -- Prepare ----------------------------------------------------------------------

    def _prepare_one(self, ref: ClaimRef) -> tuple[ResultDevice, ...]:
        entry = self.current().claims.get(ref.uid)
        if entry is not None and entry.state is ClaimState.PrepareCompleted:
            return _result_devices(entry)
        try:
            claim = self._fetch(ref)
        except StaleClaimError:
            if entry is not None:  # an earlier Prepare of the gone claim: undo what it left
                self._roll_back(entry)
            raise
        record, results = self._plan(claim)
        devices = tuple(
            PreparedDevice(
                request_names=(result.base_request,),
                pool=result.pool,
                device=result.device,
                cdi_device_ids=(),
                share_id=result.share_id,
                consumed_capacity=result.consumed_capacity,
                channel=record,
            )
            for result in results
        )
        if entry is not None and _channel(entry) != record:
            self._roll_back(entry)  # started for something else: start over
            entry = None
        if entry is None:
            if record.member:
                self._refuse_other_domains(record)  # early, before anything is recorded
            started = ClaimEntry(
                uid=claim.uid,
                namespace=claim.namespace,
                name=claim.name,
                devices=devices,
                started_at=_now(),
            )
            self.update(lambda checkpoint: checkpoint.start(started))
            failpoints.hit("cd-prepare-after-checkpoint-started")
        # else: a Prepare that timed out waiting, retried: resume (every step is idempotent)
        no_fabric = False
        if self._host_imex is not None:
            if self._clique():  # NVIDIA asks the host's IMEX on fabric nodes only
                self._host_imex.require_ready()
        else:
            self._join(claim.uid, record)
            failpoints.hit("cd-prepare-after-member-created")
            no_fabric = self._wait_ready(record).state == MemberState.NO_FABRIC
        if no_fabric or not self._clique():
            ids: tuple[str, ...] = ()
            self._cdi.remove(claim.uid)
            if self._warn is not None:
                self._warn(
                    ref,
                    f"node {self._node} has no multi-node NVLink clique: the claim is "
                    "prepared without IMEX channels (as NVIDIA's driver does); its "
                    "containers cannot use memory across nodes",
                )
        else:
            ids = self._write_spec(claim.uid, devices, record.channels, record.first)
        failpoints.hit("cd-prepare-after-cdi-written")
        final = tuple(dataclasses.replace(d, cdi_device_ids=ids) for d in devices)
        completed = self.update(lambda checkpoint: checkpoint.complete(claim.uid, final))
        failpoints.hit("cd-prepare-after-checkpoint-completed")
        return _result_devices(completed.claims[claim.uid])

    def _fetch(self, ref: ClaimRef) -> AllocatedClaim:
        """The claim the kubelet asks for; StaleClaimError when it is gone or going (deleted,
        being deleted, or re-created under another UID): a Prepare of it now is stale."""
        what = f"ResourceClaim {ref.namespace}/{ref.name} (UID {ref.uid})"
        try:
            obj = self._cluster.get_resource_claim(ref.namespace, ref.name)
        except NotFoundError as exc:
            raise StaleClaimError(
                f"{what} not found: it was deleted; a Prepare of it is stale and refused "
                "(nothing is prepared for it)"
            ) from exc
        meta = obj.get("metadata") if isinstance(obj, Mapping) else None
        if isinstance(meta, Mapping):
            if meta.get("uid") not in (None, ref.uid):
                raise StaleClaimError(
                    f"{what}: metadata.uid is {meta.get('uid')}: the claim was deleted and "
                    "re-created; a Prepare of the old one is stale and refused"
                )
            if meta.get("deletionTimestamp"):
                raise StaleClaimError(
                    f"{what}: metadata.deletionTimestamp is {meta['deletionTimestamp']}: the "
                    "claim is being deleted; a Prepare of it is stale and refused (nothing is "
                    "prepared for it)"
                )
        return parse_allocated_claim(
            obj,
            driver=DRIVER_NAME,
            expected_uid=ref.uid,
            expected_namespace=ref.namespace,
            expected_name=ref.name,
        )

    def _plan(self, claim: AllocatedClaim) -> tuple[ChannelRecord, tuple[DeviceResult, ...]]:
        """The domain and channel count of the claim, checked (no side effects)."""
        configs = effective_configs(claim)
        chosen: dict[str, ComputeDomainChannelConfig] = {}
        for result in claim.results:
            if result.pool != self._node:
                raise ClaimError(
                    f"{claim.ref}: request {result.request!r} got {result.device} of pool "
                    f"{result.pool!r}, but this is node {self._node!r}: allocated for another "
                    "node"
                )
            if device_type(result.device) == DAEMON_TYPE:
                raise ClaimError(
                    f"{claim.ref}: request {result.request!r} got {result.device}: "
                    + DAEMON_REFUSED
                )
            config = configs[config_key(result)]
            if not isinstance(config, ComputeDomainChannelConfig):  # effective_configs checked
                raise ClaimError(f"{claim.ref}: {result.device} has no channel config")
            chosen[result.request] = config
        domain_ids = sorted({config.domain_id for config in chosen.values()})
        if len(domain_ids) != 1:
            raise ClaimError(
                f"{claim.ref}: its channels name {len(domain_ids)} ComputeDomains "
                f"({', '.join(domain_ids)}): a claim's channels belong to one domain"
            )
        domain, raw = self._find_domain(domain_ids[0], claim)
        modes = {config.allocation_mode for config in chosen.values()}
        mode: channel_cdi.AllocationMode = "All" if "All" in modes else "Single"
        if self._host_imex is not None:
            mode = "Single"  # NVIDIA: host-managed IMEX hands out the allocated channel only
        first = self._first_channel(claim, domain, raw, mode)
        record = ChannelRecord(
            domain_uid=domain.uid,
            domain_namespace=domain.namespace,
            domain_name=domain.name,
            member="" if self._host_imex is not None else member_name(domain.uid, self._node),
            channels=channel_cdi.channel_count(mode),
            first=first,
        )
        return record, claim.results

    def _first_channel(
        self,
        claim: AllocatedClaim,
        domain: ComputeDomain,
        raw: Mapping[str, object],
        mode: channel_cdi.AllocationMode,
    ) -> int:
        """The claim's (first) channel: 0, or the domain's own in channel isolation."""
        try:
            assigned = isolation.domain_channel(raw)
        except ClusterError as exc:
            raise ClaimError(f"{claim.ref}: {exc}") from exc
        if self._isolation != isolation.CHANNEL:
            if assigned is not None:
                raise ClaimError(
                    f"{claim.ref}: {domain.ref} has IMEX channel {assigned} (annotation "
                    f"{isolation.CHANNEL_ANNOTATION}), which only a controller run with "
                    "--imex-isolation channel writes, but this plugin on node "
                    f"{self._node} runs --imex-isolation {self._isolation}: run the controller, "
                    "the CD kubelet plugin and the IMEX host with the same mode "
                    "(resources.computeDomains.imex.isolation)"
                )
            return 0
        if mode == "All":
            raise ClaimError(
                f"{claim.ref}: {domain.ref}: spec.channel.allocationMode: All is refused with "
                "--imex-isolation channel: all 2048 channels would give the pod the channels "
                "of every other ComputeDomain on the clique and break their isolation; use "
                "Single (the default), which gives the domain's own channel"
            )
        if assigned is None:
            raise ClaimError(
                f"{claim.ref}: {domain.ref} has no IMEX channel yet (annotation "
                f"{isolation.CHANNEL_ANNOTATION}, written by the compute-domain controller): "
                "is the controller running, and with --imex-isolation channel like this "
                "plugin? Its condition ImexChannel says why; the kubelet retries"
            )
        return assigned

    def _find_domain(
        self, uid: str, claim: AllocatedClaim
    ) -> tuple[ComputeDomain, Mapping[str, object]]:
        """The ComputeDomain with UID `uid`, in the claim's namespace, decoded and as stored
        (ClaimError otherwise)."""
        found = [
            obj
            for obj in self._objects.list_objects(COMPUTE_DOMAIN, claim.namespace)
            if obj.get("metadata", {}).get("uid") == uid
        ]
        if not found:
            elsewhere = [
                obj
                for obj in self._objects.list_objects(COMPUTE_DOMAIN)
                if obj.get("metadata", {}).get("uid") == uid
            ]
            if elsewhere:
                meta = elsewhere[0].get("metadata", {})
                raise ClaimError(
                    f"{claim.ref}: ComputeDomain {meta.get('namespace')}/{meta.get('name')} "
                    f"(UID {uid}) is in namespace {meta.get('namespace')!r}, the claim in "
                    f"{claim.namespace!r}: a claim may only use a ComputeDomain of its own "
                    "namespace"
                )
            raise ClaimError(
                f"{claim.ref}: ComputeDomain with UID {uid} does not exist (the domainID of "
                "its ComputeDomainChannelConfig; was the ComputeDomain deleted and created "
                "again? Its claims must come from the new ResourceClaimTemplate)"
            )
        try:
            domain = decode_compute_domain(found[0], where=claim.ref)
        except ConfigError as exc:
            raise ClaimError(str(exc)) from exc
        if domain.metadata.deletion_timestamp is not None:
            raise ClaimError(f"{claim.ref}: {domain.ref} is being deleted: no new channel claims")
        return domain, found[0]

    def _refuse_other_domains(self, record: ChannelRecord) -> bool:
        """ClaimError if this node is a member of another domain (one IMEX daemon per node;
        in channel isolation, only of a member written in the other mode); else whether the
        node's member of this domain exists already."""
        present = False
        for obj in self._objects.list_objects(
            COMPUTE_DOMAIN_MEMBER, self._namespace, labels={NODE_LABEL: self._node}
        ):
            if obj.get("metadata", {}).get("name") == record.member:
                present = True
            try:
                other = member_spec(obj)
            except ClusterError as exc:
                log.warning("skipping a malformed ComputeDomainMember: %s", exc)
                continue
            written = isolation.isolation_of(obj)
            if self._isolation == isolation.CHANNEL and other.domain_uid != record.domain_uid:
                if written == isolation.CHANNEL:
                    continue  # domains share the node's clique-wide IMEX, a channel each
                raise ClaimError(
                    f"node {self._node} is a member of ComputeDomain "
                    f"{other.domain_namespace}/{other.domain_name} (UID {other.domain_uid}) "
                    f"written by a plugin run with --imex-isolation {written}; this plugin runs "
                    "--imex-isolation channel: the two modes cannot share a node. Run the "
                    "controller, the CD kubelet plugins and the IMEX hosts with one mode"
                )
            if other.domain_uid != record.domain_uid:
                raise ClaimError(
                    f"node {self._node} is a member of ComputeDomain "
                    f"{other.domain_namespace}/{other.domain_name} (UID {other.domain_uid}); "
                    f"it cannot join ComputeDomain {record.domain_namespace}/"
                    f"{record.domain_name} (UID {record.domain_uid}) until that domain's "
                    "claims on this node are gone (one IMEX daemon per node; the scheduler "
                    "keeps other domains off a node serving one through channel-0's `domain` "
                    "attribute, so this is the race of two domains scheduled at once onto a "
                    "free node)"
                )
        return present

    def _join(self, uid: str, record: ChannelRecord) -> None:
        """Create the node's member of the domain if absent (checked against other domains
        under the node's membership lock, so two domains never both get in). A refusal
        forgets the claim's entry: nothing was done for it yet.

        The node's members, listed for that check, say whether this domain's member is
        there already (a second claim of the domain on the node): then nothing is
        created, rather than a create answered 409 AlreadyExists for every pod (hundreds
        at 64 nodes x 4 pods). A member created meanwhile elsewhere still answers
        AlreadyExists, which is success."""
        with self._membership:
            try:
                present = self._refuse_other_domains(record)
            except ClaimError:
                self.update(lambda checkpoint: checkpoint.remove(uid))
                raise
            if present:
                return
            spec = MemberSpec(
                domain_uid=record.domain_uid,
                domain_namespace=record.domain_namespace,
                domain_name=record.domain_name,
                node_name=self._node,
                clique_id=self._clique() or "",
            )
            try:
                self._objects.create_object(
                    COMPUTE_DOMAIN_MEMBER,
                    build_member(spec, namespace=self._namespace, isolation_mode=self._isolation),
                )
                log.info(
                    "node %s joined ComputeDomain %s/%s: ComputeDomainMember %s created",
                    self._node,
                    record.domain_namespace,
                    record.domain_name,
                    record.member,
                )
            except AlreadyExistsError:
                pass

    def _wait_ready(self, record: ChannelRecord) -> MemberStatus:
        settled, status = self._members.wait(
            record.member, lambda s: s.state in _SETTLED, self._prepare_wait
        )
        if settled and status is not None:
            return status
        where = (
            f"IMEX on {self._node} for ComputeDomain {record.domain_namespace}/{record.domain_name}"
        )
        if status is None:
            raise ClaimError(
                f"{where}: ComputeDomainMember {self._namespace}/{record.member} is gone "
                "(deleted while the claim was being prepared); the kubelet retries"
            )
        detail = status.message or _WAITING_FOR.get(status.state, "not Ready")
        reason = f" ({status.reason})" if status.reason else ""
        raise ClaimError(
            f"{where}: {status.state}{reason}: {detail}; not Ready after "
            f"{self._prepare_wait:g} s, the kubelet retries"
        )

    def _write_spec(
        self, claim_uid: str, devices: Sequence[PreparedDevice], channels: int, first: int
    ) -> tuple[str, ...]:
        major = self._channels_major()
        names = sorted({device.device for device in devices})
        if len(names) != 1:
            raise ClaimError(
                f"claim {claim_uid}: {len(names)} channel devices ({', '.join(names)}); "
                "a channel claim has one"
            )
        spec = channel_cdi.channel_claim_spec(
            claim_uid, names[0], major=major, count=channels, first=first
        )
        self._cdi.write(claim_uid, spec)
        return (channel_cdi.CLAIMS.qualified_device_id(claim_uid, names[0]),)

    # -- Unprepare ----------------------------------------------------------------------

    def _unprepare_one(self, uid: str) -> None:
        entry = self.current().claims.get(uid)
        if entry is None:
            self._cdi.remove(uid)  # a spec left by a crash before the checkpoint knew it
            return
        self._roll_back(entry)

    def _roll_back(self, entry: ClaimEntry) -> None:
        """Undo a claim, prepared or half-prepared, from its checkpoint entry alone."""
        self._cdi.remove(entry.uid)
        failpoints.hit("cd-unprepare-after-cdi-removed")
        record = _channel(entry)
        if record is not None and record.member:
            with self._membership:
                others = [
                    other
                    for other in self.current().claims.values()
                    if other.uid != entry.uid
                    and (held := _channel(other)) is not None
                    and held.member == record.member
                ]
                if not others:
                    self._objects.delete_object(
                        COMPUTE_DOMAIN_MEMBER, self._namespace, record.member
                    )
                    log.info(
                        "node %s left ComputeDomain %s/%s with %s: ComputeDomainMember %s deleted",
                        self._node,
                        record.domain_namespace,
                        record.domain_name,
                        entry.ref,
                        record.member,
                    )
        failpoints.hit("cd-unprepare-after-member-deleted")
        self.update(lambda checkpoint: checkpoint.remove(entry.uid))
        failpoints.hit("cd-unprepare-after-checkpoint-removed")

    # -- the checkpoint ----------------------------------------------------------------

    def update(self, mutate: Callable[[Checkpoint], Checkpoint]) -> Checkpoint:
        """Apply `mutate` to the checkpoint and write the claims it changed (under its lock)."""
        with self._state_lock, self._checkpoints.lock():
            old = self._current_locked()
            new = mutate(old)
            if new is not old:
                token = self._checkpoints.commit(old, new, sync=False)
                self._state = new
                if token is not None:
                    self._generation = token
            return new

    def current(self) -> Checkpoint:
        with self._state_lock:
            return self._current_locked()

    def _current_locked(self) -> Checkpoint:
        """The cached checkpoint, reloaded when another process changed it since (its
        generation token: one small read)."""
        generation = self._checkpoints.generation()
        if self._state is None or generation != self._generation:
            self._state = self._checkpoints.load()
            self._generation = generation
        return self._state


def read_channels_major(proc_root: Path) -> int:
    """The `nvidia-caps-imex-channels` major from `<proc_root>/devices` (CdiError naming the
    file when it cannot be read or lacks the line: a driver without IMEX)."""
    path = proc_root / PROC_DEVICES
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise CdiError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    return imex_channels_major(text, path=str(path))


def _channel(entry: ClaimEntry) -> ChannelRecord | None:
    return next((d.channel for d in entry.devices if d.channel is not None), None)


def _held_members(checkpoint: Checkpoint) -> set[str]:
    return {
        record.member
        for entry in checkpoint.in_state(ClaimState.PrepareCompleted)
        if (record := _channel(entry)) is not None and record.member
    }


def _result_devices(entry: ClaimEntry) -> tuple[ResultDevice, ...]:
    return tuple(
        ResultDevice(
            request_names=d.request_names,
            pool_name=d.pool,
            device_name=d.device,
            cdi_device_ids=d.cdi_device_ids,
            share_id=d.share_id,
        )
        for d in entry.devices
    )


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
