"""Builders of the API objects the controller tests start from (plain dicts, as stored)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dra_driver.compute_domain import membership
from dra_driver.errors import NotFoundError
from dra_driver.kube.object_store import COMPUTE_DOMAIN, COMPUTE_DOMAIN_MEMBER, NODE
from tests.fakes.object_store import MemoryObjectStore

DRIVER_NS = "dra-gpu"
CLIQUE_A = "00000000-0000-0000-0000-000000000001.0"
CLIQUE_B = "00000000-0000-0000-0000-000000000001.1"


def uid_of(name: str) -> str:
    """A fixed UUID-shaped UID per domain name."""
    digits = "".join(f"{ord(c):02x}" for c in name)[:12].ljust(12, "0")
    return f"00000000-0000-4000-8000-{digits}"


def compute_domain(
    name: str = "x",
    namespace: str = "ns",
    *,
    num_nodes: int | None = None,
    mode: str | None = None,
    template: str | None = None,
    uid: str | None = None,
) -> dict[str, Any]:
    channel: dict[str, Any] = {"resourceClaimTemplate": {"name": template or f"{name}-channel"}}
    if mode is not None:
        channel["allocationMode"] = mode
    spec: dict[str, Any] = {"channel": channel}
    if num_nodes is not None:
        spec["numNodes"] = num_nodes
    return {
        "apiVersion": "resource.nvidia.com/v1beta1",
        "kind": "ComputeDomain",
        "metadata": {"name": name, "namespace": namespace, "uid": uid or uid_of(name)},
        "spec": spec,
    }


def member(
    domain: Mapping[str, Any],
    node: str,
    clique: str = CLIQUE_A,
    *,
    created: str = "",
) -> dict[str, Any]:
    meta = domain["metadata"]
    obj = membership.build_member(
        membership.MemberSpec(
            domain_uid=meta["uid"],
            domain_namespace=meta["namespace"],
            domain_name=meta["name"],
            node_name=node,
            clique_id=clique,
        ),
        namespace=DRIVER_NS,
    )
    if created:
        obj["metadata"]["creationTimestamp"] = created
    return obj


def with_status(obj: dict[str, Any], **fields: Any) -> dict[str, Any]:
    """`obj` with a member status (MemberStatus fields)."""
    out = dict(obj)
    out["status"] = membership.member_status_body(membership.MemberStatus(**fields))
    return out


def node(name: str, ready: str = "True") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name},
        "status": {"conditions": [{"type": "Ready", "status": ready}]},
    }


# -- on a store ------------------------------------------------------------------------


def add_domain(store: MemoryObjectStore, **kwargs: Any) -> dict[str, Any]:
    return store.create_object(COMPUTE_DOMAIN, compute_domain(**kwargs))


def join(
    store: MemoryObjectStore, domain: Mapping[str, Any], node_name: str, clique: str = CLIQUE_A
) -> dict[str, Any]:
    """What the CD plugin does at a node's first channel claim: create the member."""
    return store.create_object(COMPUTE_DOMAIN_MEMBER, member(domain, node_name, clique))


def report(store: MemoryObjectStore, member_name: str, **fields: Any) -> None:
    """What the IMEX host does: write the member's status (its one writer, no precondition)."""
    obj = store.get_object(COMPUTE_DOMAIN_MEMBER, DRIVER_NS, member_name)
    obj["metadata"].pop("resourceVersion", None)
    obj["status"] = membership.member_status_body(membership.MemberStatus(**fields))
    store.update_object_status(COMPUTE_DOMAIN_MEMBER, obj)


def set_node(store: MemoryObjectStore, name: str, ready: str = "True") -> None:
    try:
        current = store.get_object(NODE, None, name)
    except NotFoundError:
        store.create_object(NODE, node(name, ready))
        current = store.get_object(NODE, None, name)
    current["status"] = node(name, ready)["status"]
    store.update_object_status(NODE, current)
