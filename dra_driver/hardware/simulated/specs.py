"""The records that describe a GPU model: GI profiles, CI profiles, the model itself.

They mirror what NVML reports (`nvmlGpuInstanceProfileInfo_v2_t`,
`nvmlComputeInstanceProfileInfo_v2_t`, the device getters), kept apart from
the tables in `models` so the data reads as data. `derive_ci_profiles`
computes a GI profile's compute-instance profiles the way go-nvlib and
mig-parted see them: a GI of G slices offers CI sizes C by
`naming.ci_profile_offered`, with `instanceCount = G // C`, `CI id = CI enum`
and `C x (SMs of the 1-slice GI)` SMs, except that the CI filling the GI gets
the GI's SMs. On Hopper the CI that fills the 2-memory-slice 1g GI (profile 15)
is CI profile 7 (1_SLICE_REV1) with the GI's SMs, while CI profile 0 there only
gets the base 1g SMs (`gpu-mig-nvml.md` §2.4).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from dra_driver.hardware.nvml import codes, naming
from dra_driver.hardware.nvml.interface import Placement

BRAND_NVIDIA = 14  # NVML_BRAND_NVIDIA; current drivers report it for A100/H100/GH200/T4 (§3)
GI_1_SLICE_REV2 = 0x9  # NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV2 (1g with 2 memory slices)
CI_1_SLICE_REV1 = 7  # NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE_REV1
# CI enums whose sizes the go-nvlib heuristic considers (8_SLICE and 6_SLICE never pass it on
# GIs of at most 7 slices; 1_SLICE_REV1 is added only where the hardware uses it)
_STANDARD_CI_ENUMS = (0, 1, 2, 3, 4, 5, 6)


@dataclass(frozen=True)
class GiProfileSpec:
    """One GPU-instance profile as `nvidia-smi mig -lgip/-lgipp` prints it."""

    enum: int  # NVML_GPU_INSTANCE_PROFILE_* (what GetGpuInstanceProfileInfo takes)
    id: int  # profile id (what create/placements/instances calls take)
    name: str
    instance_count: int
    memory_mib: int
    multiprocessors: int
    copy_engines: int
    decoders: int
    encoders: int
    jpeg_engines: int
    ofa_engines: int
    placements: tuple[Placement, ...]

    @property
    def slice_count(self) -> int:
        """Compute slices (the G in "Gg")."""
        return codes.GI_ENUM_SLICES[self.enum]

    @property
    def memory_slice_count(self) -> int:
        return self.placements[0].size


@dataclass(frozen=True)
class CiProfileSpec:
    """One compute-instance profile of a GI profile (`nvidia-smi mig -lcip`)."""

    enum: int  # NVML_COMPUTE_INSTANCE_PROFILE_*; the CI profile id equals it
    name: str
    slice_count: int
    instance_count: int
    multiprocessors: int
    # "shared" engine counts: every CI repeats its GI's counts (§2.3)
    shared_copy_engines: int
    shared_decoders: int
    shared_encoders: int
    shared_jpeg_engines: int
    shared_ofa_engines: int

    @property
    def id(self) -> int:
        return self.enum


@dataclass(frozen=True)
class GpuModel:
    """Everything NVML reports about one GPU model, MIG tables included."""

    key: str  # name used in shape files and the state file
    product_name: str  # nvmlDeviceGetName
    pci_device_id: int  # nvmlPciInfo_t.pciDeviceId = (device << 16) | 0x10DE
    architecture_id: int  # nvmlDeviceGetArchitecture
    compute_capability: tuple[int, int]
    memory_mib: int  # nvidia-smi "Memory-Usage" total; memory.total = MiB * 2**20
    multiprocessors: int | None  # None: not seen in real output (never made up)
    brand_id: int = BRAND_NVIDIA
    memory_slices: int = 0  # placement grid size; 0 = none (not MIG-capable, or none known)
    compute_slices: int = 0
    pci_domain: int = 0
    gi_profiles: tuple[GiProfileSpec, ...] = ()
    ci_profiles: Mapping[int, tuple[CiProfileSpec, ...]] = field(
        default_factory=lambda: MappingProxyType({}), compare=False, hash=False
    )  # by GI profile id
    # nvmlDeviceGetAddressingMode (`codes.ADDRESSING_MODE_*`); None: NOT_SUPPORTED, as on
    # platforms without coherent CPU-GPU memory
    addressing_mode: int | None = None
    # Profiles NVIDIA documents for this model whose numbers were never seen in real output:
    # not simulated (an instance of them cannot be created), named so tools can say so.
    unverified_profiles: tuple[str, ...] = ()

    @property
    def mig_capable(self) -> bool:
        """NVML answers the MIG-mode query: the model has MIG profiles, verified or not (a
        GB300 offers none, yet real `nvidia-smi -q` prints its MIG mode "Disabled")."""
        return bool(self.gi_profiles or self.unverified_profiles)

    @property
    def memory_bytes(self) -> int:
        return self.memory_mib * 2**20

    @property
    def mig_toggle_supported(self) -> bool:
        """Hopper and newer switch MIG mode without a reset; the mode does not survive one."""
        return self.architecture_id >= codes.ARCH_HOPPER

    @property
    def unverified_note(self) -> str:
        """Why a profile NVIDIA names is missing here ("" when none is): for error messages."""
        if not self.unverified_profiles:
            return ""
        return (
            f"{', '.join(self.unverified_profiles)} exist on real hardware but are not "
            "simulated (their profile ids or sizes were never seen in real output)"
        )

    def gi_profile_by_id(self, profile_id: int) -> GiProfileSpec | None:
        return next((p for p in self.gi_profiles if p.id == profile_id), None)

    def gi_profile_by_enum(self, enum: int) -> GiProfileSpec | None:
        return next((p for p in self.gi_profiles if p.enum == enum), None)

    def ci_profiles_for(self, gi_profile_id: int) -> tuple[CiProfileSpec, ...]:
        return self.ci_profiles.get(gi_profile_id, ())


def derive_ci_profiles(
    gi: GiProfileSpec, *, base_sms: int, memory_bytes: int, rev1_fills_rev2: bool
) -> tuple[CiProfileSpec, ...]:
    """The CI profiles a GI of profile `gi` offers (see the module docstring)."""
    g = gi.slice_count
    rev1_default = rev1_fills_rev2 and gi.enum == GI_1_SLICE_REV2
    sizes = [(e, codes.CI_ENUM_SLICES[e]) for e in _STANDARD_CI_ENUMS]
    if rev1_default:
        sizes.append((CI_1_SLICE_REV1, 1))
    cis = []
    for ci_enum, c in sizes:
        if not naming.ci_profile_offered(g, c):
            continue
        fills = c == g and (ci_enum == CI_1_SLICE_REV1 or not rev1_default)
        cis.append(
            CiProfileSpec(
                enum=ci_enum,
                name=naming.mig_profile_name(gi.enum, gi.memory_mib, memory_bytes, ci_slices=c),
                slice_count=c,
                instance_count=g // c,
                multiprocessors=gi.multiprocessors if fills else c * base_sms,
                shared_copy_engines=gi.copy_engines,
                shared_decoders=gi.decoders,
                shared_encoders=gi.encoders,
                shared_jpeg_engines=gi.jpeg_engines,
                shared_ofa_engines=gi.ofa_engines,
            )
        )
    return tuple(cis)
