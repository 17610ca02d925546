"""Make a directory read-only, as a read-only mount is: every change in it fails with EROFS.

As root (the plugin's usual user, and these tests' in CI containers) the
directory is bind-mounted read-only onto itself for the `with` block, a real
read-only mount: even unlinking a file that does not exist fails (EROFS,
checked before the name is looked up). Without root, write permission is
taken away instead (EACCES), which covers everything but that last case.
"""

from __future__ import annotations

import os
import stat
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def read_only(directory: Path) -> Iterator[None]:
    """`directory` refuses every change inside the `with` block."""
    if os.geteuid() == 0:
        path = str(directory)
        subprocess.run(["mount", "--bind", path, path], check=True)
        try:
            subprocess.run(["mount", "-o", "remount,ro,bind", path, path], check=True)
            yield
        finally:
            subprocess.run(["umount", path], check=True)
        return
    mode = stat.S_IMODE(directory.stat().st_mode)
    directory.chmod(0o555)
    try:
        yield
    finally:
        directory.chmod(mode)
