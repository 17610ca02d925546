"""One claim is handled by one call at a time, across threads and plugin instances.

A kubelet that retries a Prepare while its first call still runs (its 45 s
deadline passed during a slow MIG creation) must wait for that call, not
roll the claim back under it; during a rolling upgrade the retry may even
reach the other plugin instance. So each claim's Prepare or Unprepare holds
the claim's lock: a thread lock per claim UID (forgotten when unused), plus
an `flock` on one of `STRIPES` lock files in `<plugin data dir>/locks/`
chosen by the UID's hash. Stripes instead of a file per claim: lock files
are never deleted (deleting one races a process that is about to lock it),
so their number must be bounded; with 1024 stripes two of a call's claims
share one (and wait for each other) rarely.

`try_hold` is for start-up recovery: a half-prepared claim whose lock
another instance holds is in flight there, not left by a crash, and must
not be rolled back.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Final

from dra_driver.errors import PluginError
from dra_driver.files.flock import file_lock

STRIPES: Final = 1024
DEFAULT_TIMEOUT_S: Final = 40.0
"""Inside the kubelet's 45 s per call: a retry that waits longer has been given up on."""


class ClaimLocks:
    """Per-claim locks; `directory` None: this process only (tests of one driver)."""

    def __init__(self, directory: Path | None, *, timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
        self._directory = directory
        self._timeout_s = timeout_s
        self._guard = threading.Lock()
        self._locks: dict[str, tuple[threading.Lock, int]] = {}

    @contextmanager
    def hold(self, uid: str) -> Iterator[None]:
        """Hold the claim's lock; `PluginError` after `timeout_s` of waiting."""
        with self._thread_lock(uid) as lock:
            if not lock.acquire(timeout=self._timeout_s):
                raise self._busy(uid)
            try:
                if self._directory is None:
                    yield
                    return
                with file_lock(
                    self._stripe(uid),
                    timeout_s=self._timeout_s,
                    error=PluginError,
                    timeout_message=f"claim {uid[:256]}: another plugin instance has been "
                    f"working on it for {self._timeout_s:g} s; retry",
                ):
                    yield
            finally:
                lock.release()

    @contextmanager
    def try_hold(self, uid: str) -> Iterator[bool]:
        """Hold the claim's lock if nobody does; yields whether it is held."""
        with self._thread_lock(uid) as lock:
            if not lock.acquire(blocking=False):
                yield False
                return
            try:
                if self._directory is None:
                    yield True
                    return
                fd = os.open(self._stripe(uid), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
                try:
                    try:
                        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    except BlockingIOError:
                        yield False
                        return
                    yield True
                finally:
                    os.close(fd)  # releases the flock
            finally:
                lock.release()

    @contextmanager
    def _thread_lock(self, uid: str) -> Iterator[threading.Lock]:
        with self._guard:
            lock, users = self._locks.get(uid, (threading.Lock(), 0))
            self._locks[uid] = (lock, users + 1)
        try:
            yield lock
        finally:
            with self._guard:
                lock, users = self._locks[uid]
                if users == 1:
                    del self._locks[uid]
                else:
                    self._locks[uid] = (lock, users - 1)

    def _stripe(self, uid: str) -> Path:
        assert self._directory is not None
        self._directory.mkdir(parents=True, exist_ok=True)
        digest = hashlib.sha256(uid.encode(errors="replace")).digest()
        return self._directory / f"claim-{int.from_bytes(digest[:4], 'big') % STRIPES:04d}.lock"

    def _busy(self, uid: str) -> PluginError:
        return PluginError(
            f"claim {uid[:256]}: another call has been working on it for "
            f"{self._timeout_s:g} s; retry"
        )
