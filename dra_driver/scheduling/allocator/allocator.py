"""The allocator's entry point: kube-scheduler's structured DRA allocation, in Python.

`Allocator` is built once from the cluster's ResourceSlices and DeviceClasses
plus the allocation state (devices already held by other claims) and then
answers, per node, "do these claims fit here, and with which devices?" by
returning the `status.allocation` the scheduler would write, `None` when the
claims don't fit, or raising AllocationError for problems no node can fix.
It is pure: no API calls, no files; a simulator can place claims one after
another by feeding each result back with `AllocatedState.add`.
"""

from __future__ import annotations

import sys
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from dra_driver.errors import AllocationError
from dra_driver.kube.objects import AllocationResult
from dra_driver.scheduling.allocator.counters import Availability, availability
from dra_driver.scheduling.allocator.features import Features
from dra_driver.scheduling.allocator.nodes import Node
from dra_driver.scheduling.allocator.pools import Candidate, CounterDomain, NodePools, SliceIndex
from dra_driver.scheduling.allocator.requests import ALL, ClaimPlan, RequestData, plan_claims
from dra_driver.scheduling.allocator.results import allocation_result
from dra_driver.scheduling.allocator.search import Search
from dra_driver.scheduling.allocator.selectors import (
    CelSelectorEvaluator,
    SelectorEvaluator,
    SelectorMemo,
)
from dra_driver.scheduling.allocator.state import AllocatedState
from dra_driver.scheduling.allocator.trace import AllocationFinished, Tracer


class InvalidPoolsError(AllocationError):
    """Nothing fit on this node and some of its pools are invalid.

    Upstream reports this as a per-node failure: other nodes may still work,
    and the message only matters if every node fails.
    """


def _ensure_recursion_depth(plans: Sequence[ClaimPlan]) -> None:
    """The search recurses once per picked device (at most 32 per claim) and request."""
    depth = 100 + sum(40 + 2 * len(plan.requests) for plan in plans)
    if depth > sys.getrecursionlimit():
        sys.setrecursionlimit(depth)


def _uses_all_mode(claims: Sequence[Mapping[str, Any]]) -> bool:
    for claim in claims:
        for request in ((claim.get("spec") or {}).get("devices") or {}).get("requests") or []:
            alternatives = request.get("firstAvailable") or [request.get("exactly") or {}]
            if any(alternative.get("allocationMode") == ALL for alternative in alternatives):
                return True
    return False


def _no_all_requests(plan: ClaimPlan, request: RequestData) -> list[Candidate]:
    """Stand-in for the per-node device list, for claims checked to have no All request."""
    raise AllocationError(
        f"claim {plan.key}, request {request.name}: allocationMode All needs a node"
    )


def _new_share_id() -> str:
    return str(uuid.uuid4())


class Allocator:
    """Structured-parameters allocation over a fixed set of slices and classes."""

    def __init__(
        self,
        slices: Sequence[Mapping[str, Any]],
        classes: Sequence[Mapping[str, Any]],
        *,
        features: Features | None = None,
        allocated: AllocatedState | None = None,
        evaluate: SelectorEvaluator | None = None,
        share_id_factory: Callable[[], str] | None = None,
    ) -> None:
        """`evaluate(expression, device_view) -> bool` defaults to `dra_driver.scheduling.cel`;
        `share_id_factory` (default: random UUIDs) names shares of multi-allocatable
        devices, injectable for reproducible results."""
        self.features = features or Features()
        self.allocated = allocated if allocated is not None else AllocatedState()
        self._index = SliceIndex(slices, self.features)
        self._classes: dict[str, Mapping[str, Any]] = {}
        for device_class in classes:
            name = (device_class.get("metadata") or {}).get("name")
            if not name:
                raise AllocationError("DeviceClass without metadata.name")
            self._classes[name] = device_class
        self._memo = SelectorMemo(
            evaluate
            if evaluate is not None
            else CelSelectorEvaluator(
                consumable_capacity=self.features.consumable_capacity,
                release=self.features.release,
            )
        )
        self._share_id = share_id_factory or _new_share_id
        self._node_pools: dict[str, tuple[dict[str, str], NodePools]] = {}
        self._availability: dict[int, tuple[int, CounterDomain, Availability]] = {}
        # The plans of the claims of the last `allocate` call that did not fit, for a
        # caller trying the same claims on node after node. Keyed by the claim
        # objects themselves (claim specs are immutable in Kubernetes).
        self._last_plans: tuple[tuple[Mapping[str, Any], ...], list[ClaimPlan]] | None = None

    def pools_for(self, node: Node) -> NodePools:
        """The pools and candidate devices of a node, gathered once and cached."""
        cached = self._node_pools.get(node.name)
        if cached is not None and cached[0] == node.labels:
            return cached[1]
        pools = self._index.gather(node)
        self._node_pools[node.name] = (dict(node.labels), pools)
        return pools

    def allocate(
        self,
        node: Node,
        claims: Sequence[Mapping[str, Any]],
        *,
        tracer: Tracer | None = None,
    ) -> list[AllocationResult] | None:
        """Allocate all `claims` together on `node`.

        Returns one AllocationResult dict per claim (in claim order), or None if
        they do not fit on this node. Raises AllocationError for fatal problems
        (missing DeviceClass, bad CEL, disabled features, too many devices, All
        on an incomplete pool) and InvalidPoolsError when nothing fit and some of
        the node's pools are invalid.
        """
        last, self._last_plans = self._last_plans, None
        try:
            plans = self._plans_for(claims, last)
        except AllocationError as exc:
            if tracer is not None:
                tracer(AllocationFinished(node.name, False, str(exc)))
            raise
        results = self._attempt(node, claims, plans, tracer)
        if results is None and plans is not None:
            # A failed search leaves the plans as it found them: reusable.
            self._last_plans = (tuple(claims), plans)
        return results

    def _plans_for(
        self,
        claims: Sequence[Mapping[str, Any]],
        last: tuple[tuple[Mapping[str, Any], ...], list[ClaimPlan]] | None,
    ) -> list[ClaimPlan] | None:
        """Plans usable on any node (reusing the last ones for the same claims), or None
        when the claims have All requests, whose device lists depend on the node."""
        if (
            last is not None
            and len(last[0]) == len(claims)
            and all(a is b for a, b in zip(last[0], claims, strict=True))
        ):
            return last[1]
        if _uses_all_mode(claims):
            return None
        return plan_claims(claims, self._classes, self.features, _no_all_requests)

    def first_fit(
        self,
        nodes: Iterable[Node],
        claims: Sequence[Mapping[str, Any]],
        *,
        tracer: Tracer | None = None,
    ) -> tuple[Node, list[AllocationResult]] | None:
        """The first node (in the given order) where `allocate` succeeds, with its results.

        Cheaper than calling `allocate` per node: the claims are validated once
        (unless they use allocationMode All, whose device list is per node). An
        InvalidPoolsError of one node only surfaces if no node fits, as in the
        scheduler.
        """
        plans = self._plans_for(claims, None)
        invalid: InvalidPoolsError | None = None
        for node in nodes:
            try:
                results = self._attempt(node, claims, plans, tracer)
            except InvalidPoolsError as exc:
                invalid = invalid or exc
                continue
            if results is not None:
                return node, results
        if invalid is not None:
            raise invalid
        return None

    def _attempt(
        self,
        node: Node,
        claims: Sequence[Mapping[str, Any]],
        plans: list[ClaimPlan] | None,
        tracer: Tracer | None,
    ) -> list[AllocationResult] | None:
        try:
            results = self._allocate(node, claims, plans, tracer)
        except AllocationError as exc:
            if tracer is not None:
                tracer(AllocationFinished(node.name, False, str(exc)))
            raise
        if tracer is not None:
            tracer(AllocationFinished(node.name, results is not None))
        return results

    def _allocate(
        self,
        node: Node,
        claims: Sequence[Mapping[str, Any]],
        plans: list[ClaimPlan] | None,
        tracer: Tracer | None,
    ) -> list[AllocationResult] | None:
        pools = self.pools_for(node)
        search = Search(
            self.features,
            self.allocated,
            pools,
            memo=self._memo,
            availability=self._domain,
            tracer=tracer,
        )
        search.trace_pools()
        if plans is None:
            plans = plan_claims(claims, self._classes, self.features, search.all_devices)
        if not search.hopeless(plans):
            _ensure_recursion_depth(plans)
            found = search.run(plans)
        else:
            found = False
        if not found:
            invalid = pools.invalid_pools
            if invalid and self.features.release != "1.34":
                details = "; ".join(f"{pool}: {pool.invalid_reason}" for pool in invalid)
                raise InvalidPoolsError(
                    f"node {node.name}: invalid resource pools were encountered ({details})"
                )
            return None
        return [
            allocation_result(
                plan,
                picked,
                node.name,
                binding_conditions=self.features.device_binding_conditions,
                consumable_capacity=self.features.consumable_capacity,
                share_id=self._share_id,
            )
            for plan, picked in zip(plans, search.picked, strict=True)
        ]

    def _domain(self, domain: CounterDomain) -> Availability:
        cached = self._availability.get(id(domain))
        version = self.allocated.version
        if cached is not None and cached[0] == version and cached[1] is domain:
            return cached[2]
        result = availability(domain, self.allocated)
        self._availability[id(domain)] = (version, domain, result)
        return result
