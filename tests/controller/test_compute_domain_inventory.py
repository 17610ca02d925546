"""`dra-gpu inventory --driver compute-domain.nvidia.com`: the second driver's slice."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from dra_driver.cli import main
from dra_driver.kube.strict_schema import describe, strict_errors

CD = ("inventory", "--node-name", "gb-0", "--nvml", "sim:gb200-node")
DRIVER = ("--driver", "compute-domain.nvidia.com")
CLIQUE = "00000000-0000-0000-0000-000000000001.0"


def test_a_gb200_node_publishes_channel_and_daemon(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*CD, *DRIVER, "-o", "yaml"]) == 0
    (resource_slice,) = yaml.safe_load_all(capsys.readouterr().out)
    assert resource_slice["metadata"]["name"] == "gb-0-compute-domain.nvidia.com-0"
    assert resource_slice["spec"]["driver"] == "compute-domain.nvidia.com"
    assert resource_slice["spec"]["pool"] == {
        "name": "gb-0",
        "generation": 0,
        "resourceSliceCount": 1,
    }
    devices = {d["name"]: d["attributes"] for d in resource_slice["spec"]["devices"]}
    assert devices == {
        "channel-0": {
            "type": {"string": "channel"},
            "id": {"int": 0},
            "cliqueID": {"string": CLIQUE},
        },
        "daemon-0": {
            "type": {"string": "daemon"},
            "id": {"int": 0},
            "cliqueID": {"string": CLIQUE},
        },
    }
    for release in ("1.35.0", "1.37.0"):
        errors = strict_errors(resource_slice, release)
        assert errors == [], [describe(e) for e in errors]

    assert main([*CD, *DRIVER, "-o", "json"]) == 0
    (listed,) = json.loads(capsys.readouterr().out)["items"]
    assert listed == resource_slice

    assert main([*CD, *DRIVER]) == 0
    assert capsys.readouterr().out == (
        "DEVICE     TYPE     CLIQUE\n"
        f"channel-0  channel  {CLIQUE}\n"
        f"daemon-0   daemon   {CLIQUE}\n"
        "2 devices in 1 ResourceSlice(s)\n"
    )


def test_a_node_without_fabric_publishes_an_empty_pool_and_says_why(
    capsys: pytest.CaptureFixture[str],
) -> None:
    args = ["inventory", "--node-name", "n1", "--nvml", "sim:dgx-h100", *DRIVER]
    assert main([*args, "-o", "yaml"]) == 0
    captured = capsys.readouterr()
    (resource_slice,) = yaml.safe_load_all(captured.out)
    assert resource_slice["spec"]["devices"] == []
    assert "warning: nothing published: no GPU is in a multi-node NVLink clique" in captured.err
    assert main(args) == 0
    assert "0 devices in 1 ResourceSlice(s)\nnothing published: no GPU" in capsys.readouterr().out


def test_a_registering_fabric_withholds_the_channel(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    shape = tmp_path / "tray.yaml"
    shape.write_text(
        "gpus:\n  - model: GB200\n    count: 2\nfabric:\n"
        "  clusterUuid: 00000000-0000-0000-0000-000000000001\n  cliqueId: 0\n"
        "  state: in_progress\n"
    )
    assert main(["inventory", "--node-name", "gb-0", "--nvml", f"sim:{shape}", *DRIVER]) == 0
    out = capsys.readouterr().out
    assert "0 devices in 1 ResourceSlice(s)" in out
    assert "gpu-0 (GPU-" in out
    assert "has an NVLink fabric registering (state in-progress" in out


def test_without_driver_the_gpu_inventory_is_unchanged(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*CD, "-o", "yaml"]) == 0
    default = capsys.readouterr().out
    assert main([*CD, "-o", "yaml", "--driver", "gpu.nvidia.com"]) == 0
    assert capsys.readouterr().out == default
    (resource_slice,) = yaml.safe_load_all(default)
    assert resource_slice["spec"]["driver"] == "gpu.nvidia.com"
    assert [d["name"] for d in resource_slice["spec"]["devices"]] == [f"gpu-{i}" for i in range(4)]


def test_gpu_only_flags_are_refused_for_the_second_driver(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main([*CD, *DRIVER, "--dynamic-mig"]) == 2
    assert (
        "--dynamic-mig and --consumable-shares apply to gpu.nvidia.com only"
        in capsys.readouterr().err
    )
