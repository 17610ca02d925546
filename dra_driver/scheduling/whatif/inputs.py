"""Sorting the objects a simulation is given into what the scheduler would see.

A manifest mixes workloads (Pods, Deployments, Jobs, ReplicaSets,
StatefulSets, Kubeflow MPIJobs), the claims and templates they use, cluster objects
(DeviceClasses, ResourceSlices, Nodes, and Namespaces, whose labels decide
admin access) and things the simulator has no opinion about (Services,
ConfigMaps). `collect_inputs` keeps the first kind in document order (the
order pods are placed in), indexes the second by namespace/name, and counts
the rest so the command can say once what it ignored instead of failing on it.

A `resource.nvidia.com/v1beta1` ComputeDomain is decoded strictly and stands
for the ResourceClaimTemplate NVIDIA's controller creates for it
(`dra_driver.compute_domain.templates`), so pods naming that template get
their IMEX channel claims placed; a ComputeDomain without a UID gets a stable
one made from its namespace and name, as the API server would give it one.

Older API versions are accepted where their shape is easy to map:
resource.k8s.io/v1beta2 is v1's shape; v1beta1 requests and slice devices are
converted (`exactly` and `basic` wrappers). Everything else of resource.k8s.io
is ignored like an unknown kind.
"""

from __future__ import annotations

import copy
import dataclasses
import uuid
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from dra_driver.compute_domain.api import ComputeDomain, decode_compute_domain
from dra_driver.compute_domain.names import GROUP as COMPUTE_DOMAIN_GROUP
from dra_driver.compute_domain.names import KIND as COMPUTE_DOMAIN_KIND
from dra_driver.compute_domain.templates import workload_claim_template
from dra_driver.errors import ConfigError
from dra_driver.kube.objects import Obj
from dra_driver.scheduling.whatif.documents import SourcedObject

RESOURCE_GROUP: Final = "resource.k8s.io"
_V1_SHAPED: Final = frozenset({"v1", "v1beta2"})
_V1BETA1: Final = "v1beta1"

WORKLOAD_KINDS: Final = frozenset(
    {"Pod", "Deployment", "ReplicaSet", "StatefulSet", "Job", "MPIJob"}
)
_WORKLOAD_GROUPS: Final = {
    "Pod": ("",),
    "Deployment": ("apps",),
    "ReplicaSet": ("apps",),
    "StatefulSet": ("apps",),
    "Job": ("batch",),
    "MPIJob": ("kubeflow.org",),
}
_WORKLOAD_VERSIONS: Final = {"MPIJob": "v2beta1"}  # the operator's v1 has another shape
_RESOURCE_KINDS: Final = frozenset(
    {"ResourceClaim", "ResourceClaimTemplate", "DeviceClass", "ResourceSlice"}
)


@dataclass
class SimulationInputs:
    """The objects of a simulation, sorted by role.

    `items` are the workloads and standalone ResourceClaims in document order;
    `claims`/`templates` index claims and templates by (namespace, name);
    `ignored` counts the objects of other kinds (by kind).
    """

    items: list[SourcedObject] = field(default_factory=list)
    claims: dict[tuple[str, str], SourcedObject] = field(default_factory=dict)
    templates: dict[tuple[str, str], SourcedObject] = field(default_factory=dict)
    classes: list[Obj] = field(default_factory=list)
    slices: list[Obj] = field(default_factory=list)
    nodes: list[Obj] = field(default_factory=list)
    namespaces: dict[str, Obj] = field(default_factory=dict)
    compute_domains: list[ComputeDomain] = field(default_factory=list)
    ignored: Counter[str] = field(default_factory=Counter)


def api_group(obj: Mapping[str, Any]) -> tuple[str, str]:
    """(group, version) of an object's apiVersion ("" group for core v1)."""
    api_version = str(obj.get("apiVersion") or "")
    if "/" in api_version:
        group, version = api_version.split("/", 1)
        return group, version
    return "", api_version


def object_name(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("name") or "")


def collect_inputs(
    objects: Sequence[SourcedObject], *, default_namespace: str = "default"
) -> SimulationInputs:
    """Sort `objects` (see the module docstring).

    Namespaced objects without a namespace get `default_namespace`. Raises
    ConfigError, naming the document, for objects without a name and for two
    objects of the same kind and name.
    """
    inputs = SimulationInputs()
    seen: dict[tuple[str, str, str], str] = {}
    for item in objects:
        obj = item.obj
        kind = str(obj.get("kind") or "")
        group, version = api_group(obj)
        if (
            kind in WORKLOAD_KINDS
            and group in _WORKLOAD_GROUPS[kind]
            and version == _WORKLOAD_VERSIONS.get(kind, version)
        ):
            normalized = _with_namespace(obj, default_namespace, item.source)
            _check_unique(seen, kind, normalized, item.source)
            inputs.items.append(dataclasses.replace(item, obj=normalized))
        elif kind == "Namespace" and group == "":
            if not object_name(obj):
                raise ConfigError(f"{item.source}: Namespace has no metadata.name")
            _check_unique(seen, kind, obj, item.source)
            inputs.namespaces[object_name(obj)] = dict(obj)
        elif kind == "Node" and group == "":
            if not object_name(obj):
                raise ConfigError(f"{item.source}: Node has no metadata.name")
            _check_unique(seen, kind, obj, item.source)
            inputs.nodes.append(dict(obj))
        elif kind == COMPUTE_DOMAIN_KIND and group == COMPUTE_DOMAIN_GROUP:
            _add_compute_domain(inputs, seen, item, namespace=default_namespace)
        elif kind in _RESOURCE_KINDS and group == RESOURCE_GROUP and version in _V1_SHAPED:
            _add_resource(inputs, seen, kind, dict(obj), item, namespace=default_namespace)
        elif kind in _RESOURCE_KINDS and group == RESOURCE_GROUP and version == _V1BETA1:
            converted = from_v1beta1(kind, obj)
            _add_resource(inputs, seen, kind, converted, item, namespace=default_namespace)
        else:
            api_version = obj.get("apiVersion") or "?"
            inputs.ignored[kind if api_version == "v1" else f"{kind} ({api_version})"] += 1
    return inputs


def _add_resource(
    inputs: SimulationInputs,
    seen: dict[tuple[str, str, str], str],
    kind: str,
    obj: Obj,
    item: SourcedObject,
    *,
    namespace: str,
) -> None:
    source = item.source
    if kind in ("ResourceClaim", "ResourceClaimTemplate"):
        obj = _with_namespace(obj, namespace, source)
        _check_unique(seen, kind, obj, source)
        meta = obj["metadata"]
        key = (str(meta["namespace"]), str(meta["name"]))
        entry = dataclasses.replace(item, obj=obj)
        if kind == "ResourceClaim":
            inputs.claims[key] = entry
            inputs.items.append(entry)
        else:
            inputs.templates[key] = entry
        return
    if not object_name(obj):
        raise ConfigError(f"{source}: {kind} has no metadata.name")
    _check_unique(seen, kind, obj, source)
    if kind == "DeviceClass":
        inputs.classes.append(obj)
    else:
        inputs.slices.append(obj)


def _add_compute_domain(
    inputs: SimulationInputs,
    seen: dict[tuple[str, str, str], str],
    item: SourcedObject,
    *,
    namespace: str,
) -> None:
    """The domain, and the workload template the controller would create for it."""
    obj = copy.deepcopy(dict(item.obj))
    metadata = obj.get("metadata")
    if isinstance(metadata, dict):
        metadata.setdefault("namespace", namespace)
        name = metadata.get("name")
        if not metadata.get("uid") and isinstance(name, str):
            key = f"{COMPUTE_DOMAIN_GROUP}/{metadata['namespace']}/{name}"
            metadata["uid"] = str(uuid.uuid5(uuid.NAMESPACE_URL, key))
    domain = decode_compute_domain(obj, f"{item.source}:")
    _check_unique(seen, COMPUTE_DOMAIN_KIND, obj, item.source)
    inputs.compute_domains.append(domain)
    template = workload_claim_template(domain)
    _add_resource(
        inputs,
        seen,
        "ResourceClaimTemplate",
        template,
        dataclasses.replace(item, source=f"{item.source} ({domain.ref})", obj=template),
        namespace=namespace,
    )


def _with_namespace(obj: Mapping[str, Any], default_namespace: str, source: str) -> Obj:
    kind = obj.get("kind")
    meta = dict(obj.get("metadata") or {})
    if not meta.get("name"):
        raise ConfigError(f"{source}: {kind} has no metadata.name")
    if not meta.get("namespace"):
        meta["namespace"] = default_namespace
    return {**obj, "metadata": meta}


def _check_unique(
    seen: dict[tuple[str, str, str], str], kind: str, obj: Mapping[str, Any], source: str
) -> None:
    meta = obj.get("metadata") or {}
    key = (kind, str(meta.get("namespace") or ""), str(meta.get("name") or ""))
    first = seen.get(key)
    if first is not None:
        where = f"{key[1]}/{key[2]}" if key[1] else key[2]
        raise ConfigError(f"{source}: {kind} {where} is also defined in {first}")
    seen[key] = source


# ---------------------------------------------------------------- v1beta1


def from_v1beta1(kind: str, obj: Mapping[str, Any]) -> Obj:
    """A resource.k8s.io/v1beta1 object in v1 shape (requests, slice devices)."""
    converted: Obj = copy.deepcopy(dict(obj))
    converted["apiVersion"] = f"{RESOURCE_GROUP}/v1"
    if kind == "ResourceClaim":
        _convert_claim_spec(converted.get("spec"))
    elif kind == "ResourceClaimTemplate":
        _convert_claim_spec((converted.get("spec") or {}).get("spec"))
    elif kind == "ResourceSlice":
        for device in (converted.get("spec") or {}).get("devices") or []:
            basic = device.pop("basic", None)
            if isinstance(basic, dict):
                device.update(basic)
    return converted


_EXACT_FIELDS: Final = (
    "deviceClassName",
    "selectors",
    "allocationMode",
    "count",
    "adminAccess",
    "tolerations",
    "capacity",
)


def _convert_claim_spec(spec: Any) -> None:
    if not isinstance(spec, dict):
        return
    for request in (spec.get("devices") or {}).get("requests") or []:
        if not isinstance(request, dict) or "exactly" in request:
            continue
        exactly = {name: request.pop(name) for name in _EXACT_FIELDS if name in request}
        # As upstream's converter: any main-request field makes an `exactly`, beside a
        # `firstAvailable` too (which validation then refuses: both set).
        if exactly or not request.get("firstAvailable"):
            request["exactly"] = exactly
