"""`simulate` and `explain` with a CEL optional selector, the way a user writes one.

`device.attributes["gpu.nvidia.com"].?productName.orValue("") == "..."` is
accepted by the real scheduler (CEL optional types are enabled in every
Kubernetes CEL environment since 1.28), so both commands must place with it
instead of calling it a syntax error.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from dra_driver.cli import main
from tests.fakes import make_resource_slice, make_slice_device

H100 = "NVIDIA H100 80GB HBM3"
OPTIONAL_H100 = f'device.attributes["gpu.nvidia.com"].?productName.orValue("") == "{H100}"'


def _claim(name: str, selector: str) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"namespace": "ml", "name": name},
        "spec": {
            "devices": {
                "requests": [
                    {
                        "name": "gpu",
                        "exactly": {
                            "deviceClassName": "gpu.nvidia.com",
                            "selectors": [{"cel": {"expression": selector}}],
                        },
                    }
                ]
            }
        },
    }


def _pod(name: str, claim: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"namespace": "ml", "name": name},
        "spec": {
            "containers": [
                {"name": "main", "image": "busybox", "resources": {"claims": [{"name": "gpu"}]}}
            ],
            "resourceClaims": [{"name": "gpu", "resourceClaimName": claim}],
        },
    }


def test_simulate_places_an_optional_selector_on_the_h100_node(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "pods.yaml"
    path.write_text(
        yaml.safe_dump_all([_claim("h100", OPTIONAL_H100), _pod("train", "h100")]),
        encoding="utf-8",
    )

    code = main(["simulate", "-f", str(path), "--nodes", "l4-node=1,dgx-h100=1", "-o", "yaml"])
    captured = capsys.readouterr()

    assert code == 0, captured.err
    (record,) = yaml.safe_load(captured.out)
    assert record["node"] == "dgx-h100-0"
    assert [r["device"] for c in record["claims"] for r in c["results"]] == ["gpu-0"]


def test_explain_fits_an_optional_selector_past_devices_without_the_attribute(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The MIG device comes first and has no productName: a plain `.productName`
    # selector aborts there with a CEL runtime error; the optional one moves on.
    devices = [
        make_slice_device("gpu-0-mig-1g-0", attributes={"type": "mig", "profile": "1g.10gb"}),
        make_slice_device("gpu-1", attributes={"type": "gpu", "productName": H100}),
    ]
    path = tmp_path / "cluster.yaml"
    path.write_text(
        yaml.safe_dump_all(
            [
                make_resource_slice("n1-gpus", node="n1", devices=devices),
                _claim("h100", OPTIONAL_H100),
            ]
        ),
        encoding="utf-8",
    )

    code = main(["explain", "-f", str(path), "--claim", "ml/h100", "--node", "n1"])
    out = capsys.readouterr().out

    assert code == 0, out
    assert "Outcome: fits on 1 of 1 node; first: n1" in out
    assert "error" not in out.lower()


def test_explain_reports_an_unmatched_optional_selector_as_false(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    selector = 'device.attributes["gpu.nvidia.com"].?productName.orValue("") == "NVIDIA B200"'
    path = tmp_path / "claim.yaml"
    path.write_text(yaml.safe_dump(_claim("b200", selector)), encoding="utf-8")

    code = main(["explain", "-f", str(path), "--nodes", "dgx-h100=1"])
    out = capsys.readouterr().out

    assert code == 1
    assert "Outcome: does not fit on dgx-h100-0" in out
    assert (
        "Why: request gpu: no device has productName == 'NVIDIA B200' "
        f"(8 devices have '{H100}')" in out
    )
    assert "request selector #0 is false" in out
