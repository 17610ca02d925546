"""Starting, configuring, finding and stopping MPS control daemons: real processes.

The node's MPS host (`kubelet_plugin.mps_host`) runs `nvidia-cuda-mps-control
-d [-M]` through this module (NVIDIA's driver creates a Deployment through
the API server for this, one per claim; the kubelet plugin itself never
starts a daemon), with `CUDA_VISIBLE_DEVICES` set to the GPU or MIG UUID the
daemon serves and its pipe and log directories under `<plugin data
dir>/mps/<uuid>/`. Commands go to the daemon on the stdin of another run of
the same binary with the same pipe directory. On a simulated node the
command is the fake driver root's `nvidia-cuda-mps-control`, which runs
`python -m dra_driver.hardware.simulated.mps_control`; nothing else differs.

The daemon forks into its own session, so a restart of the MPS host process
does not take it down; the host finds it again through the pid file in the
pipe directory and tells it from a process that reused its pid by the start
time in `/proc/<pid>/stat`.

Shared memory: MPS clients and the daemon talk through `/dev/shm`, which
must be the same directory for both and private to the daemon. With
`shm_tmpfs` (a real node; needs root) a tmpfs of half the node's memory is
mounted at `<uuid>/shm` (NVIDIA's size and options), and the daemon runs in
its own mount namespace with that tmpfs bound over `/dev/shm` (`unshare
--mount`). Without it (a simulated node) `<uuid>/shm` is a plain directory:
clients still get a private `/dev/shm` of their own, only on disk rather
than in memory.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from dra_driver.claims.mps import DaemonPaths
from dra_driver.errors import MpsError

log = logging.getLogger(__name__)

START_TIMEOUT_S: Final = 10.0
STOP_TIMEOUT_S: Final = 10.0
COMMAND_TIMEOUT_S: Final = 10.0
_SHM_OPTIONS: Final = "rw,nosuid,nodev,noexec,relatime"


@dataclass(frozen=True)
class DaemonProcess:
    """A running control daemon: its pid and the start time that identifies it."""

    pid: int
    start_ticks: int


def process_start_ticks(pid: int, proc_root: Path = Path("/proc")) -> int | None:
    """When process `pid` started (clock ticks since boot), or None if it is gone or a zombie."""
    try:
        stat = (proc_root / str(pid) / "stat").read_text(encoding="ascii", errors="replace")
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    fields = stat[stat.rfind(")") + 2 :].split()  # the command name may hold spaces
    if len(fields) < 20 or fields[0] in ("Z", "X"):
        return None
    return int(fields[19])


class MpsDaemons:
    """The control daemons under `root` (`<plugin data dir>/mps`), one per device UUID."""

    def __init__(
        self,
        root: Path,
        command: Sequence[str],
        *,
        shm_tmpfs: bool = False,
        env: Mapping[str, str] | None = None,
        stop_timeout: float = STOP_TIMEOUT_S,
    ) -> None:
        self.root = root
        self.command = tuple(command)
        self.shm_tmpfs = shm_tmpfs
        self.stop_timeout = stop_timeout
        self._env = dict(os.environ if env is None else env)

    def paths(self, device_uuid: str) -> DaemonPaths:
        return DaemonPaths.of(self.root, device_uuid)

    def daemon_dirs(self) -> list[DaemonPaths]:
        """Every daemon directory present, running or not."""
        try:
            return [DaemonPaths(p) for p in sorted(self.root.iterdir()) if p.is_dir()]
        except FileNotFoundError:
            return []

    def running(self) -> int:
        """How many control daemons run under `root` now (the `dra_gpu_mps_daemons` gauge)."""
        return sum(1 for paths in self.daemon_dirs() if self.find(paths) is not None)

    def find(self, paths: DaemonPaths) -> DaemonProcess | None:
        """The daemon running on `paths`' pipe directory, according to its pid file."""
        try:
            pid = int(paths.pid_file.read_text(encoding="ascii").strip())
        except (FileNotFoundError, ValueError):
            return None
        ticks = process_start_ticks(pid)
        return None if ticks is None else DaemonProcess(pid, ticks)

    def start(self, paths: DaemonPaths, *, multi_user: bool) -> DaemonProcess:
        """Start the daemon for `paths.device_uuid` (or return the one already running)."""
        running = self.find(paths)
        if running is not None:
            return running
        for directory in (paths.pipe, paths.log, paths.shm):
            directory.mkdir(parents=True, exist_ok=True, mode=0o755)
        argv = [*self.command, "-d", *(["-M"] if multi_user else [])]
        if self.shm_tmpfs:
            self._mount_shm(paths)
            argv = [
                "unshare", "--mount", "--propagation", "slave", "--",
                "sh", "-c", 'mount --bind "$0" /dev/shm && exec "$@"', str(paths.shm), *argv,
            ]  # fmt: skip
        self._run(paths, argv, "", f"start the MPS control daemon for {paths.device_uuid}")
        deadline = time.monotonic() + START_TIMEOUT_S
        while (running := self.find(paths)) is None:
            if time.monotonic() > deadline:
                raise MpsError(
                    f"MPS control daemon for {paths.device_uuid} wrote no pid file "
                    f"{paths.pid_file} within {START_TIMEOUT_S:g} s; see {paths.log}/control.log"
                )
            time.sleep(0.02)
        log.info("started MPS control daemon pid %d for %s", running.pid, paths.device_uuid)
        return running

    def send(self, paths: DaemonPaths, lines: Sequence[str]) -> None:
        """Send control-shell commands to the daemon on `paths`."""
        if lines:
            what = f"send {', '.join(lines)} to the MPS control daemon of {paths.device_uuid}"
            self._run(paths, list(self.command), "".join(f"{line}\n" for line in lines), what)

    def stop(self, paths: DaemonPaths) -> None:
        """Stop the daemon on `paths` (quit, then SIGKILL if it hangs) and remove its files."""
        running = self.find(paths)
        if running is not None:
            try:
                self.send(paths, ["quit"])
            except MpsError as exc:
                log.warning("%s; killing pid %d", exc, running.pid)
            deadline = time.monotonic() + self.stop_timeout
            while process_start_ticks(running.pid) == running.start_ticks:
                if time.monotonic() > deadline:
                    log.warning(
                        "MPS control daemon pid %d for %s ignored quit for %g s: killing it",
                        running.pid,
                        paths.device_uuid,
                        self.stop_timeout,
                    )
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(running.pid, signal.SIGKILL)
                    deadline = time.monotonic() + self.stop_timeout
                time.sleep(0.02)
            log.info("stopped MPS control daemon pid %d for %s", running.pid, paths.device_uuid)
        if os.path.ismount(paths.shm):
            self._run_plain(["umount", str(paths.shm)], f"unmount {paths.shm}")
        shutil.rmtree(paths.root, ignore_errors=True)

    # -- helpers ------------------------------------------------------------------

    def _mount_shm(self, paths: DaemonPaths) -> None:
        if os.path.ismount(paths.shm):
            return
        size = f"size={_half_of_memory_kib()}k"
        self._run_plain(
            ["mount", "-t", "tmpfs", "-o", f"{_SHM_OPTIONS},{size}", "shm", str(paths.shm)],
            f"mount a tmpfs at {paths.shm}",
        )

    def _run(self, paths: DaemonPaths, argv: Sequence[str], stdin: str, what: str) -> None:
        env = {
            **self._env,
            "CUDA_VISIBLE_DEVICES": paths.device_uuid,
            "CUDA_MPS_PIPE_DIRECTORY": str(paths.pipe),
            "CUDA_MPS_LOG_DIRECTORY": str(paths.log),
        }
        self._run_plain(argv, what, stdin=stdin, env=env)

    @staticmethod
    def _run_plain(
        argv: Sequence[str], what: str, *, stdin: str = "", env: Mapping[str, str] | None = None
    ) -> None:
        # Output goes to a file, not a pipe: a daemon that keeps the inherited
        # descriptors open would make reading a pipe wait for it to exit.
        with tempfile.TemporaryFile() as output:
            try:
                done = subprocess.run(
                    list(argv),
                    input=stdin.encode(),
                    stdout=output,
                    stderr=subprocess.STDOUT,
                    env=None if env is None else dict(env),
                    timeout=COMMAND_TIMEOUT_S,
                    start_new_session=True,  # a daemon it leaves behind outlives the plugin
                    check=False,
                )
            except (OSError, subprocess.TimeoutExpired) as exc:
                raise MpsError(f"could not {what}: {' '.join(argv)}: {exc}") from exc
            output.seek(0)
            text = " ".join(output.read(4096).decode(errors="replace").split())
        if done.returncode != 0 or text.startswith("Invalid"):
            raise MpsError(
                f"could not {what}: {' '.join(argv)} exited with {done.returncode}: "
                f"{text or 'no output'}"
            )


def _half_of_memory_kib() -> int:
    """Half of MemTotal, NVIDIA's tmpfs size for an MPS daemon's shm (65536 KiB if unknown)."""
    try:
        for line in Path("/proc/meminfo").read_text(encoding="ascii").splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) // 2
    except (OSError, ValueError, IndexError):
        pass
    return 65536
