"""`dra-gpu inventory --driver compute-domain.nvidia.com`: what a node would publish for
the second driver, writing nothing.

The devices come from `dra_driver.compute_domain.devices` (NVIDIA's `channel-0`
and `daemon-0`, only on a settled NVLink fabric); this wraps them in the one
ResourceSlice of the node's pool, named and checked like the GPU driver's
slices (`controller.slices`, `controller.limits`), and prints it as YAML, JSON
or a table. When nothing is published, the table and stderr say why.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from typing import Any, TextIO

from controller.limits import API_VERSION, KIND, check_resource_slices
from controller.slices import resource_slice_name
from dra_driver import text_table
from dra_driver.compute_domain.devices import ComputeDomainDevices, compute_domain_devices
from dra_driver.compute_domain.names import DRIVER_NAME
from dra_driver.errors import SliceError
from dra_driver.hardware.machine import Hardware
from dra_driver.kube import yaml_io
from dra_driver.kube.names import is_dns_subdomain
from dra_driver.node.devices import CLIQUE_ATTRIBUTE
from dra_driver.node.inventory import discover


def compute_domain_resource_slices(
    devices: Sequence[dict[str, Any]], *, node_name: str, generation: int = 0
) -> list[dict[str, Any]]:
    """The node's one `compute-domain.nvidia.com` ResourceSlice (empty when it publishes
    nothing, so consumers see the pool and know it is empty)."""
    if not node_name or not is_dns_subdomain(node_name):
        raise SliceError(f"node name {node_name!r}: not a valid node name (DNS subdomain)")
    slices = [
        {
            "apiVersion": API_VERSION,
            "kind": KIND,
            "metadata": {"name": resource_slice_name(node_name, DRIVER_NAME, 0)},
            "spec": {
                "driver": DRIVER_NAME,
                "nodeName": node_name,
                "pool": {"name": node_name, "generation": generation, "resourceSliceCount": 1},
                "devices": [dict(device) for device in devices],
            },
        }
    ]
    check_resource_slices(slices)
    return slices


def print_compute_domain_inventory(
    hardware: Hardware,
    *,
    node_name: str,
    output: str,
    host_managed: bool = False,
    out: TextIO | None = None,
) -> int:
    out = out if out is not None else sys.stdout  # at call time: tests swap sys.stdout
    published = compute_domain_devices(discover(hardware.nvml), host_managed=host_managed)
    slices = compute_domain_resource_slices(published.devices, node_name=node_name)
    if output in ("yaml", "json"):
        for reason in published.withheld:
            print(f"warning: nothing published: {reason}", file=sys.stderr)
    if output == "yaml":
        out.write(yaml_io.dump_all(slices, sort_keys=False))
    elif output == "json":
        out.write(json.dumps({"apiVersion": "v1", "kind": "List", "items": slices}, indent=2))
        out.write("\n")
    else:
        out.write(render_table(published, slice_count=len(slices)))
    return 0


def render_table(published: ComputeDomainDevices, *, slice_count: int) -> str:
    """One row per device, then why nothing is published where that is so."""
    rows = [
        [
            device["name"],
            device["attributes"]["type"]["string"],
            device["attributes"][CLIQUE_ATTRIBUTE]["string"],
        ]
        for device in published.devices
    ]
    lines = text_table.render(["DEVICE", "TYPE", "CLIQUE"], rows)
    lines.append(f"{len(published.devices)} devices in {slice_count} ResourceSlice(s)")
    lines.extend(f"nothing published: {reason}" for reason in published.withheld)
    return "\n".join(lines) + "\n"
