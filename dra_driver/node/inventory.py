"""A snapshot of a node's GPUs: the one place the device model reads NVML.

`discover` asks NVML once for everything the device model needs and returns
plain frozen records, so building devices and slices stays pure and testable
without hardware. GPUs are ordered by PCI bus id, the order NVIDIA's driver
publishes them in (the NVML index is not stable: it shifts when a GPU falls
off the bus).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from dra_driver.errors import InventoryError
from dra_driver.hardware.nvml.interface import (
    ComputeInstanceProfile,
    GpuInfo,
    GpuInstanceProfile,
    MigDeviceInfo,
    Nvml,
    SystemInfo,
)

_BDF_RE = re.compile(
    r"(?:(?P<domain>[0-9a-fA-F]+):)?(?P<bus>[0-9a-fA-F]+):(?P<device>[0-9a-fA-F]+)\.(?P<function>[0-9a-fA-F]+)"
)


@dataclass(frozen=True)
class GpuInventory:
    """One GPU with its MIG profiles (empty unless MIG-capable) and MIG devices (empty
    unless MIG is on).

    `ci_profiles` maps a GI profile id to the compute-instance profiles a GPU
    instance of that profile offers (read for every GI profile of a MIG-capable
    GPU); dynamic MIG uses it to pick the CI that fills a GI. Inventories built
    by hand may leave it empty.
    """

    info: GpuInfo
    gi_profiles: tuple[GpuInstanceProfile, ...]
    mig_devices: tuple[MigDeviceInfo, ...]
    ci_profiles: Mapping[int, tuple[ComputeInstanceProfile, ...]] = field(
        default_factory=lambda: MappingProxyType({}), hash=False
    )


@dataclass(frozen=True)
class NodeInventory:
    """Every GPU of a node, in PCI bus id order, with the driver-wide facts."""

    system: SystemInfo
    gpus: tuple[GpuInventory, ...]

    def gpu(self, uuid: str) -> GpuInventory:
        """The GPU with this UUID; raises InventoryError if the node has none."""
        for gpu in self.gpus:
            if gpu.info.uuid == uuid:
                return gpu
        raise InventoryError(f"GPU {uuid}: not found on this node")


def pci_sort_key(pci_bus_id: str) -> tuple[int, int, int, int, str]:
    """Numeric (domain, bus, device, function) order of a PCI bus id.

    Ids that do not parse sort after every parsed one, by their text.
    """
    match = _BDF_RE.fullmatch(pci_bus_id.strip())
    if match is None:
        big = 1 << 64
        return (big, big, big, big, pci_bus_id)
    return (
        int(match["domain"] or "0", 16),
        int(match["bus"], 16),
        int(match["device"], 16),
        int(match["function"], 16),
        pci_bus_id,
    )


def discover(nvml: Nvml) -> NodeInventory:
    """Read the node's GPUs, their MIG profiles and MIG devices from NVML.

    MIG profiles (GI profiles and the CI profiles of each) are read only for
    MIG-capable GPUs, MIG devices only for GPUs with MIG on. NVML failures
    propagate as `NvmlError`.
    """
    system = nvml.system()
    gpus: list[GpuInventory] = []
    for info in nvml.gpus():
        profiles = tuple(nvml.gpu_instance_profiles(info.uuid)) if info.mig_capable else ()
        ci_profiles = MappingProxyType(
            {
                profile.id: tuple(nvml.compute_instance_profiles(info.uuid, profile.id))
                for profile in profiles
            }
        )
        migs = tuple(nvml.mig_devices(info.uuid)) if info.mig_enabled else ()
        ordered_migs = tuple(
            sorted(
                migs,
                key=lambda mig: (
                    mig.placement.start,
                    mig.gi_profile.id,
                    mig.gpu_instance_id,
                    mig.compute_instance_id,
                ),
            )
        )
        gpus.append(
            GpuInventory(
                info=info,
                gi_profiles=profiles,
                mig_devices=ordered_migs,
                ci_profiles=ci_profiles,
            )
        )
    gpus.sort(key=lambda gpu: pci_sort_key(gpu.info.pci_bus_id))
    return NodeInventory(system=system, gpus=tuple(gpus))
