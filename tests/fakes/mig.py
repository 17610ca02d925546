"""Dynamic-MIG helpers: MIG profile claims and a view of the live instances of a plugin's simulated
node.
"""

from __future__ import annotations

from dataclasses import dataclass

from dra_driver.composition.demo_claims import (
    MIG_DEVICE_CLASS,
    PARENT_UUID_ATTRIBUTE,
)
from dra_driver.composition.demo_claims import mig_profile_claim as make_mig_profile_claim
from dra_driver.composition.plugin_process import PluginProcess
from dra_driver.hardware.machine import Hardware
from dra_driver.hardware.nvml.interface import (
    Placement,
)
from dra_driver.hardware.simulated.hardware import SimHardware

__all__ = [
    "MIG_DEVICE_CLASS",
    "PARENT_UUID_ATTRIBUTE",
    "LiveMigInstance",
    "live_mig_instances",
    "make_mig_profile_claim",
    "plugin_hardware",
    "plugin_sim",
]


@dataclass(frozen=True)
class LiveMigInstance:
    """A GPU instance that exists on the hardware, with its compute instances.

    `compute_instances` holds `(CI id, CI profile id, MIG UUID)` per CI.
    """

    parent_uuid: str
    gi_id: int
    profile_id: int
    placement: Placement
    compute_instances: tuple[tuple[int, int, str], ...]


def plugin_hardware(plugin: PluginProcess) -> Hardware:
    """The simulated node of `plugin`, shared via its state file: what
    `dra-gpu mig status --sim-state` would open."""
    return plugin.hardware()


def plugin_sim(plugin: PluginProcess) -> SimHardware:
    """The `SimHardware` behind `plugin_hardware(plugin)`, to read or change the node directly."""
    return plugin.simulated_node().sim


def live_mig_instances(hardware: SimHardware) -> dict[tuple[str, int], LiveMigInstance]:
    """Every GPU instance on the node, keyed by (parent UUID, GI id), read in one snapshot."""
    snapshot = hardware.snapshot()
    found: dict[tuple[str, int], LiveMigInstance] = {}
    for gi in snapshot.gpu_instances:
        cis = tuple(
            sorted(
                (ci.id, ci.profile_id, ci.uuid)
                for ci in snapshot.compute_instances
                if ci.gpu_uuid == gi.gpu_uuid and ci.gpu_instance_id == gi.id
            )
        )
        found[(gi.gpu_uuid, gi.id)] = LiveMigInstance(
            gi.gpu_uuid, gi.id, gi.profile_id, gi.placement, cis
        )
    return found
