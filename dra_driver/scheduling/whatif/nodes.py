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
`gb200-node:fabric=in-progress=1` and `gb200-node:clique=1=4` change the NVLink
fabric the shape's GPUs report (`NodeRequest`), so a simulation can hold a
node whose fabric is still registering, or a second rack.

Without `--nodes`, the nodes are the `kind: Node` objects given (their labels
matter for slices with a nodeSelector) plus every `spec.nodeName` the given
ResourceSlices name.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Final, Literal, Protocol

from dra_driver.errors import ConfigError
from dra_driver.hardware.nvml import fabric
from dra_driver.kube.objects import Obj
from dra_driver.node.consumable_shares import ConsumableShares
from dra_driver.node.devices import AllocatableDevice
from dra_driver.scheduling.allocator import Node, Release

MigMode = Literal["dynamic", "static"]

HOSTNAME_LABEL: Final = "kubernetes.io/hostname"
MAX_NODES: Final = 5000


@dataclass(frozen=True)
class NodeRequest:
    """`shape[:option...]=count` from `--nodes`.

    Options change the NVLink fabric every GPU of the shape reports (the shape
    must have one: `gb200-node`, `gb300-node`, or a shape file with a `fabric` block):
    `fabric=STATE` (NVML's fabric state: `not-supported`, `not-started`,
    `in-progress`, `completed`; `_` for `-` too), as right after a boot while
    the fabric manager registers the GPUs; `clique=N`, the clique ID (another
    NVL72 rack of the same NVLink cluster).
    """

    shape: str
    count: int
    fabric_state: int | None = None  # dra_driver.hardware.nvml.fabric.STATE_*
    clique: int | None = None

    @property
    def prefix(self) -> str:
        """Node name prefix: the shape name, or a shape file's stem, then the options
        (`gb200-node-clique1`, `gb200-node-in-progress`)."""
        if self.shape.endswith((".yaml", ".yml")) or "/" in self.shape:
            base = Path(self.shape).stem
        else:
            base = self.shape
        if self.clique is not None:
            base += f"-clique{self.clique}"
        if self.fabric_state is not None:
            base += f"-{fabric.STATE_NAMES[self.fabric_state]}"
        return base


_STATES: Final = {name: state for state, name in fabric.STATE_NAMES.items()}
_OPTIONS: Final = ("fabric", "clique")


def _with_options(shape: str, count: int, where: str) -> NodeRequest:
    """`shape` with its `:key=value` options (see `NodeRequest`)."""
    base, *options = shape.split(":")
    request = NodeRequest(base.strip(), count)
    for option in options:
        key, sep, value = (text.strip() for text in option.partition("="))
        if key not in _OPTIONS:
            raise ConfigError(
                f"{where}: unknown option {key!r} (options: {', '.join(_OPTIONS)}, as in "
                "gb200-node:fabric=in-progress=1 or gb200-node:clique=1=4)"
            )
        if not sep or not value:
            raise ConfigError(f"{where}: option {key!r} needs a value (SHAPE:{key}=VALUE[=COUNT])")
        if key == "fabric":
            state = _STATES.get(value.replace("_", "-"))
            if state is None:
                raise ConfigError(f"{where}: fabric={value}: expected one of {', '.join(_STATES)}")
            request = replace(request, fabric_state=state)
        else:
            if not value.isdigit() or int(value) >= 2**32:
                raise ConfigError(f"{where}: clique={value}: expected an integer 0..4294967295")
            request = replace(request, clique=int(value))
    return request


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
        if not sep or (":" in shape and "=" not in shape.rsplit(":", 1)[1]):
            # `shape` alone, or `gb200-node:clique=1`: the last `=` is the option's.
            shape, count_text = part, "1"
        shape = shape.strip()
        where = f"--nodes {spec!r}" + (f": {part!r}" if part != spec.strip() else "")
        try:
            count = int(count_text)
        except ValueError as exc:
            if ":" not in part:
                raise ConfigError(f"{where}: the count must be an integer") from exc
            shape, count = part, 1  # `gb200-node:fabric=in-progress`: options, one node
        if not shape or count < 1:
            raise ConfigError(f"{where}: expected SHAPE=COUNT with COUNT >= 1")
        requests.append(
            _with_options(shape, count, where) if ":" in shape else NodeRequest(shape, count)
        )
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
