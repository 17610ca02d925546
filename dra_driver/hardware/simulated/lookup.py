"""Finding things in the simulated state, with the NVML error for what is missing.

Every `SimHardware` call starts by resolving a GPU (by index or UUID), a GPU
instance, a profile or a compute instance, and each miss has a specific NVML
return code (INVALID_ARGUMENT for a bad index, NOT_FOUND for an unknown UUID or
a missing instance, NOT_SUPPORTED for MIG calls on a GPU without MIG or with
MIG off). Keeping those lookups here keeps the codes consistent across calls.
"""

from __future__ import annotations

from dra_driver.errors import NvmlError
from dra_driver.hardware.nvml import codes
from dra_driver.hardware.simulated import views
from dra_driver.hardware.simulated.models import CiProfileSpec, GiProfileSpec
from dra_driver.hardware.simulated.state import CiState, GiState, GpuState, NodeState
from dra_driver.hardware.simulated.views import ComputeInstanceView

GpuRef = int | str  # NVML index or "GPU-..." UUID


def gpu_name(g: GpuState) -> str:
    return f"GPU {g.index} ({g.uuid})"


def find_gpu(st: NodeState, ref: GpuRef) -> GpuState:
    if isinstance(ref, int):
        if not 0 <= ref < len(st.gpus):
            raise NvmlError(
                codes.ERROR_INVALID_ARGUMENT, f"GPU index {ref} out of range 0..{len(st.gpus) - 1}"
            )
        return st.gpus[ref]
    for g in st.gpus:
        if g.uuid == ref:
            return g
    raise NvmlError(codes.ERROR_NOT_FOUND, f"no GPU with UUID {ref}")


def mig_gpu(st: NodeState, ref: GpuRef) -> GpuState:
    g = find_gpu(st, ref)
    if not g.model.mig_capable:
        raise NvmlError(
            codes.ERROR_NOT_SUPPORTED, f"{gpu_name(g)}: {g.model.key} does not support MIG"
        )
    return g


def mig_on_gpu(st: NodeState, ref: GpuRef) -> GpuState:
    g = mig_gpu(st, ref)
    if not g.mig_current:
        raise NvmlError(codes.ERROR_NOT_SUPPORTED, f"{gpu_name(g)}: MIG mode is disabled")
    return g


def find_gi_profile(g: GpuState, profile_id: int) -> GiProfileSpec:
    profile = g.model.gi_profile_by_id(profile_id)
    if profile is None:
        note = g.model.unverified_note
        raise NvmlError(
            codes.ERROR_INVALID_ARGUMENT,
            f"{gpu_name(g)}: no GPU instance profile id {profile_id} on {g.model.key}"
            + (f" ({note})" if note else ""),
        )
    return profile


def find_gi(g: GpuState, gi_id: int) -> GiState:
    if not g.mig_current:
        raise NvmlError(codes.ERROR_NOT_SUPPORTED, f"{gpu_name(g)}: MIG mode is disabled")
    for gi in g.gis:
        if gi.id == gi_id:
            return gi
    raise NvmlError(codes.ERROR_NOT_FOUND, f"{gpu_name(g)}: no GPU instance {gi_id}")


def find_ci_profile(g: GpuState, gi: GiState, ci_enum: int) -> CiProfileSpec:
    if not 0 <= ci_enum < codes.COMPUTE_INSTANCE_PROFILE_COUNT:
        raise NvmlError(
            codes.ERROR_INVALID_ARGUMENT, f"compute instance profile {ci_enum} out of range"
        )
    for spec in g.model.ci_profiles_for(gi.profile_id):
        if spec.id == ci_enum:
            return spec
    raise NvmlError(
        codes.ERROR_NOT_SUPPORTED,
        f"{gpu_name(g)}: GPU instance {gi.id} (profile {gi.profile_id}) does not offer "
        f"compute instance profile {ci_enum}",
    )


def find_ci(g: GpuState, gi: GiState, ci_id: int) -> CiState:
    for ci in gi.cis:
        if ci.id == ci_id:
            return ci
    raise NvmlError(
        codes.ERROR_NOT_FOUND,
        f"{gpu_name(g)}: GPU instance {gi.id} has no compute instance {ci_id}",
    )


def ci_view(g: GpuState, gi: GiState, ci_id: int) -> ComputeInstanceView:
    return next(v for v in views.ci_views(g, gi) if v.id == ci_id)


def power_cycle(g: GpuState) -> None:
    """What a GPU reset or reboot does: instances vanish, compute mode and time-slice are back
    to their defaults; Ampere applies its stored MIG mode."""
    g.gis.clear()
    g.compute_mode = "DEFAULT"
    g.time_slice = 0
    g.recovery_action = 0
    g.lost = False
    if not g.model.mig_capable:
        return
    if g.model.mig_toggle_supported:
        g.mig_current = g.mig_pending = False  # Hopper+ MIG mode is driver state
    else:
        g.mig_current = g.mig_pending  # Ampere stores the mode on the GPU
