"""`simulate` and `explain` on Grace nodes: an `addressingMode == "ATS"` selector, and
`numaNode` as a list with DRAListTypeAttributes on Kubernetes 1.36+ (refused before)."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest
import yaml

from dra_driver.cli import main
from dra_driver.composition.simulated_nodes import build_simulated_nodes
from dra_driver.scheduling.allocator import Release
from dra_driver.scheduling.whatif.command import ScenarioOptions, load_scenario

ATS = 'device.attributes["gpu.nvidia.com"].addressingMode == "ATS"'
GUARDED_ATS = f'"addressingMode" in device.attributes["gpu.nvidia.com"] && {ATS}'
NUMA_1 = 'device.attributes["resource.kubernetes.io"].numaNode.includes(1)'


def _files(tmp_path: Path, selector: str) -> str:
    template = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"namespace": "ml", "name": "picky"},
        "spec": {
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
            }
        },
    }
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"namespace": "ml", "name": "coherent"},
        "spec": {
            "containers": [
                {"name": "main", "image": "busybox", "resources": {"claims": [{"name": "gpu"}]}}
            ],
            "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "picky"}],
        },
    }
    path = tmp_path / "pods.yaml"
    path.write_text(yaml.safe_dump_all([template, pod], sort_keys=False), encoding="utf-8")
    return str(path)


def _simulate(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, list[dict[str, Any]]]:
    code = main(["simulate", *args, "-o", "yaml"])
    return code, yaml.safe_load(capsys.readouterr().out)


def _placed(record: dict[str, Any]) -> tuple[str, list[str]]:
    devices = [r["device"] for claim in record["claims"] for r in claim["results"]]
    return record["node"], devices


@pytest.mark.parametrize("shape", ["gh200-node", "gb200-node"])
def test_an_ats_selector_lands_on_a_grace_node(
    shape: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, (record,) = _simulate(capsys, "-f", _files(tmp_path, ATS), "--nodes", f"{shape}=1")
    assert code == 0
    assert _placed(record) == (f"{shape}-0", ["gpu-0"])


def test_next_to_other_nodes_the_selector_guards_against_a_missing_attribute(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    files = _files(tmp_path, GUARDED_ATS)
    code, (record,) = _simulate(capsys, "-f", files, "--nodes", "dgx-h100=1,gh200-node=1")
    assert code == 0
    assert _placed(record) == ("gh200-node-0", ["gpu-0"])
    # Unguarded, the H100s (tried first) have no such key: a CEL runtime error fails the
    # claim, as in kube-scheduler.
    code, (record,) = _simulate(
        capsys, "-f", _files(tmp_path, ATS), "--nodes", "dgx-h100=1,gh200-node=1"
    )
    assert code == 1
    assert "no such key: addressingMode" in record["reason"]


def test_explain_says_why_an_h100_node_has_no_ats_gpu(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    files = _files(tmp_path, GUARDED_ATS)
    argv = ["explain", "-f", files, "--pod", "ml/coherent"]
    assert main([*argv, "--nodes", "dgx-h100=1"]) == 1
    out = capsys.readouterr().out
    assert "Outcome: does not fit on dgx-h100-0" in out
    assert "(8 devices have no addressingMode)" in out
    assert main(["explain", "-f", _files(tmp_path, ATS), "--pod", "ml/coherent", "--nodes",
                 "gh200-node=1"]) == 0  # fmt: skip
    assert "gh200-node-0" in capsys.readouterr().out


def test_list_numa_nodes_are_published_on_136_with_the_gate(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    files = _files(tmp_path, NUMA_1)
    gate = ("--feature-gates", "DRAListTypeAttributes=true")
    for release in ("1.36", "1.37"):
        code, (record,) = _simulate(
            capsys, "-f", files, "--nodes", "gh200-node=1", "--kubernetes", release, *gate
        )
        assert code == 0, record
        assert _placed(record) == ("gh200-node-0", ["gpu-1"])  # the GPU on NUMA node 1


@pytest.mark.parametrize(
    ("release", "gates", "numa"),
    [
        ("1.36", "DRAListTypeAttributes=true", [{"ints": [0]}, {"ints": [1]}]),
        ("1.37", "DRAListTypeAttributes=true", [{"ints": [0]}, {"ints": [1]}]),
        ("1.36", "", [{"int": 0}, {"int": 1}]),  # alpha: off unless turned on
        ("1.37", "", [{"int": 0}, {"int": 1}]),
        ("1.37", "DRAListTypeAttributes=false", [{"int": 0}, {"int": 1}]),
    ],
)
def test_the_simulated_nodes_follow_the_gate(
    release: Release, gates: str, numa: list[dict[str, Any]], tmp_path: Path
) -> None:
    options = ScenarioOptions(
        build_nodes=build_simulated_nodes,
        files=[_files(tmp_path, NUMA_1)],
        nodes="gh200-node=1",
        release=release,
        feature_gates=gates,
    )
    scenario = load_scenario(options, io.StringIO())
    devices = [d for s in scenario.slices for d in s["spec"].get("devices", [])]
    assert [d["attributes"]["resource.kubernetes.io/numaNode"] for d in devices] == numa


def test_the_gate_is_refused_before_136(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    files = _files(tmp_path, NUMA_1)
    argv = ["simulate", "-f", files, "--nodes", "gh200-node=1", "--kubernetes", "1.35"]
    assert main([*argv, "--feature-gates", "DRAListTypeAttributes=true"]) == 2
    assert "Kubernetes 1.35 has no such gate" in capsys.readouterr().err


def test_gpus_of_one_nvlink_clique_without_a_compute_domain(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Two whole GPUs that share a clique: only gb200-node GPUs have one (H100s are tried first)."""
    claim = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"namespace": "ml", "name": "nvl"},
        "spec": {
            "devices": {
                "requests": [
                    {"name": "gpus", "exactly": {"deviceClassName": "gpu.nvidia.com", "count": 2}}
                ],
                "constraints": [{"matchAttribute": "gpu.nvidia.com/cliqueID"}],
            }
        },
    }
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"namespace": "ml", "name": "nvl-job"},
        "spec": {
            "containers": [
                {"name": "main", "image": "busybox", "resources": {"claims": [{"name": "gpus"}]}}
            ],
            "resourceClaims": [{"name": "gpus", "resourceClaimName": "nvl"}],
        },
    }
    path = tmp_path / "nvl.yaml"
    path.write_text(yaml.safe_dump_all([claim, pod], sort_keys=False), encoding="utf-8")
    code, (record,) = _simulate(capsys, "-f", str(path), "--nodes", "dgx-h100=1,gb200-node=1")
    assert code == 0
    assert _placed(record) == ("gb200-node-0", ["gpu-0", "gpu-1"])


@pytest.mark.parametrize("gates", ["", "DRAListTypeAttributes=true"])
@pytest.mark.parametrize(("count", "placed"), [(4, True), (5, False)])
def test_match_attribute_on_numa_node_works_scalar_or_list(
    gates: str, count: int, placed: bool, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A DGX H100 has 4 GPUs per NUMA node: 4 share one, 5 do not, whatever the form."""
    claim = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"namespace": "ml", "name": "local"},
        "spec": {
            "devices": {
                "requests": [
                    {
                        "name": "gpus",
                        "exactly": {"deviceClassName": "gpu.nvidia.com", "count": count},
                    }
                ],
                "constraints": [{"matchAttribute": "resource.kubernetes.io/numaNode"}],
            }
        },
    }
    path = tmp_path / "local.yaml"
    path.write_text(yaml.safe_dump(claim, sort_keys=False), encoding="utf-8")
    argv = ["-f", str(path), "--nodes", "dgx-h100=1", "--kubernetes", "1.37"]
    code, (record,) = _simulate(capsys, *argv, *(("--feature-gates", gates) if gates else ()))
    assert code == (0 if placed else 1)
    if placed:
        assert _placed(record) == ("dgx-h100-0", ["gpu-0", "gpu-1", "gpu-2", "gpu-3"])
    else:
        assert "numaNode" in record["reason"]
