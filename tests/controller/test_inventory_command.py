"""`dra-gpu inventory` shows what the plugin would publish, sharing included."""

from __future__ import annotations

import pytest
import yaml

from dra_driver.cli import build_parser, main

ARGS = ("inventory", "--node-name", "n1", "--nvml", "sim:dgx-h100")


def test_consumable_shares_are_published_and_summarised(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main([*ARGS, "--consumable-shares", "4", "-o", "yaml"]) == 0
    devices = [d for s in yaml.safe_load_all(capsys.readouterr().out) for d in s["spec"]["devices"]]
    assert len(devices) == 8
    assert all(d["allowMultipleAllocations"] is True for d in devices)
    assert {d["capacity"]["shares"]["value"] for d in devices} == {"4"}

    assert main([*ARGS, "--consumable-shares", "4"]) == 0
    assert capsys.readouterr().out.endswith(
        "8 devices in 1 ResourceSlice(s)\n8 devices may be shared between claims, 4 shares each\n"
    )
    assert main(list(ARGS)) == 0
    assert "shared" not in capsys.readouterr().out


def test_the_plugin_takes_the_same_flag() -> None:
    args = build_parser().parse_args(
        ["kubelet-plugin", "--node-name", "n1", "--nvml", "real", "--consumable-shares", "memory"]
    )
    assert args.consumable_shares == "memory"
