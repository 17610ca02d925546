"""Kubernetes Events (events.k8s.io/v1) for claims whose Prepare failed or whose GPUs idle.

The kubelet shows a failed NodePrepareResources only as a generic pod event;
the admin debugging a pending pod needs the driver's own reason. So when a
claim fails to prepare, the plugin records a Warning Event `PrepareFailed` on
the ResourceClaim and on each pod that reserved it (`status.reservedFor`),
with the per-claim error as the note. A claim reserved for a workload rather
than for pods (a PodGroup, Kubernetes 1.37's `DRAWorkloadResourceClaims`)
names its holders in the claim's note, as its pods are not listed. A claim
whose GPUs have done nothing for `--idle-claim-after` gets a Warning Event
`GPUIdle` the same way (once per idle period; the usage sampler decides,
`kubelet_plugin.usage_sampler`).

`claim_warning_events` builds them (pure); `EventingService` wraps the
driver's `DraService` and posts them in a background thread, so a slow API
server never delays the answer to the kubelet. Failures to post are logged.

Bounded: the kubelet retries a failed Prepare every few seconds, and a
hostile or broken client can fail thousands of claims a second, faster than
any API server takes Events. So the same failure of the same claim is
reported once a minute at most (`REPEAT_AFTER_S`, remembering the last
`MAX_REMEMBERED` failures), at most `MAX_PENDING` reports wait to be
posted, and the rest are dropped and counted in the log. Before this, an
unbounded queue of reports grew the plugin's memory without limit.
"""

from __future__ import annotations

import datetime
import hashlib
import logging
import queue
import threading
import time
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import Any, Final

from dra_driver.claims.consumers import claim_consumers
from dra_driver.errors import DraGpuError
from dra_driver.kube.cluster import Cluster
from dra_driver.kube.objects import Obj
from kubelet_plugin.service import ClaimRef, DraService, PrepareResult, UnprepareResult

log = logging.getLogger(__name__)

REASON: Final = "PrepareFailed"
ACTION: Final = "PrepareResources"
IDLE_REASON: Final = "GPUIdle"
IDLE_ACTION: Final = "SampleUsage"
MAX_NOTE_BYTES: Final = 1024  # the apiserver's limit on `note`
MAX_PENDING: Final = 256
REPEAT_AFTER_S: Final = 60.0
MAX_REMEMBERED: Final = 1024
_CLOSE_TIMEOUT_S: Final = 30.0


def prepare_failed_events(
    claim: Obj, error: str, *, driver_name: str, node_name: str, now: float
) -> list[Obj]:
    """The Events for one claim that failed to prepare: the claim's, then its pods'."""
    return claim_warning_events(
        claim,
        error,
        reason=REASON,
        action=ACTION,
        driver_name=driver_name,
        node_name=node_name,
        now=now,
    )


def claim_warning_events(
    claim: Obj,
    text: str,
    *,
    reason: str,
    action: str,
    driver_name: str,
    node_name: str,
    now: float,
) -> list[Obj]:
    """Warning Events `reason` about one claim: the claim's, then its pods'."""
    meta = claim.get("metadata") or {}
    namespace, name = str(meta.get("namespace") or ""), str(meta.get("name") or "")
    moment = datetime.datetime.fromtimestamp(now, tz=datetime.UTC)
    event_time = moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    claim_ref = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "namespace": namespace,
        "name": name,
        "uid": str(meta.get("uid") or ""),
    }
    consumers = claim_consumers(claim)
    others = ", ".join(str(c) for c in consumers if not c.is_pod)
    held = f" (reserved for {others})" if others else ""
    note = f"ResourceClaim {namespace}/{name}{held} on node {node_name}: {text}"
    note = note.encode()[:MAX_NOTE_BYTES].decode(errors="ignore")
    regarding: list[tuple[dict[str, Any], dict[str, Any] | None]] = [(claim_ref, None)]
    for consumer in consumers:
        if consumer.is_pod:
            pod = {
                "apiVersion": "v1",
                "kind": "Pod",
                "namespace": namespace,
                "name": consumer.name,
                "uid": consumer.uid,
            }
            regarding.append((pod, claim_ref))
    return [
        {
            "apiVersion": "events.k8s.io/v1",
            "kind": "Event",
            "metadata": {
                # client-go's naming: <object name>.<hex nanoseconds>
                "name": f"{target['name']}.{int(now * 1e9) + index:x}",
                "namespace": namespace,
            },
            "eventTime": event_time,
            "reportingController": f"{driver_name}/kubelet-plugin",
            "reportingInstance": f"{driver_name}/kubelet-plugin-{node_name}"[:128],
            "action": action,
            "reason": reason,
            "type": "Warning",
            "note": note,
            "regarding": target,
            **({"related": related} if related is not None else {}),
        }
        for index, (target, related) in enumerate(regarding)
    ]


class EventingService:
    """A `DraService` that reports failed Prepares as Events, then answers as `inner` does."""

    def __init__(
        self, inner: DraService, cluster: Cluster, *, driver_name: str, node_name: str
    ) -> None:
        self._inner = inner
        self._cluster = cluster
        self._driver_name = driver_name
        self._node_name = node_name
        self._pending: queue.Queue[tuple[ClaimRef, str, float, str, str] | None] = queue.Queue(
            MAX_PENDING
        )
        self._recent: OrderedDict[tuple[str, str], float] = OrderedDict()
        self._guard = threading.Lock()
        self.dropped = 0
        self._worker = threading.Thread(target=self._post_all, name="claim-events", daemon=True)
        self._worker.start()

    def prepare(self, claims: Sequence[ClaimRef]) -> Mapping[str, PrepareResult]:
        results = self._inner.prepare(claims)
        now = time.time()
        for ref in claims:
            result = results.get(ref.uid)
            if result is not None and result.error:
                self._offer(ref, result.error, now)
        return results

    def unprepare(self, claims: Sequence[ClaimRef]) -> Mapping[str, UnprepareResult]:
        return self._inner.unprepare(claims)

    def close(self, timeout: float = _CLOSE_TIMEOUT_S) -> None:
        """Post what is queued within `timeout` seconds, then stop (an API server that does
        not answer costs at most `timeout`; what is left is dropped with the process)."""
        deadline = time.monotonic() + timeout
        try:
            self._pending.put(None, timeout=max(timeout, 0.0))
        except queue.Full:
            return
        self._worker.join(max(deadline - time.monotonic(), 0.0))

    def _offer(
        self,
        ref: ClaimRef,
        error: str,
        now: float,
        *,
        reason: str = REASON,
        action: str = ACTION,
    ) -> None:
        error = error[:MAX_NOTE_BYTES]
        digest = hashlib.sha256(f"{reason}\0{error}".encode(errors="replace")).hexdigest()
        key = (ref.uid[:256], digest)
        with self._guard:
            last = self._recent.get(key)
            if last is not None and now - last < REPEAT_AFTER_S:
                return  # reported a moment ago
            self._recent[key] = now
            self._recent.move_to_end(key)
            while len(self._recent) > MAX_REMEMBERED:
                self._recent.popitem(last=False)
        try:
            self._pending.put_nowait((ref, error, now, reason, action))
        except queue.Full:
            with self._guard:
                self.dropped += 1
                dropped = self.dropped
            if dropped % 100 == 1:
                log.warning(
                    "%d Events for failed Prepares dropped: more failures than the API "
                    "server takes (at most %d wait to be posted)",
                    dropped,
                    MAX_PENDING,
                )

    def _post_all(self) -> None:
        while (item := self._pending.get()) is not None:
            ref, error, now, reason, action = item
            self._report(ref, error, now, reason=reason, action=action)

    def claim_idle(self, ref: ClaimRef, message: str) -> None:
        """Post a `GPUIdle` Warning Event on the claim and its pods (in the background)."""
        self._offer(ref, message, time.time(), reason=IDLE_REASON, action=IDLE_ACTION)

    def _report(
        self,
        ref: ClaimRef,
        error: str,
        now: float,
        *,
        reason: str = REASON,
        action: str = ACTION,
    ) -> None:
        try:
            try:
                claim = self._cluster.get_resource_claim(ref.namespace, ref.name)
            except DraGpuError:  # gone, or the API is down: an Event on the claim alone
                claim = {"metadata": {"namespace": ref.namespace, "name": ref.name, "uid": ref.uid}}
            for event in claim_warning_events(
                claim,
                error,
                reason=reason,
                action=action,
                driver_name=self._driver_name,
                node_name=self._node_name,
                now=now,
            ):
                self._cluster.create_event(event)
        except DraGpuError as exc:
            log.warning("cannot record a %s Event for %s: %s", reason, ref, exc)
        except Exception:
            log.exception("cannot record a %s Event for %s", reason, ref)
