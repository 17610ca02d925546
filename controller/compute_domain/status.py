"""A ComputeDomain's status, from its members' reports (pure).

NVIDIA's status says `Ready` when enough rows exist and each node's *local*
daemon is ready, and with `numNodes: 0` before any daemon exists
(computedomain.md §2.3, §7.2); a lost node keeps a stale row forever (§4.7).
Here the status keeps NVIDIA's fields (`status.status`, `status.nodes` rows)
and adds conditions that say what a user needs to know, naming the nodes:

- `Ready`: at least one member (and at least `spec.numNodes` when set), every
  member Ready, and every member reports every same-clique peer connected
  (`C`): domain-wide connectivity, not only the local daemon.
- `Degraded`: a member's IMEX Failed, its Node is NotReady/Unknown, a peer
  reports it disconnected (`D`), or its IMEX identified itself with another
  index than the one assigned (#1418).
- `CliqueFull`: a member got no index because its clique already holds
  `--max-nodes-per-imex-domain` nodes.
- `Terminating`: the domain is being deleted; which nodes still hold claims.
- `ImexChannel` (channel isolation only): the domain's channel, or why it has
  none (`ChannelsExhausted`); a domain without one is not Ready.

`status.status` is `Ready` exactly when the `Ready` condition is True.
Each fault is also a `Notice` (reason + node), which the loop posts as an
Event once per appearance.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from controller.compute_domain.indices import Placement
from dra_driver.compute_domain.membership import MemberSpec, MemberState, MemberStatus, PeerState

__all__ = [
    "CONDITION_TYPES",
    "DomainStatus",
    "Member",
    "Notice",
    "domain_status",
    "invalid_status",
]

READY: Final = "Ready"
DEGRADED: Final = "Degraded"
CLIQUE_FULL: Final = "CliqueFull"
TERMINATING: Final = "Terminating"
IMEX_CHANNEL: Final = "ImexChannel"  # channel isolation only
CONDITION_TYPES: Final = (READY, DEGRADED, CLIQUE_FULL, TERMINATING)

NORMAL: Final = "Normal"
WARNING: Final = "Warning"


@dataclass(frozen=True, slots=True)
class Member:
    """One member as the controller sees it: the plugin's spec, the IMEX host's report,
    and its Node's Ready condition ("True", "False", "Unknown"; None: no Node object)."""

    spec: MemberSpec
    status: MemberStatus
    created: str = ""  # metadata.creationTimestamp: older members are placed first
    node_ready: str | None = None

    @property
    def node(self) -> str:
        return self.spec.node_name


@dataclass(frozen=True, slots=True)
class Notice:
    """Something worth an Event: its type, reason, the node it is about ("" for the
    domain as a whole) and a message naming both."""

    type: str
    reason: str
    node: str
    message: str

    @property
    def key(self) -> tuple[str, str]:
        return (self.reason, self.node)


@dataclass(frozen=True, slots=True)
class DomainStatus:
    body: dict[str, Any]  # the whole `status` to write
    notices: tuple[Notice, ...]

    @property
    def ready(self) -> bool:
        return bool(self.body.get("status") == "Ready")


def _names(nodes: Sequence[str]) -> str:
    return ", ".join(nodes)


def _condition(
    ctype: str,
    status: bool,
    reason: str,
    message: str,
    *,
    previous: Mapping[str, Mapping[str, Any]],
    now: str,
    generation: int | None,
) -> dict[str, Any]:
    value = "True" if status else "False"
    before = previous.get(ctype) or {}
    since = before.get("lastTransitionTime") if before.get("status") == value else None
    condition: dict[str, Any] = {
        "type": ctype,
        "status": value,
        "reason": reason,
        "message": message[:32768],
        "lastTransitionTime": since or now,
    }
    if generation is not None:
        condition["observedGeneration"] = generation
    return condition


def _previous_conditions(previous: Mapping[str, Any] | None) -> dict[str, Mapping[str, Any]]:
    conditions = (previous or {}).get("conditions") or []
    return {
        str(c.get("type")): c
        for c in conditions
        if isinstance(c, Mapping) and isinstance(c.get("type"), str)
    }


def domain_status(
    *,
    ref: str,
    num_nodes: int,
    generation: int | None,
    members: Sequence[Member],
    placements: Mapping[str, Placement],
    max_nodes: int,
    host_managed: bool,
    deleting: bool,
    previous: Mapping[str, Any] | None,
    now: str,
    channel_isolation: bool = False,
    channel: int | None = None,
) -> DomainStatus:
    """The status of the domain `ref` ("ComputeDomain ns/name").

    `placements` maps each clique ID of the members to its index placement
    (`indices.assign_indices`); members without a clique ID get row index -1.
    `previous` is the current `status` (its conditions keep their
    lastTransitionTime while unchanged); `now` is an RFC 3339 timestamp.
    """
    before = _previous_conditions(previous)
    members = sorted(members, key=lambda m: m.node)
    notices: list[Notice] = []

    def cond(ctype: str, status: bool, reason: str, message: str) -> dict[str, Any]:
        return _condition(
            ctype, status, reason, message, previous=before, now=now, generation=generation
        )

    # -- rows (NVIDIA's status.nodes) ------------------------------------------------
    index_of: dict[str, int] = {}
    left_out: list[tuple[str, str]] = []  # (node, clique)
    for clique_id, placement in sorted(placements.items()):
        index_of.update(placement.indices)
        left_out.extend((node, clique_id) for node in placement.left_out)
    rows = []
    for m in members:
        if m.spec.clique_id and m.node not in index_of:
            continue  # left out: no row (CliqueFull says why)
        index = index_of.get(m.node, -1) if m.spec.clique_id else -1
        rows.append(
            {
                "name": m.node,
                "ipAddress": m.status.ip_address,
                "cliqueID": m.spec.clique_id,
                "index": index,
                "status": "Ready" if _member_ready(m, index) else "NotReady",
            }
        )
    rows.sort(key=lambda r: (r["cliqueID"], r["index"], r["name"]))

    # -- Degraded ----------------------------------------------------------------------
    faults: list[Notice] = []
    for m in members:
        if m.node_ready in ("False", "Unknown"):
            state = "NotReady" if m.node_ready == "False" else "Unknown"
            faults.append(
                Notice(WARNING, "NodeNotReady", m.node, f"node {m.node}: Node is {state}")
            )
        if m.status.state == MemberState.FAILED:
            why = ": ".join(p for p in (m.status.reason, m.status.message) if p)
            faults.append(
                Notice(
                    WARNING,
                    "MemberFailed",
                    m.node,
                    f"node {m.node}: IMEX failed" + (f": {why}" if why else ""),
                )
            )
        assigned = index_of.get(m.node)
        if (
            assigned is not None
            and m.status.imex_node_id is not None
            and m.status.imex_node_id != assigned
        ):
            faults.append(
                Notice(
                    WARNING,
                    "IndexMismatch",
                    m.node,
                    f"node {m.node}: IMEX identified itself as ID {m.status.imex_node_id}, "
                    f"but its assigned index is {assigned}",
                )
            )
    peers_of = _clique_peers(members, index_of)
    for m in members:
        for peer in peers_of.get(m.node, ()):
            if m.status.peers.get(peer) == PeerState.DISCONNECTED:
                faults.append(
                    Notice(
                        WARNING,
                        "PeerDisconnected",
                        peer,
                        f"node {peer}: node {m.node} reports it disconnected",
                    )
                )
    notices.extend(faults)
    if faults:
        reasons = ",".join(sorted({f.reason for f in faults}))
        degraded = cond(DEGRADED, True, reasons, "; ".join(f.message for f in faults))
    else:
        degraded = cond(DEGRADED, False, "NoFaults", "")

    # -- CliqueFull --------------------------------------------------------------------
    if left_out:
        full = []
        for node, clique_id in left_out:
            message = (
                f"clique {clique_id} of {ref} already has {max_nodes} nodes "
                f"(--max-nodes-per-imex-domain): node {node} gets no IMEX index"
            )
            full.append(message)
            notices.append(Notice(WARNING, "CliqueFull", node, message))
        clique_full = cond(CLIQUE_FULL, True, "CliqueFull", "; ".join(full))
    else:
        clique_full = cond(CLIQUE_FULL, False, "IndicesAvailable", "")

    # -- Ready -------------------------------------------------------------------------
    if host_managed:
        ready = cond(
            READY,
            True,
            "HostManaged",
            "IMEX is run by the host (imex mode hostManaged): channel claims are prepared "
            "once the host's IMEX reports READY",
        )
    elif channel_isolation and channel is None:
        ready = cond(
            READY, False, "NoChannel", "no IMEX channel is assigned to this domain (ImexChannel)"
        )
    else:
        ready = cond(READY, *_readiness(members, index_of, peers_of, num_nodes))
    if ready["status"] == "True":
        notices.append(Notice(NORMAL, "Ready", "", f"{ref} is Ready: {ready['message']}"))

    # -- Terminating -------------------------------------------------------------------
    if deleting:
        holding = [m.node for m in members]
        if holding:
            message = f"waiting for {_names(holding)} to release their channel claims"
            terminating = cond(TERMINATING, True, "WaitingForClaims", message)
        else:
            message = "no node holds a channel claim: removing the cliques and the finalizer"
            terminating = cond(TERMINATING, True, "ClaimsReleased", message)
        notices.append(Notice(NORMAL, "Terminating", "", f"{ref} is being deleted: {message}"))
    else:
        terminating = cond(TERMINATING, False, "NotDeleted", "")

    conditions = [ready, degraded, clique_full, terminating]
    if channel_isolation:
        if channel is not None:
            conditions.append(
                cond(
                    IMEX_CHANNEL,
                    True,
                    "Assigned",
                    f"IMEX channel {channel}: every pod of the domain gets "
                    f"/dev/nvidia-caps-imex-channels/channel{channel} (isolation channel)",
                )
            )
        elif deleting:
            conditions.append(cond(IMEX_CHANNEL, False, "NotAssigned", "being deleted"))
        else:
            message = (
                f"every IMEX channel 1..2047 is held by another ComputeDomain: {ref} gets "
                "one when a domain is deleted (isolation channel)"
            )
            conditions.append(cond(IMEX_CHANNEL, False, "ChannelsExhausted", message))
            notices.append(Notice(WARNING, "ChannelsExhausted", "", message))
    body: dict[str, Any] = {
        "status": "Ready" if ready["status"] == "True" else "NotReady",
        "nodes": rows,
        "conditions": conditions,
    }
    return DomainStatus(body=body, notices=tuple(notices))


def _member_ready(m: Member, index: int) -> bool:
    """One member's own readiness (its row's `status`)."""
    if m.node_ready in ("False", "Unknown"):
        return False
    if not m.spec.clique_id:
        # NVIDIA: a node without a clique runs no IMEX and is ready as it is (§4.2 step 3).
        return m.status.state in (MemberState.READY, MemberState.NO_FABRIC)
    if m.status.imex_node_id is not None and m.status.imex_node_id != index:
        return False
    return m.status.state == MemberState.READY


def _clique_peers(members: Sequence[Member], index_of: Mapping[str, int]) -> dict[str, list[str]]:
    """Each placed member's placed peers in its clique."""
    by_clique: dict[str, list[str]] = {}
    for m in members:
        if m.spec.clique_id and m.node in index_of:
            by_clique.setdefault(m.spec.clique_id, []).append(m.node)
    peers: dict[str, list[str]] = {}
    for nodes in by_clique.values():
        for node in nodes:
            peers[node] = [p for p in nodes if p != node]
    return peers


def _readiness(
    members: Sequence[Member],
    index_of: Mapping[str, int],
    peers_of: Mapping[str, Sequence[str]],
    num_nodes: int,
) -> tuple[bool, str, str]:
    """(ready, reason, message) of the Ready condition in driver-managed mode."""
    if not members:
        return False, "NoNodes", "no node has prepared a channel claim of this domain yet"
    if num_nodes > 0 and len(members) < num_nodes:
        return (
            False,
            "WaitingForNodes",
            f"{len(members)} of {num_nodes} nodes (spec.numNodes) have joined: "
            f"{_names([m.node for m in members])}",
        )
    waiting = []
    for m in members:
        if m.spec.clique_id and m.node not in index_of:
            waiting.append(f"{m.node}: no IMEX index (its clique is full)")
        elif not _member_ready(m, index_of.get(m.node, -1)):
            if m.node_ready in ("False", "Unknown"):
                waiting.append(
                    f"{m.node}: Node is {'NotReady' if m.node_ready == 'False' else 'Unknown'}"
                )
            else:
                detail = m.status.state
                if m.status.message:
                    detail += f" ({m.status.message})"
                waiting.append(f"{m.node}: IMEX {detail}")
    if waiting:
        return False, "NodesNotReady", "; ".join(waiting)
    unconnected = []
    for m in members:
        missing = [
            p for p in peers_of.get(m.node, ()) if m.status.peers.get(p) != PeerState.CONNECTED
        ]
        if missing:
            shown = ", ".join(f"{p} ({m.status.peers.get(p, 'unknown')})" for p in missing)
            unconnected.append(f"{m.node} does not see {shown} connected")
    if unconnected:
        return False, "PeersNotConnected", "; ".join(unconnected)
    cliques = len({m.spec.clique_id for m in members if m.spec.clique_id})
    return (
        True,
        "AllNodesConnected",
        f"{len(members)} node(s) ready in {cliques} clique(s), every peer connected: "
        f"{_names([m.node for m in members])}",
    )


def invalid_status(
    error: str, *, previous: Mapping[str, Any] | None, now: str, generation: int | None
) -> DomainStatus:
    """The status of a ComputeDomain the controller cannot decode: not Ready, saying why."""
    before = _previous_conditions(previous)
    ready = _condition(
        READY, False, "InvalidSpec", error, previous=before, now=now, generation=generation
    )
    body: dict[str, Any] = {"status": "NotReady", "nodes": [], "conditions": [ready]}
    return DomainStatus(body=body, notices=(Notice(WARNING, "InvalidSpec", "", error),))
