"""What a node publishes for `compute-domain.nvidia.com`, from its GPU inventory.

NVIDIA's CD plugin publishes one pool with at most two devices (computedomain.md
§3.2; `cmd/compute-domain-kubelet-plugin/deviceinfo.go`, `driver.go`):
`channel-0` (`type=channel`, `id=0`), the IMEX channel a workload claim gets,
and `daemon-0` (`type=daemon`, `id=0`), the IMEX daemon's own device (left
out in host-managed IMEX mode). Channels 1..2047 are never published. The
DeviceClasses select on exactly these attributes.

Where this differs from NVIDIA, by design (issue #24, "Fabric state";
computedomain.md §3.8, §7.8): NVIDIA's plugin exits ("refusing to start")
while a GPU's fabric registers or has failed, and publishes its devices on
nodes without a multi-node fabric, where a channel claim then gets nothing.
Here the node publishes its devices only while its GPUs sit in one usable
clique: every GPU with a fabric COMPLETED, SUCCESS and healthy
(`dra_driver.hardware.nvml.fabric.classify`), GPUs without a multi-node
fabric skipped as NVIDIA skips them, all in-clique GPUs agreeing on one
clique. Otherwise it publishes none and says why (`withheld`), so a
channel claim stays pending with a reason instead of starting without
NVLink, and the devices appear once the fabric settles, with no restart.
Both devices also carry the node's clique as `cliqueID` (NVIDIA's node-label
format, the attribute whole GPUs carry), so a claim can ask for a clique.

`channel-0` is published with `allowMultipleAllocations: true` (CD-DESIGN.md
point 1): where the cluster has DRAConsumableCapacity (beta in Kubernetes
1.36), every pod of one domain on a node gets its own claim on it (the
node's IMEX domain serves them all; NVIDIA allows one channel claim per node,
computedomain.md §3.4, §7.6). An API server without the gate drops the field,
and the node is back to NVIDIA's one claim per node. `daemon-0` stays single.

Sharing alone would let the scheduler put a pod of domain B on a node that
already serves domain A, which Prepare must refuse (one IMEX daemon per
node) and the pod would be stuck. So while the node has a
ComputeDomainMember, `channel-0` carries our attribute `domain` (the
domain's UID; `with_domain`), and the workload template selects a channel
without it or with its own UID (`templates.py`): other domains are kept off
by the scheduler, with no feature gate. Host-managed IMEX has no members
(all domains share the host's channel 0, computedomain.md §4.8), so there
the attribute never appears; nor in channel isolation, where a node serves
every domain, each on its own channel (`isolation`; the plugin then never
calls `with_domain` with a domain).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from dra_driver.compute_domain.names import CHANNEL_TYPE, DAEMON_TYPE, DOMAIN_ATTRIBUTE
from dra_driver.hardware.nvml.fabric import FabricCondition, classify, describe
from dra_driver.node.devices import CLIQUE_ATTRIBUTE, gpu_device_name
from dra_driver.node.inventory import NodeInventory

_WITHOUT_FABRIC: Final = (FabricCondition.NOT_SUPPORTED, FabricCondition.NOT_MULTI_NODE)


@dataclass(frozen=True)
class ComputeDomainDevices:
    """The devices a node publishes (resource.k8s.io/v1 form), its clique, and why none
    are published (`withheld`, one line per cause; empty when `devices` are published)."""

    devices: tuple[dict[str, Any], ...]
    clique: str | None
    withheld: tuple[str, ...] = ()


def device_name(kind: str, index: int) -> str:
    """NVIDIA's canonical name: `channel-0`, `daemon-0`."""
    return f"{kind}-{index}"


def compute_domain_devices(
    inventory: NodeInventory, *, host_managed: bool = False
) -> ComputeDomainDevices:
    """The `compute-domain.nvidia.com` devices of a node with `inventory` (module docstring)."""
    clique, withheld = node_clique(inventory)
    if clique is None:
        return ComputeDomainDevices(devices=(), clique=None, withheld=withheld)
    kinds = (CHANNEL_TYPE,) if host_managed else (CHANNEL_TYPE, DAEMON_TYPE)
    devices = tuple(_device(kind, clique) for kind in kinds)
    return ComputeDomainDevices(devices=devices, clique=clique)


def _device(kind: str, clique: str) -> dict[str, Any]:
    device: dict[str, Any] = {
        "name": device_name(kind, 0),
        "attributes": {
            "type": {"string": kind},
            "id": {"int": 0},
            CLIQUE_ATTRIBUTE: {"string": clique},
        },
    }
    if kind == CHANNEL_TYPE:
        device["allowMultipleAllocations"] = True
    return device


def with_domain(devices: tuple[dict[str, Any], ...], domain: str | None) -> list[dict[str, Any]]:
    """`devices` with `channel-0` carrying `domain` (the UID of the ComputeDomain the node
    serves) when there is one (module docstring); unchanged otherwise."""
    if not domain:
        return list(devices)
    out: list[dict[str, Any]] = []
    for device in devices:
        if device["attributes"]["type"] == {"string": CHANNEL_TYPE}:
            attributes = {**device["attributes"], DOMAIN_ATTRIBUTE: {"string": domain}}
            out.append({**device, "attributes": attributes})
        else:
            out.append(device)
    return out


def node_clique(inventory: NodeInventory) -> tuple[str | None, tuple[str, ...]]:
    """The node's NVLink clique (`<clusterUUID>.<cliqueId>`) when every GPU's fabric allows
    publishing, else None and why not."""
    if not inventory.gpus:
        return None, ("the node has no GPUs",)
    unsettled: list[str] = []
    cliques: dict[str, list[str]] = {}
    for gpu in inventory.gpus:
        info = gpu.info
        label = f"{gpu_device_name(info)} ({info.uuid})"
        condition = classify(info.fabric)
        if condition in _WITHOUT_FABRIC:
            continue
        if condition is FabricCondition.IN_CLIQUE and info.fabric is not None:
            cliques.setdefault(info.fabric.clique, []).append(gpu_device_name(info))
        else:
            unsettled.append(
                f"{label} has an NVLink {describe(info.fabric)}: the node publishes its "
                "channel once the fabric manager reports it completed and healthy"
            )
    if unsettled:
        return None, tuple(unsettled)
    if not cliques:
        return None, (
            "no GPU is in a multi-node NVLink clique (no fabric, or NVLink without a "
            "cluster): ComputeDomains need GB200/GB300-class multi-node NVLink",
        )
    if len(cliques) > 1:
        split = "; ".join(f"{clique}: {', '.join(names)}" for clique, names in cliques.items())
        return None, (f"the node's GPUs are in more than one NVLink clique ({split})",)
    (clique,) = cliques
    return clique, ()
