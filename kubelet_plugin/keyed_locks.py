"""A lock per key (a claim UID, a GPU UUID), for the threads of this process.

The plugin serializes work per claim (one kubelet call at a time per claim)
and per GPU (`gpu_locks`, which adds a file lock for other processes).
`KeyedLocks` is the one implementation of both: a key's lock is made on
first use and forgotten once nobody holds or waits for it, so a node that
sees a million claims over its life keeps no lock for any of them.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager


class KeyedLocks:
    """One `threading.Lock` per key, held through `hold`."""

    def __init__(self) -> None:
        self._guard = threading.Lock()
        self._locks: dict[str, tuple[threading.Lock, int]] = {}

    @contextmanager
    def hold(self, key: str, *, timeout: float | None = None) -> Iterator[None]:
        """Hold `key`'s lock; `TimeoutError` if it is not free within `timeout` seconds."""
        with self._guard:
            lock, users = self._locks.get(key, (threading.Lock(), 0))
            self._locks[key] = (lock, users + 1)
        try:
            if not lock.acquire(timeout=-1 if timeout is None else timeout):
                raise TimeoutError(f"{key}: lock not free within {timeout:g} s")
            try:
                yield
            finally:
                lock.release()
        finally:
            with self._guard:
                lock, users = self._locks[key]
                if users == 1:
                    del self._locks[key]
                else:
                    self._locks[key] = (lock, users - 1)

    def __len__(self) -> int:
        """How many keys have a lock now (held or waited for)."""
        with self._guard:
            return len(self._locks)
