"""The depth-first search of the structured allocator, with backtracking.

Order: claims in order, their requests in order, the device slots of a
request in order; a firstAvailable request tries its subrequests in order.
For one slot, candidate devices are tried in search order (pools sorted, slices
in input order, devices in slice order); a device that passes the checks is
taken and the search recurses, and if nothing after it works it is given back
and the next candidate is tried. The first complete solution wins. Like
upstream since the "combinations" optimisation, the slots of one request only
consider devices after the previous slot's device, so equal sets of devices
are not tried in every order.

Checks per candidate, in upstream's order: already in use; class and request
selectors (cached); consumable capacity; partitionable gate; shared counters;
taints; claim constraints. Every rejection is reported to the tracer, if any.
"""

from __future__ import annotations

from collections.abc import Callable
from fractions import Fraction
from typing import Final

from dra_driver.errors import AllocationError, CelError
from dra_driver.scheduling.allocator.capacity import check_capacity, consumed_capacity
from dra_driver.scheduling.allocator.counters import Availability, CounterLedger
from dra_driver.scheduling.allocator.features import ALLOCATION_RESULTS_MAX_SIZE, Features
from dra_driver.scheduling.allocator.pools import (
    Candidate,
    CounterDomain,
    DeviceID,
    NodePools,
    device_id_str,
)
from dra_driver.scheduling.allocator.requests import ALL, ClaimPlan, RequestData
from dra_driver.scheduling.allocator.results import PickedDevice
from dra_driver.scheduling.allocator.selectors import SelectorMemo
from dra_driver.scheduling.allocator.state import AllocatedState
from dra_driver.scheduling.allocator.taints import untolerated_taint
from dra_driver.scheduling.allocator.trace import (
    AlreadyAllocated,
    BindingConditionsUnsupported,
    ClassSelectorFalse,
    DeviceChosen,
    DeviceRef,
    DeviceRejected,
    DeviceReleased,
    PartitionableDisabled,
    PickedInThisAttempt,
    PoolIncomplete,
    PoolInvalid,
    PoolSkipped,
    Reason,
    RequestNote,
    RequestSelectorFalse,
    SelectorError,
    Tracer,
    UntoleratedTaint,
)

FAIL: Final = 0
DONE: Final = 1
LIMIT: Final = 2  # upstream errAllocationResultMaxSizeExceeded
UNCHOSEN: Final = -1  # subrequest index before a firstAvailable request picked one

_ZERO = Fraction(0)


class _Undo:
    """What `_take` changed for one device, so backtracking can revert it."""

    __slots__ = ("constraints", "counters", "marked", "shared")

    def __init__(self) -> None:
        self.counters = False
        self.constraints = 0
        self.marked = False
        self.shared: dict[str, Fraction] | None = None


class Search:
    """One `allocate` call: the mutable state of an attempt plus the recursion."""

    def __init__(
        self,
        features: Features,
        state: AllocatedState,
        pools: NodePools,
        *,
        memo: SelectorMemo,
        availability: Callable[[CounterDomain], Availability],
        tracer: Tracer | None,
    ) -> None:
        self.features = features
        self.state = state
        self.pools = pools
        self.memo = memo
        self.tracer = tracer
        self.plans: list[ClaimPlan] = []
        self.picked: list[list[PickedDevice]] = []
        self.undo: list[list[_Undo]] = []
        # device -> [(claim index, request name)] picked in this attempt (non-shared)
        self.allocating: dict[DeviceID, list[tuple[int, str]]] = {}
        # multi-allocatable devices: capacity consumed and number of shares in this attempt
        self.allocating_capacity: dict[DeviceID, dict[str, Fraction]] = {}
        self.allocating_shares: dict[DeviceID, int] = {}
        self.ledger = CounterLedger(availability)
        self._selectable: dict[tuple[RequestData, Candidate], Reason | None] = {}

    # ------------------------------------------------------------ preparation

    def trace_pools(self) -> None:
        """Report the pools the search will not use ([1.35]; 1.34 uses incomplete
        pools and fails with an error when it reaches an invalid one)."""
        if self.tracer is None or self.features.release == "1.34":
            return
        for pool in self.pools.pools:
            if pool.incomplete:
                self.tracer(PoolSkipped(str(pool), PoolIncomplete()))
            elif pool.invalid:
                self.tracer(PoolSkipped(str(pool), PoolInvalid(pool.invalid_reason)))

    def all_devices(self, plan: ClaimPlan, request: RequestData) -> list[Candidate]:
        """The fixed device list of an `All` request (upstream validateDeviceRequest)."""
        for pool in self.pools.pools:
            if pool.incomplete:
                raise AllocationError(
                    f"claim {plan.key}, request {request.name}: asks for all devices, but "
                    f"resource pool {pool} is currently being updated"
                )
            if pool.invalid:
                raise AllocationError(
                    f"claim {plan.key}, request {request.name}: asks for all devices, but "
                    f"resource pool {pool} is currently invalid"
                )
        devices: list[Candidate] = []
        for candidate in self.pools.candidates:
            reason = self.selectable(plan, request, candidate)
            if reason is None and self.features.consumable_capacity:
                device = candidate.device
                reason = check_capacity(
                    device,
                    request.capacity,
                    self.state.consumed_capacity.get(device.id),
                    None,
                )
            if reason is None:
                devices.append(candidate)
            elif self.tracer is not None:
                self._reject(plan, request, 0, candidate, reason)
        return devices

    def hopeless(self, plans: list[ClaimPlan]) -> bool:
        """True if the search cannot find anything and would not evaluate a selector.

        When every candidate device is held by other claims and no request has
        admin access, the search skips each device on the in-use check before
        any selector runs, so it can only fail. Skipping it keeps full nodes
        cheap for a simulator that tries many nodes. Not used when tracing (the
        explanation lists every device) or with shared devices.
        """
        if self.tracer is not None or self.features.consumable_capacity:
            return False
        if self.features.release == "1.34" and self.pools.invalid_pools:
            return False  # the search must get the chance to report the invalid pool
        needs_devices = False
        for plan in plans:
            for alternatives in plan.requests:
                for request in alternatives:
                    if request.admin:
                        return False
                    needs_devices = needs_devices or request.num_devices > 0
        if not needs_devices:
            return False
        dedicated = self.state.dedicated
        shared = self.state.shared
        for candidate in self.pools.candidates:
            device_id = candidate.device.id
            if device_id not in dedicated and device_id not in shared:
                return False
        return True

    # ------------------------------------------------------------ recursion

    def run(self, plans: list[ClaimPlan]) -> bool:
        self.plans = plans
        self.picked = [[] for _ in plans]
        self.undo = [[] for _ in plans]
        return self._one(0, 0, UNCHOSEN, 0, 0) == DONE

    def _one(self, ci: int, ri: int, si: int, di: int, start: int) -> int:
        """Find a device for slot `di` of claim `ci`, request `ri`, alternative `si`
        (UNCHOSEN: not yet decided which subrequest), considering candidates from
        `start` on; then recurse. Returns DONE, FAIL or LIMIT."""
        if ci >= len(self.plans):
            return DONE
        plan = self.plans[ci]
        if ri >= len(plan.requests):
            outcome = self._one(ci + 1, 0, UNCHOSEN, 0, 0)
            return FAIL if outcome == LIMIT else outcome
        alternatives = plan.requests[ri]
        if si == UNCHOSEN:
            if not plan.has_subrequests[ri]:
                return self._one(ci, ri, 0, di, start)
            all_exceeded = True
            for sub_index in range(len(alternatives)):
                outcome = self._one(ci, ri, sub_index, 0, 0)
                if outcome == LIMIT:
                    self._note(
                        plan,
                        alternatives[sub_index],
                        "would exceed the limit of "
                        f"{ALLOCATION_RESULTS_MAX_SIZE} results per claim",
                    )
                    continue
                all_exceeded = False
                if outcome == DONE:
                    plan.selected[ri] = sub_index
                    return DONE
                if sub_index + 1 < len(alternatives):
                    self._note(
                        plan,
                        alternatives[sub_index],
                        "could not be satisfied, trying the next subrequest",
                    )
            return LIMIT if all_exceeded else FAIL
        request = alternatives[si]
        if request.mode == ALL and not request.all_devices:
            self._note(plan, request, "allocationMode All: no matching device")
            return FAIL
        if di >= request.num_devices:
            return self._one(ci, ri + 1, UNCHOSEN, 0, 0)
        if len(self.picked[ci]) + request.num_devices - di > ALLOCATION_RESULTS_MAX_SIZE:
            return LIMIT
        if request.mode == ALL:
            candidate = request.all_devices[di]
            if not self._take(ci, request, di, candidate, must=True):
                return FAIL
            outcome = self._one(ci, ri, si, di + 1, 0)
            if outcome != DONE:
                self._release(ci, request, di)
            return outcome
        candidates = self.pools.candidates
        release_34 = self.features.release == "1.34"
        consumable = self.features.consumable_capacity
        admin = request.admin
        # `_in_use`, inlined: this loop is the allocator's hot path.
        dedicated = self.state.dedicated
        shared = None if consumable else self.state.shared
        allocating = self.allocating
        for position in range(start, len(candidates)):
            candidate = candidates[position]
            pool = candidate.pool
            if release_34 and pool.invalid:
                raise AllocationError(f"pool {pool.name} is invalid: {pool.invalid_reason}")
            device = candidate.device
            device_id = device.id
            if admin:
                if self._picked_by_claim(device_id, ci):
                    if self.tracer is not None:
                        self._reject(plan, request, di, candidate, self._in_use_reason(device_id))
                    continue
            elif (
                device_id in dedicated
                or (shared is not None and device_id in shared)
                or allocating.get(device_id)
            ):
                if self.tracer is not None:
                    self._reject(plan, request, di, candidate, self._in_use_reason(device.id))
                continue
            reason = self.selectable(plan, request, candidate)
            if reason is not None:
                if self.tracer is not None:
                    self._reject(plan, request, di, candidate, reason)
                continue
            if consumable:
                reason = check_capacity(
                    device,
                    request.capacity,
                    self.state.consumed_capacity.get(device.id),
                    self.allocating_capacity.get(device.id),
                )
                if reason is not None:
                    if self.tracer is not None:
                        self._reject(plan, request, di, candidate, reason)
                    continue
            if not self._take(ci, request, di, candidate, must=False):
                continue
            outcome = self._one(ci, ri, si, di + 1, position + 1)
            if outcome == DONE:
                return DONE
            self._release(ci, request, di)
            if outcome == LIMIT:
                return LIMIT
        return FAIL

    # ------------------------------------------------------------ checks

    def _in_use(self, device_id: DeviceID) -> bool:
        state = self.state
        if device_id in state.dedicated:
            return True
        if not self.features.consumable_capacity and device_id in state.shared:
            return True
        return bool(self.allocating.get(device_id))

    def _picked_by_claim(self, device_id: DeviceID, ci: int) -> bool:
        return any(index == ci for index, _ in self.allocating.get(device_id, ()))

    def _in_use_reason(self, device_id: DeviceID) -> Reason:
        picked = self.allocating.get(device_id)
        if picked:
            index, request = picked[-1]
            return PickedInThisAttempt(self.plans[index].key, request)
        return AlreadyAllocated(self.state.holder(device_id))

    def selectable(
        self, plan: ClaimPlan, request: RequestData, candidate: Candidate
    ) -> Reason | None:
        """Class selectors, request selectors, binding-conditions gate (cached)."""
        key = (request, candidate)
        cache = self._selectable
        if key in cache:
            return cache[key]
        device = candidate.device
        reason: Reason | None = None
        if device.binding_conditions and not self.features.device_binding_conditions:
            reason = BindingConditionsUnsupported()
        else:
            for index, expression in enumerate(request.class_selectors):
                if not self._matches(plan, request, candidate, expression, index, from_class=True):
                    reason = ClassSelectorFalse(request.class_name, index, expression)
                    break
            else:
                for index, expression in enumerate(request.selectors):
                    if not self._matches(
                        plan, request, candidate, expression, index, from_class=False
                    ):
                        reason = RequestSelectorFalse(index, expression)
                        break
        cache[key] = reason
        return reason

    def _matches(
        self,
        plan: ClaimPlan,
        request: RequestData,
        candidate: Candidate,
        expression: str,
        index: int,
        *,
        from_class: bool,
    ) -> bool:
        try:
            return self.memo.matches(expression, candidate.device)
        except CelError as exc:
            device = device_id_str(candidate.device.id)
            source = f"class {request.class_name}" if from_class else f"claim {plan.key}"
            if self.tracer is not None:
                self._reject(
                    plan, request, 0, candidate, SelectorError(source, index, expression, str(exc))
                )
            if self.memo.compile_error(expression) is not None:
                raise AllocationError(
                    f"{source}: selector #{index}: CEL compile error: {exc}"
                ) from exc
            raise AllocationError(
                f"{source}: selector #{index} on device {device}: CEL runtime error: {exc}"
            ) from exc

    # ------------------------------------------------------------ take / release

    def _take(
        self, ci: int, request: RequestData, slot: int, candidate: Candidate, *, must: bool
    ) -> bool:
        """Upstream allocateDevice: final checks, then record the device as picked."""
        plan = self.plans[ci]
        device = candidate.device
        features = self.features
        multi = features.consumable_capacity and device.allow_multiple
        if not multi and request.admin and self._picked_by_claim(device.id, ci):
            return self._refuse(plan, request, slot, candidate, self._in_use_reason(device.id))
        if not request.admin and self._in_use(device.id):
            return self._refuse(plan, request, slot, candidate, self._in_use_reason(device.id))
        if device.consumes and not features.partitionable_devices:
            return self._refuse(plan, request, slot, candidate, PartitionableDisabled())
        undo = _Undo()
        domain = candidate.domain
        skip_counters = multi and (
            device.id in self.state.consumed_capacity
            or self.allocating_shares.get(device.id, 0) > 0
        )
        if device.consumes and domain is not None and not skip_counters:
            failing = self.ledger.reserve(domain, device, plan.key, request.full_name)
            if failing is not None:
                if self.tracer is not None:
                    explained = self.ledger.explain(domain, device, failing, self.state)
                    self._reject(plan, request, slot, candidate, explained)
                return False
            undo.counters = True
        if features.device_taints:
            taint = untolerated_taint(device.taints, request.tolerations)
            if taint is not None:
                self._rollback(plan, request, candidate, undo)
                return self._refuse(
                    plan,
                    request,
                    slot,
                    candidate,
                    UntoleratedTaint(
                        taint.get("key") or "", taint.get("value") or "", taint.get("effect") or ""
                    ),
                )
        for constraint in plan.constraints:
            reason_or_none = constraint.add(
                request.base_name, request.subrequest, device.attributes, device.id[0]
            )
            if reason_or_none is not None:
                self._rollback(plan, request, candidate, undo)
                if must:
                    raise AllocationError(
                        f"claim {plan.key}, request {request.name}: cannot add device "
                        f"{device_id_str(device.id)} because a claim constraint would not be "
                        f"satisfied"
                    )
                return self._refuse(plan, request, slot, candidate, reason_or_none)
            undo.constraints += 1
        if not multi:
            self.allocating.setdefault(device.id, []).append((ci, request.full_name))
            undo.marked = True
        consumed = None
        if features.consumable_capacity:
            reason_or_none = check_capacity(
                device,
                request.capacity,
                self.state.consumed_capacity.get(device.id),
                self.allocating_capacity.get(device.id),
            )
            if reason_or_none is not None:
                self._rollback(plan, request, candidate, undo)
                return self._refuse(plan, request, slot, candidate, reason_or_none)
            if multi:
                consumed = consumed_capacity(device, request.capacity)
                totals = self.allocating_capacity.setdefault(device.id, {})
                amounts = {name: amount.value for name, amount in consumed.items()}
                for name, value in amounts.items():
                    totals[name] = totals.get(name, _ZERO) + value
                self.allocating_shares[device.id] = self.allocating_shares.get(device.id, 0) + 1
                undo.shared = amounts
        self.picked[ci].append(PickedDevice(candidate, request, consumed))
        self.undo[ci].append(undo)
        if self.tracer is not None:
            self.tracer(DeviceChosen(plan.key, request.full_name, slot, _ref(candidate)))
        return True

    def _release(self, ci: int, request: RequestData, slot: int) -> None:
        """Give back the last device picked for claim `ci` (backtracking)."""
        picked = self.picked[ci].pop()
        undo = self.undo[ci].pop()
        plan = self.plans[ci]
        self._rollback(plan, request, picked.candidate, undo)
        if self.tracer is not None:
            self.tracer(DeviceReleased(plan.key, request.full_name, slot, _ref(picked.candidate)))

    def _rollback(
        self, plan: ClaimPlan, request: RequestData, candidate: Candidate, undo: _Undo
    ) -> None:
        device = candidate.device
        if undo.shared is not None:
            totals = self.allocating_capacity[device.id]
            for name, value in undo.shared.items():
                totals[name] -= value
            shares = self.allocating_shares[device.id] - 1
            if shares:
                self.allocating_shares[device.id] = shares
            else:
                del self.allocating_shares[device.id]
                del self.allocating_capacity[device.id]
            undo.shared = None
        if undo.marked:
            entries = self.allocating[device.id]
            entries.pop()
            if not entries:
                del self.allocating[device.id]
            undo.marked = False
        for index in range(undo.constraints - 1, -1, -1):
            plan.constraints[index].remove(request.base_name, request.subrequest)
        undo.constraints = 0
        if undo.counters:
            domain = candidate.domain
            if domain is not None:
                self.ledger.release(domain, device)
            undo.counters = False

    # ------------------------------------------------------------ tracing

    def _refuse(
        self, plan: ClaimPlan, request: RequestData, slot: int, candidate: Candidate, reason: Reason
    ) -> bool:
        if self.tracer is not None:
            self._reject(plan, request, slot, candidate, reason)
        return False

    def _reject(
        self, plan: ClaimPlan, request: RequestData, slot: int, candidate: Candidate, reason: Reason
    ) -> None:
        if self.tracer is not None:
            self.tracer(DeviceRejected(plan.key, request.full_name, slot, _ref(candidate), reason))

    def _note(self, plan: ClaimPlan, request: RequestData, message: str) -> None:
        if self.tracer is not None:
            self.tracer(RequestNote(plan.key, request.full_name, message))


def _ref(candidate: Candidate) -> DeviceRef:
    driver, pool, name = candidate.device.id
    return DeviceRef(driver, pool, name)
