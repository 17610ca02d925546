"""Channel isolation end to end (`--imex-isolation channel`; computedomain.md §7 item 6, §8.2 E4).

The E4 setting with the opt-in mode: two ComputeDomains in one clique, with
pods on the same node. Real controller, CD kubelet plugin and IMEX host
processes on simulated GB200 nodes, all three run with `--imex-isolation
channel`. Each domain gets its own channel (the lowest free from 1), each pod
gets only its domain's channel, one IMEX daemon per node serves the clique's
one IMEX domain and connects to every member node of the clique; deleting a
domain leaves the other's pods working and frees its channel for the next.
Wall-clock bounds are asserted with `time.monotonic()`.
"""

from __future__ import annotations

import re
import time
from typing import Any

import pytest

from dra_driver.composition.compute_domain_cluster import (
    DRIVER_NAMESPACE,
    ComputeDomainCluster,
    SimNode,
    channel_pod,
)
from dra_driver.composition.compute_domain_kubelet import PodPlacementError
from dra_driver.compute_domain import isolation, membership
from dra_driver.compute_domain.names import DOMAIN_ATTRIBUTE, DRIVER_NAME
from dra_driver.errors import NotFoundError
from dra_driver.kube.object_store import (
    COMPUTE_DOMAIN,
    COMPUTE_DOMAIN_CLIQUE,
    RESOURCE_CLAIM_TEMPLATE,
)

pytestmark = pytest.mark.slow

NS = "team-a"
CHANNEL_MODE = ("--imex-isolation=channel",)


@pytest.fixture
def cluster(make_cluster: Any) -> ComputeDomainCluster:
    made: ComputeDomainCluster = make_cluster(
        3, plugin_args=CHANNEL_MODE, imex_host_args=CHANNEL_MODE, controller_args=CHANNEL_MODE
    )
    return made


def _get(cluster: ComputeDomainCluster, kind: Any, namespace: str, name: str) -> Any:
    try:
        return cluster.store.get_object(kind, namespace, name)
    except NotFoundError:
        return None


def _condition(cluster: ComputeDomainCluster, name: str, kind: str) -> dict[str, Any]:
    domain = _get(cluster, COMPUTE_DOMAIN, NS, name) or {}
    for condition in (domain.get("status") or {}).get("conditions") or []:
        if condition.get("type") == kind:
            return dict(condition)
    return {}


def _ready(cluster: ComputeDomainCluster, name: str) -> bool:
    return _condition(cluster, name, "Ready").get("status") == "True"


def _shared_cliques(cluster: ComputeDomainCluster) -> list[dict[str, Any]]:
    return cluster.store.list_objects(
        COMPUTE_DOMAIN_CLIQUE, DRIVER_NAMESPACE, labels={isolation.ISOLATION_LABEL: "channel"}
    )


def _imex_major(node: SimNode) -> int:
    text = (node.sim_state.with_name(node.sim_state.name + ".proc") / "devices").read_text()
    found = re.search(r"^\s*(\d+)\s+nvidia-caps-imex-channels\s*$", text, re.MULTILINE)
    assert found, text
    return int(found.group(1))


def _channel_of(cluster: ComputeDomainCluster, name: str) -> int:
    channel = isolation.domain_channel(cluster.compute_domain(NS, name))
    assert channel is not None
    return channel


def _only_channel(pod: Any) -> str:
    (node,) = pod.device_nodes
    return str(node["path"])


def test_two_domains_share_a_node_each_on_its_own_channel_in_one_clique_imex(
    cluster: ComputeDomainCluster,
) -> None:
    cluster.start()
    began = time.monotonic()
    alpha = cluster.apply_compute_domain(NS, "alpha", "alpha-channel")["metadata"]["uid"]
    beta = cluster.apply_compute_domain(NS, "beta", "beta-channel")["metadata"]["uid"]
    cluster.wait_for(
        lambda: _get(cluster, RESOURCE_CLAIM_TEMPLATE, NS, "beta-channel"), "templates", 10.0
    )
    # The template does not pin the node's domain: a node serves every domain.
    template = _get(cluster, RESOURCE_CLAIM_TEMPLATE, NS, "alpha-channel")
    (request,) = template["spec"]["spec"]["devices"]["requests"]
    assert "selectors" not in request["exactly"]

    pods = {
        (domain, node): cluster.run_pod(
            channel_pod(NS, f"{domain}-{node}", f"{domain}-channel", node=node)
        )
        for domain, node in (
            ("alpha", "node-1"),
            ("alpha", "node-2"),
            ("beta", "node-1"),
            ("beta", "node-3"),
        )
    }
    a, b = _channel_of(cluster, "alpha"), _channel_of(cluster, "beta")
    assert (a, b) == (1, 2)  # the lowest free from 1, in creation order; never channel 0
    major = _imex_major(cluster.nodes["node-1"])
    for (domain, _node), pod in pods.items():
        number = a if domain == "alpha" else b
        assert pod.device_nodes == [
            {
                "path": f"/dev/nvidia-caps-imex-channels/channel{number}",
                "type": "c",
                "major": major,
                "minor": number,
                "fileMode": 0o666,
            }
        ]
    # channel-0 is published without a domain, on the node serving both.
    for s in cluster.store.list_resource_slices(driver=DRIVER_NAME, node_name="node-1"):
        for device in s["spec"].get("devices") or []:
            assert DOMAIN_ATTRIBUTE not in device["attributes"]

    cluster.wait_for(lambda: _ready(cluster, "alpha") and _ready(cluster, "beta"), "Ready", 20.0)
    assert f"IMEX channel {a}" in _condition(cluster, "alpha", "ImexChannel")["message"]
    # One clique-wide IMEX domain: one clique object, every member node once, indices 0..2.
    (clique,) = _shared_cliques(cluster)
    rows = membership.clique_rows(clique)
    assert sorted((r.node_name, r.index) for r in rows) == [
        ("node-1", 0),
        ("node-2", 1),
        ("node-3", 2),
    ]
    shared = isolation.shared_domain_uid(rows[0].clique_id)
    # node-1 runs ONE IMEX daemon for both domains, connected to both other nodes.
    node1 = cluster.nodes["node-1"]
    assert len(node1.imex_daemon_pids()) == 1
    assert node1.imex_ctl(shared, "-q").stdout == "READY\n"
    cluster.wait_for(
        lambda: list(node1.imex_peers(shared).values()).count("C") == 3,  # itself, node-2, node-3
        "node-1's IMEX connected to the clique",
        10.0,
    )
    for n in ("node-2", "node-3"):
        assert len(cluster.nodes[n].imex_daemon_pids()) == 1
    ready_after = time.monotonic() - began

    # Beta goes: its pods end, the domain is deleted; alpha's pods keep working.
    alpha_imex = node1.imex_daemon_pids()
    for node in ("node-1", "node-3"):
        assert set(cluster.delete_pod(NS, f"beta-{node}").values()) == {""}
    cluster.delete_compute_domain(NS, "beta")
    cluster.wait_for(lambda: _get(cluster, COMPUTE_DOMAIN, NS, "beta") is None, "beta gone", 15.0)
    cluster.wait_for(
        lambda: (
            {r.node_name for c in _shared_cliques(cluster) for r in membership.clique_rows(c)}
            == {"node-1", "node-2"}
        ),
        "node-3 out of the clique-wide IMEX domain",
        10.0,
    )
    assert node1.imex_daemon_pids() == alpha_imex  # not restarted under alpha's work
    assert _ready(cluster, "alpha")
    again = cluster.run_pod(channel_pod(NS, "alpha-again", "alpha-channel", node="node-1"))
    assert _only_channel(again) == f"/dev/nvidia-caps-imex-channels/channel{a}"
    cluster.wait_for(lambda: not cluster.nodes["node-3"].imex_daemon_pids(), "node-3 IMEX", 10.0)

    # Beta's channel is free again: the next domain gets it.
    cluster.apply_compute_domain(NS, "gamma", "gamma-channel")
    gamma = cluster.run_pod(channel_pod(NS, "gamma-node-1", "gamma-channel", node="node-1"))
    assert _channel_of(cluster, "gamma") == b
    assert _only_channel(gamma) == f"/dev/nvidia-caps-imex-channels/channel{b}"
    assert alpha != beta  # two ComputeDomains, not one seen twice
    elapsed = time.monotonic() - began
    assert ready_after < 30.0, f"both domains Ready after {ready_after:.1f} s"
    assert elapsed < 60.0, f"the scenario took {elapsed:.1f} s"


def test_allocation_mode_all_is_refused_naming_the_domain_and_the_field(
    cluster: ComputeDomainCluster,
) -> None:
    cluster.start()
    began = time.monotonic()
    cluster.apply_compute_domain(NS, "wide", "wide-channel", allocation_mode="All")
    with pytest.raises(
        PodPlacementError, match=r"ComputeDomain team-a/wide: spec\.channel\.allocationMode: All"
    ):
        cluster.run_pod(channel_pod(NS, "wide-0", "wide-channel", node="node-1"), timeout=3.0)
    elapsed = time.monotonic() - began
    assert elapsed < 15.0, f"took {elapsed:.1f} s"
