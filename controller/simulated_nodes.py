"""The ResourceSlices our kubelet plugin would publish for simulated nodes.

`dra-gpu simulate --nodes dgx-h100=2,dgx-a100-40gb=1` places pods on nodes
built by our own node code: simulated hardware (`dra_driver.sim`, one
instance per node, so every node has its own GPU UUIDs),
`dra_driver.inventory.discover`, `dra_driver.devices.build_devices` and
`controller.slices.build_resource_slices`, the same calls the kubelet plugin
makes, so the slices are exactly the ones our publisher would publish.
`mig="dynamic"` (the simulator's default) is the plugin run with
`--dynamic-mig`, where every MIG placement is a partitionable device, and
`mig="static"` the plugin's own default (existing MIG devices only), with the
slice layout the plugin picks for that Kubernetes release.

It lives here and not beside the simulator because building slices is the
controller's job and the core (`dra_driver`) must not import `controller`;
the CLI hands `build_simulated_nodes` to the simulator
(`dra_driver.simulate.nodes.NodeBuilder`).

Building and checking the slices of a 200-device DGX takes about half a
second; nodes of one shape only differ in their name and UUIDs, so the first
node of a shape is built in full and the others are derived from it by
renaming (the test suite checks that this equals a full build).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from controller.slices import build_resource_slices, choose_layout, resource_slice_name
from dra_driver import DEFAULT_DRIVER_NAME
from dra_driver.allocator import Node
from dra_driver.api_objects import Obj
from dra_driver.consumable_shares import ConsumableShares
from dra_driver.devices import build_devices
from dra_driver.inventory import NodeInventory, discover
from dra_driver.nvml.backend import open_hardware
from dra_driver.simulate.nodes import (
    HOSTNAME_LABEL,
    MigMode,
    NodeRequest,
    Release,
    SimulatedNodes,
)


def build_simulated_nodes(
    requests: Sequence[NodeRequest],
    *,
    driver: str = DEFAULT_DRIVER_NAME,
    mig: MigMode = "dynamic",
    release: Release = "1.35",
    consumable_shares: ConsumableShares | None = None,
) -> SimulatedNodes:
    """Simulated nodes and their slices, in request order (see the module docstring)."""
    built = SimulatedNodes()
    for request in requests:
        template: tuple[str, NodeInventory, list[Obj]] | None = None
        for index in range(request.count):
            name = f"{request.prefix}-{index}"
            inventory = _inventory(request.shape, name)
            if template is None:
                slices = node_slices(
                    inventory,
                    name,
                    driver=driver,
                    mig=mig,
                    release=release,
                    consumable_shares=consumable_shares,
                )
                template = (name, inventory, slices)
            else:
                slices = _renamed(template, name, inventory, driver)
            built.nodes.append(Node(name, {HOSTNAME_LABEL: name}))
            built.slices.extend(slices)
    return built


def node_slices(
    inventory: NodeInventory,
    node_name: str,
    *,
    driver: str = DEFAULT_DRIVER_NAME,
    mig: MigMode = "dynamic",
    release: Release = "1.35",
    consumable_shares: ConsumableShares | None = None,
) -> list[Obj]:
    """The ResourceSlices the kubelet plugin publishes for `inventory` on `node_name`."""
    devices = build_devices(
        inventory, dynamic_mig=mig == "dynamic", consumable_shares=consumable_shares
    )
    return build_resource_slices(
        devices,
        driver=driver,
        node_name=node_name,
        version=release,
        layout=choose_layout(_version_tuple(release)),
    )


def _version_tuple(release: Release) -> tuple[int, int]:
    major, minor = release.split(".")
    return int(major), int(minor)


def _inventory(shape: str, node_name: str) -> NodeInventory:
    hardware = open_hardware(f"sim:{shape}", node_name=node_name)
    return discover(hardware.nvml)


def _renamed(
    template: tuple[str, NodeInventory, list[Obj]],
    name: str,
    inventory: NodeInventory,
    driver: str,
) -> list[Obj]:
    """The template node's slices with this node's name and UUIDs."""
    template_name, template_inventory, slices = template
    mapping: dict[str, str] = {template_name: name}
    for index in range(len(slices)):
        mapping[resource_slice_name(template_name, driver, index)] = resource_slice_name(
            name, driver, index
        )
    for old, new in zip(template_inventory.gpus, inventory.gpus, strict=True):
        mapping[old.info.uuid] = new.info.uuid
        for old_mig, new_mig in zip(old.mig_devices, new.mig_devices, strict=True):
            mapping[old_mig.uuid] = new_mig.uuid
    return [_replace_strings(s, mapping) for s in slices]


def _replace_strings(value: Any, mapping: Mapping[str, str]) -> Any:
    if isinstance(value, str):
        return mapping.get(value, value)
    if isinstance(value, dict):
        return {key: _replace_strings(item, mapping) for key, item in value.items()}
    if isinstance(value, list):
        return [_replace_strings(item, mapping) for item in value]
    return value
