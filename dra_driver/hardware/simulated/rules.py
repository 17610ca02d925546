"""NVML's MIG rules as pure functions over the simulated state.

The driver's MIG code is only as well tested as the simulator is strict, so
every refusal real hardware gives is reproduced here with the NVML return
code it uses (`gpu-mig-nvml.md` §7): a GI needs MIG on, a listed placement,
free memory slices, a profile count below `instanceCount` and, for media
engines, at most one `+me` instance and nothing but `-me` next to `+me.all`.
A CI needs an offered profile, a count below its `instanceCount` and free
compute slices. IDs are handed out the way the driver hands them out.
No I/O here: `SimHardware` calls these under its lock.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from dra_driver.errors import NvmlError
from dra_driver.hardware.nvml import codes
from dra_driver.hardware.nvml.interface import Placement
from dra_driver.hardware.simulated.models import CiProfileSpec, GiProfileSpec, GpuModel
from dra_driver.hardware.simulated.state import GiState, GpuState

_REV1_ENUMS = frozenset({0x7, 0x8})  # +me: one media-extension instance at a time
_ALL_ME_ENUMS = frozenset({0xF, 0x10})  # +me.all: blocks everything but -me
_NO_ME_ENUMS = frozenset({0xD, 0xE})


def gi_cap_minor(gpu_minor: int, gi: int) -> int:
    """Minor of `/dev/nvidia-caps/nvidia-cap<N>` for a GPU instance (§5)."""
    return 3 + 135 * gpu_minor + 9 * gi


def ci_cap_minor(gpu_minor: int, gi: int, ci: int) -> int:
    """Minor of the capability node of a compute instance (§5)."""
    return gi_cap_minor(gpu_minor, gi) + 1 + ci


def lowest_free(used: Iterable[int], candidates: Iterable[int]) -> int | None:
    taken = set(used)
    return next((c for c in candidates if c not in taken), None)


def gi_placement(gi: GiState) -> Placement:
    return Placement(gi.start, gi.size)


def _gpu_instance(gi: GiState) -> str:
    return f"GPU instance {gi.id}"


def _media_conflict(
    model: GpuModel,
    gis: list[GiState],
    profile: GiProfileSpec,
    label: Callable[[GiState], str] = _gpu_instance,
) -> str | None:
    enums = []
    for gi in gis:
        existing = model.gi_profile_by_id(gi.profile_id)
        if existing is not None:
            enums.append((gi, existing.enum))
    for gi, enum in enums:
        if profile.enum in _REV1_ENUMS and enum in _REV1_ENUMS:
            return f"{label(gi)} already holds the media extensions (+me)"
        if enum in _ALL_ME_ENUMS and profile.enum not in _NO_ME_ENUMS:
            return f"{label(gi)} holds all media engines (+me.all); only -me profiles fit"
        if profile.enum in _ALL_ME_ENUMS and enum not in _NO_ME_ENUMS:
            return f"+me.all needs every other GPU instance to be -me, but {label(gi)} is not"
    return None


def _gi_refusal(
    model: GpuModel,
    gis: list[GiState],
    profile: GiProfileSpec,
    placement: Placement,
    label: Callable[[GiState], str] = _gpu_instance,
) -> str | None:
    """Why a listed placement cannot take a new GI now (None: it can)."""
    for gi in gis:
        if gi_placement(gi).overlaps(placement):
            return (
                f"placement {placement.start}:{placement.size} overlaps {label(gi)} "
                f"at {gi.start}:{gi.size}"
            )
    count = sum(1 for gi in gis if gi.profile_id == profile.id)
    if count >= profile.instance_count:
        return f"profile {profile.name} already has its {profile.instance_count} instance(s)"
    return _media_conflict(model, gis, profile, label)


def layout_problem(
    model: GpuModel,
    wanted: Sequence[tuple[GiProfileSpec, Placement]],
    label: Callable[[int], str] = lambda index: f"entry {index}",
) -> tuple[int, str] | None:
    """The first GPU instance of `wanted` NVML would refuse to create after the ones
    before it, and why (`(index, reason)`); None when the whole layout can be made.

    For GPU layouts given as data (a shape's admin-made MIG devices): the same
    checks as `check_gi_create`, with the other entries named by `label(index)`.
    """
    gis: list[GiState] = []
    for index, (profile, placement) in enumerate(wanted):
        if placement not in profile.placements:
            starts = ", ".join(str(p.start) for p in profile.placements)
            return index, (
                f"{placement.start} is not a placement of {profile.name} on {model.key} "
                f"(placements: {starts})"
            )
        reason = _gi_refusal(model, gis, profile, placement, lambda gi: label(gi.id))
        if reason is not None:
            return index, reason
        gis.append(GiState(index, profile.id, placement.start, placement.size))
    return None


def check_gi_create(gpu: GpuState, profile: GiProfileSpec, placement: Placement) -> None:
    """Raise the NvmlError NVML returns if a GI cannot be created there."""
    where = f"GPU {gpu.index} ({gpu.uuid})"
    if not gpu.mig_current:
        raise NvmlError(codes.ERROR_NOT_SUPPORTED, f"{where}: MIG mode is disabled")
    if placement not in profile.placements:
        raise NvmlError(
            codes.ERROR_INVALID_ARGUMENT,
            f"{where}: {placement.start}:{placement.size} is not a placement of profile "
            f"{profile.id} ({profile.name})",
        )
    reason = _gi_refusal(gpu.model, gpu.gis, profile, placement)
    if reason is not None:
        raise NvmlError(codes.ERROR_INSUFFICIENT_RESOURCES, f"{where}: {reason}")


def gi_remaining_capacity(gpu: GpuState, profile: GiProfileSpec) -> int:
    """How many more GIs of `profile` fit, placed first-fit (GetGpuInstanceRemainingCapacity)."""
    gis = list(gpu.gis)
    added = 0
    for placement in profile.placements:
        if _gi_refusal(gpu.model, gis, profile, placement) is None:
            gis.append(GiState(-1 - added, profile.id, placement.start, placement.size))
            added += 1
    return added


def assign_gi_id(grid: int, placement: Placement, used: Iterable[int]) -> int:
    """The GI id the driver gives: in [n-1, 2n-2] for n = grid / size, by start if free.

    Reproduces the observed ids (7g -> 0, 4-slot -> 1..2, 2-slot -> 3..6, 1-slot
    -> 7..14 on 8-slot GPUs; A30 2g at 2:2 -> 2, 1g at 0:1 -> 3).
    """
    n = grid // placement.size
    low, high = n - 1, 2 * n - 2
    preferred = low + placement.start // placement.size
    candidates = [preferred] if low <= preferred <= high else []
    candidates += range(low, high + 1)
    found = lowest_free(used, candidates)
    if found is None:
        raise NvmlError(
            codes.ERROR_INSUFFICIENT_RESOURCES, f"no free GPU instance id in {low}..{high}"
        )
    return found


def _ci_sizes(model: GpuModel, gi: GiState) -> list[tuple[int, int, int]]:
    """`(start, size, profile_id)` of the CIs in `gi`."""
    specs = {c.id: c for c in model.ci_profiles_for(gi.profile_id)}
    return [(ci.start, specs[ci.profile_id].slice_count, ci.profile_id) for ci in gi.cis]


def _ci_start(
    used: list[tuple[int, int, int]], gi_profile: GiProfileSpec, ci_profile: CiProfileSpec
) -> int | None:
    """First compute-slice offset, aligned to the CI size, where the CI fits."""
    size = ci_profile.slice_count
    for start in range(0, gi_profile.slice_count - size + 1, size):
        if all(start + size <= s or s + n <= start for s, n, _ in used):
            return start
    return None


def _ci_refusal(
    used: list[tuple[int, int, int]], gi_profile: GiProfileSpec, ci_profile: CiProfileSpec
) -> tuple[str | None, int]:
    count = sum(1 for _, _, pid in used if pid == ci_profile.id)
    if count >= ci_profile.instance_count:
        return f"CI profile {ci_profile.name} already has {count} instance(s)", -1
    start = _ci_start(used, gi_profile, ci_profile)
    if start is None:
        return "no free compute slices for this CI profile", -1
    return None, start


def check_ci_create(
    model: GpuModel, gi: GiState, gi_profile: GiProfileSpec, ci_profile: CiProfileSpec
) -> int:
    """The compute-slice start of a new CI, or the NvmlError NVML returns."""
    reason, start = _ci_refusal(_ci_sizes(model, gi), gi_profile, ci_profile)
    if reason is not None:
        raise NvmlError(codes.ERROR_INSUFFICIENT_RESOURCES, f"GPU instance {gi.id}: {reason}")
    return start


def ci_remaining_capacity(
    model: GpuModel, gi: GiState, gi_profile: GiProfileSpec, ci_profile: CiProfileSpec
) -> int:
    used = _ci_sizes(model, gi)
    added = 0
    while True:
        reason, start = _ci_refusal(used, gi_profile, ci_profile)
        if reason is not None:
            return added
        used.append((start, ci_profile.slice_count, ci_profile.id))
        added += 1


APPLICATION_XIDS = frozenset({13, 31, 43, 45, 68, 109})
"""Xids an application causes (NVIDIA's Xid catalogue): the driver asks for no recovery."""


def recovery_action_of(kind: str, xid: int | None) -> int:
    """The recovery action the driver reports after a health event of `kind`.

    The simulator's choice, from NVIDIA's Xid catalogue: application Xids
    need nothing; every other Xid, a double-bit ECC error and a lost GPU need
    a GPU reset.
    """
    if kind == "xid" and xid in APPLICATION_XIDS:
        return codes.RECOVERY_ACTION_NONE
    if kind in ("xid", "double-bit-ecc", "gpu-lost"):
        return codes.RECOVERY_ACTION_GPU_RESET
    return codes.RECOVERY_ACTION_NONE
