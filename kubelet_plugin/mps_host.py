"""The MPS host: the node component that runs MPS control daemons outside the kubelet plugin.

Why a separate component. MPS clients (the pods' CUDA processes) live only
as long as their control daemon. Started by the kubelet plugin, a daemon is
in the plugin pod's cgroup, so every plugin upgrade (a new pod), and any
restart of the plugin container, kills it and every client with it. The
reference (upstream-facts §6.3) weighs three ways out; dra-gpu takes the
third:

1. *A workload per daemon through the API* (NVIDIA's per-claim Deployment,
   keyed per device instead). Survives upgrades, but every first MPS
   Prepare waits for an API round trip, a scheduling decision and possibly
   an image pull (seconds to minutes, inside the kubelet's 45 s deadline);
   it needs RBAC on pods or deployments and an SCC on OpenShift (NVIDIA
   #1212), fails while the API server is unreachable, and on a simulated
   node nothing would run the pod, so the demo and the tests could not take
   the production path.
2. *A host systemd transient unit* (`nsenter -t 1 ... systemd-run`).
   Survives everything but needs the host's systemd, hostPID and a shell
   escape from the pod model; nothing to test it against without systemd.
3. *A long-lived per-node "MPS host" DaemonSet with `updateStrategy:
   OnDelete`* that holds the daemons as children and takes orders from
   files the plugin writes (this module). Prepare stays local and fast (a
   file write and a wake-up, no API), the plugin DaemonSet rolls freely
   (surge upgrades included: both plugin instances write the same intent
   files under the same per-GPU locks), and the simulated node runs the very
   same component as a process. Its price: one more small DaemonSet, and an
   upgrade of the MPS host itself still restarts the daemons, so it is an
   explicit, drained operation (docs/upgrade.md). It changes rarely: it is
   this loop and `mps_daemons`.

The protocol (intent files, status files, the host lock and the wake-up
FIFO) is in `dra_driver.claims.mps_intent`. The host is stateless: each pass
reads every intent and makes the daemons match it, so a restarted host
adopts running daemons (pid file plus start time) and restarts dead ones,
and a daemon that dies is restarted on the next pass while claims use it.
A daemon is stopped only when its intent lists no claim; the host never
deletes an intent file. One host runs per node: it holds an `flock` on
`host.lock` for its lifetime (a second one waits), which is also how the
plugin tells that a host is there. On SIGTERM the host exits and leaves the
daemons running.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import select
import stat
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from dra_driver.claims.mps import DaemonPaths, control_commands
from dra_driver.claims.mps_intent import (
    HOST_LOCK_FILE,
    HOST_WAKE_FIFO,
    INTENT_SUFFIX,
    MAX_FILE_BYTES,
    STATUS_SUFFIX,
    DaemonState,
    decode_intent,
    decode_status,
    device_uuid_of,
    encode_status,
    intent_file_name,
    status_file_name,
)
from dra_driver.claims.mps_intent_records import DaemonIntent, DaemonStatus
from dra_driver.errors import MpsError, PluginError
from dra_driver.files import atomic
from dra_driver.files.flock import file_lock
from kubelet_plugin.mps_daemons import DaemonProcess, MpsDaemons

log = logging.getLogger(__name__)

PASS_INTERVAL_S: Final = 1.0
"""Longest time between two passes; a wake-up from the plugin starts one at once."""
RETRY_FAILED_S: Final = 10.0
"""How long a failed intent waits before the host tries it again (unless it changes)."""


@dataclass
class _Failure:
    token: str
    at: float


@dataclass
class MpsHost:
    """Makes the daemons under `daemons.root` match the intents there, one pass at a time."""

    daemons: MpsDaemons
    clock: Callable[[], float] = field(default=time.monotonic, repr=False)
    _failures: dict[str, _Failure] = field(default_factory=dict, init=False, repr=False)

    @property
    def root(self) -> Path:
        return self.daemons.root

    def reconcile(self) -> dict[str, DaemonStatus]:
        """One pass over every intent; returns the status written (or kept) per device."""
        statuses: dict[str, DaemonStatus] = {}
        intents, status_only = self._listing()
        for uuid in sorted(intents):
            status = self.reconcile_device(uuid)
            if status is not None:
                statuses[uuid] = status
        for uuid in sorted(status_only):
            self._remove_stale_status(uuid)
        return statuses

    def reconcile_device(self, uuid: str) -> DaemonStatus | None:
        """Make the daemon of `uuid` match its intent; None if it has no intent file."""
        intent_path = self.root / intent_file_name(uuid)
        try:
            intent = decode_intent(_read_bounded(intent_path), source=str(intent_path))
        except FileNotFoundError:
            return None
        except OSError as exc:
            return self._write(_failed(uuid, "", f"{intent_path}: cannot read: {exc}"), None)
        except MpsError as exc:
            return self._write(_failed(uuid, "", str(exc)), self._read_status(uuid))
        if intent.device_uuid != uuid:
            error = f"{intent_path}: names device {intent.device_uuid}, expected {uuid}"
            return self._write(_failed(uuid, intent.token, error), self._read_status(uuid))
        current = self._read_status(uuid)
        failure = self._failures.get(uuid)
        if (
            current is not None
            and current.state is DaemonState.FAILED
            and failure is not None
            and failure.token == intent.token
            and self._now() - failure.at < RETRY_FAILED_S
        ):
            return current  # do not hammer a binary that just failed
        paths = self.daemons.paths(uuid)
        try:
            if intent.wanted:
                status = self._run(intent, paths, current)
            else:
                status = self._stop(intent, paths)
        except MpsError as exc:
            log.error("MPS control daemon for %s: %s", uuid, exc)
            self._failures[uuid] = _Failure(intent.token, self._now())
            return self._write(_failed(uuid, intent.token, str(exc)), current)
        self._failures.pop(uuid, None)
        return self._write(status, current)

    # -- one device ---------------------------------------------------------------

    def _run(
        self, intent: DaemonIntent, paths: DaemonPaths, current: DaemonStatus | None
    ) -> DaemonStatus:
        running = self.daemons.find(paths)
        applied = current if _describes(current, running) else None
        if running is None:
            if current is not None and current.state is DaemonState.RUNNING:
                log.warning(
                    "MPS control daemon pid %s for %s is gone while %d claims use it: "
                    "restarting it (its clients must reconnect)",
                    current.pid,
                    intent.device_uuid,
                    len(intent.claims),
                )
            running = self.daemons.start(paths, multi_user=intent.multi_user)
        elif applied is None:
            log.info("adopted MPS control daemon pid %d for %s", running.pid, intent.device_uuid)
        if applied is not None and applied.multi_user != intent.multi_user:
            mode = "multi-user" if applied.multi_user else "single-user"
            raise MpsError(
                f"the daemon for {intent.device_uuid} runs in {mode} mode; it must be stopped "
                "(all its claims unprepared) before it can change mode"
            )
        if applied is None or applied.limits != intent.limits:
            self.daemons.send(paths, control_commands(intent.limits, intent.device_uuid))
        return DaemonStatus(
            device_uuid=intent.device_uuid,
            token=intent.token,
            state=DaemonState.RUNNING,
            pid=running.pid,
            start_ticks=running.start_ticks,
            multi_user=intent.multi_user,
            active_thread_percentage=intent.active_thread_percentage,
            pinned_memory_mib=intent.pinned_memory_mib,
        )

    def _stop(self, intent: DaemonIntent, paths: DaemonPaths) -> DaemonStatus:
        if paths.root.exists():
            self.daemons.stop(paths)  # quit, SIGKILL if it hangs; unmounts shm, removes <uuid>/
        return DaemonStatus(
            device_uuid=intent.device_uuid, token=intent.token, state=DaemonState.STOPPED
        )

    # -- files --------------------------------------------------------------------

    def _listing(self) -> tuple[set[str], set[str]]:
        """(UUIDs with an intent file, UUIDs with only a status file)."""
        try:
            names = os.listdir(self.root)
        except FileNotFoundError:
            return set(), set()
        intents = {
            uuid
            for name in names
            if name.endswith(INTENT_SUFFIX) and (uuid := device_uuid_of(name))
        }
        statuses = {
            uuid
            for name in names
            if name.endswith(STATUS_SUFFIX) and (uuid := device_uuid_of(name))
        }
        return intents, statuses - intents

    def _read_status(self, uuid: str) -> DaemonStatus | None:
        path = self.root / status_file_name(uuid)
        try:
            return decode_status(_read_bounded(path), source=str(path))
        except (OSError, MpsError):
            return None  # rewritten by this pass

    def _write(self, status: DaemonStatus, current: DaemonStatus | None) -> DaemonStatus:
        if status != current:
            path = self.root / status_file_name(status.device_uuid)
            try:
                atomic.atomic_write(path, encode_status(status), mode=0o644)
            except OSError as exc:
                log.error("cannot write %s: %s", path, exc)
        return status

    def _remove_stale_status(self, uuid: str) -> None:
        """A status without its intent: the plugin removed the intent of a stopped daemon."""
        status = self._read_status(uuid)
        if status is None or status.state is not DaemonState.RUNNING:
            with contextlib.suppress(OSError):
                atomic.remove_file(self.root / status_file_name(uuid))

    def _now(self) -> float:
        return self.clock()


def _describes(status: DaemonStatus | None, running: DaemonProcess | None) -> bool:
    """Whether `status` was written for the daemon process `running` (and it runs)."""
    return (
        status is not None
        and running is not None
        and status.state is DaemonState.RUNNING
        and status.pid == running.pid
        and status.start_ticks == running.start_ticks
    )


def _failed(uuid: str, token: str, error: str) -> DaemonStatus:
    return DaemonStatus(
        device_uuid=uuid, token=token, state=DaemonState.FAILED, error=" ".join(error.split())
    )


def _read_bounded(path: Path) -> bytes:
    with path.open("rb") as f:
        return f.read(MAX_FILE_BYTES + 1)


# -- the daemon loop ------------------------------------------------------------------


def serve(
    host: MpsHost,
    stop: threading.Event,
    *,
    interval: float = PASS_INTERVAL_S,
    on_ready: Callable[[], None] | None = None,
) -> None:
    """Run passes until `stop` is set: at once when woken through the FIFO, else every
    `interval` seconds. Holds `host.lock` throughout (a second host waits for it)."""
    root = host.root
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise PluginError(f"{root}: cannot create the MPS directory: {exc}") from exc
    lock = root / HOST_LOCK_FILE
    with file_lock(
        lock,
        timeout_s=None,
        error=PluginError,
        stop=stop,
        on_wait=lambda: log.warning("another MPS host holds %s; waiting for it to exit", lock),
        poll_s=0.2,
    ) as held:
        if not held:
            return
        with _wake_fifo(root / HOST_WAKE_FIFO) as fifo:
            log.info("MPS host serving %s", root)
            if on_ready is not None:
                on_ready()
            while not stop.is_set():
                try:
                    host.reconcile()
                except OSError as exc:  # a transient file-system error must not end the host
                    log.error("MPS host pass failed: %s", exc)
                _wait_for_wake(fifo, stop, interval)
    running = sum(1 for paths in host.daemons.daemon_dirs() if host.daemons.find(paths))
    log.info("MPS host stopped; %d MPS control daemons left running", running)


@contextlib.contextmanager
def _wake_fifo(path: Path) -> Iterator[int]:
    """Open (creating if needed) the wake-up FIFO for reading, non-blocking.

    Opened read-write so it never reports end-of-file when the last writer
    closes, and so writers find a reader (their non-blocking open would
    fail with ENXIO otherwise: that is how a writer knows no host runs).
    """
    try:
        info = path.lstat()
        if not stat.S_ISFIFO(info.st_mode):
            path.unlink()
            raise FileNotFoundError(path)
    except FileNotFoundError:
        with contextlib.suppress(FileExistsError):
            os.mkfifo(path, 0o600)
    fd = os.open(path, os.O_RDWR | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        yield fd
    finally:
        os.close(fd)


def _wait_for_wake(fifo: int, stop: threading.Event, interval: float) -> None:
    deadline = time.monotonic() + interval
    while not stop.is_set():
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return
        readable, _, _ = select.select([fifo], [], [], min(remaining, 0.2))
        if readable:
            with contextlib.suppress(BlockingIOError):
                while os.read(fifo, 4096):
                    pass
            return


def wake(root: Path) -> bool:
    """Wake the host serving `root`; False if none is reading its FIFO."""
    try:
        fd = os.open(root / HOST_WAKE_FIFO, os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno in (errno.ENXIO, errno.ENOENT):
            return False
        raise
    try:
        os.write(fd, b"w")
    except BlockingIOError:
        pass  # the FIFO is full of wake-ups already
    finally:
        os.close(fd)
    return True
