"""Devices to resource.k8s.io/v1 ResourceSlice objects, pure and deterministic.

A node publishes one pool, named after the node, holding all its devices. The
apiserver allows at most 128 devices per slice, so a large pool is split over
several slices and every slice says how many there are (`resourceSliceCount`),
which is how consumers know they have seen the whole pool.

Slice names are deterministic, `<node>-<driver>-<i>`, instead of the helper
library's `generateName`: the same devices always give the same objects, so
the publisher can update slices in place by name (no create/delete churn, no
duplicate left behind when a create succeeds but its reply is lost), and the
local cluster store names its files after them. Device order is stable too:
GPUs in PCI bus id order, then device name, so a republish is a no-op diff.

Every slice built here has passed `controller.limits` (per slice and
pool-wide) before it is returned; an invalid slice raises SliceError instead.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from typing import Any, Final

from controller.limits import (
    API_VERSION,
    DEFAULT_VERSION,
    DNS_SUBDOMAIN_MAX_LENGTH,
    KIND,
    RESOURCE_SLICE_MAX_DEVICES,
    check_resource_slices,
    check_version,
    driver_name_errors,
    is_dns_subdomain,
)
from dra_driver.devices import AllocatableDevice
from dra_driver.errors import SliceError
from dra_driver.inventory import pci_sort_key

_INVALID_NAME_CHARS: Final = re.compile(r"[^a-z0-9.-]+")
_HASH_LENGTH: Final = 10


def resource_slice_name(node_name: str, driver: str, index: int) -> str:
    """`<node>-<driver>-<index>` as a valid, stable DNS subdomain of at most 253 characters.

    Characters a subdomain cannot hold become '-', and every dot-separated
    label starts and ends alphanumeric. A prefix too long to fit is cut and
    given a short hash of the full prefix, so distinct nodes keep distinct names.
    """
    prefix = _sanitize(f"{node_name}-{driver}")
    suffix = f"-{index}"
    if len(prefix) + len(suffix) > DNS_SUBDOMAIN_MAX_LENGTH:
        digest = hashlib.sha256(prefix.encode()).hexdigest()[:_HASH_LENGTH]
        room = DNS_SUBDOMAIN_MAX_LENGTH - len(suffix) - len(digest) - 1
        prefix = f"{_sanitize(prefix[:room])}-{digest}"
    return f"{prefix}{suffix}"


def device_sort_key(device: AllocatableDevice) -> tuple[Any, ...]:
    """GPUs in PCI bus id order, then devices by name."""
    return (pci_sort_key(device.gpu.pci_bus_id), device.name)


def build_resource_slices(
    devices: Sequence[AllocatableDevice],
    *,
    driver: str,
    node_name: str,
    pool_name: str | None = None,
    generation: int = 0,
    max_devices_per_slice: int = RESOURCE_SLICE_MAX_DEVICES,
    version: str = DEFAULT_VERSION,
) -> list[dict[str, Any]]:
    """The complete ResourceSlice objects publishing `devices` for one node.

    One pool (default name: the node name) at `generation`, split into slices
    of at most `max_devices_per_slice` devices. A node with no devices still
    gets one empty slice, so consumers see the pool and know it is empty.
    Devices that consume counters need the pool's counter sets, which static
    devices do not have; such a pool is refused by the pool-wide check.

    Raises SliceError for bad arguments or if any slice would break an
    apiserver limit of Kubernetes `version`.
    """
    k8s = check_version(version)
    if errors := driver_name_errors(driver):
        raise SliceError(f"driver name {driver!r}: {'; '.join(errors)}")
    if not node_name or not is_dns_subdomain(node_name):
        raise SliceError(f"node name {node_name!r}: not a valid node name (DNS subdomain)")
    if isinstance(generation, bool) or not isinstance(generation, int) or generation < 0:
        raise SliceError(f"pool generation {generation!r}: must be an integer >= 0")
    if not 1 <= max_devices_per_slice <= RESOURCE_SLICE_MAX_DEVICES:
        raise SliceError(
            f"max devices per slice {max_devices_per_slice}: "
            f"must be 1..{RESOURCE_SLICE_MAX_DEVICES}"
        )
    per_slice = max_devices_per_slice

    ordered = sorted(devices, key=device_sort_key)
    chunks = [ordered[i : i + per_slice] for i in range(0, len(ordered), per_slice)] or [[]]
    pool = pool_name if pool_name is not None else node_name
    slices = [
        {
            "apiVersion": API_VERSION,
            "kind": KIND,
            "metadata": {"name": resource_slice_name(node_name, driver, index)},
            "spec": {
                "driver": driver,
                "nodeName": node_name,
                "pool": {
                    "name": pool,
                    "generation": generation,
                    "resourceSliceCount": len(chunks),
                },
                "devices": [device.to_api() for device in chunk],
            },
        }
        for index, chunk in enumerate(chunks)
    ]
    check_resource_slices(slices, version=k8s)
    return slices


def _sanitize(text: str) -> str:
    """Lower-case `text` and make every dot-separated label a valid DNS label shape."""
    lowered = _INVALID_NAME_CHARS.sub("-", text.lower())
    labels = [label.strip("-") for label in lowered.split(".")]
    joined = ".".join(label for label in labels if label)
    return joined or "node"
