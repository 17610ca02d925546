"""A simulated MPS client: a process that keeps talking to its control daemon, as a pod would.

`python -m tests.fakes.mps_client <pipe dir> <progress file>` reaches the
simulated daemon (`dra_driver.hardware.simulated.mps_control`) through the
pipe directory every 50 ms, as a CUDA process reaches its MPS server, and
appends one "." to the progress file per answer. The first time the daemon
cannot be reached it writes "FAILED: <why>" and exits 3: a client whose
server died is dead too. SIGTERM ends it with 0. `MpsClient` starts one in a
session of its own (a container's process, not the plugin's).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from types import FrameType

from dra_driver.hardware.simulated.mps_control import SOCKET_NAME

REPO_ROOT = Path(__file__).resolve().parents[2]


class MpsClient:
    """A running simulated MPS client of the daemon whose pipe directory is `pipe`."""

    def __init__(self, pipe: Path, progress: Path) -> None:
        self.progress = progress
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.fakes.mps_client", str(pipe), str(progress)],
            cwd=REPO_ROOT,
            start_new_session=True,
        )

    def answers(self) -> int:
        """How many times the daemon answered so far."""
        try:
            return self.progress.read_text(encoding="ascii").count(".")
        except FileNotFoundError:
            return 0

    def failure(self) -> str | None:
        """Why the client died, if it did."""
        try:
            text = self.progress.read_text(encoding="ascii")
        except FileNotFoundError:
            return None
        return text[text.index("FAILED") :] if "FAILED" in text else None

    def alive(self) -> bool:
        return self.process.poll() is None

    def keeps_answering(self, more: int = 3, timeout: float = 10.0) -> bool:
        """True once the daemon answered `more` further times with the client still alive."""
        target = self.answers() + more
        deadline = time.monotonic() + timeout
        while self.answers() < target:
            if not self.alive() or time.monotonic() > deadline:
                return False
            time.sleep(0.02)
        return self.alive()

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        self.process.wait(timeout=10)


def _ping() -> None:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.settimeout(5)
        conn.connect(SOCKET_NAME)  # relative to the pipe directory: socket paths are short
        with conn.makefile("rw", encoding="utf-8") as stream:
            stream.write("get_server_list\n")
            stream.flush()
            stream.readline()


def main(argv: list[str]) -> int:
    pipe, progress = Path(argv[0]), Path(argv[1])
    running = True

    def on_term(_signum: int, _frame: FrameType | None) -> None:
        nonlocal running
        running = False

    signal.signal(signal.SIGTERM, on_term)
    with progress.open("a", encoding="ascii") as out:
        try:
            os.chdir(pipe)
        except OSError as exc:
            out.write(f"FAILED: {exc}\n")
            return 3
        while running:
            try:
                _ping()
            except OSError as exc:
                out.write(f"FAILED: {exc}\n")
                return 3
            out.write(".")
            out.flush()
            time.sleep(0.05)
    return 0


if __name__ == "__main__":
    os.umask(0o022)
    sys.exit(main(sys.argv[1:]))
