"""`dra-gpu inventory`: show what this node would publish, writing nothing.

The admin's first check on a new node: which GPUs and MIG devices NVML sees,
and the exact ResourceSlices the plugin would publish for them (`-o yaml`),
or a one-line-per-device summary (`-o table`).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from typing import Any, TextIO

from controller.slices import Layout, build_resource_slices
from dra_driver import text_table
from dra_driver.hardware.machine import Hardware
from dra_driver.kube import yaml_io
from dra_driver.kube.quantity import format_quantity
from dra_driver.node.consumable_shares import ConsumableShares
from dra_driver.node.devices import (
    AllocatableDevice,
    build_devices,
    gpu_device_name,
    inventory_warnings,
)
from dra_driver.node.inventory import discover
from dra_driver.node.vfio_devices import build_vfio_devices


def print_inventory(
    hardware: Hardware,
    *,
    node_name: str,
    driver_name: str,
    output: str,
    dynamic_mig: bool = False,
    layout: Layout = "v1.35",
    consumable_shares: ConsumableShares | None = None,
    list_attributes: bool = False,
    passthrough: bool = False,
    out: TextIO | None = None,
) -> int:
    out = out if out is not None else sys.stdout  # at call time: tests swap sys.stdout
    inventory = discover(hardware.nvml)
    devices = build_devices(
        inventory,
        dynamic_mig=dynamic_mig,
        consumable_shares=consumable_shares,
        list_attributes=list_attributes,
    )
    if passthrough and hardware.pci is not None:
        devices += build_vfio_devices(
            inventory, hardware.pci.gpus(), iommufd_enabled=hardware.pci.iommufd_enabled()
        )
    slices = build_resource_slices(devices, driver=driver_name, node_name=node_name, layout=layout)
    for warning in inventory_warnings(inventory, dynamic_mig=dynamic_mig):
        print(f"warning: {warning}", file=sys.stderr)
    if output == "yaml":
        out.write(yaml_io.dump_all(slices, sort_keys=False))
    elif output == "json":
        out.write(json.dumps({"apiVersion": "v1", "kind": "List", "items": slices}, indent=2))
        out.write("\n")
    else:
        published = {device.gpu.uuid for device in devices}
        idle = [
            gpu_device_name(gpu.info)
            for gpu in inventory.gpus
            if gpu.info.mig_enabled and gpu.info.uuid not in published
        ]
        out.write(
            render_table(devices, slice_count=len(slices), idle_mig=idle, wide=output == "wide")
        )
    return 0


def render_table(
    devices: list[AllocatableDevice],
    *,
    slice_count: int,
    idle_mig: Sequence[str] = (),
    wide: bool = False,
) -> str:
    """One row per device: what an admin looks for first (`wide`: with UUID and PCI bus).
    `idle_mig` names the GPUs in MIG mode that publish nothing (no MIG devices, and not
    offered for dynamic MIG)."""
    header = ["DEVICE", "TYPE", "MODEL / PROFILE", "MEMORY"]
    if wide:
        header += ["UUID", "PCI BUS"]
    rows = []
    for device in devices:
        attrs = device.attributes
        profile = _plain(attrs.get("profile"))
        kind = "mig (dynamic)" if device.dynamic is not None else device.kind
        model = _plain(attrs.get("productName"))
        row = [
            device.name,
            kind,
            f"{model} {profile}".strip() if profile else model,
            format_quantity(device.capacity.get("memory", 0)),
        ]
        if wide:
            row += [_plain(attrs.get("uuid")), _plain(attrs.get("resource.kubernetes.io/pciBusID"))]
        rows.append(row)
    lines = text_table.render(header, rows, width=None if wide else text_table.WIDTH, shrink=(2,))
    lines.append(f"{len(devices)} devices in {slice_count} ResourceSlice(s)")
    shared = [device for device in devices if device.allow_multiple_allocations]
    if shared:
        shares = {device.capacity.get("shares") for device in shared} - {None}
        per_device = f", {shares.pop()} shares each" if len(shares) == 1 else ""
        lines.append(f"{len(shared)} devices may be shared between claims{per_device}")
    if idle_mig:
        gpus = "1 GPU has" if len(idle_mig) == 1 else f"{len(idle_mig)} GPUs have"
        lines.append(
            f"{gpus} MIG mode on but no MIG devices, so nothing is published for "
            f"{'it' if len(idle_mig) == 1 else 'them'}: {', '.join(idle_mig)} (create MIG devices, "
            "or run the plugin with --dynamic-mig)"
        )
    return "\n".join(lines) + "\n"


def _plain(value: Any) -> str:
    if value is None:
        return ""
    inner = getattr(value, "value", value)
    return str(inner)
