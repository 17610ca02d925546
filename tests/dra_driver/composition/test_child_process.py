"""The daemons' spawn seam: the test suite's fork server behaves as a new interpreter does.

`popen` (production) and `tests.fakes.zygote.spawn` (the suite's) must give the composition
root the same process: exit codes, -9 after SIGKILL, a wait that times out, output on the log.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from dra_driver.composition.child_process import Spawn, popen
from tests.fakes import zygote

SPAWNS = pytest.mark.parametrize("spawn", [popen, zygote.spawn], ids=["popen", "zygote"])


@pytest.fixture
def log(tmp_path: Path) -> Iterator[tuple[Path, int]]:
    path = tmp_path / "child.log"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    yield path, fd
    os.close(fd)


@SPAWNS
def test_a_module_runs_with_its_arguments_and_exits_with_its_code(
    spawn: Spawn, log: tuple[Path, int]
) -> None:
    path, fd = log
    child = spawn([sys.executable, "-m", "calendar", "2026", "11"], None, fd)
    assert child.wait(timeout=30) == 0
    assert "November 2026" in path.read_text()

    failed = spawn([sys.executable, "-m", "calendar", "no-such-year"], None, fd)
    assert failed.wait(timeout=30) == 2  # argparse's usage error
    assert "invalid int value" in path.read_text()


@SPAWNS
def test_a_killed_child_reads_minus_9_and_a_wait_can_time_out(
    spawn: Spawn, log: tuple[Path, int]
) -> None:
    child = spawn([sys.executable, "-m", "timeit", "-n", "1000000000", "pass"], None, log[1])
    assert child.poll() is None
    with pytest.raises(subprocess.TimeoutExpired):
        child.wait(timeout=0.2)
    child.kill()
    assert child.wait(timeout=30) == -signal.SIGKILL
    assert child.poll() == -signal.SIGKILL
    child.send_signal(signal.SIGTERM)  # an exited child: nothing happens
