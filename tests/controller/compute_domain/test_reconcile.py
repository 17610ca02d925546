"""What the controller decides to write for one ComputeDomain (pure planning and status)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from controller.compute_domain import reconcile
from controller.compute_domain.reconcile import DomainObjects, Options, Plan, plan_domain
from dra_driver.compute_domain.api import decode_compute_domain
from dra_driver.compute_domain.membership import clique_rows
from dra_driver.compute_domain.names import DOMAIN_LABEL, FINALIZER
from dra_driver.compute_domain.templates import workload_claim_template
from tests.controller.compute_domain.objects import (
    CLIQUE_A,
    CLIQUE_B,
    DRIVER_NS,
    compute_domain,
    member,
    with_status,
)

NOW = "2026-11-28T15:00:00Z"
LATER = "2026-11-28T15:05:00Z"
OPTIONS = Options(namespace=DRIVER_NS)


def _live(domain: dict[str, Any]) -> dict[str, Any]:
    """The domain as it stands once the controller added its finalizer and template."""
    out = dict(domain)
    out["metadata"] = {**domain["metadata"], "finalizers": [FINALIZER], "resourceVersion": "7"}
    return out


def _template(domain: dict[str, Any]) -> dict[str, Any]:
    return workload_claim_template(decode_compute_domain(domain))


def _plan(
    domain: dict[str, Any],
    members: Sequence[dict[str, Any]] = (),
    *,
    cliques: Sequence[dict[str, Any]] = (),
    node_ready: dict[str, str | None] | None = None,
    options: Options = OPTIONS,
    now: str = NOW,
    templates: list[dict[str, Any]] | None = None,
) -> Plan:
    return plan_domain(
        DomainObjects(
            domain=domain,
            members=list(members),
            cliques=list(cliques),
            templates=[_template(domain)] if templates is None else templates,
            node_ready=node_ready or {},
        ),
        options,
        now=now,
    )


def _verbs(plan: Plan) -> list[tuple[str, str]]:
    return [(w.verb, w.kind.kind) for w in plan.writes]


def _status(plan: Plan) -> dict[str, Any]:
    assert plan.status is not None
    return plan.status.body


def _condition(plan: Plan, ctype: str) -> dict[str, Any]:
    return next(c for c in _status(plan)["conditions"] if c["type"] == ctype)


def _cliques_written(plan: Plan) -> dict[str, dict[str, Any]]:
    return {
        w.name: w.obj
        for w in plan.writes
        if w.kind.kind == "ComputeDomainClique" and w.verb in ("create", "update")
    }


def _ready_member(
    domain: dict[str, Any], node: str, peers: list[str], index: int, **kw: Any
) -> dict[str, Any]:
    return with_status(
        member(domain, node, kw.pop("clique", CLIQUE_A)),
        state="Ready",
        ip_address=kw.pop("ip", f"10.0.0.{index + 1}"),
        imex_node_id=index,
        peers={p: kw.get("peer_state", "C") for p in peers if p != node},
    )


def test_a_new_domain_gets_its_finalizer_its_template_and_a_not_ready_status() -> None:
    domain = compute_domain()
    plan = _plan(domain, templates=[])
    assert _verbs(plan) == [
        ("add_finalizer", "ComputeDomain"),
        ("create", "ResourceClaimTemplate"),
        ("status", "ComputeDomain"),
    ]
    rct = plan.writes[1].obj
    assert rct["metadata"]["namespace"] == "ns"
    assert rct["metadata"]["name"] == "x-channel"
    params = rct["spec"]["spec"]["devices"]["config"][0]["opaque"]["parameters"]
    assert params["domainID"] == domain["metadata"]["uid"]
    ready = _condition(plan, "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "NoNodes")
    assert _status(plan)["status"] == "NotReady"


def test_a_domain_in_its_desired_state_gets_no_write() -> None:
    domain = _live(compute_domain())
    a, b = "n1", "n2"
    members = [_ready_member(domain, a, [a, b], 0), _ready_member(domain, b, [a, b], 1)]
    first = _plan(domain, members)
    clique = dict(_cliques_written(first).popitem()[1])
    clique["metadata"]["resourceVersion"] = "3"
    domain["status"] = _status(first)
    again = _plan(domain, members, cliques=[clique], now=LATER)
    assert again.writes == ()
    # and the conditions kept their lastTransitionTime
    assert all(c["lastTransitionTime"] == NOW for c in _status(again)["conditions"])


def test_members_of_one_clique_get_indices_in_one_clique_object_and_ready_needs_every_peer() -> (
    None
):
    domain = _live(compute_domain())
    nodes = ["n1", "n2", "n3"]
    members = [_ready_member(domain, n, nodes, i) for i, n in enumerate(nodes)]
    plan = _plan(domain, members)
    [(name, clique)] = _cliques_written(plan).items()
    assert name == f"{domain['metadata']['uid']}.{CLIQUE_A}"
    assert {r.node_name: r.index for r in clique_rows(clique)} == {"n1": 0, "n2": 1, "n3": 2}
    assert _condition(plan, "Ready")["status"] == "True"
    assert _status(plan)["status"] == "Ready"
    assert [(r["name"], r["index"], r["status"]) for r in _status(plan)["nodes"]] == [
        ("n1", 0, "Ready"),
        ("n2", 1, "Ready"),
        ("n3", 2, "Ready"),
    ]
    # One peer not yet connected: every local daemon READY is not enough.
    members[2] = _ready_member(domain, "n3", nodes, 2, peer_state="N")
    plan = _plan(domain, members)
    ready = _condition(plan, "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "PeersNotConnected")
    assert "n3 does not see n1 (N), n2 (N) connected" in ready["message"]
    assert _status(plan)["status"] == "NotReady"


def test_indices_stay_put_when_a_node_changes_its_address() -> None:
    domain = _live(compute_domain())
    nodes = ["n1", "n2"]
    members = [_ready_member(domain, n, nodes, i) for i, n in enumerate(nodes)]
    clique = _cliques_written(_plan(domain, members)).popitem()[1]
    clique["metadata"]["resourceVersion"] = "5"
    members[0] = _ready_member(domain, "n1", nodes, 0, ip="10.9.9.9")
    plan = _plan(domain, members, cliques=[clique])
    [write] = [w for w in plan.writes if w.kind.kind == "ComputeDomainClique"]
    assert write.verb == "update"
    assert write.obj["metadata"]["resourceVersion"] == "5"  # optimistic concurrency kept
    rows = {r.node_name: (r.index, r.ip_address) for r in clique_rows(write.obj)}
    assert rows == {"n1": (0, "10.9.9.9"), "n2": (1, "10.0.0.2")}


def test_a_node_that_leaves_frees_its_index_for_the_next_and_nobody_else_moves() -> None:
    domain = _live(compute_domain())
    clique = _cliques_written(
        _plan(domain, [member(domain, n) for n in ("n1", "n2", "n3")])
    ).popitem()[1]
    plan = _plan(domain, [member(domain, n) for n in ("n1", "n3", "n4")], cliques=[clique])
    rows = {r.node_name: r.index for r in clique_rows(_cliques_written(plan).popitem()[1])}
    assert rows == {"n1": 0, "n3": 2, "n4": 1}


def test_the_nineteenth_node_of_an_18_node_clique_gets_a_condition_and_a_notice_naming_it() -> None:
    domain = _live(compute_domain())
    members = [member(domain, f"n{i:02d}", created=f"2026-11-28T14:00:{i:02d}Z") for i in range(19)]
    plan = _plan(domain, members)
    rows = clique_rows(_cliques_written(plan).popitem()[1])
    assert len(rows) == 18
    assert "n18" not in {r.node_name for r in rows}
    full = _condition(plan, "CliqueFull")
    assert full["status"] == "True"
    assert (
        f"clique {CLIQUE_A} of ComputeDomain ns/x already has 18 nodes "
        "(--max-nodes-per-imex-domain): node n18 gets no IMEX index"
    ) == full["message"]
    assert [(n.type, n.reason, n.node) for n in plan.notices if n.reason == "CliqueFull"] == [
        ("Warning", "CliqueFull", "n18")
    ]
    assert "n18" not in {r["name"] for r in _status(plan)["nodes"]}
    assert "n18: no IMEX index (its clique is full)" in _condition(plan, "Ready")["message"]


def test_two_domains_in_one_clique_get_separate_clique_objects_and_index_spaces() -> None:
    x = _live(compute_domain("x"))
    y = _live(compute_domain("y"))
    px = _plan(x, [member(x, "n1"), member(x, "n2")])
    py = _plan(y, [member(y, "n3"), member(y, "n4")])
    [(name_x, cx)] = _cliques_written(px).items()
    [(name_y, cy)] = _cliques_written(py).items()
    assert name_x != name_y
    assert cx["metadata"]["labels"][DOMAIN_LABEL] == x["metadata"]["uid"]
    assert cy["metadata"]["labels"][DOMAIN_LABEL] == y["metadata"]["uid"]
    assert {r.node_name: r.index for r in clique_rows(cx)} == {"n1": 0, "n2": 1}
    assert {r.node_name: r.index for r in clique_rows(cy)} == {"n3": 0, "n4": 1}


def test_members_in_two_cliques_get_two_objects_and_peers_are_only_counted_in_their_clique() -> (
    None
):
    domain = _live(compute_domain())
    members = [
        _ready_member(domain, "a1", ["a1", "a2"], 0),
        _ready_member(domain, "a2", ["a1", "a2"], 1),
        _ready_member(domain, "b1", ["b1"], 0, clique=CLIQUE_B),
    ]
    plan = _plan(domain, members)
    assert len(_cliques_written(plan)) == 2
    assert _condition(plan, "Ready")["status"] == "True"


def test_a_member_without_a_clique_has_a_row_with_index_minus_one() -> None:
    domain = _live(compute_domain())
    plan = _plan(domain, [with_status(member(domain, "cpu1", ""), state="NoFabric")])
    assert _status(plan)["nodes"] == [
        {"name": "cpu1", "ipAddress": "", "cliqueID": "", "index": -1, "status": "Ready"}
    ]
    assert _cliques_written(plan) == {}


def test_num_nodes_holds_ready_until_that_many_have_joined() -> None:
    domain = _live(compute_domain(num_nodes=3))
    members = [_ready_member(domain, n, ["n1", "n2"], i) for i, n in enumerate(["n1", "n2"])]
    ready = _condition(_plan(domain, members), "Ready")
    assert (ready["reason"], ready["message"]) == (
        "WaitingForNodes",
        "2 of 3 nodes (spec.numNodes) have joined: n1, n2",
    )


def test_degraded_names_the_node_and_the_reason() -> None:
    domain = _live(compute_domain())
    nodes = ["n1", "n2", "n3"]
    members = [_ready_member(domain, n, nodes, i) for i, n in enumerate(nodes)]
    members[0]["status"]["peers"] = [
        {"nodeName": "n2", "state": "D"},
        {"nodeName": "n3", "state": "C"},
    ]
    members[2] = with_status(
        member(domain, "n3"), state="Failed", reason="ImexExited", message="exit status 1"
    )
    plan = _plan(domain, members, node_ready={"n2": "False"})
    degraded = _condition(plan, "Degraded")
    assert degraded["status"] == "True"
    assert degraded["reason"] == "MemberFailed,NodeNotReady,PeerDisconnected"
    assert "node n2: Node is NotReady" in degraded["message"]
    assert "node n3: IMEX failed: ImexExited: exit status 1" in degraded["message"]
    assert "node n2: node n1 reports it disconnected" in degraded["message"]
    keys = {(n.reason, n.node) for n in plan.notices}
    assert {("NodeNotReady", "n2"), ("MemberFailed", "n3"), ("PeerDisconnected", "n2")} <= keys
    assert _condition(plan, "Ready")["status"] == "False"
    rows = {r["name"]: r["status"] for r in _status(plan)["nodes"]}
    assert rows == {"n1": "Ready", "n2": "NotReady", "n3": "NotReady"}


def test_an_imex_that_identified_itself_with_another_index_is_degraded() -> None:
    domain = _live(compute_domain())
    bad = with_status(member(domain, "n1"), state="Ready", imex_node_id=4)
    degraded = _condition(_plan(domain, [bad]), "Degraded")
    assert degraded["reason"] == "IndexMismatch"
    assert (
        (degraded["message"])
        == "node n1: IMEX identified itself as ID 4, but its assigned index is 0"
    )


def test_a_malformed_domain_gets_a_condition_naming_the_field_and_no_other_write() -> None:
    domain = _live(compute_domain())
    domain["spec"]["channel"]["allocationMode"] = "Some"
    plan = _plan(domain, templates=[])
    assert _verbs(plan) == [("status", "ComputeDomain")]
    ready = _condition(plan, "Ready")
    assert ready["reason"] == "InvalidSpec"
    assert "spec.channel.allocationMode" in ready["message"]
    assert [(n.reason, n.type) for n in plan.notices] == [("InvalidSpec", "Warning")]


def test_a_template_name_taken_by_something_else_is_a_notice_not_a_write() -> None:
    domain = _live(compute_domain())
    other = _template(compute_domain("other", template="x-channel"))
    plan = _plan(domain, templates=[other])
    assert ("create", "ResourceClaimTemplate") not in _verbs(plan)
    [notice] = [n for n in plan.notices if n.reason == "TemplateNameTaken"]
    assert "ResourceClaimTemplate ns/x-channel already exists" in notice.message


def test_host_managed_mode_writes_the_template_as_single_and_ready_without_cliques() -> None:
    domain = compute_domain(mode="All")
    plan = _plan(
        domain,
        [member(domain, "n1")],
        templates=[],
        options=Options(namespace=DRIVER_NS, host_managed=True),
    )
    assert _verbs(plan) == [
        ("add_finalizer", "ComputeDomain"),
        ("create", "ResourceClaimTemplate"),
        ("status", "ComputeDomain"),
    ]
    params = plan.writes[1].obj["spec"]["spec"]["devices"]["config"][0]["opaque"]["parameters"]
    assert params["allocationMode"] == "Single"
    assert _status(plan)["status"] == "Ready"
    assert _condition(plan, "Ready")["reason"] == "HostManaged"


def test_deletion_deletes_the_template_and_waits_for_the_members_then_drops_the_finalizer() -> None:
    domain = _live(compute_domain())
    domain["metadata"]["deletionTimestamp"] = NOW
    members = [member(domain, "n1"), member(domain, "n2")]
    clique = _cliques_written(_plan(_live(compute_domain()), members)).popitem()[1]
    template = _template(domain)
    plan = _plan(domain, members, cliques=[clique], templates=[template])
    assert _verbs(plan) == [
        ("delete", "ResourceClaimTemplate"),
        ("remove_finalizer", "ResourceClaimTemplate"),
        ("status", "ComputeDomain"),
    ]
    terminating = _condition(plan, "Terminating")
    assert terminating["status"] == "True"
    assert terminating["message"] == "waiting for n1, n2 to release their channel claims"
    # every member gone: the cliques go, then the finalizer
    plan = _plan(domain, [], cliques=[clique], templates=[])
    assert _verbs(plan) == [
        ("delete", "ComputeDomainClique"),
        ("status", "ComputeDomain"),
        ("remove_finalizer", "ComputeDomain"),
    ]
    assert plan.writes[-1].verb == reconcile.REMOVE_FINALIZER
