"""The user's cache directory for dra-gpu: `$XDG_CACHE_HOME/dra-gpu` or `~/.cache/dra-gpu`.

Work a command would otherwise redo on every run (the CEL grammar's LALR
tables, 18 % of a small `dra-gpu explain`) is kept here across runs, as the
XDG base-directory specification places per-user caches. Nothing here is
needed: every user of it rebuilds what it needs when the directory cannot be
created or written, so a read-only home or a sandbox costs time, not a
failure.
"""

from __future__ import annotations

import os
from pathlib import Path

APP_DIR = "dra-gpu"


def user_cache_dir() -> Path | None:
    """The directory, created (mode 0700) if missing; None where it cannot be made or
    written."""
    base = Path(os.environ.get("XDG_CACHE_HOME") or "")
    if not base.is_absolute():  # unset, or relative (the specification ignores those)
        home = Path(os.path.expanduser("~"))
        if not home.is_absolute() or not home.is_dir():  # no home to keep a cache in
            return None
        base = home / ".cache"
    directory = base / APP_DIR
    try:
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError:
        return None
    if not os.access(directory, os.W_OK | os.X_OK):
        return None
    return directory
