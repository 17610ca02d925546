"""One contract, two stores: LocalCluster and KubeCluster (real client, fake apiserver).

Code tested against the local store must behave the same on a real cluster, so
every test here runs against both implementations.
"""

from __future__ import annotations

import copy
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from dra_driver.errors import ClusterError, NotFoundError
from dra_driver.kube.access import AlreadyExistsError, Cluster, ConflictError, LocalCluster
from dra_driver.kube.api_store import KubeCluster
from tests.fakes import FakeApiServer, wait_until

DRIVER = "gpu.nvidia.com"


@pytest.fixture(params=["local", "kube"])
def cluster(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Cluster]:
    if request.param == "local":
        yield LocalCluster(tmp_path / "cluster", server_version=(1, 34))
        return
    with FakeApiServer(version=("1", "34")) as server:
        client = server.api_client()
        try:
            yield KubeCluster(client)
        finally:
            client.close()


def make_slice(
    name: str, *, node: str = "node-1", driver: str = DRIVER, devices: tuple[str, ...] = ("gpu-0",)
) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": name, "labels": {"team": "ml"}},
        "spec": {
            "driver": driver,
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": [
                {
                    "name": device,
                    "attributes": {
                        "gpu.nvidia.com/productName": {"string": "NVIDIA H100 80GB HBM3"},
                        "gpu.nvidia.com/index": {"int": 0},
                        "gpu.nvidia.com/driverVersion": {"version": "570.124.6"},
                    },
                    "capacity": {"gpu.nvidia.com/memory": {"value": "80Gi"}},
                }
                for device in devices
            ],
        },
    }


def make_claim(name: str, namespace: str = "gpu-test") -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "devices": {
                "requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}}]
            }
        },
    }


def allocation(device: str) -> dict[str, Any]:
    return {
        "allocation": {
            "devices": {
                "results": [
                    {"request": "gpu", "driver": DRIVER, "pool": "node-1", "device": device}
                ]
            }
        }
    }


# ResourceSlices


def test_create_fills_in_server_metadata_and_keeps_the_spec(cluster: Cluster) -> None:
    sent = make_slice("node-1-gpu.nvidia.com-0")
    stored = cluster.create_resource_slice(copy.deepcopy(sent))
    assert stored["apiVersion"] == "resource.k8s.io/v1"
    assert stored["kind"] == "ResourceSlice"
    meta = stored["metadata"]
    assert meta["name"] == "node-1-gpu.nvidia.com-0"
    assert meta["labels"] == {"team": "ml"}
    assert meta["uid"]
    assert meta["resourceVersion"]
    assert meta["generation"] == 1
    assert meta["creationTimestamp"].endswith("Z")
    assert stored["spec"] == sent["spec"]
    assert cluster.list_resource_slices() == [stored]


def test_fields_the_client_library_does_not_know_survive_a_round_trip(cluster: Cluster) -> None:
    sent = make_slice("s-0")
    sent["spec"]["devices"][0]["futureField"] = {"fromKubernetes": "1.40"}
    stored = cluster.create_resource_slice(sent)
    assert stored["spec"]["devices"][0]["futureField"] == {"fromKubernetes": "1.40"}
    stored["spec"]["devices"][0]["futureField"] = {"fromKubernetes": "1.41"}
    updated = cluster.update_resource_slice(stored)
    assert updated["spec"]["devices"][0]["futureField"] == {"fromKubernetes": "1.41"}


def test_list_filters_on_driver_and_node(cluster: Cluster) -> None:
    cluster.create_resource_slice(make_slice("a", node="node-1"))
    cluster.create_resource_slice(make_slice("b", node="node-2"))
    cluster.create_resource_slice(make_slice("c", node="node-1", driver="other.example.com"))

    def names(**kwargs: str) -> list[str]:
        return sorted(obj["metadata"]["name"] for obj in cluster.list_resource_slices(**kwargs))

    assert names() == ["a", "b", "c"]
    assert names(driver=DRIVER) == ["a", "b"]
    assert names(node_name="node-1") == ["a", "c"]
    assert names(driver=DRIVER, node_name="node-1") == ["a"]
    assert names(driver="nobody.example.com") == []
    for obj in cluster.list_resource_slices():
        assert obj["apiVersion"] == "resource.k8s.io/v1"
        assert obj["kind"] == "ResourceSlice"


def test_create_of_a_taken_name_is_a_conflict_naming_the_slice(cluster: Cluster) -> None:
    cluster.create_resource_slice(make_slice("node-1-gpu.nvidia.com-0"))
    with pytest.raises(AlreadyExistsError, match=r"ResourceSlice node-1-gpu\.nvidia\.com-0"):
        cluster.create_resource_slice(make_slice("node-1-gpu.nvidia.com-0"))
    assert issubclass(AlreadyExistsError, ConflictError)


def test_create_refuses_a_resource_version(cluster: Cluster) -> None:
    obj = make_slice("s-0")
    obj["metadata"]["resourceVersion"] = "5"
    with pytest.raises(ClusterError, match="resourceVersion"):
        cluster.create_resource_slice(obj)
    assert cluster.list_resource_slices() == []


def test_invalid_name_is_refused(cluster: Cluster) -> None:
    with pytest.raises(ClusterError, match="Node_1") as info:
        cluster.create_resource_slice(make_slice("Node_1"))
    assert not isinstance(info.value, NotFoundError | ConflictError)


@pytest.mark.parametrize(
    "call",
    [
        lambda c: c.get_resource_claim("..", "claim-1"),
        lambda c: c.get_resource_claim("gpu-test", "../../etc"),
        lambda c: c.list_resource_claims("../x"),
        lambda c: c.delete_resource_claim("gpu-test", "a/b"),
        lambda c: c.delete_resource_slice("../../etc/passwd"),
    ],
)
def test_names_that_are_not_dns_names_are_refused(cluster: Cluster, call: Any) -> None:
    with pytest.raises(ClusterError, match=r"not a valid namespace|DNS subdomain") as info:
        call(cluster)
    assert not isinstance(info.value, NotFoundError)


def test_update_with_current_version_bumps_version_and_generation(cluster: Cluster) -> None:
    stored = cluster.create_resource_slice(make_slice("s-0"))
    changed = copy.deepcopy(stored)
    changed["spec"]["devices"][0]["attributes"]["gpu.nvidia.com/index"] = {"int": 7}
    updated = cluster.update_resource_slice(changed)
    assert updated["metadata"]["resourceVersion"] != stored["metadata"]["resourceVersion"]
    assert updated["metadata"]["generation"] == 2
    assert updated["metadata"]["uid"] == stored["metadata"]["uid"]
    assert updated["metadata"]["creationTimestamp"] == stored["metadata"]["creationTimestamp"]
    assert cluster.list_resource_slices() == [updated]


def test_update_that_changes_nothing_keeps_the_resource_version(cluster: Cluster) -> None:
    stored = cluster.create_resource_slice(make_slice("s-0"))
    again = cluster.update_resource_slice(copy.deepcopy(stored))
    assert again == stored


def test_update_with_stale_version_is_a_conflict(cluster: Cluster) -> None:
    stored = cluster.create_resource_slice(make_slice("s-0"))
    first = copy.deepcopy(stored)
    first["metadata"]["labels"] = {"team": "a"}
    cluster.update_resource_slice(first)
    second = copy.deepcopy(stored)  # still carries the old resourceVersion
    second["metadata"]["labels"] = {"team": "b"}
    with pytest.raises(ConflictError, match="ResourceSlice s-0"):
        cluster.update_resource_slice(second)
    assert cluster.list_resource_slices()[0]["metadata"]["labels"] == {"team": "a"}


def test_update_of_a_recreated_slice_with_the_old_uid_is_a_conflict(cluster: Cluster) -> None:
    old = cluster.create_resource_slice(make_slice("s-0"))
    cluster.delete_resource_slice("s-0")
    cluster.create_resource_slice(make_slice("s-0"))
    stale = copy.deepcopy(old)
    del stale["metadata"]["resourceVersion"]
    with pytest.raises(ConflictError, match="ResourceSlice s-0"):
        cluster.update_resource_slice(stale)


def test_update_without_resource_version_is_unconditional(cluster: Cluster) -> None:
    cluster.create_resource_slice(make_slice("s-0"))
    updated = cluster.update_resource_slice(make_slice("s-0", devices=("gpu-0", "gpu-1")))
    assert [d["name"] for d in updated["spec"]["devices"]] == ["gpu-0", "gpu-1"]


def test_update_of_a_missing_slice_is_not_found(cluster: Cluster) -> None:
    with pytest.raises(NotFoundError, match="ResourceSlice gone-0"):
        cluster.update_resource_slice(make_slice("gone-0"))


def test_delete_removes_and_tolerates_missing(cluster: Cluster) -> None:
    cluster.create_resource_slice(make_slice("a"))
    cluster.create_resource_slice(make_slice("b"))
    cluster.delete_resource_slice("a")
    cluster.delete_resource_slice("a")
    cluster.delete_resource_slice("never-existed")
    assert [obj["metadata"]["name"] for obj in cluster.list_resource_slices()] == ["b"]


def test_resource_versions_increase(cluster: Cluster) -> None:
    versions = [
        int(cluster.create_resource_slice(make_slice(f"s-{i}"))["metadata"]["resourceVersion"])
        for i in range(3)
    ]
    assert versions == sorted(versions)
    assert len(set(versions)) == 3


# ResourceClaims


def test_claim_put_get_list(cluster: Cluster) -> None:
    created = cluster.put_resource_claim(make_claim("claim-1"))
    cluster.put_resource_claim(make_claim("claim-2"))
    cluster.put_resource_claim(make_claim("claim-1", namespace="other"))
    got = cluster.get_resource_claim("gpu-test", "claim-1")
    assert got == created
    assert got["kind"] == "ResourceClaim"
    assert got["metadata"]["namespace"] == "gpu-test"
    assert got["metadata"]["uid"]
    in_ns = cluster.list_resource_claims("gpu-test")
    assert [c["metadata"]["name"] for c in in_ns] == ["claim-1", "claim-2"]
    assert all(c["kind"] == "ResourceClaim" for c in in_ns)
    everywhere = cluster.list_resource_claims()
    assert sorted((c["metadata"]["namespace"], c["metadata"]["name"]) for c in everywhere) == [
        ("gpu-test", "claim-1"),
        ("gpu-test", "claim-2"),
        ("other", "claim-1"),
    ]
    assert cluster.list_resource_claims("empty") == []


def test_missing_claim_is_not_found_naming_namespace_and_name(cluster: Cluster) -> None:
    with pytest.raises(NotFoundError, match="ResourceClaim gpu-test/nope"):
        cluster.get_resource_claim("gpu-test", "nope")


def test_claim_put_ignores_status_like_the_apiserver(cluster: Cluster) -> None:
    claim = make_claim("claim-1") | {"status": allocation("gpu-0")}
    stored = cluster.put_resource_claim(claim)
    assert "status" not in stored


def test_claim_put_replaces_an_existing_claim(cluster: Cluster) -> None:
    first = cluster.put_resource_claim(make_claim("claim-1"))
    replacement = make_claim("claim-1")
    replacement["metadata"]["annotations"] = {"demo": "2"}
    second = cluster.put_resource_claim(replacement)
    assert second["metadata"]["uid"] == first["metadata"]["uid"]
    assert second["metadata"]["annotations"] == {"demo": "2"}
    assert cluster.get_resource_claim("gpu-test", "claim-1") == second


def test_claim_put_with_stale_version_is_a_conflict(cluster: Cluster) -> None:
    first = cluster.put_resource_claim(make_claim("claim-1"))
    bumped = copy.deepcopy(first)
    bumped["metadata"]["annotations"] = {"x": "1"}
    cluster.put_resource_claim(bumped)
    stale = copy.deepcopy(first)
    stale["metadata"]["annotations"] = {"x": "2"}
    with pytest.raises(ConflictError, match="ResourceClaim gpu-test/claim-1"):
        cluster.put_resource_claim(stale)


def test_claim_put_at_a_version_of_a_deleted_claim_is_not_found(cluster: Cluster) -> None:
    stored = cluster.put_resource_claim(make_claim("claim-1"))
    cluster.delete_resource_claim("gpu-test", "claim-1")
    with pytest.raises(NotFoundError, match="ResourceClaim gpu-test/claim-1"):
        cluster.put_resource_claim(stored)


def test_status_update_writes_status_only(cluster: Cluster) -> None:
    stored = cluster.put_resource_claim(make_claim("claim-1"))
    obj = copy.deepcopy(stored)
    obj["status"] = allocation("gpu-0")
    obj["spec"]["devices"]["requests"][0]["name"] = "ignored"
    obj["metadata"]["labels"] = {"ignored": "yes"}
    updated = cluster.update_resource_claim_status(obj)
    assert updated["status"] == allocation("gpu-0")
    assert updated["spec"] == stored["spec"]
    assert "labels" not in updated["metadata"]
    assert updated["metadata"]["resourceVersion"] != stored["metadata"]["resourceVersion"]
    assert cluster.get_resource_claim("gpu-test", "claim-1") == updated
    # a later spec/metadata update keeps the status
    relabeled = copy.deepcopy(updated)
    relabeled["metadata"]["labels"] = {"kept": "status"}
    del relabeled["status"]
    after = cluster.put_resource_claim(relabeled)
    assert after["status"] == allocation("gpu-0")
    assert after["metadata"]["labels"] == {"kept": "status"}


def test_status_update_with_stale_version_is_a_conflict(cluster: Cluster) -> None:
    stored = cluster.put_resource_claim(make_claim("claim-1"))
    first = copy.deepcopy(stored) | {"status": allocation("gpu-0")}
    cluster.update_resource_claim_status(first)
    second = copy.deepcopy(stored) | {"status": allocation("gpu-1")}
    with pytest.raises(ConflictError, match="ResourceClaim gpu-test/claim-1"):
        cluster.update_resource_claim_status(second)
    assert cluster.get_resource_claim("gpu-test", "claim-1")["status"] == allocation("gpu-0")


def test_status_update_of_a_missing_claim_is_not_found(cluster: Cluster) -> None:
    with pytest.raises(NotFoundError, match="ResourceClaim gpu-test/nope"):
        cluster.update_resource_claim_status(make_claim("nope") | {"status": allocation("gpu-0")})


def test_claim_delete_tolerates_missing(cluster: Cluster) -> None:
    cluster.put_resource_claim(make_claim("claim-1"))
    cluster.delete_resource_claim("gpu-test", "claim-1")
    cluster.delete_resource_claim("gpu-test", "claim-1")
    with pytest.raises(NotFoundError):
        cluster.get_resource_claim("gpu-test", "claim-1")


# DeviceClasses and version


def test_device_class_put_and_list(cluster: Cluster) -> None:
    gpu_class: dict[str, Any] = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": "gpu.nvidia.com"},
        "spec": {"selectors": [{"cel": {"expression": "device.driver == 'gpu.nvidia.com'"}}]},
    }
    first = cluster.put_device_class(copy.deepcopy(gpu_class))
    gpu_class["spec"]["selectors"].append({"cel": {"expression": "true"}})
    second = cluster.put_device_class(gpu_class)
    assert second["metadata"]["uid"] == first["metadata"]["uid"]
    assert second["metadata"]["generation"] == 2
    assert cluster.list_device_classes() == [second]


def test_server_version(cluster: Cluster) -> None:
    assert cluster.server_version() == (1, 34)


# Watching slices, Nodes, Events


@pytest.fixture(params=["local", "kube"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Cluster, Any]]:
    """A cluster and its raw storage: the LocalCluster's directory or the FakeApiServer."""
    if request.param == "local":
        yield LocalCluster(tmp_path / "cluster"), tmp_path / "cluster"
        return
    with FakeApiServer(version=("1", "35")) as server:
        client = server.api_client()
        try:
            yield KubeCluster(client), server
        finally:
            client.close()


def test_watch_sees_slices_created_and_deleted_by_someone_else(
    backend: tuple[Cluster, Any],
) -> None:
    cluster, _ = backend
    calls: list[float] = []
    stop = threading.Event()
    watcher = threading.Thread(
        target=cluster.watch_resource_slices,
        kwargs={
            "driver": DRIVER,
            "node_name": "node-1",
            "on_change": lambda: calls.append(time.monotonic()),
            "stop": stop,
        },
        daemon=True,
    )
    watcher.start()
    try:
        # Create slices until the (possibly still starting) watch reports one (the local
        # store's watch may also report its first look, before anything was created).
        created: list[str] = []
        deadline = time.monotonic() + 15
        while (not calls or not created) and time.monotonic() < deadline:
            name = f"s-{len(created)}"
            cluster.create_resource_slice(make_slice(name))
            created.append(name)
            wait_until(lambda: bool(calls), timeout=1.0, required=False)
        assert calls, "the watch never reported a created slice"
        if isinstance(cluster, KubeCluster):
            # One event per slice (the watch's initial ADDED events or live ones): once
            # all are in, the next notification can only come from the delete.
            wait_until(lambda: len(calls) >= len(created), "an event for every created slice")
        before = len(calls)
        cluster.delete_resource_slice(created[0])
        wait_until(lambda: len(calls) > before, "the watch to report the deleted slice")
    finally:
        stopped_at = time.monotonic()
        stop.set()
        watcher.join(timeout=30)
    assert not watcher.is_alive()
    # Stopping ends the blocked read at once, not at the server's watch timeout (60 s).
    assert time.monotonic() - stopped_at < 5


def test_get_node(backend: tuple[Cluster, Any]) -> None:
    cluster, storage = backend
    with pytest.raises(NotFoundError, match="Node node-1"):
        cluster.get_node("node-1")
    if isinstance(storage, FakeApiServer):
        storage.add_node("node-1", "uid-of-node-1")
    else:
        (storage / "nodes").mkdir()
        (storage / "nodes" / "node-1.yaml").write_text(
            "apiVersion: v1\nkind: Node\nmetadata:\n  name: node-1\n  uid: uid-of-node-1\n"
        )
    node = cluster.get_node("node-1")
    assert node["kind"] == "Node"
    assert node["metadata"]["uid"] == "uid-of-node-1"


def make_event(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "events.k8s.io/v1",
        "kind": "Event",
        "metadata": {"name": name, "namespace": "gpu-test"},
        "eventTime": "2026-11-25T10:00:00.000000Z",
        "reportingController": "gpu.nvidia.com/kubelet-plugin",
        "reportingInstance": "node-1",
        "action": "PrepareResources",
        "reason": "PrepareFailed",
        "type": "Warning",
        "note": "claim gpu-test/c: no such device",
        "regarding": {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "name": "c"},
    }


def test_create_event_stores_it_once(backend: tuple[Cluster, Any]) -> None:
    cluster, storage = backend
    stored = cluster.create_event(make_event("c.1876"))
    assert stored["apiVersion"] == "events.k8s.io/v1"
    assert stored["metadata"]["uid"]
    assert stored["metadata"]["resourceVersion"]
    assert stored["note"] == "claim gpu-test/c: no such device"
    with pytest.raises(AlreadyExistsError):
        cluster.create_event(make_event("c.1876"))
    if isinstance(storage, FakeApiServer):
        assert [e["metadata"]["name"] for e in storage.objects("events")] == ["c.1876"]
    else:
        assert (storage / "events" / "gpu-test" / "c.1876.yaml").is_file()
