"""Channel isolation in the controller: each ComputeDomain's channel (lowest free from 1,
kept for its life, freed when it is gone, none when all are taken) and the clique-wide
cliques (one per clique, an index per node of any domain)."""

from __future__ import annotations

from typing import Any

import pytest

from controller.compute_domain.channels import assign_channels
from controller.compute_domain.loop import ComputeDomainController, LoopOptions
from controller.compute_domain.reconcile import DomainObjects, Options, plan_domain
from dra_driver.compute_domain import isolation, membership
from dra_driver.compute_domain.names import FINALIZER
from dra_driver.errors import NotFoundError
from dra_driver.kube.object_store import (
    COMPUTE_DOMAIN,
    COMPUTE_DOMAIN_CLIQUE,
    COMPUTE_DOMAIN_MEMBER,
    EVENT,
    RESOURCE_CLAIM_TEMPLATE,
)
from tests.controller.compute_domain.objects import (
    CLIQUE_A,
    CLIQUE_B,
    DRIVER_NS,
    add_domain,
    compute_domain,
    member,
    report,
)
from tests.fakes.object_store import MemoryObjectStore

# -- the allocator --------------------------------------------------------------------------


def test_new_domains_get_the_lowest_free_channels_from_1_in_the_order_given() -> None:
    placement = assign_channels({}, ["c", "a", "b"])
    assert dict(placement.channels) == {"c": 1, "a": 2, "b": 3}
    assert placement.left_out == ()


def test_a_domain_keeps_its_channel_and_a_freed_one_is_reused_lowest_first() -> None:
    first = assign_channels({}, ["a", "b", "c"])
    # b is gone: a and c keep theirs, the newcomer d gets b's channel.
    second = assign_channels(first.channels, ["a", "c", "d"])
    assert dict(second.channels) == {"a": 1, "c": 3, "d": 2}


def test_channel_0_is_never_given_and_a_copied_or_bad_channel_is_reassigned() -> None:
    placement = assign_channels({"a": 0, "b": 5, "c": 5, "d": 2048}, ["a", "b", "c", "d"])
    assert placement.channels["b"] == 5  # the first holder keeps it
    assert sorted(placement.channels[u] for u in "acd") == [1, 2, 3]


def test_a_domain_being_deleted_keeps_its_channel_but_gets_no_new_one() -> None:
    placement = assign_channels({"old": 4}, ["old", "closing", "new"], no_new=["old", "closing"])
    assert dict(placement.channels) == {"old": 4, "new": 1}


def test_when_every_channel_is_taken_the_newcomer_is_left_out_until_one_is_freed() -> None:
    full = assign_channels({}, ["a", "b", "c"], first=1, last=2)
    assert dict(full.channels) == {"a": 1, "b": 2}
    assert full.left_out == ("c",)
    freed = assign_channels(full.channels, ["b", "c"], first=1, last=2)
    assert dict(freed.channels) == {"b": 2, "c": 1}
    every = assign_channels({}, [f"d{i}" for i in range(2048)])
    assert sorted(every.channels.values()) == list(range(1, 2048))
    assert every.left_out == ("d2047",)


def test_an_empty_range_is_a_programming_error() -> None:
    with pytest.raises(ValueError, match="empty"):
        assign_channels({}, ["a"], first=3, last=2)


# -- the controller ---------------------------------------------------------------------------


def _controller(store: MemoryObjectStore) -> ComputeDomainController:
    options = Options(namespace=DRIVER_NS, isolation=isolation.CHANNEL)
    return ComputeDomainController(store, LoopOptions(options, retry_min=0.0, debounce=0.01))


def _settle(controller: ComputeDomainController) -> None:
    for _ in range(10):
        if controller.reconcile_pass() == 0:
            return
    raise AssertionError("no steady state after 10 passes")


def _join(store: MemoryObjectStore, domain: dict[str, Any], node: str, clique: str) -> str:
    """The channel-mode plugin's member of `node` in `domain` (labelled with the mode)."""
    obj = member(domain, node, clique)
    obj["metadata"]["labels"][isolation.ISOLATION_LABEL] = isolation.CHANNEL
    store.create_object(COMPUTE_DOMAIN_MEMBER, obj)
    return str(obj["metadata"]["name"])


def _condition(store: MemoryObjectStore, name: str, ctype: str) -> dict[str, Any]:
    domain = store.get_object(COMPUTE_DOMAIN, "ns", name)
    return next(c for c in domain["status"]["conditions"] if c["type"] == ctype)


def _shared(store: MemoryObjectStore) -> dict[str, list[tuple[str, int]]]:
    return {
        c["metadata"]["labels"][membership.CLIQUE_LABEL]: [
            (r.node_name, r.index) for r in membership.clique_rows(c)
        ]
        for c in store.list_objects(
            COMPUTE_DOMAIN_CLIQUE, DRIVER_NS, labels={isolation.ISOLATION_LABEL: "channel"}
        )
    }


def test_two_domains_on_shared_nodes_get_channels_one_clique_wide_clique_and_go_ready() -> None:
    store = MemoryObjectStore()
    alpha = add_domain(store, name="alpha")
    beta = add_domain(store, name="beta")
    controller = _controller(store)
    _settle(controller)
    assert isolation.domain_channel(store.get_object(COMPUTE_DOMAIN, "ns", "alpha")) == 1
    assert isolation.domain_channel(store.get_object(COMPUTE_DOMAIN, "ns", "beta")) == 2
    template = store.get_object(RESOURCE_CLAIM_TEMPLATE, "ns", "alpha-channel")
    assert "selectors" not in template["spec"]["spec"]["devices"]["requests"][0]["exactly"]

    names = {
        ("alpha", "n1"): _join(store, alpha, "n1", CLIQUE_A),
        ("alpha", "n2"): _join(store, alpha, "n2", CLIQUE_A),
        ("beta", "n1"): _join(store, beta, "n1", CLIQUE_A),
        ("beta", "n3"): _join(store, beta, "n3", CLIQUE_A),
        ("beta", "n9"): _join(store, beta, "n9", CLIQUE_B),
    }
    _settle(controller)
    # One clique-wide clique per clique, each node once, whatever its domains; no per-domain one.
    assert _shared(store) == {CLIQUE_A: [("n1", 0), ("n2", 1), ("n3", 2)], CLIQUE_B: [("n9", 0)]}
    assert len(store.list_objects(COMPUTE_DOMAIN_CLIQUE, DRIVER_NS)) == 2
    index = {"n1": 0, "n2": 1, "n3": 2, "n9": 0}
    clique_nodes = {"n1": ["n2", "n3"], "n2": ["n1", "n3"], "n3": ["n1", "n2"], "n9": []}
    for (_domain, node), name in names.items():
        report(
            store,
            name,
            state="Ready",
            ip_address=f"10.0.0.{index[node] + 1}",
            imex_node_id=index[node],
            peers=dict.fromkeys(clique_nodes[node], "C"),
        )
    _settle(controller)
    for name, channel in (("alpha", 1), ("beta", 2)):
        assert _condition(store, name, "Ready")["status"] == "True"
        imex = _condition(store, name, "ImexChannel")
        assert (imex["status"], imex["reason"]) == ("True", "Assigned")
        assert f"channel{channel}" in imex["message"]
    rows = store.get_object(COMPUTE_DOMAIN, "ns", "beta")["status"]["nodes"]
    assert sorted((r["name"], r["index"]) for r in rows) == [("n1", 0), ("n3", 2), ("n9", 0)]

    # beta goes (its claims released: members deleted); its channel and node n3 are freed.
    store.delete_object(COMPUTE_DOMAIN, "ns", "beta")
    for (domain, _node), name in names.items():
        if domain == "beta":
            store.delete_object(COMPUTE_DOMAIN_MEMBER, DRIVER_NS, name)
    _settle(controller)
    with pytest.raises(NotFoundError):
        store.get_object(COMPUTE_DOMAIN, "ns", "beta")
    assert _shared(store) == {CLIQUE_A: [("n1", 0), ("n2", 1)]}
    assert isolation.domain_channel(store.get_object(COMPUTE_DOMAIN, "ns", "alpha")) == 1
    add_domain(store, name="gamma")
    _settle(controller)
    assert isolation.domain_channel(store.get_object(COMPUTE_DOMAIN, "ns", "gamma")) == 2


def test_a_deleting_domain_keeps_its_channel_until_it_is_gone() -> None:
    store = MemoryObjectStore()
    alpha = add_domain(store, name="alpha")
    controller = _controller(store)
    _settle(controller)
    name = _join(store, alpha, "n1", CLIQUE_A)
    store.delete_object(COMPUTE_DOMAIN, "ns", "alpha")  # held by its finalizer
    add_domain(store, name="beta")
    _settle(controller)
    assert isolation.domain_channel(store.get_object(COMPUTE_DOMAIN, "ns", "alpha")) == 1
    assert isolation.domain_channel(store.get_object(COMPUTE_DOMAIN, "ns", "beta")) == 2
    store.delete_object(COMPUTE_DOMAIN_MEMBER, DRIVER_NS, name)
    _settle(controller)
    assert [d["metadata"]["name"] for d in store.list_objects(COMPUTE_DOMAIN)] == ["beta"]
    assert _shared(store) == {}


def test_a_member_of_a_plugin_in_domain_mode_is_reported_naming_both_modes() -> None:
    store = MemoryObjectStore()
    alpha = add_domain(store, name="alpha")
    controller = _controller(store)
    _settle(controller)
    store.create_object(COMPUTE_DOMAIN_MEMBER, member(alpha, "n1"))  # no isolation label
    _settle(controller)
    notes = [e["note"] for e in store.list_objects(EVENT) if e["reason"] == "IsolationMismatch"]
    assert notes
    assert "--imex-isolation domain" in notes[0]
    assert "--imex-isolation channel" in notes[0]


def test_a_domain_with_no_free_channel_is_not_ready_and_says_why() -> None:
    domain = compute_domain("late")
    domain["metadata"]["finalizers"] = [FINALIZER]
    plan = plan_domain(
        DomainObjects(domain=domain, channel=None),
        Options(namespace=DRIVER_NS, isolation=isolation.CHANNEL),
        now="2026-11-28T00:00:00Z",
    )
    assert plan.status is not None
    conditions = {c["type"]: c for c in plan.status.body["conditions"]}
    assert (conditions["ImexChannel"]["status"], conditions["ImexChannel"]["reason"]) == (
        "False",
        "ChannelsExhausted",
    )
    assert "1..2047" in conditions["ImexChannel"]["message"]
    assert (conditions["Ready"]["status"], conditions["Ready"]["reason"]) == ("False", "NoChannel")
    assert "ChannelsExhausted" in {n.reason for n in plan.notices}
    assert not any(w.verb == "set_channel" for w in plan.writes)


def test_domain_mode_writes_no_channel_and_keeps_its_four_conditions() -> None:
    domain = compute_domain("plain")
    plan = plan_domain(
        DomainObjects(domain=domain, channel=7),
        Options(namespace=DRIVER_NS),
        now="2026-11-28T00:00:00Z",
    )
    assert plan.status is not None
    assert [c["type"] for c in plan.status.body["conditions"]] == [
        "Ready",
        "Degraded",
        "CliqueFull",
        "Terminating",
    ]
    assert not any(w.verb == "set_channel" for w in plan.writes)


def test_a_controller_in_domain_mode_removes_clique_wide_cliques_left_by_channel_mode() -> None:
    store = MemoryObjectStore()
    row = membership.CliqueRow("n1", "10.0.0.1", CLIQUE_A, 0, "Ready")
    store.create_object(
        COMPUTE_DOMAIN_CLIQUE, membership.build_shared_clique(CLIQUE_A, [row], namespace=DRIVER_NS)
    )
    controller = ComputeDomainController(
        store, LoopOptions(Options(namespace=DRIVER_NS), retry_min=0.0, debounce=0.01)
    )
    controller.reconcile_pass()
    assert store.list_objects(COMPUTE_DOMAIN_CLIQUE, DRIVER_NS) == []
