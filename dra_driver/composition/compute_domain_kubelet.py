"""A kube-scheduler and kubelet stand-in for pods that use ComputeDomain channels.

The multi-node simulation (`compute_domain_cluster`) has no API server, no
scheduler and no kubelet, yet a pod's way to its IMEX channel crosses all
three. This module plays their parts, and only theirs, so that everything
the drivers do stays the drivers' own code:

1. the resourceclaim controller: a pod's `resourceClaims[]` entry naming a
   ResourceClaimTemplate becomes a ResourceClaim in the pod's namespace,
   `<pod>-<claim>-<5 random>`, with the template's spec, the
   `resource.kubernetes.io/pod-claim-name` annotation and the pod as owner.
   The pod waits while the template does not exist (the controller creates it
   from the ComputeDomain, as kube-controller-manager would make it wait);
2. kube-scheduler: the claim is allocated with the project's port of the
   scheduler's structured allocator (`dra_driver.scheduling.allocator`), first
   fit over the nodes the pod may use (`spec.nodeName`, `spec.nodeSelector`,
   required node affinity), against the ResourceSlices the nodes' plugins
   published and the DeviceClasses in the store, counting every claim already
   allocated; a claim that fits nowhere is retried, as the scheduler retries,
   until the slices allow it or the time is up;
3. the kubelet: `NodePrepareResources` over the node's real DRA socket
   (`kubelet_plugin.kubelet_client`), retried while the plugin answers with an
   error (a channel claim waits for the node's IMEX daemon), then the
   container's CDI edits resolved as a runtime resolves them
   (`dra_driver.container.injection`); deleting the pod unprepares its
   claims over the socket and deletes them.
"""

from __future__ import annotations

import copy
import secrets
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dra_driver.compute_domain.names import DRIVER_NAME
from dra_driver.container import injection
from dra_driver.errors import AllocationError, NotFoundError, PluginError
from dra_driver.kube import yaml_io
from dra_driver.kube.apiserver_rules import NODE
from dra_driver.kube.local_store import LocalCluster
from dra_driver.kube.object_store import RESOURCE_CLAIM_TEMPLATE
from dra_driver.kube.objects import Obj
from dra_driver.scheduling.allocator import AllocatedState, Allocator, Features, Node
from dra_driver.scheduling.allocator.nodes import selector_matches
from kubelet_plugin.kubelet_client import KubeletClient
from kubelet_plugin.service import ClaimRef, PrepareResult

__all__ = ["PodClaim", "PodPlacementError", "RunningPod", "SchedulerKubelet"]

POD_CLAIM_NAME_ANNOTATION = "resource.kubernetes.io/pod-claim-name"
HOSTNAME_LABEL = "kubernetes.io/hostname"
RETRY_INTERVAL_S = 0.1
"""How soon a failed allocation or Prepare is tried again (the kubelet backs off further)."""


class PodPlacementError(PluginError):
    """A pod that did not get its claims allocated or prepared in time (names pod and why)."""


@dataclass(frozen=True)
class PodClaim:
    """One of a running pod's claims: the stored claim and what Prepare answered."""

    claim: Obj
    result: PrepareResult

    @property
    def ref(self) -> ClaimRef:
        meta = self.claim["metadata"]
        return ClaimRef(meta["namespace"], meta["uid"], meta["name"])


@dataclass
class RunningPod:
    """A pod the stand-in placed: its node, claims and what its container got."""

    namespace: str
    name: str
    uid: str
    node: str
    claims: tuple[PodClaim, ...]
    container: Mapping[str, Any]  # the CDI containerEdits a runtime applies
    prepare_seconds: float  # from the first Prepare call to the last answer without error
    prepare_attempts: int
    errors: tuple[str, ...] = field(default=())  # the errors Prepare answered before success
    scheduled_seconds: float = 0.0  # from run_pod until its claims were created and allocated

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def device_nodes(self) -> list[dict[str, Any]]:
        """The container's device nodes (path, type, major, minor, fileMode)."""
        return list(self.container.get("deviceNodes") or [])

    @property
    def cdi_device_ids(self) -> list[str]:
        return [i for c in self.claims for d in c.result.devices for i in d.cdi_device_ids]


class NodeAccess:
    """What the stand-in needs of one simulated node: a kubelet client per driver (the
    plugins' sockets under its kubelet root) and its CDI directory."""

    def __init__(self, name: str, kubelet_root: Path, cdi_root: Path, *, timeout: float) -> None:
        self.name = name
        self.cdi_root = cdi_root
        self._kubelet_root = kubelet_root
        self._timeout = timeout
        self._clients: dict[str, KubeletClient] = {}
        self._lock = threading.Lock()

    def client(self, driver: str = DRIVER_NAME) -> KubeletClient:
        """The kubelet's client of `driver`'s plugin on this node."""
        with self._lock:
            client = self._clients.get(driver)
            if client is None:
                client = KubeletClient(self._kubelet_root, driver, timeout=self._timeout)
                self._clients[driver] = client
            return client

    def close(self) -> None:
        with self._lock:
            clients = list(self._clients.values())
        for client in clients:
            client.close()

    def container_edits(self, cdi_device_ids: Sequence[str]) -> dict[str, Any]:
        """What a container given `cdi_device_ids` gets from the node's CDI directory."""
        specs = [
            yaml_io.load(p.read_text(encoding="utf-8"))
            for p in sorted(self.cdi_root.glob("*.yaml"))
        ]
        return injection.inject(specs, cdi_device_ids)


class SchedulerKubelet:
    """Places pods on the simulated nodes and prepares their claims (module docstring).

    `nodes(name)` gives the node's access (None: no such node, or it is down).
    Pods may be run from several threads (one scheduler: allocations are serialised).
    `features` are the scheduler's gates (default: 1.36's).
    """

    def __init__(
        self,
        cluster: LocalCluster,
        nodes: Callable[[str], NodeAccess | None],
        *,
        node_names: Callable[[], Sequence[str]],
        features: Features | None = None,
    ) -> None:
        # 1.36's gates by default: DRAConsumableCapacity (beta, on) lets several pods of a
        # domain share a node's channel-0 (published with allowMultipleAllocations).
        self._features = features or Features.for_release("1.36")
        self._cluster = cluster
        self._nodes = nodes
        self._node_names = node_names
        self._allocate_lock = threading.Lock()
        self._running: dict[str, RunningPod] = {}
        # The scheduler's view of allocated devices, kept in memory as kube-scheduler keeps
        # its cache (claims it allocated are added, claims it deleted removed), not re-read
        # from the store at every pod: 256 pods would read 256 claims each.
        self._state: AllocatedState | None = None
        self._allocator: tuple[tuple[tuple[str, Any], ...], Allocator] | None = None
        # Claims this stand-in created, by (pod uid, pod claim name): found again on a retry.
        self._made: dict[tuple[str, str], Obj] = {}

    @property
    def running(self) -> dict[str, RunningPod]:
        """Pods placed and not deleted, by `namespace/name`."""
        return dict(self._running)

    # -- the resourceclaim controller ------------------------------------------------

    def claims_for(self, pod: Mapping[str, Any], *, timeout: float) -> list[Obj]:
        """Create (or find) the pod's claims from its templates; waits for a template the
        controller has not created yet. Direct `resourceClaimName` entries are read."""
        meta = pod["metadata"]
        namespace = meta.get("namespace", "default")
        out = []
        for entry in pod["spec"].get("resourceClaims") or []:
            if entry.get("resourceClaimName"):
                out.append(self._cluster.get_resource_claim(namespace, entry["resourceClaimName"]))
                continue
            template_name = entry.get("resourceClaimTemplateName")
            if not template_name:
                raise PodPlacementError(
                    f"Pod {namespace}/{meta['name']}: spec.resourceClaims[{entry.get('name')}]: "
                    "names neither resourceClaimName nor resourceClaimTemplateName"
                )
            key = (meta["uid"], entry["name"])
            made = self._made.get(key)
            if made is not None:
                out.append(self._cluster.get_resource_claim(namespace, made["metadata"]["name"]))
                continue
            template = self._wait_template(namespace, template_name, meta["name"], timeout)
            made = self._cluster.put_resource_claim(_claim_from(template, pod, entry["name"]))
            self._made[key] = made
            out.append(made)
        return out

    def _wait_template(self, namespace: str, name: str, pod: str, timeout: float) -> Obj:
        deadline = time.monotonic() + timeout
        while True:
            try:
                template = self._cluster.get_object(RESOURCE_CLAIM_TEMPLATE, namespace, name)
            except NotFoundError:
                if time.monotonic() > deadline:
                    raise PodPlacementError(
                        f"Pod {namespace}/{pod}: ResourceClaimTemplate {namespace}/{name} "
                        f"not found after {timeout:g} s (has the controller created it?)"
                    ) from None
                time.sleep(RETRY_INTERVAL_S)
                continue
            if (template.get("metadata") or {}).get("deletionTimestamp"):
                raise PodPlacementError(
                    f"Pod {namespace}/{pod}: ResourceClaimTemplate {namespace}/{name} is "
                    "being deleted"
                )
            return template

    # -- kube-scheduler ------------------------------------------------------------------

    def candidate_nodes(self, pod: Mapping[str, Any]) -> list[Node]:
        """The nodes the pod may run on, with their labels, in name order."""
        spec = pod["spec"]
        where = f"Pod {pod['metadata'].get('namespace', 'default')}/{pod['metadata']['name']}"
        wanted = spec.get("nodeSelector") or {}
        required = (
            ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
                "requiredDuringSchedulingIgnoredDuringExecution"
            )
        ) or None
        out = []
        for name in self._node_names():
            if spec.get("nodeName") and spec["nodeName"] != name:
                continue
            try:
                node_obj = self._cluster.get_object(NODE, None, name)
            except NotFoundError:
                continue
            if not _node_ready(node_obj):
                continue
            labels = dict((node_obj.get("metadata") or {}).get("labels") or {})
            labels.setdefault(HOSTNAME_LABEL, name)
            node = Node(name, labels)
            if any(labels.get(k) != v for k, v in wanted.items()):
                continue
            if required is not None and not selector_matches(node, required, where=where):
                continue
            out.append(node)
        return out

    def allocate(self, pod: Mapping[str, Any], claims: Sequence[Obj]) -> tuple[str, list[Obj]]:
        """Allocate the pod's unallocated claims together on the first node that fits them
        (claims allocated before pin the node); the node and the stored claims.
        AllocationError says why none fits.

        As kube-scheduler does, the choice is made under the scheduler's lock and
        *assumed* in its cache there; the claims' status is written after the lock is
        released (kube-scheduler binds asynchronously), so the next pod's choice does
        not wait for the store. A write that fails is forgotten again."""
        node_name, chosen = self._choose(pod, claims)
        out = []
        for index, (claim, assumed) in enumerate(chosen):
            if assumed is None:
                out.append(claim)
                continue
            try:
                out.append(self._cluster.update_resource_claim_status(assumed))
            except Exception:
                with self._allocate_lock:  # forget what was assumed and not written
                    for _, unwritten in chosen[index:]:
                        if unwritten is not None and self._state is not None:
                            self._state.remove(unwritten)
                raise
        return node_name, out

    def _choose(
        self, pod: Mapping[str, Any], claims: Sequence[Obj]
    ) -> tuple[str, list[tuple[Obj, Obj | None]]]:
        """The node and, per claim, the claim with the allocation assumed in the cache
        (None: allocated before)."""
        with self._allocate_lock:
            if self._state is None:  # what was allocated before this stand-in started
                self._state = AllocatedState(
                    c
                    for c in self._cluster.list_resource_claims()
                    if (c.get("status") or {}).get("allocation") is not None
                )
            state = self._state
            slices = self._cluster.list_resource_slices()
            classes = self._cluster.list_device_classes()
            # One allocator while the slices and classes stay the same, as kube-scheduler
            # keeps its compiled selectors: a new one per pod compiles the classes' CEL again.
            signature = tuple(
                (o["metadata"]["name"], o["metadata"].get("resourceVersion"))
                for o in (*slices, *classes)
            )
            if self._allocator is None or self._allocator[0] != signature:
                self._allocator = (
                    signature,
                    Allocator(slices, classes, allocated=state, features=self._features),
                )
            allocator = self._allocator[1]
            pending = [c for c in claims if not (c.get("status") or {}).get("allocation")]
            pinned = {n for c in claims if (n := _allocated_node(c)) is not None}
            nodes = [n for n in self.candidate_nodes(pod) if not pinned or n.name in pinned]
            if not nodes:
                raise AllocationError(
                    f"Pod {_pod_key(pod)}: no Ready node matches its nodeName, nodeSelector "
                    "and node affinity"
                )
            if not pending:
                return nodes[0].name, [(c, None) for c in claims]
            for node in nodes:
                results = allocator.allocate(node, pending)
                if results is None:
                    continue
                by_uid = {c["metadata"]["uid"]: r for c, r in zip(pending, results, strict=True)}
                meta = pod["metadata"]
                chosen: list[tuple[Obj, Obj | None]] = []
                for claim in claims:
                    result = by_uid.get(claim["metadata"]["uid"])
                    if result is None:
                        chosen.append((claim, None))
                        continue
                    assumed = copy.deepcopy(claim)
                    assumed["status"] = {
                        "allocation": result,
                        "reservedFor": [
                            {"resource": "pods", "name": meta["name"], "uid": meta["uid"]}
                        ],
                    }
                    state.add(assumed)
                    chosen.append((claim, assumed))
                return node.name, chosen
            raise AllocationError(
                f"Pod {_pod_key(pod)}: its claims fit on none of "
                f"{', '.join(n.name for n in nodes)} (devices published: "
                f"{_published_summary(self._cluster, [n.name for n in nodes])})"
            )

    # -- the kubelet ---------------------------------------------------------------------

    def run_pod(self, pod: Mapping[str, Any], *, timeout: float = 60.0) -> RunningPod:
        """Create, allocate and prepare the pod's claims; wait (retrying as the scheduler and
        the kubelet do) until every claim prepared. PodPlacementError after `timeout`."""
        began = time.monotonic()
        pod = _with_uid(pod)
        meta = pod["metadata"]
        namespace = meta.setdefault("namespace", "default")
        deadline = time.monotonic() + timeout
        claims = self.claims_for(pod, timeout=timeout)
        last = ""
        while True:
            try:
                node_name, claims = self.allocate(pod, claims)
                break
            except AllocationError as exc:
                last = str(exc)
            if time.monotonic() > deadline:
                raise PodPlacementError(
                    f"Pod {namespace}/{meta['name']} not scheduled after {timeout:g} s: {last}"
                )
            time.sleep(RETRY_INTERVAL_S)
            claims = [
                self._cluster.get_resource_claim(namespace, c["metadata"]["name"]) for c in claims
            ]
        scheduled_seconds = time.monotonic() - began
        access = self._require_node(node_name, pod)
        refs = [ClaimRef(namespace, c["metadata"]["uid"], c["metadata"]["name"]) for c in claims]
        drivers = {c["metadata"]["uid"]: _drivers(c) for c in claims}
        started = time.monotonic()
        attempts = 0
        errors: list[str] = []
        # (claim uid, driver) -> what that driver's plugin answered without error
        done: dict[tuple[str, str], PrepareResult] = {}
        while True:
            attempts += 1
            for driver in sorted({d for ds in drivers.values() for d in ds}):
                todo = [r for r in refs if driver in drivers[r.uid] and (r.uid, driver) not in done]
                if not todo:
                    continue
                try:
                    answers = access.client(driver).prepare(todo)
                except Exception as exc:  # grpc.RpcError: the plugin is down; kubelet retries
                    answers = {
                        r.uid: PrepareResult(error=f"{driver}: {type(exc).__name__}: {exc}")
                        for r in todo
                    }
                for ref in todo:
                    answer = answers.get(ref.uid, PrepareResult(error="no answer for the claim"))
                    if answer.error:
                        if not errors or errors[-1] != answer.error:
                            errors.append(answer.error)
                    else:
                        done[(ref.uid, driver)] = answer
            if all((r.uid, d) in done for r in refs for d in drivers[r.uid]):
                break
            if time.monotonic() > deadline:
                raise PodPlacementError(
                    f"Pod {namespace}/{meta['name']} on {node_name}: Prepare did not succeed "
                    f"after {attempts} attempts in {timeout:g} s; last error: {errors[-1]}"
                )
            time.sleep(RETRY_INTERVAL_S)
        results = {
            r.uid: PrepareResult(
                devices=tuple(
                    dev for d in sorted(drivers[r.uid]) for dev in done[(r.uid, d)].devices
                )
            )
            for r in refs
        }
        prepare_seconds = time.monotonic() - started
        pod_claims = tuple(PodClaim(c, results[c["metadata"]["uid"]]) for c in claims)
        ids = [i for pc in pod_claims for d in pc.result.devices for i in d.cdi_device_ids]
        running = RunningPod(
            namespace=namespace,
            name=meta["name"],
            uid=meta["uid"],
            node=node_name,
            claims=pod_claims,
            container=access.container_edits(ids),
            prepare_seconds=prepare_seconds,
            prepare_attempts=attempts,
            errors=tuple(errors),
            scheduled_seconds=scheduled_seconds,
        )
        self._running[running.key] = running
        return running

    def delete_pod(self, namespace: str, name: str, *, timeout: float = 30.0) -> dict[str, str]:
        """Unprepare the pod's claims on its node (retrying while the plugin errs), then delete
        them, as the kubelet and the resourceclaim controller do. Claim name -> last error
        ("" when unprepared). A node that is down keeps its claims prepared (nothing runs
        there to unprepare them); the claims are deleted all the same."""
        running = self._running.pop(f"{namespace}/{name}", None)
        if running is None:
            raise PodPlacementError(f"Pod {namespace}/{name} is not running")
        outcome = {pc.ref.name: "" for pc in running.claims}
        access = self._nodes(running.node)
        if access is not None:
            deadline = time.monotonic() + timeout
            for driver in sorted({d for pc in running.claims for d in _drivers(pc.claim)}):
                todo = [pc.ref for pc in running.claims if driver in _drivers(pc.claim)]
                while todo:
                    try:
                        answers = access.client(driver).unprepare(todo)
                        errs = {
                            r.uid: answers[r.uid].error if r.uid in answers else "no answer"
                            for r in todo
                        }
                    except Exception as exc:  # grpc.RpcError
                        errs = {r.uid: f"{type(exc).__name__}: {exc}" for r in todo}
                    for ref in todo:
                        outcome[ref.name] = errs[ref.uid]
                    todo = [r for r in todo if errs[r.uid]]
                    if not todo or time.monotonic() > deadline:
                        break
                    time.sleep(RETRY_INTERVAL_S)
        else:
            for ref in (pc.ref for pc in running.claims):
                outcome[ref.name] = f"node {running.node} is down: not unprepared"
        with self._allocate_lock:
            for pc in running.claims:
                self._cluster.delete_resource_claim(namespace, pc.ref.name)
                if self._state is not None:
                    self._state.remove(pc.claim)
                self._made.pop((running.uid, _pod_claim_name(pc.claim)), None)
        return outcome

    def forget_node(self, node: str) -> list[RunningPod]:
        """The pods of a lost node (they stay 'running' for the API until deleted)."""
        return [p for p in self._running.values() if p.node == node]

    def _require_node(self, name: str, pod: Mapping[str, Any]) -> NodeAccess:
        access = self._nodes(name)
        if access is None:
            raise PodPlacementError(f"Pod {_pod_key(pod)}: node {name} is down")
        return access


def _with_uid(pod: Mapping[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(dict(pod))
    out.setdefault("metadata", {}).setdefault("uid", str(uuid.uuid4()))
    out.setdefault("spec", {})
    return out


def _pod_key(pod: Mapping[str, Any]) -> str:
    meta = pod.get("metadata") or {}
    return f"{meta.get('namespace', 'default')}/{meta.get('name')}"


def _claim_from(template: Obj, pod: Mapping[str, Any], claim_name: str) -> Obj:
    """The ResourceClaim the resourceclaim controller makes for one pod claim."""
    meta = pod["metadata"]
    template_meta = (template.get("spec") or {}).get("metadata") or {}
    annotations = dict(template_meta.get("annotations") or {})
    annotations[POD_CLAIM_NAME_ANNOTATION] = claim_name
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {
            "namespace": meta["namespace"],
            "name": f"{meta['name']}-{claim_name}-{secrets.token_hex(3)[:5]}",
            "uid": str(uuid.uuid4()),
            "labels": dict(template_meta.get("labels") or {}),
            "annotations": annotations,
            "ownerReferences": [
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "name": meta["name"],
                    "uid": meta["uid"],
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": copy.deepcopy((template.get("spec") or {}).get("spec") or {}),
    }


def _pod_claim_name(claim: Mapping[str, Any]) -> str:
    annotations = (claim.get("metadata") or {}).get("annotations") or {}
    return str(annotations.get(POD_CLAIM_NAME_ANNOTATION, ""))


def _drivers(claim: Mapping[str, Any]) -> frozenset[str]:
    """The drivers of an allocated claim's devices: the plugins the kubelet calls for it."""
    allocation = (claim.get("status") or {}).get("allocation") or {}
    results = (allocation.get("devices") or {}).get("results") or []
    return frozenset(str(r["driver"]) for r in results)


def _allocated_node(claim: Mapping[str, Any]) -> str | None:
    """The node an allocated claim's nodeSelector names (matchFields metadata.name In)."""
    allocation = (claim.get("status") or {}).get("allocation") or {}
    for term in (allocation.get("nodeSelector") or {}).get("nodeSelectorTerms") or []:
        for req in term.get("matchFields") or []:
            if req.get("key") == "metadata.name" and req.get("values"):
                return str(req["values"][0])
    return None


def _node_ready(node: Mapping[str, Any]) -> bool:
    for condition in (node.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Ready":
            return bool(condition.get("status") == "True")
    return False


def _published_summary(cluster: LocalCluster, nodes: Iterable[str]) -> str:
    parts = []
    for node in nodes:
        devices = [
            d["name"]
            for s in cluster.list_resource_slices(driver=DRIVER_NAME, node_name=node)
            for d in s["spec"].get("devices") or []
        ]
        parts.append(f"{node}: {', '.join(devices) or 'none'}")
    return "; ".join(parts)
