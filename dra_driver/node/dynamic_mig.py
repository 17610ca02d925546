"""Dynamic MIG: which MIG partitions a GPU can offer, and the counters that keep them apart.

With dynamic MIG a MIG-capable GPU is published not as the partitions that
happen to exist, but as every partition the kubelet plugin could create on
demand: one device per (GPU-instance profile, placement). Those devices
overlap, so Kubernetes must be told which ones exclude each other. That is
what shared counters (KEP-4815, "partitionable devices") are for: each GPU
gets one counter set, every device says what it consumes from it, and the
scheduler only picks a device whose consumption still fits.

The counter set of a GPU, `gpu-<minor>-counter-set`, has

* one counter per capacity dimension, named like NVIDIA's driver names them:
  `multiprocessors`, `copy-engines`, `decoders`, `encoders`, `jpeg-engines`,
  `ofa-engines`, `memory` (bytes). The value is what the whole GPU offers to
  MIG, which is what the GPU instance spanning every memory slice gets (7g on
  A100/H100, 4g on A30): e.g. 98 SMs and 40192 MiB on an A100-40GB, not the
  108 SMs / 40960 MiB it has outside MIG mode. NVIDIA takes the maximum over
  all profiles instead; on every known GPU that is the same number, but only
  the whole-GPU profile is the right one by construction: it is the GPU's MIG
  budget, which is why it also encodes NVML's media-engine rules (one OFA, so
  one `+me` instance at a time; four decoders on an RTX PRO 6000, so `+me.all`
  excludes every profile but `-me`). A value is never below what one profile
  needs, so every device stays allocatable on an empty GPU;
* `memory-slice-0 .. memory-slice-<N-1>`, value 1 each, N the size of the
  memory-slice grid (8; 4 on A30; 12 placement units on RTX PRO 6000). A MIG
  device consumes the slices of its placement, so overlapping placements
  exclude each other exactly as NVML does.

A MIG device consumes its profile's non-zero capacities and its memory
slices; the full GPU consumes the whole set, so it and any MIG device of the
same GPU exclude each other.

Eligibility (per GPU, `dynamic_mig_mode`): Hopper and newer switch MIG mode
without a reset, so they offer the full GPU *and* every MIG placement whether
MIG is on or off. Ampere needs a reset, so it joins only when MIG is already
on, and then offers only MIG placements. Everything else keeps the static
model (full GPU, or the existing MIG devices).

MIG instances found at startup are either the plugin's own (created for a
prepared claim before a restart; the caller names them in `owned_instances`),
which stay published as their dynamic device, or foreign (made by an admin),
which the plugin never destroys: they are published as static devices, their
resources are taken out of the counter set, every placement overlapping them
or needing more than is left (a second `+me` instance, say) is withdrawn, and
the full GPU is not offered while they exist (MIG mode cannot be turned off
under them). The static devices consume nothing: what they hold is gone from
the set whether or not a claim has them allocated. (Had they consumed their
slices instead, that would count only while allocated: an idle admin
instance would leave its slices free for an overlapping dynamic device.)

Everything here is pure: inventory records in, records out.
"""

from __future__ import annotations

import functools
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from enum import Enum
from types import MappingProxyType
from typing import Any, Final

from dra_driver.errors import InventoryError
from dra_driver.hardware.nvml import codes
from dra_driver.hardware.nvml.interface import (
    GpuInstanceProfile,
    MigDeviceInfo,
    Placement,
)
from dra_driver.kube.quantity import format_quantity
from dra_driver.node.inventory import GpuInventory

#: (capacity name in the device, counter name in the counter set), NVIDIA's pairs.
CAPACITY_COUNTERS: Final[tuple[tuple[str, str], ...]] = (
    ("multiprocessors", "multiprocessors"),
    ("copyEngines", "copy-engines"),
    ("decoders", "decoders"),
    ("encoders", "encoders"),
    ("jpegEngines", "jpeg-engines"),
    ("ofaEngines", "ofa-engines"),
    ("memory", "memory"),
)

#: CI profile ids (= NVML enums) that split nothing: plain C-slice compute instances.
_PLAIN_CI_BY_SLICES: Final[dict[int, int]] = {
    slices: ci_id for ci_id, slices in codes.CI_ENUM_SLICES.items() if ci_id in range(7)
}
_CI_1_SLICE_REV1: Final = 7


class DynamicMigMode(Enum):
    """What a GPU publishes."""

    STATIC = "static"  # not dynamic: the full GPU, or its existing MIG devices
    GPU_AND_MIG = "gpu-and-mig"  # Hopper+: the full GPU and every MIG placement
    MIG_ONLY = "mig-only"  # Ampere with MIG on: every MIG placement, no full GPU


@dataclass(frozen=True)
class CounterSet:
    """One `sharedCounters` entry: a named set of counters (integers; memory in bytes)."""

    name: str
    counters: Mapping[str, int] = field(hash=False)

    def to_api(self) -> dict[str, Any]:
        """The resource.k8s.io/v1 `CounterSet`, counters in sorted order."""
        return {
            "name": self.name,
            "counters": {
                name: {"value": format_quantity(self.counters[name])}
                for name in sorted(self.counters)
            },
        }


@dataclass(frozen=True)
class DynamicMigSpec:
    """What the kubelet plugin creates when a dynamic MIG device is prepared.

    A GPU instance of `gi_profile` at `placement` on the parent GPU, holding one
    compute instance of profile `ci_profile_id` that fills it. `instance` is the
    live MIG device when the plugin's own instance already exists at startup
    (named in `owned_instances`); None otherwise. It is never published.
    """

    parent_uuid: str
    parent_minor: int
    gi_profile: GpuInstanceProfile
    placement: Placement
    ci_profile_id: int
    instance: MigDeviceInfo | None = None

    @property
    def profile_name(self) -> str:
        """The profile as the `profile` attribute shows it, e.g. "1g.10gb+me"."""
        return self.gi_profile.name


@dataclass(frozen=True)
class GpuPartitioning:
    """Everything dynamic MIG publishes for one eligible GPU.

    `counter_set` is the GPU's set (already reduced by foreign instances);
    `dynamic` the placements on offer, in profile-list then placement order;
    `foreign` the existing MIG devices not owned by the plugin (published as
    static devices); `full_gpu_counters` what the full GPU consumes, or None
    when the full GPU is not offered.
    """

    mode: DynamicMigMode
    counter_set: CounterSet
    dynamic: tuple[DynamicMigSpec, ...]
    foreign: tuple[MigDeviceInfo, ...]
    full_gpu_counters: Mapping[str, int] | None


def dynamic_mig_mode(gpu: GpuInventory) -> DynamicMigMode:
    """How a GPU takes part in dynamic MIG (see the module docstring)."""
    info = gpu.info
    if not info.mig_capable or not gpu.gi_profiles or memory_slice_grid(gpu.gi_profiles) == 0:
        return DynamicMigMode.STATIC
    if info.mig_toggle_supported:
        return DynamicMigMode.GPU_AND_MIG
    if info.mig_enabled:
        return DynamicMigMode.MIG_ONLY
    return DynamicMigMode.STATIC


def counter_set_name(gpu_minor: int) -> str:
    """`gpu-<minor>-counter-set`, NVIDIA's name."""
    return f"gpu-{gpu_minor}-counter-set"


def memory_slice_counter(index: int) -> str:
    """`memory-slice-<i>`."""
    return f"memory-slice-{index}"


def memory_slice_grid(profiles: Collection[GpuInstanceProfile]) -> int:
    """Memory slices (placement units) of the GPU: the end of the furthest placement."""
    return max(
        (placement.start + placement.size for p in profiles for placement in p.placements),
        default=0,
    )


def profile_capacity(profile: GpuInstanceProfile) -> dict[str, int]:
    """A GI profile's capacities by device capacity name (memory in bytes)."""
    return {
        "multiprocessors": profile.multiprocessors,
        "copyEngines": profile.copy_engines,
        "decoders": profile.decoders,
        "encoders": profile.encoders,
        "jpegEngines": profile.jpeg_engines,
        "ofaEngines": profile.ofa_engines,
        "memory": profile.memory_bytes,
    }


def whole_gpu_counters(profiles: Collection[GpuInstanceProfile]) -> dict[str, int]:
    """The counter values of an untouched GPU: its MIG budget and its memory slices.

    Capacity counters take the values of the profile(s) spanning the whole
    memory-slice grid, and never less than any single profile needs. A GPU
    that lists no whole-GPU profile (a simulated model whose largest profiles
    were never verified) gets, per capacity, the most that any layout NVML
    allows needs (`_densest_layouts`): three 2g and a two-slice 1g on a B200
    need 138 SMs, so they fit, as they fit the hardware.
    """
    grid = memory_slice_grid(profiles)
    whole = [p for p in profiles if Placement(0, grid) in p.placements]
    densest = {} if whole else _densest_layouts(tuple(profiles))
    counters: dict[str, int] = {}
    for capacity, counter in CAPACITY_COUNTERS:
        spanning = max((profile_capacity(p)[capacity] for p in whole), default=0)
        largest = max((profile_capacity(p)[capacity] for p in profiles), default=0)
        counters[counter] = max(spanning, largest, densest.get(capacity, 0))
    for index in range(grid):
        counters[memory_slice_counter(index)] = 1
    return counters


@functools.cache
def _densest_layouts(profiles: tuple[GpuInstanceProfile, ...]) -> dict[str, int]:
    """Per capacity, the most any set of GPU instances NVML would allow together needs:
    placements that do not overlap, at most `instance_count` of each profile."""
    options = sorted(
        ((p, placement) for p in profiles for placement in p.placements),
        key=lambda option: (option[1].start, option[1].size),
    )
    best: dict[str, int] = {}

    def visit(
        index: int, used: frozenset[int], counts: dict[int, int], total: dict[str, int]
    ) -> None:
        for capacity, amount in total.items():
            best[capacity] = max(best.get(capacity, 0), amount)
        for position in range(index, len(options)):
            profile, placement = options[position]
            slices = set(placement.slices)
            if slices & used or counts.get(profile.id, 0) >= profile.instance_count:
                continue
            counts[profile.id] = counts.get(profile.id, 0) + 1
            more = {k: total.get(k, 0) + v for k, v in profile_capacity(profile).items()}
            visit(position + 1, used | slices, counts, more)
            counts[profile.id] -= 1

    visit(0, frozenset(), {}, {})
    return best


def consumption(profile: GpuInstanceProfile, placement: Placement) -> dict[str, int]:
    """What a GPU instance of `profile` at `placement` takes from its GPU's counter set.

    Its non-zero capacities and one of each memory slice it covers (zero
    amounts are left out: consuming nothing never blocks anything).
    """
    used = {
        counter: profile_capacity(profile)[capacity]
        for capacity, counter in CAPACITY_COUNTERS
        if profile_capacity(profile)[capacity] > 0
    }
    for index in placement.slices:
        used[memory_slice_counter(index)] = 1
    return used


def filling_ci_profile_id(gpu: GpuInventory, profile: GpuInstanceProfile) -> int:
    """The compute-instance profile that fills a GPU instance of `profile` (C == G).

    Among the CI profiles NVML lists for the GI profile, the one with as many
    compute slices as the GI and the most SMs (lowest id on a tie): on an H100
    1g.20gb that is CI profile 7 (1_SLICE_REV1, 26 SMs, what `nvidia-smi mig
    -cgi 15 -C` creates), not profile 0 (16 SMs), the choice NVIDIA's driver
    gets wrong. Without listed CI profiles (hand-built inventories): the plain
    C-slice enum, or 1_SLICE_REV1 for a Hopper+ 1-slice GI spanning two memory
    slices. Raises InventoryError if no CI profile fills the GI.
    """
    listed = [
        ci for ci in gpu.ci_profiles.get(profile.id, ()) if ci.slice_count == profile.slice_count
    ]
    if listed:
        best = min(listed, key=lambda ci: (-ci.multiprocessors, ci.id))
        return best.id
    if gpu.ci_profiles.get(profile.id):
        raise InventoryError(
            f"GPU {gpu.info.uuid}: GI profile {profile.id} ({profile.name}) has no "
            f"compute-instance profile with {profile.slice_count} slices"
        )
    if (
        gpu.info.mig_toggle_supported
        and profile.slice_count == 1
        and profile.memory_slice_count == 2
    ):
        return _CI_1_SLICE_REV1
    ci_id = _PLAIN_CI_BY_SLICES.get(profile.slice_count)
    if ci_id is None:
        raise InventoryError(
            f"GPU {gpu.info.uuid}: no compute-instance profile fills a "
            f"{profile.slice_count}-slice GI ({profile.name})"
        )
    return ci_id


def partition_gpu(
    gpu: GpuInventory, owned_instances: Collection[tuple[str, int]] = ()
) -> GpuPartitioning | None:
    """What dynamic MIG publishes for `gpu`; None when the GPU stays static.

    `owned_instances` holds (parent UUID, GPU-instance id) of the MIG instances
    the plugin created itself (from its checkpoint): they stay published as
    their dynamic device. Every other existing instance is foreign.
    """
    mode = dynamic_mig_mode(gpu)
    if mode is DynamicMigMode.STATIC:
        return None
    info = gpu.info
    owned_ids = {gi_id for parent, gi_id in owned_instances if parent == info.uuid}
    owned: dict[tuple[int, Placement], MigDeviceInfo] = {}
    foreign: list[MigDeviceInfo] = []
    foreign_gis: dict[int, MigDeviceInfo] = {}
    for mig in gpu.mig_devices:
        if mig.gpu_instance_id in owned_ids:
            owned.setdefault((mig.gi_profile.id, mig.placement), mig)
        else:
            foreign.append(mig)
            foreign_gis.setdefault(mig.gpu_instance_id, mig)

    counters = whole_gpu_counters(gpu.gi_profiles)
    for mig in foreign_gis.values():
        for counter, amount in consumption(mig.gi_profile, mig.placement).items():
            counters[counter] = max(0, counters.get(counter, 0) - amount)
    counter_set = CounterSet(name=counter_set_name(info.minor), counters=MappingProxyType(counters))

    taken = [mig.placement for mig in foreign_gis.values()]
    dynamic = tuple(
        DynamicMigSpec(
            parent_uuid=info.uuid,
            parent_minor=info.minor,
            gi_profile=profile,
            placement=placement,
            ci_profile_id=filling_ci_profile_id(gpu, profile),
            instance=owned.get((profile.id, placement)),
        )
        for profile in gpu.gi_profiles
        for placement in profile.placements
        if not any(placement.overlaps(other) for other in taken)
        and _fits(consumption(profile, placement), counters)
    )
    full_gpu = None
    if mode is DynamicMigMode.GPU_AND_MIG and not foreign:
        full_gpu = MappingProxyType({name: value for name, value in counters.items() if value})
    return GpuPartitioning(
        mode=mode,
        counter_set=counter_set,
        dynamic=dynamic,
        foreign=tuple(foreign),
        full_gpu_counters=full_gpu,
    )


def _fits(used: Mapping[str, int], counters: Mapping[str, int]) -> bool:
    """Whether a device could ever be allocated: alone, it fits what is left."""
    return all(counters.get(counter, 0) >= amount for counter, amount in used.items())
