"""`simulate` reads ComputeDomains: the controller's workload template, channel claims placed."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml

from dra_driver.cli import main

# NVIDIA's demo/specs/imex/channel-injection.yaml, as quoted in computedomain.md §1.4.
CHANNEL_INJECTION = """\
apiVersion: resource.nvidia.com/v1beta1
kind: ComputeDomain
metadata:
  name: imex-channel-injection
spec:
  numNodes: 1
  channel:
    resourceClaimTemplate:
      name: imex-channel-0
---
apiVersion: v1
kind: Pod
metadata:
  name: imex-channel-injection
spec:
  containers:
  - name: ctr
    image: ubuntu:22.04
    command: ["bash", "-c"]
    args: ["ls -la /dev/nvidia-caps-imex-channels; trap 'exit 0' TERM; sleep 9999 & wait"]
    resources:
      claims:
      - name: imex-channel-0
  resourceClaims:
  - name: imex-channel-0
    resourceClaimTemplateName: imex-channel-0
"""
DOMAIN_UID = str(
    uuid.uuid5(uuid.NAMESPACE_URL, "resource.nvidia.com/default/imex-channel-injection")
)


def _simulate(
    tmp_path: Path, text: str, nodes: str, capsys: pytest.CaptureFixture[str]
) -> tuple[int, list[dict[str, Any]]]:
    path = tmp_path / "imex.yaml"
    path.write_text(text)
    code = main(["simulate", "--nodes", nodes, "-f", str(path), "-o", "yaml"])
    return code, yaml.safe_load(capsys.readouterr().out) or []


def _pods(count: int) -> str:
    pod = CHANNEL_INJECTION.split("---\n")[1]
    return "".join(
        "---\n" + pod.replace("name: imex-channel-injection\n", f"name: worker-{i}\n")
        for i in range(count)
    )


def test_nvidias_channel_injection_demo_gets_channel_0_on_a_gb200_node(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, placements = _simulate(tmp_path, CHANNEL_INJECTION, "gb200-node=2", capsys)
    assert code == 0
    (placement,) = placements
    assert (placement["pod"], placement["placed"]) == ("default/imex-channel-injection", True)
    (claim,) = placement["claims"]
    assert claim["results"] == [
        {
            "request": "channel",
            "driver": "compute-domain.nvidia.com",
            "pool": placement["node"],
            "device": "channel-0",
        }
    ]
    (config,) = claim["config"]
    assert config["opaque"]["parameters"] == {
        "apiVersion": "resource.nvidia.com/v1beta1",
        "kind": "ComputeDomainChannelConfig",
        "domainID": DOMAIN_UID,
        "allocationMode": "Single",
    }


def test_the_channel_injection_demo_places_on_a_gb300_node_too(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, placements = _simulate(tmp_path, CHANNEL_INJECTION, "dgx-h100=1,gb300-node=1", capsys)
    assert code == 0
    (placement,) = placements
    assert (placement["node"], placement["placed"]) == ("gb300-node-0", True)
    (claim,) = placement["claims"]
    assert [r["device"] for r in claim["results"]] == ["channel-0"]


def test_one_channel_claim_per_node_as_nvidia(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Channel 0 is one device per node, so each pod of the domain lands on its own node."""
    text = CHANNEL_INJECTION.split("---\n", 1)[0] + _pods(3)
    code, placements = _simulate(tmp_path, text, "gb200-node=2", capsys)
    assert code == 1
    assert [(p["pod"], p["placed"]) for p in placements] == [
        ("default/worker-0", True),
        ("default/worker-1", True),
        ("default/worker-2", False),
    ]
    assert {p["node"] for p in placements[:2]} == {"gb200-node-0", "gb200-node-1"}


def test_nodes_without_a_multi_node_fabric_get_no_channel(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, placements = _simulate(tmp_path, CHANNEL_INJECTION, "dgx-h100=1", capsys)
    assert code == 1
    (placement,) = placements
    assert placement["placed"] is False
    assert placement["reason"].startswith(
        "the node publishes no compute-domain.nvidia.com devices: dgx-h100-0: no GPU is in a "
        "multi-node NVLink clique"
    )


def test_a_malformed_compute_domain_is_refused_naming_file_and_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "imex.yaml"
    path.write_text(CHANNEL_INJECTION.replace("numNodes: 1", "numNodes: one"))
    assert main(["simulate", "--nodes", "gb200-node=1", "-f", str(path)]) == 2
    err = capsys.readouterr().err
    field = "spec.numNodes: Input should be a valid integer"
    assert f"ComputeDomain default/imex-channel-injection: {field}" in err
    assert str(path) in err


def test_a_template_of_the_same_name_is_a_conflict(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    template = (
        "---\napiVersion: resource.k8s.io/v1\nkind: ResourceClaimTemplate\n"
        "metadata:\n  name: imex-channel-0\nspec:\n  spec:\n    devices: {}\n"
    )
    path = tmp_path / "imex.yaml"
    path.write_text(CHANNEL_INJECTION + template)
    assert main(["simulate", "--nodes", "gb200-node=1", "-f", str(path)]) == 2
    assert (
        "ResourceClaimTemplate default/imex-channel-0 is also defined in" in capsys.readouterr().err
    )


def test_the_clique_node_label_places_nvidias_recommended_affinity(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """NVIDIA's docs: `numNodes: 0` and node affinity on `nvidia.com/gpu.clique Exists`."""
    affinity = (
        "  affinity:\n    nodeAffinity:\n      requiredDuringSchedulingIgnoredDuringExecution:\n"
        "        nodeSelectorTerms:\n        - matchExpressions:\n"
        "          - key: nvidia.com/gpu.clique\n            operator: Exists\n"
    )
    text = CHANNEL_INJECTION.replace("numNodes: 1", "numNodes: 0").replace(
        "spec:\n  containers:", "spec:\n" + affinity + "  containers:"
    )
    code, placements = _simulate(tmp_path, text, "dgx-h100=1,gb200-node=1", capsys)
    assert code == 0
    assert [p["node"] for p in placements] == ["gb200-node-0"]
    code, placements = _simulate(tmp_path, text, "dgx-h100=1", capsys)
    assert code == 1
    assert placements[0]["reason"] == "no node matches the pod's required node affinity"
