"""Builders of ResourceSlices, DeviceClasses and ResourceClaims for allocator scenarios."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from dra_driver import DEFAULT_DRIVER_NAME
from dra_driver.errors import CelError


def make_api_attribute(value: Any) -> dict[str, Any]:
    """A DeviceAttribute union from a Python value: bool, int, str, or ("version", "1.2.3")."""
    if isinstance(value, tuple) and len(value) == 2 and value[0] == "version":
        return {"version": value[1]}
    if isinstance(value, bool):
        return {"bool": value}
    if isinstance(value, int):
        return {"int": value}
    return {"string": str(value)}


def make_slice_device(
    name: str,
    *,
    attributes: Mapping[str, Any] | None = None,
    capacity: Mapping[str, str] | None = None,
    consumes: Mapping[str, Mapping[str, str]] | None = None,
    taints: Sequence[Mapping[str, str]] = (),
    allow_multiple_allocations: bool = False,
) -> dict[str, Any]:
    """A ResourceSlice device; `consumes` maps counter set -> counter -> quantity."""
    device: dict[str, Any] = {"name": name}
    if attributes:
        device["attributes"] = {k: make_api_attribute(v) for k, v in attributes.items()}
    if capacity:
        device["capacity"] = {k: {"value": v} for k, v in capacity.items()}
    if consumes:
        device["consumesCounters"] = [
            {"counterSet": set_name, "counters": {k: {"value": v} for k, v in counters.items()}}
            for set_name, counters in consumes.items()
        ]
    if taints:
        device["taints"] = [dict(taint) for taint in taints]
    if allow_multiple_allocations:
        device["allowMultipleAllocations"] = True
    return device


def make_resource_slice(
    name: str,
    *,
    driver: str = DEFAULT_DRIVER_NAME,
    pool: str | None = None,
    node: str | None = None,
    devices: Sequence[Mapping[str, Any]] = (),
    generation: int = 1,
    slice_count: int = 1,
    shared_counters: Mapping[str, Mapping[str, str]] | None = None,
) -> dict[str, Any]:
    """A ResourceSlice for one node (or, with `node=None`, for all nodes)."""
    spec: dict[str, Any] = {
        "driver": driver,
        "pool": {
            "name": pool or node or name,
            "generation": generation,
            "resourceSliceCount": slice_count,
        },
    }
    if node:
        spec["nodeName"] = node
    else:
        spec["allNodes"] = True
    if devices:
        spec["devices"] = [dict(device) for device in devices]
    if shared_counters:
        spec["sharedCounters"] = [
            {"name": set_name, "counters": {k: {"value": v} for k, v in counters.items()}}
            for set_name, counters in shared_counters.items()
        ]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": name},
        "spec": spec,
    }


def make_device_class(
    name: str, *expressions: str, config: Sequence[Mapping[str, Any]] = ()
) -> dict[str, Any]:
    """A DeviceClass with CEL selectors (and optional `opaque` config entries)."""
    spec: dict[str, Any] = {"selectors": [{"cel": {"expression": e}} for e in expressions]}
    if config:
        spec["config"] = [dict(entry) for entry in config]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": name},
        "spec": spec,
    }


def make_device_request(
    name: str,
    device_class: str,
    *,
    count: int | None = 1,
    selectors: Sequence[str] = (),
    allocation_mode: str | None = None,
    admin_access: bool | None = None,
    tolerations: Sequence[Mapping[str, Any]] = (),
    capacity: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """A DeviceRequest with `exactly`."""
    exactly: dict[str, Any] = {"deviceClassName": device_class}
    if allocation_mode:
        exactly["allocationMode"] = allocation_mode
    if count is not None and allocation_mode != "All":
        exactly["count"] = count
    if selectors:
        exactly["selectors"] = [{"cel": {"expression": e}} for e in selectors]
    if admin_access is not None:
        exactly["adminAccess"] = admin_access
    if tolerations:
        exactly["tolerations"] = [dict(t) for t in tolerations]
    if capacity:
        exactly["capacity"] = {"requests": dict(capacity)}
    return {"name": name, "exactly": exactly}


def make_resource_claim(
    name: str,
    *requests: Mapping[str, Any],
    namespace: str = "default",
    constraints: Sequence[Mapping[str, Any]] = (),
    config: Sequence[Mapping[str, Any]] = (),
) -> dict[str, Any]:
    """A ResourceClaim (no status) with the given device requests."""
    devices: dict[str, Any] = {"requests": [dict(r) for r in requests]}
    if constraints:
        devices["constraints"] = [dict(c) for c in constraints]
    if config:
        devices["config"] = [dict(c) for c in config]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"devices": devices},
    }


class PythonSelectors:
    """A selector evaluator for `Allocator(evaluate=...)` that maps expression strings
    to Python predicates over the device view; unknown expressions raise CelError."""

    def __init__(self, predicates: Mapping[str, Callable[[Any], bool]]) -> None:
        self.predicates = dict(predicates)
        self.calls = 0

    def __call__(self, expression: str, device: Any) -> bool:
        self.calls += 1
        predicate = self.predicates.get(expression)
        if predicate is None:
            raise CelError(f"undeclared reference in {expression!r}", expression=expression)
        return predicate(device)
