"""`dra-gpu explain`: every rejection reason on a crafted node, and the summary lines."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from dra_driver.cli import main
from dra_driver.kube.access import LocalCluster
from dra_driver.kube.api_store import KubeCluster
from tests.fakes import (
    FakeClusterApiServer,
    make_allocated_claim,
    make_resource_slice,
    make_slice_device,
)

H100 = "NVIDIA H100 80GB HBM3"
A100 = "NVIDIA A100-SXM4-80GB"
TAINT = {"key": "gpu.nvidia.com/xid", "value": "79", "effect": "NoSchedule"}
PRODUCT = "device.attributes['gpu.nvidia.com'].productName"


def _gpu(name: str, product: str, **extra: Any) -> dict[str, Any]:
    return make_slice_device(
        name,
        attributes={"type": "gpu", "productName": product, "uuid": f"GPU-{name}"},
        capacity={"memory": "80Gi"},
        **extra,
    )


def _mig(name: str, profile: str, slices: list[int]) -> dict[str, Any]:
    return make_slice_device(
        name,
        attributes={"type": "mig", "profile": profile, "parentUUID": "GPU-mig-parent"},
        consumes={"gpu-9-counter-set": {f"memory-slice-{i}": "1" for i in slices}},
    )


def _cluster() -> list[dict[str, Any]]:
    """Node n1: an H100, an A100, a tainted H100, two overlapping MIG placements of GPU 9.
    Node n2: a pool whose second slice is missing (incomplete)."""
    counters = make_resource_slice(
        "n1-counters",
        node="n1",
        slice_count=2,
        shared_counters={"gpu-9-counter-set": {"memory-slice-0": "1", "memory-slice-1": "1"}},
    )
    devices = make_resource_slice(
        "n1-devices",
        node="n1",
        slice_count=2,
        devices=[
            _gpu("gpu-0", H100),
            _gpu("gpu-1", A100),
            _gpu("gpu-2", "NVIDIA H200", taints=[TAINT]),
            _mig("gpu-9-mig-1g-0", "1g.10gb", [0]),
            _mig("gpu-9-mig-2g-0", "2g.20gb", [0, 1]),
        ],
    )
    incomplete = make_resource_slice(
        "n2-part-0", node="n2", slice_count=2, devices=[_gpu("gpu-0", H100)]
    )
    return [counters, devices, incomplete]


def _claim(name: str, *requests: dict[str, Any], **devices: Any) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"namespace": "ml", "name": name},
        "spec": {"devices": {"requests": list(requests), **devices}},
    }


def _request(name: str, device_class: str, *selectors: str, count: int = 1) -> dict[str, Any]:
    exactly: dict[str, Any] = {"deviceClassName": device_class, "count": count}
    if selectors:
        exactly["selectors"] = [{"cel": {"expression": s}} for s in selectors]
    return {"name": name, "exactly": exactly}


def _holder(*devices: str) -> dict[str, Any]:
    return make_allocated_claim(
        "holder",
        "ml",
        "5a1d3c2e-1111-4a2b-8c3d-000000000001",
        [("dev", device) for device in devices],
        pool="n1",
    )


def _explain(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], *objects: dict[str, Any], args: list[str]
) -> tuple[int, str]:
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump_all([*_cluster(), *objects]), encoding="utf-8")
    code = main(["explain", "-f", str(path), *args])
    return code, capsys.readouterr().out


def test_selector_false_names_the_attribute_and_the_values_devices_have(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    claim = _claim(
        "b200", _request("gpu", "gpu.nvidia.com", f"{PRODUCT}.lowerAscii().matches('^.*b200.*$')")
    )

    code, out = _explain(tmp_path, capsys, claim, args=["--claim", "ml/b200", "--node", "n1"])

    assert code == 1
    assert (
        f"Why: request gpu: no device has productName matching '^.*b200.*$' (1 device has "
        f"'{A100}', 1 has '{H100}', 1 has 'NVIDIA H200')" in out
    )
    assert f"request selector #0 is false: {PRODUCT}.lowerAscii().matches('^.*b200.*$')" in out
    assert "2 devices: DeviceClass gpu.nvidia.com selector #0 is false" in out
    assert "gpu-9-mig-1g-0, gpu-9-mig-2g-0" in out


def test_no_device_of_the_class_is_the_summary(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "mig.yaml"
    path.write_text(yaml.safe_dump(_claim("mig", _request("slice", "mig.nvidia.com"))))

    code = main(["explain", "-f", str(path), "--nodes", "l4-node=1"])
    out = capsys.readouterr().out

    assert code == 1
    assert (
        "Why: request slice: DeviceClass mig.nvidia.com: no device has type == 'mig' "
        "(4 devices have 'gpu')" in out
    )
    assert "l4-node-0: slice: none of 4 devices is in mig.nvidia.com" in out


def test_cel_runtime_error_is_reported(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # MIG devices have no productName: the scheduler aborts with a CEL runtime error.
    claim = _claim("broken", _request("gpu", "mig.nvidia.com", f"{PRODUCT} == 'NVIDIA L4'"))

    code, out = _explain(tmp_path, capsys, claim, args=["--claim", "ml/broken", "--node", "n1"])

    assert code == 1
    assert "Outcome: error: claim ml/broken: selector #0 on device gpu.nvidia.com/n1/" in out
    assert "CEL runtime error" in out
    assert out.count("no such key: productName") == 1  # said once, not per node and device


def test_device_already_allocated_names_the_holder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    claim = _claim("h100", _request("gpu", "gpu.nvidia.com", f"{PRODUCT} == '{H100}'"))

    code, out = _explain(
        tmp_path, capsys, _holder("gpu-0"), claim, args=["--claim", "ml/h100", "--node", "n1"]
    )

    assert code == 1
    assert "Why: request gpu: 1 of 1 GPUs on n1 are taken by claim ml/holder\n" in out
    assert "1 device: already allocated to claim ml/holder" in out
    assert "n1: gpu: needs 1, 0 of 1 matching free (1 taken by ml/holder)" in out


def test_exhausted_counters_name_the_claim_that_consumes_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    claim = _claim(
        "two-g",
        _request(
            "mig", "mig.nvidia.com", "device.attributes['gpu.nvidia.com'].profile == '2g.20gb'"
        ),
    )

    code, out = _explain(
        tmp_path,
        capsys,
        _holder("gpu-9-mig-1g-0"),
        claim,
        args=["--claim", "ml/two-g", "--node", "n1"],
    )

    assert code == 1
    assert (
        "Why: request mig: 1 of 1 MIG 2g.20gb placements on gpu-9 of n1 are taken by claim "
        "ml/holder" in out
    )
    assert (
        "1 device: shared counter gpu-9-counter-set/memory-slice-0 of pool gpu.nvidia.com/n1 "
        "used up by ml/holder" in out
    )


def test_constraint_mismatch_names_attribute_and_values(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    claim = _claim(
        "pair",
        _request("gpus", "gpu.nvidia.com", f"{PRODUCT} != 'NVIDIA H200'", count=2),
        constraints=[{"matchAttribute": "gpu.nvidia.com/productName"}],
    )

    code, out = _explain(tmp_path, capsys, claim, args=["--claim", "ml/pair", "--node", "n1"])

    assert code == 1
    assert (
        "Why: on n1 every request has free devices, but not together: matchAttribute "
        "gpu.nvidia.com/productName: no choice of free devices shares one value" in out
    )
    assert (
        f'matchAttribute gpu.nvidia.com/productName: device has "{A100}", the claim\'s other '
        f'devices have "{H100}"' in out
    )


def test_untolerated_taint_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    claim = _claim("h200", _request("gpu", "gpu.nvidia.com", f"{PRODUCT} == 'NVIDIA H200'"))

    code, out = _explain(tmp_path, capsys, claim, args=["--claim", "ml/h200", "--node", "n1"])

    assert code == 1
    assert "are tainted (gpu.nvidia.com/xid=79:NoSchedule)" in out
    assert "1 device: untolerated taint gpu.nvidia.com/xid=79:NoSchedule" in out


def test_incomplete_pool_is_reported(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    claim = _claim("any", _request("gpu", "gpu.nvidia.com"))

    code, out = _explain(tmp_path, capsys, claim, args=["--claim", "ml/any", "--node", "n2"])

    assert code == 1
    assert (
        "Why: request gpu: no devices are published for n2 (pool gpu.nvidia.com/n2 is incomplete)"
        in out
    )
    assert "pool gpu.nvidia.com/n2: skipped, pool is incomplete" in out


def test_identical_nodes_are_summarised_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "pods.yaml"
    path.write_text(
        yaml.safe_dump(
            _claim(
                "b200", _request("gpus", "gpu.nvidia.com", f"{PRODUCT}.matches('B200')", count=2)
            )
        ),
        encoding="utf-8",
    )

    code = main(["explain", "-f", str(path), "--nodes", "l4-node=3"])
    out = capsys.readouterr().out

    assert code == 1
    assert "Outcome: does not fit on any of 3 nodes" in out
    assert (
        "l4-node-0, l4-node-1, l4-node-2 (3 nodes): gpus: 0 of 4 gpu.nvidia.com devices match"
        in out
    )
    assert out.count("Details for ") == 1


def test_without_a_subject_the_first_unplaced_item_is_explained_after_earlier_ones(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "claims.yaml"
    path.write_text(
        yaml.safe_dump_all(
            [
                _claim("first", _request("gpus", "gpu.nvidia.com", count=3)),
                _claim("second", _request("gpus", "gpu.nvidia.com", count=2)),
            ]
        ),
        encoding="utf-8",
    )

    code = main(["explain", "-f", str(path), "--nodes", "l4-node=1"])
    out = capsys.readouterr().out

    assert code == 1
    assert out.startswith("ResourceClaim ml/second")
    assert "3 taken by ml/first" in out


def test_a_claim_that_fits_says_where(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    claim = _claim("ok", _request("gpu", "gpu.nvidia.com", f"{PRODUCT} == '{A100}'"))

    code, out = _explain(tmp_path, capsys, claim, args=["--claim", "ml/ok"])

    assert code == 0
    assert "Outcome: fits on 1 of 2 nodes; first: n1" in out
    assert "allocated: gpu-1" in out


def test_explain_reads_a_local_cluster_store(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = LocalCluster(tmp_path / "store")
    for obj in _cluster():
        store.create_resource_slice(obj)
    holder = _holder("gpu-0")
    del holder["metadata"]["resourceVersion"]
    store.put_resource_claim(holder)
    store.update_resource_claim_status(holder)
    store.put_resource_claim(
        _claim("h100", _request("gpu", "gpu.nvidia.com", f"{PRODUCT} == '{H100}'"))
    )
    spec = f"local:{tmp_path / 'store'}"

    code = main(["explain", "--cluster", spec, "--claim", "ml/h100", "--node", "n1"])
    out = capsys.readouterr().out
    pod_code = main(["explain", "--cluster", spec, "--pod", "ml/anything"])
    err = capsys.readouterr().err

    assert code == 1
    assert "taken by claim ml/holder" in out
    assert pod_code == 2
    assert "--pod needs --cluster kube" in err


def test_an_unknown_node_lists_the_nodes_once_without_repeating_the_command(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "cluster.yaml"
    claim = _claim("any", _request("gpu", "gpu.nvidia.com"))
    path.write_text(yaml.safe_dump_all([*_cluster(), claim]), encoding="utf-8")

    code = main(["explain", "-f", str(path), "--claim", "ml/any", "--node", "n9"])

    err = capsys.readouterr().err
    assert code == 2
    assert err.strip() == "dra-gpu explain: --node n9: no such node (nodes: n1, n2)"


def test_a_local_store_that_does_not_exist_is_an_error_not_an_empty_cluster(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "typo"

    code = main(["explain", "--cluster", f"local:{missing}", "--claim", "ml/h100"])

    err = capsys.readouterr().err
    assert code == 2
    assert f"{missing} is not a directory" in err
    assert not missing.exists()


def test_a_pods_claims_are_named_by_their_pod_claim_names(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    def template(name: str, count: int) -> dict[str, Any]:
        return {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaimTemplate",
            "metadata": {"namespace": "ml", "name": name},
            "spec": {
                "spec": {"devices": {"requests": [_request("gpu", "gpu.nvidia.com", count=count)]}}
            },
        }

    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"namespace": "ml", "name": "dual"},
        "spec": {
            "containers": [{"name": "main", "image": "busybox"}],
            "resourceClaims": [
                {"name": "small", "resourceClaimTemplateName": "one"},
                {"name": "huge", "resourceClaimTemplateName": "five"},
            ],
        },
    }
    path = tmp_path / "pod.yaml"
    path.write_text(yaml.safe_dump_all([template("one", 1), template("five", 5), pod]))

    code = main(["explain", "-f", str(path), "--nodes", "l4-node=2", "--pod", "ml/dual"])
    out = capsys.readouterr().out

    assert code == 1
    assert out.startswith("Pod ml/dual\n")
    assert (
        "Why: claim huge, request gpu: needs 5 on one node, at most 4 GPUs match on any of 2 nodes"
        in out
    )


def test_explain_reads_pods_nodes_and_templates_from_a_live_cluster(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    server = FakeClusterApiServer()
    server.start()
    try:
        client = server.api_client()
        cluster = KubeCluster(client)
        for obj in _cluster():
            cluster.create_resource_slice(obj)
        holder = _holder("gpu-0")
        del holder["metadata"]["resourceVersion"]
        cluster.update_resource_claim_status(
            cluster.put_resource_claim(holder) | {"status": holder["status"]}
        )
        server.add_object(
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {"name": "n1", "labels": {"pool": "a"}},
            }
        )
        server.add_object(
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceClaimTemplate",
                "metadata": {"namespace": "ml", "name": "h100"},
                "spec": {
                    "spec": {
                        "devices": {
                            "requests": [
                                _request("gpu", "gpu.nvidia.com", f"{PRODUCT} == '{H100}'")
                            ]
                        }
                    }
                },
            }
        )
        server.add_object(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"namespace": "ml", "name": "trainer", "uid": "pod-uid-1"},
                "spec": {
                    "containers": [{"name": "main", "image": "busybox"}],
                    "nodeSelector": {"pool": "a"},
                    "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "h100"}],
                },
            }
        )
        kubeconfig = server.kubeconfig(tmp_path / "kubeconfig")

        code = main(
            ["explain", "--cluster", "kube", "--kubeconfig", str(kubeconfig), "--pod", "ml/trainer"]
        )
        out = capsys.readouterr().out
        client.close()
    finally:
        server.stop()

    assert code == 1
    assert out.startswith("Pod ml/trainer\n  claim ml/trainer-gpu-")
    assert "Why: request gpu: 1 of 1 GPUs on n1 are taken by claim ml/holder" in out
    assert "Nodes:\n  n1: gpu: needs 1, 0 of 1 matching free (1 taken by ml/holder)" in out


def test_an_allocated_claim_and_a_pod_without_its_template_are_reported_as_such(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    orphan = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"namespace": "ml", "name": "orphan"},
        "spec": {
            "containers": [{"name": "main", "image": "busybox"}],
            "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "missing"}],
        },
    }

    code, out = _explain(tmp_path, capsys, _holder("gpu-0"), orphan, args=["--claim", "ml/holder"])
    orphan_code = main(["explain", "-f", str(tmp_path / "cluster.yaml"), "--pod", "ml/orphan"])
    orphan_out = capsys.readouterr().out

    assert code == 0
    assert "claim ml/holder: allocated on n1: dev: n1/gpu-0" in out
    assert "Outcome: every claim is allocated already" in out
    assert orphan_code == 1
    assert (
        "Outcome: cannot be scheduled: ResourceClaimTemplate ml/missing not found "
        "(spec.resourceClaims[0])" in orphan_out
    )


def test_explain_builds_the_special_claim_of_a_pending_nvidia_com_gpu_pod_in_a_live_cluster(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A device-plugin-style pod that is Pending has no claim yet (the scheduler
    writes it only when it binds); explain builds the one the scheduler would."""
    server = FakeClusterApiServer()
    server.start()
    try:
        client = server.api_client()
        cluster = KubeCluster(client)
        for obj in _cluster():
            cluster.create_resource_slice(obj)
        server.add_object({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}})
        server.add_object(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"namespace": "ml", "name": "legacy", "uid": "pod-uid-2"},
                "spec": {
                    "nodeName": "n1",
                    "containers": [
                        {
                            "name": "main",
                            "image": "busybox",
                            "resources": {"limits": {"nvidia.com/gpu": 3}},
                        }
                    ],
                },
            }
        )
        kubeconfig = server.kubeconfig(tmp_path / "kubeconfig")

        code = main(
            [
                "explain",
                "--cluster",
                "kube",
                "--kubeconfig",
                str(kubeconfig),
                "--pod",
                "ml/legacy",
                "--kubernetes",
                "1.37",
            ]
        )
        out = capsys.readouterr().out
        client.close()
    finally:
        server.stop()

    assert code == 1
    assert out.startswith("Pod ml/legacy\n  claim ml/legacy-extended-resources-")
    assert "request container-0-request-0: 3 x gpu.nvidia.com" in out
