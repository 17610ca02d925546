"""status.devices by server-side apply, on both stores: the apiserver's rules (KEP-4817).

LocalCluster and KubeCluster (real client, fake apiserver) must refuse what a
real apiserver refuses: entries that match no allocation result (shareID
included), data over 10 KiB or not an object, conditions without reason or
time; and keep entries apart by field manager, dropping the entries of
deallocated devices.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from dra_driver.errors import ClusterError
from dra_driver.kube.access import Cluster, ConflictError, LocalCluster
from dra_driver.kube.api_store import KubeCluster
from tests.fakes import FakeApiServer

DRIVER = "gpu.nvidia.com"
SHARE = "0d5c7e9a-1b3f-4d6e-8a0c-000000000001"
TIME = "2026-11-27T10:00:00Z"


@pytest.fixture(params=["local", "kube"])
def cluster(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Cluster]:
    if request.param == "local":
        yield LocalCluster(tmp_path / "cluster")
        return
    with FakeApiServer(version=("1", "37")) as server:
        client = server.api_client()
        try:
            yield KubeCluster(client)
        finally:
            client.close()


def _allocated(cluster: Cluster, results: list[dict[str, Any]]) -> dict[str, Any]:
    cluster.put_resource_claim(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": "train", "namespace": "ml"},
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {}}]}},
        }
    )
    stored = cluster.get_resource_claim("ml", "train")
    stored["status"] = {"allocation": {"devices": {"results": results}}}
    return cluster.update_resource_claim_status(stored)


def _result(device: str, share_id: str | None = None) -> dict[str, Any]:
    result = {"request": "gpu", "driver": DRIVER, "pool": "node-1", "device": device}
    if share_id:
        result["shareID"] = share_id
    return result


def _entry(device: str, share_id: str | None = None, **extra: Any) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "driver": DRIVER,
        "pool": "node-1",
        "device": device,
        "conditions": [
            {
                "type": "Ready",
                "status": "True",
                "reason": "Prepared",
                "message": "ok",
                "lastTransitionTime": TIME,
            }
        ],
        "data": {"uuid": f"GPU-{device}"},
    }
    if share_id:
        entry["shareID"] = share_id
    entry.update(extra)
    return entry


def _apply(
    cluster: Cluster, entries: list[dict[str, Any]], manager: str = DRIVER, *, force: bool = True
) -> dict[str, Any]:
    return cluster.apply_resource_claim_status(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": "train", "namespace": "ml"},
            "status": {"devices": entries},
        },
        field_manager=manager,
        force=force,
    )


def test_an_apply_lands_in_the_claim_with_its_owner(cluster: Cluster) -> None:
    _allocated(cluster, [_result("gpu-0"), _result("gpu-1", SHARE)])
    stored = _apply(cluster, [_entry("gpu-0"), _entry("gpu-1", SHARE)])
    again = cluster.get_resource_claim("ml", "train")
    assert again["status"]["devices"] == stored["status"]["devices"]
    assert [e["device"] for e in again["status"]["devices"]] == ["gpu-0", "gpu-1"]
    assert again["status"]["devices"][1]["shareID"] == SHARE
    assert again["status"]["allocation"]["devices"]["results"][0]["device"] == "gpu-0"
    (managed,) = again["metadata"]["managedFields"]
    assert (managed["manager"], managed["operation"], managed["subresource"]) == (
        DRIVER,
        "Apply",
        "status",
    )
    keys = set(managed["fieldsV1"]["f:status"]["f:devices"])
    assert f'k:{{"device":"gpu-1","driver":"{DRIVER}","pool":"node-1","shareID":"{SHARE}"}}' in keys


def test_an_unchanged_apply_writes_nothing(cluster: Cluster) -> None:
    _allocated(cluster, [_result("gpu-0")])
    first = _apply(cluster, [_entry("gpu-0")])
    second = _apply(cluster, [_entry("gpu-0")])
    assert second["metadata"]["resourceVersion"] == first["metadata"]["resourceVersion"]


@pytest.mark.parametrize(
    ("entry", "problem"),
    [
        (_entry("gpu-7"), "must be an allocated device in the claim"),
        (_entry("gpu-1"), "must be an allocated device in the claim"),  # shareID missing
        (_entry("gpu-0", data=["not", "an", "object"]), "must be a valid JSON object"),
        (_entry("gpu-0", data={"blob": "x" * 10_300}), "may not be more than 10240 bytes"),
        (
            _entry("gpu-0", conditions=[{"type": "Ready", "status": "True"}]),
            "conditions[0].reason: Required value",
        ),
        (
            _entry("gpu-0", conditions=[{"type": "Ready", "status": "Yes", "reason": "x"}]),
            "lastTransitionTime: Required value",
        ),
        (
            _entry(
                "gpu-0",
                conditions=[
                    {"type": f"T{i}", "status": "True", "reason": "r", "lastTransitionTime": TIME}
                    for i in range(9)
                ],
            ),
            "must have at most 8 items",
        ),
    ],
    ids=[
        "unallocated",
        "no-share-id",
        "data-array",
        "data-too-big",
        "no-reason",
        "bad-status",
        "9",
    ],
)
def test_the_apiservers_rules_refuse_bad_entries(
    cluster: Cluster, entry: dict[str, Any], problem: str
) -> None:
    _allocated(cluster, [_result("gpu-0"), _result("gpu-1", SHARE)])
    with pytest.raises(ClusterError, match=r"status\.devices") as error:
        _apply(cluster, [entry])
    assert problem in str(error.value)
    assert "devices" not in (cluster.get_resource_claim("ml", "train").get("status") or {})


def test_duplicate_entries_are_refused(cluster: Cluster) -> None:
    _allocated(cluster, [_result("gpu-0")])
    with pytest.raises(ClusterError, match="Duplicate value"):
        _apply(cluster, [_entry("gpu-0"), _entry("gpu-0")])


def test_each_manager_keeps_its_own_entries(cluster: Cluster) -> None:
    _allocated(cluster, [_result("gpu-0"), _result("gpu-1")])
    _apply(cluster, [_entry("gpu-0")], manager=DRIVER)
    _apply(cluster, [_entry("gpu-1")], manager="monitoring")
    assert [
        e["device"] for e in cluster.get_resource_claim("ml", "train")["status"]["devices"]
    ] == [
        "gpu-0",
        "gpu-1",
    ]
    # The driver's next apply sends the full set it wants: none. Its entry goes, the other stays.
    after = _apply(cluster, [], manager=DRIVER)
    assert [e["device"] for e in after["status"]["devices"]] == ["gpu-1"]
    assert [m["manager"] for m in after["metadata"]["managedFields"]] == ["monitoring"]


def test_taking_over_another_managers_entry_conflicts_unless_forced(cluster: Cluster) -> None:
    _allocated(cluster, [_result("gpu-0")])
    _apply(cluster, [_entry("gpu-0")], manager="monitoring")
    changed = _entry("gpu-0", data={"uuid": "GPU-other"})
    with pytest.raises(ConflictError, match="conflict"):
        _apply(cluster, [changed], manager=DRIVER, force=False)
    stored = _apply(cluster, [changed], manager=DRIVER, force=True)
    assert stored["status"]["devices"][0]["data"] == {"uuid": "GPU-other"}
    assert [m["manager"] for m in stored["metadata"]["managedFields"]] == [DRIVER]


def test_deallocation_drops_the_entries(cluster: Cluster) -> None:
    claim = _allocated(cluster, [_result("gpu-0"), _result("gpu-1")])
    _apply(cluster, [_entry("gpu-0"), _entry("gpu-1")])
    stored = cluster.get_resource_claim("ml", "train")
    status = copy.deepcopy(stored["status"])
    status["allocation"]["devices"]["results"] = [_result("gpu-1")]
    stored["status"] = status
    after = cluster.update_resource_claim_status(stored)
    assert [e["device"] for e in after["status"]["devices"]] == ["gpu-1"]
    stored = cluster.get_resource_claim("ml", "train")
    stored["status"] = {}
    after = cluster.update_resource_claim_status(stored)
    assert "devices" not in after.get("status", {})
    assert "managedFields" not in after["metadata"]
    assert claim["metadata"]["uid"] == after["metadata"]["uid"]


def test_an_update_may_not_add_an_entry_of_no_allocated_device(cluster: Cluster) -> None:
    claim = _allocated(cluster, [_result("gpu-0")])
    claim["status"]["devices"] = [_entry("gpu-5")]
    with pytest.raises(ClusterError, match="must be an allocated device"):
        cluster.update_resource_claim_status(claim)


def test_the_fake_apiserver_wants_a_field_manager_and_the_apply_content_type() -> None:
    with FakeApiServer() as server:
        client = server.api_client()
        try:
            cluster = KubeCluster(client)
            _allocated(cluster, [_result("gpu-0")])
            with pytest.raises(ClusterError, match="fieldManager is required"):
                _apply(cluster, [_entry("gpu-0")], manager="")
            method, path = server.requests[-1]
            assert method == "PATCH"
            assert path.endswith(
                "/namespaces/ml/resourceclaims/train/status?fieldManager=&force=true"
            )
        finally:
            client.close()


def test_an_apply_naming_another_uid_is_refused(cluster: Cluster) -> None:
    # What the plugin sends names the claim it prepared: a claim deleted and re-created
    # under the same name (another UID) must not get the old claim's entries.
    stored = _allocated(cluster, [_result("gpu-0")])
    body = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "train", "namespace": "ml", "uid": stored["metadata"]["uid"]},
        "status": {"devices": [_entry("gpu-0")]},
    }
    assert cluster.apply_resource_claim_status(body, field_manager=DRIVER)["status"]["devices"]
    body["metadata"]["uid"] = "99999999-0000-4000-8000-000000000000"
    with pytest.raises(ClusterError, match=r"metadata\.uid: Invalid value.*field is immutable"):
        cluster.apply_resource_claim_status(body, field_manager=DRIVER)
