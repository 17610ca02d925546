"""The second seam to the Kubernetes API: any kind of object, by kind.

`Cluster` (`dra_driver.kube.cluster`) is the GPU driver's narrow seam: the
resource.k8s.io objects it reads and writes, one method each. The
ComputeDomain driver (`compute-domain.nvidia.com`) deals in more kinds: its
own custom resources, the ResourceClaimTemplates its controller creates,
the Lease of its leader election, the Nodes it labels. Rather than a method
per kind and verb, `ObjectStore` takes the kind as an argument, the way a
dynamic client does; the kinds it serves are the `ResourceKind`s below.

The rules are the apiserver's, as for `Cluster` (`dra_driver.kube.apiserver_rules`):

- `update` carries an optimistic-concurrency precondition when the object has
  `metadata.resourceVersion` (stale: `ConflictError`); `status` is written only
  through `update_status` for kinds with a status subresource.
- `delete` of an object with `metadata.finalizers` only sets
  `metadata.deletionTimestamp`; the object goes away when an update empties
  its finalizers. A delete of a missing object is not an error.
- `ComputeDomain.spec` is immutable (NVIDIA's CRD rule `self == oldSelf`).
- `watch` calls `on_change` soon (within about a second) after any object of
  the given kinds may have changed, and blocks until `stop` is set.

The implementations are `LocalCluster` (a directory of YAML files, shared by
processes: the demo's simulated cluster) and `KubeCluster` (the kubernetes
client); both also implement `Cluster`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Final, Protocol

from dra_driver.kube.apiserver_rules import EVENT, NODE, ResourceKind
from dra_driver.kube.objects import Obj

__all__ = [
    "COMPUTE_DOMAIN",
    "COMPUTE_DOMAIN_CLIQUE",
    "COMPUTE_DOMAIN_MEMBER",
    "EVENT",
    "LEASE",
    "NODE",
    "OBJECT_STORE_KINDS",
    "RESOURCE_CLAIM_TEMPLATE",
    "ObjectStore",
]

_NVIDIA_API: Final = "resource.nvidia.com/v1beta1"

COMPUTE_DOMAIN: Final = ResourceKind(
    "ComputeDomain",
    "computedomains",
    namespaced=True,
    has_status=True,
    field_labels=("metadata.name", "metadata.namespace"),
    api_version=_NVIDIA_API,
)
"""The user's ComputeDomain (NVIDIA's CRD; `dra_driver.compute_domain.api`)."""

COMPUTE_DOMAIN_CLIQUE: Final = ResourceKind(
    "ComputeDomainClique",
    "computedomaincliques",
    namespaced=True,
    has_status=False,
    field_labels=("metadata.name", "metadata.namespace"),
    api_version=_NVIDIA_API,
)
"""NVIDIA's internal per-(domain, clique) object; here written by the controller alone."""

COMPUTE_DOMAIN_MEMBER: Final = ResourceKind(
    "ComputeDomainMember",
    "computedomainmembers",
    namespaced=True,
    has_status=True,
    field_labels=("metadata.name", "metadata.namespace"),
    api_version=_NVIDIA_API,
)
"""dra-gpu's own: one node's membership of one domain (spec by the CD plugin, status by
the node's IMEX host). See `dra_driver.compute_domain.membership`."""

RESOURCE_CLAIM_TEMPLATE: Final = ResourceKind(
    "ResourceClaimTemplate",
    "resourceclaimtemplates",
    namespaced=True,
    has_status=False,
    field_labels=("metadata.name", "metadata.namespace"),
    api_version="resource.k8s.io/v1",
)

LEASE: Final = ResourceKind(
    "Lease",
    "leases",
    namespaced=True,
    has_status=False,
    field_labels=("metadata.name", "metadata.namespace"),
    api_version="coordination.k8s.io/v1",
)
"""The controller's leader-election lock."""

OBJECT_STORE_KINDS: Final = (
    COMPUTE_DOMAIN,
    COMPUTE_DOMAIN_CLIQUE,
    COMPUTE_DOMAIN_MEMBER,
    RESOURCE_CLAIM_TEMPLATE,
    LEASE,
    NODE,
    EVENT,
)
"""Every kind an `ObjectStore` serves."""


class ObjectStore(Protocol):
    """Read and write API objects of the `OBJECT_STORE_KINDS`, as plain JSON dicts.

    Every error is a `ClusterError` (or a subclass: `NotFoundError`,
    `ConflictError`, `AlreadyExistsError`) whose message names the object.
    """

    def get_object(self, kind: ResourceKind, namespace: str | None, name: str) -> Obj:
        """The object; `NotFoundError` if it does not exist."""
        ...

    def list_objects(
        self,
        kind: ResourceKind,
        namespace: str | None = None,
        *,
        labels: Mapping[str, str] | None = None,
    ) -> list[Obj]:
        """Objects of one namespace (all when None) whose labels include `labels`."""
        ...

    def create_object(self, kind: ResourceKind, obj: Obj) -> Obj:
        """Create it; `AlreadyExistsError` if the name is taken. Returns the stored object."""
        ...

    def update_object(self, kind: ResourceKind, obj: Obj) -> Obj:
        """Replace metadata and spec (not status); see the module docstring for the rules."""
        ...

    def update_object_status(self, kind: ResourceKind, obj: Obj) -> Obj:
        """Write `obj["status"]` (the `/status` subresource); rv precondition as `update`."""
        ...

    def delete_object(self, kind: ResourceKind, namespace: str | None, name: str) -> None:
        """Delete it, or mark it deleting while it has finalizers; gone is not an error."""
        ...

    def watch_objects(
        self,
        kinds: Sequence[ResourceKind],
        on_change: Callable[[], None],
        stop: threading.Event,
    ) -> None:
        """Call `on_change` soon after any object of `kinds` may have changed; block until
        `stop` is set. May call it spuriously; errors are logged and retried, never raised."""
        ...
