"""The controller through the kubernetes client (KubeCluster) against the fake API server:
the watch drives it, /status and finalizers are the apiserver's, and a whole life of a
domain (join, Ready, delete while claimed, release) passes with no conflict."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from controller.compute_domain.loop import ComputeDomainController, LoopOptions
from controller.compute_domain.reconcile import Options
from dra_driver.compute_domain.membership import MemberStatus, member_name, member_status_body
from dra_driver.errors import NotFoundError
from dra_driver.kube.api_store import KubeCluster
from dra_driver.kube.object_store import (
    COMPUTE_DOMAIN,
    COMPUTE_DOMAIN_CLIQUE,
    COMPUTE_DOMAIN_MEMBER,
    EVENT,
    RESOURCE_CLAIM_TEMPLATE,
)
from tests.controller.compute_domain.objects import DRIVER_NS, compute_domain, member
from tests.fakes import FakeApiServer, wait_until


@pytest.fixture
def kube() -> Iterator[tuple[KubeCluster, KubeCluster]]:
    with FakeApiServer() as server:
        controller_client, user_client = server.api_client(), server.api_client()
        try:
            yield KubeCluster(controller_client), KubeCluster(user_client)
        finally:
            controller_client.close()
            user_client.close()


def test_a_domain_lives_and_is_deleted_through_the_kubernetes_api(
    kube: tuple[KubeCluster, KubeCluster],
) -> None:
    store, user = kube
    controller = ComputeDomainController(
        store, LoopOptions(Options(namespace=DRIVER_NS), debounce=0.02)
    )
    stop = threading.Event()
    thread = threading.Thread(target=controller.run, args=(stop,))
    thread.start()
    try:
        domain = user.create_object(COMPUTE_DOMAIN, compute_domain())
        uid = domain["metadata"]["uid"]
        wait_until(lambda: bool(user.list_objects(RESOURCE_CLAIM_TEMPLATE)), "the template")
        nodes = ["n1", "n2"]
        for node in nodes:
            user.create_object(COMPUTE_DOMAIN_MEMBER, member(domain, node))
        wait_until(lambda: bool(user.list_objects(COMPUTE_DOMAIN_CLIQUE)), "the clique")
        [clique] = user.list_objects(COMPUTE_DOMAIN_CLIQUE, DRIVER_NS)
        index = {r["nodeName"]: r["index"] for r in clique["daemons"]}
        for node in nodes:  # each node's IMEX host reports
            obj = user.get_object(COMPUTE_DOMAIN_MEMBER, DRIVER_NS, member_name(uid, node))
            obj["status"] = member_status_body(
                MemberStatus(
                    state="Ready",
                    ip_address=f"10.0.0.{index[node] + 1}",
                    imex_node_id=index[node],
                    peers={p: "C" for p in nodes if p != node},
                )
            )
            user.update_object_status(COMPUTE_DOMAIN_MEMBER, obj)

        def status() -> str:
            return str(user.get_object(COMPUTE_DOMAIN, "ns", "x").get("status", {}).get("status"))

        wait_until(lambda: status() == "Ready", "Ready")
        # The Event follows the status write: wait for it too.
        wait_until(
            lambda: any(e["reason"] == "Ready" for e in user.list_objects(EVENT, "ns")),
            "a Ready Event",
        )

        user.delete_object(COMPUTE_DOMAIN, "ns", "x")
        wait_until(lambda: not user.list_objects(RESOURCE_CLAIM_TEMPLATE), "the template gone")

        def terminating() -> str:
            conditions = user.get_object(COMPUTE_DOMAIN, "ns", "x")["status"]["conditions"]
            return str(next(c["message"] for c in conditions if c["type"] == "Terminating"))

        wait_until(
            lambda: terminating() == "waiting for n1, n2 to release their channel claims",
            "Terminating naming the nodes that hold claims",
        )
        for node in nodes:
            user.delete_object(COMPUTE_DOMAIN_MEMBER, DRIVER_NS, member_name(uid, node))

        def gone() -> bool:
            try:
                user.get_object(COMPUTE_DOMAIN, "ns", "x")
            except NotFoundError:
                return True
            return False

        wait_until(gone, "the domain gone")
        assert user.list_objects(COMPUTE_DOMAIN_CLIQUE) == []
    finally:
        stop.set()
        thread.join(timeout=10)
    assert controller.stats.conflicts == 0
    assert controller.stats.errors == 0
