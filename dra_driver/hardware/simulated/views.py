"""Immutable views of the simulated hardware, as `SimHardware` hands them out.

The mutable state stays inside `SimHardware`, behind its lock; callers (the
`SimNvml` backend, the fake pynvml module in `tests.fakes`, tests) get
frozen records that already carry the looked-up profile specs, placements,
UUIDs and capability minors, so they never re-derive anything.
"""

from __future__ import annotations

from dataclasses import dataclass

from dra_driver.hardware.nvml.fabric import FabricInfo
from dra_driver.hardware.nvml.interface import Placement
from dra_driver.hardware.simulated import rules
from dra_driver.hardware.simulated.models import CiProfileSpec, GiProfileSpec, GpuModel
from dra_driver.hardware.simulated.state import GiState, GpuState, NodeState, WorkloadState


@dataclass(frozen=True)
class GpuFacts:
    """One physical GPU: its static facts and its MIG mode right now."""

    index: int
    minor: int
    uuid: str
    model: GpuModel
    pci_bus_id: str  # normalized "0000:18:00.0"
    numa_node: int
    pcie_root: str
    mig_current: bool
    mig_pending: bool
    busy: bool
    fabric: FabricInfo | None = None  # None: NVML answers NOT_SUPPORTED


@dataclass(frozen=True)
class GpuInstanceView:
    """A GPU instance that exists (nvmlGpuInstanceGetInfo)."""

    gpu_index: int
    gpu_uuid: str
    gpu_minor: int
    id: int
    profile: GiProfileSpec
    placement: Placement
    cap_minor: int  # /dev/nvidia-caps/nvidia-cap<N>

    @property
    def profile_id(self) -> int:
        return self.profile.id


@dataclass(frozen=True)
class ComputeInstanceView:
    """A compute instance that exists, which is also a MIG device."""

    gpu_index: int
    gpu_uuid: str
    gpu_minor: int
    gpu_instance_id: int
    id: int
    profile: CiProfileSpec
    gi_profile: GiProfileSpec
    gi_placement: Placement  # memory slices of the GI
    placement: Placement  # compute slices inside the GI
    mig_index: int  # nvmlDeviceGetMigDeviceHandleByIndex slot on the parent
    uuid: str  # "MIG-..."
    gi_cap_minor: int
    cap_minor: int

    @property
    def profile_id(self) -> int:
        return self.profile.id


@dataclass(frozen=True)
class NodeSnapshot:
    """The whole node at one instant, read under one lock."""

    node_name: str
    driver_version: str
    cuda_driver_version: int
    boot_id: str
    gpus: tuple[GpuFacts, ...]
    gpu_instances: tuple[GpuInstanceView, ...]
    compute_instances: tuple[ComputeInstanceView, ...]


def gpu_facts(gpu: GpuState) -> GpuFacts:
    return GpuFacts(
        index=gpu.index,
        minor=gpu.minor,
        uuid=gpu.uuid,
        model=gpu.model,
        pci_bus_id=gpu.pci_bus_id,
        numa_node=gpu.numa_node,
        pcie_root=gpu.pcie_root,
        mig_current=gpu.mig_current,
        mig_pending=gpu.mig_pending,
        busy=gpu.busy,
        fabric=gpu.fabric,
    )


def _gi_profile(gpu: GpuState, gi: GiState) -> GiProfileSpec:
    profile = gpu.model.gi_profile_by_id(gi.profile_id)
    if profile is None:  # state files are validated against the model on load
        raise AssertionError(f"GPU {gpu.index}: GI {gi.id} has unknown profile {gi.profile_id}")
    return profile


def gi_view(gpu: GpuState, gi: GiState) -> GpuInstanceView:
    return GpuInstanceView(
        gpu_index=gpu.index,
        gpu_uuid=gpu.uuid,
        gpu_minor=gpu.minor,
        id=gi.id,
        profile=_gi_profile(gpu, gi),
        placement=Placement(gi.start, gi.size),
        cap_minor=rules.gi_cap_minor(gpu.minor, gi.id),
    )


def ci_views(gpu: GpuState, gi: GiState) -> list[ComputeInstanceView]:
    gi_profile = _gi_profile(gpu, gi)
    specs = {c.id: c for c in gpu.model.ci_profiles_for(gi.profile_id)}
    views = []
    for ci in sorted(gi.cis, key=lambda c: c.id):
        spec = specs[ci.profile_id]
        views.append(
            ComputeInstanceView(
                gpu_index=gpu.index,
                gpu_uuid=gpu.uuid,
                gpu_minor=gpu.minor,
                gpu_instance_id=gi.id,
                id=ci.id,
                profile=spec,
                gi_profile=gi_profile,
                gi_placement=Placement(gi.start, gi.size),
                placement=Placement(ci.start, spec.slice_count),
                mig_index=ci.slot,
                uuid=ci.uuid,
                gi_cap_minor=rules.gi_cap_minor(gpu.minor, gi.id),
                cap_minor=rules.ci_cap_minor(gpu.minor, gi.id, ci.id),
            )
        )
    return views


def snapshot(state: NodeState) -> NodeSnapshot:
    gis: list[GpuInstanceView] = []
    cis: list[ComputeInstanceView] = []
    for gpu in state.gpus:
        for gi in sorted(gpu.gis, key=lambda g: g.id):
            gis.append(gi_view(gpu, gi))
            cis.extend(ci_views(gpu, gi))
    return NodeSnapshot(
        node_name=state.node_name,
        driver_version=state.driver_version,
        cuda_driver_version=state.cuda_driver_version,
        boot_id=state.boot_id,
        gpus=tuple(gpu_facts(g) for g in state.gpus),
        gpu_instances=tuple(gis),
        compute_instances=tuple(cis),
    )


@dataclass(frozen=True)
class WorkloadView:
    """A simulated CUDA process (`SimHardware.run_workload`)."""

    pid: int
    device_uuid: str
    pod_uid: str
    sm_percent: int
    memory_bytes: int


def workload_view(w: WorkloadState) -> WorkloadView:
    return WorkloadView(w.pid, w.device_uuid, w.pod_uid, w.sm_percent, w.memory_bytes)
