"""Watches the GPUs' NVML health events and keeps the node's health current.

One background thread waits on the backend's event set (`nvmlEventSetWait_v2`
on real GPUs, injected events on a simulated node) and feeds every event to
the pure rules of `dra_driver.node.health`. When a GPU's health changes, it calls
`on_change` (the plugin republishes its ResourceSlices with the new taints)
and wakes the kubelet's health streams waiting in `wait_for_change`.

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
from dra_driver.hardware.nvml.interface import HealthEvent, HealthEventSet, HealthEventSource
from dra_driver.node.health import Fault, HealthPolicy, NodeHealth

log = logging.getLogger(__name__)

WAIT_SECONDS = 1.0
"""How long one wait on the event set blocks; bounds the reaction time to `stop`."""


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
    ) -> None:
        self._source = source
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
        changed = False
        with self._changed:
            for event in events:
                if self._health.apply(event, now):
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
        while not stop.is_set():
            try:
                events = event_set.wait(WAIT_SECONDS)
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
