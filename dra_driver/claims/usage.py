"""GPU use per claim and per pod, from NVML's per-process samples.

No DRA driver reports how much of its GPU a claim uses, and dcgm-exporter
repeats one device-level value for every pod of a shared GPU. The plugin
knows more: the checkpoint says which claim holds which device (GPU, live
MIG device, share, MPS limits), NVML says which host pids run on a device and
what they use, `/proc/<pid>/cgroup` says whose pod a pid is
(`dra_driver.node.cgroups`), and a claim's `status.reservedFor` says which
pods use the claim. This module joins them, without any I/O:

- `usage_targets`: what to sample, one `UsageTarget` per prepared device
  of a completed claim: the NVML UUID to ask about, the memory limit
  (the MPS pinned-memory limit, else the consumed `memory` capacity, else the
  device's), and for shares of a `shares` capacity the SM share.
- `attribute`: one `ClaimDeviceUsage` per target from one pass of samples.
  A process counts for the claim whose `reservedFor` lists its pod; on a
  device only one claim holds, a process of an unknown pod counts for that
  claim (named by its UID). Processes of pods that no claim of the device
  reserves are not counted.
- `IdleTracker`: when each claim-device last did something.

What "not measured" looks like, never a made-up 0:

- SM %: NVML reports a sample only for processes with non-zero use in the
  period, so when it answers with samples, a pod's process it leaves out used
  0 %. When it answers NOT_FOUND (no sample since the last pass) or on MIG
  (NOT_SUPPORTED), the SM % is None and `sm_unavailable` says why.
- Memory: the running-process list is complete, so a pod without a process
  uses 0 bytes; a process whose memory NVML cannot read makes its pod's and
  claim's memory None. When the list itself cannot be read, neither memory
  nor SM % is known (the samples name pids, the list says whose they are).

Use, for idle time: SM % above 0; where SM % cannot be sampled on the device
(MIG), a running process. Over share (only for shared claims: a `shareID`,
MPS, or a device several claims hold): memory above a share's limit (MPS or
consumed `memory`), or SM % above the share of a `shares` capacity. SM % is
the fraction of time a kernel of the process ran, so it is not compared with
MPS thread percentages, which limit SMs, not time.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from dra_driver.claims.checkpoint import Checkpoint, ClaimState, PreparedDevice
from dra_driver.claims.identity import device_identity
from dra_driver.errors import DraGpuError
from dra_driver.hardware.nvml.interface import ProcessMemory, ProcessUtilization
from dra_driver.kube.quantity import parse_quantity
from dra_driver.node.devices import AllocatableDevice

MIB: Final = 2**20
SHARES_CAPACITY: Final = "shares"
MEMORY_CAPACITY: Final = "memory"

UNAVAILABLE_MIG: Final = "mig"
"""NVML does not sample per-process utilization on MIG (NOT_SUPPORTED)."""
UNAVAILABLE_NO_SAMPLES: Final = "no-samples"
"""NVML had no sample since the last pass (NOT_FOUND)."""
UNAVAILABLE_ERROR: Final = "error"
"""NVML failed otherwise (logged by the sampler)."""


@dataclass(frozen=True)
class PodRef:
    """A pod that reserved a claim (`status.reservedFor`)."""

    name: str
    uid: str


@dataclass(frozen=True)
class UsageTarget:
    """One prepared device of one claim, as the sampler looks at it."""

    namespace: str
    claim: str
    claim_uid: str
    device: str
    nvml_uuid: str
    is_mig: bool
    shared: bool
    memory_limit_bytes: int | None
    limit_source: str  # "mps", "share", "device" or "" (unknown)
    sm_share_percent: float | None  # the claim's part of a `shares` capacity, in percent
    prepared_at: float | None  # Unix seconds Prepare began, when the checkpoint says


@dataclass(frozen=True)
class UtilizationReading:
    """What `process_utilization` gave for one NVML device in one pass."""

    samples: tuple[ProcessUtilization, ...] = ()
    unavailable: str | None = None  # UNAVAILABLE_*; None with samples


@dataclass(frozen=True)
class PodUsage:
    """What one pod's processes use of one claim's device."""

    pod: str  # the pod's name; its UID when no claim names it; "" for "no pod known"
    pod_uid: str
    sm_percent: float | None
    memory_used_bytes: int | None
    processes: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "pod": self.pod,
            "podUID": self.pod_uid,
            "smPercent": self.sm_percent,
            "memoryUsedBytes": self.memory_used_bytes,
            "processes": self.processes,
        }


@dataclass(frozen=True)
class ClaimDeviceUsage:
    """One claim's use of one of its devices in one sampling pass."""

    target: UsageTarget
    pods: tuple[PodUsage, ...]
    sm_percent: float | None
    sm_unavailable: str | None
    memory_used_bytes: int | None
    idle_seconds: float
    over_share: bool

    def to_dict(self) -> dict[str, Any]:
        t = self.target
        return {
            "namespace": t.namespace,
            "claim": t.claim,
            "claimUID": t.claim_uid,
            "device": t.device,
            "uuid": t.nvml_uuid,
            "shared": t.shared,
            "pods": [p.to_dict() for p in self.pods],
            "smPercent": self.sm_percent,
            "smUnavailable": self.sm_unavailable,
            "memoryUsedBytes": self.memory_used_bytes,
            "memoryLimitBytes": t.memory_limit_bytes,
            "memoryLimitSource": t.limit_source,
            "smSharePercent": t.sm_share_percent,
            "idleSeconds": round(self.idle_seconds, 3),
            "overShare": self.over_share,
        }

    @property
    def in_use(self) -> bool:
        """Whether this pass saw the claim use the device (see the module docstring)."""
        return _in_use(self.sm_percent, self.sm_unavailable, self.pods)


# --------------------------------------------------------------------------- targets


def usage_targets(
    checkpoint: Checkpoint, devices: Mapping[str, AllocatableDevice]
) -> list[UsageTarget]:
    """One target per device of each completed claim that has a known NVML UUID (not the
    GPUs passed through to VMs)."""
    holders: dict[str, set[str]] = {}
    for entry in checkpoint.claims.values():
        for prepared in entry.devices:
            holders.setdefault(prepared.device, set()).add(entry.uid)
    targets = []
    for entry in checkpoint.in_state(ClaimState.PrepareCompleted):
        started = _unix_seconds(entry.started_at)
        for prepared in entry.devices:
            device = devices.get(prepared.device)
            if prepared.vfio is not None:
                continue  # passed through to a VM: no NVML (nor nvidia driver) sees inside
            identity = device_identity(prepared, device)
            if identity.uuid is None:
                continue
            limit, source = _memory_limit(prepared, identity.memory_bytes)
            targets.append(
                UsageTarget(
                    namespace=entry.namespace,
                    claim=entry.name,
                    claim_uid=entry.uid,
                    device=prepared.device,
                    nvml_uuid=identity.uuid,
                    is_mig=identity.is_mig,
                    shared=prepared.share_id is not None
                    or prepared.mps is not None
                    or len(holders.get(prepared.device, ())) > 1,
                    memory_limit_bytes=limit,
                    limit_source=source,
                    sm_share_percent=_sm_share(prepared, device),
                    prepared_at=started,
                )
            )
    return targets


def _memory_limit(prepared: PreparedDevice, device_memory: int | None) -> tuple[int | None, str]:
    if prepared.mps is not None and prepared.mps.pinned_memory_mib is not None:
        return prepared.mps.pinned_memory_mib * MIB, "mps"
    consumed = prepared.consumed_capacity.get(MEMORY_CAPACITY)
    if consumed is not None:
        try:
            return int(parse_quantity(consumed).value), "share"
        except DraGpuError:
            pass
    if device_memory is not None:
        return device_memory, "device"
    return None, ""


def _sm_share(prepared: PreparedDevice, device: AllocatableDevice | None) -> float | None:
    consumed = prepared.consumed_capacity.get(SHARES_CAPACITY)
    total = device.capacity.get(SHARES_CAPACITY) if device is not None else None
    if consumed is None or not total:
        return None
    try:
        return float(parse_quantity(consumed).value) * 100.0 / total
    except DraGpuError:
        return None


def _unix_seconds(rfc3339: str | None) -> float | None:
    if not rfc3339:
        return None
    try:
        return datetime.datetime.fromisoformat(rfc3339.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


# --------------------------------------------------------------------------- attribution


def attribute(
    targets: Sequence[UsageTarget],
    *,
    processes: Mapping[str, Sequence[ProcessMemory]],
    utilization: Mapping[str, UtilizationReading],
    pod_of_pid: Mapping[int, str | None],
    claim_pods: Mapping[str, Sequence[PodRef]],
    idle: IdleTracker,
    now: float,
) -> list[ClaimDeviceUsage]:
    """Each target's use in this pass (see the module docstring for the rules).

    `processes` and `utilization` are keyed by NVML UUID (a UUID missing from
    `processes` was not read: its memory is None); `pod_of_pid` maps a pid to
    its pod UID (None: not in a pod); `claim_pods` maps a claim UID to the
    pods that reserved it.
    """
    by_uuid: dict[str, list[UsageTarget]] = {}
    for target in targets:
        by_uuid.setdefault(target.nvml_uuid, []).append(target)
    results = []
    for uuid, on_device in by_uuid.items():
        owner = _owners(on_device, claim_pods)
        only = on_device[0].claim_uid if len({t.claim_uid for t in on_device}) == 1 else None
        listed = processes.get(uuid)
        # claim UID -> pod UID -> its processes
        mine: dict[str, dict[str, list[ProcessMemory]]] = {}
        for process in listed or ():
            pod_uid = pod_of_pid.get(process.pid)
            if pod_uid is None:
                continue
            claim_uid = owner.get(pod_uid, only)
            if claim_uid is not None:
                mine.setdefault(claim_uid, {}).setdefault(pod_uid, []).append(process)
        reading = utilization.get(uuid, UtilizationReading(unavailable=UNAVAILABLE_ERROR))
        if listed is None and reading.unavailable is None:
            # Samples name pids, but which pod runs which pid came from the process list.
            reading = UtilizationReading(unavailable=UNAVAILABLE_ERROR)
        latest = _latest_per_pid(reading.samples)
        for target in on_device:
            pods = _pod_usages(
                mine.get(target.claim_uid, {}),
                claim_pods.get(target.claim_uid, ()),
                latest if reading.unavailable is None else None,
                memory_known=listed is not None,
            )
            sm = _sum_or_none(p.sm_percent for p in pods)
            memory = _sum_or_none(p.memory_used_bytes for p in pods)
            in_use = _in_use(sm, reading.unavailable, pods)
            results.append(
                ClaimDeviceUsage(
                    target=target,
                    pods=pods,
                    sm_percent=sm,
                    sm_unavailable=reading.unavailable,
                    memory_used_bytes=memory,
                    idle_seconds=idle.observe(target, in_use, now),
                    over_share=_over_share(target, sm, memory),
                )
            )
    idle.forget_all_but({(t.claim_uid, t.device) for t in targets})
    return results


def _owners(
    targets: Sequence[UsageTarget], claim_pods: Mapping[str, Sequence[PodRef]]
) -> dict[str, str]:
    """Pod UID -> the UID of the claim (of these targets) that the pod reserved."""
    owner: dict[str, str] = {}
    for target in targets:
        for pod in claim_pods.get(target.claim_uid, ()):
            owner.setdefault(pod.uid, target.claim_uid)
    return owner


def _latest_per_pid(samples: Iterable[ProcessUtilization]) -> dict[int, ProcessUtilization]:
    latest: dict[int, ProcessUtilization] = {}
    for sample in samples:
        known = latest.get(sample.pid)
        if known is None or sample.timestamp_us > known.timestamp_us:
            latest[sample.pid] = sample
    return latest


def _pod_usages(
    running: Mapping[str, Sequence[ProcessMemory]],
    reserved: Sequence[PodRef],
    samples: Mapping[int, ProcessUtilization] | None,
    *,
    memory_known: bool,
) -> tuple[PodUsage, ...]:
    names = {pod.uid: pod.name for pod in reserved}
    pod_uids = [pod.uid for pod in reserved] + sorted(set(running) - set(names))
    if not pod_uids:
        pod_uids = [""]
    usages = []
    for pod_uid in pod_uids:
        procs = running.get(pod_uid, ())
        sm = None
        if samples is not None:
            sm = float(sum(samples[p.pid].sm_percent for p in procs if p.pid in samples))
        memory: int | None = None
        if memory_known:
            used = [p.used_memory_bytes for p in procs]
            memory = None if any(u is None for u in used) else sum(u or 0 for u in used)
        usages.append(
            PodUsage(
                pod=names.get(pod_uid, pod_uid),
                pod_uid=pod_uid,
                sm_percent=sm,
                memory_used_bytes=memory,
                processes=len(procs),
            )
        )
    return tuple(usages)


def _in_use(sm: float | None, unavailable: str | None, pods: Sequence[PodUsage]) -> bool:
    """Whether the device counts as used now. No sample since the last pass means no work
    (NVML samples only kernels that ran). Where NVML cannot measure at all (MIG, or a failed
    reading) a running process counts as use: idle time never grows on a guess, so no
    GPUIdle Event is raised for a claim whose use cannot be measured."""
    if sm is not None:
        return sm > 0
    if unavailable == UNAVAILABLE_NO_SAMPLES:
        return False
    return any(p.processes for p in pods)


def _sum_or_none(values: Iterable[float | int | None]) -> Any:
    total: float | int = 0
    for value in values:
        if value is None:
            return None
        total += value
    return total


def _over_share(target: UsageTarget, sm: float | None, memory: int | None) -> bool:
    if not target.shared:
        return False
    limit = target.memory_limit_bytes
    if (
        target.limit_source in ("mps", "share")
        and limit is not None
        and memory is not None
        and memory > limit
    ):
        return True
    share = target.sm_share_percent
    return share is not None and sm is not None and sm > share


# --------------------------------------------------------------------------- idle time


class IdleTracker:
    """When each (claim, device) last showed use; not thread-safe (one sampler owns it)."""

    def __init__(self) -> None:
        self._last_use: dict[tuple[str, str], float] = {}

    def observe(self, target: UsageTarget, in_use: bool, now: float) -> float:
        """Record this pass; the seconds since the last use (since Prepare if never used)."""
        key = (target.claim_uid, target.device)
        if in_use:
            self._last_use[key] = now
            return 0.0
        since = self._last_use.get(key)
        if since is None:
            since = target.prepared_at if target.prepared_at is not None else now
            since = min(since, now)
            self._last_use[key] = since
        return max(now - since, 0.0)

    def forget_all_but(self, keys: set[tuple[str, str]]) -> None:
        """Drop what is known of claim-devices no longer prepared."""
        for key in set(self._last_use) - keys:
            del self._last_use[key]


__all__ = [
    "UNAVAILABLE_ERROR",
    "UNAVAILABLE_MIG",
    "UNAVAILABLE_NO_SAMPLES",
    "ClaimDeviceUsage",
    "IdleTracker",
    "PodRef",
    "PodUsage",
    "UsageTarget",
    "UtilizationReading",
    "attribute",
    "usage_targets",
]
