"""`dra-gpu` flag checks that stop a mistake before anything runs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from dra_driver.cli import build_parser, main


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


@pytest.mark.parametrize("command", ["inventory", "kubelet-plugin", "status", "cdi"])
def test_node_name_comes_from_the_environment_when_the_flag_is_absent(
    command: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Inside the plugin pod NODE_NAME is set (downward API): the tools need no flag."""
    monkeypatch.setenv("NODE_NAME", "gpu-node-7")
    args = build_parser().parse_args([command, "--nvml", "sim:l4-node"])
    assert args.node_name == "gpu-node-7"
    flagged = build_parser().parse_args([command, "--nvml", "sim:l4-node", "--node-name=n2"])
    assert flagged.node_name == "n2"


def test_inventory_publishes_for_the_node_in_node_name(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("NODE_NAME", "gpu-node-7")
    assert main(["inventory", "--nvml", "sim:l4-node", "-o", "yaml"]) == 0
    (resource_slice,) = yaml.safe_load_all(capsys.readouterr().out)
    assert resource_slice["spec"]["nodeName"] == "gpu-node-7"
    assert resource_slice["spec"]["pool"]["name"] == "gpu-node-7"


@pytest.mark.parametrize("command", ["inventory", "kubelet-plugin"])
def test_without_node_name_or_the_flag_it_says_so_in_one_line(
    command: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("NODE_NAME", raising=False)
    with pytest.raises(SystemExit) as exited:
        main([command, "--nvml", "sim:l4-node"])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert err.splitlines() == [
        f"dra-gpu {command}: the following arguments are required: --node-name "
        f"(see dra-gpu {command} --help)"
    ]


def test_the_tools_fall_back_to_the_simulated_node_name(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NODE_NAME", raising=False)
    for command in ("status", "cdi"):
        assert build_parser().parse_args([command, "--nvml", "sim:l4-node"]).node_name == (
            "sim-node"
        )


def test_pod_uid_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("POD_UID", "0b6f5e4d-1234-4abc-9def-000000000001")
    args = build_parser().parse_args(["kubelet-plugin", "--node-name=n1", "--nvml=real"])
    assert args.pod_uid == "0b6f5e4d-1234-4abc-9def-000000000001"
    monkeypatch.delenv("POD_UID")
    args = build_parser().parse_args(["kubelet-plugin", "--node-name=n1", "--nvml=real"])
    assert args.pod_uid is None  # the classic socket names


@pytest.mark.parametrize(
    ("argv", "why"),
    [
        (["webhook", "--tls-private-key-file", "k"],
         "the following arguments are required: --tls-cert-file"),
        (["webhook", "--tls-cert-file", "c", "--tls-private-key-file", "k", "--port", "0"],
         "argument --port: port 0 is not in 1..65535"),
        (["webhook", "--tls-cert-file", "c", "--tls-private-key-file", "k", "--port", "https"],
         "argument --port: 'https' is not a port number"),
    ],
)  # fmt: skip
def test_webhook_flags_as_nvidias_a_bad_one_in_one_line(
    argv: list[str], why: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 2
    assert capsys.readouterr().err == f"dra-gpu webhook: {why} (see dra-gpu webhook --help)\n"


def test_passthrough_and_dynamic_mig_are_refused_together(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code = main(
        ["kubelet-plugin", "--nvml", "sim:l4-node", "--node-name", "n", "--passthrough",
         "--dynamic-mig"]
    )  # fmt: skip
    assert code != 0
    err = capsys.readouterr().err
    assert "--passthrough and --dynamic-mig cannot be combined" in err


def test_passthrough_needs_the_nvml_health_checks_off(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["kubelet-plugin", "--nvml", "sim:l4-node", "--node-name", "n", "--passthrough"])
    assert code != 0
    err = capsys.readouterr().err
    assert "--passthrough needs --no-device-health-checks" in err


PLUGIN = ["kubelet-plugin", "--nvml", "sim:l4-node", "--node-name", "n"]
GATE = ["--feature-gates", "PassthroughSupport=true"]


@pytest.mark.parametrize(
    ("argv", "why"),
    [
        ([*GATE, "--dynamic-mig"], "PassthroughSupport=true and --dynamic-mig cannot be combined"),
        (GATE, "PassthroughSupport=true needs --no-device-health-checks"),
        (["--passthrough", "--feature-gates", "PassthroughSupport=false"], "contradict each other"),
    ],
)
def test_nvidias_passthrough_gate_is_refused_where_the_flag_is(
    argv: list[str], why: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([*PLUGIN, *argv]) == 2
    assert why in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "passthrough"),
    [
        ([*GATE, "--no-device-health-checks"], True),
        (["--passthrough", "--no-device-health-checks"], True),
        (["--feature-gates", "PassthroughSupport=false"], False),
        ([], False),
    ],
)
def test_nvidias_passthrough_gate_turns_passthrough_on_in_the_plugin(
    argv: list[str], passthrough: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What the plugin daemon is started with (kubelet_plugin.main.run, not run here)."""
    import kubelet_plugin.main

    started: list[kubelet_plugin.main.PluginOptions] = []

    def run(options: kubelet_plugin.main.PluginOptions) -> int:
        started.append(options)
        return 0

    monkeypatch.setattr(kubelet_plugin.main, "run", run)
    assert main([*PLUGIN, *argv]) == 0
    (options,) = started
    assert options.passthrough is passthrough
