"""How the composition root starts the daemons it runs as child processes.

`dra-gpu demo` (and the tests and benchmarks) run the real plugin and the MPS and IMEX
hosts as child processes (`plugin_process`, `mps_host_process`, `imex_host_process`; the
two hosts share `HostProcess`). They start them through one seam, a
`Spawn`, so the test suite can hand them a faster one: a fork server that has imported the
daemon's modules once (`tests.fakes.zygote`), where a fresh interpreter spends half a second
importing them on each of a few hundred starts. `popen` is the real thing: a new
interpreter in a session of its own, as a container's process is.
"""

from __future__ import annotations

import abc
import signal
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol, Self

from dra_driver.errors import PluginError

__all__ = [
    "ChildProcess",
    "HostProcess",
    "Spawn",
    "file_identity",
    "log_tail",
    "popen",
    "terminate",
]

HOST_START_TIMEOUT_S = 30.0


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


def terminate(process: ChildProcess, timeout: float) -> int:
    """SIGTERM `process` (if it still runs) and wait for it; SIGKILL after `timeout`."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
    try:
        return process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        return process.wait(timeout=timeout)


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


class HostProcess(abc.ABC):
    """A node host daemon (`mps-host`, `imex-host`) in a session of its own: started, awaited
    until it holds its lock, and stopped with SIGTERM while the daemons it runs keep running.

    The MPS and the IMEX host differ only in their command line, their name in errors and how
    their lock is seen; a subclass gives those (`label`, `_args`, `_holds_lock`).
    """

    label = "host"

    def __init__(self, args: list[str], log_path: Path, spawn: Spawn) -> None:
        self.log_path = log_path
        self._args = args
        self.process: ChildProcess | None = None
        self._spawn = spawn

    @abc.abstractmethod
    def _holds_lock(self) -> bool:
        """Whether the started host holds its lock (it serves from then on)."""

    @property
    def pid(self) -> int:
        if self.process is None:
            raise PluginError(f"the {self.label} was never started")
        return self.process.pid

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def start(self, timeout: float = HOST_START_TIMEOUT_S) -> Self:
        """Start the host in a new session and wait until it holds its lock."""
        self.launch()
        self.wait_ready(timeout)
        return self

    def launch(self) -> None:
        """Start the host in a new session (unless it runs), without waiting for it."""
        if self.running():
            return
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as log:
            self.process = self._spawn(self._args, None, log.fileno())

    def wait_ready(self, timeout: float = HOST_START_TIMEOUT_S) -> None:
        """Wait until the launched host holds its lock; PluginError if it exits first."""
        if self.process is None:
            raise PluginError(f"the {self.label} was never launched")
        deadline = time.monotonic() + timeout
        while not self._holds_lock():
            if self.process.poll() is not None:
                raise PluginError(
                    f"the {self.label} exited with {self.process.returncode}; log:\n{self._tail()}"
                )
            if time.monotonic() > deadline:
                raise PluginError(
                    f"the {self.label} did not start in {timeout:g} s:\n{self._tail()}"
                )
            time.sleep(0.02)

    def stop(self, timeout: float = 15.0) -> int | None:
        """SIGTERM the host and wait; its daemons keep running. None if it was not running."""
        return None if self.process is None else terminate(self.process, timeout)

    def _tail(self, chars: int = 3000) -> str:
        return log_tail(self.log_path, chars)
