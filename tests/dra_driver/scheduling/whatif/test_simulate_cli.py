"""`dra-gpu simulate` end to end: YAML files in, placements out, through the CLI entry."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from dra_driver.cli import main
from tests.fakes import (
    make_allocated_claim,
    make_device_class,
    make_resource_slice,
    make_slice_device,
)

H100_SELECTOR = "device.attributes['gpu.nvidia.com'].productName.lowerAscii().matches('^.*h100.*$')"
B200_SELECTOR = "device.attributes['gpu.nvidia.com'].productName.lowerAscii().matches('^.*b200.*$')"
BIG_MEMORY_SELECTOR = "device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('40Gi')) >= 0"
DYNAMIC = ("--mig", "dynamic", "--feature-gates", "DRAPartitionableDevices=true")


def _write(path: Path, *documents: dict[str, Any]) -> str:
    path.write_text(yaml.safe_dump_all(documents, sort_keys=False), encoding="utf-8")
    return str(path)


def _template(name: str, requests: list[dict[str, Any]], **devices: Any) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"namespace": "ml", "name": name},
        "spec": {"spec": {"devices": {"requests": requests, **devices}}},
    }


def _request(name: str, device_class: str, *selectors: str, count: int = 1) -> dict[str, Any]:
    exactly: dict[str, Any] = {"deviceClassName": device_class, "count": count}
    if selectors:
        exactly["selectors"] = [{"cel": {"expression": s}} for s in selectors]
    return {"name": name, "exactly": exactly}


def _pod_spec(claims: dict[str, dict[str, str]], **extra: Any) -> dict[str, Any]:
    return {
        "containers": [
            {
                "name": "main",
                "image": "busybox",
                "resources": {"claims": [{"name": name} for name in claims]},
            }
        ],
        "resourceClaims": [{"name": name, **ref} for name, ref in claims.items()],
        **extra,
    }


def _pod(name: str, claims: dict[str, dict[str, str]], **extra: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"namespace": "ml", "name": name},
        "spec": _pod_spec(claims, **extra),
    }


def _claim(name: str, requests: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"namespace": "ml", "name": name},
        "spec": {"devices": {"requests": requests}},
    }


def _simulate_yaml(
    capsys: pytest.CaptureFixture[str], *args: str
) -> tuple[int, list[dict[str, Any]], str]:
    code = main(["simulate", *args, "-o", "yaml"])
    captured = capsys.readouterr()
    return code, yaml.safe_load(captured.out), captured.err


def _by_pod(records: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {record["pod"]: record for record in records}


def _devices(record: dict[str, Any]) -> list[str]:
    return [r["device"] for claim in record["claims"] for r in claim["results"]]


def test_whole_gpus_are_chosen_by_product_name_and_by_memory(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    files = _write(
        tmp_path / "pods.yaml",
        _template("big", [_request("gpu", "gpu.nvidia.com", BIG_MEMORY_SELECTOR)]),
        _template("any", [_request("gpu", "gpu.nvidia.com")]),
        _pod("by-memory", {"gpu": {"resourceClaimTemplateName": "big"}}),
        _pod("anything", {"gpu": {"resourceClaimTemplateName": "any"}}),
    )

    code, records, _ = _simulate_yaml(capsys, "-f", files, "--nodes", "l4-node=1,dgx-a100-80gb=1")

    pods = _by_pod(records)
    # Nodes are tried in order: the L4 node first, but its GPUs have less than 40Gi.
    assert code == 0
    assert pods["ml/by-memory"]["node"] == "dgx-a100-80gb-0"
    assert _devices(pods["ml/by-memory"]) == ["gpu-0"]
    assert pods["ml/anything"]["node"] == "l4-node-0"


def test_h100_selector_lands_on_h100_node(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    files = _write(
        tmp_path / "pods.yaml",
        _template("h100", [_request("gpus", "gpu.nvidia.com", H100_SELECTOR, count=2)]),
        _pod("train", {"gpus": {"resourceClaimTemplateName": "h100"}}),
    )

    code, records, _ = _simulate_yaml(capsys, "-f", files, "--nodes", "l4-node=1,dgx-h100=1")

    (record,) = records
    assert code == 0
    assert record["node"] == "dgx-h100-0"
    assert _devices(record) == ["gpu-0", "gpu-1"]
    assert {r["pool"] for r in record["claims"][0]["results"]} == {"dgx-h100-0"}


def test_mig_profiles_share_one_parent_gpu_on_dynamic_mig_a100(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    profile = "device.attributes['gpu.nvidia.com'].profile == '{}'"
    template = _template(
        "mixed",
        [
            _request("small", "mig.nvidia.com", profile.format("1g.5gb"), count=2),
            _request("medium", "mig.nvidia.com", profile.format("2g.10gb")),
            _request("large", "mig.nvidia.com", profile.format("3g.20gb")),
        ],
        constraints=[{"requests": [], "matchAttribute": "gpu.nvidia.com/parentUUID"}],
    )
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"namespace": "ml", "name": "infer"},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": "infer"}},
            "template": {
                "metadata": {"labels": {"app": "infer"}},
                "spec": _pod_spec({"mig": {"resourceClaimTemplateName": "mixed"}}),
            },
        },
    }
    files = _write(tmp_path / "mig.yaml", template, deployment)

    code, records, _ = _simulate_yaml(capsys, "-f", files, "--nodes", "dgx-a100-40gb=1", *DYNAMIC)

    assert code == 0
    parents = []
    for record in records:
        devices = _devices(record)
        assert len(devices) == 4
        # gpu-<minor>-mig-<profile>-<giProfileId>-<start>: one GPU, the asked profiles
        assert len({device.split("-mig-")[0] for device in devices}) == 1
        profiles = sorted(device.split("-mig-")[1].rsplit("-", 2)[0] for device in devices)
        assert profiles == ["1g5gb", "1g5gb", "2g10gb", "3g20gb"]
        parents.append(devices[0].split("-mig-")[0])
    assert parents[0] != parents[1]  # a full A100 each: the second pod uses the next GPU


def test_a_pod_group_shares_one_claim_and_follows_its_node(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    files = _write(
        tmp_path / "shared.yaml",
        _claim("shared-gpu", [_request("gpu", "gpu.nvidia.com")]),
        *[_pod(f"worker-{i}", {"gpu": {"resourceClaimName": "shared-gpu"}}) for i in range(3)],
        _pod(
            "elsewhere",
            {"gpu": {"resourceClaimName": "shared-gpu"}},
            nodeSelector={"kubernetes.io/hostname": "l4-node-1"},
        ),
    )

    code, records, _ = _simulate_yaml(capsys, "-f", files, "--nodes", "l4-node=2")

    pods = _by_pod(records)
    assert code == 1
    assert [pods[f"ml/worker-{i}"]["node"] for i in range(3)] == ["l4-node-0"] * 3
    assert {tuple(_devices(pods[f"ml/worker-{i}"])) for i in range(3)} == {("gpu-0",)}
    assert "claim:ml/shared-gpu" not in pods  # referenced, so no pseudo-pod
    assert pods["ml/elsewhere"]["placed"] is False
    assert "ResourceClaim ml/shared-gpu is allocated on l4-node-0" in pods["ml/elsewhere"]["reason"]


def test_impossible_selector_is_reported_with_reason_and_exit_code(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    files = _write(
        tmp_path / "b200.yaml",
        _template("b200", [_request("gpus", "gpu.nvidia.com", B200_SELECTOR, count=2)]),
        _pod("pretrain", {"gpus": {"resourceClaimTemplateName": "b200"}}),
    )

    code = main(["simulate", "-f", files, "--nodes", "dgx-h100=2"])
    table = capsys.readouterr().out

    assert code == 1
    assert (  # the reason wraps to fit the table's 100 columns
        "not placed: request gpus: no device has productName matching '^.*b200.*$' "
        "(16 devices have 'NVIDIA H100 80GB HBM3')" in " ".join(table.split())
    )
    assert "1 pods: 0 placed, 1 not placed" in table
    assert max(len(line) for line in table.splitlines()) <= 100


def test_yaml_output_has_exactly_the_documented_fields(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = {
        "opaque": {
            "driver": "gpu.nvidia.com",
            "parameters": {
                "apiVersion": "resource.nvidia.com/v1beta1",
                "kind": "GpuConfig",
                "sharing": {"strategy": "TimeSlicing"},
            },
        }
    }
    files = _write(
        tmp_path / "pods.yaml",
        _template("ts", [_request("gpu", "gpu.nvidia.com")], config=[config]),
        _pod("ok", {"gpu": {"resourceClaimTemplateName": "ts"}}),
        _template("b200", [_request("gpu", "gpu.nvidia.com", B200_SELECTOR)]),
        _pod("never", {"gpu": {"resourceClaimTemplateName": "b200"}}),
    )

    code, records, _ = _simulate_yaml(capsys, "-f", files, "--nodes", "l4-node=1")

    assert code == 1
    assert isinstance(records, list)
    for record in records:
        assert list(record) == ["pod", "placed", "node", "reason", "claims"]
        for claim in record["claims"]:
            assert list(claim) == ["claim", "results", "config"]
            for result in claim["results"]:
                assert list(result) == ["request", "driver", "pool", "device"]
    placed, unplaced = records
    assert placed["pod"] == "ml/ok"
    assert placed["placed"] is True
    assert placed["reason"] == ""
    assert placed["node"] == "l4-node-0"
    assert re.fullmatch(r"ml/ok-gpu-[bcdfghjklmnpqrstvwxz2456789]{5}", placed["claims"][0]["claim"])
    assert placed["claims"][0]["results"] == [
        {"request": "gpu", "driver": "gpu.nvidia.com", "pool": "l4-node-0", "device": "gpu-0"}
    ]
    assert placed["claims"][0]["config"] == [{"source": "FromClaim", **config}]
    assert unplaced["placed"] is False
    assert unplaced["node"] == ""
    assert "no device has productName" in unplaced["reason"]
    assert unplaced["claims"][0]["results"] == []


def test_pre_allocated_claims_hold_their_devices(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    held = make_allocated_claim(
        "held", "ml", "0b1c2d3e-0000-4000-8000-000000000001", [("gpu", "gpu-0")], pool="l4-node-0"
    )
    files = _write(
        tmp_path / "pods.yaml",
        held,
        _template("one", [_request("gpu", "gpu.nvidia.com")]),
        _pod("new", {"gpu": {"resourceClaimTemplateName": "one"}}),
        _pod("user", {"gpu": {"resourceClaimName": "held"}}),
    )

    code, records, _ = _simulate_yaml(capsys, "-f", files, "--nodes", "l4-node=1")

    pods = _by_pod(records)
    assert code == 0
    assert _devices(pods["ml/new"]) == ["gpu-1"]
    assert pods["ml/user"]["node"] == "l4-node-0"
    assert _devices(pods["ml/user"]) == ["gpu-0"]


def test_unreferenced_standalone_claim_is_a_pseudo_pod(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    files = _write(
        tmp_path / "claims.yaml",
        _claim("lonely", [_request("gpus", "gpu.nvidia.com", count=3)]),
        _claim("too-big", [_request("gpus", "gpu.nvidia.com", count=5)]),
    )

    code, records, _ = _simulate_yaml(capsys, "-f", files, "--nodes", "l4-node=1")

    pods = _by_pod(records)
    assert code == 1
    assert pods["claim:ml/lonely"]["placed"] is True
    assert _devices(pods["claim:ml/lonely"]) == ["gpu-0", "gpu-1", "gpu-2"]
    assert pods["claim:ml/lonely"]["claims"][0]["claim"] == "ml/lonely"
    assert pods["claim:ml/too-big"]["placed"] is False
    assert "needs 5" in pods["claim:ml/too-big"]["reason"]


def test_templates_give_each_replica_its_own_deterministic_claim(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    statefulset = {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"namespace": "ml", "name": "db"},
        "spec": {
            "replicas": 3,
            "selector": {"matchLabels": {"app": "db"}},
            "template": {
                "metadata": {"labels": {"app": "db"}},
                "spec": _pod_spec({"gpu": {"resourceClaimTemplateName": "one"}}),
            },
        },
    }
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"namespace": "ml", "name": "batch"},
        "spec": {
            "parallelism": 4,
            "completions": 2,
            "template": {"spec": _pod_spec({"gpu": {"resourceClaimTemplateName": "one"}})},
        },
    }
    files = _write(
        tmp_path / "workloads.yaml",
        _template("one", [_request("gpu", "gpu.nvidia.com")]),
        statefulset,
        job,
    )

    first = _simulate_yaml(capsys, "-f", files, "--nodes", "dgx-a100-80gb=1")
    second = _simulate_yaml(capsys, "-f", files, "--nodes", "dgx-a100-80gb=1")

    code, records, _ = first
    assert code == 0
    assert first[1] == second[1]
    assert [r["pod"] for r in records] == [
        "ml/db-0",
        "ml/db-1",
        "ml/db-2",
        "ml/batch-0",
        "ml/batch-1",
    ]
    claims = [r["claims"][0]["claim"] for r in records]
    for record, claim in zip(records, claims, strict=True):
        pod_name = record["pod"].split("/")[1]
        assert re.fullmatch(rf"ml/{pod_name}-gpu-[a-z0-9]{{5}}", claim)
    assert len(set(claims)) == 5
    assert [_devices(r)[0] for r in records] == [f"gpu-{i}" for i in range(5)]


def test_other_kinds_are_ignored_with_a_note(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    files = _write(
        tmp_path / "mixed.yaml",
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ml"}},
        {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "svc", "namespace": "ml"}},
        {
            "apiVersion": "v1",
            "kind": "List",
            "items": [
                {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm"}},
                _pod("listed", {}),
            ],
        },
    )

    code, records, err = _simulate_yaml(capsys, "-f", files, "--nodes", "l4-node=1")

    assert code == 0
    assert [r["pod"] for r in records] == ["ml/listed"]
    assert records[0]["claims"] == []
    assert "ignored 2 object(s)" in err
    assert "ConfigMap (1), Service (1)" in err
    assert "Namespace" not in err  # a Namespace is read (admin access), never "ignored"


def test_bad_yaml_names_the_file_and_document(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "broken.yaml"
    path.write_text("kind: Pod\nmetadata: {name: a}\n---\nkind: [unclosed\n", encoding="utf-8")

    code = main(["simulate", "-f", str(path), "--nodes", "l4-node=1"])

    err = capsys.readouterr().err
    assert code == 2
    assert f"{path}: document 1: not valid YAML: line 5, column 1: " in err
    assert len(err.strip().splitlines()) == 1


def test_slices_from_files_define_the_nodes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    devices = [
        make_slice_device(f"gpu-{i}", attributes={"type": "gpu", "productName": "NVIDIA L4"})
        for i in range(2)
    ]
    files = _write(
        tmp_path / "cluster.yaml",
        make_resource_slice("node-b-gpus", node="node-b", devices=devices),
        make_resource_slice("node-a-gpus", node="node-a", devices=devices),
        make_device_class("custom", "device.attributes['gpu.nvidia.com'].type == 'gpu'"),
        _claim("three", [_request("gpus", "custom", count=2)]),
        _claim("mig", [_request("slice", "mig.nvidia.com")]),
    )

    code, records, _ = _simulate_yaml(capsys, "-f", files)

    pods = _by_pod(records)
    assert code == 1
    assert pods["claim:ml/three"]["node"] == "node-a"  # nodes named by slices, sorted
    # Our default classes fill in the ones the files do not define.
    assert "mig.nvidia.com" in pods["claim:ml/mig"]["reason"]


def test_help_says_which_mig_mode_nodes_get_by_default(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["simulate", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "static = its default (the MIG devices that exist)" in text
    assert "(default: static)" in text
