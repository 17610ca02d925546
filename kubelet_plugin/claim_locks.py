"""One claim is handled by one call at a time, across threads and plugin instances.

A kubelet that retries a Prepare while its first call still runs (its 45 s
deadline passed during a slow MIG creation) must wait for that call, not
roll the claim back under it; during a rolling upgrade the retry may even
reach the other plugin instance. So each claim's Prepare or Unprepare holds
the claim's lock: a thread lock per claim UID (`keyed_locks`), plus
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
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Final

from dra_driver.errors import PluginError
from dra_driver.files.flock import file_lock
from kubelet_plugin.keyed_locks import KeyedLocks

STRIPES: Final = 1024
DEFAULT_TIMEOUT_S: Final = 40.0
"""Inside the kubelet's 45 s per call: a retry that waits longer has been given up on."""


class ClaimLocks:
    """Per-claim locks; `directory` None: this process only (tests of one driver)."""

    def __init__(self, directory: Path | None, *, timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
        self._directory = directory
        self._timeout_s = timeout_s
        self._threads = KeyedLocks()

    @contextmanager
    def hold(self, uid: str) -> Iterator[None]:
        """Hold the claim's lock; `PluginError` after `timeout_s` of waiting."""
        with ExitStack() as held:
            try:
                held.enter_context(self._threads.hold(uid, timeout=self._timeout_s))
            except TimeoutError:
                raise PluginError(
                    f"claim {uid[:256]}: another call has been working on it for "
                    f"{self._timeout_s:g} s; retry"
                ) from None
            if self._directory is not None:
                held.enter_context(
                    file_lock(
                        self._stripe(uid),
                        make_parent=True,
                        timeout_s=self._timeout_s,
                        error=PluginError,
                        timeout_message=f"claim {uid[:256]}: another plugin instance has been "
                        f"working on it for {self._timeout_s:g} s; retry",
                    )
                )
            yield

    @contextmanager
    def try_hold(self, uid: str) -> Iterator[bool]:
        """Hold the claim's lock if nobody does; yields whether it is held."""
        with ExitStack() as held:
            try:
                held.enter_context(self._threads.hold(uid, timeout=0))
            except TimeoutError:
                yield False
                return
            if self._directory is None:
                yield True
                return
            assert self._directory is not None
            self._directory.mkdir(parents=True, exist_ok=True)
            fd = os.open(self._stripe(uid), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            held.callback(os.close, fd)  # closing it releases the flock
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                yield False
                return
            yield True

    def _stripe(self, uid: str) -> Path:
        assert self._directory is not None
        digest = hashlib.sha256(uid.encode(errors="replace")).digest()
        return self._directory / f"claim-{int.from_bytes(digest[:4], 'big') % STRIPES:04d}.lock"
