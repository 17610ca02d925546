"""ResourceClaims turned into what the search works on, with upstream's pre-checks.

Before searching, the scheduler validates every claim against the enabled
features and the DeviceClasses (unknown class, selector without CEL, admin
access or prioritized lists or capacity requests with the gate off, unknown
allocation mode, too many devices, unknown constraints) and fails the whole
`Allocate` with an error for any of them. This module does the same checks, in
the same order and with the same messages, and produces one `RequestData` per
request or subrequest and one `ClaimPlan` per claim.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from dra_driver.errors import AllocationError
from dra_driver.kube.quantity import Quantity
from dra_driver.scheduling.allocator.constraints import (
    Constraint,
    DistinctAttribute,
    MatchAttribute,
)
from dra_driver.scheduling.allocator.features import ALLOCATION_RESULTS_MAX_SIZE, Features
from dra_driver.scheduling.allocator.pools import Candidate
from dra_driver.scheduling.allocator.quantities import to_quantity
from dra_driver.scheduling.allocator.state import claim_key

EXACT_COUNT = "ExactCount"
ALL = "All"


class RequestData:
    """One request without subrequests, or one subrequest of a firstAvailable request."""

    __slots__ = (
        "admin",
        "all_devices",
        "capacity",
        "class_name",
        "class_raw",
        "class_selectors",
        "count",
        "mode",
        "name",
        "num_devices",
        "parent",
        "raw",
        "selectors",
        "tolerations",
    )

    def __init__(self, raw: Mapping[str, Any], name: str, parent: str | None) -> None:
        self.raw = raw
        self.name = name
        self.parent = parent
        self.class_name: str = raw.get("deviceClassName") or ""
        self.class_raw: Mapping[str, Any] = {}
        self.class_selectors: list[str] = []
        self.selectors: list[str] = []
        self.mode: str = raw.get("allocationMode") or EXACT_COUNT
        count = raw.get("count")
        if self.mode == EXACT_COUNT and not count:
            count = 1  # API defaulting
        self.count: int = int(count or 0)
        # adminAccess only exists on `exactly` requests; a subrequest never has it.
        self.admin: bool = bool(raw.get("adminAccess")) if parent is None else False
        self.tolerations: Sequence[Mapping[str, Any]] = raw.get("tolerations") or []
        self.capacity: dict[str, Quantity] | None = None
        self.num_devices = 0
        self.all_devices: list[Candidate] = []

    @property
    def full_name(self) -> str:
        """`req` or `req/sub`: the name written into allocation results."""
        return f"{self.parent}/{self.name}" if self.parent else self.name

    @property
    def base_name(self) -> str:
        """The top-level request this belongs to (what constraints name)."""
        return self.parent or self.name

    @property
    def subrequest(self) -> str | None:
        return self.name if self.parent else None


@dataclass(slots=True)
class ClaimPlan:
    """A claim ready for searching: per request its alternatives, plus constraints."""

    raw: Mapping[str, Any]
    key: str
    requests: list[list[RequestData]]
    has_subrequests: list[bool]
    constraints: list[Constraint]
    selected: list[int] = field(default_factory=list)


def plan_claims(
    claims: Sequence[Mapping[str, Any]],
    classes: Mapping[str, Mapping[str, Any]],
    features: Features,
    all_devices_for: Callable[[ClaimPlan, RequestData], list[Candidate]],
) -> list[ClaimPlan]:
    """Validate claims like upstream's `Allocate` and build their plans.

    `all_devices_for` resolves an `All` request to its fixed device list (it
    raises for incomplete/invalid pools). Raises AllocationError for anything
    that makes allocation impossible regardless of the node's devices.
    """
    plans: list[ClaimPlan] = []
    for claim in claims:
        key = claim_key(claim)
        devices_spec = (claim.get("spec") or {}).get("devices") or {}
        plan = ClaimPlan(claim, key, [], [], [])
        min_devices = 0
        for request in devices_spec.get("requests") or []:
            name = request.get("name") or ""
            first_available = request.get("firstAvailable") or []
            has_sub = bool(first_available)
            if has_sub and not features.prioritized_list:
                raise AllocationError(
                    f"claim {key}, request {name}: has subrequests, but the DRAPrioritizedList "
                    "feature is disabled"
                )
            exactly = request.get("exactly")
            if not features.consumable_capacity:
                if exactly is not None and exactly.get("capacity") is not None:
                    raise AllocationError(
                        f"claim {key}, request {name}: has capacity requests, but the "
                        "DRAConsumableCapacity feature is disabled"
                    )
                for sub in first_available:
                    if sub.get("capacity") is not None:
                        raise AllocationError(
                            f"claim {key}, subrequest {sub.get('name')}: has capacity requests, "
                            "but the DRAConsumableCapacity feature is disabled"
                        )
            alternatives: list[RequestData] = []
            if has_sub:
                for sub in first_available:
                    data = RequestData(sub, sub.get("name") or "", name)
                    _validate(plan, data, classes, features, all_devices_for)
                    alternatives.append(data)
                min_devices += min(data.num_devices for data in alternatives)
            else:
                if exactly is None:
                    raise AllocationError(
                        f"claim {key}, request {name}: has neither exactly nor firstAvailable "
                        "(unsupported request type?)"
                    )
                data = RequestData(exactly, name, None)
                _validate(plan, data, classes, features, all_devices_for)
                alternatives.append(data)
                min_devices += data.num_devices
            plan.requests.append(alternatives)
            plan.has_subrequests.append(has_sub)
            plan.selected.append(0)
        if min_devices > ALLOCATION_RESULTS_MAX_SIZE:
            raise AllocationError(
                f"claim {key}: number of requested devices {min_devices} exceeds the claim "
                f"limit of {ALLOCATION_RESULTS_MAX_SIZE}"
            )
        for index, constraint in enumerate(devices_spec.get("constraints") or []):
            scope = constraint.get("requests") or []
            if constraint.get("matchAttribute"):
                plan.constraints.append(MatchAttribute(constraint["matchAttribute"], scope))
            elif constraint.get("distinctAttribute"):
                if not features.consumable_capacity:
                    raise AllocationError(
                        f"claim {key}, constraint #{index}: distinctAttribute needs the "
                        "DRAConsumableCapacity feature, which is disabled"
                    )
                plan.constraints.append(DistinctAttribute(constraint["distinctAttribute"], scope))
            else:
                raise AllocationError(
                    f"claim {key}, constraint #{index}: empty constraint "
                    "(unsupported constraint type?)"
                )
        plans.append(plan)
    return plans


def _validate(
    plan: ClaimPlan,
    data: RequestData,
    classes: Mapping[str, Mapping[str, Any]],
    features: Features,
    all_devices_for: Callable[[ClaimPlan, RequestData], list[Candidate]],
) -> None:
    where = f"claim {plan.key}, request {data.name}"
    for index, selector in enumerate(data.raw.get("selectors") or []):
        cel = (selector or {}).get("cel")
        if cel is None:
            raise AllocationError(
                f"{where}, selector #{index}: CEL expression empty (unsupported selector type?)"
            )
        data.selectors.append(cel.get("expression") or "")
    if (
        data.parent is None
        and data.raw.get("adminAccess") is not None
        and not features.admin_access
    ):
        raise AllocationError(f"{where}: admin access is requested, but the feature is disabled")
    if not data.class_name:
        raise AllocationError(f"{where}: missing device class name (unsupported request type?)")
    device_class = classes.get(data.class_name)
    if device_class is None:
        raise AllocationError(
            f"{where}: could not retrieve device class {data.class_name}: "
            f"DeviceClass {data.class_name} not found"
        )
    data.class_raw = device_class
    for index, selector in enumerate((device_class.get("spec") or {}).get("selectors") or []):
        cel = (selector or {}).get("cel")
        if cel is None:
            raise AllocationError(
                f"class {data.class_name}: selector #{index}: CEL expression empty "
                "(unsupported selector type?)"
            )
        data.class_selectors.append(cel.get("expression") or "")
    capacity = data.raw.get("capacity")
    if capacity is not None:
        data.capacity = {
            name: to_quantity(value, f"{where}: capacity.requests[{name}]")
            for name, value in (capacity.get("requests") or {}).items()
        }
    if data.mode == EXACT_COUNT:
        data.num_devices = data.count
    elif data.mode == ALL:
        data.all_devices = all_devices_for(plan, data)
        data.num_devices = len(data.all_devices)
    else:
        raise AllocationError(f"{where}: unsupported count mode {data.mode}")
