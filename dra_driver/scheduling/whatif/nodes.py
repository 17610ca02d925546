"""The nodes of a simulation: `--nodes` requests, Node objects, or slice owners.

`--nodes dgx-h100=2,dgx-a100-40gb=1` asks for simulated DGX-style nodes
whose slices are exactly the ones our publisher would publish. Building
those slices is the controller's job (`dra_driver.composition.simulated_nodes`: simulated
hardware, inventory, devices and `controller.slices`, the same calls the
kubelet plugin makes), and the core must not import `controller`; so this
module only parses the request (`parse_node_spec`) and states the shape of
the builder (`NodeBuilder`), and the composition root (`dra_driver.cli`)
hands `dra_driver.composition.simulated_nodes.build_simulated_nodes` to the simulator.
Nodes are named `<shape>-<i>` (a YAML shape file gives its file stem).

Without `--nodes`, the nodes are the `kind: Node` objects given (their labels
matter for slices with a nodeSelector) plus every `spec.nodeName` the given
ResourceSlices name.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Literal, Protocol

from dra_driver.errors import ConfigError
from dra_driver.kube.objects import Obj
from dra_driver.node.consumable_shares import ConsumableShares
from dra_driver.node.devices import AllocatableDevice
from dra_driver.scheduling.allocator import Node, Release

MigMode = Literal["dynamic", "static"]

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
    """Nodes in placement order, the slices published for them, and (by node name) the
    devices their kubelet plugin publishes, built when first asked for: what the plugin's
    own claim validation runs against (`node_checks`); and why nodes publish no IMEX
    channel (`compute_domains`)."""

    nodes: list[Node] = field(default_factory=list)
    slices: list[Obj] = field(default_factory=list)
    devices: dict[str, Callable[[], Sequence[AllocatableDevice]]] = field(default_factory=dict)
    compute_domain_withheld: dict[str, tuple[str, ...]] = field(default_factory=dict)
    """Why a node publishes no `compute-domain.nvidia.com` devices (by node name; nodes that
    publish them are absent): `dra_driver.compute_domain.devices`' reasons."""


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


class NodeBuilder(Protocol):
    """Builds simulated nodes and the slices the plugin would publish for them."""

    def __call__(
        self,
        requests: Sequence[NodeRequest],
        *,
        mig: MigMode,
        release: Release,
        consumable_shares: ConsumableShares | None = None,
        list_attributes: bool = False,
        passthrough: bool = False,
    ) -> SimulatedNodes: ...


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
