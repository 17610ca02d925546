"""A simulated node as it is right after booting: its shape, plus the admin's MIG devices.

A shape may list MIG devices an admin created (`shapes.MigDevice`, what
mig-parted applies at boot). They are made here with NVML's own rules
(`rules.check_gi_create`, `rules.assign_gi_id`, `rules.check_ci_create`), so
the GPU instance ids, compute-slice starts, MIG device slots and UUIDs are
the ones the simulator would hand out had the admin run
`nvidia-smi mig -cgi <profile> -C` in that order. Kept apart from `state`
(plain data) because the rules themselves read the state's records.
"""

from __future__ import annotations

from dra_driver.hardware.nvml.interface import Placement
from dra_driver.hardware.simulated import rules
from dra_driver.hardware.simulated.shapes import NodeShape
from dra_driver.hardware.simulated.specs import CiProfileSpec, GiProfileSpec, GpuModel
from dra_driver.hardware.simulated.state import (
    CiState,
    GiState,
    GpuState,
    NodeState,
    mig_uuid,
    new_node_state,
)


def booted_node_state(shape: NodeShape, node_name: str) -> NodeState:
    """`state.new_node_state` with every GPU's `mig_devices` created, in order."""
    state = new_node_state(shape, node_name)
    for gpu, slot in zip(state.gpus, shape.gpus, strict=True):
        for device in slot.mig_devices:
            state.creations = _create(gpu, device.profile, device.placement, state.creations)
    return state


def _create(gpu: GpuState, profile: GiProfileSpec, placement: Placement, creations: int) -> int:
    """One GPU instance and the compute instance filling it; the new creation count."""
    model = gpu.model
    rules.check_gi_create(gpu, profile, placement)
    gi_id = rules.assign_gi_id(model.memory_slices, placement, (gi.id for gi in gpu.gis))
    gi = GiState(gi_id, profile.id, placement.start, placement.size)
    gpu.gis.append(gi)
    ci_profile = filling_ci_profile(model, profile)
    start = rules.check_ci_create(model, gi, profile, ci_profile)
    slot = rules.lowest_free((c.slot for g in gpu.gis for c in g.cis), range(model.compute_slices))
    if slot is None:  # a shape's layout fits the grid, so a slot is always free
        raise AssertionError(f"GPU {gpu.index}: no free MIG device slot")
    creations += 2  # one for the GI, one for the CI, as SimHardware counts them
    gi.cis.append(CiState(0, ci_profile.id, start, slot, mig_uuid(gpu.uuid, gi_id, 0, creations)))
    return creations


def filling_ci_profile(model: GpuModel, profile: GiProfileSpec) -> CiProfileSpec:
    """The CI profile `nvidia-smi mig -cgi <profile> -C` uses: as many compute slices as the
    GI, most SMs (on Hopper's two-slice 1g: CI profile 7), lowest id on a tie."""
    filling = [c for c in model.ci_profiles_for(profile.id) if c.slice_count == profile.slice_count]
    return min(filling, key=lambda ci: (-ci.multiprocessors, ci.id))
