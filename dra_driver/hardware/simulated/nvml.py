"""`SimNvml`: the `Nvml` protocol served by simulated hardware.

The driver only ever talks to `dra_driver.hardware.nvml.interface.Nvml`; this backend
answers it from a `SimHardware`, building the protocol's records from the
hardware's views so both backends hand the device model the same shapes.
Whole-node answers (`gpus`, `mig_devices`) come from one snapshot, read under
one lock, so they are consistent even while another process changes things.

Protocol choices where NVML itself would raise: a GPU without MIG, or with MIG
off, has no GPU instances, compute instances or MIG devices (empty lists);
`gpu_instance_profiles` answers with MIG on or off, like NVML's v1 call.

Per-process use: the workloads of `dra-gpu sim workload` are the compute
processes; utilization samples exist only for those using SMs (an empty
list is NVML's NOT_FOUND), and MIG answers NOT_SUPPORTED, as on hardware.

Health events: `health_events` registers like `nvmlEventSetCreate` +
`nvmlDeviceRegisterEvents`: only events injected after the registration
(`SimHardware.inject_health_event`, from `dra-gpu sim health`, possibly in
another process) are delivered, as NVML does not replay the past. `wait`
polls the shared state every `EVENT_POLL_SECONDS`.
"""

from __future__ import annotations

import time

from dra_driver.errors import NvmlError
from dra_driver.hardware.nvml import codes
from dra_driver.hardware.nvml.fabric import FabricInfo
from dra_driver.hardware.nvml.interface import (
    ComputeInstanceInfo,
    ComputeInstanceProfile,
    GpuInfo,
    GpuInstanceInfo,
    GpuInstanceProfile,
    HealthEvent,
    HealthEventKind,
    MigDeviceInfo,
    Placement,
    ProcessMemory,
    ProcessUtilization,
    SystemInfo,
)
from dra_driver.hardware.simulated.hardware import SimHardware
from dra_driver.hardware.simulated.models import GiProfileSpec
from dra_driver.hardware.simulated.views import (
    ComputeInstanceView,
    GpuFacts,
    GpuInstanceView,
    NodeSnapshot,
)

EVENT_POLL_SECONDS = 0.1
"""How often a waiting simulated event set looks for newly injected events."""


class SimHealthEventSet:
    """`HealthEventSet` over the events injected into a `SimHardware`."""

    def __init__(self, hw: SimHardware, uuids: list[str]) -> None:
        self._hw = hw
        self._uuids = frozenset(uuids)
        _, self._seen = hw.health_events_after(0)

    def wait(self, timeout: float) -> list[HealthEvent]:
        deadline = time.monotonic() + max(timeout, 0.0)
        while True:
            found, self._seen = self._hw.health_events_after(self._seen)
            events = [
                HealthEvent(gpu_uuid=uuid, kind=HealthEventKind(e.kind), xid=e.xid)
                for uuid, e in found
                if uuid in self._uuids
            ]
            remaining = deadline - time.monotonic()
            if events or remaining <= 0:
                return events
            time.sleep(min(EVENT_POLL_SECONDS, remaining))

    def close(self) -> None:
        return None


class SimNvml:
    """Implements `dra_driver.hardware.nvml.interface.Nvml` on a `SimHardware`."""

    def __init__(self, hw: SimHardware) -> None:
        self.hw = hw

    def system(self) -> SystemInfo:
        snap = self.hw.snapshot()
        return SystemInfo(snap.driver_version, snap.cuda_driver_version)

    def gpus(self) -> list[GpuInfo]:
        return [_gpu_info(g) for g in self.hw.snapshot().gpus]

    def gpu(self, uuid: str) -> GpuInfo:
        return _gpu_info(self.hw.gpu(uuid))

    def fabric_info(self, uuid: str) -> FabricInfo | None:
        return self.hw.gpu(uuid).fabric

    def gpu_instance_profiles(self, uuid: str) -> list[GpuInstanceProfile]:
        return [_gi_profile(p) for p in self.hw.gi_profiles(uuid)]

    def compute_instance_profiles(
        self, uuid: str, gi_profile_id: int
    ) -> list[ComputeInstanceProfile]:
        return [
            ComputeInstanceProfile(
                id=p.id,
                name=p.name,
                slice_count=p.slice_count,
                instance_count=p.instance_count,
                multiprocessors=p.multiprocessors,
            )
            for p in self.hw.ci_profiles(uuid, gi_profile_id)
        ]

    def gpu_instances(self, uuid: str) -> list[GpuInstanceInfo]:
        snap = _snapshot_of(self.hw, uuid)
        return [_gi_info(gi) for gi in snap.gpu_instances if gi.gpu_uuid == uuid]

    def compute_instances(self, uuid: str, gpu_instance_id: int) -> list[ComputeInstanceInfo]:
        snap = _snapshot_of(self.hw, uuid)
        if not any(gi.gpu_uuid == uuid and gi.id == gpu_instance_id for gi in snap.gpu_instances):
            raise NvmlError(codes.ERROR_NOT_FOUND, f"GPU {uuid}: no GPU instance {gpu_instance_id}")
        return [
            ComputeInstanceInfo(ci.id, ci.gpu_instance_id, ci.profile_id)
            for ci in snap.compute_instances
            if ci.gpu_uuid == uuid and ci.gpu_instance_id == gpu_instance_id
        ]

    def mig_devices(self, uuid: str) -> list[MigDeviceInfo]:
        snap = _snapshot_of(self.hw, uuid)
        return [_mig_device(ci) for ci in snap.compute_instances if ci.gpu_uuid == uuid]

    def set_mig_mode(self, uuid: str, enabled: bool) -> int:
        return self.hw.set_mig_mode(uuid, enabled)

    def create_gpu_instance(
        self, uuid: str, profile_id: int, placement: Placement
    ) -> GpuInstanceInfo:
        return _gi_info(self.hw.create_gpu_instance(uuid, profile_id, placement))

    def create_compute_instance(
        self, uuid: str, gpu_instance_id: int, ci_profile_id: int
    ) -> MigDeviceInfo:
        return _mig_device(self.hw.create_compute_instance(uuid, gpu_instance_id, ci_profile_id))

    def destroy_compute_instance(
        self, uuid: str, gpu_instance_id: int, compute_instance_id: int
    ) -> None:
        self.hw.destroy_compute_instance(uuid, gpu_instance_id, compute_instance_id)

    def health_events(self, uuids: list[str]) -> SimHealthEventSet:
        return SimHealthEventSet(self.hw, uuids)

    def destroy_gpu_instance(self, uuid: str, gpu_instance_id: int) -> None:
        self.hw.destroy_gpu_instance(uuid, gpu_instance_id)

    def gpu_recovery_action(self, uuid: str) -> int | None:
        return self.hw.recovery_action(uuid)

    def running_compute_processes(self, uuid: str) -> list[ProcessMemory]:
        return [
            ProcessMemory(pid=w.pid, used_memory_bytes=w.memory_bytes)
            for w in self.hw.processes_on(uuid)
        ]

    def process_utilization(self, uuid: str, last_seen_us: int) -> list[ProcessUtilization]:
        """Each SM-using process's current percentage, stamped now (one sample period)."""
        samples = self.hw.utilization_samples(uuid)
        now_us = time.time_ns() // 1000
        if now_us <= last_seen_us:
            return []
        return [
            ProcessUtilization(
                pid=w.pid, timestamp_us=now_us, sm_percent=w.sm_percent, memory_percent=0
            )
            for w in samples
        ]


def _snapshot_of(hw: SimHardware, uuid: str) -> NodeSnapshot:
    """A snapshot of the node, after checking that GPU `uuid` is part of it."""
    snap = hw.snapshot()
    if not any(g.uuid == uuid for g in snap.gpus):
        raise NvmlError(codes.ERROR_NOT_FOUND, f"no GPU with UUID {uuid}")
    return snap


def _gpu_info(g: GpuFacts) -> GpuInfo:
    model = g.model
    return GpuInfo(
        index=g.index,
        minor=g.minor,
        uuid=g.uuid,
        product_name=model.product_name,
        brand=codes.BRAND_NAMES.get(model.brand_id, "Unknown"),
        architecture_id=model.architecture_id,
        cuda_compute_capability=model.compute_capability,
        memory_bytes=model.memory_bytes,
        pci_bus_id=g.pci_bus_id,
        pci_device_id=model.pci_device_id,
        mig_capable=model.mig_capable,
        mig_enabled=model.mig_capable and g.mig_current,
        mig_pending=model.mig_capable and g.mig_pending,
        pcie_root=g.pcie_root,
        numa_node=g.numa_node,
        addressing_mode=(
            None
            if model.addressing_mode is None
            else codes.ADDRESSING_MODE_NAMES[model.addressing_mode]
        ),
        fabric=g.fabric,
    )


def _gi_profile(p: GiProfileSpec) -> GpuInstanceProfile:
    return GpuInstanceProfile(
        id=p.id,
        name=p.name,
        slice_count=p.slice_count,
        instance_count=p.instance_count,
        memory_mib=p.memory_mib,
        multiprocessors=p.multiprocessors,
        copy_engines=p.copy_engines,
        decoders=p.decoders,
        encoders=p.encoders,
        jpeg_engines=p.jpeg_engines,
        ofa_engines=p.ofa_engines,
        placements=p.placements,
    )


def _gi_info(gi: GpuInstanceView) -> GpuInstanceInfo:
    return GpuInstanceInfo(id=gi.id, profile_id=gi.profile_id, placement=gi.placement)


def _mig_device(ci: ComputeInstanceView) -> MigDeviceInfo:
    return MigDeviceInfo(
        parent_uuid=ci.gpu_uuid,
        parent_minor=ci.gpu_minor,
        uuid=ci.uuid,
        gpu_instance_id=ci.gpu_instance_id,
        compute_instance_id=ci.id,
        gi_profile=_gi_profile(ci.gi_profile),
        ci_profile_id=ci.profile_id,
        placement=ci.gi_placement,
        multiprocessors=ci.profile.multiprocessors,
        memory_bytes=ci.gi_profile.memory_mib * 2**20,
    )
