"""The placement loop: pods in order, their claims allocated by the scheduler's allocator.

kube-scheduler places one pod at a time: it filters nodes (nodeName,
nodeSelector, required node affinity, and for claims that are already
allocated, the allocation's nodeSelector), asks the structured allocator
whether the pod's unallocated claims fit on a node, writes the allocation and
reserves the claims for the pod. `Simulation` does the same with
`dra_driver.scheduling.allocator.Allocator`, feeding every allocation back into the
`AllocatedState`, so later pods see what earlier pods took:

* a claim shared by several pods is allocated once, for the first of them;
  the others must land on a node its allocation's nodeSelector allows, and
  at most 256 pods may reserve it (`status.reservedFor` limit);
* claims that arrive with `status.allocation` are allocated already;
* a standalone claim no pod references is allocated on its own and reported
  as a pseudo-pod `claim:<namespace>/<name>` (unlike in a cluster, where it
  would wait for a pod);
* nodes are tried in the given order, first fit (the scheduler scores the
  nodes that fit instead; first fit is what makes a simulation predictable).

Nothing is ever freed during a simulation, so whether a claim set fits on a
node can only get worse as pods are placed. A pod whose claims have the same
specs and node restrictions as an earlier pod's therefore starts at the node
where that one landed, which makes placing thousands of replicas linear.

Pods that do not fit get a one-line reason from `Diagnoser`.

The scheduler does not know what the node's kubelet plugin accepts; the
simulation does. With `node_checks` (`NodeChecks`, the plugin's own claim
planning run against the node's devices and the claims already placed
there), a claim the scheduler allocated but the plugin would refuse at
Prepare (a misspelt opaque config, MPS on two GPUs, a time-slice interval
clashing with a claim already on a shared GPU, ...) leaves its pod not
placed, with the plugin's error. As in a cluster, the allocation stays (the
devices are taken) and the pod does not run: `Placement.refused_on` names
the node.

Rules neither the scheduler nor the slices know (one ComputeDomain per node,
18 nodes of a domain per clique: `compute_domains.DomainRules`) come in as
node checks too, and as `unfit_reasons`, which give the reason where they are
what stops a pod (`Simulation.diagnose`).

The engine is pure: inputs are dicts, nothing is read or written.
"""

from __future__ import annotations

import copy
import json
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal, Protocol

from dra_driver.errors import AllocationError, ConfigError
from dra_driver.kube.objects import Obj
from dra_driver.scheduling.allocator import AllocatedState, Allocator, Features, Node
from dra_driver.scheduling.allocator.nodes import selector_matches
from dra_driver.scheduling.whatif import hints
from dra_driver.scheduling.whatif.claims import PodClaim, claim_uid, resolve_pod_claims
from dra_driver.scheduling.whatif.diagnosis import Diagnoser, Diagnosis
from dra_driver.scheduling.whatif.extended import attach_extended_resource_claim, class_mapping
from dra_driver.scheduling.whatif.inputs import SimulationInputs
from dra_driver.scheduling.whatif.workloads import ExpandedPod, expand_workload

ClaimState = Literal["allocated", "pre-allocated", "shared", "unallocated"]

RESERVED_FOR_MAX_SIZE: Final = 256  # ResourceClaimReservedForMaxSize
PSEUDO_POD_PREFIX: Final = "claim:"
_SHARE_NAMESPACE: Final = uuid.UUID("0b6f3a0e-4c1d-4a8e-9f27-3d5c6e7a8b91")


@dataclass(frozen=True)
class WorkItem:
    """A pod to place, or a standalone claim that no pod uses (a pseudo-pod).

    `claims` are the pod's claims resolved to "ns/name" keys; `problem` says
    why the pod cannot be scheduled at all (a missing claim or template).
    """

    namespace: str
    name: str
    pod: Mapping[str, Any] | None
    owner: str = ""
    claims: tuple[PodClaim, ...] = ()
    problem: str = ""

    @property
    def key(self) -> str:
        if self.pod is None:
            return f"{PSEUDO_POD_PREFIX}{self.namespace}/{self.name}"
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True)
class ClaimOutcome:
    """One claim of a placed (or unplaced) item and its allocation, if any."""

    key: str
    pod_claim: str
    allocation: Mapping[str, Any] | None
    state: ClaimState


@dataclass
class Placement:
    """Where an item went: `node` ("" when not placed), its claims, or why not.

    `refused_on` names the node whose kubelet plugin would refuse to prepare
    a claim the scheduler allocated there (`reason` has the plugin's error).
    """

    item: WorkItem
    node: str
    claims: list[ClaimOutcome] = field(default_factory=list)
    reason: str = ""
    refused_on: str = ""

    @property
    def placed(self) -> bool:
        return bool(self.node)


@dataclass
class Workload:
    """Everything a simulation places: items in order and every claim by key."""

    items: list[WorkItem]
    claims: dict[str, Obj]


def build_workload(
    inputs: SimulationInputs,
    classes: Sequence[Mapping[str, Any]] = (),
    features: Features | None = None,
) -> Workload:
    """Pods (workloads expanded) and pseudo-pods in document order, claims from templates made.

    A standalone claim becomes a pseudo-pod at its place in the documents
    unless some pod references it by `resourceClaimName`. With
    `features.extended_resource`, a pod asking for an extended resource that
    one of `classes` maps gets the scheduler's special claim (see
    `dra_driver.scheduling.whatif.extended`) and its `status.extendedResourceClaimStatus`.
    """
    mapping = class_mapping(classes) if features is not None and features.extended_resource else {}
    claims: dict[str, Obj] = {}
    for (namespace, name), sourced in inputs.claims.items():
        claim = copy.deepcopy(dict(sourced.obj))
        meta = claim.setdefault("metadata", {})
        meta.setdefault("uid", claim_uid(namespace, name))
        claims[f"{namespace}/{name}"] = claim
    expanded: list[list[ExpandedPod]] = []
    referenced: set[str] = set()
    pod_names: dict[str, str] = {}
    for sourced in inputs.items:
        kind = sourced.obj.get("kind")
        if kind == "ResourceClaim":
            expanded.append([])
            continue
        pods = expand_workload(sourced.obj, sourced.source)
        for pod in pods:
            meta = pod.pod["metadata"]
            key = f"{meta['namespace']}/{meta['name']}"
            first = pod_names.get(key)
            if first is not None:
                raise ConfigError(
                    f"{sourced.source}: pod {key} would also be created by {first}; "
                    "rename one of them"
                )
            pod_names[key] = sourced.source
            for entry in pod.pod.get("spec", {}).get("resourceClaims") or []:
                if isinstance(entry, dict) and entry.get("resourceClaimName"):
                    referenced.add(f"{meta['namespace']}/{entry['resourceClaimName']}")
        expanded.append(pods)
    templates = {key: sourced.obj for key, sourced in inputs.templates.items()}
    items: list[WorkItem] = []
    for sourced, pods in zip(inputs.items, expanded, strict=True):
        if sourced.obj.get("kind") == "ResourceClaim":
            meta = sourced.obj["metadata"]
            key = f"{meta['namespace']}/{meta['name']}"
            if key not in referenced:
                items.append(WorkItem(str(meta["namespace"]), str(meta["name"]), None))
            continue
        for pod in pods:
            meta = pod.pod["metadata"]
            pod_claims, problem = resolve_pod_claims(pod.pod, claims, templates)
            pod_obj = pod.pod
            if not problem:
                pod_obj, problem = attach_extended_resource_claim(
                    pod.pod, mapping, claims, pod_claims
                )
            items.append(
                WorkItem(
                    str(meta["namespace"]),
                    str(meta["name"]),
                    pod_obj,
                    pod.owner,
                    tuple(pod_claims),
                    problem,
                )
            )
    return Workload(items, claims)


class NodeChecks(Protocol):
    """What a node's kubelet plugin says about a claim allocated for it, at Prepare."""

    def refusal(self, node: str, claim: Mapping[str, Any], *, commit: bool = True) -> str | None:
        """Why the plugin on `node` would refuse to prepare `claim` (which carries its
        allocation), or None. With `commit`, an accepted claim counts as prepared on the
        node from then on (later claims are checked against it)."""
        ...

    def withdrawn(self, node: str) -> set[tuple[str, str, str]]:
        """(driver, pool, device) of what `node`'s plugin no longer publishes because of
        the claims prepared there (the other forms of a passed-through GPU)."""
        ...


class UnfitReasons(Protocol):
    """A better reason than the device accounting's, where a rule outside the slices decides
    (`dra_driver.scheduling.whatif.compute_domains`)."""

    def why_unfit(self, claims: Sequence[Obj], nodes: Sequence[Node]) -> str | None:
        """Why `claims` fit on none of `nodes`, or None to keep the diagnosis' summary."""
        ...


class ChainedChecks:
    """Several `NodeChecks` in turn: the first refusal wins (each looks at its own driver's
    devices, so a claim is committed by those that accept it)."""

    def __init__(self, checks: Sequence[NodeChecks]) -> None:
        self._checks = list(checks)

    def refusal(self, node: str, claim: Mapping[str, Any], *, commit: bool = True) -> str | None:
        for check in self._checks:
            error = check.refusal(node, claim, commit=commit)
            if error is not None:
                return error
        return None

    def withdrawn(self, node: str) -> set[tuple[str, str, str]]:
        found: set[tuple[str, str, str]] = set()
        for check in self._checks:
            found |= check.withdrawn(node)
        return found


def refusal_text(node: str, error: str) -> str:
    """A pod's reason when the plugin of the node it was allocated on refuses a claim."""
    return f"allocated on {node}, but the node's kubelet plugin refuses to prepare it: {error}"


class Simulation:
    """Places work items one after another (see the module docstring)."""

    def __init__(
        self,
        *,
        slices: Sequence[Mapping[str, Any]],
        classes: Sequence[Mapping[str, Any]],
        nodes: Sequence[Node],
        claims: Mapping[str, Obj],
        features: Features | None = None,
        node_checks: NodeChecks | None = None,
        unfit_reasons: UnfitReasons | None = None,
    ) -> None:
        self.features = features or Features()
        self.node_checks = node_checks
        self.unfit_reasons = unfit_reasons
        self._refused: dict[str, tuple[str, str]] = {}  # claim key -> (node, plugin error)
        self.nodes = list(nodes)
        self.claims: dict[str, Obj] = dict(claims)
        self.state = AllocatedState(
            claim for claim in self.claims.values() if _allocation(claim) is not None
        )
        self._pre_allocated = {key for key, claim in self.claims.items() if _allocation(claim)}
        self._shares = 0
        self.allocator = Allocator(
            slices,
            classes,
            features=self.features,
            allocated=self.state,
            share_id_factory=self._share_id,
        )
        self.diagnoser = Diagnoser(self.allocator, classes, self.state, self.features)
        self.diagnoser.attribute_names = hints.attribute_names(slices)
        self.reservations: Counter[str] = Counter(
            {
                key: len((claim.get("status") or {}).get("reservedFor") or [])
                for key, claim in self.claims.items()
            }
        )
        self._cursor: dict[str, int] = {}
        self._reasons: dict[tuple[str, int], str] = {}

    def _share_id(self) -> str:
        self._shares += 1
        return str(uuid.uuid5(_SHARE_NAMESPACE, f"share-{self._shares}"))

    def run(
        self,
        items: Iterable[WorkItem],
        *,
        progress: Callable[[int], None] | None = None,
        stop_before: Callable[[WorkItem], bool] | None = None,
    ) -> list[Placement]:
        """Place `items` in order; `stop_before(item)` ends the run before that item."""
        placements: list[Placement] = []
        for item in items:
            if stop_before is not None and stop_before(item):
                break
            placements.append(self.place(item))
            if progress is not None:
                progress(len(placements))
        return placements

    # ------------------------------------------------------------ one item

    def place(self, item: WorkItem) -> Placement:
        """Place one item, updating the allocated state."""
        keys = self.claim_keys(item)
        if item.problem:
            return Placement(item, "", self._outcomes(item, keys), item.problem)
        for key in keys:
            if item.pod is not None and self.reservations[key] >= RESERVED_FOR_MAX_SIZE:
                return Placement(
                    item,
                    "",
                    self._outcomes(item, keys),
                    f"ResourceClaim {key} is already reserved for {RESERVED_FOR_MAX_SIZE} pods "
                    "(the limit of status.reservedFor)",
                )
        refused = self._refusal(item, keys)
        if refused is not None:
            return refused
        if item.pod is None and _allocation(self.claims[keys[0]]) is not None:
            node = self._allocated_node(self.claims[keys[0]])
            return Placement(item, node, self._outcomes(item, keys))
        candidates, reason = self.candidate_nodes(item)
        if not candidates:
            return Placement(item, "", self._outcomes(item, keys), reason)
        pending = [key for key in keys if _allocation(self.claims[key]) is None]
        if not pending:
            return self._placed(item, keys, candidates[0].name)
        claims = [self.claims[key] for key in pending]
        signature = _signature(claims, candidates, self.nodes)
        start = self._cursor.get(signature, 0)
        try:
            found = self.allocator.first_fit(candidates[start:], claims)
        except AllocationError as exc:
            reason = hints.did_you_mean(str(exc), self.diagnoser.attribute_names)
            return Placement(item, "", self._outcomes(item, keys), reason)
        if found is None:
            self._cursor[signature] = len(candidates)
            reason = self._why(item, claims, candidates, signature)
            return Placement(item, "", self._outcomes(item, keys), reason)
        chosen, results = found
        self._cursor[signature] = start + next(
            index for index, candidate in enumerate(candidates[start:]) if candidate is chosen
        )
        for key, allocation in zip(pending, results, strict=True):
            claim = dict(self.claims[key])
            claim["status"] = {**(claim.get("status") or {}), "allocation": allocation}
            self.claims[key] = claim
            self.state.add(claim)
        if self.node_checks is not None:
            for key in pending:
                error = self.node_checks.refusal(chosen.name, self.claims[key])
                if error is not None:
                    self._refused[key] = (chosen.name, error)
            refused = self._refusal(item, keys, newly=set(pending))
            if refused is not None:
                return refused
            for device in sorted(self.node_checks.withdrawn(chosen.name)):
                self.state.withhold(device, pending[0])
        return self._placed(item, keys, chosen.name, newly=set(pending))

    def _refusal(
        self, item: WorkItem, keys: Sequence[str], newly: set[str] | None = None
    ) -> Placement | None:
        """The placement of an item one of whose claims the node's plugin refused."""
        for key in keys:
            found = self._refused.get(key)
            if found is not None:
                node, error = found
                outcomes = self._outcomes(item, keys, newly)
                return Placement(item, "", outcomes, refusal_text(node, error), refused_on=node)
        return None

    def refused(self, key: str) -> tuple[str, str] | None:
        """(node, the plugin's error) when the node refused to prepare claim "ns/name"."""
        return self._refused.get(key)

    def claim_keys(self, item: WorkItem) -> list[str]:
        """The item's claims, each once, in pod order."""
        if item.pod is None:
            return [f"{item.namespace}/{item.name}"]
        return list(dict.fromkeys(claim.claim for claim in item.claims))

    def candidate_nodes(self, item: WorkItem) -> tuple[list[Node], str]:
        """Nodes the pod may go to, or none and which restriction excluded them all."""
        nodes = self.nodes
        if not nodes:
            return [], "no nodes to place on (give --nodes or ResourceSlices/Nodes)"
        pod = item.pod
        if pod is not None:
            spec = pod.get("spec") or {}
            node_name = spec.get("nodeName")
            if node_name:
                nodes = [node for node in nodes if node.name == node_name]
                if not nodes:
                    return [], f"spec.nodeName {node_name} is not one of the simulated nodes"
            selector = spec.get("nodeSelector") or {}
            if selector:
                nodes = [
                    node
                    for node in nodes
                    if all(node.labels.get(str(k)) == str(v) for k, v in selector.items())
                ]
                if not nodes:
                    wanted = ", ".join(f"{k}={v}" for k, v in selector.items())
                    return [], f"no node has the labels of spec.nodeSelector ({wanted})"
            required = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
                "requiredDuringSchedulingIgnoredDuringExecution"
            )
            if required:
                where = f"Pod {item.key}: spec.affinity.nodeAffinity"
                nodes = [node for node in nodes if selector_matches(node, required, where=where)]
                if not nodes:
                    return [], "no node matches the pod's required node affinity"
        for key in self.claim_keys(item):
            allocation = _allocation(self.claims[key])
            selector = (allocation or {}).get("nodeSelector")
            if not selector:
                continue
            where = f"ResourceClaim {key}: status.allocation.nodeSelector"
            nodes = [node for node in nodes if selector_matches(node, selector, where=where)]
            if not nodes:
                node = self._allocated_node(self.claims[key]) or "no simulated node"
                return [], f"ResourceClaim {key} is allocated on {node}, where the pod may not go"
        return nodes, ""

    def _placed(
        self, item: WorkItem, keys: Sequence[str], node: str, newly: set[str] | None = None
    ) -> Placement:
        if item.pod is not None:
            for key in keys:
                self.reservations[key] += 1
        return Placement(item, node, self._outcomes(item, keys, newly or set()))

    def _outcomes(
        self, item: WorkItem, keys: Sequence[str], newly: set[str] | None = None
    ) -> list[ClaimOutcome]:
        names = {claim.claim: claim.name for claim in item.claims}
        outcomes: list[ClaimOutcome] = []
        for key in keys:
            allocation = _allocation(self.claims[key])
            state: ClaimState
            if allocation is None:
                state = "unallocated"
            elif newly is not None and key in newly:
                state = "allocated"
            elif key in self._pre_allocated:
                state = "pre-allocated"
            else:
                state = "shared"
            outcomes.append(ClaimOutcome(key, names.get(key, ""), allocation, state))
        return outcomes

    def is_allocated(self, key: str) -> bool:
        """Whether the claim "ns/name" has an allocation (given or made here)."""
        return _allocation(self.claims[key]) is not None

    def allocated_node(self, key: str) -> str:
        """The node the allocation of claim "ns/name" is bound to ("" if none)."""
        return self._allocated_node(self.claims[key])

    def _allocated_node(self, claim: Mapping[str, Any]) -> str:
        """The node an allocation is bound to, or the first simulated node it allows."""
        selector = (_allocation(claim) or {}).get("nodeSelector")
        if not selector:
            return self.nodes[0].name if self.nodes else ""
        for term in selector.get("nodeSelectorTerms") or []:
            for requirement in term.get("matchFields") or []:
                values = requirement.get("values") or []
                if (
                    requirement.get("key") == "metadata.name"
                    and requirement.get("operator") == "In"
                    and len(values) == 1
                ):
                    return str(values[0])
        where = "ResourceClaim status.allocation.nodeSelector"
        for node in self.nodes:
            if selector_matches(node, selector, where=where):
                return node.name
        return ""

    def _why(
        self, item: WorkItem, claims: Sequence[Obj], candidates: Sequence[Node], signature: str
    ) -> str:
        """The one-line reason, computed once per claim specs, nodes and state."""
        key = (signature + json.dumps(sorted(_labels(item).values())), self.state.version)
        cached = self._reasons.get(key)
        if cached is None:
            cached = self.diagnose(
                claims, candidates, labels=_labels(item), known_unfit=True
            ).summary
            self._reasons[key] = cached
        return cached

    def diagnose(
        self,
        claims: Sequence[Obj],
        nodes: Sequence[Node],
        *,
        labels: Mapping[str, str] | None = None,
        known_unfit: bool = False,
    ) -> Diagnosis:
        """The diagnoser's view of `claims` on `nodes`; where nothing fits, the summary is
        `unfit_reasons`' when it has one (a rule the device accounting cannot see)."""
        diagnosis = self.diagnoser.diagnose(claims, nodes, labels=labels, known_unfit=known_unfit)
        if self.unfit_reasons is not None and not diagnosis.error and not diagnosis.fitting:
            better = self.unfit_reasons.why_unfit(claims, nodes)
            if better:
                diagnosis.summary = better
        return diagnosis


def _labels(item: WorkItem) -> dict[str, str]:
    return {claim.claim: claim.name for claim in item.claims}


def _allocation(claim: Mapping[str, Any]) -> Mapping[str, Any] | None:
    allocation = (claim.get("status") or {}).get("allocation")
    return allocation if allocation else None


def _signature(
    claims: Sequence[Mapping[str, Any]], nodes: Sequence[Node], all_nodes: Sequence[Node]
) -> str:
    """What decides whether claims fit on nodes: their specs and the nodes' names.

    Pods without node restrictions get the list of all nodes itself, named "*"
    here so a placement does not serialise every node name.
    """
    specs = [claim.get("spec") or {} for claim in claims]
    names = "*" if nodes is all_nodes else [node.name for node in nodes]
    return json.dumps([specs, names], sort_keys=True, default=str)
