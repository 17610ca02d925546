"""What the node's plugin would refuse at Prepare, `simulate` does not place (the same rules)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from dra_driver.cli import main

GPU_CONFIG = {"apiVersion": "resource.nvidia.com/v1beta1", "kind": "GpuConfig"}
TIME_SLICED = {**GPU_CONFIG, "sharing": {"strategy": "TimeSlicing"}}


def _claim(
    name: str,
    parameters: dict[str, Any],
    *,
    device_class: str = "gpu.nvidia.com",
    count: int = 1,
    capacity: dict[str, str] | None = None,
    selector: str | None = None,
) -> dict[str, Any]:
    exactly: dict[str, Any] = {"deviceClassName": device_class, "count": count}
    if capacity:
        exactly["capacity"] = {"requests": capacity}
    if selector:
        exactly["selectors"] = [{"cel": {"expression": selector}}]
    config = {"requests": ["dev"], "opaque": {"driver": "gpu.nvidia.com", "parameters": parameters}}
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"namespace": "default", "name": name},
        "spec": {
            "devices": {"requests": [{"name": "dev", "exactly": exactly}], "config": [config]}
        },
    }


def _ts(interval: str) -> dict[str, Any]:
    return {**TIME_SLICED, "sharing": {**TIME_SLICED["sharing"],
                                       "timeSlicingConfig": {"interval": interval}}}  # fmt: skip


def _simulate(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], claims: list[dict[str, Any]], *args: str
) -> tuple[int, dict[str, dict[str, Any]]]:
    path = tmp_path / "claims.yaml"
    path.write_text(yaml.safe_dump_all(claims))
    code = main(["simulate", "-f", str(path), *args, "-o", "yaml"])
    records = yaml.safe_load(capsys.readouterr().out)
    return code, {record["pod"].split("/")[-1]: record for record in records}


@pytest.mark.parametrize(
    ("parameters", "error"),
    [
        (
            {**GPU_CONFIG, "sharing": {"strategy": "TimeSliced"}},
            "sharing.strategy: Input should be",
        ),
        (
            {**GPU_CONFIG, "sharing": {"strategy": "TimeSlicing", "timeSlicingConfg": {}}},
            "sharing.timeSlicingConfg: Extra inputs are not permitted",
        ),
        (_ts("Longest"), "sharing.timeSlicingConfig.interval: Input should be"),
        ({**TIME_SLICED, "kind": "GpuConfigg"}, "kind is 'GpuConfigg'"),
        ({**TIME_SLICED, "apiVersion": "v1"}, "apiVersion: Input should be"),
    ],
)
def test_configs_the_plugin_cannot_decode_are_not_placed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], parameters: dict[str, Any], error: str
) -> None:
    code, pods = _simulate(tmp_path, capsys, [_claim("ts", parameters)], "--nodes", "l4-node=1")

    assert code == 1
    reason = pods["ts"]["reason"]
    assert reason.startswith(
        "allocated on l4-node-0, but the node's kubelet plugin refuses to prepare it: "
        "ResourceClaim default/ts: status.allocation.devices.config[0] (FromClaim): "
    )
    assert error in reason


def test_mps_on_two_gpus_and_a_gpu_config_on_a_mig_device_are_not_placed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    mps = {**GPU_CONFIG, "sharing": {"strategy": "MPS"}}
    claims = [
        _claim("mps-two", mps, count=2),
        _claim(
            "gpu-config-on-mig",
            _ts("Long"),
            device_class="mig.nvidia.com",
            selector="device.attributes['gpu.nvidia.com'].profile == '1g.10gb'",
        ),
    ]
    dynamic = ("--mig", "dynamic", "--feature-gates", "DRAPartitionableDevices=true")
    code, pods = _simulate(tmp_path, capsys, claims, "--nodes", "dgx-h100=1", *dynamic)

    assert code == 1
    assert "asks for MPS on 2 devices (gpu-0, gpu-1)" in pods["mps-two"]["reason"]
    # As in a cluster, the refused claim keeps its allocation: gpu-0 and gpu-1 stay taken.
    assert (
        "a GpuConfig names request 'dev', but its device gpu-2-mig-1g10gb-19-6 is a mig device; "
        "use MigDeviceConfig"
    ) in pods["gpu-config-on-mig"]["reason"]


def test_two_time_slice_intervals_on_one_shared_gpu(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Under --consumable-shares 4 both claims get a share of gpu-0; its interval is one."""
    claims = [
        _claim("short", _ts("Short"), capacity={"shares": "1"}),
        _claim("long", _ts("Long"), capacity={"shares": "1"}),
        _claim("short-too", _ts("Short"), capacity={"shares": "1"}),
    ]
    code, pods = _simulate(
        tmp_path, capsys, claims, "--nodes", "l4-node=1", "--consumable-shares", "4"
    )

    assert code == 1
    assert pods["short"]["placed"]
    assert pods["short-too"]["placed"]
    assert not pods["long"]["placed"]
    assert "asks for time-slice interval Long on GPU" in pods["long"]["reason"]
    assert "but claim default/short" in pods["long"]["reason"]


def test_explain_gives_the_plugins_refusal_as_why(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "claims.yaml"
    path.write_text(yaml.safe_dump(_claim("ts", {**TIME_SLICED, "kind": "GpuConfigg"})))

    assert main(["explain", "-f", str(path), "--nodes", "l4-node=1", "--claim", "ts"]) == 1
    out = capsys.readouterr().out
    assert (
        "Outcome: the scheduler allocates it on l4-node-0, but the node's kubelet plugin "
        "refuses to prepare it\n"
        "Why: ResourceClaim default/ts: status.allocation.devices.config[0] (FromClaim): "
        "kind is 'GpuConfigg'"
    ) in out
