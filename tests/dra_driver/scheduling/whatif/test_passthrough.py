"""`simulate` with `--passthrough`: VFIO devices placed as the plugin publishes them.

A GPU passed through to a VM withdraws its whole-GPU device from the node's
slices (and a whole GPU in use withdraws its vfio device), so a later claim
lands on another GPU instead of one the node would refuse.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from dra_driver.cli import main


def _claim_pod(name: str, device_class: str, count: int = 1) -> list[dict[str, Any]]:
    return [
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"namespace": "default", "name": name},
            "spec": {
                "devices": {
                    "requests": [
                        {
                            "name": "gpu",
                            "exactly": {"deviceClassName": device_class, "count": count},
                        }
                    ]
                }
            },
        },
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"namespace": "default", "name": name},
            "spec": {
                "containers": [
                    {"name": "c", "image": "x", "resources": {"claims": [{"name": "g"}]}}
                ],
                "resourceClaims": [{"name": "g", "resourceClaimName": name}],
            },
        },
    ]


def _placements(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], docs: list[dict[str, Any]]
) -> dict[str, list[str]]:
    path = tmp_path / "scenario.yaml"
    path.write_text(yaml.safe_dump_all(docs))
    main(["simulate", "-f", str(path), "--nodes", "l4-node=1", "--passthrough", "-o", "yaml"])
    out = yaml.safe_load(capsys.readouterr().out)
    return {
        row["pod"]: [r["device"] for c in row["claims"] for r in c.get("results") or []]
        for row in out
    }


def test_a_vm_after_whole_gpus_gets_a_gpu_none_of_them_holds(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    docs = _claim_pod("trainer", "gpu.nvidia.com", 2) + _claim_pod("vm", "vfio.gpu.nvidia.com")
    placed = _placements(tmp_path, capsys, docs)
    assert placed == {"default/trainer": ["gpu-0", "gpu-1"], "default/vm": ["gpu-vfio-2"]}


def test_whole_gpus_after_a_vm_skip_the_gpu_it_holds(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    docs = _claim_pod("vm", "vfio.gpu.nvidia.com") + _claim_pod("trainer", "gpu.nvidia.com", 3)
    placed = _placements(tmp_path, capsys, docs)
    assert placed == {"default/vm": ["gpu-vfio-0"], "default/trainer": ["gpu-1", "gpu-2", "gpu-3"]}


def test_a_fifth_gpu_does_not_fit_next_to_a_vm_on_a_four_gpu_node(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    docs = _claim_pod("vm", "vfio.gpu.nvidia.com") + _claim_pod("trainer", "gpu.nvidia.com", 4)
    placed = _placements(tmp_path, capsys, docs)
    assert placed == {"default/vm": ["gpu-vfio-0"], "default/trainer": []}
