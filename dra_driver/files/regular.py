"""Reading files that must be regular files, without blocking on anything else.

A directory that others can write to (the `--cluster local:DIR` store of the
demo and the tests, a plugin's data directory) may hold a FIFO, a socket or
a device node where a file is expected. `open(2)` of a FIFO for reading
waits for a writer, for ever: one such entry hung Prepare until the
kubelet's deadline, or stopped re-publishing for good. Opening a device
node can have effects of its own. So `read_regular` refuses anything but a
regular file before opening it (`stat`), opens with `O_NONBLOCK` (which a
regular file ignores, and which keeps a FIFO swapped in after the check from
blocking), and checks again on the open descriptor (`fstat`).

A refusal is a `NotRegularFileError`, an `OSError`: callers already wrap
`OSError` in their own layer's error (`ClusterError`, `CheckpointError`) with
the path, and a missing file stays `FileNotFoundError`. The standard library
has no such read (`Path.read_bytes` opens whatever is there), hence this module.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
)


class NotRegularFileError(OSError):
    """The path names something other than a regular file (its kind in the message)."""


def require_regular(mode: int) -> None:
    """Raise `NotRegularFileError` unless `mode` (an `st_mode`) is a regular file's."""
    if stat.S_ISREG(mode):
        return
    kind = next((name for test, name in _KINDS if test(mode)), "not a file")
    raise NotRegularFileError(f"not a regular file ({kind})")


def read_regular(path: Path | str, max_bytes: int | None = None) -> bytes:
    """The content of the regular file at `path` (symbolic links followed), at most
    `max_bytes` of it where given; `NotRegularFileError` for anything else, without
    waiting on it."""
    require_regular(os.stat(path).st_mode)
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as f:
        require_regular(os.fstat(fd).st_mode)
        return f.read() if max_bytes is None else f.read(max_bytes)
