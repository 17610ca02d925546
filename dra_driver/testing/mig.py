"""Dynamic-MIG helpers: MIG profile claims and a view of the live instances of a plugin's simulated
node.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from dra_driver import DEFAULT_DRIVER_NAME
from dra_driver.errors import PluginError
from dra_driver.nvml.backend import Hardware, open_hardware
from dra_driver.nvml.interface import (
    Placement,
)
from dra_driver.sim.hardware import SimHardware
from dra_driver.testing.plugin_process import PluginProcess

MIG_DEVICE_CLASS = "mig.nvidia.com"
PARENT_UUID_ATTRIBUTE = f"{DEFAULT_DRIVER_NAME}/parentUUID"


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
    `dra-gpu mig status --sim-state` would open (`.sim` is always set)."""
    return open_hardware(
        f"sim:{plugin.shape}", sim_state=plugin.sim_state, node_name=plugin.node_name
    )


def plugin_sim(plugin: PluginProcess) -> SimHardware:
    """The `SimHardware` of `plugin_hardware(plugin)`, to read or change the node directly."""
    sim = plugin_hardware(plugin).sim
    if sim is None:
        raise PluginError(f"plugin on {plugin.shape} has no simulated hardware")
    return sim


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


def make_mig_profile_claim(
    name: str,
    uid: str,
    profiles: Sequence[str],
    *,
    namespace: str = "default",
    same_gpu: bool = True,
) -> dict[str, Any]:
    """An unallocated ResourceClaim with one `mig.nvidia.com` request per entry of
    `profiles` (named `mig-<i>`), each selecting
    `device.attributes['gpu.nvidia.com'].profile == '<profile>'`; with `same_gpu`
    a `matchAttribute: gpu.nvidia.com/parentUUID` constraint puts them on one GPU."""
    requests = [
        {
            "name": f"mig-{index}",
            "exactly": {
                "deviceClassName": MIG_DEVICE_CLASS,
                "selectors": [
                    {
                        "cel": {
                            "expression": f"device.attributes['{DEFAULT_DRIVER_NAME}']"
                            f".profile == '{profile}'"
                        }
                    }
                ],
            },
        }
        for index, profile in enumerate(profiles)
    ]
    devices: dict[str, Any] = {"requests": requests}
    if same_gpu:
        devices["constraints"] = [{"matchAttribute": PARENT_UUID_ATTRIBUTE}]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": namespace, "uid": uid},
        "spec": {"devices": devices},
    }
