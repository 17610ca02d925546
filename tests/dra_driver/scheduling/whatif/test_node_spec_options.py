"""`--nodes gb200-node:fabric=in-progress`, `gb200-node:clique=1=4`: no shape file needed."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from dra_driver.cli import main
from dra_driver.errors import ConfigError
from dra_driver.hardware.nvml import fabric
from dra_driver.scheduling.whatif.nodes import NodeRequest, parse_node_spec

WORKLOAD = """\
apiVersion: resource.nvidia.com/v1beta1
kind: ComputeDomain
metadata:
  name: x
spec:
  channel:
    resourceClaimTemplate:
      name: x-channel
---
apiVersion: v1
kind: Pod
metadata:
  name: x-0
spec:
  containers:
  - name: ctr
    image: ubuntu:22.04
    resources:
      claims:
      - name: channel
  resourceClaims:
  - name: channel
    resourceClaimTemplateName: x-channel
"""


def test_options_name_their_nodes_and_the_count_stays_optional() -> None:
    assert parse_node_spec("gb200-node=2,gb200-node:fabric=in_progress,gb200-node:clique=1=4") == [
        NodeRequest("gb200-node", 2),
        NodeRequest("gb200-node", 1, fabric_state=fabric.STATE_IN_PROGRESS),
        NodeRequest("gb200-node", 4, clique=1),
    ]
    prefixes = [r.prefix for r in parse_node_spec("gb200-node:clique=1:fabric=not-started=2")]
    assert prefixes == ["gb200-node-clique1-not-started"]


@pytest.mark.parametrize(
    ("spec", "error"),
    [
        ("gb200-node:fabric=done", "fabric=done: expected one of not-supported, not-started"),
        ("gb200-node:clique=x=2", "clique=x: expected an integer 0..4294967295"),
        ("gb200-node:rack=1", "unknown option 'rack' (options: fabric, clique"),
        ("gb200-node:clique", "option 'clique' needs a value (SHAPE:clique=VALUE[=COUNT])"),
    ],
)
def test_a_bad_option_is_named(spec: str, error: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_node_spec(spec)
    assert str(caught.value).startswith(f"--nodes '{spec}': ")
    assert error in str(caught.value)


def test_a_fabric_still_registering_publishes_no_channel_and_explain_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "x.yaml"
    path.write_text(WORKLOAD)
    assert main(["explain", "-f", str(path), "--nodes", "gb200-node:fabric=in-progress"]) == 1
    out = capsys.readouterr().out
    assert (
        "Why: the node publishes no compute-domain.nvidia.com devices: gb200-node-in-progress-0: "
        "gpu-0 (GPU-"
    ) in out
    assert "has an NVLink fabric registering (state in-progress" in out
    code = main(
        ["simulate", "-f", str(path), "--nodes", "gb200-node:fabric=completed", "-o", "yaml"]
    )
    assert code == 0
    assert yaml.safe_load(capsys.readouterr().out)[0]["node"] == "gb200-node-completed-0"


def test_another_rack_is_another_clique(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "x.yaml"
    path.write_text(WORKLOAD)
    assert main(["simulate", "-f", str(path), "--nodes", "gb200-node:clique=7", "-o", "json"]) == 0
    (placement,) = yaml.safe_load(capsys.readouterr().out)
    assert placement["node"] == "gb200-node-clique7-0"


def test_a_shape_without_a_fabric_takes_no_fabric_options(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "x.yaml"
    path.write_text(WORKLOAD)
    assert main(["simulate", "-f", str(path), "--nodes", "dgx-h100:clique=1"]) == 2
    assert "--nodes dgx-h100: the shape has no NVLink fabric" in capsys.readouterr().err
