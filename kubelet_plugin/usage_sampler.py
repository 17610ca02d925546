"""Samples GPU use per claim and per pod every `--usage-interval` seconds.

Each pass (`UsageSampler.sample`) asks NVML, once per device some completed
claim holds, for the running compute processes (MPS clients included) and
their utilization samples, reads `/proc/<pid>/cgroup` of each new pid to
learn its pod, and hands everything to the pure rules of
`dra_driver.claims.usage`. What a pass found (`UsageReport`) feeds the
Prometheus collector (`kubelet_plugin.usage_metrics`), `dra-gpu status`
(through `usage.json` in the plugin's data directory) and the `GPUIdle`
Events (`UsageLoop`).

Which pods use a claim comes from its `status.reservedFor` (`ClaimPods`):
recorded when the claim's status is written after Prepare, and re-read in
the background for a claim not seen yet, or when a process of a pod that no
claim of its device names appears, at most every `POD_REFRESH_SECONDS`.

A pid's pod is cached while the pid keeps showing up in NVML's lists and
forgotten in the first pass it does not, so a pid reused between two passes
could be counted for the wrong pod for one pass. `/proc` is the host's:
the plugin runs with `hostPID` (or another host `/proc` mount).
"""

from __future__ import annotations

import datetime
import json
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from dra_driver.claims.checkpoint import Checkpoint
from dra_driver.claims.usage import (
    UNAVAILABLE_ERROR,
    UNAVAILABLE_MIG,
    UNAVAILABLE_NO_SAMPLES,
    ClaimDeviceUsage,
    IdleTracker,
    PodRef,
    UsageTarget,
    UtilizationReading,
    attribute,
    usage_targets,
)
from dra_driver.errors import DraGpuError, NvmlError
from dra_driver.files.atomic import atomic_write
from dra_driver.hardware.nvml import codes
from dra_driver.hardware.nvml.interface import Nvml, ProcessMemory
from dra_driver.kube.cluster import Cluster
from dra_driver.kube.objects import Obj
from dra_driver.node.cgroups import pod_uid_from_cgroup
from dra_driver.node.devices import AllocatableDevice

log = logging.getLogger(__name__)

DEFAULT_INTERVAL_SECONDS: Final = 10.0
POD_REFRESH_SECONDS: Final = 30.0
REPORT_FILE: Final = "usage.json"
"""The last pass, in the plugin's data directory, for `dra-gpu status`."""


def pods_of(claim: Obj) -> tuple[PodRef, ...]:
    """The pods in a claim's `status.reservedFor` (PodGroups and other kinds left out)."""
    refs = []
    for consumer in (claim.get("status") or {}).get("reservedFor") or []:
        if consumer.get("resource") == "pods" and not consumer.get("apiGroup"):
            refs.append(PodRef(name=str(consumer.get("name") or ""), uid=str(consumer.get("uid"))))
    return tuple(refs)


class ClaimPods:
    """The pods of each claim, as its `reservedFor` last said (thread-safe)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._lock = threading.Lock()
        self._pods: dict[str, tuple[PodRef, ...]] = {}
        self._read_at: dict[str, float] = {}
        self._clock = clock

    def record(self, claim: Obj) -> None:
        """Remember the pods of `claim` (a ResourceClaim object as the API returns it)."""
        uid = str((claim.get("metadata") or {}).get("uid") or "")
        if not uid:
            return
        with self._lock:
            self._pods[uid] = pods_of(claim)
            self._read_at[uid] = self._clock()

    def touch(self, uid: str) -> None:
        """Count an attempt to read the claim as a read (so a failing one is not retried
        on every pass)."""
        with self._lock:
            self._read_at[uid] = self._clock()

    def snapshot(self) -> dict[str, tuple[PodRef, ...]]:
        with self._lock:
            return dict(self._pods)

    def due(self, uids: Iterable[str], *, min_age: float) -> list[str]:
        """Those of `uids` never read, or read more than `min_age` seconds ago."""
        now = self._clock()
        with self._lock:
            return [u for u in uids if now - self._read_at.get(u, -1e18) >= min_age]

    def forget_all_but(self, uids: set[str]) -> None:
        with self._lock:
            for uid in (set(self._pods) | set(self._read_at)) - uids:
                self._pods.pop(uid, None)
                self._read_at.pop(uid, None)


@dataclass(frozen=True)
class UsageReport:
    """One sampling pass: when, and each prepared claim-device's use."""

    sampled_at: float  # Unix seconds
    claims: tuple[ClaimDeviceUsage, ...]
    unknown_pods: Mapping[str, frozenset[str]]  # claim UID -> pods on its devices no claim names

    def to_dict(self, interval: float) -> dict[str, Any]:
        moment = datetime.datetime.fromtimestamp(self.sampled_at, tz=datetime.UTC)
        return {
            "sampledAt": moment.strftime("%Y-%m-%dT%H:%M:%SZ"),
            "sampledAtUnix": self.sampled_at,
            "intervalSeconds": interval,
            "claims": [c.to_dict() for c in self.claims],
        }


class UsageSampler:
    """One sampling pass at a time over the node's prepared claims (see the module docstring)."""

    def __init__(
        self,
        nvml: Nvml,
        proc_root: Path,
        *,
        prepared: Callable[[], Checkpoint],
        devices: Callable[[], Sequence[AllocatableDevice]],
        claim_pods: ClaimPods,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._nvml = nvml
        self._proc_root = Path(proc_root)
        self._prepared = prepared
        self._devices = devices
        self._claim_pods = claim_pods
        self._clock = clock
        self._idle = IdleTracker()
        self._pod_of_pid: dict[int, str | None] = {}
        self._last_seen_us: dict[str, int] = {}
        self._devices_cache: tuple[int, dict[str, AllocatableDevice]] | None = None
        # The checkpoint is immutable and replaced on every change: its targets are reused
        # while the same checkpoint and device list are current.
        self._targets_cache: tuple[Checkpoint, int, list[UsageTarget]] | None = None
        self._failing: set[str] = set()  # "<what> <uuid>" whose failure was logged

    def sample(self) -> UsageReport:
        """One pass: NVML, `/proc`, attribution."""
        targets = self._targets()
        uuids: dict[str, bool] = {}
        for target in targets:
            uuids[target.nvml_uuid] = target.is_mig
        processes: dict[str, list[ProcessMemory]] = {}
        utilization: dict[str, UtilizationReading] = {}
        for uuid, is_mig in uuids.items():
            listed = self._processes(uuid)
            if listed is not None:
                processes[uuid] = listed
            utilization[uuid] = self._utilization(uuid, is_mig)
        pod_of_pid = self._pods_of(p.pid for listed in processes.values() for p in listed)
        claim_pods = self._claim_pods.snapshot()
        now = self._clock()
        usages = attribute(
            targets,
            processes=processes,
            utilization=utilization,
            pod_of_pid=pod_of_pid,
            claim_pods=claim_pods,
            idle=self._idle,
            now=now,
        )
        return UsageReport(
            sampled_at=now,
            claims=tuple(usages),
            unknown_pods=_unknown_pods(targets, processes, pod_of_pid, claim_pods),
        )

    # -- NVML -------------------------------------------------------------------

    def _processes(self, uuid: str) -> list[ProcessMemory] | None:
        try:
            listed = self._nvml.running_compute_processes(uuid)
        except NvmlError as exc:
            self._failed("list processes", uuid, exc)
            return None
        self._recovered("list processes", uuid)
        return listed

    def _utilization(self, uuid: str, is_mig: bool) -> UtilizationReading:
        if is_mig:
            return UtilizationReading(unavailable=UNAVAILABLE_MIG)
        try:
            samples = self._nvml.process_utilization(uuid, self._last_seen_us.get(uuid, 0))
        except NvmlError as exc:
            if exc.code == codes.ERROR_NOT_SUPPORTED:
                return UtilizationReading(unavailable=UNAVAILABLE_MIG)
            self._failed("read process utilization", uuid, exc)
            return UtilizationReading(unavailable=UNAVAILABLE_ERROR)
        self._recovered("read process utilization", uuid)
        if not samples:
            return UtilizationReading(unavailable=UNAVAILABLE_NO_SAMPLES)
        self._last_seen_us[uuid] = max(s.timestamp_us for s in samples)
        return UtilizationReading(samples=tuple(samples))

    def _failed(self, what: str, uuid: str, exc: NvmlError) -> None:
        key = f"{what} {uuid}"
        if key not in self._failing:
            self._failing.add(key)
            log.warning(
                "usage sampling: cannot %s of %s (reported as unknown): %s", what, uuid, exc
            )

    def _recovered(self, what: str, uuid: str) -> None:
        self._failing.discard(f"{what} {uuid}")

    # -- /proc ------------------------------------------------------------------

    def _pods_of(self, pids: Iterable[int]) -> dict[int, str | None]:
        seen: dict[int, str | None] = {}
        for pid in pids:
            if pid in seen:
                continue
            if pid in self._pod_of_pid:
                seen[pid] = self._pod_of_pid[pid]
                continue
            try:
                text = (self._proc_root / str(pid) / "cgroup").read_text(errors="replace")
            except OSError:
                seen[pid] = None  # gone already, or not visible (no host pid namespace)
                continue
            seen[pid] = pod_uid_from_cgroup(text)
        self._pod_of_pid = seen
        return seen

    def _targets(self) -> list[UsageTarget]:
        checkpoint = self._prepared()
        devices = self._device_map()
        cached = self._targets_cache
        if cached is None or cached[0] is not checkpoint or cached[1] != id(devices):
            cached = (checkpoint, id(devices), usage_targets(checkpoint, devices))
            self._targets_cache = cached
        return cached[2]

    def _device_map(self) -> dict[str, AllocatableDevice]:
        devices = self._devices()
        cached = self._devices_cache
        if cached is None or cached[0] != id(devices):
            cached = (id(devices), {d.name: d for d in devices})
            self._devices_cache = cached
        return cached[1]


def _unknown_pods(
    targets: Sequence[UsageTarget],
    processes: Mapping[str, Sequence[ProcessMemory]],
    pod_of_pid: Mapping[int, str | None],
    claim_pods: Mapping[str, Sequence[PodRef]],
) -> dict[str, frozenset[str]]:
    """Claim UID -> pods running on its devices that no claim of the device names."""
    by_uuid: dict[str, list[UsageTarget]] = {}
    for target in targets:
        by_uuid.setdefault(target.nvml_uuid, []).append(target)
    unknown: dict[str, frozenset[str]] = {}
    for uuid, on_device in by_uuid.items():
        named = {pod.uid for t in on_device for pod in claim_pods.get(t.claim_uid, ())}
        running = {pod_of_pid.get(p.pid) for p in processes.get(uuid, ())}
        strangers = frozenset(u for u in running if u is not None and u not in named)
        if strangers:
            for target in on_device:
                unknown[target.claim_uid] = strangers
    return unknown


# --------------------------------------------------------------------------- the loop


def write_report(path: Path, report: UsageReport, interval: float) -> None:
    """Write the pass to `path` (atomically) for `dra-gpu status`."""
    data = json.dumps(report.to_dict(interval), indent=1, sort_keys=True) + "\n"
    atomic_write(path, data.encode())


def read_report(path: Path) -> dict[str, Any] | None:
    """What `write_report` wrote, or None when there is nothing (readable) there."""
    try:
        loaded = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return loaded if isinstance(loaded, dict) else None


class UsageLoop:
    """The sampler's thread: a pass every `interval` seconds, and what follows from it.

    After each pass: `latest()` answers it (for the metrics collector), the
    report file, `GPUIdle` reports through `on_idle(claim usages, idle seconds)` for
    a claim all of whose devices have been idle for `idle_after` seconds (once
    per idle period), and a background re-read of claims whose pods are not
    known.
    """

    def __init__(
        self,
        sampler: UsageSampler,
        *,
        interval: float,
        claim_pods: ClaimPods,
        cluster: Cluster | None,
        report_file: Path | None = None,
        idle_after: float | None = None,
        on_idle: Callable[[Sequence[ClaimDeviceUsage], float], None] | None = None,
    ) -> None:
        self._sampler = sampler
        self._interval = interval
        self._claim_pods = claim_pods
        self._cluster = cluster
        self._latest: UsageReport | None = None
        self._report_file = report_file
        self._idle_after = idle_after
        self._on_idle = on_idle
        self._reported_idle: set[str] = set()

    def latest(self) -> UsageReport | None:
        """The last pass (None before the first)."""
        return self._latest

    def run(self, stop: threading.Event) -> None:
        """Sample until `stop` is set; a failing pass is logged and the next one runs."""
        while not stop.is_set():
            started = time.monotonic()
            try:
                self.run_once()
            except Exception:
                log.exception("usage sampling pass failed")
            stop.wait(max(self._interval - (time.monotonic() - started), 0.0))

    def run_once(self) -> UsageReport:
        report = self._sampler.sample()
        self._latest = report
        if self._report_file is not None:
            try:
                write_report(self._report_file, report, self._interval)
            except OSError as exc:
                log.warning("cannot write %s: %s", self._report_file, exc)
        self._check_idle(report)
        self._refresh_pods(report)
        return report

    def _check_idle(self, report: UsageReport) -> None:
        if self._idle_after is None or self._on_idle is None:
            return
        by_claim: dict[str, list[ClaimDeviceUsage]] = {}
        for usage in report.claims:
            by_claim.setdefault(usage.target.claim_uid, []).append(usage)
        for uid, usages in by_claim.items():
            idle = min(u.idle_seconds for u in usages)
            if idle < self._idle_after:
                self._reported_idle.discard(uid)
            elif uid not in self._reported_idle:
                self._reported_idle.add(uid)
                self._on_idle(usages, idle)
        self._reported_idle &= set(by_claim)

    def _refresh_pods(self, report: UsageReport) -> None:
        claims = {u.target.claim_uid: u.target for u in report.claims}
        self._claim_pods.forget_all_but(set(claims))
        if self._cluster is None:
            return
        known = self._claim_pods.snapshot()
        wanted = [uid for uid in claims if uid not in known or uid in report.unknown_pods]
        for uid in self._claim_pods.due(wanted, min_age=POD_REFRESH_SECONDS):
            target = claims[uid]
            self._claim_pods.touch(uid)
            try:
                claim = self._cluster.get_resource_claim(target.namespace, target.claim)
            except DraGpuError as exc:
                log.debug("cannot read %s/%s for its pods: %s", target.namespace, target.claim, exc)
                continue
            if (claim.get("metadata") or {}).get("uid") == uid:
                self._claim_pods.record(claim)


__all__ = [
    "DEFAULT_INTERVAL_SECONDS",
    "REPORT_FILE",
    "ClaimPods",
    "UsageLoop",
    "UsageReport",
    "UsageSampler",
    "pods_of",
    "read_report",
    "write_report",
]
