"""Crash-safe file writes and removals.

The kubelet plugin's state (the checkpoint, the per-claim CDI specs) must never
be seen half-written: a container runtime reading a truncated CDI spec, or a
plugin restarting onto a truncated checkpoint, turns a crash into an outage.
Every file dra-gpu owns on disk is therefore written here: to a temp file in
the same directory, fsync'd, renamed over the target, and the directory
fsync'd so the rename itself survives a power loss.

Errors are left as `OSError`; callers wrap them in their own layer's error
(`CheckpointError`, `CdiError`) with the path and what they were doing.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path

_TEMP_PREFIX = ".tmp-"


def fsync_dir(directory: Path) -> None:
    """Flush a directory entry change (create, rename, unlink) to disk."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(path: Path, data: bytes, mode: int = 0o644, *, sync: bool = True) -> None:
    """Replace `path` with `data` so readers see the old or the new content, never a mix.

    The temp file is created next to `path` (a rename is atomic only within
    one file system), named `.tmp-<name>.<random>`, and removed again if any
    step fails, so a failed write leaves the old content and no litter.
    `mode` is applied to the new file exactly (the umask does not narrow it).
    `sync=False` skips the fsyncs: other processes see the new content at
    once, but a power loss may lose it (for state a crash of the machine
    makes void anyway).
    """
    path = Path(path)
    directory = path.parent
    fd, tmp_name = tempfile.mkstemp(prefix=temp_prefix_for(path.name) + ".", dir=directory)
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fchmod(f.fileno(), mode)
            if sync:
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    if sync:
        fsync_dir(directory)


def remove_file(path: Path, *, sync: bool = True) -> bool:
    """Delete `path` durably; returns False (not an error) if it did not exist.

    `sync=False` skips the directory fsync (see `atomic_write`)."""
    path = Path(path)
    try:
        os.unlink(path)
    except FileNotFoundError:
        return False
    if sync:
        fsync_dir(path.parent)
    return True


def temp_prefix_for(name: str) -> str:
    """The prefix of `atomic_write`'s temp files for targets whose name starts with `name`.

    Lets an owner of a directory find temp files a crash left behind; they
    never end in the target's extension, so directory scanners skip them.
    """
    return f"{_TEMP_PREFIX}{name}"
