"""`dra-gpu` flag checks that stop a mistake before anything runs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from dra_driver.cli import main


@pytest.mark.parametrize("interval", ["0", "-1", "nan", "soon"])
def test_publish_interval_must_be_a_positive_number_of_seconds(
    interval: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # 0 or less made the re-sync loop list the API server's slices without pause.
    args = ["kubelet-plugin", "--node-name", "n1", "--nvml", "sim:l4-node"]
    with pytest.raises(SystemExit) as exited:
        main([*args, "--publish-interval", interval])
    assert exited.value.code == 2
    assert "argument --publish-interval" in capsys.readouterr().err


def test_log_format_json_writes_one_json_object_per_line(tmp_path: Path) -> None:
    # In a child process: the logging set-up is process-wide.
    code = (
        "import logging, sys\n"
        "from dra_driver.cli import _configure_logging\n"
        "_configure_logging(verbose=False, json_format=True)\n"
        "logging.getLogger('kubelet_plugin.main').warning('GPU %s is unhealthy', 'GPU-1')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=tmp_path
    )
    (line,) = done.stderr.splitlines()
    record = json.loads(line)
    assert record["level"] == "WARNING"
    assert record["logger"] == "kubelet_plugin.main"
    assert record["message"] == "GPU GPU-1 is unhealthy"
    assert "time" in record


def test_sim_health_refuses_a_missing_state_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "none.json"
    assert main(["sim", "health", f"--sim-state={missing}", "--gpu=0", "--xid=79"]) == 2
    assert "no such state file" in capsys.readouterr().err


def test_sim_health_needs_exactly_one_event(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["sim", "health", "--sim-state=x", "--gpu=0", "--xid=79", "--healthy"])
    assert "not allowed with argument" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("flag", "why"),
    [
        ("--xid=-5", "an Xid is 1 to 4294967295"),
        ("--xid=123456789012345678901234567890", "an Xid is 1 to 4294967295"),
        ("--xid=seventy-nine", "is not an Xid number"),
        ("--gpu=-1", "a GPU index is 0 to 1023"),
    ],
)
def test_sim_health_refuses_impossible_numbers(
    flag: str, why: str, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["sim", "health", "--sim-state=x", "--gpu=0", "--xid=79"]
    name = flag.partition("=")[0]
    args = [a for a in args if a.partition("=")[0] != name] + [flag]
    with pytest.raises(SystemExit) as exited:
        main(args)
    assert exited.value.code == 2
    assert why in capsys.readouterr().err


@pytest.mark.parametrize("garbage", ["[" * 100_000, "{]", "\x00\xff", '{"version": 1}'])
def test_sim_health_refuses_a_garbage_state_file_in_one_line(
    tmp_path: Path, garbage: str, capsys: pytest.CaptureFixture[str]
) -> None:
    state = tmp_path / "state.json"
    state.write_text(garbage)
    assert main(["sim", "health", f"--sim-state={state}", "--gpu=0", "--xid=79"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert f"simulated hardware state {state}" in err
