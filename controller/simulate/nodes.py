"""The nodes of a simulation: simulated DGX-style nodes, Node objects, or slice owners.

`--nodes dgx-h100=2,dgx-a100-40gb=1` asks for nodes built by our own node
code: simulated hardware (`dra_driver.sim`, one instance per node, so every
node has its own GPU UUIDs), `dra_driver.inventory.discover`,
`dra_driver.devices.build_devices` and `controller.slices.build_resource_slices`,
the same calls the kubelet plugin makes, so the slices are exactly the ones
our publisher would publish: `mig="dynamic"` (the default here) is the plugin
run with `--dynamic-mig`, where every MIG placement is a partitionable device,
and `mig="static"` the plugin's own default (existing MIG devices only), with
the slice layout the plugin picks for that Kubernetes release. Nodes are
named `<shape>-<i>` (a YAML shape file gives its file stem).

Building and checking the slices of a 200-device DGX takes about half a
second; nodes of one shape only differ in their name and UUIDs, so the first
node of a shape is built in full and the others are derived from it by
renaming (the test suite checks that this equals a full build).

Without `--nodes`, the nodes are the `kind: Node` objects given (their labels
matter for slices with a nodeSelector) plus every `spec.nodeName` the given
ResourceSlices name.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Literal

from controller.slices import build_resource_slices, choose_layout, resource_slice_name
from dra_driver import DEFAULT_DRIVER_NAME
from dra_driver.allocator import Node
from dra_driver.consumable_shares import ConsumableShares
from dra_driver.devices import build_devices
from dra_driver.errors import ConfigError
from dra_driver.inventory import NodeInventory, discover
from dra_driver.nvml.backend import open_hardware

Obj = dict[str, Any]
MigMode = Literal["dynamic", "static"]
Release = Literal["1.34", "1.35"]

HOSTNAME_LABEL: Final = "kubernetes.io/hostname"
MAX_NODES: Final = 5000


@dataclass(frozen=True)
class NodeRequest:
    """`shape=count` from `--nodes`."""

    shape: str
    count: int

    @property
    def prefix(self) -> str:
        """Node name prefix: the shape name, or a shape file's stem."""
        if self.shape.endswith((".yaml", ".yml")) or "/" in self.shape:
            return Path(self.shape).stem
        return self.shape


@dataclass
class SimulatedNodes:
    """Nodes in placement order and the slices published for them."""

    nodes: list[Node] = field(default_factory=list)
    slices: list[Obj] = field(default_factory=list)


def parse_node_spec(spec: str) -> list[NodeRequest]:
    """`shape=count[,shape=count...]`; a bare `shape` means one node.

    Raises ConfigError naming the part at fault.
    """
    requests: list[NodeRequest] = []
    for part in (p.strip() for p in spec.split(",")):
        if not part:
            continue
        shape, sep, count_text = part.rpartition("=")
        if not sep:
            shape, count_text = part, "1"
        shape = shape.strip()
        where = f"--nodes {spec!r}" + (f": {part!r}" if part != spec.strip() else "")
        try:
            count = int(count_text)
        except ValueError as exc:
            raise ConfigError(f"{where}: the count must be an integer") from exc
        if not shape or count < 1:
            raise ConfigError(f"{where}: expected SHAPE=COUNT with COUNT >= 1")
        requests.append(NodeRequest(shape, count))
    if not requests:
        raise ConfigError(f"--nodes {spec!r}: expected SHAPE=COUNT[,SHAPE=COUNT...]")
    total = sum(r.count for r in requests)
    if total > MAX_NODES:
        raise ConfigError(f"--nodes {spec!r}: {total} nodes, at most {MAX_NODES} supported")
    prefixes = [r.prefix for r in requests]
    duplicate = next((p for p in prefixes if prefixes.count(p) > 1), None)
    if duplicate is not None:
        raise ConfigError(f"--nodes {spec!r}: shape {duplicate!r} is named twice")
    return requests


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


def nodes_from_objects(
    node_objects: Iterable[Mapping[str, Any]], slices: Iterable[Obj]
) -> list[Node]:
    """Nodes from `kind: Node` objects (with labels), then nodes only slices name (sorted)."""
    nodes: list[Node] = []
    known: set[str] = set()
    for obj in node_objects:
        meta = obj.get("metadata") or {}
        name = str(meta.get("name"))
        labels = {str(k): str(v) for k, v in (meta.get("labels") or {}).items()}
        labels.setdefault(HOSTNAME_LABEL, name)
        nodes.append(Node(name, labels))
        known.add(name)
    named = sorted(
        {
            str((s.get("spec") or {}).get("nodeName"))
            for s in slices
            if (s.get("spec") or {}).get("nodeName")
        }
        - known
    )
    nodes.extend(Node(name, {HOSTNAME_LABEL: name}) for name in named)
    return nodes
