"""Writing `status.allocation` exactly as kube-scheduler does.

Once the search has picked devices, each claim gets an AllocationResult:
`devices.results[]` in allocation order, `devices.config[]` with the DeviceClass
configs first (`FromClass`, one entry per class listing the requests that used
it) and then the claim's own configs (`FromClaim`), and a `nodeSelector` that
says where the allocation is usable. The 1.34/1.35 quirk is kept: a claim
config naming two requests is appended once per matching request.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

from dra_driver.errors import AllocationError
from dra_driver.kube.objects import (
    AllocationResult,
    DeviceAllocationConfiguration,
    DeviceAllocationResult,
    DeviceRequestAllocationResult,
    NodeSelector,
    NodeSelectorRequirement,
    NodeSelectorTerm,
)
from dra_driver.kube.quantity import Quantity
from dra_driver.scheduling.allocator.pools import Candidate
from dra_driver.scheduling.allocator.requests import ClaimPlan, RequestData


@dataclass(slots=True)
class PickedDevice:
    """One device picked for a request during the search."""

    candidate: Candidate
    request: RequestData
    consumed: dict[str, Quantity] | None  # set for multi-allocatable devices only


def allocation_result(
    plan: ClaimPlan,
    picked: Sequence[PickedDevice],
    node_name: str,
    *,
    binding_conditions: bool,
    consumable_capacity: bool,
    share_id: Callable[[], str],
) -> AllocationResult:
    """The AllocationResult dict for one claim."""
    results = [
        _device_result(
            entry,
            binding_conditions=binding_conditions,
            consumable_capacity=consumable_capacity,
            share_id=share_id,
        )
        for entry in picked
    ]
    devices: DeviceAllocationResult = {}
    if results:
        devices["results"] = results
    config = _configs(plan)
    if config:
        devices["config"] = config
    allocation: AllocationResult = {"devices": devices}
    selector = _node_selector(plan, picked, node_name)
    if selector is not None:
        allocation["nodeSelector"] = selector
    return allocation


def _device_result(
    entry: PickedDevice,
    *,
    binding_conditions: bool,
    consumable_capacity: bool,
    share_id: Callable[[], str],
) -> DeviceRequestAllocationResult:
    device = entry.candidate.device
    request = entry.request
    result: DeviceRequestAllocationResult = {
        "request": request.full_name,
        "driver": device.id[0],
        "pool": device.id[1],
        "device": device.id[2],
    }
    if request.admin:
        result["adminAccess"] = True
    if request.tolerations:
        result["tolerations"] = [copy.deepcopy(dict(t)) for t in request.tolerations]
    if binding_conditions:
        if device.binding_conditions:
            result["bindingConditions"] = list(device.binding_conditions)
        if device.binding_failure_conditions:
            result["bindingFailureConditions"] = list(device.binding_failure_conditions)
    if consumable_capacity and entry.consumed is not None:
        result["shareID"] = share_id()
        if entry.consumed:
            result["consumedCapacity"] = {
                name: str(amount) for name, amount in entry.consumed.items()
            }
    return result


def _configs(plan: ClaimPlan) -> list[DeviceAllocationConfiguration]:
    config: list[DeviceAllocationConfiguration] = []
    class_ranges: dict[str, tuple[int, int]] = {}
    for index, alternatives in enumerate(plan.requests):
        request = alternatives[plan.selected[index]]
        existing = class_ranges.get(request.class_name)
        if existing is not None:
            for position in range(*existing):
                config[position]["requests"].append(request.full_name)
            continue
        start = len(config)
        for entry in (request.class_raw.get("spec") or {}).get("config") or []:
            config.append(_config_entry("FromClass", [request.full_name], entry))
        class_ranges[request.class_name] = (start, len(config))
    devices_spec = (plan.raw.get("spec") or {}).get("devices") or {}
    for entry in devices_spec.get("config") or []:
        names = entry.get("requests") or []
        if not names:
            config.append(_config_entry("FromClaim", None, entry))
            continue
        # 1.34/1.35: appended once per request it names (duplicates included).
        for index, alternatives in enumerate(plan.requests):
            base = alternatives[0].base_name
            if base in names:
                config.append(_config_entry("FromClaim", list(names), entry))
                continue
            if not plan.has_subrequests[index]:
                continue
            if alternatives[plan.selected[index]].full_name in names:
                config.append(_config_entry("FromClaim", list(names), entry))
    return config


def _config_entry(
    source: str, requests: list[str] | None, entry: Mapping[str, Any]
) -> DeviceAllocationConfiguration:
    result: dict[str, Any] = {"source": source}
    if requests:
        result["requests"] = requests
    for key, value in entry.items():
        if key != "requests":
            result[key] = copy.deepcopy(value)
    return cast(DeviceAllocationConfiguration, result)  # the claim's own fields, copied


def _node_selector(
    plan: ClaimPlan, picked: Sequence[PickedDevice], node_name: str
) -> NodeSelector | None:
    fields: list[Mapping[str, Any]] = []
    expressions: list[Mapping[str, Any]] = []
    for entry in picked:
        device = entry.candidate.device
        slice_ = device.slice
        if slice_.per_device:
            name = device.raw.get("nodeName") or ""
            selector = device.raw.get("nodeSelector")
        else:
            name = slice_.node_name
            selector = slice_.node_selector
        if name or device.binds_to_node:
            return {
                "nodeSelectorTerms": [
                    {
                        "matchFields": [
                            {"key": "metadata.name", "operator": "In", "values": [node_name]}
                        ]
                    }
                ]
            }
        if selector is None:
            continue
        terms = selector.get("nodeSelectorTerms") or []
        if len(terms) > 1:
            raise AllocationError(
                f"create NodeSelector for claim {plan.key}: unsupported ResourceSlice.NodeSelector "
                f"with {len(terms)} terms"
            )
        if terms:
            _merge(terms[0].get("matchFields") or [], fields)
            _merge(terms[0].get("matchExpressions") or [], expressions)
    if not fields and not expressions:
        return None
    term: NodeSelectorTerm = {}
    if expressions:
        term["matchExpressions"] = [_requirement(r) for r in expressions]
    if fields:
        term["matchFields"] = [_requirement(r) for r in fields]
    return {"nodeSelectorTerms": [term]}


def _requirement(raw: Mapping[str, Any]) -> NodeSelectorRequirement:
    """A copy of a slice's node selector requirement (checked by `controller.limits`)."""
    return cast(NodeSelectorRequirement, copy.deepcopy(dict(raw)))


def _merge(new: Sequence[Mapping[str, Any]], into: list[Mapping[str, Any]]) -> None:
    for requirement in new:
        values = set(requirement.get("values") or [])
        if not any(
            existing.get("key") == requirement.get("key")
            and existing.get("operator") == requirement.get("operator")
            and set(existing.get("values") or []) == values
            for existing in into
        ):
            into.append(requirement)
