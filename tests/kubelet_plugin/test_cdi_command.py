"""`dra-gpu cdi` and the driver-root flags, on simulated nodes and fake roots."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from dra_driver.cli import build_parser, main
from tests.dra_driver.container.driver_roots import build_root


def test_cdi_prints_the_common_edits_of_a_simulated_node(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    state = tmp_path / "state.json"
    assert main(["cdi", "--nvml", "sim:l4-node", "--sim-state", str(state)]) == 0
    out = capsys.readouterr().out
    header, _, body = out.partition("\n")
    assert header == f"# NVIDIA driver 570.172.08, driver root {state}.driver-root"
    edits = yaml.safe_load(body)["containerEdits"]
    assert "/dev/nvidiactl" in [n["path"] for n in edits["deviceNodes"]]
    mounts = {m["containerPath"]: m["hostPath"] for m in edits["mounts"]}
    assert mounts["/usr/bin/nvidia-smi"] == f"{state}.driver-root/usr/bin/nvidia-smi"
    assert mounts["/etc/vulkan/icd.d/nvidia_icd.json"] == (
        f"{state}.driver-root/usr/share/vulkan/icd.d/nvidia_icd.json"
    )
    assert [h["args"][1] for h in edits["hooks"]] == [
        "create-symlinks",
        "create-symlinks",
        "enable-cuda-compat",
        "update-ldcache",
        "disable-device-node-modification",
        "update-application-profile",
    ]
    gpu = yaml.safe_load(body)["devices"][0]  # the node's first GPU and its DRM nodes
    assert gpu["name"] == "gpu-0"
    assert [n["path"] for n in gpu["containerEdits"]["deviceNodes"]] == [
        "/dev/nvidia0",
        "/dev/dri/card1",
        "/dev/dri/renderD128",
    ]


def test_cdi_hooks_can_be_disabled_for_an_old_toolkit(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    state = tmp_path / "state.json"
    args = ["cdi", "--nvml", "sim:l4-node", "--sim-state", str(state), "-o", "json"]
    old = [
        "--disable-cdi-hook",
        "update-application-profile",
        "--disable-cdi-hook",
        "enable-cuda-compat",
    ]
    assert main([*args, *old]) == 0
    edits = yaml.safe_load(capsys.readouterr().out)["containerEdits"]
    assert "update-application-profile" not in [h["args"][1] for h in edits["hooks"]]
    assert "enable-cuda-compat" not in [h["args"][1] for h in edits["hooks"]]
    assert main([*args, "--disable-cdi-hook", "all"]) == 0
    doc = yaml.safe_load(capsys.readouterr().out)
    assert "hooks" not in doc["containerEdits"]
    assert "hooks" not in doc["devices"][0]["containerEdits"]
    lib = "/usr/lib/x86_64-linux-gnu"
    assert f"{lib}/libcuda.so.1" in [m["containerPath"] for m in doc["containerEdits"]["mounts"]]
    assert main([*args, "--disable-cdi-hook", "chmod"]) == 2
    assert "--disable-cdi-hook 'chmod': not one of NVIDIA's hook names" in capsys.readouterr().err


def test_cdi_reads_a_gpu_operator_root_from_the_environment(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    root = build_root(tmp_path, "gpu-operator")
    monkeypatch.setenv("NVIDIA_DRIVER_ROOT", "/run/nvidia/driver")
    monkeypatch.setenv("DRIVER_ROOT_CTR_PATH", str(root.container_root))
    monkeypatch.setenv("NVIDIA_CDI_HOOK_PATH", "/usr/local/nvidia/toolkit/nvidia-cdi-hook")
    assert main(["cdi", "--nvml", "sim:l4-node", "-o", "json"]) == 0
    edits = yaml.safe_load(capsys.readouterr().out)["containerEdits"]
    lib = "/usr/lib/x86_64-linux-gnu/libcuda.so.570.172.08"
    assert {m["containerPath"]: m["hostPath"] for m in edits["mounts"]}[lib] == (
        "/run/nvidia/driver" + lib
    )
    assert {h["path"] for h in edits["hooks"]} == {"/usr/local/nvidia/toolkit/nvidia-cdi-hook"}


def test_cdi_on_a_root_without_the_driver_says_so(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    (tmp_path / "empty").mkdir()
    code = main(["cdi", "--nvml", "sim:l4-node", "--nvidia-driver-root", str(tmp_path / "empty")])
    assert code == 2
    assert "no libcuda.so.570.172.08 in any library directory" in capsys.readouterr().err


@pytest.mark.parametrize(
    "command",
    [["inventory", "--node-name=n"], ["kubelet-plugin", "--node-name=n"], ["mig", "status"]],
)
def test_driver_root_flags_exist_where_nvidia_has_them(command: list[str]) -> None:
    args = build_parser().parse_args(
        [
            *command,
            "--nvml=real",
            "--nvidia-driver-root=/run/nvidia/driver",
            "--container-driver-root=/driver-root",
            "--nvidia-cdi-hook-path=/opt/nvidia-cdi-hook",
            "--disable-cdi-hook=update-application-profile",
        ]
    )
    assert (args.nvidia_driver_root, args.container_driver_root, args.nvidia_cdi_hook_path) == (
        "/run/nvidia/driver",
        "/driver-root",
        "/opt/nvidia-cdi-hook",
    )
    assert args.disable_cdi_hook == ["update-application-profile"]


def test_demo_shows_the_mounts_a_claim_gets() -> None:
    import io

    from dra_driver.composition.demo import run_demo
    from dra_driver.scheduling.whatif.node_allocation import allocate_on_node

    out = io.StringIO()
    assert run_demo(allocate=allocate_on_node, out=out) == 0
    text = out.getvalue()
    assert "driver files mounted read-only into the claim's containers" in text
    assert "/usr/lib/x86_64-linux-gnu/libcuda.so.570.172.08  <-  <work dir>/" in text
    assert "/etc/vulkan/icd.d/nvidia_icd.json  <-  <work dir>/" in text
    assert "hooks (nvidia-cdi-hook): create-symlinks, enable-cuda-compat" in text
    assert (
        "/usr/bin/nvidia-smi  <-  <work dir>/sim-state.json.driver-root/usr/bin/nvidia-smi" in text
    )
