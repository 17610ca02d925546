"""One ComputeDomain's desired writes, from what the store holds (pure).

Given a ComputeDomain object, the members of that domain, its cliques and
the ResourceClaimTemplates that might be its workload template, `plan_domain`
says which writes bring the store to the desired state, in the order they
must happen, and which notices (Events) the state deserves. The loop
(`controller.compute_domain.loop`) applies them and comes back on the next
change; a failed write stops the plan, and the next pass plans again from
what the store then holds, so every step is retried and none is skipped.

The order (computedomain.md §2.2, §2.4; CD-DESIGN.md point 3):

- Live domain: finalizer `resource.nvidia.com/computeDomain` on the domain,
  then the workload ResourceClaimTemplate (`templates.workload_claim_template`),
  then one ComputeDomainClique per clique of the members (indices from
  `indices.assign_indices`, kept while a member exists), then the status.
  Host-managed IMEX: finalizer, template (Single) and a Ready status only.
  A template someone deleted under a live domain loses its finalizer and is
  made anew, rather than hanging in Terminating until the domain goes.
- Deleting domain (`deletionTimestamp`): delete the workload template and
  drop its finalizer, so no new claim is made; keep the cliques (IMEX keeps
  running under work that still holds claims) and say `Terminating` with the
  nodes still holding claims; once no member is left, delete the cliques and
  drop the domain's finalizer. Unlike NVIDIA (PR #384), deletion never stops
  IMEX under running work.

Channel isolation (`Options.isolation == "channel"`,
`dra_driver.compute_domain.isolation`): the loop assigns each domain its
channel (`channels.assign_channels`, over all domains) and the clique-wide
indices (`plan_shared_cliques`, over all members), and passes each domain
its share (`DomainObjects.channel`, `.shared_placements`). The domain's plan
then records the channel in its annotation (right after the finalizer, so the
plugin can prepare), writes a template without the `domain` pin, writes no
per-domain clique (it deletes any left from domain mode), and shows the
channel in the condition `ImexChannel`.

Nothing is written that would not change anything: a plan for a domain in
its desired state is empty.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from controller.compute_domain.indices import Placement, assign_indices
from controller.compute_domain.status import (
    WARNING,
    DomainStatus,
    Member,
    Notice,
    domain_status,
    invalid_status,
)
from dra_driver.compute_domain import isolation, membership
from dra_driver.compute_domain.api import ComputeDomain, decode_compute_domain
from dra_driver.compute_domain.names import DOMAIN_LABEL, FINALIZER
from dra_driver.compute_domain.templates import workload_claim_template
from dra_driver.errors import ClusterError, ConfigError
from dra_driver.kube.apiserver_rules import ResourceKind
from dra_driver.kube.object_store import (
    COMPUTE_DOMAIN,
    COMPUTE_DOMAIN_CLIQUE,
    RESOURCE_CLAIM_TEMPLATE,
)
from dra_driver.kube.objects import Obj

__all__ = [
    "ADD_FINALIZER",
    "CREATE",
    "DELETE",
    "REMOVE_FINALIZER",
    "SET_CHANNEL",
    "STATUS",
    "UPDATE",
    "DomainObjects",
    "Options",
    "Plan",
    "Write",
    "plan_domain",
    "plan_shared_cliques",
]

CREATE: Final = "create"
UPDATE: Final = "update"
STATUS: Final = "status"
DELETE: Final = "delete"
ADD_FINALIZER: Final = "add_finalizer"  # read, add FINALIZER, update (with resourceVersion)
REMOVE_FINALIZER: Final = "remove_finalizer"  # read, drop FINALIZER, update
SET_CHANNEL: Final = "set_channel"  # read, set the channel annotation (obj's), update


@dataclass(frozen=True, slots=True)
class Options:
    """The controller's settings that shape what it writes."""

    namespace: str  # the driver namespace: cliques and members live there
    max_nodes: int = membership.MAX_NODES_PER_IMEX_DOMAIN
    host_managed: bool = False
    isolation: str = isolation.DOMAIN  # `channel`: one IMEX domain per clique, a channel each

    @property
    def channel_isolation(self) -> bool:
        return self.isolation == isolation.CHANNEL and not self.host_managed


@dataclass(frozen=True, slots=True)
class DomainObjects:
    """What the store holds for one domain."""

    domain: Obj
    members: Sequence[Obj] = ()  # ComputeDomainMembers labelled with the domain's UID
    cliques: Sequence[Obj] = ()  # ComputeDomainCliques labelled with the domain's UID
    templates: Sequence[Obj] = ()  # RCTs in the domain's namespace (ours or in the way)
    node_ready: Mapping[str, str | None] = field(default_factory=dict)
    # Channel isolation only: the domain's channel (None: none free) and the indices of its
    # members' nodes in the clique-wide cliques (`plan_shared_cliques`), by clique ID.
    channel: int | None = None
    shared_placements: Mapping[str, Placement] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Write:
    """One write: `verb` on `obj` of `kind` (for deletes and finalizer edits only
    the object's namespace and name count); `why` is for the log."""

    verb: str
    kind: ResourceKind
    obj: Obj
    why: str

    @property
    def name(self) -> str:
        return str(self.obj["metadata"]["name"])

    @property
    def namespace(self) -> str | None:
        ns = self.obj["metadata"].get("namespace")
        return str(ns) if ns is not None else None


@dataclass(frozen=True, slots=True)
class Plan:
    writes: tuple[Write, ...]
    notices: tuple[Notice, ...]
    status: DomainStatus | None = None


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, Mapping) else {}


def _labels(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    labels = _meta(obj).get("labels")
    return labels if isinstance(labels, Mapping) else {}


def _finalizers(obj: Mapping[str, Any]) -> list[str]:
    finalizers = _meta(obj).get("finalizers")
    return [str(f) for f in finalizers] if isinstance(finalizers, list) else []


def _ref(kind: ResourceKind, namespace: str | None, name: str) -> Obj:
    meta: dict[str, Any] = {"name": name}
    if namespace is not None:
        meta["namespace"] = namespace
    return {"apiVersion": kind.api_version, "kind": kind.kind, "metadata": meta}


def _domain_ref(obj: Mapping[str, Any]) -> str:
    meta = _meta(obj)
    return f"ComputeDomain {meta.get('namespace') or 'default'}/{meta.get('name')}"


def plan_domain(objs: DomainObjects, options: Options, *, now: str) -> Plan:
    """The writes and notices for one domain (see the module docstring)."""
    raw = objs.domain
    meta = _meta(raw)
    uid = str(meta.get("uid") or "")
    deleting = bool(meta.get("deletionTimestamp"))
    try:
        domain = decode_compute_domain(raw)
        template = workload_claim_template(
            domain, host_managed=options.host_managed, pin_domain=not options.channel_isolation
        )
    except ConfigError as exc:
        return _plan_invalid(objs, str(exc), uid=uid, deleting=deleting, now=now)

    writes: list[Write] = []
    notices: list[Notice] = []
    members = _members(objs, domain, notices, options)

    # 1. the domain's finalizer (a live domain only: a deleting one cannot gain one)
    if not deleting and FINALIZER not in _finalizers(raw):
        writes.append(
            Write(
                ADD_FINALIZER,
                COMPUTE_DOMAIN,
                _ref(COMPUTE_DOMAIN, domain.namespace, domain.name),
                f"{domain.ref}: add finalizer {FINALIZER}",
            )
        )

    # 1b. channel isolation: the domain's channel, recorded before anything can use it
    recorded = _recorded_channel(raw)
    wanted_channel = objs.channel if options.channel_isolation and not deleting else None
    if wanted_channel is not None and recorded != wanted_channel:
        body = _ref(COMPUTE_DOMAIN, domain.namespace, domain.name)
        body["metadata"]["annotations"] = {isolation.CHANNEL_ANNOTATION: str(wanted_channel)}
        writes.append(
            Write(SET_CHANNEL, COMPUTE_DOMAIN, body, f"{domain.ref}: IMEX channel {wanted_channel}")
        )

    # 2. the workload ResourceClaimTemplate
    ours = [t for t in objs.templates if _labels(t).get(DOMAIN_LABEL) == uid]
    if deleting:
        writes.extend(_template_teardown(ours, domain.ref))
    else:
        wanted = template["metadata"]["name"]
        named = [t for t in objs.templates if _meta(t).get("name") == wanted]
        for t in ours:
            # Someone deleted the live domain's template: let it go, and make it anew.
            if _meta(t).get("deletionTimestamp") and FINALIZER in _finalizers(t):
                writes.extend(_template_teardown([t], domain.ref))
        if not named:
            writes.append(
                Write(
                    CREATE,
                    RESOURCE_CLAIM_TEMPLATE,
                    template,
                    f"{domain.ref}: create its workload ResourceClaimTemplate",
                )
            )
        elif named[0] not in ours:
            notices.append(
                Notice(
                    WARNING,
                    "TemplateNameTaken",
                    "",
                    f"{domain.ref}: spec.channel.resourceClaimTemplate.name: "
                    f"ResourceClaimTemplate {domain.namespace}/{wanted} already exists and "
                    f"does not belong to this domain (label {DOMAIN_LABEL} is not {uid})",
                )
            )

    # 3. cliques
    placements: dict[str, Placement] = {}
    if options.channel_isolation:
        # the clique-wide cliques hold the indices; a per-domain one is a leftover
        writes.extend(_delete_cliques(objs.cliques, f"{domain.ref} (isolation channel)"))
        nodes = {m.node for m in members}
        for clique_id, placement in objs.shared_placements.items():
            placements[clique_id] = Placement(
                indices={n: i for n, i in placement.indices.items() if n in nodes},
                left_out=tuple(n for n in placement.left_out if n in nodes),
            )
    elif not options.host_managed:
        clique_writes, placements = _cliques(objs, members, uid, options)
        writes.extend(clique_writes)

    # 4. status
    status = domain_status(
        ref=domain.ref,
        num_nodes=domain.spec.num_nodes,
        generation=domain.metadata.generation,
        members=members,
        placements=placements,
        max_nodes=options.max_nodes,
        host_managed=options.host_managed,
        deleting=deleting,
        channel_isolation=options.channel_isolation,
        channel=objs.channel if objs.channel is not None else recorded,
        previous=raw.get("status") if isinstance(raw.get("status"), Mapping) else None,
        now=now,
    )
    notices.extend(status.notices)
    if raw.get("status") != status.body:
        body = copy.deepcopy(dict(raw))
        body["status"] = status.body
        writes.append(Write(STATUS, COMPUTE_DOMAIN, body, f"{domain.ref}: status"))

    # 5. the domain's finalizer goes last, once nothing holds a claim
    if deleting and not members and FINALIZER in _finalizers(raw):
        writes.append(
            Write(
                REMOVE_FINALIZER,
                COMPUTE_DOMAIN,
                _ref(COMPUTE_DOMAIN, domain.namespace, domain.name),
                f"{domain.ref}: no member left, drop finalizer {FINALIZER}",
            )
        )
    return Plan(writes=tuple(writes), notices=tuple(notices), status=status)


def _recorded_channel(raw: Mapping[str, Any]) -> int | None:
    """The channel annotation of a domain (an edited, unreadable one counts as none)."""
    try:
        return isolation.domain_channel(raw)
    except ClusterError:
        return None


def _delete_cliques(cliques: Sequence[Obj], why: str) -> list[Write]:
    writes = []
    for clique in cliques:
        meta = _meta(clique)
        writes.append(
            Write(
                DELETE,
                COMPUTE_DOMAIN_CLIQUE,
                _ref(COMPUTE_DOMAIN_CLIQUE, meta.get("namespace"), str(meta.get("name"))),
                f"{why}: delete clique {meta.get('name')}",
            )
        )
    return writes


def plan_shared_cliques(
    members: Sequence[Member], stored: Sequence[Obj], options: Options
) -> tuple[list[Write], dict[str, Placement]]:
    """Channel isolation: the clique-wide cliques' writes and placements.

    One ComputeDomainClique per clique (`membership.build_shared_clique`) with a
    row for every node of the clique that is a member of any domain; a node's
    index is kept while it is a member of any, a new node gets the lowest free
    one (`assign_indices`, nodes in the order of their oldest member). A row is
    `Ready` when the node's IMEX (which all its members share) is. A clique
    with no member left is deleted.
    """
    existing = {_clique_id(c): c for c in stored if _clique_id(c)}
    by_clique: dict[str, dict[str, list[Member]]] = {}
    for m in sorted(members, key=lambda m: (m.created, m.node)):
        if m.spec.clique_id:
            by_clique.setdefault(m.spec.clique_id, {}).setdefault(m.node, []).append(m)
    writes: list[Write] = []
    placements: dict[str, Placement] = {}
    for clique_id, nodes in sorted(by_clique.items()):
        stored_clique = existing.get(clique_id)
        current: dict[str, int] = {}
        if stored_clique is not None:
            try:
                current = {r.node_name: r.index for r in membership.clique_rows(stored_clique)}
            except ClusterError:
                current = {}
        placement = assign_indices(current, list(nodes), options.max_nodes)
        placements[clique_id] = placement
        rows = []
        for node, node_members in nodes.items():
            if node not in placement.indices:
                continue
            ips = [m.status.ip_address for m in node_members if m.status.ip_address]
            ready = any(m.status.state == membership.MemberState.READY for m in node_members)
            rows.append(
                membership.CliqueRow(
                    node_name=node,
                    ip_address=ips[0] if ips else "",
                    clique_id=clique_id,
                    index=placement.indices[node],
                    status="Ready" if ready else "NotReady",
                )
            )
        desired = membership.build_shared_clique(clique_id, rows, namespace=options.namespace)
        name = desired["metadata"]["name"]
        if stored_clique is None:
            writes.append(Write(CREATE, COMPUTE_DOMAIN_CLIQUE, desired, f"create clique {name}"))
        elif stored_clique.get("daemons") != desired["daemons"]:
            body = copy.deepcopy(dict(stored_clique))
            body["daemons"] = desired["daemons"]
            writes.append(Write(UPDATE, COMPUTE_DOMAIN_CLIQUE, body, f"update clique {name}"))
    gone = [c for clique_id, c in sorted(existing.items()) if clique_id not in by_clique]
    writes.extend(_delete_cliques(gone, "no member left in the clique"))
    return writes, placements


def _members(
    objs: DomainObjects, domain: ComputeDomain, notices: list[Notice], options: Options
) -> list[Member]:
    """The domain's valid members; a malformed one is a notice naming it and its field, and
    so is one a plugin of the other isolation mode wrote (it stays a member: it holds
    claims)."""
    if options.host_managed:
        return []  # no member exists in host-managed mode; any left over are not ours to judge
    out = []
    for obj in objs.members:
        try:
            spec = membership.member_spec(obj)
        except ClusterError as exc:
            node = str(_labels(obj).get(membership.NODE_LABEL) or "")
            notices.append(Notice(WARNING, "InvalidMember", node, str(exc)))
            continue
        if spec.domain_uid != domain.uid:
            continue
        written = isolation.isolation_of(obj)
        if written != options.isolation:
            notices.append(
                Notice(
                    WARNING,
                    "IsolationMismatch",
                    spec.node_name,
                    f"node {spec.node_name}: its CD kubelet plugin runs --imex-isolation "
                    f"{written}, this controller --imex-isolation {options.isolation}: run the "
                    "controller, the plugin and the IMEX host with the same mode "
                    "(resources.computeDomains.imex.isolation)",
                )
            )
        out.append(
            Member(
                spec=spec,
                status=membership.member_status(obj),
                created=str(_meta(obj).get("creationTimestamp") or ""),
                node_ready=objs.node_ready.get(spec.node_name),
            )
        )
    return out


def _template_teardown(templates: Sequence[Obj], ref: str) -> list[Write]:
    writes = []
    for t in templates:
        meta = _meta(t)
        namespace, name = meta.get("namespace"), str(meta.get("name"))
        target = _ref(RESOURCE_CLAIM_TEMPLATE, namespace, name)
        if not meta.get("deletionTimestamp"):
            writes.append(
                Write(
                    DELETE,
                    RESOURCE_CLAIM_TEMPLATE,
                    target,
                    f"{ref} is being deleted: delete ResourceClaimTemplate {namespace}/{name}",
                )
            )
        if FINALIZER in _finalizers(t):
            writes.append(
                Write(
                    REMOVE_FINALIZER,
                    RESOURCE_CLAIM_TEMPLATE,
                    target,
                    f"{ref} is being deleted: drop the finalizer of ResourceClaimTemplate "
                    f"{namespace}/{name}",
                )
            )
    return writes


def _clique_id(obj: Mapping[str, Any]) -> str:
    return str(_labels(obj).get(membership.CLIQUE_LABEL) or "")


def _cliques(
    objs: DomainObjects, members: Sequence[Member], uid: str, options: Options
) -> tuple[list[Write], dict[str, Placement]]:
    """Creates/updates of the cliques with members, deletes of those without."""
    existing = {_clique_id(c): c for c in objs.cliques if _clique_id(c)}
    by_clique: dict[str, list[Member]] = {}
    for m in sorted(members, key=lambda m: (m.created, m.node)):
        if m.spec.clique_id:
            by_clique.setdefault(m.spec.clique_id, []).append(m)
    writes: list[Write] = []
    placements: dict[str, Placement] = {}
    for clique_id, clique_members in sorted(by_clique.items()):
        stored = existing.get(clique_id)
        current: dict[str, int] = {}
        if stored is not None:
            try:
                current = {r.node_name: r.index for r in membership.clique_rows(stored)}
            except ClusterError:
                current = {}  # unreadable rows: place everyone afresh
        placement = assign_indices(current, [m.node for m in clique_members], options.max_nodes)
        placements[clique_id] = placement
        rows = [
            membership.CliqueRow(
                node_name=m.node,
                ip_address=m.status.ip_address,
                clique_id=clique_id,
                index=placement.indices[m.node],
                status="Ready" if m.status.state == membership.MemberState.READY else "NotReady",
            )
            for m in clique_members
            if m.node in placement.indices
        ]
        desired = membership.build_clique(uid, clique_id, rows, namespace=options.namespace)
        name = desired["metadata"]["name"]
        if stored is None:
            writes.append(Write(CREATE, COMPUTE_DOMAIN_CLIQUE, desired, f"create clique {name}"))
            continue
        labels = dict(_labels(stored))
        if stored.get("daemons") != desired["daemons"] or any(
            labels.get(k) != v for k, v in desired["metadata"]["labels"].items()
        ):
            body = copy.deepcopy(dict(stored))
            body["daemons"] = desired["daemons"]
            body["metadata"]["labels"] = {**labels, **desired["metadata"]["labels"]}
            writes.append(Write(UPDATE, COMPUTE_DOMAIN_CLIQUE, body, f"update clique {name}"))
    for clique_id, stored in sorted(existing.items()):
        if clique_id not in by_clique:
            meta = _meta(stored)
            writes.append(
                Write(
                    DELETE,
                    COMPUTE_DOMAIN_CLIQUE,
                    _ref(COMPUTE_DOMAIN_CLIQUE, meta.get("namespace"), str(meta.get("name"))),
                    f"clique {meta.get('name')} has no member left",
                )
            )
    return writes, placements


def _plan_invalid(objs: DomainObjects, error: str, *, uid: str, deleting: bool, now: str) -> Plan:
    """A domain the controller cannot decode: say why, and still let it be deleted."""
    raw = objs.domain
    meta = _meta(raw)
    generation = meta.get("generation")
    status = invalid_status(
        error,
        previous=raw.get("status") if isinstance(raw.get("status"), Mapping) else None,
        now=now,
        generation=generation if isinstance(generation, int) else None,
    )
    writes: list[Write] = []
    ref = _domain_ref(raw)
    if raw.get("status") != status.body and meta.get("name"):
        body = copy.deepcopy(dict(raw))
        body["status"] = status.body
        writes.append(Write(STATUS, COMPUTE_DOMAIN, body, f"{ref}: status (invalid)"))
    if deleting and uid:
        ours = [t for t in objs.templates if _labels(t).get(DOMAIN_LABEL) == uid]
        writes.extend(_template_teardown(ours, ref))
        if not objs.members:
            for clique in objs.cliques:
                cmeta = _meta(clique)
                writes.append(
                    Write(
                        DELETE,
                        COMPUTE_DOMAIN_CLIQUE,
                        _ref(COMPUTE_DOMAIN_CLIQUE, cmeta.get("namespace"), str(cmeta.get("name"))),
                        f"{ref} is being deleted: delete clique {cmeta.get('name')}",
                    )
                )
            if FINALIZER in _finalizers(raw):
                writes.append(
                    Write(
                        REMOVE_FINALIZER,
                        COMPUTE_DOMAIN,
                        _ref(COMPUTE_DOMAIN, meta.get("namespace"), str(meta.get("name"))),
                        f"{ref}: no member left, drop finalizer {FINALIZER}",
                    )
                )
    return Plan(writes=tuple(writes), notices=status.notices, status=status)
