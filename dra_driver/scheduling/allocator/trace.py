"""Why the allocator did what it did: structured trace events and an explanation.

`dra-gpu explain` has to answer "why is my pod pending?" in terms an admin can
act on: which device was rejected for which request, and why (selector false,
already allocated by claim X, counter `memory` exhausted, untolerated taint,
...). The search reports each decision as a `TraceEvent` to an optional tracer
callback; `ExplainRecorder` folds the events into an `Explanation` and
`render_explanation` prints it. With no tracer the search builds no events.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

# ---------------------------------------------------------------- references


@dataclass(frozen=True, slots=True)
class DeviceRef:
    """A device by its allocation identity."""

    driver: str
    pool: str
    device: str

    def __str__(self) -> str:
        return f"{self.driver}/{self.pool}/{self.device}"


# ---------------------------------------------------------------- reasons


@dataclass(frozen=True, slots=True)
class Reason:
    """Base of every rejection reason; `describe()` is the one-line text."""

    def describe(self) -> str:  # pragma: no cover - every subclass overrides it
        return type(self).__name__


@dataclass(frozen=True, slots=True)
class ClassSelectorFalse(Reason):
    device_class: str
    index: int
    expression: str

    def describe(self) -> str:
        return f"DeviceClass {self.device_class} selector #{self.index} is false: {self.expression}"


@dataclass(frozen=True, slots=True)
class RequestSelectorFalse(Reason):
    index: int
    expression: str

    def describe(self) -> str:
        return f"request selector #{self.index} is false: {self.expression}"


@dataclass(frozen=True, slots=True)
class SelectorError(Reason):
    """A CEL selector failed at run time (the allocation is aborted with an error)."""

    source: str
    index: int
    expression: str
    message: str

    def describe(self) -> str:
        return f"{self.source} selector #{self.index} failed: {self.message}"


@dataclass(frozen=True, slots=True)
class BindingConditionsUnsupported(Reason):
    def describe(self) -> str:
        return "device has binding conditions but DRADeviceBindingConditions is disabled"


@dataclass(frozen=True, slots=True)
class AlreadyAllocated(Reason):
    """Allocated to another claim before this allocation attempt."""

    claim: str | None

    def describe(self) -> str:
        owner = f"claim {self.claim}" if self.claim else "another claim"
        return f"already allocated to {owner}"


@dataclass(frozen=True, slots=True)
class PickedInThisAttempt(Reason):
    """Taken by another request (or claim) of the same allocation attempt."""

    claim: str
    request: str

    def describe(self) -> str:
        return f"already picked for claim {self.claim}, request {self.request}"


@dataclass(frozen=True, slots=True)
class PartitionableDisabled(Reason):
    def describe(self) -> str:
        return "device consumes counters but DRAPartitionableDevices is disabled"


@dataclass(frozen=True, slots=True)
class CounterConsumer:
    """A device drawing on a shared counter, and the claim holding it.

    `claim` is "ns/name" ("" if the state does not know it); `request` is set
    when the device was picked earlier in the same attempt.
    """

    device: DeviceRef
    claim: str = ""
    request: str = ""

    @property
    def holder(self) -> str:
        """Who holds the device, in words: "ns/claim", "ns/claim request" or "allocated"."""
        return " ".join(part for part in (self.claim, self.request) if part) or "allocated"

    def __str__(self) -> str:
        return f"{self.device} ({self.holder})"


@dataclass(frozen=True, slots=True)
class CountersExhausted(Reason):
    domain: str
    counter_set: str
    counter: str
    needed: str
    available: str
    consumers: tuple[CounterConsumer, ...] = ()

    def describe(self) -> str:
        text = (
            f"counter {self.counter_set}/{self.counter} of {self.domain} exhausted: "
            f"needs {self.needed}, {self.available} available"
        )
        if self.consumers:
            text += f" (consumed by {', '.join(map(str, self.consumers))})"
        return text


@dataclass(frozen=True, slots=True)
class UntoleratedTaint(Reason):
    key: str
    value: str
    effect: str

    def describe(self) -> str:
        return f"untolerated taint {self.key}={self.value}:{self.effect}"


@dataclass(frozen=True, slots=True)
class AttributeMissing(Reason):
    attribute: str
    constraint: str

    def describe(self) -> str:
        return f"{self.constraint} constraint: device has no attribute {self.attribute}"


@dataclass(frozen=True, slots=True)
class ConstraintMismatch(Reason):
    attribute: str
    value: str
    required: str

    def describe(self) -> str:
        return (
            f"matchAttribute {self.attribute}: device has {self.value}, "
            f"the claim's other devices have {self.required}"
        )


@dataclass(frozen=True, slots=True)
class DistinctViolation(Reason):
    attribute: str
    value: str

    def describe(self) -> str:
        return (
            f"distinctAttribute {self.attribute}: value {self.value} is already used "
            "by another device of the claim"
        )


@dataclass(frozen=True, slots=True)
class CapacityUndefined(Reason):
    capacities: tuple[str, ...]

    def describe(self) -> str:
        return f"device has no capacity {', '.join(self.capacities)}"


@dataclass(frozen=True, slots=True)
class CapacityPolicyViolated(Reason):
    capacity: str
    requested: str

    def describe(self) -> str:
        return f"capacity {self.capacity}: {self.requested} is not allowed by the requestPolicy"


@dataclass(frozen=True, slots=True)
class CapacityInsufficient(Reason):
    capacity: str
    requested: str
    in_use: str
    total: str

    def describe(self) -> str:
        return (
            f"capacity {self.capacity}: needs {self.requested}, {self.in_use} of "
            f"{self.total} already consumed"
        )


@dataclass(frozen=True, slots=True)
class PoolIncomplete(Reason):
    def describe(self) -> str:
        return "pool is incomplete (not all of its ResourceSlices are published)"


@dataclass(frozen=True, slots=True)
class PoolInvalid(Reason):
    detail: str

    def describe(self) -> str:
        return f"pool is invalid: {self.detail}"


# ---------------------------------------------------------------- events


@dataclass(frozen=True, slots=True)
class PoolSkipped:
    pool: str
    reason: Reason


@dataclass(frozen=True, slots=True)
class DeviceRejected:
    claim: str
    request: str
    slot: int
    device: DeviceRef
    reason: Reason


@dataclass(frozen=True, slots=True)
class DeviceChosen:
    claim: str
    request: str
    slot: int
    device: DeviceRef


@dataclass(frozen=True, slots=True)
class DeviceReleased:
    """A chosen device was given back while backtracking."""

    claim: str
    request: str
    slot: int
    device: DeviceRef


@dataclass(frozen=True, slots=True)
class RequestNote:
    """Something about a whole request: a subrequest given up, a result limit hit."""

    claim: str
    request: str
    message: str


@dataclass(frozen=True, slots=True)
class AllocationFinished:
    node: str
    success: bool
    error: str = ""


TraceEvent = (
    PoolSkipped | DeviceRejected | DeviceChosen | DeviceReleased | RequestNote | AllocationFinished
)

#: What `Allocator.allocate(..., tracer=...)` accepts: called once per event.
Tracer = Callable[[TraceEvent], None]


# ---------------------------------------------------------------- explanation


@dataclass(slots=True)
class DeviceVerdict:
    device: DeviceRef
    reasons: list[Reason] = field(default_factory=list)
    chosen: bool = False


@dataclass(slots=True)
class RequestExplanation:
    claim: str
    request: str
    devices: dict[DeviceRef, DeviceVerdict] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


@dataclass(slots=True)
class Explanation:
    node: str = ""
    success: bool | None = None
    error: str = ""
    pools: list[tuple[str, Reason]] = field(default_factory=list)
    requests: list[RequestExplanation] = field(default_factory=list)


class ExplainRecorder:
    """A tracer that folds events into an `Explanation` (per claim, request, device)."""

    def __init__(self) -> None:
        self.explanation = Explanation()
        self._requests: dict[tuple[str, str], RequestExplanation] = {}
        self.events = 0

    def __call__(self, event: TraceEvent) -> None:
        self.events += 1
        if isinstance(event, PoolSkipped):
            if (event.pool, event.reason) not in self.explanation.pools:
                self.explanation.pools.append((event.pool, event.reason))
        elif isinstance(event, DeviceRejected):
            verdict = self._verdict(event.claim, event.request, event.device)
            if event.reason not in verdict.reasons:
                verdict.reasons.append(event.reason)
        elif isinstance(event, DeviceChosen):
            self._verdict(event.claim, event.request, event.device).chosen = True
        elif isinstance(event, DeviceReleased):
            self._verdict(event.claim, event.request, event.device).chosen = False
        elif isinstance(event, RequestNote):
            notes = self._request(event.claim, event.request).notes
            if event.message not in notes:
                notes.append(event.message)
        else:
            self.explanation.node = event.node
            self.explanation.success = event.success
            self.explanation.error = event.error

    def _request(self, claim: str, request: str) -> RequestExplanation:
        key = (claim, request)
        found = self._requests.get(key)
        if found is None:
            found = RequestExplanation(claim, request)
            self._requests[key] = found
            self.explanation.requests.append(found)
        return found

    def _verdict(self, claim: str, request: str, device: DeviceRef) -> DeviceVerdict:
        devices = self._request(claim, request).devices
        verdict = devices.get(device)
        if verdict is None:
            verdict = DeviceVerdict(device)
            devices[device] = verdict
        return verdict


def render_explanation(explanation: Explanation) -> str:
    """Plain-text rendering of an explanation, one line per device decision."""
    if explanation.success is None:
        outcome = "not finished"
    elif explanation.error:
        outcome = f"error: {explanation.error}"
    else:
        outcome = "claims fit" if explanation.success else "claims do not fit"
    lines = [f"node {explanation.node or '?'}: {outcome}"]
    for pool, reason in explanation.pools:
        lines.append(f"  pool {pool}: skipped, {reason.describe()}")
    for request in explanation.requests:
        lines.append(f"  claim {request.claim}, request {request.request}:")
        lines.extend(f"    note: {note}" for note in request.notes)
        for verdict in request.devices.values():
            if verdict.chosen:
                lines.append(f"    {verdict.device}: allocated")
                continue
            if not verdict.reasons:
                lines.append(f"    {verdict.device}: tried, released while backtracking")
                continue
            first, *rest = verdict.reasons
            lines.append(f"    {verdict.device}: rejected, {first.describe()}")
            lines.extend(f"      also: {reason.describe()}" for reason in rest)
    return "\n".join(lines)
