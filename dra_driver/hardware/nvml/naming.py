"""MIG profile names built the way go-nvlib builds them.

NVML does not hand out the "1g.10gb" strings users and DeviceClasses see:
go-nvlib computes them from the GI profile enum, the profile's memorySizeMB
and the device's total memory, and NVIDIA's DRA driver and mig-parted publish
what it computes. Any backend that names profiles must use this one formula,
or published device names would drift between backends.
"""

from __future__ import annotations

from fractions import Fraction

from dra_driver.errors import NvmlError
from dra_driver.hardware.nvml import codes

_MIB = 2**20
_GIB = 2**30


def mig_memory_gb(memory_mib: int, device_memory_bytes: int) -> int:
    """The "GB" of a profile name: eighths of the device, scaled to whole device GiB.

    `frac = ceil(mem / total * 8) / 8`, `GB = round(frac * ceil(total / GiB))`,
    rounding halves away from zero like Go's `math.Round`. Computed exactly.
    """
    if device_memory_bytes <= 0:
        raise NvmlError(
            codes.ERROR_INVALID_ARGUMENT,
            f"MIG profile memory {memory_mib} MiB: device memory total "
            f"{device_memory_bytes} bytes is not positive",
        )
    eighths = -((-memory_mib * _MIB * 8) // device_memory_bytes)  # ceil division
    device_gb = -(-device_memory_bytes // _GIB)
    scaled = Fraction(eighths * device_gb, 8)
    return int(scaled + Fraction(1, 2)) if scaled >= 0 else -int(-scaled + Fraction(1, 2))


def gi_enum_slices(gi_enum: int) -> int:
    """Compute slices (the G in "Gg") of an NVML_GPU_INSTANCE_PROFILE_* enum."""
    try:
        return codes.GI_ENUM_SLICES[gi_enum]
    except KeyError:
        raise NvmlError(
            codes.ERROR_INVALID_ARGUMENT, f"GPU instance profile enum {gi_enum:#x} is unknown"
        ) from None


def mig_profile_name(
    gi_enum: int,
    memory_mib: int,
    device_memory_bytes: int,
    ci_slices: int | None = None,
) -> str:
    """go-nvlib's name: "Gg.NNgb" or, for a smaller compute instance, "Cc.Gg.NNgb".

    `ci_slices` is the compute instance's slice count; None (or equal to the GI's)
    names the GI itself. The enum's suffix ("+me", "-me", "+gfx", "+me.all")
    is appended in both forms, as go-nvlib does.
    """
    g = gi_enum_slices(gi_enum)
    gb = mig_memory_gb(memory_mib, device_memory_bytes)
    suffix = codes.GI_ENUM_SUFFIX.get(gi_enum, "")
    if ci_slices is None or ci_slices == g:
        return f"{g}g.{gb}gb{suffix}"
    return f"{ci_slices}c.{g}g.{gb}gb{suffix}"


def ci_profile_offered(gi_slices: int, ci_slices: int) -> bool:
    """go-nvlib's (and mig-parted's) rule for which CI sizes a GI offers.

    Skip C > G, and skip C < G when 2*C > G+1: a 7g GI offers 1c/2c/3c/4c/7c,
    a 4g offers 1c/2c/4c, a 3g 1c/2c/3c, a 2g 1c/2c.
    """
    if ci_slices > gi_slices:
        return False
    return not (ci_slices < gi_slices and 2 * ci_slices > gi_slices + 1)
