"""Leader election on a coordination.k8s.io/v1 Lease, as client-go's leaderelection does.

Two controller replicas must never both write cliques and statuses: that is
the many-writers problem this design exists to avoid (computedomain.md §7.3).
The elector follows client-go (`tools/leaderelection`, `resourcelock.LeaseLock`)
so that it interoperates with any Kubernetes tooling reading the Lease:

- the Lease's `spec.holderIdentity`, `leaseDurationSeconds`, `acquireTime`,
  `renewTime` (MicroTime) and `leaseTransitions`, written with optimistic
  concurrency (a conflict is a failed attempt, never an error);
- another holder's lease counts as valid until `leaseDurationSeconds` have
  passed on *our* clock since we last saw the record change (no trust in
  other machines' clocks);
- the leader renews every `retry_period`, and stops leading as soon as it
  has not renewed for `renew_deadline` (< lease duration, so it stops before
  anyone else may take over); `is_leader` turns False at that very moment,
  and the controller checks it before every write;
- on a clean stop it releases the Lease (`ReleaseOnCancel`: empty holder,
  duration 1 s) so the other replica takes over at once.

NVIDIA's defaults: 15 s / 10 s / 2 s, identity `<pod>-<uuid>`
(computedomain.md §2.5).
"""

from __future__ import annotations

import logging
import math
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final

from dra_driver.errors import ClusterError, ConfigError, NotFoundError
from dra_driver.kube.object_store import LEASE, ObjectStore

__all__ = ["DEFAULT_LEASE_NAME", "LeaderConfig", "LeaderElector", "default_identity"]

log = logging.getLogger(__name__)

DEFAULT_LEASE_NAME: Final = "dra-gpu-compute-domain-controller"
_JITTER: Final = 1.2  # client-go's JitterFactor: renew deadline must exceed retry period * 1.2


def default_identity() -> str:
    """`<pod name or hostname>-<uuid>`, unique per process (client-go's convention)."""
    return f"{os.environ.get('POD_NAME') or socket.gethostname()}-{uuid.uuid4()}"


def _micro_time(moment: float) -> str:
    return datetime.fromtimestamp(moment, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass(frozen=True, slots=True)
class LeaderConfig:
    namespace: str
    identity: str
    name: str = DEFAULT_LEASE_NAME
    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0
    release_on_cancel: bool = True

    def check(self) -> None:
        """client-go's rules (NewLeaderElector), as ConfigError naming the flags."""
        if not self.identity:
            raise ConfigError("leader election: the identity is empty")
        if self.lease_duration <= self.renew_deadline:
            raise ConfigError(
                f"--leader-elect-lease-duration {self.lease_duration:g} must be greater than "
                f"--leader-elect-renew-deadline {self.renew_deadline:g}"
            )
        if self.renew_deadline <= _JITTER * self.retry_period:
            raise ConfigError(
                f"--leader-elect-renew-deadline {self.renew_deadline:g} must be greater than "
                f"{_JITTER:g} x --leader-elect-retry-period {self.retry_period:g}"
            )
        if self.retry_period <= 0:
            raise ConfigError(f"--leader-elect-retry-period {self.retry_period:g} must be positive")


class LeaderElector:
    """Acquire, hold and release one Lease; `is_leader()` says whether we may write now."""

    def __init__(
        self,
        store: ObjectStore,
        config: LeaderConfig,
        *,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        config.check()
        self._store = store
        self.config = config
        self._clock = clock
        self._wall = wall_clock
        self._lock = threading.Lock()
        self._observed: dict[str, Any] | None = None
        self._observed_at = 0.0
        self._leading = False
        self._renewed_at = 0.0
        self._stopped = threading.Event()
        self._stop: threading.Event | None = None  # run()'s, so a stop ends writing at once
        self.transitions_seen = 0  # how often this elector became leader

    # -- state ---------------------------------------------------------------------
    def is_leader(self) -> bool:
        """Whether we hold the Lease and renewed it within the renew deadline."""
        with self._lock:
            return (
                self._leading
                and not self._stopped.is_set()
                and not (self._stop is not None and self._stop.is_set())
                and self._clock() - self._renewed_at < self.config.renew_deadline
            )

    @property
    def holder(self) -> str:
        """The holder we last observed ("" when none)."""
        with self._lock:
            return str((self._observed or {}).get("holderIdentity") or "")

    # -- the loop ------------------------------------------------------------------
    def run(
        self,
        stop: threading.Event,
        *,
        on_started: Callable[[], None] | None = None,
        on_stopped: Callable[[], None] | None = None,
    ) -> bool:
        """Acquire the Lease, then renew it until `stop` is set or renewal fails.

        Returns True when it ended because `stop` was set (the Lease released
        if `release_on_cancel`), False when leadership was lost (the caller
        should exit, as client-go callers do, and start afresh).
        """
        cfg = self.config
        self._stop = stop
        while not stop.is_set():
            if self._try_acquire_or_renew():
                break
            stop.wait(cfg.retry_period)
        else:
            return True
        with self._lock:
            self._leading = True
            self._renewed_at = self._clock()
            self.transitions_seen += 1
        log.info("%s: acquired Lease %s/%s", cfg.identity, cfg.namespace, cfg.name)
        if on_started is not None:
            on_started()
        lost = False
        while not stop.wait(cfg.retry_period):
            if self._try_acquire_or_renew():
                with self._lock:
                    self._renewed_at = self._clock()
                continue
            with self._lock:
                overdue = self._clock() - self._renewed_at >= cfg.renew_deadline
            if overdue:
                lost = True
                break
        with self._lock:
            self._leading = False
        if lost:
            log.error(
                "%s: could not renew Lease %s/%s within %gs: no longer the leader",
                cfg.identity,
                cfg.namespace,
                cfg.name,
                cfg.renew_deadline,
            )
        else:
            self._stopped.set()
            if cfg.release_on_cancel:
                self._release()
        if on_stopped is not None:
            on_stopped()
        return not lost

    # -- one attempt ---------------------------------------------------------------
    def _try_acquire_or_renew(self) -> bool:
        cfg = self.config
        now_wall = _micro_time(self._wall())
        desired: dict[str, Any] = {
            "holderIdentity": cfg.identity,
            "leaseDurationSeconds": max(1, math.ceil(cfg.lease_duration)),
            "acquireTime": now_wall,
            "renewTime": now_wall,
            "leaseTransitions": 0,
        }
        try:
            lease = self._store.get_object(LEASE, cfg.namespace, cfg.name)
        except NotFoundError:
            body = {
                "apiVersion": LEASE.api_version,
                "kind": LEASE.kind,
                "metadata": {"name": cfg.name, "namespace": cfg.namespace},
                "spec": desired,
            }
            try:
                self._store.create_object(LEASE, body)
            except ClusterError as exc:
                log.debug("%s: creating the Lease failed: %s", cfg.identity, exc)
                return False
            self._observe(desired, changed=True)
            return True
        except ClusterError as exc:
            log.warning("%s: reading Lease %s/%s: %s", cfg.identity, cfg.namespace, cfg.name, exc)
            return False
        spec = dict(lease.get("spec") or {})
        self._observe(spec, changed=spec != self._observed)
        holder = str(spec.get("holderIdentity") or "")
        duration = spec.get("leaseDurationSeconds")
        seconds = float(duration) if isinstance(duration, int | float) else cfg.lease_duration
        with self._lock:
            valid = self._clock() < self._observed_at + seconds
        if holder and holder != cfg.identity and valid:
            return False
        transitions = spec.get("leaseTransitions")
        transitions = transitions if isinstance(transitions, int) else 0
        if holder == cfg.identity:
            desired["acquireTime"] = spec.get("acquireTime") or now_wall
            desired["leaseTransitions"] = transitions
        else:
            desired["leaseTransitions"] = transitions + 1
        lease["spec"] = desired
        try:
            self._store.update_object(LEASE, lease)
        except ClusterError as exc:
            log.debug("%s: updating the Lease failed: %s", cfg.identity, exc)
            return False
        self._observe(desired, changed=True)
        return True

    def _observe(self, spec: dict[str, Any], *, changed: bool) -> None:
        if not changed:
            return
        with self._lock:
            self._observed = dict(spec)
            self._observed_at = self._clock()

    def _release(self) -> None:
        """ReleaseOnCancel: an empty holder and a 1 s duration, if we still hold it."""
        cfg = self.config
        try:
            lease = self._store.get_object(LEASE, cfg.namespace, cfg.name)
            spec = dict(lease.get("spec") or {})
            if spec.get("holderIdentity") != cfg.identity:
                return
            now_wall = _micro_time(self._wall())
            spec.update(
                holderIdentity="",
                leaseDurationSeconds=1,
                acquireTime=now_wall,
                renewTime=now_wall,
            )
            lease["spec"] = spec
            self._store.update_object(LEASE, lease)
            log.info("%s: released Lease %s/%s", cfg.identity, cfg.namespace, cfg.name)
        except ClusterError as exc:
            log.warning("%s: releasing the Lease failed: %s", cfg.identity, exc)
