"""The narrow seam between dra-gpu and the Kubernetes API.

Everything the driver reads or writes in the cluster (ResourceSlices it
publishes and watches, ResourceClaims it prepares, DeviceClasses the demo
installs, its Node, the Events it reports) goes
through the `Cluster` protocol, so the same code runs against a real
apiserver (`KubeCluster`) and against a directory of YAML files
(`LocalCluster`) for demos and tests without a cluster.

Objects are plain dicts in their JSON form, exactly as `kubectl get -o json`
prints them (camelCase keys, `apiVersion`/`kind` on every object, list items
included). Both implementations follow the apiserver's rules the driver relies
on: `metadata.resourceVersion` preconditions on update, `status` written only
through the status call, no-op updates leaving the object untouched.

`ConflictError` and `AlreadyExistsError` (from `dra_driver.errors`, re-exported
here) refine `ClusterError` for the one failure callers branch on: someone
else wrote the object first.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Protocol

from dra_driver.errors import AlreadyExistsError, ConflictError
from dra_driver.kube.objects import Obj

__all__ = [
    "API_VERSION",
    "AlreadyExistsError",
    "Cluster",
    "ConflictError",
]

API_VERSION = "resource.k8s.io/v1"
"""The group/version of every object the `Cluster` protocol handles."""


class Cluster(Protocol):
    """Read and write the resource.k8s.io/v1 objects a DRA driver deals with.

    Every error is a `ClusterError` (or a subclass) whose message names the
    object, e.g. `ResourceSlice node-1-gpu.nvidia.com-0: ...`.
    """

    def get_resource_claim(self, namespace: str, name: str) -> Obj:
        """Return the claim; `NotFoundError` if it does not exist."""
        ...

    def list_resource_claims(self, namespace: str | None = None) -> list[Obj]:
        """Claims of one namespace, or of all namespaces when `namespace` is None."""
        ...

    def put_resource_claim(self, obj: Obj) -> Obj:
        """Create the claim, or replace it if it exists (for tools and the demo).

        As with the apiserver, `status` is not written by this call (use
        `update_resource_claim_status`). Without `metadata.resourceVersion` an
        existing claim is replaced unconditionally; with one, a stale value
        raises `ConflictError`.
        """
        ...

    def update_resource_claim_status(self, obj: Obj) -> Obj:
        """Write `obj["status"]` of an existing claim (the `/status` subresource).

        Spec and metadata of `obj` are ignored; `metadata.resourceVersion`, if
        set, must be current (`ConflictError` otherwise).
        """
        ...

    def apply_resource_claim_status(
        self, obj: Obj, *, field_manager: str, force: bool = True
    ) -> Obj:
        """Server-side apply of `obj["status"]["devices"]` to an existing claim's status.

        `obj` is an apply configuration: apiVersion, kind, metadata name and
        namespace, and `status.devices` (the complete set of entries this
        `field_manager` wants; entries it applied before and leaves out are
        removed, other managers' stay). `ConflictError` if an entry is another
        manager's and `force` is false; `ClusterError` naming the field if
        the apiserver refuses an entry (see `dra_driver.kube.device_status`).
        Returns the stored claim.
        """
        ...

    def delete_resource_claim(self, namespace: str, name: str) -> None:
        """Delete the claim; a claim that is already gone is not an error."""
        ...

    def list_resource_slices(
        self, *, driver: str | None = None, node_name: str | None = None
    ) -> list[Obj]:
        """ResourceSlices, filtered on `spec.driver` and `spec.nodeName` when given."""
        ...

    def create_resource_slice(self, obj: Obj) -> Obj:
        """Create a slice named `metadata.name`; `AlreadyExistsError` if taken."""
        ...

    def update_resource_slice(self, obj: Obj) -> Obj:
        """Replace an existing slice.

        `NotFoundError` if it is gone; `ConflictError` if `metadata.resourceVersion`
        (when set) or `metadata.uid` (when set) no longer match the stored slice.
        """
        ...

    def delete_resource_slice(self, name: str) -> None:
        """Delete the slice; a slice that is already gone is not an error."""
        ...

    def list_device_classes(self) -> list[Obj]:
        """All DeviceClasses."""
        ...

    def put_device_class(self, obj: Obj) -> Obj:
        """Create the DeviceClass, or replace it if it exists."""
        ...

    def watch_resource_slices(
        self,
        *,
        driver: str,
        node_name: str,
        on_change: Callable[[], None],
        stop: threading.Event,
    ) -> None:
        """Call `on_change` soon after a slice of this driver and node may have changed.

        Blocks until `stop` is set (run it in a thread). Any write by anyone
        counts, within about a second. `on_change` may also be called when
        nothing changed (at the start, or after reconnecting), so it must be
        cheap and idempotent, e.g. waking a publisher. Errors are logged and
        retried with back-off; they never end the watch.
        """
        ...

    def get_node(self, name: str) -> Obj:
        """The core/v1 Node; `NotFoundError` if it does not exist."""
        ...

    def create_event(self, obj: Obj) -> Obj:
        """Create an events.k8s.io/v1 Event; `AlreadyExistsError` if its name is taken."""
        ...

    def server_version(self) -> tuple[int, int] | None:
        """(major, minor) of the apiserver, or None where there is none to ask."""
        ...
