"""Who is in a ComputeDomain, and who writes what: members, cliques, IMEX names (pure).

NVIDIA's daemons all write one shared object (the `ComputeDomainClique`, or
before it `ComputeDomain.status.nodes`), each picking its own index: 409
storms, lost rows and index churn at scale (computedomain.md §7.3-7.4). Here
every object has one writer:

- `ComputeDomainMember` `<domain UID>.<node>` (dra-gpu's own kind, in the
  driver namespace): one node's membership of one domain.
  - `spec` is written by the node's CD kubelet plugin when it prepares the
    node's first channel claim of the domain, and the member is deleted when
    the last one is unprepared. This replaces NVIDIA's node label.
  - `status` is written by the node's IMEX host, on change only: the node's
    IMEX address, its state, the IMEX node ID the daemon identified itself
    as, and which peers it is connected to.
- `ComputeDomainClique` `<domain UID>.<clique ID>` (NVIDIA's kind and shape):
  written by the controller alone. It assigns each member of the clique an
  index once (the lowest free, below `MAX_NODES_PER_IMEX_DOMAIN`) and keeps
  it while the member exists, whatever happens to addresses.
- `ComputeDomain.status`: written by the controller alone, from the two above.

The IMEX host of each member node reads the clique for its peers: the nodes
config lists `imex_node_name(uid, i)` for every possible index, the hosts
file maps the names of current members to their addresses, so a name of one
domain never resolves into another (#1447).

In channel isolation (`dra_driver.compute_domain.isolation`) members are the
same (labelled with the mode), but the indices live in one clique-wide
ComputeDomainClique per clique (`build_shared_clique`, also the controller's
alone): a row per node of the clique that is a member of any domain, named
after `isolation.shared_domain_uid`, which stands for the domain UID in the
IMEX names and files.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from dra_driver.compute_domain import isolation, names
from dra_driver.errors import ClusterError

__all__ = [
    "CLIQUE_LABEL",
    "MAX_NODES_PER_IMEX_DOMAIN",
    "MEMBER_KIND",
    "NODE_LABEL",
    "CliqueRow",
    "MemberSpec",
    "MemberState",
    "MemberStatus",
    "PeerState",
    "build_clique",
    "build_member",
    "build_shared_clique",
    "clique_name",
    "clique_rows",
    "imex_node_name",
    "member_name",
    "member_spec",
    "member_status",
    "member_status_body",
]

MAX_NODES_PER_IMEX_DOMAIN: Final = 18
"""NVIDIA's default and the GB200/GB300 limit (`--max-nodes-per-imex-domain`)."""

MEMBER_KIND: Final = "ComputeDomainMember"
CLIQUE_KIND: Final = "ComputeDomainClique"

CLIQUE_LABEL: Final = "resource.nvidia.com/computeDomain.cliqueID"
"""On cliques and members: the clique ID `<clusterUUID>.<cliqueId>` (NVIDIA's label key)."""
NODE_LABEL: Final = "resource.nvidia.com/computeDomain.nodeName"
"""On members: the node's name, so a node's components list their own members."""


class MemberState:
    """`status.state` of a member, as its IMEX host reports it."""

    PENDING: Final = "Pending"  # no index yet (the controller has not placed it)
    STARTING: Final = "Starting"  # IMEX started, `nvidia-imex-ctl -q` not READY yet
    READY: Final = "Ready"  # local IMEX READY
    FAILED: Final = "Failed"  # IMEX cannot start or keeps dying (reason, message say why)
    NO_FABRIC: Final = "NoFabric"  # the node has no multi-node NVLink: nothing to run


class PeerState:
    """NVIDIA's `nvidia-imex-ctl -N` connection legend (#722)."""

    CONNECTED: Final = "C"
    NOT_CONNECTED: Final = "N"
    RECOVERING: Final = "R"
    DISCONNECTED: Final = "D"
    INVALID: Final = "I"


@dataclass(frozen=True, slots=True)
class MemberSpec:
    """What the CD plugin writes: the node wants to be in the domain."""

    domain_uid: str
    domain_namespace: str
    domain_name: str
    node_name: str
    clique_id: str  # "" on a node without a multi-node fabric


@dataclass(frozen=True, slots=True)
class MemberStatus:
    """What the node's IMEX host writes (on change only)."""

    state: str = MemberState.PENDING
    ip_address: str = ""
    reason: str = ""
    message: str = ""
    imex_node_id: int | None = None  # "Identified this node as ID n" of the running daemon
    peers: Mapping[str, str] = field(default_factory=dict)  # node name -> PeerState
    last_transition_time: str = ""


@dataclass(frozen=True, slots=True)
class CliqueRow:
    """One row of a clique's `daemons[]` (NVIDIA's shape)."""

    node_name: str
    ip_address: str
    clique_id: str
    index: int
    status: str  # "Ready" / "NotReady"


def _hash(*parts: str) -> str:
    return hashlib.sha256("/".join(parts).encode()).hexdigest()


def member_name(domain_uid: str, node_name: str) -> str:
    """`<uid>.<node>`, or a hash where that would pass the 253-character name limit."""
    name = f"{domain_uid}.{node_name}"
    if len(name) <= 253:
        return name
    return f"{domain_uid}.{_hash(node_name)[:32]}"


def clique_name(domain_uid: str, clique_id: str) -> str:
    """NVIDIA's `<computeDomainUID>.<cliqueID>`."""
    return f"{domain_uid}.{clique_id}"


def imex_node_name(domain_uid: str, index: int) -> str:
    """The IMEX nodes-config name of index `index` in one domain, unique to that domain.

    NVIDIA's later fix for cross-talk (#1447, PR #1465) is the same idea:
    `compute-domain-daemon-<per-domain hash>-NNNN`.
    """
    return f"compute-domain-daemon-{_hash(domain_uid)[:8]}-{index:04d}"


def build_member(
    spec: MemberSpec, *, namespace: str, isolation_mode: str = isolation.DOMAIN
) -> dict[str, Any]:
    """The ComputeDomainMember object the CD plugin creates (no status); in channel
    isolation it carries `isolation.ISOLATION_LABEL` (the plugin's mode)."""
    labels = {
        names.DOMAIN_LABEL: spec.domain_uid,
        NODE_LABEL: spec.node_name,
    }
    if spec.clique_id:
        labels[CLIQUE_LABEL] = spec.clique_id
    if isolation_mode != isolation.DOMAIN:
        labels[isolation.ISOLATION_LABEL] = isolation_mode
    return {
        "apiVersion": names.API_VERSION,
        "kind": MEMBER_KIND,
        "metadata": {
            "name": member_name(spec.domain_uid, spec.node_name),
            "namespace": namespace,
            "labels": labels,
        },
        "spec": {
            "domainUID": spec.domain_uid,
            "domainNamespace": spec.domain_namespace,
            "domainName": spec.domain_name,
            "nodeName": spec.node_name,
            "cliqueID": spec.clique_id,
        },
    }


def _text(obj: Mapping[str, Any], key: str, where: str, *, required: bool = True) -> str:
    value = obj.get(key, "")
    if not isinstance(value, str) or (required and not value):
        raise ClusterError(f"{where}.{key}: expected a non-empty string, got {value!r}")
    return value


def _where(obj: Mapping[str, Any], kind: str) -> str:
    meta = obj.get("metadata") or {}
    return f"{kind} {meta.get('namespace')}/{meta.get('name')}"


def member_spec(obj: Mapping[str, Any]) -> MemberSpec:
    """Read a member's spec; `ClusterError` naming the field if it is malformed."""
    where = _where(obj, MEMBER_KIND)
    spec = obj.get("spec")
    if not isinstance(spec, Mapping):
        raise ClusterError(f"{where}: spec is missing")
    return MemberSpec(
        domain_uid=_text(spec, "domainUID", f"{where}: spec"),
        domain_namespace=_text(spec, "domainNamespace", f"{where}: spec"),
        domain_name=_text(spec, "domainName", f"{where}: spec"),
        node_name=_text(spec, "nodeName", f"{where}: spec"),
        clique_id=_text(spec, "cliqueID", f"{where}: spec", required=False),
    )


def member_status(obj: Mapping[str, Any]) -> MemberStatus:
    """Read a member's status (absent: Pending); malformed fields read as absent."""
    status = obj.get("status")
    if not isinstance(status, Mapping):
        return MemberStatus()
    peers_raw = status.get("peers") or []
    peers: dict[str, str] = {}
    if isinstance(peers_raw, list):
        for row in peers_raw:
            if isinstance(row, Mapping) and isinstance(row.get("nodeName"), str):
                peers[row["nodeName"]] = str(row.get("state", PeerState.INVALID))
    node_id = status.get("imexNodeID")
    return MemberStatus(
        state=str(status.get("state") or MemberState.PENDING),
        ip_address=str(status.get("ipAddress") or ""),
        reason=str(status.get("reason") or ""),
        message=str(status.get("message") or ""),
        imex_node_id=node_id
        if isinstance(node_id, int) and not isinstance(node_id, bool)
        else None,
        peers=peers,
        last_transition_time=str(status.get("lastTransitionTime") or ""),
    )


def member_status_body(status: MemberStatus) -> dict[str, Any]:
    """`status` of a member as the IMEX host writes it."""
    body: dict[str, Any] = {"state": status.state}
    if status.ip_address:
        body["ipAddress"] = status.ip_address
    if status.reason:
        body["reason"] = status.reason
    if status.message:
        body["message"] = status.message
    if status.imex_node_id is not None:
        body["imexNodeID"] = status.imex_node_id
    if status.peers:
        body["peers"] = [
            {"nodeName": node, "state": state} for node, state in sorted(status.peers.items())
        ]
    if status.last_transition_time:
        body["lastTransitionTime"] = status.last_transition_time
    return body


def build_clique(
    domain_uid: str, clique_id: str, rows: list[CliqueRow], *, namespace: str
) -> dict[str, Any]:
    """The ComputeDomainClique object (NVIDIA's shape: top-level `daemons[]`)."""
    return {
        "apiVersion": names.API_VERSION,
        "kind": CLIQUE_KIND,
        "metadata": {
            "name": clique_name(domain_uid, clique_id),
            "namespace": namespace,
            "labels": {names.DOMAIN_LABEL: domain_uid, CLIQUE_LABEL: clique_id},
        },
        "daemons": [
            {
                "nodeName": row.node_name,
                "ipAddress": row.ip_address,
                "cliqueID": row.clique_id,
                "index": row.index,
                "status": row.status,
            }
            for row in sorted(rows, key=lambda r: r.index)
        ],
    }


def build_shared_clique(clique_id: str, rows: list[CliqueRow], *, namespace: str) -> dict[str, Any]:
    """The clique-wide ComputeDomainClique of channel isolation (`isolation` module): the
    rows of every node of the clique that is a member of any ComputeDomain, named after
    `isolation.shared_domain_uid`, labelled with the clique and the mode, not a domain."""
    obj = build_clique(isolation.shared_domain_uid(clique_id), clique_id, rows, namespace=namespace)
    obj["metadata"]["labels"] = {
        CLIQUE_LABEL: clique_id,
        isolation.ISOLATION_LABEL: isolation.CHANNEL,
    }
    return obj


def clique_rows(obj: Mapping[str, Any]) -> list[CliqueRow]:
    """The rows of a clique object; `ClusterError` naming the row and field if malformed."""
    where = _where(obj, CLIQUE_KIND)
    rows = obj.get("daemons") or []
    if not isinstance(rows, list):
        raise ClusterError(f"{where}: daemons must be a list")
    out = []
    for i, row in enumerate(rows):
        at = f"{where}: daemons[{i}]"
        if not isinstance(row, Mapping):
            raise ClusterError(f"{at}: must be an object")
        index = row.get("index")
        if not isinstance(index, int) or isinstance(index, bool):
            raise ClusterError(f"{at}.index: expected an integer, got {index!r}")
        out.append(
            CliqueRow(
                node_name=_text(row, "nodeName", at),
                ip_address=_text(row, "ipAddress", at, required=False),
                clique_id=_text(row, "cliqueID", at, required=False),
                index=index,
                status=_text(row, "status", at, required=False) or "NotReady",
            )
        )
    return out
