"""`dra-gpu inventory`: show what this node would publish, writing nothing.

The admin's first check on a new node: which GPUs and MIG devices NVML sees,
and the exact ResourceSlices the plugin would publish for them (`-o yaml`),
or a one-line-per-device summary (`-o table`).
"""

from __future__ import annotations

import sys
from typing import Any, TextIO

from controller.slices import Layout, build_resource_slices
from dra_driver.hardware.machine import Hardware
from dra_driver.kube import yaml_io
from dra_driver.kube.quantity import format_quantity
from dra_driver.node.consumable_shares import ConsumableShares
from dra_driver.node.devices import AllocatableDevice, build_devices, inventory_warnings
from dra_driver.node.inventory import discover


def print_inventory(
    hardware: Hardware,
    *,
    node_name: str,
    driver_name: str,
    output: str,
    dynamic_mig: bool = False,
    layout: Layout = "v1.35",
    consumable_shares: ConsumableShares | None = None,
    out: TextIO | None = None,
) -> int:
    out = out if out is not None else sys.stdout  # at call time: tests swap sys.stdout
    inventory = discover(hardware.nvml)
    devices = build_devices(inventory, dynamic_mig=dynamic_mig, consumable_shares=consumable_shares)
    slices = build_resource_slices(devices, driver=driver_name, node_name=node_name, layout=layout)
    for warning in inventory_warnings(inventory, dynamic_mig=dynamic_mig):
        print(f"warning: {warning}", file=sys.stderr)
    if output == "yaml":
        out.write(yaml_io.dump_all(slices, sort_keys=False))
    else:
        out.write(render_table(devices, slice_count=len(slices)))
    return 0


def render_table(devices: list[AllocatableDevice], *, slice_count: int) -> str:
    """One row per device: what an admin looks for first."""
    header = ("DEVICE", "TYPE", "MODEL / PROFILE", "MEMORY", "UUID", "PCI BUS")
    rows = [header]
    for device in devices:
        attrs = device.attributes
        profile = _plain(attrs.get("profile"))
        kind = "mig (dynamic)" if device.dynamic is not None else device.kind
        model = _plain(attrs.get("productName"))
        rows.append(
            (
                device.name,
                kind,
                f"{model} {profile}".strip() if profile else model,
                format_quantity(device.capacity.get("memory", 0)),
                _plain(attrs.get("uuid")),
                _plain(attrs.get("resource.kubernetes.io/pciBusID")),
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines = [
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        for row in rows
    ]
    lines.append(f"{len(devices)} devices in {slice_count} ResourceSlice(s)")
    shared = [device for device in devices if device.allow_multiple_allocations]
    if shared:
        shares = {device.capacity.get("shares") for device in shared} - {None}
        per_device = f", {shares.pop()} shares each" if len(shares) == 1 else ""
        lines.append(f"{len(shared)} devices may be shared between claims{per_device}")
    return "\n".join(lines) + "\n"


def _plain(value: Any) -> str:
    if value is None:
        return ""
    inner = getattr(value, "value", value)
    return str(inner)
