"""The zygote's own side: import the daemons' modules once, then fork a child per request.

Started by `tests.fakes.zygote` (read that module's docstring) as
`python -u -m tests.zygote_server ADDRESS`. It lives outside `tests.fakes` so that its
children import no test fake the daemon would not.

Protocol, over one SOCK_SEQPACKET connection per child: the request is JSON `{"argv",
"env"}` with the log's file descriptor attached; the answer `{"pid"}`, and, when the child
has exited, `{"status"}` (`os.waitstatus_to_exitcode`: -9 after SIGKILL).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import runpy
import selectors
import socket
import sys
import traceback
import warnings
from typing import Any

from dra_driver.errors import PluginError

PRELOAD = (  # what `dra-gpu kubelet-plugin` and `dra-gpu mps-host` import on a simulated node
    "dra_driver.cli",
    "dra_driver.composition.hardware",
    "dra_driver.hardware.simulated.hardware",
    "dra_driver.hardware.simulated.latency",
    "dra_driver.node.health",
    "kubelet_plugin.main",
    "kubelet_plugin.mps_host_main",
)
MAX_MESSAGE = 1 << 20
"""The largest request or answer (an environment is a few KiB)."""


def _serve(address: str) -> None:
    for module in PRELOAD:
        __import__(module)
    parent = os.getppid()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    listener.bind(address + ".tmp")
    listener.listen(64)
    os.rename(address + ".tmp", address)  # ready: the modules are in
    children: dict[int, socket.socket] = {}
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ)
    while os.getppid() == parent:  # the test process is gone: so is its zygote
        if selector.select(timeout=0.01):
            connection, _ = listener.accept()
            try:
                _fork(connection, listener, children)
            except (OSError, ValueError, KeyError):  # one bad request ends only itself
                traceback.print_exc()
                connection.close()
        _reap(children)


def _fork(
    connection: socket.socket, listener: socket.socket, children: dict[int, socket.socket]
) -> None:
    message, fds, _flags, _address = socket.recv_fds(connection, MAX_MESSAGE, 1)
    request = json.loads(message)
    (log_fd,) = fds
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            listener.close()
            for other in children.values():
                other.close()
            connection.close()
            code = _child(request["argv"], request["env"], log_fd)
        except BaseException:
            traceback.print_exc()
        finally:
            os._exit(code)
    os.close(log_fd)
    children[pid] = connection
    connection.send(json.dumps({"pid": pid}).encode())


def _child(argv: list[str], env: dict[str, str], log_fd: int) -> int:
    os.setsid()
    if log_fd <= 2:  # the zygote had a standard stream closed: keep the log past dup2
        log_fd = fcntl.fcntl(log_fd, fcntl.F_DUPFD, 3)
    os.dup2(log_fd, 1)
    os.dup2(log_fd, 2)
    os.close(log_fd)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    os.environ.clear()
    os.environ.update(env)
    if argv[1:2] != ["-m"] or len(argv) < 3:
        raise PluginError(f"the zygote runs `python -m MODULE ...` only, not {argv}")
    module = argv[2]
    sys.argv = [module, *argv[3:]]
    code: Any = 0
    # `python -m` of a module imported already (preloaded here) is fine: say nothing of it.
    warnings.filterwarnings("ignore", "'.*' found in sys.modules", RuntimeWarning, "runpy")
    try:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    except SystemExit as exc:
        code = exc.code
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


def _reap(children: dict[int, socket.socket]) -> None:
    while children:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        connection = children.pop(pid, None)
        if connection is not None:
            with contextlib.suppress(OSError):
                connection.send(json.dumps({"status": os.waitstatus_to_exitcode(status)}).encode())
            connection.close()


if __name__ == "__main__":
    _serve(sys.argv[1])
