"""Builders of NVML records and node inventories (GpuInfo, MIG profiles and devices) with real
numbers.
"""

from __future__ import annotations

import uuid as _uuid

from dra_driver.errors import NvmlError
from dra_driver.hardware.nvml import codes as nvml_codes
from dra_driver.hardware.nvml.fabric import FabricInfo
from dra_driver.hardware.nvml.interface import (
    ComputeInstanceInfo,
    ComputeInstanceProfile,
    GpuInfo,
    GpuInstanceInfo,
    GpuInstanceProfile,
    MigDeviceInfo,
    Placement,
    SystemInfo,
)
from dra_driver.node.inventory import GpuInventory, NodeInventory

_MIB = 2**20


def make_system_info(
    driver_version: str = "550.54.15", cuda_driver_version: int = 12040
) -> SystemInfo:
    """Driver-wide facts; defaults are an R550 driver (CUDA 12.4)."""
    return SystemInfo(driver_version=driver_version, cuda_driver_version=cuda_driver_version)


# model -> (nvmlDeviceGetName, PCI device id, architecture, compute capability, total MiB)
GPU_MODELS: dict[str, tuple[str, int, int, tuple[int, int], int]] = {
    "A30": ("NVIDIA A30", 0x20B7, 7, (8, 0), 24576),
    "A100-SXM4-40GB": ("NVIDIA A100-SXM4-40GB", 0x20B0, 7, (8, 0), 40960),
    "A100-PCIE-40GB": ("NVIDIA A100-PCIE-40GB", 0x20F1, 7, (8, 0), 40960),
    "A100-SXM4-80GB": ("NVIDIA A100-SXM4-80GB", 0x20B2, 7, (8, 0), 81920),
    "H100-SXM5-80GB": ("NVIDIA H100 80GB HBM3", 0x2330, 9, (9, 0), 81559),
    "H200-SXM": ("NVIDIA H200", 0x2335, 9, (9, 0), 143771),
    "B200": ("NVIDIA B200", 0x2901, 10, (10, 0), 183359),
}


def fake_gpu_uuid(seed: int) -> str:
    """A well-formed, deterministic `GPU-...` UUID."""
    return f"GPU-{_uuid.UUID(int=(0xA1 << 120) | seed)}"


def fake_mig_uuid(seed: int) -> str:
    """A well-formed, deterministic `MIG-...` UUID."""
    return f"MIG-{_uuid.UUID(int=(0xB2 << 120) | seed)}"


def make_gpu_info(
    *,
    model: str = "A100-SXM4-40GB",
    index: int = 0,
    minor: int | None = None,
    uuid: str | None = None,
    pci_bus_id: str | None = None,
    brand: str = "Nvidia",
    mig_capable: bool = True,
    mig_enabled: bool = False,
    mig_pending: bool | None = None,
    pcie_root: str | None = None,
    numa_node: int | None = None,
    memory_bytes: int | None = None,
) -> GpuInfo:
    """A GpuInfo for one of `GPU_MODELS`; minor, UUID and bus id default from `index`."""
    product, device_id, arch, cc, total_mib = GPU_MODELS[model]
    return GpuInfo(
        index=index,
        minor=index if minor is None else minor,
        uuid=uuid or fake_gpu_uuid(index),
        product_name=product,
        brand=brand,
        architecture_id=arch,
        cuda_compute_capability=cc,
        memory_bytes=total_mib * _MIB if memory_bytes is None else memory_bytes,
        pci_bus_id=pci_bus_id or f"0000:{0x10 + index:02x}:00.0",
        pci_device_id=(device_id << 16) | 0x10DE,
        mig_capable=mig_capable,
        mig_enabled=mig_enabled,
        mig_pending=mig_enabled if mig_pending is None else mig_pending,
        pcie_root=pcie_root,
        numa_node=numa_node,
    )


# (id, name, compute slices, instanceCount, memorySizeMB, (SM, CE, DEC, ENC, JPG, OFA),
#  placement starts, placement size) -- one `nvidia-smi mig -lgip/-lgipp` row
_ProfileRow = tuple[
    int, str, int, int, int, tuple[int, int, int, int, int, int], tuple[int, ...], int
]


def _profiles(rows: list[_ProfileRow]) -> tuple[GpuInstanceProfile, ...]:
    profiles = []
    for profile_id, name, slices, instances, mib, engines, starts, size in rows:
        sms, ce, dec, enc, jpg, ofa = engines
        profiles.append(
            GpuInstanceProfile(
                id=profile_id,
                name=name,
                slice_count=slices,
                instance_count=instances,
                memory_mib=mib,
                multiprocessors=sms,
                copy_engines=ce,
                decoders=dec,
                encoders=enc,
                jpeg_engines=jpg,
                ofa_engines=ofa,
                placements=tuple(Placement(start, size) for start in starts),
            )
        )
    return tuple(profiles)


def a100_40gb_gi_profiles() -> tuple[GpuInstanceProfile, ...]:
    """A100-40GB GI profiles (gpu-mig-nvml.md §2.2, memory set A)."""
    seven = (0, 1, 2, 3, 4, 5, 6)
    return _profiles(
        [
            (19, "1g.5gb", 1, 7, 4864, (14, 1, 0, 0, 0, 0), seven, 1),
            (20, "1g.5gb+me", 1, 1, 4864, (14, 1, 1, 0, 1, 1), seven, 1),
            (15, "1g.10gb", 1, 4, 9856, (14, 1, 1, 0, 0, 0), (0, 2, 4, 6), 2),
            (14, "2g.10gb", 2, 3, 9856, (28, 2, 1, 0, 0, 0), (0, 2, 4), 2),
            (9, "3g.20gb", 3, 2, 19968, (42, 3, 2, 0, 0, 0), (0, 4), 4),
            (5, "4g.20gb", 4, 1, 19968, (56, 4, 2, 0, 0, 0), (0,), 4),
            (0, "7g.40gb", 7, 1, 40192, (98, 7, 5, 0, 1, 1), (0,), 8),
        ]
    )


def h100_80gb_gi_profiles() -> tuple[GpuInstanceProfile, ...]:
    """H100 80GB SXM5 GI profiles (gpu-mig-nvml.md §2.4)."""
    seven = (0, 1, 2, 3, 4, 5, 6)
    return _profiles(
        [
            (19, "1g.10gb", 1, 7, 9984, (16, 1, 1, 0, 1, 0), seven, 1),
            (20, "1g.10gb+me", 1, 1, 9984, (16, 1, 1, 0, 1, 1), seven, 1),
            (15, "1g.20gb", 1, 4, 20096, (26, 1, 1, 0, 1, 0), (0, 2, 4, 6), 2),
            (14, "2g.20gb", 2, 3, 20096, (32, 2, 2, 0, 2, 0), (0, 2, 4), 2),
            (9, "3g.40gb", 3, 2, 40448, (60, 3, 3, 0, 3, 0), (0, 4), 4),
            (5, "4g.40gb", 4, 1, 40448, (64, 4, 4, 0, 4, 0), (0,), 4),
            (0, "7g.80gb", 7, 1, 81152, (132, 8, 7, 0, 7, 1), (0,), 8),
        ]
    )


# compute slices -> the CI profile (enum) that fills a GI of that many slices
_FULL_CI_PROFILE = {1: 0, 2: 1, 3: 2, 4: 3, 7: 4, 8: 5, 6: 6}


def make_mig_device(
    parent: GpuInfo,
    profile: GpuInstanceProfile,
    placement_start: int,
    *,
    gpu_instance_id: int,
    compute_instance_id: int = 0,
    ci_profile_id: int | None = None,
    multiprocessors: int | None = None,
    uuid: str | None = None,
) -> MigDeviceInfo:
    """A MIG device of `parent`; by default one CI filling the whole GI."""
    placement = next((p for p in profile.placements if p.start == placement_start), None)
    if placement is None:
        raise ValueError(f"profile {profile.name} has no placement starting at {placement_start}")
    return MigDeviceInfo(
        parent_uuid=parent.uuid,
        parent_minor=parent.minor,
        uuid=uuid
        or fake_mig_uuid((parent.minor << 16) | (gpu_instance_id << 8) | compute_instance_id),
        gpu_instance_id=gpu_instance_id,
        compute_instance_id=compute_instance_id,
        gi_profile=profile,
        ci_profile_id=_FULL_CI_PROFILE[profile.slice_count]
        if ci_profile_id is None
        else ci_profile_id,
        placement=placement,
        multiprocessors=profile.multiprocessors if multiprocessors is None else multiprocessors,
        memory_bytes=profile.memory_bytes,
    )


def make_gpu_inventory(
    info: GpuInfo,
    gi_profiles: tuple[GpuInstanceProfile, ...] = (),
    mig_devices: tuple[MigDeviceInfo, ...] = (),
) -> GpuInventory:
    return GpuInventory(info=info, gi_profiles=gi_profiles, mig_devices=mig_devices)


# DGX H100 GPU bus numbers, in the order `nvidia-smi` lists them.
DGX_H100_BUSES = (0x1B, 0x43, 0x52, 0x61, 0x9D, 0xC3, 0xD1, 0xDF)


def dgx_h100_inventory(system: SystemInfo | None = None) -> NodeInventory:
    """Eight H100 80GB HBM3, MIG-capable with MIG off, four per NUMA node."""
    gpus = []
    for index, bus in enumerate(DGX_H100_BUSES):
        info = make_gpu_info(
            model="H100-SXM5-80GB",
            index=index,
            pci_bus_id=f"0000:{bus:02x}:00.0",
            numa_node=index // 4,
        )
        gpus.append(make_gpu_inventory(info, h100_80gb_gi_profiles()))
    return NodeInventory(system=system or make_system_info("570.172.08", 12080), gpus=tuple(gpus))


def a100_static_mig_inventory() -> NodeInventory:
    """Three A100-SXM4-40GB: GPU 0 partitioned (3g.20gb@4, 2g.10gb@0, 1g.5gb@2,
    1g.5gb+me@3), GPU 1 with MIG off, GPU 2 with MIG on but no MIG devices."""
    profiles = {p.name: p for p in a100_40gb_gi_profiles()}
    gpu0 = make_gpu_info(index=0, mig_enabled=True, numa_node=0, pcie_root="pci0000:00")
    migs = (
        make_mig_device(gpu0, profiles["2g.10gb"], 0, gpu_instance_id=3),
        make_mig_device(gpu0, profiles["1g.5gb"], 2, gpu_instance_id=9),
        make_mig_device(gpu0, profiles["1g.5gb+me"], 3, gpu_instance_id=10),
        make_mig_device(gpu0, profiles["3g.20gb"], 4, gpu_instance_id=2),
    )
    gpu1 = make_gpu_info(index=1, numa_node=0, pcie_root="pci0000:00")
    gpu2 = make_gpu_info(index=2, mig_enabled=True, numa_node=1, pcie_root="pci0000:80")
    return NodeInventory(
        system=make_system_info(),
        gpus=(
            make_gpu_inventory(gpu0, tuple(profiles.values()), migs),
            make_gpu_inventory(gpu1, tuple(profiles.values())),
            make_gpu_inventory(gpu2, tuple(profiles.values())),
        ),
    )


class InventoryNvml:
    """A read-only `Nvml` serving a fixed `NodeInventory`, recording every call.

    GPUs come back in the order given (like NVML's index order), so tests can
    check that `discover` sorts them. Every mutating call raises NvmlError
    NOT_SUPPORTED: use `dra_driver.hardware.simulated` for a node that changes.
    """

    def __init__(self, inventory: NodeInventory) -> None:
        self.inventory = inventory
        self.calls: list[tuple[str, str]] = []

    def _gpu(self, method: str, uuid: str) -> GpuInventory:
        self.calls.append((method, uuid))
        for gpu in self.inventory.gpus:
            if gpu.info.uuid == uuid:
                return gpu
        raise NvmlError(nvml_codes.ERROR_NOT_FOUND, f"GPU {uuid}: not found")

    def _refuse(self, what: str) -> NvmlError:
        return NvmlError(nvml_codes.ERROR_NOT_SUPPORTED, f"{what}: InventoryNvml is read-only")

    def system(self) -> SystemInfo:
        self.calls.append(("system", ""))
        return self.inventory.system

    def gpus(self) -> list[GpuInfo]:
        self.calls.append(("gpus", ""))
        return [gpu.info for gpu in self.inventory.gpus]

    def gpu(self, uuid: str) -> GpuInfo:
        return self._gpu("gpu", uuid).info

    def fabric_info(self, uuid: str) -> FabricInfo | None:
        return self._gpu("fabric_info", uuid).info.fabric

    def gpu_instance_profiles(self, uuid: str) -> list[GpuInstanceProfile]:
        return list(self._gpu("gpu_instance_profiles", uuid).gi_profiles)

    def compute_instance_profiles(
        self, uuid: str, gi_profile_id: int
    ) -> list[ComputeInstanceProfile]:
        self._gpu("compute_instance_profiles", uuid)
        self.calls[-1] = ("compute_instance_profiles", f"{uuid}/{gi_profile_id}")
        return []

    def gpu_instances(self, uuid: str) -> list[GpuInstanceInfo]:
        migs = self._gpu("gpu_instances", uuid).mig_devices
        found = {
            mig.gpu_instance_id: GpuInstanceInfo(
                id=mig.gpu_instance_id, profile_id=mig.gi_profile.id, placement=mig.placement
            )
            for mig in migs
        }
        return [found[key] for key in sorted(found)]

    def compute_instances(self, uuid: str, gpu_instance_id: int) -> list[ComputeInstanceInfo]:
        migs = self._gpu("compute_instances", uuid).mig_devices
        return [
            ComputeInstanceInfo(
                id=mig.compute_instance_id,
                gpu_instance_id=gpu_instance_id,
                profile_id=mig.ci_profile_id,
            )
            for mig in migs
            if mig.gpu_instance_id == gpu_instance_id
        ]

    def mig_devices(self, uuid: str) -> list[MigDeviceInfo]:
        return list(self._gpu("mig_devices", uuid).mig_devices)

    def set_mig_mode(self, uuid: str, enabled: bool) -> int:
        raise self._refuse(f"set MIG mode of {uuid} to {enabled}")

    def create_gpu_instance(
        self, uuid: str, profile_id: int, placement: Placement
    ) -> GpuInstanceInfo:
        raise self._refuse(f"create GI profile {profile_id} at {placement} on {uuid}")

    def create_compute_instance(
        self, uuid: str, gpu_instance_id: int, ci_profile_id: int
    ) -> MigDeviceInfo:
        raise self._refuse(f"create CI profile {ci_profile_id} in GI {gpu_instance_id} on {uuid}")

    def destroy_compute_instance(
        self, uuid: str, gpu_instance_id: int, compute_instance_id: int
    ) -> None:
        raise self._refuse(f"destroy CI {compute_instance_id} of GI {gpu_instance_id} on {uuid}")

    def destroy_gpu_instance(self, uuid: str, gpu_instance_id: int) -> None:
        raise self._refuse(f"destroy GI {gpu_instance_id} on {uuid}")
