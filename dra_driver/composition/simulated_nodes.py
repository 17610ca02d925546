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

A shape with a multi-node NVLink fabric (`gb200-node`, `gb300-node`) also publishes the
second driver's slice (`compute-domain.nvidia.com`: `channel-0`, `daemon-0`),
as its CD plugin would (`dra_driver.compute_domain.devices`), so ComputeDomain
channel claims can be placed, and its nodes carry NVIDIA's `nvidia.com/gpu.clique`
label (`<clusterUUID>.<cliqueId>`, as GPU Feature Discovery or NVIDIA's CD plugin
sets it), which NVIDIA's docs have workloads select with node affinity; other
shapes publish and carry neither, and the CD plugin's reasons for that (no
multi-node fabric, a fabric not yet completed) are kept per node
(`SimulatedNodes.compute_domain_withheld`) for `explain`. A request's
`fabric=`/`clique=` options (`gb200-node:fabric=in-progress`) change the fabric
the shape's GPUs report.
"""

from __future__ import annotations

import dataclasses
import functools
import pickle
from collections.abc import Iterator, Mapping, Sequence
from types import MappingProxyType
from typing import Any

from controller.compute_domain_inventory import compute_domain_resource_slices
from controller.slices import build_resource_slices, choose_layout, resource_slice_name
from dra_driver import DEFAULT_DRIVER_NAME
from dra_driver.compute_domain.devices import compute_domain_devices
from dra_driver.compute_domain.names import CLIQUE_NODE_LABEL
from dra_driver.errors import ConfigError
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
        shape = _shape(request)
        uuids = _ShapeUuids(shape)
        template: _SliceTemplate | None = None
        devices = _ShapeDevices(
            shape,
            f"{request.prefix}-0",
            uuids,
            mig=mig,
            consumable_shares=consumable_shares,
            list_attributes=list_attributes,
            passthrough=passthrough,
        )
        published = compute_domain_devices(_inventory(shape, f"{request.prefix}-0"))
        labels = {CLIQUE_NODE_LABEL: published.clique} if published.clique else {}
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
                template = _SliceTemplate(name, slices, uuids, driver)
            else:
                slices = template.renamed(name)
            built.nodes.append(Node(name, {HOSTNAME_LABEL: name, **labels}))
            built.slices.extend(slices)
            if published.devices:
                built.slices.extend(
                    compute_domain_resource_slices(published.devices, node_name=name)
                )
            elif shape.fabric is not None and index:
                # The reasons name each GPU by UUID, and every node has its own.
                withheld = compute_domain_devices(_inventory(shape, name)).withheld
                built.compute_domain_withheld[name] = withheld
            else:
                built.compute_domain_withheld[name] = published.withheld
            built.devices[name] = functools.partial(devices.of, name)
    return built


def _shape(request: NodeRequest) -> NodeShape:
    """The request's shape, with the fabric its options ask for."""
    shape = load_shape(request.shape)
    if request.fabric_state is None and request.clique is None:
        return shape
    if shape.fabric is None:
        raise ConfigError(
            f"--nodes {request.shape}: the shape has no NVLink fabric, so fabric= and clique= "
            "do not apply (use gb200-node, gb300-node, or a shape file with a fabric block)"
        )
    nvlink = shape.fabric
    if request.fabric_state is not None:
        nvlink = dataclasses.replace(nvlink, state=request.fabric_state)
    if request.clique is not None:
        nvlink = dataclasses.replace(nvlink, clique_id=request.clique)
    return dataclasses.replace(shape, fabric=nvlink)


class _ShapeDevices:
    """The devices of the nodes of one shape: the first node's built from its simulated
    hardware, the others' derived from them with their own UUIDs (as their slices are)."""

    def __init__(
        self,
        shape: NodeShape,
        template: str,
        uuids: _ShapeUuids,
        *,
        mig: MigMode,
        consumable_shares: ConsumableShares | None,
        list_attributes: bool = False,
        passthrough: bool = False,
    ) -> None:
        self._shape = shape
        self._uuids = uuids
        self._template = template
        self._mig = mig
        self._shares = consumable_shares
        self._lists = list_attributes
        self._passthrough = passthrough
        self._built: list[AllocatableDevice] | None = None
        self._template_uuids: tuple[str, ...] = ()
        self._renaming: _Renaming | None = None

    def of(self, node_name: str) -> list[AllocatableDevice]:
        if self._built is None or self._renaming is None:
            self._built = node_devices(
                self._shape,
                self._template,
                mig=self._mig,
                consumable_shares=self._shares,
                list_attributes=self._lists,
                passthrough=self._passthrough,
            )
            self._template_uuids = self._uuids(self._template)
            self._renaming = _Renaming(self._built, frozenset(self._template_uuids))
        if node_name == self._template:
            return self._built
        mapping = dict(zip(self._template_uuids, self._uuids(node_name), strict=True))
        return self._renaming.apply(mapping)


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


class _SliceTemplate:
    """The template node's slices, renamed for each other node of its shape.

    A node's slices are the template's with the node's name, slice names and
    UUIDs: those of its simulated hardware as first booted
    (`booted_node_state`), so the two nodes' states pair them up in order.
    Where those strings are is found once; each node gets a copy (unpickled,
    which copies in C what a recursive copy did in Python) with them replaced.
    """

    def __init__(self, name: str, slices: Sequence[Obj], uuids: _ShapeUuids, driver: str) -> None:
        self._name = name
        self._count = len(slices)
        self._uuids = uuids
        self._driver = driver
        self._pickled = pickle.dumps(list(slices), protocol=pickle.HIGHEST_PROTOCOL)
        self._places = list(_string_places(list(slices), set(self._mapping(name))))

    def renamed(self, name: str) -> list[Obj]:
        mapping = dict(zip(self._mapping(self._name), self._mapping(name), strict=True))
        slices: list[Obj] = pickle.loads(self._pickled)
        for path, old in self._places:
            parent: Any = slices
            for step in path[:-1]:
                parent = parent[step]
            parent[path[-1]] = mapping[old]
        return slices

    def _mapping(self, name: str) -> list[str]:
        """The strings that are this node's own: its name, its slices' names, its UUIDs."""
        names = [resource_slice_name(name, self._driver, i) for i in range(self._count)]
        return [name, *names, *self._uuids(name)]


def _string_places(
    value: Any, strings: set[str], path: tuple[Any, ...] = ()
) -> Iterator[tuple[tuple[Any, ...], str]]:
    """(path, string) for every value in `value` that is one of `strings` (keys excluded)."""
    items = value.items() if isinstance(value, dict) else enumerate(value)
    for key, item in items:
        if isinstance(item, str):
            if item in strings:
                yield (*path, key), item
        elif isinstance(item, dict | list):
            yield from _string_places(item, strings, (*path, key))


class _ShapeUuids:
    """The GPU and MIG device UUIDs of each freshly booted node of one shape, in state
    order, found once per node (asked for by its slices and again by its devices).

    A dictionary per shape, not a cache keyed by the shape: hashing a `NodeShape`
    walks every record of every GPU (0.14 ms), and 500 nodes asked it 2,000 times.
    """

    def __init__(self, shape: NodeShape) -> None:
        self._shape = shape
        self._known: dict[str, tuple[str, ...]] = {}

    def __call__(self, node_name: str) -> tuple[str, ...]:
        found = self._known.get(node_name)
        if found is None:
            uuids: list[str] = []
            for gpu in booted_node_state(self._shape, node_name).gpus:
                uuids.append(gpu.uuid)
                uuids.extend(ci.uuid for gi in gpu.gis for ci in gi.cis)
            found = self._known[node_name] = tuple(uuids)
        return found


_Step = tuple[Any, ...]
"""How to rebuild one value of the template node for another node (see `_Renaming`)."""


class _Renaming:
    """The template node's devices with another node's UUIDs, rebuilt where a UUID is.

    Every node of a shape has its UUIDs in the same places, so where they are
    is found once, walking the template's device records (frozen dataclasses,
    tuples, mappings); each other node then rebuilds only those paths, and
    shares every other part with the template. A record used in several
    places (the devices of one GPU share its `GpuInfo`) is rebuilt once per
    node and stays shared.
    """

    def __init__(self, devices: Sequence[AllocatableDevice], uuids: frozenset[str]) -> None:
        self._devices = list(devices)
        self._uuids = uuids
        self._found: dict[int, _Step | None] = {}
        self._keep: list[Any] = []  # the walked values, so their ids stay theirs
        self._steps = [self._step(device) for device in self._devices]

    def apply(self, mapping: Mapping[str, str]) -> list[AllocatableDevice]:
        done: dict[int, Any] = {}
        return [
            device if step is None else _rebuild(device, step, mapping, done)
            for device, step in zip(self._devices, self._steps, strict=True)
        ]

    def _step(self, value: Any) -> _Step | None:
        """None where `value` holds no UUID, else how to rebuild it."""
        if isinstance(value, str):
            return ("str",) if value in self._uuids else None
        if isinstance(value, int | float | bool) or value is None:
            return None
        key = id(value)
        if key in self._found:
            return self._found[key]
        self._keep.append(value)
        step: _Step | None = None
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            parts = [
                (item.name, sub)
                for item in dataclasses.fields(value)
                if (sub := self._step(getattr(value, item.name))) is not None
            ]
            step = ("record", key, tuple(parts)) if parts else None
        elif isinstance(value, tuple):
            items = [(i, sub) for i, item in enumerate(value) if (sub := self._step(item))]
            step = ("tuple", key, tuple(items)) if items else None
        elif isinstance(value, Mapping):
            entries = [(k, sub) for k, item in value.items() if (sub := self._step(item))]
            step = ("mapping", key, tuple(entries)) if entries else None
        self._found[key] = step
        return step


def _rebuild(value: Any, step: _Step, mapping: Mapping[str, str], done: dict[int, Any]) -> Any:
    kind = step[0]
    if kind == "str":
        return mapping.get(value, value)
    key = step[1]
    if key in done:
        return done[key]
    parts = step[2]
    new: Any
    if kind == "record" and hasattr(value, "__dict__"):
        # A copy of the record's fields with UUIDs replaced by UUIDs: the same values
        # `dataclasses.replace` gives, without re-running `__init__`'s checks, which
        # took 40 % of deriving a node.
        fields = dict(vars(value))
        for name, sub in parts:
            fields[name] = _rebuild(fields[name], sub, mapping, done)
        new = object.__new__(type(value))
        vars(new).update(fields)
    elif kind == "record":  # a dataclass with __slots__
        changes = {name: _rebuild(getattr(value, name), sub, mapping, done) for name, sub in parts}
        new = dataclasses.replace(value, **changes)
    elif kind == "tuple":
        items = list(value)
        for index, sub in parts:
            items[index] = _rebuild(items[index], sub, mapping, done)
        new = tuple(items)
    else:
        entries = dict(value)
        for name, sub in parts:
            entries[name] = _rebuild(entries[name], sub, mapping, done)
        new = MappingProxyType(entries) if isinstance(value, MappingProxyType) else entries
    done[key] = new
    return new
