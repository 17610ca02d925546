"""Where the simulated hardware's state lives, and who may touch it when.

A plugin, a restarted plugin and a `mig status` command must all see the same
"hardware", exactly as processes on a real node share one GPU. `StateStore`
gives them that: every operation runs as a transaction under a thread lock
and, when a state file is used, an exclusive `flock` on a sibling `.lock`
file; the state is re-read if another process changed it, a mutation works on
a copy, and only a mutation that succeeds is written back atomically. Without
a state file the state simply lives in memory.
"""

from __future__ import annotations

import contextlib
import copy
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

from dra_driver.errors import ConfigError
from dra_driver.files.atomic import atomic_write
from dra_driver.files.flock import file_lock
from dra_driver.hardware.simulated.state import NodeState, decode, encode

# A change holds the lock for one read-modify-write; a minute means a stuck process.
LOCK_TIMEOUT_S = 60.0


class StateStore:
    """The node state, in memory and optionally in `path` (shared by processes)."""

    def __init__(
        self, path: Path | None, on_change: Callable[[NodeState], None] | None = None
    ) -> None:
        self.path = Path(path) if path is not None else None
        self._on_change = on_change  # called under the lock whenever the state changes
        self._thread_lock = threading.Lock()
        self._state: NodeState | None = None
        self._bytes: bytes | None = None  # encoding of _state as last read or written

    def open(self, create: Callable[[], NodeState], check: Callable[[NodeState], None]) -> None:
        """Load the state file (then `check` it) or, if there is none, store `create()`."""
        if self.path is not None:
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise ConfigError(
                    f"simulated hardware state {self.path}: cannot create its directory: "
                    f"{exc.strerror or exc}"
                ) from exc
        with self._thread_lock, self._file_lock():
            if self.path is not None and self.path.exists():
                self._reload(check)
            else:
                self._commit(create())

    @contextlib.contextmanager
    def read(self) -> Iterator[NodeState]:
        """The current state, to read only."""
        with self._thread_lock, self._file_lock():
            self._reload()
            assert self._state is not None
            yield self._state

    @contextlib.contextmanager
    def mutate(self) -> Iterator[NodeState]:
        """A copy of the state to change; committed only if the block does not raise."""
        with self._thread_lock, self._file_lock():
            self._reload()
            work = copy.deepcopy(self._state)
            assert work is not None
            yield work
            self._commit(work)

    def _commit(self, state: NodeState) -> None:
        data = encode(state)
        if data == self._bytes:
            return
        if self.path is not None:
            try:
                atomic_write(self.path, data)
            except OSError as exc:
                raise ConfigError(
                    f"simulated hardware state {self.path}: cannot write: {exc.strerror or exc}"
                ) from exc
        self._state, self._bytes = state, data
        if self._on_change is not None:
            self._on_change(state)

    def _reload(self, check: Callable[[NodeState], None] | None = None) -> bool:
        if self.path is None:
            return False
        try:
            data = self.path.read_bytes()
        except OSError as exc:
            raise ConfigError(
                f"simulated hardware state {self.path}: cannot read: {exc.strerror or exc}"
            ) from exc
        if data == self._bytes:
            return False
        state = decode(data, str(self.path))
        if check is not None:
            check(state)
        self._state, self._bytes = state, data
        if self._on_change is not None:
            self._on_change(self._state)
        return True

    @contextlib.contextmanager
    def _file_lock(self) -> Iterator[None]:
        if self.path is None:
            yield
            return
        lock_path = self.path.with_name(self.path.name + ".lock")
        with file_lock(
            lock_path,
            timeout_s=LOCK_TIMEOUT_S,
            error=ConfigError,
            what=f"simulated hardware {self.path}",
        ):
            yield
