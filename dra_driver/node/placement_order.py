"""The order dynamic MIG devices are published in, chosen so first-fit does not fragment GPUs.

The scheduler does not score MIG placements: for each request it walks the
pool's slices and takes the first device, in slice order, whose selectors
match and whose counters still fit (`dra-protocol.md` §5.3). So the order of
devices inside a slice *is* the placement policy, and it is static: it is
written once and cannot look at what is allocated. A request for a profile
only ever matches that profile's devices, so what matters is, per profile,
the order of its placements (across the GPUs sharing a slice).

Strategy:

* Inside a GPU, each placement gets a *damage* score: the capacity it takes
  away from larger (or equal-sized, other) profiles, i.e. the sum over the
  published placements q of those profiles that overlap it of
  `memory slices of q / placements of q's profile` (destroying the only 4g
  placement of an A100 costs 4, one of the two 3g placements 2, the 7g 8).
  Placements are tried in increasing damage, then from the end of the
  memory-slice grid backwards. On an 8-slot A100/H100 this gives: 1g from
  slot 6 down to 0 (slot 6 is useless to 2g, slots 4-7 only serve 3g, slots
  0-3 serve 3g *and* 4g); the 2-slot profiles at 6 (1g.20gb), 4, 2, 0; 3g at
  4 before 0 (0 is the only 4g placement); 4g and 7g have one placement.
  Small profiles thus pack from the end of the grid and keep the large aligned
  blocks at the start free for as long as possible.
* Across GPUs, every profile tries the GPUs in the same (PCI bus) order. With
  first-fit that is First-Fit bin packing: the first GPU fills up before the
  next one is touched, so partially used GPUs are always tried before empty
  ones and empty GPUs stay whole for 7g / full-GPU requests.
* Inside a GPU, smaller profiles come first and the full GPU last, so a
  request that several profiles satisfy (say "any MIG device with >= 20Gi")
  takes the smallest device that fits among those sharing a slice. (In the
  profile-major v1.35 layout below, profiles sit in different slices, so such
  a request sees them in arbitrary order: the price of keeping every
  single-profile order whole.)
* Devices that do not take part in dynamic MIG (full GPUs without counters,
  existing static MIG devices) keep the old order: by name, static MIG
  devices before the dynamic ones of their GPU.

The order is static, so "GPUs already in use before empty ones" comes from
First-Fit itself, and there is one more catch: the scheduler reads slices
from an informer cache whose order is unspecified (a Go map walk, fresh for
every pod), so only the order *within* a slice holds. Hence `profile_groups`:
with Kubernetes 1.35's pool-wide counters a GPU's devices need not share a
slice, so the slice builder puts all devices of one profile (every GPU, in
the order above) into the same slice, and every single-profile request sees
its whole placement order. With 1.34's per-slice counters a GPU's devices
must stay with its counter set, so only the GPUs sharing a slice (two 8-slot
GPUs) keep their relative order.

`bench/placement.py` measures what this buys over name order (NVIDIA's) and
how far it is from a hindsight-optimal packing. On its request mixes most of
the gain comes from profile-major slicing (first-fit then really is
First-Fit across GPUs); the in-GPU order adds a little before the first
refusal and is within about a point of name order under churn.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from fractions import Fraction
from typing import Any

from dra_driver.hardware.nvml.interface import GpuInstanceProfile, Placement
from dra_driver.node.devices import AllocatableDevice, mig_profile_name
from dra_driver.node.dynamic_mig import DynamicMigSpec
from dra_driver.node.inventory import pci_sort_key

# Rank of a device inside its GPU group: static MIG first, then dynamic MIG, then the GPU.
_STATIC_MIG, _DYNAMIC_MIG, _FULL_GPU = 0, 1, 2
_FULL_GPU_GROUP: tuple[Any, ...] = (1,)


def profile_rank(profile: GpuInstanceProfile) -> tuple[int, int, int, int]:
    """Smaller profiles first: memory slices, compute slices, memory, profile id."""
    return (profile.memory_slice_count, profile.slice_count, profile.memory_mib, profile.id)


def placement_damage(
    profile: GpuInstanceProfile,
    placement: Placement,
    offered: Sequence[tuple[GpuInstanceProfile, Placement]],
) -> Fraction:
    """What taking `placement` costs the larger profiles of the same GPU.

    `offered` is every (profile, placement) the GPU publishes. Each overlapping
    placement of another profile at least as large (in memory slices) costs its
    size divided by how many placements that profile has.
    """
    placements_of: dict[int, int] = {}
    for other, _ in offered:
        placements_of[other.id] = placements_of.get(other.id, 0) + 1
    damage = Fraction(0)
    for other, where in offered:
        if other.id == profile.id or other.memory_slice_count < profile.memory_slice_count:
            continue
        if where.overlaps(placement):
            damage += Fraction(other.memory_slice_count, placements_of[other.id])
    return damage


def gpu_placement_order(
    offered: Sequence[tuple[GpuInstanceProfile, Placement]],
) -> list[tuple[GpuInstanceProfile, Placement]]:
    """One GPU's (profile, placement) pairs in publish order (see the module docstring)."""

    def key(item: tuple[GpuInstanceProfile, Placement]) -> tuple[Any, ...]:
        profile, placement = item
        return (
            profile_rank(profile),
            placement_damage(profile, placement, offered),
            -placement.start,
        )

    return sorted(offered, key=key)


def order_devices(devices: Iterable[AllocatableDevice]) -> list[AllocatableDevice]:
    """All devices in publish order: GPUs by PCI bus id, then the order inside each GPU.

    Deterministic for any input order.
    """
    groups: dict[tuple[Any, ...], list[AllocatableDevice]] = {}
    for device in devices:
        key = (pci_sort_key(device.gpu.pci_bus_id), device.gpu.uuid)
        groups.setdefault(key, []).append(device)
    ordered: list[AllocatableDevice] = []
    for key in sorted(groups):
        ordered.extend(_order_gpu(groups[key]))
    return ordered


def _order_gpu(devices: list[AllocatableDevice]) -> list[AllocatableDevice]:
    specs: list[DynamicMigSpec] = [d.dynamic for d in devices if d.dynamic is not None]
    offered = [(spec.gi_profile, spec.placement) for spec in specs]
    rank = {(p.id, where): i for i, (p, where) in enumerate(gpu_placement_order(offered))}

    def key(device: AllocatableDevice) -> tuple[Any, ...]:
        spec = device.dynamic
        if spec is not None:
            return (_DYNAMIC_MIG, rank[(spec.gi_profile.id, spec.placement)], device.name)
        if device.kind == "gpu" and device.consumes_counters:
            return (_FULL_GPU, 0, device.name)
        return (_STATIC_MIG, 0, device.name)

    return sorted(devices, key=key)


def profile_groups(devices: Iterable[AllocatableDevice]) -> list[list[AllocatableDevice]]:
    """The publish order cut into what one request type selects, for profile-major slices.

    One group per MIG profile (static and dynamic devices of that profile, every
    GPU, in `order_devices` order), smallest profile first; then one group of
    full GPUs, those that cannot be partitioned first (a whole-GPU request
    should not break up a MIG-capable GPU while a plain one is free).
    """
    groups: dict[tuple[Any, ...], list[AllocatableDevice]] = {}
    for device in order_devices(devices):
        groups.setdefault(_group_key(device), []).append(device)
    full_gpus = groups.get(_FULL_GPU_GROUP)
    if full_gpus is not None:
        full_gpus.sort(key=lambda device: bool(device.consumes_counters))
    return [groups[key] for key in sorted(groups)]


def _group_key(device: AllocatableDevice) -> tuple[Any, ...]:
    if device.dynamic is not None:
        profile = device.dynamic.gi_profile
        return (0, profile_rank(profile), device.dynamic.profile_name)
    if device.mig is not None:
        return (0, profile_rank(device.mig.gi_profile), mig_profile_name(device.mig))
    return _FULL_GPU_GROUP
