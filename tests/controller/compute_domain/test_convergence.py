"""64 nodes in 4 cliques join one ComputeDomain at once (E11's controller half, in memory):
the domain converges to Ready with no conflict at all, in a bounded number of writes.

NVIDIA's daemons all write one shared object each, so a 256-pod job meets 409 storms and
takes minutes (#816). Here the members are written by their nodes, the cliques and the
status by the controller alone; the IMEX hosts are stood in for by one thread that
reports each placed member Ready and connected to its clique's placed peers.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from controller.compute_domain.loop import ComputeDomainController, LoopOptions
from controller.compute_domain.reconcile import Options
from dra_driver.compute_domain import membership
from dra_driver.kube.local_store import LocalCluster
from dra_driver.kube.object_store import (
    COMPUTE_DOMAIN,
    COMPUTE_DOMAIN_CLIQUE,
    COMPUTE_DOMAIN_MEMBER,
    ObjectStore,
)
from tests.controller.compute_domain.objects import DRIVER_NS, add_domain, join
from tests.fakes.object_store import MemoryObjectStore
from tests.fakes.waiting import wait_until

NODES, CLIQUES = 64, 4
BOUND_S = 10.0


def _clique(i: int) -> str:
    return f"00000000-0000-0000-0000-000000000001.{i % CLIQUES}"


def _imex_hosts(store: ObjectStore, stop: threading.Event) -> None:
    """Every node's IMEX host at once: a member with a row reports Ready, its index as
    its IMEX node ID and every placed clique peer connected (written on change only)."""

    def react() -> None:
        rows: dict[str, dict[str, Any]] = {}
        peers: dict[str, list[str]] = {}
        for clique in store.list_objects(COMPUTE_DOMAIN_CLIQUE, DRIVER_NS):
            names = [r["nodeName"] for r in clique["daemons"]]
            for row in clique["daemons"]:
                rows[row["nodeName"]] = row
                peers[row["nodeName"]] = [n for n in names if n != row["nodeName"]]
        for member in store.list_objects(COMPUTE_DOMAIN_MEMBER, DRIVER_NS):
            node = member["spec"]["nodeName"]
            if node not in rows:
                continue
            status = membership.member_status_body(
                membership.MemberStatus(
                    state=membership.MemberState.READY,
                    ip_address=f"10.1.{int(node[1:]) // 250}.{int(node[1:]) % 250 + 1}",
                    imex_node_id=rows[node]["index"],
                    peers=dict.fromkeys(peers[node], membership.PeerState.CONNECTED),
                )
            )
            if member.get("status") == status:
                continue
            member["status"] = status
            member["metadata"].pop("resourceVersion")
            store.update_object_status(COMPUTE_DOMAIN_MEMBER, member)

    store.watch_objects([COMPUTE_DOMAIN_CLIQUE], react, stop)


@pytest.mark.parametrize("kind", ["memory", "local"])
def test_64_nodes_in_4_cliques_converge_with_no_conflict(kind: str, tmp_path: Path) -> None:
    store: Any = MemoryObjectStore() if kind == "memory" else LocalCluster(tmp_path)
    controller = ComputeDomainController(
        store, LoopOptions(Options(namespace=DRIVER_NS), debounce=0.02)
    )
    stop = threading.Event()
    threads = [
        threading.Thread(target=controller.run, args=(stop,)),
        threading.Thread(target=_imex_hosts, args=(store, stop)),
    ]
    for thread in threads:
        thread.start()
    try:
        started = time.monotonic()
        domain = add_domain(store, name="big")
        with ThreadPoolExecutor(8) as pool:  # the nodes' plugins, concurrently
            list(pool.map(lambda i: join(store, domain, f"n{i}", _clique(i)), range(NODES)))

        def ready() -> bool:
            obj = store.get_object(COMPUTE_DOMAIN, "ns", "big")
            return bool(obj.get("status", {}).get("status") == "Ready")

        wait_until(ready, "the 64-node domain to be Ready", timeout=BOUND_S)
        took = time.monotonic() - started
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=5)
    status = store.get_object(COMPUTE_DOMAIN, "ns", "big")["status"]
    assert len(status["nodes"]) == NODES
    cliques = store.list_objects(COMPUTE_DOMAIN_CLIQUE, DRIVER_NS)
    assert len(cliques) == CLIQUES
    for clique in cliques:
        assert sorted(r["index"] for r in clique["daemons"]) == list(range(NODES // CLIQUES))
    stats = controller.stats.snapshot()
    if isinstance(store, MemoryObjectStore):
        assert store.conflicts.total() == 0, dict(store.conflicts)
    assert stats["conflicts"] == 0
    assert stats["errors"] == 0
    # Batched by the debounce: far fewer controller writes than one per member event
    # (64 joins + 64 reports would be 128 clique and 128 status writes one by one).
    assert stats["total_writes"] <= 60, stats
    assert took < BOUND_S
