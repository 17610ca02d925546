"""The shapes of the Kubernetes API bodies dra-gpu reads and writes.

`Obj` is any API object in its JSON form, as the kubernetes client and our
YAML readers hand it over; objects from outside are checked field by field
where they are read (`dra_driver.claims.allocated`, `controller.limits`), so they stay
`Obj`. The bodies dra-gpu itself builds most, a claim's
`status.allocation` (written by the allocator exactly as kube-scheduler
does) and the ResourceClaims of the demo, are TypedDicts of resource.k8s.io/v1,
so mypy checks their field names.
"""

from __future__ import annotations

import pickle
from typing import Any, NotRequired, TypedDict, TypeVar

Obj = dict[str, Any]
"""An API object in its JSON form."""

_T = TypeVar("_T")


def deep_copy(value: _T) -> _T:
    """A deep copy of an API object or part of one: what `copy.deepcopy` gives, in a
    quarter of its time (pickled and unpickled, in C), for `simulate`'s 5,000 claims."""
    copied: _T = pickle.loads(pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL))
    return copied


class ObjectMeta(TypedDict, total=False):
    """metav1.ObjectMeta, the fields dra-gpu sets or reads."""

    name: str
    namespace: str
    uid: str
    generateName: str
    resourceVersion: str
    labels: dict[str, str]
    annotations: dict[str, str]
    ownerReferences: list[Obj]


class NodeSelectorRequirement(TypedDict):
    """core/v1 NodeSelectorRequirement."""

    key: str
    operator: str
    values: NotRequired[list[str]]


class NodeSelectorTerm(TypedDict, total=False):
    """core/v1 NodeSelectorTerm."""

    matchExpressions: list[NodeSelectorRequirement]
    matchFields: list[NodeSelectorRequirement]


class NodeSelector(TypedDict):
    """core/v1 NodeSelector."""

    nodeSelectorTerms: list[NodeSelectorTerm]


class DeviceRequestAllocationResult(TypedDict):
    """One allocated device: `status.allocation.devices.results[]`."""

    request: str
    driver: str
    pool: str
    device: str
    adminAccess: NotRequired[bool]
    tolerations: NotRequired[list[Obj]]
    bindingConditions: NotRequired[list[str]]
    bindingFailureConditions: NotRequired[list[str]]
    shareID: NotRequired[str]
    consumedCapacity: NotRequired[dict[str, str]]


class DeviceAllocationConfiguration(TypedDict, total=False):
    """`status.allocation.devices.config[]`: a class or claim config and its requests."""

    source: str
    requests: list[str]
    opaque: Obj


class DeviceAllocationResult(TypedDict, total=False):
    """`status.allocation.devices`."""

    results: list[DeviceRequestAllocationResult]
    config: list[DeviceAllocationConfiguration]


class AllocationResult(TypedDict):
    """A claim's `status.allocation`."""

    devices: DeviceAllocationResult
    nodeSelector: NotRequired[NodeSelector]
    allocationTimestamp: NotRequired[str]


class ResourceClaimStatus(TypedDict, total=False):
    """A claim's `status`."""

    allocation: AllocationResult
    reservedFor: list[Obj]
    devices: list[Obj]


class ResourceClaim(TypedDict):
    """resource.k8s.io/v1 ResourceClaim."""

    apiVersion: str
    kind: str
    metadata: ObjectMeta
    spec: Obj
    status: NotRequired[ResourceClaimStatus]
