"""The node's NVLink fabric, re-evaluated on a timer: what to publish, which clique.

NVIDIA's CD plugin reads the fabric once at start and exits ("refusing to
start") while a GPU's fabric is still registering or has failed, so a node
that boots a little before its fabric manager crash-loops (computedomain.md
§3.8, §7.8; #1264). Here `NodeFabric.evaluate` asks NVML again every
`--fabric-check-interval`, derives the devices and the clique
(`dra_driver.compute_domain.devices`: nothing published, with reasons, while
the fabric is not settled), and on a change wakes the slice publisher, so
the channel appears once the fabric is COMPLETED, with no restart. A failing
NVML query is logged and the last answer kept; nothing here ever exits.

With `--gpu-clique-label` the Node gets (and loses, when the clique goes
away or the plugin stops) NVIDIA's label `nvidia.com/gpu.clique=<clique>`
(§3.7), written through the `ObjectStore` on change only.

`set_domain` records the ComputeDomain the node serves (its member's domain,
from the member watch); the channel then carries the `domain` attribute
(`devices.with_domain`) and a change wakes the publisher, as a fabric change does.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from controller.compute_domain_inventory import compute_domain_resource_slices
from dra_driver.compute_domain.devices import (
    ComputeDomainDevices,
    compute_domain_devices,
    with_domain,
)
from dra_driver.compute_domain.names import CLIQUE_NODE_LABEL
from dra_driver.errors import ClusterError, ConflictError, DraGpuError
from dra_driver.kube.object_store import NODE, ObjectStore
from dra_driver.node.inventory import NodeInventory

log = logging.getLogger(__name__)


class NodeFabric:
    """The last evaluation of the node's fabric, and the slices it calls for."""

    def __init__(
        self,
        inventory: Callable[[], NodeInventory],
        *,
        node_name: str,
        host_managed: bool = False,
        on_change: Callable[[], None] = lambda: None,
        objects: ObjectStore | None = None,
        clique_label: bool = False,
    ) -> None:
        self._inventory = inventory
        self._node = node_name
        self._host_managed = host_managed
        self._on_change = on_change
        self._objects = objects
        self._clique_label = clique_label
        self._lock = threading.Lock()
        self._current = ComputeDomainDevices(devices=(), clique=None, withheld=("not evaluated",))
        self._domain: str | None = None  # the UID of the domain the node serves
        self._labelled: str | None = None  # the label value last written ("" removed)
        self._label_error = ""  # the last failure, logged once

    @property
    def current(self) -> ComputeDomainDevices:
        with self._lock:
            return self._current

    def clique(self) -> str | None:
        """The node's clique while its devices are published, else None."""
        return self.current.clique

    def slices(self) -> list[dict[str, Any]]:
        """The node's desired ResourceSlices (one, possibly with no device)."""
        with self._lock:
            devices, domain = self._current.devices, self._domain
        return compute_domain_resource_slices(with_domain(devices, domain), node_name=self._node)

    def set_domain(self, uid: str | None) -> bool:
        """The node now serves the ComputeDomain with `uid` (None: none); True (and
        `on_change` called) when that changed."""
        with self._lock:
            before, self._domain = self._domain, uid or None
        if before == (uid or None):
            return False
        log.info("node %s serves ComputeDomain %s", self._node, uid or "none")
        self._on_change()
        return True

    def evaluate(self) -> bool:
        """Ask NVML again; True (and `on_change` called) when the outcome changed."""
        try:
            found = compute_domain_devices(self._inventory(), host_managed=self._host_managed)
        except DraGpuError as exc:
            log.error("cannot read the NVLink fabric (keeping the last answer): %s", exc)
            return False
        with self._lock:
            before, self._current = self._current, found
        self._label(found.clique)  # also retries a label write that failed before
        if found == before:
            return False
        if found.devices:
            log.info(
                "node %s publishes %s in NVLink clique %s",
                self._node,
                ", ".join(str(d["name"]) for d in found.devices),
                found.clique,
            )
        else:
            log.warning(
                "node %s publishes no ComputeDomain device: %s",
                self._node,
                "; ".join(found.withheld),
            )
        self._on_change()
        return True

    def run(self, stop: threading.Event, interval: float) -> None:
        """`evaluate` every `interval` seconds until `stop` is set."""
        while not stop.wait(interval):
            self.evaluate()

    def clear_label(self) -> None:
        """Remove the clique label (on shutdown, as NVIDIA's plugin does)."""
        self._label(None)

    def _label(self, clique: str | None) -> None:
        if not self._clique_label or self._objects is None:
            return
        want = clique or ""
        if want == self._labelled:
            return
        for _attempt in range(3):
            try:
                node = self._objects.get_object(NODE, None, self._node)
                labels = node.setdefault("metadata", {}).setdefault("labels", {}) or {}
                node["metadata"]["labels"] = labels
                if (labels.get(CLIQUE_NODE_LABEL) or "") == want:
                    self._labelled = want
                    return
                if want:
                    labels[CLIQUE_NODE_LABEL] = want
                else:
                    labels.pop(CLIQUE_NODE_LABEL, None)
                self._objects.update_object(NODE, node)
                self._labelled = want
                log.info(
                    "Node %s label %s %s",
                    self._node,
                    CLIQUE_NODE_LABEL,
                    f"set to {want}" if want else "removed",
                )
                return
            except ConflictError:
                continue
            except ClusterError as exc:
                if str(exc) != self._label_error:  # retried at every check, logged once
                    log.warning("cannot label Node %s with its clique: %s", self._node, exc)
                    self._label_error = str(exc)
                return
