"""A simulated `nvidia-cuda-mps-control`, so a simulated node runs a real MPS daemon process.

The kubelet plugin starts and drives MPS control daemons through the same
code path on a real and a simulated node: `<driver-root>/usr/bin/nvidia-cuda-mps-control`;
a simulated node's fake driver root holds a script there (`launcher`) that
runs `python -m dra_driver.hardware.simulated.mps_control`. This program copies the
parts of the real one the plugin relies on:

- `-d` starts a daemon in the background (double fork, new session) and
  returns once it serves; `-f` runs it in the foreground; `-M` is
  multi-user mode. A second daemon on the same pipe directory is refused.
- The daemon reads `CUDA_MPS_PIPE_DIRECTORY` (default `/tmp/nvidia-mps`),
  `CUDA_MPS_LOG_DIRECTORY` (default `/var/log/nvidia-mps`) and
  `CUDA_VISIBLE_DEVICES`; it writes `nvidia-cuda-mps-control.pid` into the
  pipe directory and `control.log` into the log directory.
- Without `-d`/`-f` it is the control shell: it reads commands from stdin,
  one a line, sends them to the daemon of the same pipe directory, prints the
  answers, and fails when no daemon runs there.
- Commands: `set_default_active_thread_percentage <pct>`,
  `get_default_active_thread_percentage`,
  `set_default_device_pinned_mem_limit <dev> <n>[M|G]`,
  `get_default_device_pinned_mem_limit <dev>`, `get_server_list`, `quit`.

Everything the daemon was told is also recorded in `<log dir>/sim-state.json`
(pid, devices, mode, defaults, every command), which tests and `dra-gpu
status` read. The real pipes are FIFOs; this one uses a Unix socket named
`control` in the pipe directory, reached relative to it (socket paths are
limited to 107 bytes). No Python library simulates MPS, hence this module.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shlex
import signal
import socket
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

PID_FILE: Final = "nvidia-cuda-mps-control.pid"
SOCKET_NAME: Final = "control"
STATE_FILE: Final = "sim-state.json"
_LIMIT = re.compile(r"(\d+(?:\.\d+)?)([MG]?)")


def launcher() -> bytes:
    """The fake driver root's `nvidia-cuda-mps-control`: a script that runs this module."""
    python = shlex.quote(sys.executable)
    return f'#!/bin/sh\nexec {python} -m dra_driver.hardware.simulated.mps_control "$@"\n'.encode()


def pipe_dir() -> Path:
    return Path(os.environ.get("CUDA_MPS_PIPE_DIRECTORY") or "/tmp/nvidia-mps")


def log_dir() -> Path:
    return Path(os.environ.get("CUDA_MPS_LOG_DIRECTORY") or "/var/log/nvidia-mps")


def read_state(log_directory: Path) -> dict[str, Any] | None:
    """What the daemon logging to `log_directory` recorded, or None without a record."""
    try:
        state = json.loads((log_directory / STATE_FILE).read_text(encoding="utf-8"))
    except (FileNotFoundError, ValueError):
        return None
    return state if isinstance(state, dict) else None


class _Daemon:
    def __init__(self, *, multi_user: bool) -> None:
        self.pipe = pipe_dir()
        self.log = log_dir()
        self.state: dict[str, Any] = {
            "pid": os.getpid(),
            "visibleDevices": os.environ.get("CUDA_VISIBLE_DEVICES", ""),
            "multiUser": multi_user,
            "defaultActiveThreadPercentage": 100.0,
            "defaultDevicePinnedMemLimits": {},
            "commands": [],
            "running": True,
        }

    def write_state(self) -> None:
        path = self.log / STATE_FILE
        temp = path.with_name(f".{STATE_FILE}.tmp")
        temp.write_text(json.dumps(self.state, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        os.replace(temp, path)

    def log_line(self, text: str) -> None:
        with (self.log / "control.log").open("a", encoding="utf-8") as log:
            log.write(text + "\n")

    def handle(self, line: str) -> tuple[str, bool]:
        """The answer to one command and whether the daemon stops."""
        words = line.split()
        if not words:
            return "", False
        self.state["commands"].append(line)
        self.log_line(f"[CMD] {line}")
        name, args = words[0], words[1:]
        if name == "quit" and not args:
            return "", True
        if name == "set_default_active_thread_percentage" and len(args) == 1:
            try:
                value = float(args[0])
            except ValueError:
                value = -1.0
            if not 0 < value <= 100:
                return f"Invalid active thread percentage {args[0]!r}", False
            self.state["defaultActiveThreadPercentage"] = value
            return f"{value:g}", False
        if name == "get_default_active_thread_percentage" and not args:
            return f"{self.state['defaultActiveThreadPercentage']:g}", False
        if name == "set_default_device_pinned_mem_limit" and len(args) == 2:
            if _LIMIT.fullmatch(args[1]) is None:
                return f"Invalid memory limit {args[1]!r}", False
            self.state["defaultDevicePinnedMemLimits"][args[0]] = args[1]
            return "", False
        if name == "get_default_device_pinned_mem_limit" and len(args) == 1:
            return str(self.state["defaultDevicePinnedMemLimits"].get(args[0], "")), False
        if name == "get_server_list" and not args:
            return "", False
        return f"Invalid command: {line}", False

    def serve(self, ready_fd: int | None) -> int:
        """Serve until `quit`; signals readiness on `ready_fd` once the pid file is written."""
        os.chdir(self.pipe)
        server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(SOCKET_NAME)
        server.bind(SOCKET_NAME)
        server.listen(8)
        (self.pipe / PID_FILE).write_text(f"{os.getpid()}\n", encoding="ascii")
        self.write_state()
        self.log_line(f"[INFO] Starting control daemon using socket {self.pipe / SOCKET_NAME}")
        if ready_fd is not None:
            os.write(ready_fd, b"1")
            os.close(ready_fd)
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
        try:
            while True:
                conn, _ = server.accept()
                with conn, conn.makefile("rw", encoding="utf-8") as stream:
                    for line in stream:
                        answer, stop = self.handle(line.strip())
                        self.write_state()
                        stream.write(answer + "\n")
                        stream.flush()
                        if stop:
                            return 0
        finally:
            self.state["running"] = False
            self.write_state()
            self.log_line("[INFO] Shutting down")
            for name in (PID_FILE, SOCKET_NAME):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(self.pipe / name)


def _running_pid(directory: Path) -> int | None:
    """The pid in the pid file if that process is alive. A daemon killed with
    SIGKILL leaves its pid file behind, and until its new parent reaps it, a
    zombie that `kill(pid, 0)` still reaches: that one is dead too."""
    try:
        pid = int((directory / PID_FILE).read_text(encoding="ascii").strip())
        os.kill(pid, 0)
    except (FileNotFoundError, ValueError, ProcessLookupError):
        return None
    except PermissionError:
        pass  # alive, another user's
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="ascii", errors="replace")
    except (FileNotFoundError, ProcessLookupError):
        return None
    state = stat[stat.rfind(")") + 2 :].split()[:1]
    return None if state in (["Z"], ["X"]) else pid


def _start(*, multi_user: bool, foreground: bool) -> int:
    pipe, log = pipe_dir(), log_dir()
    for directory in (pipe, log):
        if not directory.is_dir():
            print(f"{directory}: no such directory", file=sys.stderr)
            return 1
    if _running_pid(pipe) is not None:
        print("An instance of this daemon is already running", file=sys.stderr)
        return 1
    if foreground:
        return _Daemon(multi_user=multi_user).serve(None)
    read_end, write_end = os.pipe()
    if os.fork() > 0:  # the caller: wait until the daemon serves
        os.close(write_end)
        ready = os.read(read_end, 1)
        return 0 if ready == b"1" else 1
    os.close(read_end)
    os.setsid()
    if os.fork() > 0:
        os._exit(0)
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    daemon = _Daemon(multi_user=multi_user)
    code = 1
    try:
        code = daemon.serve(write_end)
    finally:
        os._exit(code)


def _control(lines: Sequence[str]) -> int:
    client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        os.chdir(pipe_dir())
        client.connect(SOCKET_NAME)
    except OSError:
        print("Cannot find MPS control daemon process", file=sys.stderr)
        return 1
    failed = False
    with client, client.makefile("rw", encoding="utf-8") as stream:
        for line in lines:
            if not line.strip():
                continue
            stream.write(line.strip() + "\n")
            stream.flush()
            answer = stream.readline().rstrip("\n")
            if answer:
                print(answer)
            failed = failed or answer.startswith("Invalid")
            if line.split()[0] == "quit":
                break
    return 1 if failed else 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="nvidia-cuda-mps-control", description="simulated MPS control daemon and shell"
    )
    parser.add_argument("-d", action="store_true", help="start the daemon in the background")
    parser.add_argument("-f", action="store_true", help="run the daemon in the foreground")
    parser.add_argument("-M", action="store_true", help="multi-user mode")
    args = parser.parse_args(argv)
    if args.d or args.f:
        return _start(multi_user=args.M, foreground=args.f)
    return _control(sys.stdin.read().splitlines())


if __name__ == "__main__":
    sys.exit(main())
