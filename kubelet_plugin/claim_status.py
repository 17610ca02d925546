"""Writes each claim's `status.devices` after Prepare answers, without ever failing it.

`ClaimStatusService` wraps the driver's `DraService`: Prepare runs as
before, and for each claim the answer's outcome is queued for
`ClaimStatusWriter`, whose one background thread applies the entries of
`dra_driver.claims.device_status` by server-side apply with field manager
`gpu.nvidia.com` (the driver name). The answer to the kubelet never waits
for the API server, and a failed write is retried with back-off, then
logged; it never turns into a Prepare error. A write the store refuses as it
stands (`InvalidObjectError`: a claim nested too deep to copy) is logged in one
line and not retried.

- An outcome is applied `SETTLE_S` after the answer, not at once: the
  writer's work (an apply is a JSON encode and an HTTP round trip) then does
  not take the CPU from the calls the kubelet makes next, and an outcome
  replaced or unprepared in the meantime is never written.
- A prepared claim's entries are built from the checkpoint right after
  Prepare (live MIG UUIDs, share ids, MPS limits). A failed claim's are
  built from the claim's allocation, read in the background.
- One apply carries every entry of the claim (the manager's whole set, as
  server-side apply requires); a newer outcome of the same claim replaces a
  queued one.
- An unchanged outcome is not applied again (a repeated Prepare), and the
  `Ready` condition keeps its `lastTransitionTime` while its status stays.
- Unprepare writes nothing: the apiserver drops the entries itself when
  the devices are deallocated (upstream-facts §2.2).
- The claim the apply returns is the freshest view of its `reservedFor`,
  recorded in `ClaimPods` for the usage sampler.
"""

from __future__ import annotations

import copy
import datetime
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from dra_driver.backoff import backoff_delay
from dra_driver.claims.checkpoint import Checkpoint, ClaimState
from dra_driver.claims.device_status import failed_entries, ready_entries
from dra_driver.errors import DraGpuError, InvalidObjectError, NotFoundError
from dra_driver.kube.cluster import API_VERSION, Cluster
from dra_driver.node.devices import AllocatableDevice
from kubelet_plugin.metrics import PluginMetrics
from kubelet_plugin.service import ClaimRef, DraService, PrepareResult, UnprepareResult
from kubelet_plugin.usage_sampler import ClaimPods

log = logging.getLogger(__name__)

SETTLE_S: Final = 0.1
"""How long an outcome waits before it is applied (see the module docstring)."""
MAX_ATTEMPTS: Final = 6
"""Applies of one outcome before it is given up (back-off 1 s, 2 s, ... up to 30 s)."""


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class _Task:
    ref: ClaimRef
    entries: list[dict[str, Any]] | None  # None: failed; build from the claim with `error`
    error: str = ""
    attempts: int = 0
    not_before: float = 0.0


class ClaimStatusWriter:
    """Applies claims' `status.devices` in a background thread (see the module docstring)."""

    def __init__(
        self,
        cluster: Cluster,
        *,
        driver_name: str,
        pool_name: str,
        claim_pods: ClaimPods | None = None,
        metrics: PluginMetrics | None = None,
        clock: Callable[[], str] = _now,
        settle_s: float = SETTLE_S,
    ) -> None:
        self._cluster = cluster
        self._settle_s = settle_s
        self._driver = driver_name
        self._pool = pool_name
        self._claim_pods = claim_pods
        self._metrics = metrics
        self._clock = clock
        self._changed = threading.Condition()
        self._pending: dict[str, _Task] = {}
        self._busy: set[str] = set()
        # Claims unprepared while their write was in flight: its outcome is not remembered
        # and it is not retried.
        self._cancelled: set[str] = set()
        self._applied: dict[str, list[dict[str, Any]]] = {}  # uid -> last entries applied
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name="claim-status", daemon=True)
        self._thread.start()

    # -- queueing -------------------------------------------------------------------

    def prepared(self, ref: ClaimRef, entries: list[dict[str, Any]]) -> None:
        self._queue(_Task(ref, entries))

    def failed(self, ref: ClaimRef, error: str) -> None:
        self._queue(_Task(ref, None, error))

    def _queue(self, task: _Task) -> None:
        task.not_before = time.monotonic() + self._settle_s
        with self._changed:
            self._pending[task.ref.uid] = task
            self._changed.notify_all()

    def wait_idle(self, timeout: float) -> bool:
        """Block until nothing is queued or being applied; False if `timeout` passed first."""
        with self._changed:
            return self._changed.wait_for(lambda: not self._pending and not self._busy, timeout)

    def close(self, timeout: float = 2.0) -> None:
        """Apply what is due within `timeout` seconds in all, then stop (a write still
        hanging on the API server then is dropped with the process)."""
        deadline = time.monotonic() + timeout
        self.wait_idle(timeout)
        with self._changed:
            self._stopping = True
            self._changed.notify_all()
        self._thread.join(timeout=max(deadline - time.monotonic(), 0.0))

    # -- the thread -------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            with self._changed:
                task = self._next_due()
                while task is None:
                    if self._stopping:
                        return
                    wait = self._seconds_to_next()
                    self._changed.wait(timeout=wait)
                    task = self._next_due()
                del self._pending[task.ref.uid]
                self._busy.add(task.ref.uid)
            try:
                self._apply(task)
            except Exception:  # a bug or a client surprise must not end status writing
                log.exception("writing status.devices of %s failed", task.ref)
                self._count("error")
            finally:
                with self._changed:
                    self._busy.discard(task.ref.uid)
                    self._cancelled.discard(task.ref.uid)
                    self._changed.notify_all()

    def _next_due(self) -> _Task | None:
        now = time.monotonic()
        due = [t for t in self._pending.values() if t.not_before <= now]
        return min(due, key=lambda t: t.not_before) if due else None

    def _seconds_to_next(self) -> float | None:
        if not self._pending:
            return None
        return max(min(t.not_before for t in self._pending.values()) - time.monotonic(), 0.01)

    def _apply(self, task: _Task) -> None:
        ref = task.ref
        try:
            entries = task.entries
            if entries is None:
                claim = self._cluster.get_resource_claim(ref.namespace, ref.name)
                if (claim.get("metadata") or {}).get("uid") != ref.uid:
                    return  # deleted and re-created: not the claim that failed
                entries = failed_entries(
                    claim, task.error, driver=self._driver, pool=self._pool, now=self._clock()
                )
            entries = self._keep_transition_times(ref.uid, entries)
            if _without_times(entries) == _without_times(self._last_applied(ref.uid)):
                return
            stored = self._cluster.apply_resource_claim_status(
                {
                    "apiVersion": API_VERSION,
                    "kind": "ResourceClaim",
                    # The UID: never onto a claim re-created under the same name.
                    "metadata": {"name": ref.name, "namespace": ref.namespace, "uid": ref.uid},
                    "status": {"devices": entries},
                },
                field_manager=self._driver,
                force=True,
            )
        except NotFoundError as exc:
            log.info("%s is gone; its status.devices is not written: %s", ref, exc)
            self._count("gone")
            return
        except InvalidObjectError as exc:  # the same write would fail again: one line
            log.warning("not writing status.devices of %s: %s", ref, exc)
            self._count("error")
            return
        except DraGpuError as exc:
            task.attempts += 1
            if not self._still_there(ref):
                log.info("%s is gone or re-created; its status.devices is not written", ref)
                self._count("gone")
                return
            if task.attempts >= MAX_ATTEMPTS:
                log.error(
                    "giving up writing status.devices of %s after %d attempts: %s",
                    ref,
                    task.attempts,
                    exc,
                )
                self._count("error")
                return
            delay = backoff_delay(task.attempts)
            log.warning(
                "writing status.devices of %s failed (again in %.1f s): %s", ref, delay, exc
            )
            task.not_before = time.monotonic() + delay
            with self._changed:
                if ref.uid not in self._cancelled:  # not for a claim unprepared since
                    self._pending.setdefault(ref.uid, task)  # unless a newer outcome came
                self._changed.notify_all()
            return
        with self._changed:
            if ref.uid in self._cancelled:
                return
            self._applied[ref.uid] = entries
        self._count("success")
        if self._claim_pods is not None:
            self._claim_pods.record(stored)
        log.debug("wrote status.devices of %s: %d entries", ref, len(entries))

    def _still_there(self, ref: ClaimRef) -> bool:
        """Whether the claim a write failed for still exists with its UID (a failure to
        tell counts as yes: the write is retried)."""
        try:
            claim = self._cluster.get_resource_claim(ref.namespace, ref.name)
        except NotFoundError:
            return False
        except DraGpuError:
            return True
        return (claim.get("metadata") or {}).get("uid") == ref.uid

    def _keep_transition_times(
        self, uid: str, entries: list[dict[str, Any]]
    ) -> list[dict[str, Any]]:
        """Carry `lastTransitionTime` over from what was applied while a condition's status
        is unchanged (a condition transitions only when its status changes)."""
        before = {_key(e): e for e in self._last_applied(uid)}
        out = copy.deepcopy(entries)
        for entry in out:
            old = before.get(_key(entry))
            if old is None:
                continue
            old_conditions = {c["type"]: c for c in old.get("conditions", [])}
            for condition in entry.get("conditions", []):
                previous = old_conditions.get(condition["type"])
                if previous is not None and previous["status"] == condition["status"]:
                    condition["lastTransitionTime"] = previous["lastTransitionTime"]
        return out

    def _last_applied(self, uid: str) -> list[dict[str, Any]]:
        with self._changed:
            return self._applied.get(uid, [])

    def forget(self, uid: str) -> None:
        """Drop what is remembered of a claim (it was unprepared): its last entries, a write
        still queued or waiting to be retried, and the outcome of one in flight (so that a
        later Prepare of the claim writes its status again)."""
        with self._changed:
            self._applied.pop(uid, None)
            self._pending.pop(uid, None)
            if uid in self._busy:
                self._cancelled.add(uid)
            self._changed.notify_all()

    def _count(self, result: str) -> None:
        if self._metrics is not None:
            self._metrics.status_writes.labels(result).inc()


def _key(entry: Mapping[str, Any]) -> tuple[str, str, str, str]:
    return (
        str(entry.get("driver")),
        str(entry.get("pool")),
        str(entry.get("device")),
        str(entry.get("shareID") or ""),
    )


def _without_times(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    copied = copy.deepcopy(entries)
    for entry in copied:
        for condition in entry.get("conditions", []):
            condition.pop("lastTransitionTime", None)
    return copied


class ClaimStatusService:
    """A `DraService` that reports each Prepare outcome in the claim's `status.devices`."""

    def __init__(
        self,
        inner: DraService,
        writer: ClaimStatusWriter,
        *,
        prepared: Callable[[], Checkpoint],
        devices: Callable[[], Sequence[AllocatableDevice]],
        driver_name: str,
        node_name: str,
        clock: Callable[[], str] = _now,
    ) -> None:
        self._inner = inner
        self._writer = writer
        self._prepared = prepared
        self._devices = devices
        self._driver = driver_name
        self._node = node_name
        self._clock = clock

    def prepare(self, claims: Sequence[ClaimRef]) -> Mapping[str, PrepareResult]:
        results = self._inner.prepare(claims)
        try:
            self._report(claims, results)
        except Exception:  # reporting must never fail a Prepare
            log.exception("cannot queue the status.devices of %d claims", len(claims))
        return results

    def unprepare(self, claims: Sequence[ClaimRef]) -> Mapping[str, UnprepareResult]:
        results = self._inner.unprepare(claims)
        for ref in claims:
            result = results.get(ref.uid)
            if result is not None and not result.error:
                self._writer.forget(ref.uid)
        return results

    def _report(self, claims: Sequence[ClaimRef], results: Mapping[str, PrepareResult]) -> None:
        checkpoint = self._prepared()
        devices = {d.name: d for d in self._devices()}
        now = self._clock()
        for ref in claims:
            result = results.get(ref.uid)
            if result is None:
                continue
            if result.error:
                self._writer.failed(ref, result.error)
                continue
            entry = checkpoint.claims.get(ref.uid)
            if entry is None or entry.state is not ClaimState.PrepareCompleted:
                continue
            self._writer.prepared(
                ref,
                ready_entries(entry, devices, driver=self._driver, node_name=self._node, now=now),
            )


__all__ = ["MAX_ATTEMPTS", "ClaimStatusService", "ClaimStatusWriter"]
