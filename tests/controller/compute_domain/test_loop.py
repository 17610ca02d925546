"""The controller against an in-memory API store: deletion order (E8), retries after
failed writes, Events, writes only on change, malformed domains, the event-driven loop."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest

from controller.compute_domain import reconcile
from controller.compute_domain.loop import ComputeDomainController, LoopOptions
from controller.compute_domain.reconcile import Options
from dra_driver.compute_domain.membership import clique_rows, member_name
from dra_driver.compute_domain.names import FINALIZER
from dra_driver.errors import ClusterError, NotFoundError
from dra_driver.kube.object_store import (
    COMPUTE_DOMAIN,
    COMPUTE_DOMAIN_CLIQUE,
    COMPUTE_DOMAIN_MEMBER,
    EVENT,
    RESOURCE_CLAIM_TEMPLATE,
)
from tests.controller.compute_domain.objects import (
    CLIQUE_A,
    DRIVER_NS,
    add_domain,
    compute_domain,
    join,
    report,
    set_node,
)
from tests.fakes.object_store import MemoryObjectStore
from tests.fakes.waiting import wait_until


def _controller(store: MemoryObjectStore, **options: Any) -> ComputeDomainController:
    return ComputeDomainController(
        store,
        LoopOptions(Options(namespace=DRIVER_NS, **options), retry_min=0.0, debounce=0.01),
    )


def _settle(controller: ComputeDomainController, passes: int = 10) -> None:
    """Pass until a pass plans nothing (the store holds what the controller wants)."""
    for _ in range(passes):
        if controller.reconcile_pass() == 0:
            return
    raise AssertionError(f"no steady state after {passes} passes")


def _domain(store: MemoryObjectStore, name: str = "x", namespace: str = "ns") -> dict[str, Any]:
    return store.get_object(COMPUTE_DOMAIN, namespace, name)


def _condition(domain: dict[str, Any], ctype: str) -> dict[str, Any]:
    return next(c for c in domain["status"]["conditions"] if c["type"] == ctype)


def _events(store: MemoryObjectStore) -> list[tuple[str, str, str]]:
    return [
        (e["reason"], (e.get("related") or {}).get("name", ""), e["note"])
        for e in store.list_objects(EVENT)
    ]


def _ready_members(store: MemoryObjectStore, domain: dict[str, Any], nodes: list[str]) -> None:
    uid = domain["metadata"]["uid"]
    for node in nodes:
        join(store, domain, node)
    for i, node in enumerate(nodes):
        report(
            store,
            member_name(uid, node),
            state="Ready",
            ip_address=f"10.0.0.{i + 1}",
            imex_node_id=i,
            peers={p: "C" for p in nodes if p != node},
        )


@pytest.fixture
def store() -> MemoryObjectStore:
    return MemoryObjectStore()


def _running_domain(
    store: MemoryObjectStore, nodes: list[str]
) -> tuple[ComputeDomainController, dict[str, Any]]:
    controller = _controller(store)
    domain = add_domain(store)
    _settle(controller)
    _ready_members(store, domain, nodes)
    _settle(controller)
    assert _domain(store)["status"]["status"] == "Ready"
    return controller, domain


def test_a_domain_gets_finalizer_template_clique_and_ready_status(store: MemoryObjectStore) -> None:
    controller, domain = _running_domain(store, ["n1", "n2"])
    stored = _domain(store)
    assert FINALIZER in stored["metadata"]["finalizers"]
    assert store.get_object(RESOURCE_CLAIM_TEMPLATE, "ns", "x-channel")
    [clique] = store.list_objects(COMPUTE_DOMAIN_CLIQUE, DRIVER_NS)
    assert clique["metadata"]["name"] == f"{domain['metadata']['uid']}.{CLIQUE_A}"
    assert {r.node_name: r.index for r in clique_rows(clique)} == {"n1": 0, "n2": 1}
    assert [(r["name"], r["status"]) for r in stored["status"]["nodes"]] == [
        ("n1", "Ready"),
        ("n2", "Ready"),
    ]
    assert ("Ready", "", "ComputeDomain ns/x is Ready: 2 node(s) ready in 1 clique(s), every "
            "peer connected: n1, n2") in _events(store)  # fmt: skip
    assert store.conflicts.total() == 0
    # Writes only on change: a full pass over a settled domain writes nothing.
    writes = store.writes.total()
    controller.reconcile_pass(everything=True)
    assert store.writes.total() == writes


def test_deleting_a_domain_with_claims_still_prepared_is_ordered_and_visible(
    store: MemoryObjectStore,
) -> None:
    controller, domain = _running_domain(store, ["n1", "n2"])
    uid = domain["metadata"]["uid"]
    store.delete_object(COMPUTE_DOMAIN, "ns", "x")
    _settle(controller)
    # The template is gone (no new claims), the domain waits for its members.
    with pytest.raises(NotFoundError):
        store.get_object(RESOURCE_CLAIM_TEMPLATE, "ns", "x-channel")
    stored = _domain(store)
    assert stored["metadata"]["finalizers"] == [FINALIZER]
    terminating = _condition(stored, "Terminating")
    assert (terminating["status"], terminating["reason"]) == ("True", "WaitingForClaims")
    assert terminating["message"] == "waiting for n1, n2 to release their channel claims"
    # IMEX keeps running under the running work: the clique stays as it was.
    [clique] = store.list_objects(COMPUTE_DOMAIN_CLIQUE, DRIVER_NS)
    assert {r.node_name for r in clique_rows(clique)} == {"n1", "n2"}
    assert any(reason == "Terminating" for reason, _, _ in _events(store))

    # n1's last claim is unprepared: its member goes; n2 keeps its index.
    store.delete_object(COMPUTE_DOMAIN_MEMBER, DRIVER_NS, member_name(uid, "n1"))
    _settle(controller)
    assert _condition(_domain(store), "Terminating")["message"] == (
        "waiting for n2 to release their channel claims"
    )
    [clique] = store.list_objects(COMPUTE_DOMAIN_CLIQUE, DRIVER_NS)
    assert {r.node_name: r.index for r in clique_rows(clique)} == {"n2": 1}

    # The last member goes: cliques, then the finalizer, then the domain itself.
    store.delete_object(COMPUTE_DOMAIN_MEMBER, DRIVER_NS, member_name(uid, "n2"))
    _settle(controller)
    with pytest.raises(NotFoundError):
        _domain(store)
    assert store.list_objects(COMPUTE_DOMAIN_CLIQUE) == []
    assert store.list_objects(RESOURCE_CLAIM_TEMPLATE) == []
    assert store.conflicts.total() == 0


@pytest.mark.parametrize("verb", ["delete", "update", "status"])
@pytest.mark.parametrize("phase", ["members-left", "no-member-left"])
def test_a_failed_write_at_any_deletion_step_is_retried_and_the_order_holds(
    store: MemoryObjectStore, verb: str, phase: str
) -> None:
    controller, domain = _running_domain(store, ["n1"])
    uid = domain["metadata"]["uid"]
    store.delete_object(COMPUTE_DOMAIN, "ns", "x")
    if phase == "no-member-left":
        _settle(controller)
        store.delete_object(COMPUTE_DOMAIN_MEMBER, DRIVER_NS, member_name(uid, "n1"))
    store.fail_next(verb, ClusterError(f"injected failure of a {verb}"))
    controller.reconcile_pass()
    assert controller.stats.errors == 1
    if phase == "members-left":
        # Whatever failed, the domain and its clique stay while n1 holds a claim.
        assert _domain(store)["metadata"]["finalizers"] == [FINALIZER]
        assert store.list_objects(COMPUTE_DOMAIN_CLIQUE) != []
    else:
        # The finalizer is dropped only after the cliques are gone.
        try:
            _domain(store)
        except NotFoundError:
            assert store.list_objects(COMPUTE_DOMAIN_CLIQUE) == []
    _settle(controller)
    if phase == "members-left":
        with pytest.raises(NotFoundError):
            store.get_object(RESOURCE_CLAIM_TEMPLATE, "ns", "x-channel")
        assert _condition(_domain(store), "Terminating")["status"] == "True"
        store.delete_object(COMPUTE_DOMAIN_MEMBER, DRIVER_NS, member_name(uid, "n1"))
        _settle(controller)
    with pytest.raises(NotFoundError):
        _domain(store)
    assert store.list_objects(COMPUTE_DOMAIN_CLIQUE) == []
    assert store.list_objects(RESOURCE_CLAIM_TEMPLATE) == []


def test_the_nineteenth_node_gets_a_condition_and_an_event_naming_it(
    store: MemoryObjectStore,
) -> None:
    controller = _controller(store)
    domain = add_domain(store)
    nodes = [f"n{i:02d}" for i in range(19)]
    for node in nodes[:18]:
        join(store, domain, node)
    _settle(controller)
    join(store, domain, "n18")
    _settle(controller)
    full = _condition(_domain(store), "CliqueFull")
    assert full["status"] == "True"
    assert "node n18 gets no IMEX index" in full["message"]
    [event] = [e for e in _events(store) if e[0] == "CliqueFull"]
    assert event[1] == "n18"
    assert f"clique {CLIQUE_A} of ComputeDomain ns/x already has 18 nodes" in event[2]
    # Reported once, not at every pass.
    controller.reconcile_pass(everything=True)
    assert len([e for e in _events(store) if e[0] == "CliqueFull"]) == 1


def test_a_node_going_not_ready_degrades_the_domain_with_an_event_naming_it(
    store: MemoryObjectStore,
) -> None:
    controller, _ = _running_domain(store, ["n1", "n2"])
    set_node(store, "n2", "False")
    _settle(controller)
    stored = _domain(store)
    assert stored["status"]["status"] == "NotReady"
    degraded = _condition(stored, "Degraded")
    assert (degraded["status"], degraded["reason"]) == ("True", "NodeNotReady")
    assert ("NodeNotReady", "n2", "node n2: Node is NotReady") in _events(store)


def test_a_malformed_domain_is_reported_and_the_others_are_still_served(
    store: MemoryObjectStore,
) -> None:
    bad = compute_domain("bad")
    bad["spec"]["channel"]["resourceClaimTemplate"] = {"name": "Not_A_Name"}
    store.create_object(COMPUTE_DOMAIN, bad)
    add_domain(store, name="good")
    controller = _controller(store)
    _settle(controller)
    assert store.get_object(RESOURCE_CLAIM_TEMPLATE, "ns", "good-channel")
    ready = _condition(_domain(store, "bad"), "Ready")
    assert ready["reason"] == "InvalidSpec"
    assert "spec.channel.resourceClaimTemplate.name" in ready["message"]
    [event] = [e for e in _events(store) if e[0] == "InvalidSpec"]
    assert "ComputeDomain ns/bad" in event[2]
    assert "spec.channel.resourceClaimTemplate.name" in event[2]


def test_orphaned_cliques_and_templates_are_swept(store: MemoryObjectStore) -> None:
    controller, _ = _running_domain(store, ["n1"])
    # The domain vanishes without its finalizer running (force-removed).
    stored = _domain(store)
    stored["metadata"]["finalizers"] = []
    store.update_object(COMPUTE_DOMAIN, stored)
    store.delete_object(COMPUTE_DOMAIN, "ns", "x")
    _settle(controller)
    assert store.list_objects(COMPUTE_DOMAIN_CLIQUE) == []
    assert store.list_objects(RESOURCE_CLAIM_TEMPLATE) == []


@pytest.fixture
def running(store: MemoryObjectStore) -> Iterator[ComputeDomainController]:
    controller = _controller(store)
    stop = threading.Event()
    thread = threading.Thread(target=controller.run, args=(stop,))
    thread.start()
    yield controller
    stop.set()
    thread.join(timeout=5)
    assert not thread.is_alive()


def test_the_running_loop_follows_changes_as_they_are_made(
    store: MemoryObjectStore, running: ComputeDomainController
) -> None:
    domain = add_domain(store)
    wait_until(lambda: bool(store.list_objects(RESOURCE_CLAIM_TEMPLATE)), "the workload template")
    _ready_members(store, domain, ["n1", "n2"])
    wait_until(lambda: _domain(store).get("status", {}).get("status") == "Ready", "Ready")
    store.delete_object(COMPUTE_DOMAIN, "ns", "x")
    for node in ("n1", "n2"):
        store.delete_object(
            COMPUTE_DOMAIN_MEMBER, DRIVER_NS, member_name(domain["metadata"]["uid"], node)
        )

    def gone() -> bool:
        try:
            _domain(store)
        except NotFoundError:
            return True
        return False

    wait_until(gone, "the domain to be deleted")
    assert store.conflicts.total() == 0
    assert running.stats.conflicts == 0


def test_host_managed_domains_are_ready_with_a_single_channel_template(
    store: MemoryObjectStore,
) -> None:
    add_domain(store, mode="All")
    controller = _controller(store, host_managed=True)
    _settle(controller)
    assert _domain(store)["status"]["status"] == "Ready"
    rct = store.get_object(RESOURCE_CLAIM_TEMPLATE, "ns", "x-channel")
    params = rct["spec"]["spec"]["devices"]["config"][0]["opaque"]["parameters"]
    assert params["allocationMode"] == "Single"
    assert store.list_objects(COMPUTE_DOMAIN_CLIQUE) == []


def test_a_failed_orphan_sweep_is_retried_by_the_running_loop(store: MemoryObjectStore) -> None:
    controller, _ = _running_domain(store, ["n1"])
    stored = _domain(store)
    stored["metadata"]["finalizers"] = []
    store.update_object(COMPUTE_DOMAIN, stored)
    store.delete_object(COMPUTE_DOMAIN, "ns", "x")  # gone without its finalizer running
    store.fail_next("delete", ClusterError("injected failure of a delete"))
    stop = threading.Event()
    thread = threading.Thread(target=controller.run, args=(stop,))
    thread.start()
    try:
        # Nothing changes after the failed sweep: the loop retries it on its own.
        wait_until(
            lambda: (
                store.list_objects(COMPUTE_DOMAIN_CLIQUE) == []
                and store.list_objects(RESOURCE_CLAIM_TEMPLATE) == []
            ),
            "the orphans to be swept",
        )
    finally:
        stop.set()
        thread.join(timeout=5)
    assert controller.stats.errors == 1


def test_an_unexpected_error_on_one_domain_does_not_stop_the_others(
    store: MemoryObjectStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = reconcile.plan_domain

    def plan(objs: Any, options: Any, *, now: str) -> Any:
        if objs.domain["metadata"]["name"] == "broken":
            raise KeyError("a bug")
        return real(objs, options, now=now)

    monkeypatch.setattr(reconcile, "plan_domain", plan)
    add_domain(store, name="broken")
    add_domain(store, name="fine")
    controller = _controller(store)
    controller.reconcile_pass()
    assert store.get_object(RESOURCE_CLAIM_TEMPLATE, "ns", "fine-channel")
    assert controller.stats.errors == 1


def test_a_deleted_template_of_a_live_domain_is_let_go_and_made_anew(
    store: MemoryObjectStore,
) -> None:
    controller, _ = _running_domain(store, ["n1"])
    first = store.get_object(RESOURCE_CLAIM_TEMPLATE, "ns", "x-channel")
    store.delete_object(RESOURCE_CLAIM_TEMPLATE, "ns", "x-channel")
    _settle(controller)
    again = store.get_object(RESOURCE_CLAIM_TEMPLATE, "ns", "x-channel")
    assert again["metadata"]["uid"] != first["metadata"]["uid"]
    assert "deletionTimestamp" not in again["metadata"]
    assert again["metadata"]["finalizers"] == [FINALIZER]
