"""How the composition root starts the daemons it runs as child processes.

`dra-gpu demo` (and the tests and benchmarks) run the real plugin and MPS host as child
processes (`plugin_process`, `mps_host_process`). They start them through one seam, a
`Spawn`, so the test suite can hand them a faster one: a fork server that has imported the
daemon's modules once (`tests.fakes.zygote`), where a fresh interpreter spends half a second
importing them on each of a few hundred starts. `popen` is the real thing: a new
interpreter in a session of its own, as a container's process is.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

__all__ = ["ChildProcess", "Spawn", "file_identity", "log_tail", "popen"]


class ChildProcess(Protocol):
    """What the composition root uses of a started daemon (`subprocess.Popen` has it)."""

    @property
    def pid(self) -> int: ...

    @property
    def args(self) -> Any: ...

    @property
    def returncode(self) -> int | None: ...

    def poll(self) -> int | None: ...

    def wait(self, timeout: float | None = None) -> int: ...

    def kill(self) -> None: ...

    def send_signal(self, sig: int) -> None: ...


Spawn = Callable[[Sequence[str], Mapping[str, str] | None, int], ChildProcess]
"""`spawn(argv, env, log_fd)`: start `argv` (`[python, "-m", module, *args]`) in a new
session with `env` (None: this process's) and stdout and stderr on `log_fd`."""


def popen(argv: Sequence[str], env: Mapping[str, str] | None, log_fd: int) -> ChildProcess:
    """A new interpreter: the way a container starts the daemon."""
    return subprocess.Popen(
        list(argv), stdout=log_fd, stderr=subprocess.STDOUT, env=env, start_new_session=True
    )


def log_tail(path: Path, chars: int = 3000) -> str:
    """The end of a daemon's log file (all its runs); "" before it wrote one."""
    try:
        return path.read_text(encoding="utf-8", errors="replace")[-chars:]
    except FileNotFoundError:
        return ""


def file_identity(path: Path) -> tuple[int, int] | None:
    """Inode and change time of `path`: tells a daemon's new socket from a stale one at the
    same path (None: no file)."""
    try:
        info = path.lstat()
    except FileNotFoundError:
        return None
    return info.st_ino, info.st_ctime_ns
