"""The apiserver's bookkeeping rules for the objects dra-gpu stores, as pure functions.

`LocalCluster` (a YAML directory) and the fake apiserver in `tests.fakes`
must treat writes the way kube-apiserver does, or code tested against them
would break on a real cluster: system metadata (`uid`, `creationTimestamp`,
`generation`, `resourceVersion`) is owned by the server, updates carry
optimistic-concurrency preconditions, `status` of a ResourceClaim is written
only through `/status` (its `devices` checked and pruned by
`dra_driver.kube.device_status`), an update that changes nothing changes
nothing (no new resourceVersion), and the fields of a disabled feature gate
are dropped from a written ResourceSlice (`drop_disabled_fields`). Keeping
those rules here, apart from any I/O, gives both stores one definition to
follow.
"""

from __future__ import annotations

import copy
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Final

from dra_driver.errors import ClusterError, NotFoundError
from dra_driver.kube import device_status
from dra_driver.kube.cluster import API_VERSION, AlreadyExistsError, ConflictError
from dra_driver.kube.names import DNS_SUBDOMAIN_MAX_LENGTH, is_dns_label, is_dns_subdomain
from dra_driver.kube.objects import Obj

__all__ = [
    "DEVICE_CLASS",
    "RESOURCE_CLAIM",
    "RESOURCE_SLICE",
    "ResourceKind",
    "already_exists",
    "deletion_finished",
    "prepare_delete",
    "SLICE_GATED_FIELDS",
    "check_immutable_spec",
    "check_name",
    "check_namespace",
    "describe",
    "drop_disabled_fields",
    "matches_field_selector",
    "not_found",
    "object_key",
    "parse_field_selector",
    "prepare_create",
    "prepare_update",
    "timestamp_now",
]


@dataclass(frozen=True)
class ResourceKind:
    """One API resource type: its kind, URL plural, shape and group/version."""

    kind: str
    plural: str
    namespaced: bool
    has_status: bool
    field_labels: tuple[str, ...] = ("metadata.name",)
    api_version: str = API_VERSION


RESOURCE_SLICE: Final = ResourceKind(
    "ResourceSlice",
    "resourceslices",
    namespaced=False,
    has_status=False,
    field_labels=("metadata.name", "spec.driver", "spec.nodeName"),
)
DEVICE_CLASS: Final = ResourceKind(
    "DeviceClass", "deviceclasses", namespaced=False, has_status=False
)
RESOURCE_CLAIM: Final = ResourceKind(
    "ResourceClaim",
    "resourceclaims",
    namespaced=True,
    has_status=True,
    field_labels=("metadata.name", "metadata.namespace"),
)
NODE: Final = ResourceKind("Node", "nodes", namespaced=False, has_status=True, api_version="v1")
"""The GPU plugin reads its Node's uid to own its slices; the ComputeDomain plugin
labels it (`nvidia.com/gpu.clique`) through `ObjectStore.update_object`."""
EVENT: Final = ResourceKind(
    "Event", "events", namespaced=True, has_status=False, api_version="events.k8s.io/v1"
)
"""events.k8s.io/v1 Events the plugin reports, e.g. a failed Prepare."""

_SYSTEM_METADATA = (
    "uid",
    "creationTimestamp",
    "generation",
    "resourceVersion",
    "deletionTimestamp",
)

SLICE_GATED_FIELDS: Final = {
    "DRAPartitionableDevices": (
        ("spec", "sharedCounters"),
        ("spec", "perDeviceNodeSelection"),
        ("device", "consumesCounters"),
        ("device", "nodeName"),
        ("device", "nodeSelector"),
        ("device", "allNodes"),
    ),
    "DRADeviceTaints": (("device", "taints"),),
    "DRAConsumableCapacity": (
        ("device", "allowMultipleAllocations"),
        ("capacity", "requestPolicy"),
    ),
    "DRADeviceBindingConditions": (
        ("device", "bindsToNode"),
        ("device", "bindingConditions"),
        ("device", "bindingFailureConditions"),
    ),
}
"""ResourceSlice fields kube-apiserver drops on create and update while their feature gate
is off (`dropDisabledFields` in pkg/registry/resource/resourceslice/strategy.go): where the
field lives (the slice's spec, each device, each device capacity) and its name."""


def drop_disabled_fields(obj: Obj, disabled_gates: Iterable[str]) -> Obj:
    """A ResourceSlice as an API server with `disabled_gates` off stores it (a copy)."""
    gated = [field for gate in disabled_gates for field in SLICE_GATED_FIELDS.get(gate, ())]
    if not gated:
        return obj
    new = copy.deepcopy(obj)
    spec = new.get("spec")
    if not isinstance(spec, dict):
        return new
    devices = [d for d in spec.get("devices") or [] if isinstance(d, dict)]
    for where, name in gated:
        if where == "spec":
            spec.pop(name, None)
        for device in devices:
            if where == "device":
                device.pop(name, None)
            elif where == "capacity":
                for capacity in (device.get("capacity") or {}).values():
                    if isinstance(capacity, dict):
                        capacity.pop(name, None)
    return new


def describe(kind: ResourceKind, namespace: str | None, name: str) -> str:
    """How error messages name an object: `ResourceClaim ns/name`, `ResourceSlice name`."""
    if kind.namespaced:
        return f"{kind.kind} {namespace}/{name}"
    return f"{kind.kind} {name}"


def timestamp_now() -> str:
    """The current time as the apiserver writes timestamps (RFC 3339, seconds, UTC)."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def check_name(kind: ResourceKind, namespace: str | None, name: str) -> None:
    """Reject names the apiserver rejects (and that could not be file names safely)."""
    what = describe(kind, namespace, name)
    if not name:
        raise ClusterError(f"{kind.kind}: metadata.name is required")
    if not is_dns_subdomain(name):
        raise ClusterError(
            f"{what}: metadata.name must be a lower-case DNS subdomain of at most "
            f"{DNS_SUBDOMAIN_MAX_LENGTH} characters"
        )
    if kind.namespaced:
        check_namespace(kind, namespace, what)


def check_namespace(kind: ResourceKind, namespace: str | None, what: str | None = None) -> None:
    """Reject a namespace the apiserver rejects (a DNS label), e.g. `../etc`."""
    if namespace is None or not is_dns_label(namespace):
        raise ClusterError(
            f"{what or kind.kind}: namespace {namespace!r} is not a valid namespace (DNS label)"
        )


def object_key(
    kind: ResourceKind, obj: Obj, namespace: str | None = None
) -> tuple[str | None, str]:
    """(namespace, name) of a request body, checked; `namespace` is the URL's, if any."""
    if not isinstance(obj, dict) or not isinstance(obj.get("metadata"), dict):
        raise ClusterError(f"{kind.kind}: the object has no metadata")
    meta = obj["metadata"]
    name = meta.get("name")
    if not isinstance(name, str):
        raise ClusterError(f"{kind.kind}: metadata.name is required")
    body_ns = meta.get("namespace")
    if kind.namespaced:
        if namespace is not None and body_ns not in (None, namespace):
            raise ClusterError(
                f"{describe(kind, namespace, name)}: metadata.namespace {body_ns!r} does not "
                f"match the request's namespace"
            )
        ns = namespace if namespace is not None else body_ns
        if not isinstance(ns, str):
            raise ClusterError(f"{kind.kind} {name}: metadata.namespace is required")
    else:
        ns = None
    check_name(kind, ns, name)
    for field, expected in (("apiVersion", kind.api_version), ("kind", kind.kind)):
        value = obj.get(field)
        if value is not None and value != expected:
            raise ClusterError(
                f"{describe(kind, ns, name)}: {field} is {value!r}, expected {expected!r}"
            )
    return ns, name


def prepare_create(
    kind: ResourceKind,
    obj: Obj,
    *,
    namespace: str | None,
    keep_uid: bool,
) -> Obj:
    """The object as stored by a create: type meta and system metadata filled in.

    The caller sets `metadata.resourceVersion` when it stores it. `keep_uid`
    keeps a `metadata.uid` the caller chose (the local store allows that so a
    demo can fix claim UIDs); kube-apiserver always assigns a new one. A
    `status` is dropped for kinds with a status subresource, as the apiserver
    does; a `resourceVersion` in `obj` is refused, as the apiserver does.
    """
    ns, name = object_key(kind, obj, namespace)
    if obj["metadata"].get("resourceVersion") not in (None, ""):
        raise ClusterError(
            f"{describe(kind, ns, name)}: metadata.resourceVersion must not be set on "
            f"objects to be created"
        )
    new = copy.deepcopy(obj)
    new["apiVersion"] = kind.api_version
    new["kind"] = kind.kind
    meta = new["metadata"]
    if kind.namespaced:
        meta["namespace"] = ns
    if not (keep_uid and isinstance(meta.get("uid"), str) and meta["uid"]):
        meta["uid"] = str(uuid.uuid4())
    meta["creationTimestamp"] = timestamp_now()
    meta["generation"] = 1
    if kind.has_status:
        new.pop("status", None)
    return _ordered(new)


def prepare_update(
    kind: ResourceKind,
    stored: Obj,
    obj: Obj,
    *,
    status_only: bool = False,
) -> Obj | None:
    """The object as stored by an update of `stored` with `obj`, or None for a no-op.

    The result still carries the old `metadata.resourceVersion`; the caller
    sets the new one when it stores it.

    Raises `ConflictError` when `obj` carries a `metadata.resourceVersion` or
    `metadata.uid` that no longer matches `stored`. The server-owned metadata
    is carried over; `generation` goes up when `spec` changes; an object
    being deleted takes no new finalizers (`ClusterError`). With
    `status_only` (the `/status` subresource) only `status` is taken from
    `obj`; otherwise `status` is kept from `stored`.
    """
    ns, name = object_key(kind, obj, stored["metadata"].get("namespace"))
    what = describe(kind, ns, name)
    meta = obj["metadata"]
    stored_meta = stored["metadata"]
    rv = meta.get("resourceVersion")
    if rv not in (None, "") and str(rv) != stored_meta.get("resourceVersion"):
        raise ConflictError(
            f"{what}: the object has been modified (resourceVersion {rv} is stale, current "
            f"is {stored_meta.get('resourceVersion')}); read it again and retry"
        )
    uid = meta.get("uid")
    if uid not in (None, "") and uid != stored_meta.get("uid"):
        raise ConflictError(
            f"{what}: precondition failed: metadata.uid {uid} does not match the stored "
            f"object's {stored_meta.get('uid')} (it was deleted and re-created)"
        )
    if status_only:
        new = copy.deepcopy(stored)
        if "status" in obj:
            new["status"] = copy.deepcopy(obj["status"])
        else:
            new.pop("status", None)
        if kind == RESOURCE_CLAIM:
            device_status.drop_deallocated(new, stored)
            device_status.validate_device_statuses(new, what)
    else:
        new = copy.deepcopy(obj)
        new["apiVersion"] = kind.api_version
        new["kind"] = kind.kind
        for field in _SYSTEM_METADATA:
            if field in stored_meta:
                new["metadata"][field] = stored_meta[field]
        if kind.namespaced:
            new["metadata"]["namespace"] = ns
        if kind.has_status:
            if "status" in stored:
                new["status"] = copy.deepcopy(stored["status"])
            else:
                new.pop("status", None)
        if new.get("spec") != stored.get("spec"):
            new["metadata"]["generation"] = int(stored_meta.get("generation", 1)) + 1
        if stored_meta.get("deletionTimestamp"):
            added = set(new["metadata"].get("finalizers") or []) - set(
                stored_meta.get("finalizers") or []
            )
            if added:
                raise ClusterError(
                    f"{what}: metadata.finalizers: Forbidden: no new finalizers can be added "
                    f"if the object is being deleted, found new finalizers "
                    f"{sorted(added)!r}"
                )
    new = _ordered(new)
    if new == stored:
        return None
    return new


def prepare_delete(stored: Obj) -> Obj | None:
    """What a delete does to `stored`: None (remove it now), or the object marked deleting.

    An object with `metadata.finalizers` is not removed: the apiserver sets
    `metadata.deletionTimestamp` (once) and leaves it to the finalizers' owners
    to empty the list with an update, after which `deletion_finished` says to
    remove it. The caller stores the result under a new resourceVersion.
    """
    meta = stored.get("metadata") or {}
    if not meta.get("finalizers"):
        return None
    if meta.get("deletionTimestamp"):
        return stored
    new = copy.deepcopy(stored)
    new["metadata"]["deletionTimestamp"] = timestamp_now()
    return new


def deletion_finished(obj: Obj) -> bool:
    """Whether an updated object is being deleted and has no finalizers left (remove it)."""
    meta = obj.get("metadata") or {}
    return bool(meta.get("deletionTimestamp")) and not meta.get("finalizers")


def check_immutable_spec(kind: ResourceKind, stored: Obj, new: Obj) -> None:
    """Refuse an update that changes an immutable spec (NVIDIA's ComputeDomain CRD rule
    `self == oldSelf` on `spec`: "A computeDomain.spec is immutable")."""
    immutable = kind.kind == "ComputeDomain" and kind.api_version.startswith("resource.nvidia.com/")
    if immutable and new.get("spec") != stored.get("spec"):
        meta = stored.get("metadata") or {}
        raise ClusterError(
            f"{describe(kind, meta.get('namespace'), str(meta.get('name')))}: spec: "
            f"Invalid value: A computeDomain.spec is immutable"
        )


def parse_field_selector(selector: str, kind: ResourceKind) -> dict[str, str]:
    """`spec.driver=a,spec.nodeName=b` → {field: value}; only `=`/`==` and known fields."""
    wanted: dict[str, str] = {}
    for term in filter(None, (t.strip() for t in selector.split(","))):
        if "!=" in term:
            raise ClusterError(f"{kind.kind} field selector {selector!r}: '!=' is not supported")
        field, sep, value = term.replace("==", "=").partition("=")
        if not sep:
            raise ClusterError(f"{kind.kind} field selector {selector!r}: {term!r} has no '='")
        if field not in kind.field_labels:
            raise ClusterError(
                f"{kind.kind} field selector {selector!r}: field label {field!r} is not "
                f"supported (supported: {', '.join(kind.field_labels)})"
            )
        wanted[field] = value
    return wanted


def matches_field_selector(obj: Obj, wanted: dict[str, str]) -> bool:
    """Whether `obj` has every field of `wanted` (a missing field counts as "")."""
    for field, value in wanted.items():
        current: object = obj
        for part in field.split("."):
            current = current.get(part) if isinstance(current, dict) else None
        if (current if isinstance(current, str) else "") != value:
            return False
    return True


def not_found(kind: ResourceKind, namespace: str | None, name: str) -> NotFoundError:
    """The error for a missing object, worded like the rest."""
    return NotFoundError(f"{describe(kind, namespace, name)} not found")


def already_exists(kind: ResourceKind, namespace: str | None, name: str) -> AlreadyExistsError:
    """The error for a create whose name is taken."""
    return AlreadyExistsError(f"{describe(kind, namespace, name)} already exists")


def _ordered(obj: Obj) -> Obj:
    """Top-level keys in the apiserver's order: apiVersion, kind, metadata, spec, status."""
    order = ("apiVersion", "kind", "metadata", "spec", "status")
    out = {key: obj[key] for key in order if key in obj}
    out.update((key, value) for key, value in obj.items() if key not in out)
    return out
