"""KubeCluster specifics: HTTP errors, paging, config loading (against the fake apiserver)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from dra_driver.errors import ClusterError, ConfigError, NotFoundError
from dra_driver.kube import api_store as kube
from dra_driver.kube.access import open_cluster
from dra_driver.kube.api_store import KubeCluster
from tests.fakes import FakeApiServer


@pytest.fixture
def server() -> Iterator[FakeApiServer]:
    with FakeApiServer() as fake:
        yield fake


@pytest.fixture
def cluster(server: FakeApiServer) -> Iterator[KubeCluster]:
    client = server.api_client()
    try:
        yield KubeCluster(client)
    finally:
        client.close()


def make_slice(name: str, node: str = "node-1") -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": name},
        "spec": {
            "driver": "gpu.nvidia.com",
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": [],
        },
    }


def test_server_error_carries_status_and_message(
    server: FakeApiServer, cluster: KubeCluster
) -> None:
    server.fail_next("POST", 500, "InternalError")
    with pytest.raises(ClusterError, match=r"ResourceSlice s-0: create failed: HTTP 500") as info:
        cluster.create_resource_slice(make_slice("s-0"))
    assert "injected failure" in str(info.value)
    server.fail_next("GET", 403, "Forbidden")
    with pytest.raises(ClusterError, match=r"ResourceClaim ns/c: get failed: HTTP 403 Forbidden"):
        cluster.get_resource_claim("ns", "c")


def test_list_404_means_the_api_is_not_served(server: FakeApiServer, cluster: KubeCluster) -> None:
    server.fail_next("GET", 404, "NotFound")
    with pytest.raises(ClusterError, match=r"resource\.k8s\.io/v1 served") as info:
        cluster.list_resource_slices(driver="gpu.nvidia.com")
    assert not isinstance(info.value, NotFoundError)


def test_unreachable_apiserver_is_a_cluster_error() -> None:
    with FakeApiServer() as fake:
        client = fake.api_client()
    try:
        client.configuration.retries = 0
        with pytest.raises(ClusterError, match="cannot reach the apiserver"):
            KubeCluster(client, request_timeout=2).list_resource_slices()
    finally:
        client.close()


def test_list_follows_continue_tokens(
    server: FakeApiServer, cluster: KubeCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(kube, "_LIST_PAGE_SIZE", 2)
    for i in range(5):
        cluster.create_resource_slice(make_slice(f"s-{i}"))
    server.requests.clear()
    names = [obj["metadata"]["name"] for obj in cluster.list_resource_slices()]
    assert names == [f"s-{i}" for i in range(5)]
    assert [method for method, _path in server.requests] == ["GET", "GET", "GET"]


def test_field_selector_is_sent_to_the_apiserver(
    server: FakeApiServer, cluster: KubeCluster
) -> None:
    cluster.list_resource_slices(driver="gpu.nvidia.com", node_name="node-1")
    (_method, path), *_ = server.requests
    assert "fieldSelector=spec.driver%3Dgpu.nvidia.com%2Cspec.nodeName%3Dnode-1" in path


def test_status_goes_to_the_status_subresource(server: FakeApiServer, cluster: KubeCluster) -> None:
    claim = cluster.put_resource_claim(
        {"metadata": {"name": "c", "namespace": "ns"}, "spec": {"devices": {}}}
    )
    server.requests.clear()
    cluster.update_resource_claim_status(claim | {"status": {"reservedFor": []}})
    assert server.requests == [
        ("PUT", "/apis/resource.k8s.io/v1/namespaces/ns/resourceclaims/c/status")
    ]


def test_version_with_vendor_suffix() -> None:
    with FakeApiServer(version=("1", "35+")) as fake:
        client = fake.api_client()
        try:
            assert KubeCluster(client).server_version() == (1, 35)
        finally:
            client.close()


def _write_kubeconfig(path: Path, server_url: str) -> None:
    path.write_text(
        "apiVersion: v1\n"
        "kind: Config\n"
        "clusters:\n"
        f"- name: fake\n  cluster:\n    server: {server_url}\n"
        "users:\n"
        "- name: me\n  user:\n    token: not-a-secret\n"
        "contexts:\n"
        "- name: fake\n  context:\n    cluster: fake\n    user: me\n"
        "current-context: fake\n"
    )


def test_open_cluster_kube_uses_the_kubeconfig(
    server: FakeApiServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")  # an explicit kubeconfig wins
    kubeconfig = tmp_path / "kubeconfig"
    _write_kubeconfig(kubeconfig, server.url)
    cluster = open_cluster("kube", kubeconfig=str(kubeconfig))
    assert isinstance(cluster, KubeCluster)
    assert cluster.server_version() == (1, 34)


def test_missing_kubeconfig_is_a_config_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    with pytest.raises(ConfigError, match="nope"):
        open_cluster("kube", kubeconfig=str(tmp_path / "nope"))


def test_in_cluster_without_service_account_is_a_config_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import kubernetes.config.incluster_config as incluster

    monkeypatch.setattr(incluster, "SERVICE_TOKEN_FILENAME", str(tmp_path / "token"))
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    with pytest.raises(ConfigError, match="in-cluster"):
        open_cluster("kube")
