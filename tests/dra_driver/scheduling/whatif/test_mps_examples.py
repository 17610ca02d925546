"""The MPS examples place as their comments say: every pod on the one device their claim shares."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from dra_driver.cli import main

EXAMPLES = Path(__file__).resolve().parents[4] / "examples"


@pytest.mark.parametrize(
    ("example", "pods", "device_prefix", "kind"),
    [
        ("gpu-mps.yaml", 4, "gpu-", "GpuConfig"),
        ("mig-mps.yaml", 3, "gpu-0-mig-1g10gb-19-", "MigDeviceConfig"),
    ],
)
def test_mps_examples_share_one_device_among_all_their_pods(
    capsys: pytest.CaptureFixture[str], example: str, pods: int, device_prefix: str, kind: str
) -> None:
    dynamic = ["--mig", "dynamic", "--feature-gates", "DRAPartitionableDevices=true"]
    args = ["-f", str(EXAMPLES / example), "--nodes", "dgx-h100=1", *dynamic, "-o", "yaml"]
    code = main(["simulate", *args])
    records = yaml.safe_load(capsys.readouterr().out)

    assert code == 0
    assert len(records) == pods
    assert all(r["placed"] for r in records)
    devices = {res["device"] for r in records for c in r["claims"] for res in c["results"]}
    assert len(devices) == 1  # one allocation, shared: one MPS daemon on the node
    assert devices.pop().startswith(device_prefix)
    for record in records:
        (claim,) = record["claims"]
        (config,) = claim["config"]
        parameters = config["opaque"]["parameters"]
        assert parameters["kind"] == kind
        assert parameters["sharing"]["strategy"] == "MPS"
