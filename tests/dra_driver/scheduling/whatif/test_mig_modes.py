"""How `simulate --nodes` publishes MIG: the plugin's default (static), `--mig dynamic`,
the partitionable-devices gate of 1.34/1.35, and NVIDIA's extended-resource specs on GH200."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from dra_driver.cli import main

MIG_POD = """\
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {namespace: default, name: one-mig}
spec:
  spec:
    devices:
      requests:
        - name: mig
          exactly: {deviceClassName: mig.nvidia.com}
---
apiVersion: v1
kind: Pod
metadata: {namespace: default, name: mig-user}
spec:
  containers: [{name: main, image: busybox, resources: {claims: [{name: mig}]}}]
  resourceClaims: [{name: mig, resourceClaimTemplateName: one-mig}]
"""

# The objects of NVIDIA's demo specs `demo/specs/extended-resources/gpu-full.yaml` and
# `mig-1g-12gb.yaml` (k8s-dra-driver-gpu), written for two GH200s: a pod asking for the
# extended resource nvidia.com/gpu, and a DeviceClass that maps that name to 1g.12gb MIG
# devices instead of whole GPUs.
GPU_FULL = """\
apiVersion: v1
kind: Namespace
metadata: {name: extended-resource-gpu-full}
---
apiVersion: v1
kind: Pod
metadata: {namespace: extended-resource-gpu-full, name: gpu-full-pod}
spec:
  restartPolicy: Never
  containers:
    - name: cuda-container
      image: nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0
      resources: {limits: {nvidia.com/gpu: "1"}}
  tolerations: [{key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}]
"""
MIG_1G_12GB = """\
apiVersion: v1
kind: Namespace
metadata: {name: extended-resource-mig-1g12gb}
---
apiVersion: resource.k8s.io/v1
kind: DeviceClass
metadata: {name: mig-1g-12gb.gpu.nvidia.com}
spec:
  selectors:
    - cel:
        expression: "device.driver == 'gpu.nvidia.com' && \\
          device.attributes['gpu.nvidia.com'].type == 'mig' && \\
          device.attributes['gpu.nvidia.com'].profile == '1g.12gb'"
  extendedResourceName: nvidia.com/gpu
---
apiVersion: v1
kind: Pod
metadata: {namespace: extended-resource-mig-1g12gb, name: mig-1g12gb-pod}
spec:
  restartPolicy: Never
  containers:
    - name: cuda-container
      image: nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0
      resources: {limits: {nvidia.com/gpu: "1"}}
  tolerations: [{key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}]
"""
# The spec's prerequisite, as mig-parted would apply it: seven 1g.12gb on each GH200.
GH200_ALL_1G_12GB = """\
driverVersion: "550.127.05"
cudaDriverVersion: 12040
gpus:
  - model: GH200-96GB
    count: 2
    migDevices: [{profile: 1g.12gb, placement: 0}, {profile: 1g.12gb, placement: 1},
                 {profile: 1g.12gb, placement: 2}, {profile: 1g.12gb, placement: 3},
                 {profile: 1g.12gb, placement: 4}, {profile: 1g.12gb, placement: 5},
                 {profile: 1g.12gb, placement: 6}]
"""
EXTENDED_ON_1_35 = ("--kubernetes", "1.35", "--feature-gates", "DRAExtendedResource=true")


def _simulate(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, text: str, *args: str
) -> tuple[int, dict[str, Any], str]:
    path = tmp_path / "objects.yaml"
    path.write_text(text)
    code = main(["simulate", "-f", str(path), *args, "-o", "yaml"])
    captured = capsys.readouterr()
    records = {record["pod"]: record for record in yaml.safe_load(captured.out)}
    return code, records, captured.err


def _devices(record: dict[str, Any]) -> list[str]:
    return [r["device"] for claim in record["claims"] for r in claim["results"]]


def test_nodes_publish_static_mig_by_default_like_the_plugin(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """A DGX A100 boots with MIG on and no instances: the plugin's default publishes nothing."""
    code, pods, _ = _simulate(capsys, tmp_path, MIG_POD, "--nodes", "dgx-a100-40gb=1")
    assert code == 1
    assert not pods["default/mig-user"]["placed"]

    code, pods, err = _simulate(
        capsys, tmp_path, MIG_POD, "--nodes", "dgx-a100-40gb=1", "--kubernetes", "1.36",
        "--mig", "dynamic",
    )  # fmt: skip
    assert code == 0
    assert _devices(pods["default/mig-user"])[0].startswith("gpu-0-mig-")
    assert "note:" not in err


def test_dynamic_mig_on_1_35_without_the_partitionable_gate_is_refused_as_by_the_plugin(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code, pods, err = _simulate(
        capsys, tmp_path, MIG_POD, "--nodes", "dgx-h100=1", "--mig", "dynamic"
    )
    assert code == 1  # H100s boot with MIG off: without dynamic MIG there is no MIG device
    assert not pods["default/mig-user"]["placed"]
    assert (
        "note: --mig dynamic on Kubernetes 1.35: the API server drops the counters that keep "
        "overlapping MIG devices apart (DRAPartitionableDevices is off), so the kubelet plugin "
        "refuses --dynamic-mig and publishes the existing MIG devices only"
    ) in " ".join(err.split())

    gate = ("--feature-gates", "DRAPartitionableDevices=true")
    code, pods, err = _simulate(
        capsys, tmp_path, MIG_POD, "--nodes", "dgx-h100=1", "--mig", "dynamic", *gate
    )
    assert code == 0
    assert pods["default/mig-user"]["placed"]
    assert "note:" not in err


def test_nvidias_gpu_full_spec_fits_on_gh200_node(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code, pods, _ = _simulate(
        capsys, tmp_path, GPU_FULL, "--nodes", "gh200-node=1", *EXTENDED_ON_1_35
    )
    assert code == 0
    record = pods["extended-resource-gpu-full/gpu-full-pod"]
    assert (record["node"], _devices(record)) == ("gh200-node-0", ["gpu-0"])


def test_nvidias_mig_1g_12gb_spec_fits_on_gh200_node_with_dynamic_mig(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """Its class maps nvidia.com/gpu to 1g.12gb MIG devices; being newer than our
    gpu.nvidia.com class, it wins the name, as in the scheduler's cache."""
    dynamic = ("--mig", "dynamic", "--feature-gates",
               "DRAExtendedResource=true,DRAPartitionableDevices=true")  # fmt: skip
    code, pods, _ = _simulate(
        capsys, tmp_path, MIG_1G_12GB, "--nodes", "gh200-node=1", "--kubernetes", "1.35", *dynamic
    )
    assert code == 0
    (device,) = _devices(pods["extended-resource-mig-1g12gb/mig-1g12gb-pod"])
    assert device.startswith("gpu-0-mig-1g12gb-19-")


def test_nvidias_mig_1g_12gb_spec_fits_on_gh200_partitioned_as_the_spec_says(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """Static MIG, the spec's own prerequisite: 7 x 1g.12gb per GH200, made by an admin."""
    shape = tmp_path / "gh200-node.yaml"
    shape.write_text(GH200_ALL_1G_12GB)
    code, pods, _ = _simulate(
        capsys, tmp_path, MIG_1G_12GB, "--nodes", f"{shape}=1", *EXTENDED_ON_1_35
    )
    assert code == 0
    assert _devices(pods["extended-resource-mig-1g12gb/mig-1g12gb-pod"]) == [
        "gpu-0-mig-1g12gb-19-0"
    ]
