"""The node's own claim validation, run where the simulation places claims.

The scheduler allocates what the ResourceSlices allow; the kubelet plugin
then refuses, at Prepare, what it cannot honour: opaque configs that do not
decode strictly, a config for the other device type, MPS on two devices,
shares beyond a device's capacity, a time-slice interval or MPS mode that
clashes with a claim already on a shared GPU. `PluginChecks` runs the
plugin's own planning (`dra_driver.planning.plan_claim`, the same call the
plugin makes, not a copy of its rules) against the devices a simulated node
publishes and the claims already placed on it, so `simulate` refuses what
the node would, with the plugin's message.

A GPU passed through to a VM withdraws its other forms from the node's
slices (and the other way round): `withdrawn` names them, and the
simulation counts them as held from then on, as the scheduler stops seeing
them once the plugin republishes.

Nodes whose devices are not known (nodes that only ResourceSlices from a
file describe) are not checked: the plugin's rules need the devices as the
plugin sees them (GPU UUIDs, MIG placements, capacities).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from dra_driver import DEFAULT_DRIVER_NAME
from dra_driver.claims.allocated import parse_allocated_claim
from dra_driver.claims.checkpoint import Checkpoint
from dra_driver.errors import DraGpuError
from dra_driver.node.devices import AllocatableDevice
from dra_driver.node.vfio_devices import hidden_siblings
from dra_driver.planning import plan_claim

DeviceSource = Callable[[], Sequence[AllocatableDevice]]
"""The devices one node's plugin publishes (built on first use: a node may never be used)."""


class PluginChecks:
    """`engine.NodeChecks` through the plugin's planning (see the module docstring)."""

    def __init__(
        self, devices: Mapping[str, DeviceSource], *, driver: str = DEFAULT_DRIVER_NAME
    ) -> None:
        self._sources = dict(devices)
        self._driver = driver
        self._devices: dict[str, dict[str, AllocatableDevice]] = {}
        self._placed: dict[str, Checkpoint] = {}

    def refusal(self, node: str, claim: Mapping[str, Any], *, commit: bool = True) -> str | None:
        devices = self._node_devices(node)
        if devices is None:
            return None
        if not _has_results(claim, self._driver):
            return None
        meta = claim.get("metadata") or {}
        try:
            allocated = parse_allocated_claim(
                claim,
                driver=self._driver,
                expected_uid=str(meta.get("uid") or ""),
                expected_namespace=str(meta.get("namespace") or ""),
                expected_name=str(meta.get("name") or ""),
            )
            placed = self._placed.get(node) or Checkpoint(boot_id="")
            plan = plan_claim(allocated, pool_name=node, devices=devices, placed=placed)
        except DraGpuError as exc:  # what the plugin answers the kubelet with (`prepare`)
            return str(exc)
        if commit:
            self._placed[node] = placed.start(plan.entry())
        return None

    def withdrawn(self, node: str) -> set[tuple[str, str, str]]:
        """(driver, pool, device) of the devices `node`'s plugin withdraws from its slices
        while the claims placed there hold the other form of their GPU
        (`dra_driver.node.vfio_devices`)."""
        devices = self._devices.get(node)
        placed = self._placed.get(node)
        if devices is None or placed is None:
            return set()
        held = {prepared.device for _uid, prepared in placed.held_devices()}
        return {(self._driver, node, name) for name in hidden_siblings(devices.values(), held)}

    def _node_devices(self, node: str) -> dict[str, AllocatableDevice] | None:
        devices = self._devices.get(node)
        if devices is None:
            source = self._sources.get(node)
            if source is None:
                return None
            devices = {device.name: device for device in source()}
            self._devices[node] = devices
        return devices


def _has_results(claim: Mapping[str, Any], driver: str) -> bool:
    """Whether the allocation has a device of `driver` (the plugin is asked only then)."""
    allocation = (claim.get("status") or {}).get("allocation") or {}
    results = (allocation.get("devices") or {}).get("results") or []
    return any(isinstance(r, Mapping) and r.get("driver") == driver for r in results)
