"""The ResourceSlices our kubelet plugin would publish for simulated nodes.

`dra-gpu simulate --nodes dgx-h100=2,dgx-a100-40gb=1` places pods on nodes
built by our own node code: simulated hardware (`dra_driver.hardware.simulated`, one
instance per node, so every node has its own GPU UUIDs),
`dra_driver.node.inventory.discover`, `dra_driver.node.devices.build_devices` and
`controller.slices.build_resource_slices`, the same calls the kubelet plugin
makes, so the slices are exactly the ones our publisher would publish.
`mig="static"` (the default, as for the plugin) publishes the existing MIG
devices only, and `mig="dynamic"` is the plugin run with `--dynamic-mig`,
where every MIG placement is a partitionable device, with the slice layout
the plugin picks for that Kubernetes release. `passthrough` is the plugin run
with `--passthrough` (a `gpu-vfio-<idx>` device per GPU without MIG devices).

It joins the simulated GPUs and the controller's slice building, which the
rest of the code keeps apart, so it lives with the composition root: the CLI
hands `build_simulated_nodes` to the scheduler emulation
(`dra_driver.scheduling.whatif.nodes.NodeBuilder`).

Building and checking the slices of a 200-device DGX takes about half a
second; nodes of one shape only differ in their name and UUIDs, so the first
node of a shape is built in full and the others are derived from it by
renaming (the test suite checks that this equals a full build).

A shape with a multi-node NVLink fabric (`gb200-node`) also publishes the
second driver's slice (`compute-domain.nvidia.com`: `channel-0`, `daemon-0`),
as its CD plugin would (`dra_driver.compute_domain.devices`), so ComputeDomain
channel claims can be placed, and its nodes carry NVIDIA's `nvidia.com/gpu.clique`
label (`<clusterUUID>.<cliqueId>`, as GPU Feature Discovery or NVIDIA's CD plugin
sets it), which NVIDIA's docs have workloads select with node affinity; other
shapes publish and carry neither.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any

from controller.compute_domain_inventory import compute_domain_resource_slices
from controller.slices import build_resource_slices, choose_layout, resource_slice_name
from dra_driver import DEFAULT_DRIVER_NAME
from dra_driver.compute_domain.devices import compute_domain_devices
from dra_driver.compute_domain.names import CLIQUE_NODE_LABEL
from dra_driver.hardware.simulated.boot import booted_node_state
from dra_driver.hardware.simulated.hardware import SimHardware
from dra_driver.hardware.simulated.nvml import SimNvml
from dra_driver.hardware.simulated.shapes import NodeShape, load_shape
from dra_driver.kube.objects import Obj
from dra_driver.node.consumable_shares import ConsumableShares
from dra_driver.node.devices import AllocatableDevice, build_devices
from dra_driver.node.inventory import NodeInventory, discover
from dra_driver.node.vfio_devices import build_vfio_devices, pci_view
from dra_driver.scheduling.allocator import Node, Release
from dra_driver.scheduling.whatif.nodes import (
    HOSTNAME_LABEL,
    MigMode,
    NodeRequest,
    SimulatedNodes,
)


def build_simulated_nodes(
    requests: Sequence[NodeRequest],
    *,
    driver: str = DEFAULT_DRIVER_NAME,
    mig: MigMode = "static",
    release: Release = "1.35",
    consumable_shares: ConsumableShares | None = None,
    list_attributes: bool = False,
    passthrough: bool = False,
) -> SimulatedNodes:
    """Simulated nodes and their slices, in request order (see the module docstring).

    `list_attributes` is the plugin's `--feature-gates DRAListTypeAttributes=true`."""
    built = SimulatedNodes()
    for request in requests:
        shape = load_shape(request.shape)
        template: tuple[str, list[Obj]] | None = None
        devices = _ShapeDevices(
            shape,
            f"{request.prefix}-0",
            mig=mig,
            consumable_shares=consumable_shares,
            list_attributes=list_attributes,
            passthrough=passthrough,
        )
        published = (
            compute_domain_devices(_inventory(shape, f"{request.prefix}-0"))
            if shape.fabric is not None
            else None
        )
        labels = {CLIQUE_NODE_LABEL: published.clique} if published and published.clique else {}
        for index in range(request.count):
            name = f"{request.prefix}-{index}"
            if template is None:
                slices = node_slices(
                    _inventory(shape, name),
                    name,
                    driver=driver,
                    mig=mig,
                    release=release,
                    consumable_shares=consumable_shares,
                    list_attributes=list_attributes,
                    passthrough=passthrough,
                )
                template = (name, slices)
            else:
                slices = _renamed(template, name, shape, driver)
            built.nodes.append(Node(name, {HOSTNAME_LABEL: name, **labels}))
            built.slices.extend(slices)
            if published and published.devices:
                built.slices.extend(
                    compute_domain_resource_slices(published.devices, node_name=name)
                )
            built.devices[name] = functools.partial(devices.of, name)
    return built


class _ShapeDevices:
    """The devices of the nodes of one shape: the first node's built from its simulated
    hardware, the others' derived from them with their own UUIDs (as their slices are)."""

    def __init__(
        self,
        shape: NodeShape,
        template: str,
        *,
        mig: MigMode,
        consumable_shares: ConsumableShares | None,
        list_attributes: bool = False,
        passthrough: bool = False,
    ) -> None:
        self._shape = shape
        self._template = template
        self._mig = mig
        self._shares = consumable_shares
        self._lists = list_attributes
        self._passthrough = passthrough
        self._built: list[AllocatableDevice] | None = None
        self._template_uuids: tuple[str, ...] = ()

    def of(self, node_name: str) -> list[AllocatableDevice]:
        if self._built is None:
            self._built = node_devices(
                self._shape,
                self._template,
                mig=self._mig,
                consumable_shares=self._shares,
                list_attributes=self._lists,
                passthrough=self._passthrough,
            )
            self._template_uuids = _uuids(self._shape, self._template)
        if node_name == self._template:
            return self._built
        mapping = dict(zip(self._template_uuids, _uuids(self._shape, node_name), strict=True))
        memo: dict[int, Any] = {}
        return [_replace_in(device, mapping, memo) for device in self._built]


def node_devices(
    shape: NodeShape,
    node_name: str,
    *,
    mig: MigMode = "static",
    consumable_shares: ConsumableShares | None = None,
    list_attributes: bool = False,
    passthrough: bool = False,
) -> list[AllocatableDevice]:
    """The devices the kubelet plugin of a freshly booted node of `shape` publishes."""
    return _devices(
        _inventory(shape, node_name),
        mig=mig,
        consumable_shares=consumable_shares,
        list_attributes=list_attributes,
        passthrough=passthrough,
    )


def node_slices(
    inventory: NodeInventory,
    node_name: str,
    *,
    driver: str = DEFAULT_DRIVER_NAME,
    mig: MigMode = "static",
    release: Release = "1.35",
    consumable_shares: ConsumableShares | None = None,
    list_attributes: bool = False,
    passthrough: bool = False,
) -> list[Obj]:
    """The ResourceSlices the kubelet plugin publishes for `inventory` on `node_name`."""
    devices = _devices(
        inventory,
        mig=mig,
        consumable_shares=consumable_shares,
        list_attributes=list_attributes,
        passthrough=passthrough,
    )
    return build_resource_slices(
        devices,
        driver=driver,
        node_name=node_name,
        version=release,
        layout=choose_layout(_version_tuple(release)),
    )


def _devices(
    inventory: NodeInventory,
    *,
    mig: MigMode,
    consumable_shares: ConsumableShares | None,
    list_attributes: bool = False,
    passthrough: bool = False,
) -> list[AllocatableDevice]:
    """The plugin's devices, with `--passthrough` its vfio devices too (a freshly booted
    simulated node has iommufd and every GPU on the nvidia driver)."""
    devices = build_devices(
        inventory,
        dynamic_mig=mig == "dynamic",
        consumable_shares=consumable_shares,
        list_attributes=list_attributes,
    )
    if passthrough:
        devices += build_vfio_devices(inventory, pci_view(inventory), iommufd_enabled=True)
    return devices


def _version_tuple(release: Release) -> tuple[int, int]:
    major, minor = release.split(".")
    return int(major), int(minor)


def _inventory(shape: NodeShape, node_name: str) -> NodeInventory:
    # Discovery reads NVML only: the node lives in memory, without the fake
    # /proc tree and state file a plugin process shares with its node.
    return discover(SimNvml(SimHardware(shape, node_name=node_name)))


def _renamed(
    template: tuple[str, list[Obj]], name: str, shape: NodeShape, driver: str
) -> list[Obj]:
    """The template node's slices with this node's name and UUIDs.

    A node's UUIDs are those of its simulated hardware as first booted
    (`booted_node_state`), so the two nodes' states pair them up in order.
    """
    template_name, slices = template
    mapping: dict[str, str] = {template_name: name}
    for index in range(len(slices)):
        mapping[resource_slice_name(template_name, driver, index)] = resource_slice_name(
            name, driver, index
        )
    mapping.update(zip(_uuids(shape, template_name), _uuids(shape, name), strict=True))
    return [_replace_strings(s, mapping) for s in slices]


@functools.lru_cache(maxsize=4096)  # asked for by a node's slices and again by its devices
def _uuids(shape: NodeShape, node_name: str) -> tuple[str, ...]:
    """The GPU and MIG device UUIDs of a freshly booted node, in state order."""
    uuids: list[str] = []
    for gpu in booted_node_state(shape, node_name).gpus:
        uuids.append(gpu.uuid)
        uuids.extend(ci.uuid for gi in gpu.gis for ci in gi.cis)
    return tuple(uuids)


def _replace_in(value: Any, mapping: Mapping[str, str], memo: dict[int, Any]) -> Any:
    """`value` (a frozen device record, its attributes, ...) with the strings of `mapping`
    replaced, rebuilt only where something changed; `memo` maps the ids of the records
    already done (the devices of one GPU share its records, GPUs of a model their profiles)."""
    if isinstance(value, str):
        return mapping.get(value, value)
    if isinstance(value, int | float | bool) or value is None:
        return value
    done = memo.get(id(value))
    if done is not None:
        return done[1]
    new: Any = value
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        changes = {}
        for item in dataclasses.fields(value):
            old = getattr(value, item.name)
            replaced = _replace_in(old, mapping, memo)
            if replaced is not old:
                changes[item.name] = replaced
        new = dataclasses.replace(value, **changes) if changes else value
    elif isinstance(value, tuple):
        items = tuple(_replace_in(item, mapping, memo) for item in value)
        new = value if all(a is b for a, b in zip(items, value, strict=True)) else items
    elif isinstance(value, Mapping):
        replaced_items = {key: _replace_in(item, mapping, memo) for key, item in value.items()}
        if any(replaced_items[key] is not item for key, item in value.items()):
            new = (
                MappingProxyType(replaced_items)
                if isinstance(value, MappingProxyType)
                else replaced_items
            )
    memo[id(value)] = (value, new)  # the original is kept alive so its id stays unique
    return new


def _replace_strings(value: Any, mapping: Mapping[str, str]) -> Any:
    if isinstance(value, str):
        return mapping.get(value, value)
    if isinstance(value, dict):
        return {key: _replace_strings(item, mapping) for key, item in value.items()}
    if isinstance(value, list):
        return [_replace_strings(item, mapping) for item in value]
    return value
