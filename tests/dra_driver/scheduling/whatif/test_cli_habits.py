"""The `dra-gpu` command line keeps kubectl's habits: -f, -R, -o, --version, help, messages."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
import yaml

from dra_driver import cli
from dra_driver.cli import main
from dra_driver.hardware.simulated.shapes import BUILTIN_SHAPES

POD = """\
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {{namespace: default, name: {name}}}
spec:
  spec:
    devices:
      requests: [{{name: gpu, exactly: {{deviceClassName: gpu.nvidia.com}}}}]
---
apiVersion: v1
kind: Pod
metadata: {{namespace: default, name: {name}}}
spec:
  containers: [{{name: main, image: busybox, resources: {{claims: [{{name: gpu}}]}}}}]
  resourceClaims: [{{name: gpu, resourceClaimTemplateName: {name}}}]
"""


def _pods(capsys: pytest.CaptureFixture[str], *args: str) -> list[str]:
    assert main(["simulate", *args, "--nodes", "l4-node=1", "-o", "yaml"]) == 0
    return [record["pod"] for record in yaml.safe_load(capsys.readouterr().out)]


def test_f_takes_files_directories_comma_lists_globs_and_stdin(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "dir" / "deeper").mkdir(parents=True)
    (tmp_path / "dir" / "a.yaml").write_text(POD.format(name="a"))
    (tmp_path / "dir" / "b.json").write_text(
        json.dumps(yaml.safe_load(POD.format(name="b").split("---")[1]))
    )
    (tmp_path / "dir" / "notes.txt").write_text("not a manifest")
    (tmp_path / "dir" / "deeper" / "c.yml").write_text(POD.format(name="c"))
    (tmp_path / "d.yaml").write_text(POD.format(name="d"))
    (tmp_path / "e.yaml").write_text(POD.format(name="e"))
    # b.json is a bare pod: its template comes from b-template.yaml
    (tmp_path / "b-template.yaml").write_text(POD.format(name="b").split("---")[0])
    directory = str(tmp_path / "dir")

    assert _pods(capsys, "-f", directory, "-f", str(tmp_path / "b-template.yaml")) == [
        "default/a",
        "default/b",
    ]
    assert _pods(capsys, "-R", "-f", f"{tmp_path / 'b-template.yaml'},{directory}") == [
        "default/a",
        "default/b",
        "default/c",
    ]
    assert _pods(capsys, "-f", str(tmp_path / "[de].yaml")) == ["default/d", "default/e"]
    monkeypatch.setattr("sys.stdin", io.StringIO(POD.format(name="f")))
    assert _pods(capsys, "-f", "-") == ["default/f"]

    assert main(["simulate", "-f", str(tmp_path / "nope.yaml"), "--nodes", "l4-node=1"]) == 2
    assert 'the path "' in capsys.readouterr().err
    assert main(["simulate", "-f", str(tmp_path / "*.yml"), "--nodes", "l4-node=1"]) == 2
    assert "no files match the pattern" in capsys.readouterr().err


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0
    assert capsys.readouterr().out.startswith("dra-gpu ")


@pytest.mark.parametrize("command", ["simulate", "inventory", "status", "explain", "mig"])
def test_help_shows_defaults(capsys: pytest.CaptureFixture[str], command: str) -> None:
    args = [command, "status", "--help"] if command == "mig" else [command, "--help"]
    with pytest.raises(SystemExit):
        main(args)
    text = " ".join(capsys.readouterr().out.split())
    expected = {
        "simulate": "(default: static)",
        "inventory": "(default: table)",
        "status": "(default: table)",
        "explain": "(default: 1.35)",
        "mig": "(default: sim-node)",
    }[command]
    assert expected in text


def test_help_lists_every_builtin_shape() -> None:
    assert [s.strip() for s in cli.SHAPES.split(",")] == list(BUILTIN_SHAPES)


def test_simulate_prints_yaml_json_wide_and_a_table_of_at_most_100_columns(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    name = "a-rather-long-inference-deployment-name-for-a-table"
    path = tmp_path / "pods.yaml"
    path.write_text(POD.format(name=name))
    args = ["simulate", "-f", str(path), "--nodes", "dgx-h100=1"]

    assert main([*args, "-o", "json"]) == 0
    records = json.loads(capsys.readouterr().out)
    assert main([*args, "-o", "yaml"]) == 0
    assert yaml.safe_load(capsys.readouterr().out) == records
    claim = records[0]["claims"][0]["claim"]

    assert main(args) == 0
    table = capsys.readouterr().out
    assert max(len(line) for line in table.splitlines()) <= 100
    assert claim not in table  # the pod's name for its claim, "gpu", instead
    assert main([*args, "-o", "wide"]) == 0
    assert claim.split("/")[1] in capsys.readouterr().out


@pytest.mark.parametrize("output", ["table", "wide", "yaml", "json"])
def test_inventory_and_status_print_every_output(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, output: str
) -> None:
    inventory = ["inventory", "--node-name", "n1", "--nvml", "sim:dgx-h100", "--dynamic-mig"]
    assert main([*inventory, "-o", output]) == 0
    out = capsys.readouterr().out
    status = ["status", "--nvml", "sim:dgx-h100", "--kubelet-root", str(tmp_path)]
    assert main([*status, "-o", output]) == 0
    status_out = capsys.readouterr().out
    if output == "json":
        assert json.loads(out)["kind"] == "List"
        assert len(json.loads(status_out)["gpus"]) == 8
    elif output == "yaml":
        assert all(doc["kind"] == "ResourceSlice" for doc in yaml.safe_load_all(out))
        assert len(yaml.safe_load(status_out)["gpus"]) == 8
    elif output == "table":
        assert max(len(line) for line in out.splitlines()) <= 100
        assert "UUID" not in out.splitlines()[0]
        assert max(len(line) for line in status_out.splitlines()) <= 100
    else:
        assert "UUID" in out.splitlines()[0]
        assert "UUID" in status_out.splitlines()[0]


def test_explain_names_every_first_available_alternative(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "claim.yaml"
    path.write_text(
        "apiVersion: resource.k8s.io/v1\nkind: ResourceClaim\n"
        "metadata: {namespace: default, name: pick}\n"
        "spec:\n  devices:\n    requests:\n      - name: gpu\n        firstAvailable:\n"
        "          - name: h200\n            deviceClassName: gpu.nvidia.com\n"
        "            selectors: [{cel: {expression: \"device.attributes['gpu.nvidia.com']"
        ".productName == 'NVIDIA H200'\"}}]\n"
        "          - {name: five, deviceClassName: gpu.nvidia.com, count: 5}\n"
    )
    assert main(["explain", "-f", str(path), "--nodes", "l4-node=1", "--claim", "pick"]) == 1
    out = capsys.readouterr().out
    assert (
        "Why: request gpu: none of its 2 alternatives fits: gpu/h200: no device has productName "
        "== 'NVIDIA H200' (4 devices have 'NVIDIA L4'); gpu/five: needs 5, only 4 GPUs match "
        "on l4-node-0"
    ) in out
    assert (
        "l4-node-0: gpu: no alternative fits: gpu/h200: 0 of 4 gpu.nvidia.com devices match; "
        "gpu/five: needs 5, 4 of 4 matching free"
    ) in out


def test_a_cel_error_is_printed_once_with_the_attribute_meant(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "claim.yaml"
    path.write_text(
        "apiVersion: resource.k8s.io/v1\nkind: ResourceClaim\n"
        "metadata: {namespace: default, name: cc}\n"
        "spec:\n  devices:\n    requests:\n      - name: gpu\n        exactly:\n"
        "          deviceClassName: gpu.nvidia.com\n"
        "          selectors: [{cel: {expression: \"device.attributes['gpu.nvidia.com']"
        ".cudaComputeCapabilty == '8.9'\"}}]\n"
    )
    assert main(["explain", "-f", str(path), "--nodes", "l4-node=1", "--claim", "cc"]) == 1
    out = capsys.readouterr().out
    assert out.count("no such key: cudaComputeCapabilty") == 1
    assert "did you mean `cudaComputeCapability`?" in out

    assert main(["simulate", "-f", str(path), "--nodes", "l4-node=1", "-o", "wide"]) == 1
    assert "did you mean `cudaComputeCapability`?" in capsys.readouterr().out


def test_a_sharing_claim_on_devices_without_shares_says_how_to_publish_shares(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "claim.yaml"
    path.write_text(
        "apiVersion: resource.k8s.io/v1\nkind: ResourceClaim\n"
        "metadata: {namespace: default, name: quarter}\n"
        "spec:\n  devices:\n    requests:\n      - name: gpu\n        exactly:\n"
        "          deviceClassName: gpu.nvidia.com\n"
        "          capacity: {requests: {shares: '1'}}\n"
    )
    args = ["simulate", "-f", str(path), "--nodes", "l4-node=1", "--kubernetes", "1.36"]
    assert main([*args, "-o", "yaml"]) == 1
    (record,) = yaml.safe_load(capsys.readouterr().out)
    assert "device has no capacity shares" in record["reason"]
    assert "--consumable-shares" in record["reason"]
    assert "sharing component" in record["reason"]

    assert main([*args, "--consumable-shares", "4", "-o", "yaml"]) == 0
