"""One owner per node: which plugin instances may serve a data directory and a CDI directory.

Two plugin instances that do not know of each other must never serve one
node: the second would roll back the first one's half-done claims, delete
its CDI specs as orphans and hand out devices it still holds. Two instances
that *do* know of each other are normal during a rolling upgrade (both run
with a pod UID, `--pod-uid`; they share the data directory and its state,
and every call loads that state under its lock). So an instance, before it
touches anything:

1. takes `<data dir>/plugin.lock`: *shared* when it is a rolling-upgrade
   peer (started with a pod UID), *exclusive* otherwise. Peers coexist; an
   instance without a pod UID excludes, and is excluded by, any other;
2. takes `<CDI dir>/.<driver>.owner`, shared, and checks the owner written
   in it: the first holder writes its owner (`cdi_store.owner_of_data_dir`:
   driver name and data directory) while it holds the lock exclusively, and
   a later instance joins only if that owner is its own. A plugin of another
   installation (another kubelet root, so another data directory) pointed
   at the same CDI directory is refused, even with a pod UID.

An instance that cannot get in waits up to `wait_s` (an old instance may be
finishing its SIGTERM) and then refuses to start with an error that names
the other side. Locks are `flock(2)`s, released by the kernel when a
process dies, so a crashed instance never blocks the next. No library does
this for Python; it is built on the same `fcntl.flock` as
`dra_driver.files.flock`.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Final

from dra_driver.errors import PluginError

log = logging.getLogger(__name__)

DATA_DIR_LOCK: Final = "plugin.lock"
DEFAULT_WAIT_S: Final = 60.0
_POLL_S: Final = 0.2
_OWNER_BYTES: Final = 4096


def cdi_owner_lock(cdi_root: Path, driver_name: str) -> Path:
    """`<CDI dir>/.<driver>.owner`: hidden, so CDI runtimes (which read *.yaml, *.json) skip it."""
    return cdi_root / f".{driver_name}.owner"


@contextlib.contextmanager
def own_node(
    *,
    data_dir: Path,
    cdi_root: Path,
    driver_name: str,
    owner: str,
    rolling_peer: bool,
    stop: threading.Event | None = None,
    wait_s: float = DEFAULT_WAIT_S,
) -> Iterator[bool]:
    """Hold this instance's share of the node for the `with` block (see the module docstring).

    Yields True once held; False if `stop` was set while waiting. Raises
    `PluginError` when another instance keeps the node for `wait_s`.
    """
    deadline = time.monotonic() + wait_s
    with contextlib.ExitStack() as held:
        data_fd = held.enter_context(_opened(data_dir / DATA_DIR_LOCK))
        mode = fcntl.LOCK_SH if rolling_peer else fcntl.LOCK_EX
        if not _acquire(
            data_fd, mode, deadline, stop, lambda: _data_dir_waiting(data_dir, rolling_peer)
        ):
            if stop is not None and stop.is_set():
                yield False
                return
            raise PluginError(_data_dir_refusal(data_dir, rolling_peer, wait_s))
        cdi_fd = held.enter_context(_opened(cdi_owner_lock(cdi_root, driver_name)))
        while True:
            other = _join_cdi_owner(cdi_fd, owner)
            if other is None:
                break
            if stop is not None and stop.wait(_POLL_S):
                yield False
                return
            if stop is None:
                time.sleep(_POLL_S)
            if time.monotonic() > deadline:
                raise PluginError(
                    f"refusing to start: the CDI directory {cdi_root} is in use by another "
                    f"dra-gpu installation ({other}); this one is {owner}. Give each kubelet "
                    "root its own --cdi-root, or stop the other plugin"
                )
        log.info(
            "serving %s and %s as %s",
            data_dir,
            cdi_root,
            "a rolling-upgrade peer" if rolling_peer else "the only plugin instance",
        )
        yield True


@contextlib.contextmanager
def _opened(path: Path) -> Iterator[int]:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    except OSError as exc:
        raise PluginError(f"{path}: cannot open the lock file: {exc.strerror or exc}") from exc
    try:
        yield fd
    finally:
        os.close(fd)  # releases its flock


def _acquire(
    fd: int,
    mode: int,
    deadline: float,
    stop: threading.Event | None,
    on_wait: Callable[[], None],
) -> bool:
    waited = False
    while True:
        try:
            fcntl.flock(fd, mode | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            pass
        if not waited:
            on_wait()
        waited = True
        if time.monotonic() > deadline:
            return False
        if stop is not None:
            if stop.wait(_POLL_S):
                return False
        else:
            time.sleep(_POLL_S)


def _join_cdi_owner(fd: int, owner: str) -> str | None:
    """Hold the CDI owner lock shared as `owner`'s; None when joined, else the other owner."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        pass
    else:  # nobody holds it: it is ours to name
        os.ftruncate(fd, 0)
        os.pwrite(fd, owner.encode(), 0)
        os.fsync(fd)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)  # converting may let another in first
    except BlockingIOError:
        return "an instance naming itself right now"
    written = os.pread(fd, _OWNER_BYTES, 0).decode(errors="replace")
    if written == owner:
        return None
    fcntl.flock(fd, fcntl.LOCK_UN)
    return written or "an instance that named no owner"


def _data_dir_waiting(data_dir: Path, rolling_peer: bool) -> None:
    log.warning(
        "another plugin instance serves %s%s; waiting for it to exit",
        data_dir,
        "" if rolling_peer else " (instances without --pod-uid serve a node alone)",
    )


def _data_dir_refusal(data_dir: Path, rolling_peer: bool, wait_s: float) -> str:
    if rolling_peer:
        why = (
            "an instance without a pod UID holds it alone (rolling-upgrade peers must all run "
            "with --pod-uid / POD_UID)"
        )
    else:
        why = (
            "another instance serves it, and without --pod-uid (POD_UID) this one is no "
            "rolling-upgrade peer of it"
        )
    return f"refusing to start after waiting {wait_s:g} s: {data_dir}: {why}"
