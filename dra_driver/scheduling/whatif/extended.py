"""Extended resources backed by DRA (KEP-5004): the special claim kube-scheduler builds.

With the `DRAExtendedResource` gate on (default from Kubernetes 1.36, GA in
1.37), a container may ask for a count-only extended resource such as
`nvidia.com/gpu: 2`, and a DeviceClass serves it when its
`spec.extendedResourceName` names it; every class also serves its implicit
name `deviceclass.resource.kubernetes.io/<class>`. The scheduler then builds
one ResourceClaim per pod and records it in the pod's
`status.extendedResourceClaimStatus`. This module builds the same objects,
following kubernetes `pkg/scheduler/framework/plugins/dynamicresources/`
(`extendeddynamicresources.go`, `extended/cache.go`; facts and commit in
docs/kubernetes-versions.md):

* the claim: `generateName: <pod>-extended-resources-` (the apiserver adds
  five random characters; here derived from the pod name, as for claims
  from templates), annotation `resource.kubernetes.io/extended-resource-claim:
  "true"`, the pod as controlling owner;
* one ExactCount request per container and resource, named
  `container-<i>-request-<j>`: `i` indexes initContainers then containers,
  `j` the resource among the container's sorted request names; requests
  sorted by name. A non-sidecar init container first reuses the requests of
  the long-lived containers after it; of the init containers' own requests
  only the largest is kept and the others map to it;
* `requestMappings` of `{containerName, resourceName, requestName}`.

The simulator's nodes advertise no device-plugin resources, so every mapped
resource is served through DRA; a resource no class maps (or any, with the
gate off) cannot be placed, as on a node without a device plugin for it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from dra_driver.errors import ConfigError
from dra_driver.kube.objects import Obj
from dra_driver.kube.quantity import parse_quantity
from dra_driver.scheduling.whatif.claims import PodClaim, claim_uid, unique_generated_name

DEVICE_CLASS_PREFIX: Final = "deviceclass.resource.kubernetes.io/"  # ResourceDeviceClassPrefix
EXTENDED_RESOURCE_CLAIM_ANNOTATION: Final = "resource.kubernetes.io/extended-resource-claim"
#: How the pod's special claim is labelled where a pod claim's name would be
#: (the scheduler's in-memory name before the claim is written).
EXTENDED_RESOURCES_CLAIM: Final = "<extended-resources>"


def class_mapping(classes: Iterable[Mapping[str, Any]]) -> dict[str, str]:
    """Extended resource name -> DeviceClass name, as the scheduler's cache keeps it.

    Each class maps its implicit name and, when set, `spec.extendedResourceName`;
    when two classes name the same resource, the later one wins (the cache
    keeps the last class event).
    """
    mapping: dict[str, str] = {}
    for device_class in classes:
        name = str((device_class.get("metadata") or {}).get("name") or "")
        if not name:
            continue
        explicit = (device_class.get("spec") or {}).get("extendedResourceName")
        if explicit:
            mapping[str(explicit)] = name
        mapping[DEVICE_CLASS_PREFIX + name] = name
    return mapping


def is_extended_resource_name(name: str) -> bool:
    """v1helper.IsExtendedResourceName, or the implicit DeviceClass prefix."""
    if name.startswith(DEVICE_CLASS_PREFIX):
        return True
    return "/" in name and "kubernetes.io/" not in name and not name.startswith("requests.")


@dataclass(frozen=True)
class ExtendedClaim:
    """The special claim of one pod and the pod's `status.extendedResourceClaimStatus`."""

    claim: Obj
    status: Obj


@dataclass
class _Request:
    name: str
    class_name: str
    count: int


def _containers(pod: Mapping[str, Any]) -> tuple[list[Mapping[str, Any]], int]:
    spec = pod.get("spec") or {}
    init: list[Mapping[str, Any]] = [
        c for c in spec.get("initContainers") or [] if isinstance(c, dict)
    ]
    regular: list[Mapping[str, Any]] = [
        c for c in spec.get("containers") or [] if isinstance(c, dict)
    ]
    return init + regular, len(init)


def _requests_of(container: Mapping[str, Any]) -> dict[str, Any]:
    """Requests, defaulted from limits as the apiserver does for extended resources."""
    resources = container.get("resources") or {}
    merged = dict(resources.get("limits") or {})
    merged.update(resources.get("requests") or {})
    return merged


def _count(value: Any) -> int:
    quantity = parse_quantity(str(value)).value
    whole = int(quantity)
    return whole if whole == quantity else 0


def requested_extended_resources(pod: Mapping[str, Any]) -> list[str]:
    """The pod's extended resource names with a non-zero request, sorted."""
    containers, _ = _containers(pod)
    names = {
        name
        for container in containers
        for name, value in _requests_of(container).items()
        if is_extended_resource_name(str(name)) and _count(value) > 0
    }
    return sorted(names)


def _request_for(
    index: int,
    container: Mapping[str, Any],
    resource: str,
    class_name: str,
    reusable: Sequence[_Request | None],
) -> tuple[_Request | None, list[Obj]]:
    """createResourceRequestAndMappings: one container's request for one resource."""
    requests = _requests_of(container)
    if resource not in requests:
        return None, []
    wanted = _count(requests[resource])
    if wanted == 0:
        return None, []
    name = str(container.get("name") or "")
    mappings: list[Obj] = []
    total = 0
    for request in reusable:
        if request is None:
            continue
        total += request.count
        mappings.append(
            {"containerName": name, "resourceName": resource, "requestName": request.name}
        )
        if total >= wanted:
            return None, mappings
    position = sorted(str(key) for key in requests).index(resource)
    request_name = f"container-{index}-request-{position}"
    mappings.append({"containerName": name, "resourceName": resource, "requestName": request_name})
    return _Request(request_name, class_name, wanted - total), mappings


def requests_and_mappings(
    pod: Mapping[str, Any], resources: Iterable[str], mapping: Mapping[str, str]
) -> tuple[list[_Request], list[Obj]]:
    """createRequestsAndMappings for the resources served through DRA."""
    containers, init_count = _containers(pod)
    long_lived: list[int] = []
    short_lived: list[int] = []
    for index, container in enumerate(containers):
        sidecar = container.get("restartPolicy") == "Always"
        (short_lived if index < init_count and not sidecar else long_lived).append(index)
    all_requests: list[_Request] = []
    all_mappings: list[Obj] = []
    for resource in sorted(resources):
        class_name = mapping.get(resource)
        if class_name is None:
            continue
        long_requests: list[_Request | None] = [None] * len(containers)
        long_mappings: list[Obj] = []
        for index in long_lived:
            request, found = _request_for(index, containers[index], resource, class_name, [])
            long_requests[index] = request
            long_mappings.extend(found)
        largest: _Request | None = None
        short_names: set[str] = set()
        short_mappings: list[Obj] = []
        for index in short_lived:
            request, found = _request_for(
                index, containers[index], resource, class_name, long_requests[index:]
            )
            if request is not None:
                short_names.add(request.name)
                if largest is None or largest.count < request.count:
                    largest = request
            short_mappings.extend(found)
        if largest is not None and len(short_names) > 1:
            short_names.discard(largest.name)
            for entry in short_mappings:
                if entry["requestName"] in short_names:
                    entry["requestName"] = largest.name
        if largest is not None:
            all_requests.append(largest)
        all_requests.extend(request for request in long_requests if request is not None)
        all_mappings.extend(long_mappings)
        all_mappings.extend(short_mappings)
    all_requests.sort(key=lambda request: request.name)
    return all_requests, all_mappings


def extended_resource_claim(
    pod: Mapping[str, Any],
    mapping: Mapping[str, str],
    *,
    taken: Mapping[str, object],
) -> ExtendedClaim | None:
    """The special claim for `pod`, or None when it asks for no DRA-backed resource.

    `taken` holds the "ns/name" keys in use; the generated name avoids them.
    """
    resources = [name for name in requested_extended_resources(pod) if name in mapping]
    if not resources:
        return None
    requests, mappings = requests_and_mappings(pod, resources, mapping)
    meta = pod.get("metadata") or {}
    namespace = str(meta.get("namespace"))
    pod_name = str(meta.get("name"))
    base, name = unique_generated_name(
        f"{pod_name}-extended-resources-",
        namespace,
        f"{namespace}/{pod_name}/{EXTENDED_RESOURCES_CLAIM}",
        taken,
    )
    claim: Obj = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "generateName": base,
            "uid": claim_uid(namespace, name),
            "annotations": {EXTENDED_RESOURCE_CLAIM_ANNOTATION: "true"},
            "ownerReferences": [
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "name": pod_name,
                    "uid": str(meta.get("uid") or ""),
                    "controller": True,
                }
            ],
        },
        "spec": {
            "devices": {
                "requests": [
                    {
                        "name": request.name,
                        "exactly": {
                            "deviceClassName": request.class_name,
                            "allocationMode": "ExactCount",
                            "count": request.count,
                        },
                    }
                    for request in requests
                ]
            }
        },
    }
    status: Obj = {"resourceClaimName": name, "requestMappings": mappings}
    return ExtendedClaim(claim, status)


def find_extended_resource_claim(pod: Mapping[str, Any], claims: Mapping[str, Obj]) -> str:
    """The "ns/name" of the pod's special claim among `claims`, or "".

    As the scheduler's findExtendedResourceClaim: the annotation is "true" and
    the pod (name and UID) is its controlling owner.
    """
    meta = pod.get("metadata") or {}
    for key, claim in claims.items():
        claim_meta = claim.get("metadata") or {}
        if (claim_meta.get("annotations") or {}).get(EXTENDED_RESOURCE_CLAIM_ANNOTATION) != "true":
            continue
        if claim_meta.get("namespace") != meta.get("namespace"):
            continue
        for owner in claim_meta.get("ownerReferences") or []:
            if (
                owner.get("controller")
                and owner.get("name") == meta.get("name")
                and owner.get("uid") == meta.get("uid")
            ):
                return key
    return ""


def attach_extended_resource_claim(
    pod: Obj,
    mapping: Mapping[str, str],
    claims: dict[str, Obj],
    pod_claims: list[PodClaim],
    *,
    unserved_is_problem: bool = True,
) -> tuple[Obj, str]:
    """Give the pod its special claim (an existing one, else a new one in `claims`).

    Appends the claim to `pod_claims` and returns the pod with its
    `status.extendedResourceClaimStatus` and "", or the pod and why it cannot
    run: an extended resource no DeviceClass in `mapping` serves, when
    `unserved_is_problem` (simulated nodes have no device plugin; a real
    cluster's nodes may).
    """
    meta = pod.get("metadata") or {}
    where = f"Pod {meta.get('namespace')}/{meta.get('name')}"
    try:
        wanted = requested_extended_resources(pod)
    except ConfigError as exc:
        return pod, f"{where}: container resources: {exc}"
    unserved = [name for name in wanted if name not in mapping]
    if unserved and unserved_is_problem:
        why = (
            "no DeviceClass has it as extendedResourceName"
            if mapping
            else "the DRAExtendedResource feature gate is off"
        )
        return pod, (
            f"Insufficient {', '.join(unserved)}: no simulated node has a device plugin for it "
            f"and {why}"
        )
    if len(unserved) == len(wanted):
        return pod, ""
    existing = find_extended_resource_claim(pod, claims)
    if existing:
        pod_claims.append(PodClaim(EXTENDED_RESOURCES_CLAIM, existing, from_template=True))
        return pod, ""
    made = extended_resource_claim(pod, mapping, taken=claims)
    if made is None:
        return pod, ""
    key = f"{made.claim['metadata']['namespace']}/{made.claim['metadata']['name']}"
    claims[key] = made.claim
    pod_claims.append(PodClaim(EXTENDED_RESOURCES_CLAIM, key, from_template=True))
    status = {**(pod.get("status") or {}), "extendedResourceClaimStatus": made.status}
    return {**pod, "status": status}, ""
