"""Only one plugin instance of a node publishes its ResourceSlices at a time.

During a rolling upgrade two plugin instances serve one node. If both
published, and the new version's slices differed from the old one's (a new
attribute, another taint), each would overwrite the other after every
change it sees, bumping the pool's generation each time (upstream-facts §1.5).
So publishing needs the lease: an `flock` on `<plugin data dir>/publish.lock`,
taken without waiting and then held for the process's life. The old
instance holds it until it exits; the new one serves Prepare and Unprepare
at once but publishes only once the lease is its own (asked again every
second, `controller.publisher.LEASE_RETRY_SECONDS`), so the node's slices
switch to the new version exactly when the old instance is gone. A
crashed holder's lock is released by the kernel.
"""

from __future__ import annotations

import fcntl
import logging
import os
import threading
from pathlib import Path
from typing import Final

from dra_driver.errors import PluginError

log = logging.getLogger(__name__)

PUBLISH_LOCK_FILE: Final = "publish.lock"


class PublishLease:
    """The publishing lease of one plugin data directory (see the module docstring)."""

    def __init__(self, data_dir: Path) -> None:
        self.path = data_dir / PUBLISH_LOCK_FILE
        self._fd: int | None = None
        self._guard = threading.Lock()
        self._told_waiting = False

    def held(self) -> bool:
        """Whether this instance may publish; takes the lease if it is free."""
        with self._guard:
            if self._fd is not None:
                return True
            try:
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            except OSError as exc:
                raise PluginError(f"{self.path}: cannot open: {exc.strerror or exc}") from exc
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                if not self._told_waiting:
                    log.info(
                        "another plugin instance publishes this node's ResourceSlices; "
                        "this one takes over when it exits"
                    )
                    self._told_waiting = True
                return False
            self._fd = fd
            if self._told_waiting:
                log.info("this plugin instance publishes the node's ResourceSlices now")
            return True

    def release(self) -> None:
        with self._guard:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None
