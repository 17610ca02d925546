"""Failpoints armed by environment or by file kill the process at exactly that point."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from dra_driver import failpoints

PROGRAM = """
import sys
from dra_driver import failpoints
failpoints.hit("prepare-after-cdi-written")
print("passed the first", flush=True)
sys.stdin.readline()  # the test may arm the next one now
failpoints.hit("unprepare-after-cdi-removed")
print("passed the second", flush=True)
"""


def _run(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    unset = {failpoints.ENV_VAR, failpoints.FILE_ENV_VAR}
    clean = {k: v for k, v in os.environ.items() if k not in unset}
    return subprocess.run(
        [sys.executable, "-c", PROGRAM],
        env={**clean, **env},
        input="\n",
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_nothing_armed_passes_every_point() -> None:
    done = _run({})
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["passed the first", "passed the second"]


def test_a_point_armed_in_the_environment_is_a_sigkill_there() -> None:
    done = _run({failpoints.ENV_VAR: "x, prepare-after-cdi-written"})
    assert done.returncode == -signal.SIGKILL
    assert done.stdout == ""


def test_a_point_armed_in_the_file_while_the_process_runs_is_a_sigkill_there(
    tmp_path: Path,
) -> None:
    armed = tmp_path / "failpoints"  # not there yet: nothing armed
    env = {k: v for k, v in os.environ.items() if k != failpoints.ENV_VAR}
    env[failpoints.FILE_ENV_VAR] = str(armed)
    with subprocess.Popen(
        [sys.executable, "-c", PROGRAM],
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    ) as process:
        assert process.stdout is not None
        assert process.stdin is not None
        assert process.stdout.readline() == "passed the first\n"
        armed.write_text("unprepare-after-cdi-removed\n", encoding="utf-8")
        process.stdin.write("\n")
        process.stdin.flush()
        assert process.wait(timeout=60) == -signal.SIGKILL
        assert process.stdout.read() == ""


def test_a_point_armed_to_fail_raises_there_instead_of_killing() -> None:
    done = _run({failpoints.ENV_VAR: "fail:prepare-after-cdi-written"})
    assert done.returncode == 1
    assert done.stdout == ""
    assert "InjectedFailure: failpoint prepare-after-cdi-written: injected failure" in done.stderr
