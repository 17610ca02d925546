"""The NVML protocol every backend implements, and the records it returns.

The records are plain frozen dataclasses in NVML's own terms (profile *ids*,
not enums; memory in bytes or MiB as NVML reports it), so the device model
can be written and tested as pure functions over them. Backends translate
their library's failures into `dra_driver.errors.NvmlError` with the NVML
return code from `dra_driver.hardware.nvml.codes`.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Protocol

from dra_driver.hardware.nvml import codes
from dra_driver.hardware.nvml.fabric import FabricInfo


@dataclass(frozen=True, order=True)
class Placement:
    """A run of memory slices a GPU instance occupies: `[start, start + size)`."""

    start: int
    size: int

    @property
    def slices(self) -> range:
        return range(self.start, self.start + self.size)

    def overlaps(self, other: Placement) -> bool:
        return self.start < other.start + other.size and other.start < self.start + self.size


@dataclass(frozen=True)
class SystemInfo:
    """Driver-wide facts."""

    driver_version: str  # "550.54.15"
    cuda_driver_version: int  # nvmlSystemGetCudaDriverVersion: major*1000 + minor*10

    @property
    def cuda_version(self) -> str:
        """CUDA driver version as "major.minor", e.g. "12.4"."""
        major, rest = divmod(self.cuda_driver_version, 1000)
        return f"{major}.{rest // 10}"


@dataclass(frozen=True)
class GpuInfo:
    """One physical GPU."""

    index: int  # NVML enumeration index (unstable; never used in names)
    minor: int  # N in /dev/nvidiaN; device names use this
    uuid: str  # "GPU-..."
    product_name: str  # nvmlDeviceGetName
    brand: str  # go-nvlib string, e.g. "Nvidia"
    architecture_id: int  # nvmlDeviceArchitecture_t
    cuda_compute_capability: tuple[int, int]
    memory_bytes: int  # nvmlDeviceGetMemoryInfo().total
    pci_bus_id: str  # normalized "0000:3f:00.0"
    pci_device_id: int  # (device << 16) | 0x10DE
    mig_capable: bool
    mig_enabled: bool  # current MIG mode
    mig_pending: bool  # pending MIG mode (differs from current until a reset on Ampere)
    pcie_root: str | None = None  # e.g. "pci0000:00", where known
    numa_node: int | None = None  # where known
    # nvmlDeviceGetAddressingMode as go-nvlib names it ("ATS", "HMM", "None"); None where
    # NVML cannot tell (NOT_SUPPORTED: not a coherent platform; or a driver without the call)
    addressing_mode: str | None = None
    # nvmlDeviceGetGpuFabricInfo(V); None where NVML answers NOT_SUPPORTED (no NVLink fabric)
    # or lacks the call. `dra_driver.hardware.nvml.fabric` says what it means.
    fabric: FabricInfo | None = None

    @property
    def architecture(self) -> str:
        return codes.ARCH_NAMES.get(self.architecture_id, "Unknown")

    @property
    def mig_toggle_supported(self) -> bool:
        """Hopper and newer switch MIG mode without a GPU reset."""
        return self.architecture_id >= codes.ARCH_HOPPER


@dataclass(frozen=True)
class GpuInstanceProfile:
    """A GPU-instance profile as `nvidia-smi mig -lgip/-lgipp` shows it."""

    id: int  # profile id (19, 20, 15, 14, 9, 5, 0 on 8-slot GPUs)
    name: str  # "1g.10gb", "1g.10gb+me", built with go-nvlib's formula
    slice_count: int  # compute slices (the G in "Gg")
    instance_count: int
    memory_mib: int  # memorySizeMB
    multiprocessors: int
    copy_engines: int
    decoders: int
    encoders: int
    jpeg_engines: int
    ofa_engines: int
    placements: tuple[Placement, ...]  # every possible placement, free or not

    @property
    def memory_bytes(self) -> int:
        return self.memory_mib * 2**20

    @property
    def memory_slice_count(self) -> int:
        return self.placements[0].size if self.placements else 0


@dataclass(frozen=True)
class ComputeInstanceProfile:
    """A compute-instance profile of one GPU-instance profile."""

    id: int  # equals the NVML_COMPUTE_INSTANCE_PROFILE_* enum
    name: str  # "1c.3g.40gb" or, when it fills the GI, the GI's name
    slice_count: int
    instance_count: int
    multiprocessors: int


@dataclass(frozen=True)
class GpuInstanceInfo:
    """A GPU instance that exists on the hardware."""

    id: int
    profile_id: int
    placement: Placement


@dataclass(frozen=True)
class ComputeInstanceInfo:
    """A compute instance that exists inside a GPU instance."""

    id: int
    gpu_instance_id: int
    profile_id: int


@dataclass(frozen=True)
class MigDeviceInfo:
    """A MIG device: one compute instance with its GPU instance."""

    parent_uuid: str
    parent_minor: int
    uuid: str  # "MIG-..."; changes when the GI/CI is recreated
    gpu_instance_id: int
    compute_instance_id: int
    gi_profile: GpuInstanceProfile
    ci_profile_id: int
    placement: Placement
    multiprocessors: int  # of the compute instance
    memory_bytes: int


@dataclass(frozen=True)
class ProcessMemory:
    """A compute process running on a GPU or MIG device (`nvmlProcessInfo_t`).

    `pid` is the host's (the driver's) pid. `used_memory_bytes` is None where
    NVML cannot tell (`NVML_VALUE_NOT_AVAILABLE`), never a guessed 0.
    """

    pid: int
    used_memory_bytes: int | None


@dataclass(frozen=True)
class ProcessUtilization:
    """One per-process utilization sample (`nvmlProcessUtilizationSample_t`).

    NVML returns a sample only for processes that had non-zero utilization in
    the sample period; `timestamp_us` is CPU time in microseconds, the value
    to pass as `last_seen_us` next time.
    """

    pid: int
    timestamp_us: int
    sm_percent: int
    memory_percent: int


class Nvml(Protocol):
    """What dra-gpu needs from NVML. All GPUs are addressed by UUID."""

    def system(self) -> SystemInfo: ...

    def gpus(self) -> list[GpuInfo]:
        """Every GPU, in NVML index order."""
        ...

    def gpu(self, uuid: str) -> GpuInfo: ...

    def fabric_info(self, uuid: str) -> FabricInfo | None:
        """The GPU's NVLink fabric answer now (it changes while the fabric manager works);
        None where NVML answers NOT_SUPPORTED or the driver has no fabric call."""
        ...

    def gpu_instance_profiles(self, uuid: str) -> list[GpuInstanceProfile]:
        """The GI profiles a MIG-capable GPU supports (empty for other GPUs).

        Answers whether MIG is on or off, like NVML's v1 profile-info call.
        """
        ...

    def compute_instance_profiles(
        self, uuid: str, gi_profile_id: int
    ) -> list[ComputeInstanceProfile]: ...

    def gpu_instances(self, uuid: str) -> list[GpuInstanceInfo]: ...

    def compute_instances(self, uuid: str, gpu_instance_id: int) -> list[ComputeInstanceInfo]: ...

    def mig_devices(self, uuid: str) -> list[MigDeviceInfo]:
        """Every compute instance of the GPU as a MIG device (empty if MIG is off)."""
        ...

    def set_mig_mode(self, uuid: str, enabled: bool) -> int:
        """Request a MIG mode; returns NVML's activation status.

        0 when the mode is active, ERROR_RESET_REQUIRED (16) when it is only
        pending, ERROR_IN_USE (19) when the GPU is busy.
        """
        ...

    def create_gpu_instance(
        self, uuid: str, profile_id: int, placement: Placement
    ) -> GpuInstanceInfo: ...

    def create_compute_instance(
        self, uuid: str, gpu_instance_id: int, ci_profile_id: int
    ) -> MigDeviceInfo: ...

    def destroy_compute_instance(
        self, uuid: str, gpu_instance_id: int, compute_instance_id: int
    ) -> None: ...

    def destroy_gpu_instance(self, uuid: str, gpu_instance_id: int) -> None: ...

    # -- per-process use (sampled by `kubelet_plugin.usage_sampler`) ---------------

    def running_compute_processes(self, uuid: str) -> list[ProcessMemory]:
        """The compute processes on a GPU (`GPU-...`) or one MIG device (`MIG-...`).

        `nvmlDeviceGetComputeRunningProcesses` merged with
        `nvmlDeviceGetMPSComputeRunningProcesses` (MPS clients; skipped where
        NOT_SUPPORTED), one entry per pid. A MIG device's UUID gives only that
        MIG device's processes (NVML needs the MIG handle for per-instance data).
        """
        ...

    def process_utilization(self, uuid: str, last_seen_us: int) -> list[ProcessUtilization]:
        """`nvmlDeviceGetProcessUtilization` samples newer than `last_seen_us` (0: all kept).

        An empty list means NVML has no new sample (it answers NOT_FOUND):
        callers must treat that as "not measured", not as 0 %. Raises
        `NvmlError` with `ERROR_NOT_SUPPORTED` on a MIG device or a GPU with
        MIG enabled (NVML does not sample processes under MIG).
        """
        ...


# --------------------------------------------------------------------------- device health events

NO_INSTANCE = 0xFFFFFFFF
"""NVML's gpuInstanceId/computeInstanceId of an event not tied to a GI or CI."""


class HealthEventKind(Enum):
    """What a device-health event says about its GPU."""

    XID = "xid"  # nvmlEventTypeXidCriticalError; `xid` holds the Xid number
    DOUBLE_BIT_ECC = "double-bit-ecc"  # nvmlEventTypeDoubleBitEccError
    GPU_LOST = "gpu-lost"  # NVML_ERROR_GPU_IS_LOST while waiting or reading the GPU
    RECOVERED = "recovered"  # the GPU answers normally again (reset, or back on the bus)


@dataclass(frozen=True)
class HealthEvent:
    """One event of one physical GPU, as a backend reports it.

    `gpu_instance_id`/`compute_instance_id` are NVML's attribution of the
    event to a MIG device (None when NVML gives `NO_INSTANCE`).
    """

    gpu_uuid: str
    kind: HealthEventKind
    xid: int | None = None
    gpu_instance_id: int | None = None
    compute_instance_id: int | None = None


class HealthEventSet(Protocol):
    """A registration for the health events of some GPUs (NVML's event set)."""

    def wait(self, timeout: float) -> list[HealthEvent]:
        """The events that arrived, waiting up to `timeout` seconds for the first."""
        ...

    def close(self) -> None:
        """Free the registration; `wait` must not be called afterwards."""
        ...


class HealthEventSource(Protocol):
    """A backend that can report device-health events (both NVML backends)."""

    def health_events(self, uuids: list[str]) -> HealthEventSet:
        """Register for Xid, double-bit ECC and GPU-lost events of these GPUs.

        A GPU that cannot be registered (old GPUs answer NOT_SUPPORTED) is
        skipped and logged by the backend; the set still covers the others.
        """
        ...

    def gpu_recovery_action(self, uuid: str) -> int | None:
        """The GPU's recovery action (`NVML_FI_DEV_GET_GPU_RECOVERY_ACTION`, a
        `codes.RECOVERY_ACTION_*` value), or None where the driver cannot report it
        (before R565). `uuid` is a physical GPU's; raises `NvmlError` (e.g.
        `ERROR_GPU_IS_LOST`) when the GPU does not answer.
        """
        ...
