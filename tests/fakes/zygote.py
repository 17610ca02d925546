"""A fork server for the daemons the tests start: the plugin and the MPS host.

A fresh interpreter spends about half a second importing the daemon's modules (gRPC,
pydantic, protobuf, the simulated hardware), and the suite starts the plugin and the MPS
host a few hundred times: that was a third of `make test`. The zygote imports them once,
starts no thread and opens no gRPC channel, and forks a child per start. The child runs
`python -m <module> <args>` as `runpy` would (`__main__`, its own argv and environment,
stdout and stderr on the log, a session of its own) and exits with its code.

`spawn` is a `dra_driver.composition.child_process.Spawn`; what it returns behaves as the
`subprocess.Popen` the composition root would use (pid, poll, wait, kill, send_signal,
returncode: -9 after SIGKILL). The zygote is the child's parent and tells the exit status
over the child's own connection. One zygote per test process, started at the first spawn;
it exits with that process. `DRA_GPU_TEST_SPAWN=exec` starts every daemon as a new
interpreter instead (`popen`), for a run that doubts the zygote.

The demo tests and the wheel check start the daemon with `python -m dra_driver.cli` and
`dra-gpu`, so the real start-up path stays tested; the benchmarks use `popen`
(`bench.real_plugin`).
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from dra_driver.composition.child_process import ChildProcess, popen
from dra_driver.errors import PluginError
from tests.zygote_server import MAX_MESSAGE

__all__ = ["SPAWN_ENV_VAR", "ForkedProcess", "spawn"]

SPAWN_ENV_VAR = "DRA_GPU_TEST_SPAWN"
"""`exec`: every daemon a new interpreter, for a run that doubts the fork server."""


# -- the test side --------------------------------------------------------------------


class ForkedProcess:
    """A child of the zygote, used as a `subprocess.Popen`."""

    def __init__(self, connection: socket.socket, pid: int, args: Sequence[str]) -> None:
        self._connection = connection
        self.pid = pid
        self.args = list(args)
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            self._connection.setblocking(False)
            with contextlib.suppress(BlockingIOError):
                self._take(self._connection.recv(MAX_MESSAGE))
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            self._connection.settimeout(timeout)
            try:
                self._take(self._connection.recv(MAX_MESSAGE))
            except TimeoutError:
                raise subprocess.TimeoutExpired(self.args, timeout or 0.0) from None
        assert self.returncode is not None
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:  # never a pid the zygote has reaped already
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, sig)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def __del__(self) -> None:  # a child nobody waited for: no unclosed-socket warning
        self._connection.close()

    def _take(self, message: bytes) -> None:
        if not message:
            raise PluginError(f"the zygote that forked pid {self.pid} is gone")
        self.returncode = int(json.loads(message)["status"])
        self._connection.close()


class _Zygote:
    def __init__(self) -> None:
        self._dir = Path(tempfile.mkdtemp(prefix="dra-zygote-", dir="/tmp"))
        self.address = str(self._dir / "fork.sock")
        self._process = subprocess.Popen(
            [sys.executable, "-u", "-m", "tests.zygote_server", self.address],
            stdin=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 30.0
        while not os.path.exists(self.address):
            if self._process.poll() is not None or time.monotonic() > deadline:
                raise PluginError(f"the zygote did not start (exit code {self._process.poll()})")
            time.sleep(0.01)
        atexit.register(self.close)

    def spawn(
        self, argv: Sequence[str], env: Mapping[str, str] | None, log_fd: int
    ) -> ForkedProcess:
        connection = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        connection.connect(self.address)
        request = {"argv": list(argv), "env": dict(os.environ if env is None else env)}
        socket.send_fds(connection, [json.dumps(request).encode()], [log_fd])
        answer = connection.recv(MAX_MESSAGE)
        if not answer:
            raise PluginError(f"the zygote did not fork {' '.join(argv)}")
        return ForkedProcess(connection, int(json.loads(answer)["pid"]), argv)

    def close(self) -> None:
        if self._process.poll() is None:
            self._process.kill()
            self._process.wait()
        with contextlib.suppress(OSError):
            os.unlink(self.address)
        with contextlib.suppress(OSError):
            self._dir.rmdir()


_zygote: _Zygote | None = None
_zygote_lock = threading.Lock()


def spawn(argv: Sequence[str], env: Mapping[str, str] | None, log_fd: int) -> ChildProcess:
    """Start `argv` from this test process's zygote (started on first use)."""
    global _zygote  # noqa: PLW0603 - one per test process, made on first use
    if os.environ.get(SPAWN_ENV_VAR) == "exec":
        return popen(argv, env, log_fd)
    with _zygote_lock:
        if _zygote is None or _zygote._process.poll() is not None:
            _zygote = _Zygote()
        zygote = _zygote
    return zygote.spawn(argv, env, log_fd)
