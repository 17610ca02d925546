"""Why claims do not fit: per node and request, which devices match and what holds them.

The allocator's trace answers "what did the search try, in which order", which
is right for one node but depends on search order. A pending pod needs a
different answer: for each request, how many devices on each node could serve
it at all (class and request selectors), how many of those are free, and
what holds the rest (another claim's allocation, shared counters consumed by
other claims' MIG devices, untolerated taints). That view does not depend on
search order, is cheap enough to compute for hundreds of nodes, and points at
the change that would make the pod fit. Where every request has free devices
on a node and they still do not fit together (constraints, requests
competing for the same devices, counters used up by the claim's own picks),
the allocator's trace of that node (`ExplainRecorder`) names the cause.

`Diagnoser.diagnose` returns a `Diagnosis` with one `NodeDiagnosis` per node
and `summary`, a one-line "what would make it fit" such as

    request gpu: no device has productName matching '^.*b200.*$'
    (8 devices have 'NVIDIA H100 80GB HBM3')

Everything here is pure: it reads the allocator's indexes and state only.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Literal

from dra_driver.errors import AllocationError, CelError
from dra_driver.kube.objects import AllocationResult, Obj
from dra_driver.scheduling.allocator import (
    AllocatedState,
    Allocator,
    ExplainRecorder,
    Explanation,
    Features,
    InvalidPoolsError,
    Node,
)
from dra_driver.scheduling.allocator.capacity import check_capacity
from dra_driver.scheduling.allocator.counters import Availability, availability
from dra_driver.scheduling.allocator.pools import Candidate, CounterDomain, DeviceRecord
from dra_driver.scheduling.allocator.requests import ALL, ClaimPlan, RequestData, plan_claims
from dra_driver.scheduling.allocator.selectors import CelSelectorEvaluator, SelectorMemo
from dra_driver.scheduling.allocator.taints import untolerated_taint
from dra_driver.scheduling.allocator.trace import (
    AttributeMissing,
    CapacityUndefined,
    ConstraintMismatch,
    CountersExhausted,
    DistinctViolation,
    PickedInThisAttempt,
    Reason,
)
from dra_driver.scheduling.whatif import hints, selector_text

Cause = Literal["allocated", "counters", "capacity", "taint", "unusable"]

_COUNTER_SET_SUFFIX = "-counter-set"
_MAX_VALUES = 3


@dataclass(frozen=True)
class Blocker:
    """Why a device that matches a request is not free."""

    cause: Cause
    holders: tuple[str, ...] = ()  # claims holding it (allocated, counters, capacity)
    detail: str = ""  # the counter, the capacity, the taint, or why the device is unusable


@dataclass
class RequestOnNode:
    """One request (or subrequest) of one claim, checked against one node's devices."""

    claim: str
    label: str
    request: RequestData
    examined: list[DeviceRecord] = field(default_factory=list)
    class_false: list[tuple[DeviceRecord, int]] = field(default_factory=list)
    selector_false: list[tuple[DeviceRecord, int]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    matching: list[DeviceRecord] = field(default_factory=list)
    blocked: list[tuple[DeviceRecord, Blocker]] = field(default_factory=list)
    free: list[DeviceRecord] = field(default_factory=list)

    @property
    def needed(self) -> int:
        """Devices the request needs: its count, or every matching device (All)."""
        if self.request.mode == ALL:
            return max(len(self.matching), 1)
        return self.request.count

    @property
    def short(self) -> bool:
        """Not enough free matching devices on this node for this request alone."""
        if self.errors:
            return True
        if self.request.mode == ALL:
            return not self.matching or bool(self.blocked)
        return len(self.free) < self.request.count

    @property
    def in_class(self) -> int:
        return len(self.examined) - len(self.class_false)

    @property
    def satisfaction(self) -> Fraction:
        return Fraction(min(len(self.free), self.needed), max(self.needed, 1))


@dataclass
class RequestGroup:
    """A request of a claim with its alternatives (firstAvailable subrequests, or itself)."""

    label: str
    alternatives: list[RequestOnNode]

    @property
    def short(self) -> bool:
        return all(alternative.short for alternative in self.alternatives)

    @property
    def closest(self) -> RequestOnNode:
        """The alternative nearest to fitting (for the text)."""
        return max(self.alternatives, key=lambda a: (not a.short, a.satisfaction, -len(a.errors)))


@dataclass
class NodeDiagnosis:
    """One node: does the claim set fit, and the per-request device accounting."""

    node: Node
    groups: list[RequestGroup] = field(default_factory=list)
    skipped_pools: list[str] = field(default_factory=list)
    fits: bool | None = None
    error: str = ""
    fatal: bool = False  # the error is not about this node (bad CEL, missing class)
    results: list[AllocationResult] | None = None
    trace: Explanation | None = None

    @property
    def score(self) -> tuple[int, int, Fraction]:
        """Higher is closer to fitting."""
        if self.fits:
            return (2, len(self.groups), Fraction(len(self.groups)))
        satisfied = sum(1 for group in self.groups if not group.short)
        partial = sum((group.closest.satisfaction for group in self.groups), Fraction(0))
        return (0 if self.error else 1, satisfied, partial)

    def short_groups(self) -> list[RequestGroup]:
        return [group for group in self.groups if group.short]


@dataclass
class Diagnosis:
    """The claims, every node's diagnosis (in node order) and the one-line summary."""

    claims: list[Obj]
    nodes: list[NodeDiagnosis] = field(default_factory=list)
    error: str = ""
    summary: str = ""

    @property
    def fitting(self) -> list[NodeDiagnosis]:
        return [node for node in self.nodes if node.fits]

    def ranked(self) -> list[NodeDiagnosis]:
        """Nodes, best first (fitting nodes, then those closest to fitting); stable."""
        order = {id(node): index for index, node in enumerate(self.nodes)}
        return sorted(self.nodes, key=lambda n: (_negated(n.score), order[id(n)]))


def _negated(score: tuple[int, int, Fraction]) -> tuple[int, int, Fraction]:
    return (-score[0], -score[1], -score[2])


class Diagnoser:
    """Diagnoses claim sets against nodes, reusing selector results across calls.

    `allocator` must be the one the simulation allocates with (same slices,
    classes and `state`).
    """

    def __init__(
        self,
        allocator: Allocator,
        classes: Sequence[Mapping[str, Any]],
        state: AllocatedState,
        features: Features | None = None,
    ) -> None:
        self.allocator = allocator
        self.state = state
        self.features = features or allocator.features
        self._classes = {str((c.get("metadata") or {}).get("name")): c for c in classes}
        self._selectors = _selector_memo(self.features.consumable_capacity, self.features.release)
        self._availability: dict[int, tuple[int, Availability]] = {}
        self.attribute_names: set[str] = set()  # for "did you mean" (`hints`), set by the caller

    def diagnose(
        self,
        claims: Sequence[Obj],
        nodes: Sequence[Node],
        *,
        labels: Mapping[str, str] | None = None,
        known_unfit: bool = False,
    ) -> Diagnosis:
        """Check `claims` (allocated together, as for one pod) against each of `nodes`.

        `labels` names claims in texts (claim key -> label; a single claim is
        not named). With `known_unfit` the caller already knows no node fits
        and the allocator is not asked per node. The allocator's trace is
        recorded only where the summary needs it (see `attach_trace`).
        """
        diagnosis = Diagnosis(list(claims))
        try:
            plans = plan_claims(claims, self._classes, self.features, _no_devices)
        except AllocationError as exc:
            diagnosis.error = str(exc)
            diagnosis.summary = str(exc)
            return diagnosis
        names = _claim_labels(plans, labels)
        for node in nodes:
            node_diagnosis = self._node(node, plans, names)
            if known_unfit:
                node_diagnosis.fits = False
            else:
                self._attempt(node_diagnosis, claims, trace_it=False)
            if node_diagnosis.fatal and not diagnosis.error:
                diagnosis.error = node_diagnosis.error
            diagnosis.nodes.append(node_diagnosis)
        if diagnosis.error:
            diagnosis.error = hints.did_you_mean(diagnosis.error, self.attribute_names)
        diagnosis.summary = self._summary(diagnosis, claims)
        return diagnosis

    def attach_trace(self, node: NodeDiagnosis, claims: Sequence[Obj]) -> None:
        """Record the allocator's trace of `node` (for the detailed view)."""
        if node.trace is None:
            self._attempt(node, claims, trace_it=True)

    # ------------------------------------------------------------ per node

    def _attempt(self, node: NodeDiagnosis, claims: Sequence[Obj], *, trace_it: bool) -> None:
        recorder = ExplainRecorder() if trace_it else None
        try:
            results = self.allocator.allocate(node.node, claims, tracer=recorder)
        except InvalidPoolsError as exc:
            node.fits, node.error = False, str(exc)
        except AllocationError as exc:
            node.fits, node.error, node.fatal = False, str(exc), True
        else:
            node.fits = results is not None
            node.results = results
        if recorder is not None:
            node.trace = recorder.explanation

    def _node(
        self, node: Node, plans: Sequence[ClaimPlan], names: Mapping[str, str]
    ) -> NodeDiagnosis:
        pools = self.allocator.pools_for(node)
        result = NodeDiagnosis(node)
        for pool in pools.pools:
            if pool.incomplete:
                result.skipped_pools.append(f"pool {pool} is incomplete")
            elif pool.invalid:
                result.skipped_pools.append(f"pool {pool} is invalid: {pool.invalid_reason}")
        for plan in plans:
            for alternatives in plan.requests:
                stats = [
                    self._request(plan, request, pools.candidates, names[plan.key])
                    for request in alternatives
                ]
                base = alternatives[0].base_name
                result.groups.append(RequestGroup(_label(names[plan.key], base), stats))
        return result

    def _request(
        self,
        plan: ClaimPlan,
        request: RequestData,
        candidates: Sequence[Candidate],
        claim_label: str,
    ) -> RequestOnNode:
        stats = RequestOnNode(plan.key, _label(claim_label, request.full_name), request)
        state = self.state
        check = self._selectors.check
        for candidate in candidates:
            device = candidate.device
            stats.examined.append(device)
            verdict = _first_false(check, request.class_selectors, device)
            if isinstance(verdict, CelError):
                stats.errors.append(
                    f"DeviceClass {request.class_name} selector failed on {_device_name(device)}: "
                    f"{verdict}"
                )
                continue
            if verdict is not None:
                stats.class_false.append((device, verdict))
                continue
            verdict = _first_false(check, request.selectors, device)
            if isinstance(verdict, CelError):
                stats.errors.append(f"selector failed on {_device_name(device)}: {verdict}")
                continue
            if verdict is not None:
                stats.selector_false.append((device, verdict))
                continue
            stats.matching.append(device)
            blocker = self._blocker(candidate, request, state)
            if blocker is None:
                stats.free.append(device)
            else:
                stats.blocked.append((device, blocker))
        return stats

    def _blocker(
        self, candidate: Candidate, request: RequestData, state: AllocatedState
    ) -> Blocker | None:
        device = candidate.device
        if device.binding_conditions and not self.features.device_binding_conditions:
            return Blocker("unusable", (), "binding conditions need DRADeviceBindingConditions")
        if device.consumes and not self.features.partitionable_devices:
            return Blocker("unusable", (), "shared counters need DRAPartitionableDevices")
        if not request.admin:
            holder = state.dedicated.get(device.id)
            if holder is None and not self.features.consumable_capacity:
                holder = state.holder(device.id) if device.id in state.shared else None
            if holder is not None:
                return Blocker("allocated", (holder,))
        # A shared device took its counters with its first share (the allocator's rule).
        multi = self.features.consumable_capacity and device.allow_multiple
        if (
            device.consumes
            and candidate.domain is not None
            and not (multi and state.is_allocated(device.id))
        ):
            blocker = self._counters(candidate.domain, device, state)
            if blocker is not None:
                return blocker
        if self.features.device_taints:
            taint = untolerated_taint(device.taints, request.tolerations)
            if taint is not None:
                text = f"{taint.get('key') or ''}={taint.get('value') or ''}:{taint.get('effect')}"
                return Blocker("taint", (), text)
        if multi:
            reason = check_capacity(
                device, request.capacity, state.consumed_capacity.get(device.id), None
            )
            if reason is not None:
                shares = state.shared.get(device.id, [])
                holders = tuple(dict.fromkeys(claim for _, claim in shares))
                return Blocker("capacity", holders, reason.describe())
        return None

    def _counters(
        self, domain: CounterDomain, device: DeviceRecord, state: AllocatedState
    ) -> Blocker | None:
        cached = self._availability.get(id(domain))
        if cached is None or cached[0] != state.version:
            cached = (state.version, availability(domain, state))
            self._availability[id(domain)] = cached
        available = cached[1]
        failing = available.negative[0] if available.negative else None
        for set_name, counters in device.consumes:
            for counter, amount in counters.items():
                key = (set_name, counter)
                left = available.left.get(key)
                if left is not None and left < amount and (failing is None or key < failing):
                    failing = key
        if failing is None:
            return None
        holders = tuple(
            dict.fromkeys(
                state.holder(device_id) or "another claim"
                for device_id, _ in available.consumers.get(failing, [])
            )
        )
        return Blocker("counters", holders, f"{failing[0]}/{failing[1]}")

    # ------------------------------------------------------------ summary

    def _summary(self, diagnosis: Diagnosis, claims: Sequence[Obj]) -> str:
        if diagnosis.error:
            return diagnosis.error
        if not diagnosis.nodes:
            return "no node to try"
        if diagnosis.fitting:
            return f"fits on {_nodes_phrase([n.node.name for n in diagnosis.fitting])}"
        groups = len(diagnosis.nodes[0].groups)
        for index in range(groups):
            per_node = [node.groups[index] for node in diagnosis.nodes]
            if all(group.short for group in per_node):
                skipped = [text for node in diagnosis.nodes for text in node.skipped_pools]
                names = [n.node.name for n in diagnosis.nodes]
                return shortage_text(per_node, names, skipped=skipped)
        best = diagnosis.ranked()[0]
        short = best.short_groups()
        if short:
            text = shortage_text([short[0]], [best.node.name], skipped=best.skipped_pools)
            return f"no node has room for every request; best node {best.node.name}: {text}"
        return self._combination(best, claims)

    def _combination(self, best: NodeDiagnosis, claims: Sequence[Obj]) -> str:
        """Every request fits alone on `best`; say why they do not fit together."""
        name = best.node.name
        if best.error:
            return best.error
        chosen = [group.closest for group in best.groups]
        union = {id(device) for stats in chosen for device in stats.free}
        needed = sum(stats.needed for stats in chosen)
        if len(chosen) > 1 and needed > len(union):
            labels = ", ".join(stats.label for stats in chosen)
            return (
                f"on {name}, {labels} need {needed} devices together, but only {len(union)} "
                "free devices match them"
            )
        self.attach_trace(best, claims)
        free = {device.id for stats in chosen for device in stats.free}
        reasons = _trace_reasons(best.trace, free)
        if not reasons:
            return f"the claims do not fit together on {name}"
        return f"on {name} every request has free devices, but not together: {reasons}"


# ---------------------------------------------------------------- texts


def _no_devices(plan: ClaimPlan, request: RequestData) -> list[Candidate]:
    """Plans are only used for their requests; All lists are computed per node here."""
    del plan, request
    return []


def _claim_labels(plans: Sequence[ClaimPlan], labels: Mapping[str, str] | None) -> dict[str, str]:
    """Claims are only named when there are several."""
    if len(plans) == 1:
        return {plans[0].key: ""}
    given = labels or {}
    return {plan.key: given.get(plan.key, plan.key) for plan in plans}


def _label(claim_label: str, request: str) -> str:
    if claim_label:
        return f"claim {claim_label}, request {request}"
    return f"request {request}"


def _first_false(
    check: Callable[[str, DeviceRecord], bool | CelError],
    expressions: Sequence[str],
    device: DeviceRecord,
) -> int | CelError | None:
    for index, expression in enumerate(expressions):
        result = check(expression, device)
        if isinstance(result, CelError):
            return result
        if not result:
            return index
    return None


def _device_name(device: DeviceRecord) -> str:
    return "/".join(device.id)


def gpu_label(device: DeviceRecord) -> str:
    """The GPU a partition belongs to (its counter set, e.g. `gpu-3`), or ""."""
    for set_name, _ in device.consumes:
        return set_name.removesuffix(_COUNTER_SET_SUFFIX)
    return ""


def _attribute(device: DeviceRecord, name: str) -> str | None:
    entry = device.attributes.get(name)
    if entry is None:
        entry = device.attributes.get(f"{device.slice.driver}/{name}")
    if entry is None:
        return None
    value = entry.get("string")
    return None if value is None else str(value)


def _what(devices: Sequence[DeviceRecord]) -> str:
    """ "MIG 1g.10gb placements", "GPUs" or "matching devices"."""
    types = {_attribute(device, "type") for device in devices}
    if types == {"mig"}:
        profiles = {_attribute(device, "profile") for device in devices}
        kind = "placements" if all(device.consumes for device in devices) else "devices"
        if len(profiles) == 1 and None not in profiles:
            return f"MIG {profiles.pop()} {kind}"
        return f"MIG {kind}"
    if types == {"gpu"}:
        return "GPUs"
    return "matching devices"


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def _nodes_phrase(names: Sequence[str], limit: int = 3) -> str:
    if len(names) == 1:
        return names[0]
    shown = ", ".join(names[:limit])
    more = f" and {len(names) - limit} more" if len(names) > limit else ""
    return f"{len(names)} nodes ({shown}{more})"


def values_text(refs: Sequence[selector_text.Reference], devices: Sequence[DeviceRecord]) -> str:
    """ "8 devices have 'NVIDIA H100 80GB HBM3', 4 have 'NVIDIA L4'" for the first reference(s)."""
    parts: list[str] = []
    for ref in refs[:2]:
        counts = Counter(ref.lookup(device, device.slice.driver) for device in devices)
        ranked = sorted(counts.items(), key=lambda item: (-item[1], str(item[0])))
        pieces: list[str] = []
        for position, (value, count) in enumerate(ranked[:_MAX_VALUES]):
            verb = "has" if count == 1 else "have"
            subject = _plural(count, "device") if position == 0 else str(count)
            pieces.append(
                f"{subject} {verb} no {ref.name}" if value is None else f"{subject} {verb} {value}"
            )
        if len(ranked) > _MAX_VALUES:
            pieces.append(f"{len(ranked) - _MAX_VALUES} other values")
        text = ", ".join(pieces)
        parts.append(f"{ref.name}: {text}" if len(refs) > 1 else text)
    return "; ".join(parts)


def failing_part(
    expression: str,
    devices: Sequence[DeviceRecord],
    check: Callable[[str, DeviceRecord], bool | CelError],
) -> str:
    """The `&&` part of `expression` that the most of `devices` fail (the first on ties)."""
    parts = selector_text.conjuncts(expression)
    if len(parts) == 1 or not devices:
        return parts[0] if len(parts) == 1 else expression
    best, best_failures = expression, -1
    for part in parts:
        failures = 0
        for device in devices:
            result = check(part, device)
            if isinstance(result, CelError):
                return expression  # splitting changed the meaning; keep it whole
            failures += not result
        if failures > best_failures:
            best, best_failures = part, failures
    return best


def _selector_phrase(
    expression: str,
    devices: Sequence[DeviceRecord],
    check: Callable[[str, DeviceRecord], bool | CelError],
) -> str:
    part = failing_part(expression, devices, check)
    phrase = selector_text.describe(part)
    refs = selector_text.references(part)
    values = values_text(refs, devices) if refs and devices else ""
    verb = "satisfies" if phrase.startswith("`") else "has"
    text = f"no device {verb} {phrase}"
    return f"{text} ({values})" if values else text


def _cause_text(blocked: Sequence[tuple[DeviceRecord, Blocker]]) -> str:
    """ "taken by claim X", "taken by claims A (3), B (1)", "tainted (k=v:NoSchedule)",
    "unusable (...)", or several of these, each with its device count."""
    taken: Counter[str] = Counter()
    others: Counter[tuple[str, str]] = Counter()
    full: list[Blocker] = []
    taken_count = 0
    for _, blocker in blocked:
        if blocker.cause == "capacity":
            full.append(blocker)
        elif blocker.cause in ("allocated", "counters"):
            taken_count += 1
            for holder in blocker.holders or ("another claim",):
                taken[holder] += 1
        else:
            kind = "tainted" if blocker.cause == "taint" else "unusable"
            others[(kind, blocker.detail)] += 1
    several = (1 if taken else 0) + (1 if full else 0) + len(others) > 1
    segments: list[str] = []
    if full:
        sharers = {holder for blocker in full for holder in blocker.holders}
        segments.append(
            (f"{len(full)} " if several else "")
            + f"shared to capacity ({_full_detail(full)}; "
            + f"{_plural(len(sharers), 'claim')} share them)"
        )
    if taken:
        if len(taken) == 1:
            holders = f"claim {next(iter(taken))}"
        else:
            ranked = sorted(taken.items(), key=lambda item: (-item[1], item[0]))
            shown = ", ".join(f"{holder} ({count})" for holder, count in ranked[:_MAX_VALUES])
            if len(ranked) > _MAX_VALUES:
                holders = f"{len(ranked)} claims ({shown}, ...)"
            else:
                holders = f"claims {shown}"
        segments.append((f"{taken_count} " if several else "") + f"taken by {holders}")
    for (kind, detail), count in sorted(others.items()):
        segments.append((f"{count} " if several else "") + f"{kind} ({detail})")
    return ", ".join(segments)


def _full_detail(full: Sequence[Blocker]) -> str:
    """The capacity that is exhausted, as the first device reports it ("e.g." if they differ)."""
    details = {blocker.detail for blocker in full}
    first = full[0].detail
    return first if len(details) == 1 else f"e.g. {first}"


def shortage_text(
    groups: Sequence[RequestGroup], node_names: Sequence[str], *, skipped: Sequence[str] = ()
) -> str:
    """Why one request lacks free devices on every one of these nodes (one line).

    `skipped` are the pools the nodes could not use (incomplete, invalid). A
    request with `firstAvailable` alternatives names why each one fails."""
    alternatives = len(groups[0].alternatives)
    if alternatives == 1:
        return _shortage_of(groups, 0, node_names, skipped)
    texts = [
        _shortage_of(groups, index, node_names, skipped).removeprefix("request ")
        for index in range(alternatives)
    ]
    label = groups[0].label
    return f"{label}: none of its {alternatives} alternatives fits: {'; '.join(texts)}"


def _shortage_of(
    groups: Sequence[RequestGroup], index: int, node_names: Sequence[str], skipped: Sequence[str]
) -> str:
    """`shortage_text` for alternative `index` of the groups' request."""
    stats = [group.alternatives[index] for group in groups]
    label = stats[0].label
    request = stats[0].request
    check = _selector_memo(consumable_capacity=False).check  # fresh per summary
    errors = [error for s in stats for error in s.errors]
    if errors:
        return f"{label}: {errors[0]}"
    examined = [device for s in stats for device in s.examined]
    if not examined:
        text = f"{label}: no devices are published for {_nodes_phrase(list(node_names))}"
        unique = list(dict.fromkeys(skipped))
        if unique:
            more = f" and {len(unique) - 2} more" if len(unique) > 2 else ""
            text += f" ({'; '.join(unique[:2])}{more})"
        return text
    in_class = [device for s in stats for device in _in_class(s)]
    if not in_class:
        failures = Counter(position for s in stats for _, position in s.class_false)
        position = failures.most_common(1)[0][0]
        expression = request.class_selectors[position]
        phrase = _selector_phrase(expression, examined, check)
        return hints.missing_class_devices(
            f"{label}: DeviceClass {request.class_name}: {phrase}", request.class_name
        )
    matching = [device for s in stats for device in s.matching]
    if not matching:
        failures = Counter(position for s in stats for _, position in s.selector_false)
        position = failures.most_common(1)[0][0]
        expression = request.selectors[position]
        return f"{label}: {_selector_phrase(expression, in_class, check)}"
    return _blocked_text(stats, node_names, label)


def _in_class(stats: RequestOnNode) -> list[DeviceRecord]:
    rejected = {id(device) for device, _ in stats.class_false}
    return [device for device in stats.examined if id(device) not in rejected]


def _blocked_text(stats: Sequence[RequestOnNode], node_names: Sequence[str], label: str) -> str:
    matching = [device for s in stats for device in s.matching]
    blocked = [entry for s in stats for entry in s.blocked]
    with_matches = [(s, name) for s, name in zip(stats, node_names, strict=True) if s.matching]
    if len(with_matches) == 1:
        node = with_matches[0][1]
        gpus = {gpu_label(device) for device in matching}
        where = f"on {gpus.pop()} of {node}" if len(gpus) == 1 and "" not in gpus else f"on {node}"
    else:
        where = f"on {len(with_matches)} nodes"
    what = _what(matching)
    free = max(len(s.free) for s in stats)
    needed = stats[0].needed
    if not blocked:
        if len(with_matches) == 1:
            return f"{label}: needs {needed}, only {len(matching)} {what} match {where}"
        most = max(len(s.matching) for s in stats)
        return (
            f"{label}: needs {needed} on one node, at most {most} {what} match on any of "
            f"{len(stats)} nodes"
        )
    share = (
        f"all {len(matching)}"
        if len(blocked) == len(matching) > 1
        else f"{len(blocked)} of {len(matching)}"
    )
    text = f"{label}: {share} {what} {where} are {_cause_text(blocked)}"
    if stats[0].request.mode == ALL:
        return f"{text}; allocationMode All needs every one of them"
    if free and len(with_matches) == 1:
        text += f"; it needs {needed}, {free} free"
    elif free:
        text += f"; it needs {needed}, at most {free} free on one node"
    elif needed > 1:
        text += f"; it needs {needed}"
    return text


def _selector_memo(consumable_capacity: bool, release: str | None = None) -> SelectorMemo:
    """Selector results with the allocator's CEL (`dra_driver.scheduling.allocator.selectors`),
    as the scheduler of `release` compiles them (None: the newest)."""
    return SelectorMemo(
        CelSelectorEvaluator(consumable_capacity=consumable_capacity, release=release)
    )


def _trace_reasons(explanation: Explanation | None, free: set[tuple[str, str, str]]) -> str:
    """Why free devices were refused in a trace (constraints, competition, counters),
    grouped and counted per device, as one phrase."""
    if explanation is None:
        return ""
    counted: Counter[str] = Counter()
    for request in explanation.requests:
        for verdict in request.devices.values():
            ref = verdict.device
            if (ref.driver, ref.pool, ref.device) not in free:
                continue
            for text in dict.fromkeys(_combination_reason(r) for r in verdict.reasons):
                counted[text] += 1
    if not counted:
        return ""
    ranked = sorted(counted.items(), key=lambda item: (-item[1], item[0]))
    return "; ".join(f"{text} ({_plural(count, 'device')})" for text, count in ranked[:2])


def _combination_reason(reason: Reason) -> str:
    if isinstance(reason, ConstraintMismatch):
        return f"matchAttribute {reason.attribute}: no choice of free devices shares one value"
    if isinstance(reason, AttributeMissing):
        return reason.describe()
    if isinstance(reason, DistinctViolation):
        return f"distinctAttribute {reason.attribute}: values repeat"
    if isinstance(reason, PickedInThisAttempt):
        return "the requests compete for the same devices"
    if isinstance(reason, CountersExhausted):
        return (
            f"the claim's own devices use up counter {reason.counter_set}/{reason.counter} "
            f"of {reason.domain}"
        )
    if isinstance(reason, CapacityUndefined):
        return hints.missing_capacity(reason.describe(), reason.capacities)
    return reason.describe()
