"""Consumable capacity (DRAConsumableCapacity): how much of a device a request uses.

A device with `allowMultipleAllocations: true` can be shared by several
requests, each consuming part of its capacities. A request's amount is rounded
up by the capacity's `requestPolicy` (validRange: up to `min`, then to `min +
n*step`; validValues: the smallest valid value at least as large), unrequested
capacities consume the policy default or the whole value, and the sum over all
shares may not exceed the device's value. Follows upstream
`CmpRequestOverCapacity` / `GetConsumedCapacityFromRequest` (the integer
`Value()` arithmetic of Kubernetes 1.34/1.35 for steps).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, cast

from dra_driver.kube.quantity import Quantity
from dra_driver.scheduling.allocator.pools import DeviceRecord
from dra_driver.scheduling.allocator.quantities import to_quantity
from dra_driver.scheduling.allocator.trace import (
    CapacityInsufficient,
    CapacityPolicyViolated,
    CapacityUndefined,
    Reason,
)

_ZERO = Fraction(0)


@dataclass(frozen=True, slots=True)
class CapacitySpec:
    """One device capacity with its parsed request policy."""

    value: Quantity
    has_policy: bool = False
    default: Quantity | None = None
    valid_values: tuple[Quantity, ...] | None = None
    range_min: Quantity | None = None
    range_max: Quantity | None = None
    range_step: Quantity | None = None
    has_range: bool = False


def capacity_specs(device: DeviceRecord) -> dict[str, CapacitySpec]:
    """The device's capacities, parsed once per device record."""
    if device.parsed_capacity is None:
        where = f"ResourceSlice {device.slice.name}: device {device.name}: capacity"
        device.parsed_capacity = {
            name: _parse_spec(raw, f"{where} {name}") for name, raw in device.capacity.items()
        }
    return cast(dict[str, CapacitySpec], device.parsed_capacity)


def _parse_spec(raw: Mapping[str, Any], where: str) -> CapacitySpec:
    value = to_quantity(raw.get("value", "0"), f"{where}.value")
    policy = raw.get("requestPolicy")
    if policy is None:
        return CapacitySpec(value)
    default = policy.get("default")
    valid_values = policy.get("validValues")
    valid_range = policy.get("validRange")
    return CapacitySpec(
        value,
        has_policy=True,
        default=None if default is None else to_quantity(default, f"{where}.requestPolicy.default"),
        valid_values=None
        if valid_values is None
        else tuple(
            to_quantity(v, f"{where}.requestPolicy.validValues[{i}]")
            for i, v in enumerate(valid_values)
        ),
        range_min=_optional(valid_range, "min", where),
        range_max=_optional(valid_range, "max", where),
        range_step=_optional(valid_range, "step", where),
        has_range=valid_range is not None,
    )


def _optional(valid_range: Mapping[str, Any] | None, key: str, where: str) -> Quantity | None:
    if valid_range is None or valid_range.get(key) is None:
        return None
    return to_quantity(valid_range[key], f"{where}.requestPolicy.validRange.{key}")


def consumed_amount(requested: Quantity | None, spec: CapacitySpec) -> Quantity:
    """What a request consumes of one capacity after applying the request policy."""
    if requested is None:
        return spec.default if spec.default is not None else spec.value
    if not spec.has_policy:
        return requested
    if spec.range_min is not None:
        minimum = spec.range_min
        if requested.value < minimum.value:
            return minimum
        step = spec.range_step
        if step is None:
            return requested
        minimum_int, step_int = minimum.ceil_int(), step.ceil_int()
        if step_int <= 0:
            return requested
        # requested >= min here, so this is a ceiling division of a non-negative number
        steps = -(-(requested.ceil_int() - minimum_int) // step_int)
        return Quantity(Fraction(minimum_int + step_int * steps), step.fmt)
    if spec.valid_values is not None:
        for valid in spec.valid_values:
            if requested.value <= valid.value:
                return valid
    return requested


def violates_policy(amount: Quantity, spec: CapacitySpec) -> bool:
    """Whether a (rounded) amount is not allowed by the capacity's request policy."""
    if not spec.has_policy:
        return False
    if spec.default is not None and amount.value == spec.default.value:
        return False
    if spec.has_range:
        if spec.range_max is not None and amount.value > spec.range_max.value:
            return True
        if spec.range_step is not None:
            minimum = spec.range_min.ceil_int() if spec.range_min is not None else 0
            step = spec.range_step.ceil_int()
            return step != 0 and math.fmod(amount.ceil_int() - minimum, step) != 0
        return False
    if spec.valid_values:
        return all(amount.value != valid.value for valid in spec.valid_values)
    return False


def check_capacity(
    device: DeviceRecord,
    requests: Mapping[str, Quantity] | None,
    allocated: Mapping[str, Fraction] | None,
    allocating: Mapping[str, Fraction] | None,
) -> Reason | None:
    """None if the request fits into what is left of the device's capacities."""
    specs = capacity_specs(device)
    if requests:
        missing = tuple(sorted(name for name in requests if name not in specs))
        if missing:
            return CapacityUndefined(missing)
    for name in sorted(specs):
        spec = specs[name]
        amount = consumed_amount(requests.get(name) if requests else None, spec)
        if violates_policy(amount, spec):
            return CapacityPolicyViolated(name, str(amount))
        in_use = (allocated.get(name, _ZERO) if allocated else _ZERO) + (
            allocating.get(name, _ZERO) if allocating else _ZERO
        )
        if in_use + amount.value > spec.value.value:
            return CapacityInsufficient(
                name,
                str(amount),
                str(Quantity(in_use, spec.value.fmt)),
                str(spec.value),
            )
    return None


def consumed_capacity(
    device: DeviceRecord, requests: Mapping[str, Quantity] | None
) -> dict[str, Quantity]:
    """What one share of a multi-allocatable device consumes, per capacity."""
    return {
        name: consumed_amount(requests.get(name) if requests else None, spec)
        for name, spec in capacity_specs(device).items()
    }
