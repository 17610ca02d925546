"""One inter-process file lock with an explicit timeout (`flock(2)` on a lock file).

The checkpoint, the per-GPU locks, the one-plugin-per-node guard, the local
cluster store and the simulated hardware's state file all serialise
processes the same way: an exclusive `flock` on a sibling lock file. This is
the one implementation, modelled on NVIDIA's `pkg/flock`
(`Acquire(ctx, WithTimeout, WithPollPeriod)`): every caller says how long it
will wait (`timeout_s`, or None to wait until `stop` is set), the wait polls
a non-blocking `flock` so it can give up (after 1 ms, then doubling up to
`poll_s`), and the lock is released when the
`with` block ends. Each holder opens its own descriptor, so the lock also
excludes other threads of the same process. Failures raise the caller's
error class, so messages stay in the caller's layer of `dra_driver.errors`.
"""

from __future__ import annotations

import fcntl
import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Final

from dra_driver.errors import DraGpuError

POLL_S: Final = 0.02
"""The longest wait between two tries for a busy lock."""
FIRST_POLL_S: Final = 0.001
"""The first wait; each next one doubles, up to `poll_s`. Most locks are held for a
millisecond or two (a file write), so a fixed 20 ms step made every contended take cost
20 ms: a fifth of a Prepare's time when the plugin and its claim-status writer met."""


@contextmanager
def file_lock(
    path: Path,
    *,
    timeout_s: float | None,
    error: Callable[[str], DraGpuError],
    what: str | None = None,
    timeout_message: str | None = None,
    stop: threading.Event | None = None,
    on_wait: Callable[[], None] | None = None,
    poll_s: float = POLL_S,
    make_parent: bool = False,
) -> Iterator[bool]:
    """Hold an exclusive `flock` on `path` (created if missing) for the `with` block.

    Waits at most `timeout_s` seconds (None: no limit) and then raises
    `error(timeout_message)` (default: "<what>: still locked by another process
    after <t> s", `what` defaulting to the path). `on_wait` is called once if
    the lock is busy at the first try. With `stop`, the wait ends early when
    the event is set, and the block runs with `False` (lock not held);
    otherwise it runs with `True`. A lock file that cannot be opened raises
    `error` naming it. `make_parent` creates its directory when it is missing
    (only then: no `mkdir` per lock).
    """
    name = what or str(path)
    try:
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        except FileNotFoundError:
            if not make_parent:
                raise
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    except OSError as exc:
        raise error(f"{name}: cannot open lock file {path}: {exc.strerror or exc}") from exc
    try:
        acquired = acquire(
            fd,
            timeout_s=timeout_s,
            error=error,
            what=name,
            timeout_message=timeout_message,
            stop=stop,
            on_wait=on_wait,
            poll_s=poll_s,
        )
        if not acquired:
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)  # closing the descriptor also releases the lock


def acquire(
    fd: int,
    *,
    timeout_s: float | None,
    error: Callable[[str], DraGpuError],
    what: str,
    timeout_message: str | None = None,
    stop: threading.Event | None = None,
    on_wait: Callable[[], None] | None = None,
    poll_s: float = POLL_S,
) -> bool:
    """Take the exclusive `flock` of an open descriptor, waiting as `file_lock` does; False
    if `stop` was set first. For an owner that keeps its lock file open (the checkpoint)
    and excludes its own threads itself; release it with `fcntl.flock(fd, LOCK_UN)`."""
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    waited = False
    delay = min(FIRST_POLL_S, poll_s)
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            pass
        if not waited and on_wait is not None:
            on_wait()
        waited = True
        if deadline is not None and time.monotonic() >= deadline:
            raise error(
                timeout_message or f"{what}: still locked by another process after {timeout_s:g} s"
            ) from None
        if stop is not None:
            if stop.wait(delay):
                return False
        else:
            time.sleep(delay)
        delay = min(delay * 2, poll_s)
