"""The process side of the IMEX host: running, finding and asking `nvidia-imex`.

`kubelet_plugin.imex_host` decides what should run; this module is how:
`ProcessImexRunner` starts the driver root's `nvidia-imex -c <config>` (on a
simulated node, the fake root's stand-in) in a session of its own so that it
outlives the host, records it in a pid file that a restarted host adopts it
from (the start time in `/proc/<pid>/stat` and the config path in its
command line tell it from a process that reused the pid), signals it, stops
it, and asks `nvidia-imex-ctl` about it with a bounded wait. `ImexRunner`
is the narrow seam the host uses, so its decisions are tested against a fake.
`detect_host_imex` finds an `nvidia-imex` the host did not start.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import signal
import socket
import stat
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Protocol

from dra_driver.compute_domain.membership import PeerState
from dra_driver.errors import PluginError
from dra_driver.files import atomic
from kubelet_plugin.mps_daemons import process_start_ticks

log = logging.getLogger(__name__)

DOMAINS_DIR: Final = "domains"
CONFIG_FILE: Final = "imexd.cfg"
NODES_FILE: Final = "nodes.cfg"
HOSTS_FILE: Final = "hosts"
APPLIED_HOSTS_FILE: Final = "hosts.applied"
PID_FILE: Final = "nvidia-imex.pid"
LOG_FILE: Final = "nvidia-imex.log"
HOSTS_ENV: Final = "IMEX_STANDIN_HOSTS_FILE"
"""The stand-in `nvidia-imex` resolves names in this file (the real one uses /etc/hosts)."""

IMEX_BINARY: Final = "nvidia-imex"
IMEX_CTL_BINARY: Final = "nvidia-imex-ctl"
QUERY_TIMEOUT_S: Final = 5.0
STOP_TIMEOUT_S: Final = 10.0

_IDENTIFIED = re.compile(rb"Identified this node as ID (\d+)")
_MAX_LOG_TAIL: Final = 64 * 1024
_MAX_LOG_START: Final = 1024 * 1024


# -- the process seam -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class DomainPaths:
    """The files of one domain's IMEX daemon: `<state dir>/domains/<domain UID>/`."""

    root: Path

    @classmethod
    def of(cls, state_dir: Path, domain_uid: str) -> DomainPaths:
        return cls(state_dir / DOMAINS_DIR / domain_uid)

    @property
    def domain_uid(self) -> str:
        return self.root.name

    @property
    def config(self) -> Path:
        return self.root / CONFIG_FILE

    @property
    def nodes(self) -> Path:
        return self.root / NODES_FILE

    @property
    def hosts(self) -> Path:
        return self.root / HOSTS_FILE

    @property
    def applied_hosts(self) -> Path:
        return self.root / APPLIED_HOSTS_FILE

    @property
    def pid_file(self) -> Path:
        return self.root / PID_FILE

    @property
    def log(self) -> Path:
        return self.root / LOG_FILE


@dataclass(frozen=True, slots=True)
class ImexProcess:
    """A running IMEX daemon: who it is (pid and start time), the index it was started with,
    and where its own part of the log file begins."""

    pid: int
    start_ticks: int
    index: int
    log_offset: int = 0


@dataclass(frozen=True, slots=True)
class ImexQuery:
    """`nvidia-imex-ctl -q`: READY or not, and what it said."""

    ready: bool
    detail: str


@dataclass(frozen=True, slots=True)
class NodesReport:
    """`nvidia-imex-ctl -N -j`: the domain's state and each IMEX node ID's connection."""

    up: bool
    nodes: Mapping[int, str]  # IMEX node ID -> PeerState


class ImexRunner(Protocol):
    """Starts, finds, signals, stops and asks one domain's `nvidia-imex`."""

    def start(self, paths: DomainPaths, *, index: int) -> ImexProcess:
        """Start `nvidia-imex -c <paths.config>` in a session of its own; PluginError if not."""
        ...

    def find(self, paths: DomainPaths) -> ImexProcess | None:
        """The daemon running on `paths` (its pid file, checked against /proc), or None."""
        ...

    def reload(self, process: ImexProcess) -> None:
        """SIGUSR1: re-resolve the peers' names and reconnect."""
        ...

    def stop(self, paths: DomainPaths) -> None:
        """SIGTERM (it tells its peers), wait, SIGKILL if it hangs; forget its pid file."""
        ...

    def query(self, paths: DomainPaths) -> ImexQuery:
        """`nvidia-imex-ctl -c <config> -q`."""
        ...

    def ended(self, pid: int) -> str:
        """How a daemon this runner started ended ("was killed by SIGUSR1"); "" if unknown."""
        ...

    def nodes(self, paths: DomainPaths) -> NodesReport | None:
        """`nvidia-imex-ctl -c <config> -N -j`; None when it gives no usable answer."""
        ...


def parse_nodes_report(text: str) -> NodesReport:
    """`{"status": "UP"|"DOWN", "nodes": {"<id>": {"host": ..., "status": "C|N|R|D|I"}}}`;
    ValueError when it is not that."""
    data = json.loads(text)
    if not isinstance(data, dict) or not isinstance(data.get("nodes"), dict):
        raise ValueError("expected an object with 'nodes'")
    nodes: dict[int, str] = {}
    for key, node in data["nodes"].items():
        if not isinstance(node, dict) or not str(key).isdigit():
            raise ValueError(f"nodes[{key!r}] is not a node")
        state = str(node.get("status", PeerState.INVALID))
        nodes[int(key)] = state if len(state) == 1 else PeerState.INVALID
    return NodesReport(up=data.get("status") == "UP", nodes=nodes)


def identified_node_id(log_text: bytes) -> int | None:
    """The ID in the last `Identified this node as ID n` line, or None."""
    found = _IDENTIFIED.findall(log_text)
    return int(found[-1]) if found else None


def last_log_line(path: Path) -> str:
    """The last non-empty line of a log file (its tail), or ""."""
    data = read_tail(path)
    for line in reversed(data.splitlines()):
        text = " ".join(line.decode(errors="replace").split())
        if text:
            return text
    return ""


def read_tail(path: Path) -> bytes:
    """The last 64 KiB of a log file (b"" if unreadable)."""
    try:
        with path.open("rb") as f:
            size = f.seek(0, os.SEEK_END)
            f.seek(max(size - _MAX_LOG_TAIL, 0))
            return f.read(_MAX_LOG_TAIL)
    except OSError:
        return b""


def read_start(path: Path, offset: int) -> bytes:
    """What one daemon run logged first: up to 1 MiB of the log from `offset`.

    IMEX identifies itself at start; at LOG_LEVEL=4 it may have logged far more
    than a tail's worth by the time it is asked about.
    """
    try:
        with path.open("rb") as f:
            f.seek(offset)
            return f.read(_MAX_LOG_START)
    except OSError:
        return b""


class ProcessImexRunner:
    """`ImexRunner` over real processes: the driver root's `nvidia-imex` and `nvidia-imex-ctl`.

    The daemon's stdout and stderr go to `<domain>/nvidia-imex.log` (LOG_FILE_NAME
    is empty, so IMEX logs to stderr, as in NVIDIA's template). The pid file
    records pid, start time, index and log offset; a process is ours only if
    its start time matches and its command line names our config file.
    """

    def __init__(
        self,
        imex: Path,
        ctl: Path,
        *,
        env: Mapping[str, str] | None = None,
        proc_root: Path = Path("/proc"),
        query_timeout: float = QUERY_TIMEOUT_S,
        stop_timeout: float = STOP_TIMEOUT_S,
    ) -> None:
        self.imex = imex
        self.ctl = ctl
        self.proc_root = proc_root
        self.query_timeout = query_timeout
        self.stop_timeout = stop_timeout
        self._env = dict(os.environ if env is None else env)
        self._children: set[int] = set()  # started here: reaped here
        self._ended: dict[int, str] = {}  # reaped here: how each ended
        self._lock = threading.Lock()

    def start(self, paths: DomainPaths, *, index: int) -> ImexProcess:
        argv = [str(self.imex), "-c", str(paths.config)]
        env = {**self._env, HOSTS_ENV: str(paths.hosts)}
        # posix_spawn rather than Popen: the daemon outlives this object (and this
        # process), which a Popen would warn about; the host reaps it itself.
        try:
            out = os.open(paths.log, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
            try:
                offset = os.lseek(out, 0, os.SEEK_END)
                pid = os.posix_spawn(
                    argv[0],
                    argv,
                    env,
                    file_actions=[
                        (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
                        (os.POSIX_SPAWN_DUP2, out, 1),
                        (os.POSIX_SPAWN_DUP2, out, 2),
                    ],
                    setsid=True,  # a session of its own: outlives the host and its group
                )
            finally:
                os.close(out)
        except OSError as exc:
            raise PluginError(f"cannot start {' '.join(argv)}: {exc}") from exc
        with self._lock:
            self._children.add(pid)
        ticks = process_start_ticks(pid, self.proc_root)
        process = ImexProcess(pid, ticks if ticks is not None else -1, index, offset)
        record = {
            "pid": process.pid,
            "startTicks": process.start_ticks,
            "index": index,
            "logOffset": offset,
            "config": str(paths.config),
        }
        atomic.atomic_write(paths.pid_file, json.dumps(record).encode(), sync=False)
        log.info("started %s pid %d (index %d)", " ".join(argv), pid, index)
        return process

    def find(self, paths: DomainPaths) -> ImexProcess | None:
        try:
            record = json.loads(paths.pid_file.read_bytes())
            process = ImexProcess(
                int(record["pid"]),
                int(record["startTicks"]),
                int(record["index"]),
                int(record.get("logOffset", 0)),
            )
        except (OSError, ValueError, KeyError, TypeError):
            return None
        if not self._alive(process):
            return None
        if not self._runs_config(process.pid, paths.config):
            self._collect_dying(process.pid)  # an exiting process has no cmdline left
            return None
        return process

    def reload(self, process: ImexProcess) -> None:
        if process_start_ticks(process.pid, self.proc_root) == process.start_ticks:
            with contextlib.suppress(ProcessLookupError):
                os.kill(process.pid, signal.SIGUSR1)

    def stop(self, paths: DomainPaths) -> None:
        process = self.find(paths)
        if process is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(process.pid, signal.SIGTERM)
            deadline = time.monotonic() + self.stop_timeout
            while self._alive(process):
                if time.monotonic() > deadline:
                    log.warning(
                        "nvidia-imex pid %d ignored SIGTERM for %g s: killing it",
                        process.pid,
                        self.stop_timeout,
                    )
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(process.pid, signal.SIGKILL)
                    deadline = time.monotonic() + self.stop_timeout
                time.sleep(0.02)
            log.info("stopped nvidia-imex pid %d of %s", process.pid, paths.root)
        with contextlib.suppress(OSError):
            atomic.remove_file(paths.pid_file, sync=False)

    def query(self, paths: DomainPaths) -> ImexQuery:
        done = self._ctl(paths, "-q")
        if isinstance(done, str):
            return ImexQuery(False, done)
        text = done.stdout.decode(errors="replace")
        # NVIDIA's check is exactly "READY\n" (dmn/main.go:433-459).
        if done.returncode == 0 and text.strip() == "READY":
            return ImexQuery(True, "READY")
        return ImexQuery(False, f"{IMEX_CTL_BINARY} -q: {' '.join(text.split()) or 'no answer'}")

    def nodes(self, paths: DomainPaths) -> NodesReport | None:
        done = self._ctl(paths, "-N", "-j")
        if isinstance(done, str) or done.returncode != 0:
            return None
        try:
            return parse_nodes_report(done.stdout.decode(errors="replace"))
        except ValueError as exc:
            log.warning("%s -N -j for %s: unreadable answer: %s", IMEX_CTL_BINARY, paths.root, exc)
            return None

    def own_pids(self) -> set[int]:
        with self._lock:
            return set(self._children)

    def ended(self, pid: int) -> str:
        with self._lock:
            return self._ended.get(pid, "")

    # -- helpers ------------------------------------------------------------------

    def _ctl(self, paths: DomainPaths, *args: str) -> subprocess.CompletedProcess[bytes] | str:
        argv = [str(self.ctl), "-c", str(paths.config), *args]
        try:
            return subprocess.run(
                argv,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                env=self._env,
                timeout=self.query_timeout,
                check=False,
            )
        except subprocess.TimeoutExpired:
            return f"{' '.join(argv[:1] + list(args))} did not answer in {self.query_timeout:g} s"
        except OSError as exc:
            return f"cannot run {argv[0]}: {exc}"

    def _reap(self, pid: int) -> None:
        """Collect the exit of a daemon this runner started (else it stays a zombie)."""
        with self._lock:
            if pid not in self._children:
                return
            try:
                done, wait_status = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                done, wait_status = pid, -1
            if done == pid:
                self._children.discard(pid)
                if wait_status >= 0:
                    self._ended[pid] = _exit_text(wait_status)
                    if len(self._ended) > 64:  # a few recent ones are all the host asks about
                        del self._ended[next(iter(self._ended))]
                    level = logging.WARNING if wait_status else logging.INFO
                    log.log(level, "nvidia-imex pid %d %s", pid, self._ended[pid])

    def _alive(self, process: ImexProcess) -> bool:
        self._reap(process.pid)
        if process_start_ticks(process.pid, self.proc_root) == process.start_ticks:
            return True
        self._collect_dying(process.pid)
        return False

    def _collect_dying(self, pid: int) -> None:
        """A child of ours that looks gone (a zombie, or a task still being torn down: no
        cmdline, no stat) is collected now, waiting a moment for the kernel to finish, so
        `ended` can say how it ended. Not ours (adopted): nothing to collect."""
        deadline = time.monotonic() + 0.5
        while True:
            self._reap(pid)
            with self._lock:
                if pid not in self._children:
                    return
            if time.monotonic() > deadline:
                return
            time.sleep(0.005)

    def _runs_config(self, pid: int, config: Path) -> bool:
        try:
            argv = (self.proc_root / str(pid) / "cmdline").read_bytes().split(b"\0")
        except OSError:
            return False
        return os.fsencode(str(config)) in argv


def _exit_text(wait_status: int) -> str:
    """What `waitpid`'s status says: "exited with status n" or "was killed by SIGx"."""
    if os.WIFSIGNALED(wait_status):
        signum = os.WTERMSIG(wait_status)
        try:
            name = signal.Signals(signum).name
        except ValueError:
            name = f"signal {signum}"
        return f"was killed by {name}"
    return f"exited with status {os.waitstatus_to_exitcode(wait_status)}"


# -- the host IMEX check ----------------------------------------------------------------


def detect_host_imex(
    socket_path: Path | None, proc_root: Path | None, own_pids: Sequence[int] = ()
) -> str:
    """Evidence of an `nvidia-imex` that the IMEX host did not start, or "".

    `socket_path`: the host service's command socket (host-managed mode's
    `IMEX_CMD_UNIX_DOMAIN_PATH`); it counts when something accepts on it.
    `proc_root`: the host's process table (a simulated node's fake /proc),
    scanned for a process called `nvidia-imex` whose pid is not in `own_pids`.
    """
    if socket_path is not None:
        try:
            is_socket = stat.S_ISSOCK(socket_path.stat().st_mode)
        except OSError:
            is_socket = False
        if is_socket:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
                sock.settimeout(1.0)
                try:
                    sock.connect(str(socket_path))
                except OSError:
                    pass  # a stale socket of a stopped service
                else:
                    return f"its command socket {socket_path} accepts connections"
    if proc_root is not None:
        own = set(own_pids)
        try:
            entries = [e for e in os.listdir(proc_root) if e.isdigit()]
        except OSError:
            entries = []
        for entry in sorted(entries, key=int):
            if int(entry) in own:
                continue
            if _process_name(proc_root / entry) == IMEX_BINARY:
                return f"process {entry} is {IMEX_BINARY}"
    return ""


def _process_name(proc: Path) -> str:
    with contextlib.suppress(OSError):
        comm = (proc / "comm").read_text(errors="replace").strip()
        if comm:
            return comm
    with contextlib.suppress(OSError, IndexError):
        argv0 = (proc / "cmdline").read_bytes().split(b"\0")[0]
        return os.path.basename(argv0.decode(errors="replace"))
    return ""
