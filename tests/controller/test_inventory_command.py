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


def test_a_gpu_in_mig_mode_without_mig_devices_is_named_in_the_summary(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """dgx-a100-40gb boots with MIG on and no instances: static MIG publishes nothing."""
    args = ("inventory", "--node-name", "n1", "--nvml", "sim:dgx-a100-40gb")
    assert main(list(args)) == 0
    out = capsys.readouterr().out
    assert "0 devices in 1 ResourceSlice(s)" in out
    assert (
        "8 GPUs have MIG mode on but no MIG devices, so nothing is published for them: "
        "gpu-0, gpu-1, gpu-2, gpu-3, gpu-4, gpu-5, gpu-6, gpu-7 (create MIG devices, or run "
        "the plugin with --dynamic-mig)"
    ) in out
    assert main([*args, "--dynamic-mig"]) == 0  # dynamic MIG offers their placements
    assert "no MIG devices" not in capsys.readouterr().out


def test_grace_gpus_show_addressing_mode_and_list_numa_nodes_under_the_gate(
    capsys: pytest.CaptureFixture[str],
) -> None:
    gh200 = ("inventory", "--node-name", "n1", "--nvml", "sim:gh200-node", "-o", "yaml")
    gate = ("--feature-gates", "DRAListTypeAttributes=true")
    assert main([*gh200, *gate]) == 0
    (listed,) = yaml.safe_load_all(capsys.readouterr().out)
    assert [
        d["attributes"]["resource.kubernetes.io/numaNode"] for d in listed["spec"]["devices"]
    ] == [
        {"ints": [0]},
        {"ints": [1]},
    ]
    assert {d["attributes"]["addressingMode"]["string"] for d in listed["spec"]["devices"]} == {
        "ATS"
    }
    assert main(list(gh200)) == 0
    (plain,) = yaml.safe_load_all(capsys.readouterr().out)
    assert plain["spec"]["devices"][1]["attributes"]["resource.kubernetes.io/numaNode"] == {
        "int": 1
    }


@pytest.mark.parametrize("command", ["inventory", "kubelet-plugin"])
def test_an_unknown_feature_gate_is_refused_naming_the_known_ones(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = [command, "--node-name", "n1", "--nvml", "sim:l4-node", "--feature-gates", "Lists=1"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.splitlines() == [
        f"dra-gpu {command}: --feature-gates 'Lists=1': expected NAME=true|false with NAME one "
        "of DRAListTypeAttributes, PassthroughSupport"
    ]


def test_passthrough_adds_a_vfio_device_per_gpu(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*ARGS, "--passthrough", "-o", "yaml"]) == 0
    devices = [d for s in yaml.safe_load_all(capsys.readouterr().out) for d in s["spec"]["devices"]]
    vfio = sorted(d["name"] for d in devices if d["attributes"]["type"] == {"string": "vfio"})
    assert vfio == [f"gpu-vfio-{i}" for i in range(8)]
    assert main(list(ARGS)) == 0
    assert "gpu-vfio" not in capsys.readouterr().out


def test_nvidias_passthrough_support_gate_is_the_passthrough_flag(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main([*ARGS, "--passthrough", "-o", "yaml"]) == 0
    flagged = capsys.readouterr().out
    assert main([*ARGS, "--feature-gates", "PassthroughSupport=true", "-o", "yaml"]) == 0
    gated = capsys.readouterr().out
    assert "gpu-vfio-7" in gated
    assert gated == flagged
    assert main([*ARGS, "--feature-gates", "PassthroughSupport=false"]) == 0
    assert "gpu-vfio" not in capsys.readouterr().out


def test_the_passthrough_flag_and_the_gate_turned_off_are_refused_together(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main([*ARGS, "--passthrough", "--feature-gates", "PassthroughSupport=false"]) == 2
    assert capsys.readouterr().err.splitlines() == [
        "dra-gpu inventory: --passthrough and --feature-gates PassthroughSupport=false "
        "contradict each other: PassthroughSupport is NVIDIA's name for --passthrough; give one"
    ]
