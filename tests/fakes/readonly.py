"""Make a directory refuse new and removed entries, as a read-only mount would.

As root (the plugin's usual user) permissions do not stop writes, so the
directory is made immutable (`chattr +i`, supported by ext4, xfs, btrfs);
otherwise its write permission is taken away. Either way creating, renaming
and unlinking entries in it fail with an OSError, as on a read-only mount.
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
    """`directory` refuses entry changes inside the `with` block."""
    if os.geteuid() == 0:
        subprocess.run(["chattr", "+i", str(directory)], check=True)
        try:
            yield
        finally:
            subprocess.run(["chattr", "-i", str(directory)], check=True)
        return
    mode = stat.S_IMODE(directory.stat().st_mode)
    directory.chmod(0o555)
    try:
        yield
    finally:
        directory.chmod(mode)
