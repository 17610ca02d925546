"""One `ObjectStore` contract, three stores: the in-memory fake, LocalCluster, KubeCluster.

The ComputeDomain controller, plugin and IMEX host are unit-tested on
`MemoryObjectStore`, run in the demo on `LocalCluster` and in a cluster on
`KubeCluster` (here over real HTTP against the fake apiserver): all three
must follow the apiserver's rules the same way, or what passes in one place
would break in another.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from dra_driver.errors import ClusterError, NotFoundError
from dra_driver.kube.api_store import KubeCluster
from dra_driver.kube.cluster import AlreadyExistsError, ConflictError
from dra_driver.kube.local_store import OBJECT_POLL_SECONDS, LocalCluster
from dra_driver.kube.object_store import (
    COMPUTE_DOMAIN,
    COMPUTE_DOMAIN_CLIQUE,
    COMPUTE_DOMAIN_MEMBER,
    EVENT,
    LEASE,
    NODE,
    RESOURCE_CLAIM_TEMPLATE,
    ObjectStore,
)
from tests.fakes import FakeApiServer, wait_until
from tests.fakes.object_store import MemoryObjectStore

NS = "team-a"
FINALIZER = "resource.nvidia.com/computeDomain"


@dataclass
class Stores:
    store: ObjectStore
    other: ObjectStore
    """Another client of the same objects (another process' view, for LocalCluster)."""


@pytest.fixture(params=["memory", "local", "kube"])
def stores(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Stores]:
    if request.param == "memory":
        memory = MemoryObjectStore()
        yield Stores(memory, memory)
    elif request.param == "local":
        yield Stores(LocalCluster(tmp_path / "cluster"), LocalCluster(tmp_path / "cluster"))
    else:
        with FakeApiServer() as server:
            first, second = server.api_client(), server.api_client()
            try:
                yield Stores(KubeCluster(first), KubeCluster(second))
            finally:
                first.close()
                second.close()


@pytest.fixture
def store(stores: Stores) -> ObjectStore:
    return stores.store


def domain(name: str = "imex", *, finalizers: list[str] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": NS, "labels": {"app": "train"}}
    if finalizers:
        meta["finalizers"] = finalizers
    return {
        "apiVersion": "resource.nvidia.com/v1beta1",
        "kind": "ComputeDomain",
        "metadata": meta,
        "spec": {"numNodes": 0, "channel": {"resourceClaimTemplate": {"name": "imex-channel"}}},
    }


def member(uid: str, node: str) -> dict[str, Any]:
    return {
        "metadata": {
            "name": f"{uid}.{node}",
            "namespace": NS,
            "labels": {
                "resource.nvidia.com/computeDomain": uid,
                "resource.nvidia.com/computeDomain.nodeName": node,
            },
        },
        "spec": {"domainUID": uid, "nodeName": node, "cliqueID": "c.0"},
    }


def test_create_get_and_list_by_labels(store: ObjectStore) -> None:
    created = store.create_object(COMPUTE_DOMAIN, domain())
    assert created["metadata"]["uid"]
    assert created["metadata"]["resourceVersion"]
    assert created["kind"] == "ComputeDomain"
    assert store.get_object(COMPUTE_DOMAIN, NS, "imex")["spec"] == domain()["spec"]

    for node in ("n1", "n2"):
        store.create_object(COMPUTE_DOMAIN_MEMBER, member("uid-a", node))
    store.create_object(COMPUTE_DOMAIN_MEMBER, member("uid-b", "n1"))
    on_n1 = store.list_objects(
        COMPUTE_DOMAIN_MEMBER,
        NS,
        labels={"resource.nvidia.com/computeDomain.nodeName": "n1"},
    )
    assert sorted(m["metadata"]["name"] for m in on_n1) == ["uid-a.n1", "uid-b.n1"]
    of_a = store.list_objects(
        COMPUTE_DOMAIN_MEMBER, None, labels={"resource.nvidia.com/computeDomain": "uid-a"}
    )
    assert sorted(m["metadata"]["name"] for m in of_a) == ["uid-a.n1", "uid-a.n2"]
    assert all(m["kind"] == "ComputeDomainMember" for m in of_a)
    assert store.list_objects(COMPUTE_DOMAIN_MEMBER, "other-ns") == []
    assert len(store.list_objects(COMPUTE_DOMAIN_MEMBER)) == 3


def test_create_of_a_taken_name_and_get_of_a_missing_one_name_the_object(
    store: ObjectStore,
) -> None:
    store.create_object(COMPUTE_DOMAIN, domain())
    with pytest.raises(AlreadyExistsError, match="ComputeDomain team-a/imex"):
        store.create_object(COMPUTE_DOMAIN, domain())
    with pytest.raises(NotFoundError, match="ComputeDomainClique team-a/gone"):
        store.get_object(COMPUTE_DOMAIN_CLIQUE, NS, "gone")
    with pytest.raises(NotFoundError, match=r"ComputeDomainMember team-a/u\.n9"):
        store.update_object(COMPUTE_DOMAIN_MEMBER, member("u", "n9"))


def test_an_update_with_a_stale_resource_version_conflicts(store: ObjectStore) -> None:
    created = store.create_object(COMPUTE_DOMAIN_CLIQUE, clique("uid-a.c"))
    first = dict(created, daemons=[{"nodeName": "n1", "index": 0}])
    updated = store.update_object(COMPUTE_DOMAIN_CLIQUE, first)
    assert updated["metadata"]["resourceVersion"] != created["metadata"]["resourceVersion"]
    assert updated["daemons"] == [{"nodeName": "n1", "index": 0}]
    stale = dict(created, daemons=[{"nodeName": "n2", "index": 0}])
    with pytest.raises(ConflictError, match=r"ComputeDomainClique team-a/uid-a\.c"):
        store.update_object(COMPUTE_DOMAIN_CLIQUE, stale)
    assert store.get_object(COMPUTE_DOMAIN_CLIQUE, NS, "uid-a.c")["daemons"][0]["nodeName"] == "n1"


def clique(name: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": NS}, "daemons": []}


def test_status_is_written_only_through_the_status_subresource(store: ObjectStore) -> None:
    created = store.create_object(
        COMPUTE_DOMAIN_MEMBER, member("uid-a", "n1") | {"status": {"state": "Ready"}}
    )
    assert "status" not in created  # dropped on create, as the apiserver does
    with_status = dict(created, status={"state": "Pending"})
    written = store.update_object_status(COMPUTE_DOMAIN_MEMBER, with_status)
    assert written["status"] == {"state": "Pending"}
    # An update of the object keeps the stored status, whatever the body says.
    relabelled = dict(written, status={"state": "Ready"})
    relabelled["metadata"] = dict(written["metadata"], labels={"x": "y"})
    after = store.update_object(COMPUTE_DOMAIN_MEMBER, relabelled)
    assert after["status"] == {"state": "Pending"}
    assert after["metadata"]["labels"] == {"x": "y"}
    # A status write leaves the spec alone.
    spec_change = dict(after, spec={"domainUID": "other"}, status={"state": "Ready"})
    final = store.update_object_status(COMPUTE_DOMAIN_MEMBER, spec_change)
    assert final["spec"]["domainUID"] == "uid-a"
    assert store.get_object(COMPUTE_DOMAIN_MEMBER, NS, "uid-a.n1")["status"] == {"state": "Ready"}


def test_delete_with_finalizers_marks_then_removes_when_they_are_emptied(
    store: ObjectStore,
) -> None:
    store.create_object(COMPUTE_DOMAIN, domain(finalizers=[FINALIZER]))
    store.delete_object(COMPUTE_DOMAIN, NS, "imex")
    marked = store.get_object(COMPUTE_DOMAIN, NS, "imex")
    assert marked["metadata"]["deletionTimestamp"]
    assert marked["metadata"]["finalizers"] == [FINALIZER]
    store.delete_object(COMPUTE_DOMAIN, NS, "imex")  # again: still there, same mark
    again = store.get_object(COMPUTE_DOMAIN, NS, "imex")
    assert again["metadata"]["deletionTimestamp"] == marked["metadata"]["deletionTimestamp"]

    released = dict(again)
    released["metadata"] = dict(again["metadata"], finalizers=[])
    store.update_object(COMPUTE_DOMAIN, released)
    with pytest.raises(NotFoundError):
        store.get_object(COMPUTE_DOMAIN, NS, "imex")
    assert store.list_objects(COMPUTE_DOMAIN, NS) == []
    store.delete_object(COMPUTE_DOMAIN, NS, "imex")  # gone is not an error


def test_delete_without_finalizers_removes_at_once(store: ObjectStore) -> None:
    store.create_object(RESOURCE_CLAIM_TEMPLATE, template())
    store.delete_object(RESOURCE_CLAIM_TEMPLATE, NS, "imex-channel")
    with pytest.raises(NotFoundError, match="ResourceClaimTemplate team-a/imex-channel"):
        store.get_object(RESOURCE_CLAIM_TEMPLATE, NS, "imex-channel")


def template() -> dict[str, Any]:
    return {
        "metadata": {"name": "imex-channel", "namespace": NS},
        "spec": {"spec": {"devices": {"requests": []}}},
    }


def test_the_compute_domain_spec_is_immutable(store: ObjectStore) -> None:
    created = store.create_object(COMPUTE_DOMAIN, domain())
    changed = dict(created, spec=dict(created["spec"], numNodes=4))
    with pytest.raises(ClusterError, match=r"ComputeDomain team-a/imex: spec: .*immutable"):
        store.update_object(COMPUTE_DOMAIN, changed)
    # Metadata (a finalizer, labels) may still change.
    finalized = dict(created)
    finalized["metadata"] = dict(created["metadata"], finalizers=[FINALIZER])
    assert store.update_object(COMPUTE_DOMAIN, finalized)["metadata"]["finalizers"] == [FINALIZER]


def test_nodes_lease_and_events(store: ObjectStore) -> None:
    node = store.create_object(NODE, {"metadata": {"name": "n1", "labels": {"a": "b"}}})
    labelled = dict(node)
    labelled["metadata"] = dict(node["metadata"], labels={"a": "b", "nvidia.com/gpu.clique": "c.0"})
    store.update_object(NODE, labelled)
    assert (
        store.list_objects(NODE, labels={"nvidia.com/gpu.clique": "c.0"})[0]["metadata"]["name"]
        == "n1"
    )
    lease = store.create_object(
        LEASE,
        {
            "metadata": {"name": "leader", "namespace": "kube-system"},
            "spec": {"holderIdentity": "a"},
        },
    )
    renewed = dict(lease, spec={"holderIdentity": "b"})
    assert store.update_object(LEASE, renewed)["spec"]["holderIdentity"] == "b"
    with pytest.raises(ConflictError, match="Lease kube-system/leader"):
        store.update_object(LEASE, dict(lease, spec={"holderIdentity": "c"}))
    event = {
        "metadata": {"name": "imex.1", "namespace": NS},
        "reason": "CliqueFull",
        "note": "clique c.0 of ComputeDomain team-a/imex already has 18 nodes",
    }
    assert store.create_object(EVENT, event)["reason"] == "CliqueFull"
    assert [e["metadata"]["name"] for e in store.list_objects(EVENT, NS)] == ["imex.1"]


def test_watch_fires_on_a_change_by_another_client(stores: Stores) -> None:
    changes = threading.Semaphore(0)
    stop = threading.Event()
    watcher = threading.Thread(
        target=stores.store.watch_objects,
        args=([COMPUTE_DOMAIN, COMPUTE_DOMAIN_MEMBER], changes.release, stop),
        daemon=True,
    )
    watcher.start()
    try:
        assert changes.acquire(timeout=3)  # the first look
        drain(changes)
        created = stores.other.create_object(COMPUTE_DOMAIN_MEMBER, member("uid-a", "n1"))
        assert changes.acquire(timeout=3), "no change seen after a create"
        drain(changes)
        stores.other.update_object_status(
            COMPUTE_DOMAIN_MEMBER, dict(created, status={"state": "Ready"})
        )
        assert changes.acquire(timeout=3), "no change seen after a status write"
        drain(changes)
        stores.other.delete_object(COMPUTE_DOMAIN_MEMBER, NS, "uid-a.n1")
        assert changes.acquire(timeout=3), "no change seen after a delete"
    finally:
        stop.set()
        watcher.join(timeout=5)
    assert not watcher.is_alive(), "watch_objects did not return after stop"


def drain(changes: threading.Semaphore) -> None:
    """Forget the changes seen so far (a watch may report one change more than once)."""
    wait_until(lambda: not changes.acquire(timeout=0.4), "the watch to go quiet", timeout=5)


def test_invalid_names_are_refused_naming_the_kind(store: ObjectStore) -> None:
    bad: Callable[[], object]
    for bad in (
        lambda: store.get_object(COMPUTE_DOMAIN, NS, "Not_A_Name"),
        lambda: store.create_object(COMPUTE_DOMAIN, domain("Bad Name")),
    ):
        with pytest.raises(ClusterError, match="ComputeDomain"):
            bad()


def test_status_writes_check_the_resource_version_and_the_subresource(
    store: ObjectStore,
) -> None:
    created = store.create_object(COMPUTE_DOMAIN_MEMBER, member("uid-a", "n1"))
    store.update_object_status(COMPUTE_DOMAIN_MEMBER, dict(created, status={"state": "Starting"}))
    with pytest.raises(ConflictError, match=r"ComputeDomainMember team-a/uid-a\.n1"):
        store.update_object_status(COMPUTE_DOMAIN_MEMBER, dict(created, status={"state": "Ready"}))
    clique_obj = store.create_object(COMPUTE_DOMAIN_CLIQUE, clique("uid-a.c"))
    with pytest.raises(ClusterError, match=r"ComputeDomainClique team-a/uid-a\.c"):
        store.update_object_status(COMPUTE_DOMAIN_CLIQUE, dict(clique_obj, status={}))


def test_a_local_watch_is_not_woken_by_other_kinds(tmp_path: Path) -> None:
    """Leases renew every 2 s and Events pile up: a node's member watch must not wake for them."""
    cluster = LocalCluster(tmp_path / "cluster")
    calls: list[float] = []
    stop = threading.Event()
    watcher = threading.Thread(
        target=cluster.watch_objects,
        args=([COMPUTE_DOMAIN_MEMBER], lambda: calls.append(time.monotonic()), stop),
        daemon=True,
    )
    watcher.start()
    try:
        wait_until(lambda: len(calls) == 1, "the first look")
        other = LocalCluster(tmp_path / "cluster")
        lease = other.create_object(
            LEASE, {"metadata": {"name": "leader", "namespace": "kube-system"}, "spec": {}}
        )
        for holder in ("a", "b", "c"):
            lease = other.update_object(LEASE, dict(lease, spec={"holderIdentity": holder}))
        time.sleep(3 * OBJECT_POLL_SECONDS)
        assert len(calls) == 1
        other.create_object(COMPUTE_DOMAIN_MEMBER, member("uid-a", "n1"))
        wait_until(lambda: len(calls) == 2, "the member's create to be seen")
    finally:
        stop.set()
        watcher.join(timeout=5)


def test_a_hand_written_local_node_can_be_labelled_and_read_by_the_gpu_driver(
    tmp_path: Path,
) -> None:
    cluster = LocalCluster(tmp_path / "cluster")
    nodes = tmp_path / "cluster" / "nodes"
    nodes.mkdir()
    (nodes / "gb-0.yaml").write_text(
        "apiVersion: v1\nkind: Node\nmetadata:\n  name: gb-0\n  uid: 6b1f3c2e-node\n"
    )
    node = cluster.get_object(NODE, None, "gb-0")
    node["metadata"]["labels"] = {"nvidia.com/gpu.clique": "c.0"}
    cluster.update_object(NODE, node)
    read = cluster.get_node("gb-0")
    assert read["metadata"]["uid"] == "6b1f3c2e-node"
    assert read["metadata"]["labels"] == {"nvidia.com/gpu.clique": "c.0"}


def test_a_kube_watch_survives_apiserver_errors(caplog: pytest.LogCaptureFixture) -> None:
    """A failed list or watch is logged and retried with backoff, never raised."""
    with FakeApiServer() as server:
        client, writer_client = server.api_client(), server.api_client()
        store, writer = KubeCluster(client), KubeCluster(writer_client)
        server.fail_next("GET", 500, "InternalError")  # the watch's first list
        calls = threading.Semaphore(0)
        stop = threading.Event()
        watcher = threading.Thread(
            target=store.watch_objects,
            args=([COMPUTE_DOMAIN_MEMBER], calls.release, stop),
            daemon=True,
        )
        watcher.start()
        try:
            assert calls.acquire(timeout=5), "the watch did not recover from a failed list"
            drain(calls)
            writer.create_object(COMPUTE_DOMAIN_MEMBER, member("uid-a", "n1"))
            assert calls.acquire(timeout=3), "no change seen after the recovery"
        finally:
            stop.set()
            watcher.join(timeout=5)
            client.close()
            writer_client.close()
        assert not watcher.is_alive()
    assert "watching computedomainmembers failed" in caplog.text
    assert "InternalError" in caplog.text


def test_an_object_being_deleted_takes_no_new_finalizers(store: ObjectStore) -> None:
    store.create_object(COMPUTE_DOMAIN, domain(finalizers=[FINALIZER]))
    store.delete_object(COMPUTE_DOMAIN, NS, "imex")
    marked = store.get_object(COMPUTE_DOMAIN, NS, "imex")
    more = dict(marked)
    more["metadata"] = dict(marked["metadata"], finalizers=[FINALIZER, "example.com/other"])
    with pytest.raises(ClusterError, match=r"ComputeDomain team-a/imex: .*no new finalizers"):
        store.update_object(COMPUTE_DOMAIN, more)
    assert store.get_object(COMPUTE_DOMAIN, NS, "imex")["metadata"]["finalizers"] == [FINALIZER]


def test_a_local_watch_sees_a_file_put_there_by_hand(tmp_path: Path) -> None:
    cluster = LocalCluster(tmp_path / "cluster")
    cluster.create_object(COMPUTE_DOMAIN, domain("first"))
    calls: list[float] = []
    stop = threading.Event()
    watcher = threading.Thread(
        target=cluster.watch_objects,
        args=([COMPUTE_DOMAIN], lambda: calls.append(time.monotonic()), stop),
        daemon=True,
    )
    watcher.start()
    try:
        wait_until(lambda: len(calls) == 1, "the first look")
        source = tmp_path / "cluster" / "computedomains" / NS / "first.yaml"
        text = source.read_text().replace("name: first", "name: second")
        # A person edits later than the last write: past the clock tick of directory mtimes.
        time.sleep(0.05)
        (source.parent / "second.yaml").write_text(text)  # as `cp` or an editor would
        wait_until(lambda: len(calls) == 2, "the hand-written domain to be seen")
        assert [d["metadata"]["name"] for d in cluster.list_objects(COMPUTE_DOMAIN, NS)] == [
            "first",
            "second",
        ]
    finally:
        stop.set()
        watcher.join(timeout=5)
