"""Watches the GPUs' NVML health events and keeps the node's health current.

One background thread waits on the backend's event set (`nvmlEventSetWait_v2`
on real GPUs, injected events on a simulated node) and feeds every event to
the pure rules of `dra_driver.node.health`. When a GPU's health changes, it calls
`on_change` (the plugin republishes its ResourceSlices with the new taints)
and wakes the kubelet's health streams waiting in `wait_for_change`.

An Xid is classified by the GPU's recovery action, read when the event
comes (`dra_driver.node.health`). Every `poll_interval` seconds the monitor
also reads each GPU's recovery action: a faulty GPU that reads NONE again
(reset by the admin) becomes healthy, so its taint goes without a plugin
restart (NVML sends no event for that), and a GPU that needs a recovery no
event told of becomes unhealthy. A GPU that answers GPU_IS_LOST is lost.
Drivers older than R565 cannot report the action: their faults stay until
the plugin restarts, as before.

A failing event set (NVML errors other than a timeout) is logged, closed and
opened again after a back-off, so a transient driver problem does not end
health monitoring for the life of the plugin.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence

from dra_driver.backoff import backoff_delay
from dra_driver.errors import NvmlError
from dra_driver.hardware.nvml import codes
from dra_driver.hardware.nvml.interface import (
    HealthEvent,
    HealthEventKind,
    HealthEventSet,
    HealthEventSource,
)
from dra_driver.node.health import Fault, HealthPolicy, NodeHealth

log = logging.getLogger(__name__)

WAIT_SECONDS = 0.2
"""How long one wait on the event set blocks; bounds the reaction time to `stop`, so a
SIGTERM (a rolling upgrade, a restart) is not held up by a wait. NVML queues events in
the set between waits, so none is missed; five wake-ups a second cost nothing measurable."""
DEFAULT_POLL_SECONDS = 10.0
"""How often each GPU's recovery action is read (`--health-poll-interval`)."""


class HealthMonitor:
    """The health of a node's GPUs, kept current from NVML events."""

    def __init__(
        self,
        source: HealthEventSource | None,
        gpu_uuids: Sequence[str],
        policy: HealthPolicy,
        *,
        on_change: Callable[[Mapping[str, Fault]], None] | None = None,
        clock: Callable[[], float] = time.time,
        poll_interval: float = DEFAULT_POLL_SECONDS,
    ) -> None:
        self._source = source
        self._poll_interval = poll_interval
        self._unreadable: set[str] = set()  # GPUs whose recovery action failed to read (logged)
        self._uuids = list(gpu_uuids)
        self._health = NodeHealth(policy)
        self._on_change = on_change
        self._clock = clock
        self._changed = threading.Condition()
        self._version = 0
        self._monitored: frozenset[str] = frozenset()

    @property
    def policy(self) -> HealthPolicy:
        return self._health.policy

    def snapshot(self) -> tuple[int, Mapping[str, Fault], frozenset[str]]:
        """(version, faults by GPU UUID, GPUs whose events are watched)."""
        with self._changed:
            return self._version, self._health.faults, self._monitored

    def wait_for_change(self, version: int, timeout: float) -> int:
        """Block until the version differs from `version` or `timeout` passes; the version."""
        with self._changed:
            self._changed.wait_for(lambda: self._version != version, timeout)
            return self._version

    def apply(self, events: Sequence[HealthEvent]) -> bool:
        """Take events into account (the thread does this); True if any GPU's health changed."""
        now = int(self._clock())
        actions = {
            event.gpu_uuid: self._recovery_action(event.gpu_uuid)
            for event in events
            if event.kind is HealthEventKind.XID
        }
        changed = False
        with self._changed:
            for event in events:
                if self._health.apply(event, now, actions.get(event.gpu_uuid)):
                    changed = True
                    fault = self._health.faults.get(event.gpu_uuid)
                    if fault is None:
                        log.warning("GPU %s is healthy again", event.gpu_uuid)
                    else:
                        log.error("GPU %s is unhealthy: %s", event.gpu_uuid, fault.message)
                else:
                    log.info("health event ignored (no change): %s", event)
            if changed:
                self._version += 1
                self._changed.notify_all()
            faults = self._health.faults
        if changed and self._on_change is not None:
            self._on_change(faults)
        return changed

    def poll(self) -> bool:
        """Read every GPU's recovery action once; True if any GPU's health changed."""
        if self._source is None:
            return False
        now = int(self._clock())
        lost: list[HealthEvent] = []
        changed = False
        for uuid in self._uuids:
            try:
                action = self._source.gpu_recovery_action(uuid)
            except NvmlError as exc:
                if exc.code == codes.ERROR_GPU_IS_LOST:
                    lost.append(HealthEvent(gpu_uuid=uuid, kind=HealthEventKind.GPU_LOST))
                elif uuid not in self._unreadable:
                    self._unreadable.add(uuid)
                    log.warning("cannot read the recovery action of GPU %s: %s", uuid, exc)
                continue
            self._unreadable.discard(uuid)
            if action is None:
                continue
            with self._changed:
                if self._health.recovery_action_seen(uuid, action, now):
                    changed = True
                    fault = self._health.faults.get(uuid)
                    if fault is None:
                        log.warning("GPU %s recovered (recovery action none): healthy again", uuid)
                    else:
                        log.error("GPU %s is unhealthy: %s", uuid, fault.message)
        if changed:
            with self._changed:
                self._version += 1
                self._changed.notify_all()
                faults = self._health.faults
            if self._on_change is not None:
                self._on_change(faults)
        if lost:
            changed = self.apply(lost) or changed
        return changed

    def _recovery_action(self, uuid: str) -> int | None:
        """The GPU's recovery action now; None when it cannot be read (then the Xid rules
        of drivers without one apply)."""
        if self._source is None:
            return None
        try:
            return self._source.gpu_recovery_action(uuid)
        except NvmlError as exc:
            log.warning("cannot read the recovery action of GPU %s: %s", uuid, exc)
            return None

    def run(self, stop: threading.Event) -> None:
        """Watch events until `stop` is set (the body of the monitor thread).

        Without a source (a backend that has no events) there is nothing to do.
        """
        failures = 0
        while self._source is not None and not stop.is_set():
            try:
                event_set = self._source.health_events(self._uuids)
            except NvmlError as exc:
                failures += 1
                log.error("cannot watch GPU health events: %s", exc)
                stop.wait(backoff_delay(failures))
                continue
            self._set_monitored(getattr(event_set, "uuids", self._uuids))
            try:
                failures = self._watch(event_set, stop, failures)
            finally:
                event_set.close()
            if not stop.is_set():
                stop.wait(backoff_delay(failures))

    def _watch(self, event_set: HealthEventSet, stop: threading.Event, failures: int) -> int:
        next_poll = time.monotonic()
        while not stop.is_set():
            if time.monotonic() >= next_poll:
                self.poll()
                next_poll = time.monotonic() + self._poll_interval
            try:
                events = event_set.wait(min(WAIT_SECONDS, self._poll_interval))
            except NvmlError as exc:
                log.error("waiting for GPU health events failed: %s", exc)
                return failures + 1
            if events:
                self.apply(events)
        return 0

    def _set_monitored(self, uuids: Sequence[str]) -> None:
        with self._changed:
            monitored = frozenset(uuids)
            if monitored != self._monitored:
                self._monitored = monitored
                self._version += 1
                self._changed.notify_all()
