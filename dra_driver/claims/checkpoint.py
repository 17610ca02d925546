"""What the kubelet plugin has prepared, as a versioned record of our own.

Unprepare gets only a claim's UID, namespace and name, and a plugin restart
(crash, upgrade, rolling update) must know which claims it prepared, which
devices they hold, and which side effects a half-finished Prepare left
behind. That record is this checkpoint. It is deliberately an explicit
schema of dra-gpu's own, never a dump of API objects: NVIDIA's driver stores
`ResourceClaimStatus` and re-marshals it to verify a checksum, so every new
upstream field broke every old file (issue #1080, PRs #1119 and #1326), and
the plugin crash-looped after upgrades. The rules below exist so that cannot
happen here.

Storage: `checkpoint_store` keeps one file per claim, each holding a
one-claim checkpoint in this format (so a Prepare rewrites only its own
claim), and reads the single file that older dra-gpu versions wrote for the
whole node. A copy of each completed entry also travels in the claim's CDI
spec (`to_spec_record`), from which a lost checkpoint is rebuilt.

File format (`encode` / `decode`)
    Line 1 is a one-line JSON header: `{"checksum": "sha256:<hex>", "format":
    "dra-gpu/checkpoint"}`. Everything after the first newline is the
    payload: canonical JSON (sorted keys, 2-space indent, ASCII) of
    `Checkpoint.to_dict()`, which carries `schemaVersion`. The checksum is
    over the payload *bytes as stored*. A reader hashes those bytes before
    parsing anything; it never re-serialises to compare, so a reader that
    does not know some field still verifies the file exactly.

Compatibility rules
    1. The writer always writes every field it knows, defaults included
       (nothing is omitted because it is empty), so what was hashed is what
       any reader sees.
    2. Readers ignore fields they do not know. A newer dra-gpu may add
       fields within the same `schemaVersion`; an older one still loads the
       file (and drops those fields when it rewrites it, so an added field
       must be safe to lose, e.g. a hint or a cache).
    3. Every field added later has a default, so files written before it
       existed still load.
    4. A change an older reader must not misread (a field whose loss is
       unsafe, a changed meaning, a removed field) bumps `SCHEMA_VERSION`.
       A reader refuses files with a newer version than it knows, with a
       `CheckpointError` naming both versions and what to do, rather than
       guessing.
    5. Files with an older version are migrated on read, step by step
       (`_MIGRATIONS[v]` turns version v into v+1), and written back in
       the current version on the next save.

The records are read and written by one typed codec
(`dra_driver.claims.record_codec`): each field names its JSON key, and the
codec applies rules 1 to 3 and type-checks every field, naming its path in
errors.

Everything here is pure: bytes in, bytes out. `checkpoint_store` does the
file I/O, locking and boot-id handling.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import weakref
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType
from typing import Any, ClassVar, Final

from dra_driver.claims.record_codec import REQUIRED, Record, json_key, object_at, typed
from dra_driver.errors import CheckpointError

SCHEMA_VERSION: Final = 1
FORMAT: Final = "dra-gpu/checkpoint"
_CHECKSUM_ALGORITHM: Final = "sha256"

_MIGRATIONS: dict[int, Callable[[dict[str, Any]], dict[str, Any]]] = {}
"""`_MIGRATIONS[v]` turns a version-v payload into a version-(v+1) payload."""


class ClaimState(StrEnum):
    """How far Prepare got for a claim. The names match NVIDIA's checkpoint states."""

    PrepareStarted = "PrepareStarted"
    """Side effects may be half done; the devices list says what was recorded so far."""
    PrepareCompleted = "PrepareCompleted"
    """The CDI spec is written and the devices were returned to the kubelet."""


@dataclass(frozen=True, kw_only=True)
class MigRecord(Record):
    """A MIG device a claim uses, and how far its creation got.

    Dynamic MIG creates a GPU instance, then a compute instance, then learns
    the MIG UUID. The record is saved *before* the first NVML call with only
    the profile and placement (`stage == "planned"`), then again as each id
    becomes known, so a crash at any point leaves enough to find and destroy
    what exists: by `gi_id`/`ci_id` when recorded, else by profile and
    placement on the parent GPU. `created_by_us` is False for a MIG device
    that existed before (static MIG), which Unprepare must never destroy.
    """

    WHERE: ClassVar[str] = "mig"

    parent_uuid: str = json_key("parentUuid")
    profile_id: int = json_key("profileId")
    placement_start: int = json_key("placementStart")
    placement_size: int = json_key("placementSize")
    created_by_us: bool = json_key("createdByUs", missing=False)
    gi_id: int | None = json_key("giId", default=None)
    ci_id: int | None = json_key("ciId", default=None)
    uuid: str | None = json_key("uuid", default=None)

    def __post_init__(self) -> None:
        if self.ci_id is not None and self.gi_id is None:
            raise CheckpointError(f"MIG record on {self.parent_uuid}: ci_id set without gi_id")
        if self.uuid is not None and self.ci_id is None:
            raise CheckpointError(f"MIG record on {self.parent_uuid}: uuid set without ci_id")

    @property
    def stage(self) -> str:
        """ "planned", "gi-created", "ci-created" or "complete" (UUID known)."""
        if self.uuid is not None:
            return "complete"
        if self.ci_id is not None:
            return "ci-created"
        if self.gi_id is not None:
            return "gi-created"
        return "planned"

    def with_gpu_instance(self, gi_id: int) -> MigRecord:
        return dataclasses.replace(self, gi_id=gi_id)

    def with_compute_instance(self, ci_id: int, uuid: str | None = None) -> MigRecord:
        return dataclasses.replace(self, ci_id=ci_id, uuid=uuid)


@dataclass(frozen=True, kw_only=True)
class MpsRecord(Record):
    """The MPS control daemon a claim's device is a client of.

    One daemon serves every MPS claim on a device, so several entries carry
    the same record. It is saved with `pid` None *before* the daemon is
    started (the intent: a crash then leaves enough to find it through the
    pid file in `daemon_dir`), then with the pid and the process start time
    (`/proc/<pid>/stat` field 22, clock ticks since boot), which tell the
    daemon from a later process that got its pid. `limits` are the claim's
    own (`CUDA_MPS_*` values its containers get); `gpu_uuid` is the GPU
    whose lock guards the daemon (the parent of a MIG device).
    """

    WHERE: ClassVar[str] = "mps"

    device_uuid: str = json_key("deviceUuid")
    gpu_uuid: str = json_key("gpuUuid")
    daemon_dir: str = json_key("daemonDir")
    device_memory_mib: int = json_key("deviceMemoryMiB")
    pid: int | None = json_key("pid", default=None)
    start_ticks: int | None = json_key("startTicks", default=None)
    multi_user: bool = json_key("multiUser", default=False)
    active_thread_percentage: int | None = json_key("activeThreadPercentage", default=None)
    pinned_memory_mib: int | None = json_key("pinnedMemoryMiB", default=None)


@dataclass(frozen=True, kw_only=True)
class VfioRecord(Record):
    """A GPU a claim passes through to a VM (`kubelet_plugin.vfio`).

    Saved before anything is touched with the GPU's PCI address and UUID and
    the claim's IOMMU settings; `taken` is saved once the GPU was found on the
    nvidia driver and before the first sysfs write, so a rollback never
    rebinds a GPU someone else had bound to vfio-pci; `iommu_group` and
    `iommufd_cdev` are saved once vfio-pci holds it and its node is there.
    """

    WHERE: ClassVar[str] = "vfio"

    pci_bus_id: str = json_key("pciBusId")
    gpu_uuid: str = json_key("gpuUuid")
    prefer_iommufd: bool = json_key("preferIommuFD", default=False)
    api_device: bool = json_key("enableAPIDevice", default=False)
    taken: bool = json_key("taken", default=False)
    iommu_group: int | None = json_key("iommuGroup", default=None)
    iommufd_cdev: str | None = json_key("iommufdCdev", default=None)


@dataclass(frozen=True)
class TimeSliceRecord(Record):
    """The time-slice interval ("Default", "Short", "Medium", "Long") a claim wants on a GPU."""

    WHERE: ClassVar[str] = "timeSlice"

    gpu_uuid: str = json_key("gpuUuid")
    interval: str = json_key("interval")


@dataclass(frozen=True, kw_only=True)
class ChannelRecord(Record):
    """The ComputeDomain an IMEX channel claim (`compute-domain.nvidia.com`) belongs to.

    Saved with the claim's PrepareStarted, before the node's ComputeDomainMember
    is created, so Unprepare and a restart need neither the ComputeDomain nor
    the claim (NVIDIA #380: teardown that needs a deleted domain hangs).
    `member` is the name of the member this claim keeps alive ("" when there
    is none: host-managed IMEX); it is deleted with the node's last claim of
    the domain. `channels` is 1 (`Single`) or 2048 (`All`), from channel
    `first` on: 0, except in channel isolation, where it is the domain's own
    channel (added within schema version 1; absent: 0).
    """

    WHERE: ClassVar[str] = "channel"

    domain_uid: str = json_key("domainUID")
    domain_namespace: str = json_key("domainNamespace")
    domain_name: str = json_key("domainName")
    member: str = json_key("member", default="")
    channels: int = json_key("channels", default=1)
    first: int = json_key("first", default=0)


@dataclass(frozen=True)
class PreparedDevice(Record):
    """One device of a prepared claim, as returned to the kubelet.

    `request_names` are base request names (no "/subrequest"), as the
    kubelet expects them. `admin_access` devices do not own the device (see
    `Checkpoint.device_owner`). A share of a multi-allocatable device has its
    `share_id` and the `consumed_capacity` the scheduler granted it, from
    which the node's share accounting is derived after a restart.
    `time_slice` is the time-slice interval the claim wants on the device's
    GPU, recorded before it is applied so a crash can neither leak nor lose
    the setting. Both were added within schema version 1 (rule 3): a dra-gpu
    from before them cannot prepare shared or time-sliced claims at all, so
    downgrading with such claims prepared is not supported. `channel` (an
    IMEX channel of the ComputeDomain driver, which keeps its own checkpoint
    directory) was added the same way.
    """

    WHERE: ClassVar[str] = "device"

    request_names: tuple[str, ...] = json_key("requestNames", missing=())
    pool: str = json_key("pool")
    device: str = json_key("device")
    cdi_device_ids: tuple[str, ...] = json_key("cdiDeviceIds", missing=())
    share_id: str | None = json_key("shareId", default=None)
    mig: MigRecord | None = json_key("mig", default=None)
    admin_access: bool = json_key("adminAccess", default=False)
    consumed_capacity: Mapping[str, str] = json_key(
        "consumedCapacity", default_factory=lambda: MappingProxyType({})
    )
    time_slice: TimeSliceRecord | None = json_key("timeSlice", default=None)
    mps: MpsRecord | None = json_key("mps", default=None)
    vfio: VfioRecord | None = json_key("vfio", default=None)
    channel: ChannelRecord | None = json_key("channel", default=None)


@dataclass(frozen=True)
class ClaimEntry(Record):
    """What the plugin knows about one claim it is preparing or has prepared."""

    WHERE: ClassVar[str] = "claim"

    uid: str = json_key("uid")
    namespace: str = json_key("namespace")
    name: str = json_key("name")
    state: ClaimState = json_key("state", default=ClaimState.PrepareStarted, missing=REQUIRED)
    devices: tuple[PreparedDevice, ...] = json_key("devices", default=())
    started_at: str | None = json_key(  # RFC 3339 time Prepare began, for logs and GC
        "startedAt", default=None
    )
    releasing: bool = json_key("releasing", default=False)
    """A rollback failed half-way: what is recorded is still to be undone (the next
    Prepare or Unprepare of the claim, a Prepare on the same GPU, or start-up tries
    again), but the claim holds no device any more. Added within schema version 1:
    an older reader sees a started claim, which it rolls back (safe to lose)."""

    @property
    def ref(self) -> str:
        return f"ResourceClaim {self.namespace}/{self.name} (uid {self.uid})"


def _frozen_claims() -> Mapping[str, ClaimEntry]:
    return MappingProxyType({})


@dataclass(frozen=True)
class Checkpoint:
    """All claims this node's plugin is preparing or has prepared, for one boot.

    Immutable: every transition returns a new `Checkpoint`, which the caller
    saves. Transitions raise `CheckpointError` when applied to a claim in
    the wrong state, which always means a bug in the caller.

    A node may hold hundreds of claims, so a transition costs the same
    however many there are: it copies the claims mapping (one C-level dict
    copy) without re-validating it, remembers which claim it changed (so
    `changed_since` tells the store which file to write), and keeps an index
    of the devices held (so `device_owner` and `held_devices` need not scan
    every claim).
    """

    boot_id: str
    claims: Mapping[str, ClaimEntry] = field(default_factory=_frozen_claims)
    _parent: weakref.ref[Checkpoint] | None = field(
        init=False, default=None, compare=False, repr=False
    )
    _changed: str | None = field(init=False, default=None, compare=False, repr=False)
    _holders: _Holders | None = field(init=False, default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        for uid, entry in self.claims.items():
            if uid != entry.uid:
                raise CheckpointError(f"claims[{uid!r}] holds the entry of claim {entry.uid}")
        object.__setattr__(self, "claims", MappingProxyType(dict(self.claims)))

    # -- transitions ---------------------------------------------------------

    def start(self, entry: ClaimEntry) -> Checkpoint:
        """Record that Prepare of `entry` begins (state becomes PrepareStarted).

        Refuses a claim that already has an entry: a completed claim needs no
        Prepare, and a started one must be rolled back and `remove`d first,
        so the record of its half-done side effects is never overwritten.
        """
        existing = self.claims.get(entry.uid)
        if existing is not None:
            raise CheckpointError(
                f"{existing.ref}: already {existing.state.value}; roll it back and remove it "
                "before starting Prepare again"
            )
        started = dataclasses.replace(entry, state=ClaimState.PrepareStarted)
        return self._with(started)

    def update_devices(self, uid: str, devices: Iterable[PreparedDevice]) -> Checkpoint:
        """Record progress of a started Prepare (e.g. a MIG instance just created)."""
        entry = self._require(uid, ClaimState.PrepareStarted, "update its devices")
        return self._with(dataclasses.replace(entry, devices=tuple(devices)))

    def replace_devices(self, uid: str, devices: Iterable[PreparedDevice]) -> Checkpoint:
        """Rewrite the devices of a claim in any state (e.g. its MPS daemon was restarted)."""
        entry = self.claims.get(uid)
        if entry is None:
            raise CheckpointError(f"claim {uid} is not in the checkpoint; cannot replace devices")
        return self._with(dataclasses.replace(entry, devices=tuple(devices)))

    def complete(self, uid: str, devices: Iterable[PreparedDevice]) -> Checkpoint:
        """Record that Prepare of `uid` finished with `devices`."""
        entry = self._require(uid, ClaimState.PrepareStarted, "complete it")
        return self._with(
            dataclasses.replace(entry, state=ClaimState.PrepareCompleted, devices=tuple(devices))
        )

    def adopt(self, entry: ClaimEntry) -> Checkpoint:
        """Add an entry rebuilt from other sources (a lost checkpoint), in its own state.

        Refuses a claim that already has an entry: what the checkpoint knows wins.
        """
        existing = self.claims.get(entry.uid)
        if existing is not None:
            raise CheckpointError(f"{existing.ref}: already in the checkpoint; cannot adopt it")
        return self._with(entry)

    def mark_releasing(self, uid: str) -> Checkpoint:
        """Record that a rollback of `uid` failed half-way: it holds no device any more,
        and what it recorded is still to be undone. Unknown UIDs are fine."""
        entry = self.claims.get(uid)
        if entry is None or entry.releasing:
            return self
        return self._with(dataclasses.replace(entry, releasing=True))

    def releasing(self) -> list[ClaimEntry]:
        """The claims whose rollback is still to be finished, ordered by UID."""
        return sorted(
            (entry for entry in self.claims.values() if entry.releasing), key=lambda e: e.uid
        )

    def remove(self, uid: str) -> Checkpoint:
        """Forget a claim (after Unprepare or rollback). Unknown UIDs are fine."""
        if uid not in self.claims:
            return self
        claims = dict(self.claims)
        del claims[uid]
        return self._derive(claims, uid)

    # -- queries -------------------------------------------------------------

    def device_owner(self, pool: str, device: str, *, exclude_uid: str | None = None) -> str | None:
        """UID of a claim (other than `exclude_uid`) that holds `pool`/`device`, or None.

        Claims in either state count, since a started claim may already have
        side effects on the device; admin-access devices never own a device.
        With several holders the smallest UID is returned, deterministically.
        """
        holders = self._device_holders().get((pool, device), ())
        return min((uid for uid, _ in holders if uid != exclude_uid), default=None)

    def device_holders(self, pool: str, device: str) -> tuple[tuple[str, PreparedDevice], ...]:
        """(claim UID, its record) for each claim that holds `pool`/`device`, admin access
        left out: several for the shares of a shared device. From the index, no scan."""
        return self._device_holders().get((pool, device), ())

    def held_devices(self) -> list[tuple[str, PreparedDevice]]:
        """(claim UID, device) for each device some claim owns, its smallest-UID holder only.

        Admin-access devices are left out, as in `device_owner`. The list
        has one item per device, not per claim, so callers that look at
        every held device do not get slower with the number of claims.
        """
        return [min(holders, key=_first) for holders in self._device_holders().values()]

    def changed_since(self, old: Checkpoint) -> frozenset[str] | None:
        """The UIDs whose entries differ from `old`, if `self` came from `old` by transitions.

        None when that is not known (then compare all entries): `self` was
        built otherwise, or a checkpoint in between is gone (each keeps only a
        weak reference to the one it came from, so history costs no memory).
        """
        changed: set[str] = set()
        node: Checkpoint | None = self
        for _ in range(_MAX_CHAIN):
            if node is None:
                return None
            if node is old:
                return frozenset(changed)
            if node._changed is None or node._parent is None:
                return None
            changed.add(node._changed)
            node = node._parent()
        return None

    def in_state(self, state: ClaimState) -> list[ClaimEntry]:
        """The entries in `state`, ordered by UID."""
        return [self.claims[u] for u in sorted(self.claims) if self.claims[u].state is state]

    # -- serialisation -------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """The payload, every field written (rule 1 of the module docstring)."""
        return {
            "schemaVersion": SCHEMA_VERSION,
            "bootId": self.boot_id,
            "claims": {uid: self.claims[uid].to_dict() for uid in sorted(self.claims)},
        }

    @classmethod
    def from_dict(cls, obj: object) -> Checkpoint:
        """Load a payload, migrating older schema versions; unknown fields are ignored."""
        payload = dict(object_at(obj, "checkpoint"))
        version = payload.get("schemaVersion")
        if not isinstance(version, int) or isinstance(version, bool) or version < 1:
            raise CheckpointError(f"schemaVersion is {version!r}, expected a positive integer")
        if version > SCHEMA_VERSION:
            raise CheckpointError(
                f"schemaVersion is {version}, but this dra-gpu understands only up to "
                f"{SCHEMA_VERSION}: the file was written by a newer dra-gpu. Run that version "
                "again (downgrading across a schema version is not supported), or, with no "
                "claims prepared on this node, delete the checkpoint file"
            )
        while version < SCHEMA_VERSION:
            migrate = _MIGRATIONS.get(version)
            if migrate is None:
                raise CheckpointError(f"schemaVersion {version} has no migration to {version + 1}")
            payload = migrate(payload)
            version += 1
        claims_raw = object_at(payload.get("claims", {}), "claims")
        claims: dict[str, ClaimEntry] = {}
        for uid, raw in claims_raw.items():
            entry = ClaimEntry.from_dict(raw, f"claims[{uid!r}]")
            if entry.uid != uid:
                raise CheckpointError(f"claims[{uid!r}].uid is {entry.uid!r}, expected {uid!r}")
            claims[uid] = entry
        boot_id = payload.get("bootId")
        if boot_id is None:
            raise CheckpointError("checkpoint.bootId is missing")
        return cls(boot_id=typed(boot_id, "bootId", str, "checkpoint"), claims=claims)

    # -- helpers -------------------------------------------------------------

    def _require(self, uid: str, state: ClaimState, action: str) -> ClaimEntry:
        entry = self.claims.get(uid)
        if entry is None:
            raise CheckpointError(f"claim {uid} is not in the checkpoint; cannot {action}")
        if entry.state is not state:
            raise CheckpointError(
                f"{entry.ref} is {entry.state.value}, not {state.value}; cannot {action}"
            )
        return entry

    def _with(self, entry: ClaimEntry) -> Checkpoint:
        return self._derive({**self.claims, entry.uid: entry}, entry.uid)

    def _derive(self, claims: dict[str, ClaimEntry], changed: str) -> Checkpoint:
        """A checkpoint with `claims` (only `changed` differs from ours), without re-validating."""
        child = object.__new__(Checkpoint)
        object.__setattr__(child, "boot_id", self.boot_id)
        object.__setattr__(child, "claims", MappingProxyType(claims))
        object.__setattr__(child, "_parent", weakref.ref(self))
        object.__setattr__(child, "_changed", changed)
        holders = None
        if self._holders is not None:
            holders = dict(self._holders)
            _drop_holder(holders, self.claims.get(changed))
            _add_holder(holders, claims.get(changed))
        object.__setattr__(child, "_holders", holders)
        return child

    def _device_holders(self) -> _Holders:
        if self._holders is None:
            holders: _Holders = {}
            for entry in self.claims.values():
                _add_holder(holders, entry)
            object.__setattr__(self, "_holders", holders)
            return holders
        return self._holders


_Holders = dict[tuple[str, str], tuple[tuple[str, PreparedDevice], ...]]
"""(pool, device) -> (claim UID, device record) of each claim that owns it."""

_MAX_CHAIN: Final = 16
"""How many transitions `changed_since` follows back."""


def _first(holder: tuple[str, PreparedDevice]) -> str:
    return holder[0]


def _add_holder(holders: _Holders, entry: ClaimEntry | None) -> None:
    if entry is None or entry.releasing:
        return
    for device in entry.devices:
        if not device.admin_access:
            key = (device.pool, device.device)
            holders[key] = (*holders.get(key, ()), (entry.uid, device))


def _drop_holder(holders: _Holders, entry: ClaimEntry | None) -> None:
    if entry is None:
        return
    for key in {(d.pool, d.device) for d in entry.devices if not d.admin_access}:
        rest = tuple(h for h in holders.get(key, ()) if h[0] != entry.uid)
        if rest:
            holders[key] = rest
        else:
            holders.pop(key, None)


# -- the copy kept in the claim's CDI spec -------------------------------------


def to_spec_record(boot_id: str, entry: ClaimEntry) -> str:
    """A claim's entry as one line of ASCII JSON: a compact one-claim payload.

    Each CDI spec carries its claim's completed entry (UID, namespace, name,
    devices, MIG ids, whatever fields a newer dra-gpu adds), versioned like
    the checkpoint itself, so a lost checkpoint can be rebuilt from the specs
    (`CdiStore.write(record=...)` keeps it in the spec file).
    """
    payload = Checkpoint(boot_id=boot_id, claims={entry.uid: entry}).to_dict()
    return json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


def from_spec_record(value: str, *, source: str) -> Checkpoint:
    """Parse a `to_spec_record` line (migrating old schema versions); `CheckpointError` if bad."""
    try:
        obj = json.loads(value)
    except ValueError as exc:
        raise CheckpointError(f"{source}: the claim record is not JSON: {exc}") from exc
    try:
        checkpoint = Checkpoint.from_dict(obj)
    except CheckpointError as exc:
        raise CheckpointError(f"{source}: the claim record: {exc}") from exc
    if len(checkpoint.claims) != 1:
        raise CheckpointError(
            f"{source}: the claim record holds {len(checkpoint.claims)} claims, expected one"
        )
    return checkpoint


# -- bytes ---------------------------------------------------------------------


def encode(checkpoint: Checkpoint) -> bytes:
    """The file content: checksum header line, then the canonical JSON payload."""
    payload = (
        json.dumps(checkpoint.to_dict(), sort_keys=True, indent=2, ensure_ascii=True) + "\n"
    ).encode("ascii")
    digest = hashlib.sha256(payload).hexdigest()
    header = json.dumps(
        {"checksum": f"{_CHECKSUM_ALGORITHM}:{digest}", "format": FORMAT}, sort_keys=True
    )
    return header.encode("ascii") + b"\n" + payload


def decode(data: bytes, *, source: str = "checkpoint") -> Checkpoint:
    """Verify and parse file content; `source` (the path) prefixes every error.

    Raises `CheckpointError` for a missing or bad header, a checksum that
    does not match the stored payload bytes, invalid JSON, a newer schema
    version, or fields of the wrong type.
    """
    header_line, newline, payload = data.partition(b"\n")
    if not newline:
        raise CheckpointError(f"{source}: truncated (no header line)")
    try:
        header = json.loads(header_line)
    except (ValueError, UnicodeDecodeError) as exc:
        raise CheckpointError(f"{source}: header line is not JSON: {exc}") from exc
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        raise CheckpointError(f"{source}: not a dra-gpu checkpoint (header format is not {FORMAT})")
    checksum = header.get("checksum")
    algorithm, _, stored = checksum.partition(":") if isinstance(checksum, str) else ("", "", "")
    if algorithm != _CHECKSUM_ALGORITHM or not stored:
        raise CheckpointError(
            f"{source}: header checksum {checksum!r} is not '{_CHECKSUM_ALGORITHM}:<hex>'"
        )
    actual = hashlib.sha256(payload).hexdigest()
    if actual != stored:
        raise CheckpointError(
            f"{source}: checksum mismatch, the file is corrupted (header says "
            f"{_CHECKSUM_ALGORITHM}:{stored}, content hashes to {_CHECKSUM_ALGORITHM}:{actual})"
        )
    try:
        obj = json.loads(payload)
    except (ValueError, UnicodeDecodeError) as exc:
        raise CheckpointError(f"{source}: payload is not JSON: {exc}") from exc
    try:
        return Checkpoint.from_dict(obj)
    except CheckpointError as exc:
        raise CheckpointError(f"{source}: {exc}") from exc
