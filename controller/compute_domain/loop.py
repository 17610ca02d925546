"""The controller's loop: watch the store, plan each changed domain, apply, post Events.

NVIDIA's status manager polls every ComputeDomain, daemon pod and clique
every 2 seconds (computedomain.md §2.3). Here the loop sleeps until the store
says something changed (`ObjectStore.watch_objects`), waits a short debounce
so a burst of joins becomes one pass, lists the kinds it reads, and plans
(`reconcile.plan_domain`) only the domains whose inputs changed since their
last successful pass, plus those whose last pass failed (retried with
backoff) and, every `resync` seconds, all of them.

Every write goes through `_apply`, which first asks whether we still lead
(`is_leader`), so a replica that loses its Lease stops writing at once. The
counts of writes, conflicts and failures are kept in `ControllerStats` (and
as Prometheus counters) for the benchmark and for operators: a conflict
storm would show there.

In channel isolation each pass first assigns the domains' channels
(`channels.assign_channels`, all domains at once: one writer, no races) and
plans the clique-wide cliques (`reconcile.plan_shared_cliques`, all members
at once), then gives each domain's plan its share.

Events (events.k8s.io/v1) are posted once per appearance of a notice
(reason + node) and again only after it went away and came back.
"""

from __future__ import annotations

import copy
import itertools
import logging
import math
import threading
import time
from collections import Counter
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Final

from prometheus_client import CollectorRegistry, Gauge
from prometheus_client import Counter as PromCounter

from controller.compute_domain import reconcile
from controller.compute_domain.channels import assign_channels
from controller.compute_domain.indices import Placement
from controller.compute_domain.reconcile import DomainObjects, Options, Plan, Write
from controller.compute_domain.status import Member, Notice
from dra_driver.compute_domain import isolation, membership
from dra_driver.compute_domain.names import (
    DOMAIN_LABEL,
    DRIVER_NAME,
    FINALIZER,
    TARGET_LABEL,
    TARGET_WORKLOAD,
)
from dra_driver.errors import ClusterError, ConflictError, NotFoundError
from dra_driver.kube.apiserver_rules import timestamp_now
from dra_driver.kube.object_store import (
    COMPUTE_DOMAIN,
    COMPUTE_DOMAIN_CLIQUE,
    COMPUTE_DOMAIN_MEMBER,
    EVENT,
    NODE,
    RESOURCE_CLAIM_TEMPLATE,
    ObjectStore,
)
from dra_driver.kube.objects import Obj

__all__ = ["WATCHED_KINDS", "ComputeDomainController", "ControllerStats", "LoopOptions"]

log = logging.getLogger(__name__)

WATCHED_KINDS: Final = (
    COMPUTE_DOMAIN,
    COMPUTE_DOMAIN_MEMBER,
    COMPUTE_DOMAIN_CLIQUE,
    NODE,
    RESOURCE_CLAIM_TEMPLATE,
)
REPORTING_CONTROLLER: Final = f"{DRIVER_NAME}/compute-domain-controller"
_MAX_NOTE_BYTES: Final = 1024


class ControllerStats:
    """What the controller wrote and how often it failed (thread-safe), also as
    Prometheus metrics in `registry`."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self._lock = threading.Lock()
        self.writes: Counter[str] = Counter()  # "<Kind> <verb>" -> count
        self.conflicts = 0
        self.errors = 0
        self.passes = 0
        self.reconciles = 0
        self.events = 0
        self.registry = registry if registry is not None else CollectorRegistry()
        ns = "dra_gpu_compute_domain_controller"
        self._m_writes = PromCounter(
            "writes", "API writes by kind and verb", ["kind", "verb"],
            namespace=ns, registry=self.registry,
        )  # fmt: skip
        self._m_conflicts = PromCounter(
            "conflicts", "Writes refused with 409 (stale resourceVersion, name taken)",
            ["kind"], namespace=ns, registry=self.registry,
        )  # fmt: skip
        self._m_errors = PromCounter(
            "write_errors", "Writes that failed otherwise (retried with backoff)", ["kind"],
            namespace=ns, registry=self.registry,
        )  # fmt: skip
        self._m_reconciles = PromCounter(
            "reconciles", "Domains planned", namespace=ns, registry=self.registry
        )
        self._m_events = PromCounter(
            "events", "Events posted", namespace=ns, registry=self.registry
        )
        self.leader = Gauge(
            "leader", "1 while this replica leads", namespace=ns, registry=self.registry
        )

    def wrote(self, kind: str, verb: str) -> None:
        with self._lock:
            self.writes[f"{kind} {verb}"] += 1
        self._m_writes.labels(kind, verb).inc()

    def conflict(self, kind: str) -> None:
        with self._lock:
            self.conflicts += 1
        self._m_conflicts.labels(kind).inc()

    def error(self, kind: str) -> None:
        with self._lock:
            self.errors += 1
        self._m_errors.labels(kind).inc()

    def reconciled(self) -> None:
        with self._lock:
            self.reconciles += 1
        self._m_reconciles.inc()

    def posted(self) -> None:
        with self._lock:
            self.events += 1
        self._m_events.inc()

    def passed(self) -> None:
        with self._lock:
            self.passes += 1

    @property
    def total_writes(self) -> int:
        with self._lock:
            return sum(self.writes.values())

    def snapshot(self) -> dict[str, Any]:
        """A plain copy for a benchmark's JSON."""
        with self._lock:
            return {
                "writes": dict(self.writes),
                "total_writes": sum(self.writes.values()),
                "conflicts": self.conflicts,
                "errors": self.errors,
                "passes": self.passes,
                "reconciles": self.reconciles,
                "events": self.events,
            }


@dataclass(frozen=True, slots=True)
class LoopOptions:
    options: Options
    debounce: float = 0.05  # seconds after a change before a pass, to batch a burst
    resync: float = 300.0  # seconds between passes over every domain
    retry_min: float = 0.05  # first retry of a failed domain; doubles up to retry_max
    retry_max: float = 10.0
    identity: str = "compute-domain-controller"  # reportingInstance of Events


@dataclass
class _Retry:
    attempts: int = 0
    due: float = 0.0


@dataclass
class _Snapshot:
    domains: list[Obj] = field(default_factory=list)
    members: dict[str, list[Obj]] = field(default_factory=dict)  # by domain UID
    cliques: dict[str, list[Obj]] = field(default_factory=dict)
    templates: dict[str, list[Obj]] = field(default_factory=dict)  # by namespace
    node_ready: dict[str, str | None] = field(default_factory=dict)
    shared_cliques: list[Obj] = field(default_factory=list)  # channel isolation's, by clique


@dataclass
class _Shared:
    """Channel isolation's pass-wide decisions: each domain's channel, each clique's
    indices."""

    channels: dict[str, int] = field(default_factory=dict)
    placements: dict[str, Placement] = field(default_factory=dict)


class ComputeDomainController:
    """Reconciles every ComputeDomain of the store while `is_leader()` says so."""

    def __init__(
        self,
        store: ObjectStore,
        options: LoopOptions,
        *,
        is_leader: Callable[[], bool] = lambda: True,
        stats: ControllerStats | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._store = store
        self._loop = options
        self.options = options.options
        self._is_leader = is_leader
        self.stats = stats if stats is not None else ControllerStats()
        self._clock = clock
        self._wake = threading.Event()
        self._seen: dict[str, Hashable] = {}  # domain UID -> inputs at its last good pass
        self._retry: dict[str, _Retry] = {}
        self._noticed: dict[str, set[tuple[str, str]]] = {}
        self._event_seq = itertools.count()
        self.last_pass_at = 0.0  # clock() of the last finished pass (for health checks)
        self._sweep_due = math.inf  # when a failed orphan sweep is retried

    # -- the loop ------------------------------------------------------------------
    def poke(self) -> None:
        """Something may have changed: pass soon."""
        self._wake.set()

    def run(self, stop: threading.Event) -> None:
        """Watch and reconcile until `stop` is set."""

        def watch() -> None:
            while not stop.is_set():
                try:
                    self._store.watch_objects(WATCHED_KINDS, self.poke, stop)
                except Exception:  # the store should not raise; never let the watch die
                    log.exception("watching the store failed; watching again")
                    stop.wait(1.0)
                    self.poke()
            self.poke()  # the watch ends when `stop` is set: wake the loop to see it

        watcher = threading.Thread(target=watch, name="compute-domain-watch", daemon=True)
        watcher.start()
        self.poke()
        next_resync = self._clock() + self._loop.resync
        while not stop.is_set():
            now = self._clock()
            due = min([next_resync, self._sweep_due, *(r.due for r in self._retry.values())])
            self._wake.wait(max(0.0, min(due - now, 1.0)))
            if stop.is_set():
                break
            if not self._is_leader():
                self._forget()
                self._wake.clear()  # everything is planned afresh on leadership
                continue
            woke = self._wake.is_set()
            if woke:
                stop.wait(self._loop.debounce)
                self._wake.clear()
            now = self._clock()
            everything = now >= next_resync
            if everything:
                next_resync = now + self._loop.resync
            if not (woke or everything or self._due(now)):
                continue
            try:
                self.reconcile_pass(everything=everything)
            except ClusterError as exc:
                log.warning("listing objects failed, retrying: %s", exc)
                stop.wait(self._loop.retry_min)
                self.poke()
            except Exception:  # never let the loop thread die: log, back off, go on
                log.exception("a reconcile pass failed; retrying")
                stop.wait(max(self._loop.retry_min, 1.0))
                self.poke()
        watcher.join(timeout=5)

    def _due(self, now: float) -> bool:
        return self._sweep_due <= now or any(r.due <= now for r in self._retry.values())

    def _forget(self) -> None:
        """Not leading: start from scratch when leadership comes (back)."""
        self._seen.clear()
        self._retry.clear()
        self.stats.leader.set(0)

    # -- one pass ------------------------------------------------------------------
    def reconcile_pass(self, *, everything: bool = False) -> int:
        """Plan and apply every domain whose inputs changed (all with `everything`), plus
        the failed ones that are due; returns how many domains were planned."""
        if not self._is_leader():
            self._forget()
            return 0
        self.stats.leader.set(1)
        snap = self._load()
        shared = self._plan_shared(snap) if self.options.channel_isolation else _Shared()
        now = self._clock()
        planned = 0
        uids = set()
        for raw in snap.domains:
            meta = raw.get("metadata") or {}
            uid = str(meta.get("uid") or "")
            if not uid:
                continue
            uids.add(uid)
            objs = DomainObjects(
                domain=raw,
                members=snap.members.get(uid, []),
                cliques=snap.cliques.get(uid, []),
                templates=snap.templates.get(str(meta.get("namespace") or "default"), []),
                node_ready=snap.node_ready,
                channel=shared.channels.get(uid),
                shared_placements=_shares(shared.placements, snap.members.get(uid, [])),
            )
            inputs = _fingerprint(objs)
            retry = self._retry.get(uid)
            if not everything and self._seen.get(uid) == inputs and retry is None:
                continue
            if retry is not None and retry.due > now and self._seen.get(uid) == inputs:
                continue
            planned += 1
            try:
                ok = self._reconcile(uid, objs)
            except Exception:  # a bug on one domain's data must not stop the others
                log.exception("reconciling ComputeDomain %s failed", uid)
                self.stats.error(COMPUTE_DOMAIN.kind)
                ok = False
            if ok:
                self._seen[uid] = inputs
                self._retry.pop(uid, None)
            else:
                self._seen[uid] = inputs  # retried when due, or at once if inputs change
                r = self._retry.setdefault(uid, _Retry())
                delay = min(self._loop.retry_max, self._loop.retry_min * 2**r.attempts)
                r.attempts += 1
                r.due = self._clock() + delay
        self._sweep_orphans(snap, uids)
        for gone in set(self._seen) - uids:
            self._seen.pop(gone, None)
            self._noticed.pop(gone, None)
        for gone in set(self._retry) - uids:
            self._retry.pop(gone, None)
        self.stats.passed()
        self.last_pass_at = self._clock()
        return planned

    def _load(self) -> _Snapshot:
        ns = self.options.namespace
        snap = _Snapshot()
        snap.domains = self._store.list_objects(COMPUTE_DOMAIN)
        for member in self._store.list_objects(COMPUTE_DOMAIN_MEMBER, ns):
            uid = _label(member, DOMAIN_LABEL)
            if uid:
                snap.members.setdefault(uid, []).append(member)
        for clique in self._store.list_objects(COMPUTE_DOMAIN_CLIQUE, ns):
            uid = _label(clique, DOMAIN_LABEL)
            if uid:
                snap.cliques.setdefault(uid, []).append(clique)
            elif isolation.isolation_of(clique) == isolation.CHANNEL:
                snap.shared_cliques.append(clique)
        namespaces = {str((d.get("metadata") or {}).get("namespace") or "") for d in snap.domains}
        for template in self._store.list_objects(RESOURCE_CLAIM_TEMPLATE):
            tns = str((template.get("metadata") or {}).get("namespace") or "")
            if tns in namespaces or _label(template, DOMAIN_LABEL):
                snap.templates.setdefault(tns, []).append(template)
        for node in self._store.list_objects(NODE):
            name = str((node.get("metadata") or {}).get("name") or "")
            snap.node_ready[name] = _node_ready(node)
        return snap

    def _plan_shared(self, snap: _Snapshot) -> _Shared:
        """Channel isolation: assign every domain's channel and write the clique-wide
        cliques (a failed write is retried like a failed orphan sweep)."""

        def age(raw: Obj) -> tuple[str, str, str]:
            meta = raw.get("metadata") or {}
            return (
                str(meta.get("creationTimestamp") or ""),
                str(meta.get("namespace") or ""),
                str(meta.get("name") or ""),
            )

        domains = sorted((d for d in snap.domains if (d.get("metadata") or {}).get("uid")), key=age)
        uid_of = {id(d): str(d["metadata"]["uid"]) for d in domains}
        current = {uid_of[id(d)]: _channel_annotation(d) for d in domains}
        closing = [uid_of[id(d)] for d in domains if d["metadata"].get("deletionTimestamp")]
        channels = assign_channels(current, [uid_of[id(d)] for d in domains], no_new=closing)
        members = []
        for objs in snap.members.values():
            for obj in objs:
                try:
                    spec = membership.member_spec(obj)
                except ClusterError:
                    continue  # the domain's own pass names it (InvalidMember)
                members.append(
                    Member(
                        spec=spec,
                        status=membership.member_status(obj),
                        created=str((obj.get("metadata") or {}).get("creationTimestamp") or ""),
                    )
                )
        writes, placements = reconcile.plan_shared_cliques(
            members, snap.shared_cliques, self.options
        )
        if writes and not self._execute(Plan(writes=tuple(writes), notices=())):
            self._sweep_due = self._clock() + self._loop.retry_min
        return _Shared(channels=dict(channels.channels), placements=placements)

    def _reconcile(self, uid: str, objs: DomainObjects) -> bool:
        self.stats.reconciled()
        plan = reconcile.plan_domain(objs, self.options, now=timestamp_now())
        ok = self._execute(plan)
        self._post_notices(uid, objs.domain, plan.notices)
        return ok

    def _execute(self, plan: Plan) -> bool:
        versions: dict[tuple[str, str | None, str], str] = {}
        for write in plan.writes:
            if not self._is_leader():
                log.info("no longer the leader: stopping before %s", write.why)
                return False
            try:
                self._apply(write, versions)
            except ConflictError as exc:
                self.stats.conflict(write.kind.kind)
                log.info("%s: conflict, retrying: %s", write.why, exc)
                return False
            except ClusterError as exc:
                self.stats.error(write.kind.kind)
                log.warning("%s: failed, retrying: %s", write.why, exc)
                return False
            log.debug("%s: done", write.why)
        return True

    def _apply(self, write: Write, versions: dict[tuple[str, str | None, str], str]) -> None:
        kind, store = write.kind, self._store
        key = (kind.kind, write.namespace, write.name)
        verb = write.verb
        result: Obj | None = None
        if verb == reconcile.CREATE:
            result = store.create_object(kind, write.obj)
        elif verb == reconcile.UPDATE:
            result = store.update_object(kind, _with_version(write.obj, versions.get(key)))
        elif verb == reconcile.STATUS:
            result = store.update_object_status(kind, _with_version(write.obj, versions.get(key)))
        elif verb == reconcile.DELETE:
            store.delete_object(kind, write.namespace, write.name)
        elif verb == reconcile.SET_CHANNEL:
            try:
                current = store.get_object(kind, write.namespace, write.name)
            except NotFoundError:
                return
            wanted = write.obj["metadata"]["annotations"]
            annotations = dict(current["metadata"].get("annotations") or {})
            if all(annotations.get(k) == v for k, v in wanted.items()):
                return
            current["metadata"]["annotations"] = {**annotations, **wanted}
            result = store.update_object(kind, current)
        elif verb in (reconcile.ADD_FINALIZER, reconcile.REMOVE_FINALIZER):
            try:
                current = store.get_object(kind, write.namespace, write.name)
            except NotFoundError:
                return  # gone already: nothing to hold or release
            finalizers = list(current["metadata"].get("finalizers") or [])
            if verb == reconcile.ADD_FINALIZER and current["metadata"].get("deletionTimestamp"):
                return  # deleted since the plan: it takes no new finalizer, nor needs one
            if verb == reconcile.ADD_FINALIZER and FINALIZER not in finalizers:
                finalizers.append(FINALIZER)
            elif verb == reconcile.REMOVE_FINALIZER and FINALIZER in finalizers:
                finalizers.remove(FINALIZER)
            else:
                return
            current["metadata"]["finalizers"] = finalizers
            result = store.update_object(kind, current)
        else:  # pragma: no cover - the verbs are reconcile's constants
            raise AssertionError(f"unknown write verb {verb!r}")
        self.stats.wrote(kind.kind, verb)
        rv = (result or {}).get("metadata", {}).get("resourceVersion")
        if rv:
            versions[key] = str(rv)

    # -- orphans -------------------------------------------------------------------
    def _sweep_orphans(self, snap: _Snapshot, uids: set[str]) -> None:
        """Cliques and workload templates of domains that no longer exist (a domain
        removed without its finalizer running): deleted, as NVIDIA's sweep does; so are
        clique-wide cliques in domain isolation (the mode was switched back)."""
        writes: list[Write] = []
        if not self.options.channel_isolation:
            for clique in snap.shared_cliques:  # left by a controller in channel isolation
                writes.append(
                    Write(
                        reconcile.DELETE,
                        COMPUTE_DOMAIN_CLIQUE,
                        clique,
                        f"clique {clique['metadata'].get('name')}: a clique-wide clique of "
                        "channel isolation, and this controller runs --imex-isolation domain",
                    )
                )
        for uid, cliques in snap.cliques.items():
            if uid in uids:
                continue
            for clique in cliques:
                meta = clique["metadata"]
                writes.append(
                    Write(
                        reconcile.DELETE,
                        COMPUTE_DOMAIN_CLIQUE,
                        clique,
                        f"clique {meta.get('name')}: its ComputeDomain {uid} is gone",
                    )
                )
        for templates in snap.templates.values():
            for template in templates:
                uid = _label(template, DOMAIN_LABEL)
                if not uid or uid in uids or _label(template, TARGET_LABEL) != TARGET_WORKLOAD:
                    continue
                meta = template["metadata"]
                why = (
                    f"ResourceClaimTemplate {meta.get('namespace')}/{meta.get('name')}: "
                    f"its ComputeDomain {uid} is gone"
                )
                if not meta.get("deletionTimestamp"):
                    writes.append(Write(reconcile.DELETE, RESOURCE_CLAIM_TEMPLATE, template, why))
                if FINALIZER in (meta.get("finalizers") or []):
                    writes.append(
                        Write(reconcile.REMOVE_FINALIZER, RESOURCE_CLAIM_TEMPLATE, template, why)
                    )
        self._sweep_due = math.inf
        if writes and not self._execute(Plan(writes=tuple(writes), notices=())):
            self._sweep_due = self._clock() + self._loop.retry_min

    # -- Events --------------------------------------------------------------------
    def _post_notices(self, uid: str, domain: Obj, notices: Sequence[Notice]) -> None:
        before = self._noticed.get(uid, set())
        now_keys = {n.key for n in notices}
        for notice in notices:
            if notice.key in before:
                continue
            if self._post_event(domain, notice):
                before = before | {notice.key}
        self._noticed[uid] = {k for k in before if k in now_keys}

    def _post_event(self, domain: Obj, notice: Notice) -> bool:
        if not self._is_leader():
            return False
        event = build_event(
            domain, notice, identity=self._loop.identity, sequence=next(self._event_seq)
        )
        try:
            self._store.create_object(EVENT, event)
        except ClusterError as exc:
            log.warning("posting Event %s: %s", notice.reason, exc)
            return False
        self.stats.posted()
        return True


def build_event(domain: Obj, notice: Notice, *, identity: str, sequence: int = 0) -> Obj:
    """The events.k8s.io/v1 Event of one notice, regarding the domain, related to the Node."""
    meta = domain.get("metadata") or {}
    namespace = str(meta.get("namespace") or "default")
    name = str(meta.get("name") or "computedomain")
    moment = time.time()
    note = notice.message.encode()[:_MAX_NOTE_BYTES].decode(errors="ignore")
    event: Obj = {
        "apiVersion": "events.k8s.io/v1",
        "kind": "Event",
        "metadata": {
            "name": f"{name}.{int(moment * 1e9) + sequence:x}"[:253],
            "namespace": namespace,
        },
        "eventTime": datetime.fromtimestamp(moment, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
        "reportingController": REPORTING_CONTROLLER,
        "reportingInstance": identity[:128],
        "action": "Reconcile",
        "reason": notice.reason,
        "type": notice.type,
        "note": note,
        "regarding": {
            "apiVersion": str(domain.get("apiVersion") or COMPUTE_DOMAIN.api_version),
            "kind": COMPUTE_DOMAIN.kind,
            "namespace": namespace,
            "name": name,
            "uid": str(meta.get("uid") or ""),
        },
    }
    if notice.node:
        event["related"] = {"apiVersion": "v1", "kind": "Node", "name": notice.node}
    return event


def _label(obj: Mapping[str, Any], key: str) -> str:
    labels = (obj.get("metadata") or {}).get("labels") or {}
    return str(labels.get(key) or "") if isinstance(labels, Mapping) else ""


def _node_ready(node: Mapping[str, Any]) -> str | None:
    conditions = (node.get("status") or {}).get("conditions") or []
    for condition in conditions:
        if isinstance(condition, Mapping) and condition.get("type") == "Ready":
            return str(condition.get("status") or "Unknown")
    return None


def _channel_annotation(domain: Obj) -> int | None:
    try:
        return isolation.domain_channel(domain)
    except ClusterError:
        return None  # edited by hand: assigned afresh


def _shares(placements: Mapping[str, Placement], members: Sequence[Obj]) -> dict[str, Placement]:
    """The clique-wide placements restricted to the nodes of one domain's members."""
    nodes = {str((m.get("spec") or {}).get("nodeName") or "") for m in members}
    out = {}
    for clique_id, placement in placements.items():
        indices = {n: i for n, i in placement.indices.items() if n in nodes}
        left_out = tuple(n for n in placement.left_out if n in nodes)
        if indices or left_out:
            out[clique_id] = Placement(indices=indices, left_out=left_out)
    return out


def _with_version(obj: Obj, version: str | None) -> Obj:
    if version is None:
        return obj
    body = copy.deepcopy(obj)
    body["metadata"]["resourceVersion"] = version
    return body


def _fingerprint(objs: DomainObjects) -> Hashable:
    """What a domain's plan depends on: the resourceVersions of its objects and the
    readiness of its members' nodes."""

    def rvs(items: Sequence[Obj]) -> tuple[tuple[str, str], ...]:
        return tuple(
            sorted(
                (
                    str((o.get("metadata") or {}).get("name")),
                    str((o.get("metadata") or {}).get("resourceVersion")),
                )
                for o in items
            )
        )

    nodes = tuple(
        sorted(
            (node, str(objs.node_ready.get(node)))
            for node in (str((m.get("spec") or {}).get("nodeName") or "") for m in objs.members)
        )
    )
    meta = objs.domain.get("metadata") or {}
    return (
        str(meta.get("resourceVersion")),
        rvs(objs.members),
        rvs(objs.cliques),
        rvs(objs.templates),
        nodes,
        objs.channel,
        tuple(
            sorted(
                (clique, tuple(sorted(p.indices.items())), p.left_out)
                for clique, p in objs.shared_placements.items()
            )
        ),
    )
