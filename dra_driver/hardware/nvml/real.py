"""The `Nvml` protocol on real GPUs, through pynvml (nvidia-ml-py).

This is the one place that speaks pynvml: its handles, ctypes structs and
caller-allocated arrays, its `NVMLError_*` classes and its bytes-vs-str
quirks. Everything above it sees the plain records of
`dra_driver.hardware.nvml.interface` and `dra_driver.errors.NvmlError` with the NVML
return code and a message naming the GPU and the operation.

The pynvml module is injected (`RealNvml(lib=...)`) so tests can run this code
unchanged over the fake module in `tests.fakes`.

Facts this module relies on (see the NVML notes, sections 1 and 4):

* GI profile info is read with the v1 call, which answers on MIG-capable GPUs
  whether MIG is on or off; enums that answer NOT_SUPPORTED or
  INVALID_ARGUMENT are skipped, as go-nvlib does.
* Profile names are go-nvlib's (`dra_driver.hardware.nvml.naming`).
* Possible placements are fetched in two calls (NULL array to learn the count,
  then a caller-allocated `c_nvmlGpuInstancePlacement_t` array), because a
  profile can have more placements than instances (1g+me: 7 placements, 1
  instance).
* Handle lookups by UUID are slow on busy systems, so handles are cached by
  UUID; the cache entry of a GPU is dropped when its MIG mode is changed,
  because the change may reset the GPU.
* Compute-instance profiles need a GPU-instance handle in NVML; see
  `RealNvml.compute_instance_profiles` for what is answered when no GPU
  instance of the profile exists.
* `nvmlDeviceGetAddressingMode` answers NOT_SUPPORTED off coherent
  platforms; a library without it (an older driver, or an nvidia-ml-py
  without the wrapper) leaves `GpuInfo.addressing_mode` None, logged once at
  info level, as go-nvlib skips the call when the symbol is missing. NVIDIA's
  plugin once crashed there (their PR #1014); this backend never fails on it.
* Fabric info is read with `nvmlDeviceGetGpuFabricInfoV` and the v3 struct
  (health summary), then v2 on ARGUMENT_VERSION_MISMATCH, then the v1
  `nvmlDeviceGetGpuFabricInfo` where the library has no V call (each struct
  passed by reference, as pynvml's wrappers expect). NOT_SUPPORTED (a GPU
  without NVLink fabric) and a library with neither call give None, the
  latter logged once; neither is an error.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, NoReturn

from dra_driver.errors import NvmlError
from dra_driver.hardware.nvml import codes
from dra_driver.hardware.nvml.fabric import FabricInfo, cluster_uuid_text
from dra_driver.hardware.nvml.interface import (
    NO_INSTANCE,
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
from dra_driver.hardware.nvml.naming import ci_profile_offered, mig_profile_name
from dra_driver.hardware.nvml.pci import normalize_pci_bus_id, pci_topology

# nvml.h constants the calls below pass (pynvml names in comments).
_MIG_DISABLE = 0  # NVML_DEVICE_MIG_DISABLE
_MIG_ENABLE = 1  # NVML_DEVICE_MIG_ENABLE
_CI_ENGINE_PROFILE_SHARED = 0  # NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED
_PROFILE_INFO_V1 = 1  # version argument of the *ProfileInfo calls: the v1 C entry points

# NVML_COMPUTE_INSTANCE_PROFILE_{1,2,3,4,7,8,6}_SLICE; enums 7 (1_SLICE_REV1) and
# 8 (7_SLICE_NVL) are variants of those.
_PLAIN_CI_ENUMS = range(7)
_CI_1_SLICE_REV1 = 7  # NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE_REV1
_GI_1_SLICE = 0x0  # NVML_GPU_INSTANCE_PROFILE_1_SLICE
_GI_1_SLICE_REV2 = 0x9  # NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV2 (1 compute, 2 memory slices)

# nvmlEventType* bits the health monitor registers (NVML notes 4.6). Single-bit
# ECC errors are corrected by the hardware and not a reason to stop using a GPU.
_EVENT_DOUBLE_BIT_ECC = 0x2  # nvmlEventTypeDoubleBitEccError
_EVENT_XID = 0x8  # nvmlEventTypeXidCriticalError
_HEALTH_EVENT_MASK = _EVENT_XID | _EVENT_DOUBLE_BIT_ECC

log = logging.getLogger(__name__)

# Enumerating profile enums: these codes mean "this enum does not exist here".
_ABSENT_PROFILE = (codes.ERROR_NOT_SUPPORTED, codes.ERROR_INVALID_ARGUMENT)


def import_pynvml() -> ModuleType:
    """Import nvidia-ml-py's `pynvml`, or fail with an NvmlError that says what is missing."""
    try:
        import pynvml
    except ImportError as exc:
        raise NvmlError(
            codes.ERROR_LIBRARY_NOT_FOUND,
            f"import pynvml (Python package nvidia-ml-py): {exc}",
        ) from exc
    lib: ModuleType = pynvml
    return lib


def load_pynvml(library: Path) -> ModuleType:
    """pynvml bound to the NVML shared object at `library` (no LD_LIBRARY_PATH needed).

    pynvml loads `libnvidia-ml.so.1` through the loader's search path on its
    first `nvmlInit`, unless its module-global `nvmlLib` is already set (see
    nvidia-ml-py's `_LoadNvmlLibrary`). The plugin's image has no driver, so
    the library is opened here from the driver root and handed to pynvml, as
    NVIDIA's plugin does with its driver root. One process uses one library:
    a different path replaces it, dropping pynvml's cached function pointers.
    """
    lib = import_pynvml()
    try:
        handle = ctypes.CDLL(str(library))
    except OSError as exc:
        raise NvmlError(codes.ERROR_LIBRARY_NOT_FOUND, f"load {library}: {exc}") from exc
    with lib.libLoadLock:
        if getattr(lib, "_dra_gpu_library", None) != str(library):
            setattr(lib, "nvmlLib", handle)  # noqa: B010 - pynvml's module global
            lib._nvmlGetFunctionPointer_cache.clear()
            setattr(lib, "_dra_gpu_library", str(library))  # noqa: B010
    return lib


def error_text(exc: BaseException, code: int) -> str:
    """pynvml's text for an NVMLError, falling back to nvml.h's wording."""
    try:
        text = str(exc)
    except Exception:  # pynvml's __str__ may call into the library
        text = ""
    return text or codes.ERROR_STRINGS.get(code, f"NVML error {code}")


@dataclass(frozen=True)
class _KnownGiProfile:
    """A GI profile with the enum it was read under (names and CI rules need the enum)."""

    enum: int
    profile: GpuInstanceProfile


class RealNvml:
    """`Nvml` over pynvml. One instance holds one NVML initialisation until `close()`.

    Thread-safe: every public call holds an instance lock, so the handle and
    profile caches stay consistent and slow handle lookups are not run
    concurrently against the driver.
    """

    def __init__(
        self,
        lib: ModuleType | None = None,
        *,
        init_flags: int = 0,
        sysfs_root: Path | None = Path("/sys"),
    ) -> None:
        """Load and initialise NVML.

        `lib` is the pynvml module (default: `import pynvml`). `init_flags` go to
        `nvmlInitWithFlags` (1 = NVML_INIT_FLAG_NO_GPUS lets init succeed on a
        node without GPUs). `sysfs_root` is where the PCIe root and NUMA node of
        each GPU are read from (`dra_driver.hardware.nvml.pci.pci_topology`); None skips
        them.
        """
        self._lib = lib if lib is not None else import_pynvml()
        self._sysfs_root = sysfs_root
        self._lock = threading.RLock()
        self._handles: dict[str, Any] = {}
        self._gi_profiles: dict[str, tuple[_KnownGiProfile, ...]] = {}
        self._ci_profiles: dict[tuple[str, int], tuple[ComputeInstanceProfile, ...]] = {}
        self._open = True
        self._addressing_mode_missing_logged = False
        self._fabric_missing_logged = False
        self._init_flags = init_flags
        try:
            self._lib.nvmlInitWithFlags(init_flags)
        except self._lib.NVMLError as exc:
            self._open = False
            self._raise(exc, f"initialize NVML (flags {init_flags:#x})")

    # ---------------------------------------------------------------- lifecycle

    def close(self) -> None:
        """Shut NVML down (once). Any later call raises NvmlError ERROR_UNINITIALIZED."""
        with self._lock:
            if not self._open:
                return
            self._open = False
            self._handles.clear()
            self._gi_profiles.clear()
            self._ci_profiles.clear()
            try:
                self._lib.nvmlShutdown()
            except self._lib.NVMLError as exc:
                self._raise(exc, "shut down NVML")

    @contextlib.contextmanager
    def released(self) -> Iterator[None]:
        """NVML shut down for the block, so this process lets go of every GPU; initialized
        again after it (the caches are rebuilt on demand).

        The nvidia driver does not let go of a GPU that a process has open, and an
        initialized NVML has them all open: a GPU can only move to vfio-pci (or back)
        while NVML is released (NVIDIA's plugin initializes NVML around each operation
        for this). Other calls wait for the block (the instance lock). NvmlError if
        NVML cannot be shut down, or initialized again (then every later call fails too).
        """
        with self._lock:
            if not self._open:
                yield
                return
            self._handles.clear()
            self._gi_profiles.clear()
            self._ci_profiles.clear()
            try:
                self._lib.nvmlShutdown()
            except self._lib.NVMLError as exc:
                self._raise(exc, "shut down NVML to let go of the GPUs")
            try:
                yield
            finally:
                try:
                    self._lib.nvmlInitWithFlags(self._init_flags)
                except self._lib.NVMLError as exc:
                    self._open = False
                    self._raise(exc, f"initialize NVML again (flags {self._init_flags:#x})")

    def __enter__(self) -> RealNvml:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # ---------------------------------------------------------------- system and GPUs

    def system(self) -> SystemInfo:
        with self._lock:
            lib = self._lib
            driver = self._call("read the driver version", lib.nvmlSystemGetDriverVersion)
            cuda = self._call("read the CUDA driver version", lib.nvmlSystemGetCudaDriverVersion)
            return SystemInfo(driver_version=_text(driver), cuda_driver_version=int(cuda))

    def gpus(self) -> list[GpuInfo]:
        with self._lock:
            lib = self._lib
            count = int(self._call("count GPUs", lib.nvmlDeviceGetCount))
            result = []
            for index in range(count):
                handle = self._call(
                    f"get the handle of GPU index {index}", lib.nvmlDeviceGetHandleByIndex, index
                )
                uuid = _text(
                    self._call(f"read the UUID of GPU index {index}", lib.nvmlDeviceGetUUID, handle)
                )
                self._handles[uuid] = handle
                result.append(self._gpu_info(index, uuid, handle))
            return result

    def gpu(self, uuid: str) -> GpuInfo:
        with self._lock:
            handle = self._handle(uuid)
            index = int(
                self._call(f"read the index of {uuid}", self._lib.nvmlDeviceGetIndex, handle)
            )
            return self._gpu_info(index, uuid, handle)

    # ---------------------------------------------------------------- MIG profiles

    def gpu_instance_profiles(self, uuid: str) -> list[GpuInstanceProfile]:
        with self._lock:
            return [known.profile for known in self._known_gi_profiles(uuid)]

    def compute_instance_profiles(
        self, uuid: str, gi_profile_id: int
    ) -> list[ComputeInstanceProfile]:
        """The CI profiles a GI of `gi_profile_id` offers.

        NVML only answers this through a GPU-instance handle. When a GI of the
        profile exists, the answer is NVML's (every CI enum the GI accepts, with
        its instance and SM counts), and it is cached until the GPU's MIG mode is
        changed. When none exists, nothing is created to ask (that would need
        privileges and could race a real user): the answer is go-nvlib's rule
        for which CI sizes a GI offers (the rule NVIDIA's driver uses to name
        MIG profiles), with `instance_count = G // C` and the SM counts of
        `_derived_ci_profiles`. Names are go-nvlib's either way; the derived
        counts are replaced by NVML's once a GI of the profile exists.
        """
        with self._lock:
            cached = self._ci_profiles.get((uuid, gi_profile_id))
            if cached is not None:
                return list(cached)
            known = self._gi_profile(uuid, gi_profile_id)
            if self._mig_enabled(uuid):
                for gi in self._gpu_instance_handles(uuid, known):
                    gi_id = self._gi_info(uuid, gi).id
                    return list(self._ci_profiles_of_gi(uuid, known, gi_id, gi))
            handle = self._handle(uuid)
            arch = self._call(
                f"read the architecture of {uuid}", self._lib.nvmlDeviceGetArchitecture, handle
            )
            return _derived_ci_profiles(
                known, self._known_gi_profiles(uuid), int(arch), self._memory_total(uuid, handle)
            )

    # ---------------------------------------------------------------- existing instances

    def gpu_instances(self, uuid: str) -> list[GpuInstanceInfo]:
        with self._lock:
            if not self._mig_enabled(uuid):
                return []
            infos = [
                self._gi_info(uuid, gi)
                for known in self._known_gi_profiles(uuid)
                for gi in self._gpu_instance_handles(uuid, known)
            ]
            return sorted(infos, key=lambda info: info.id)

    def compute_instances(self, uuid: str, gpu_instance_id: int) -> list[ComputeInstanceInfo]:
        with self._lock:
            gi = self._gi_by_id(uuid, gpu_instance_id)
            known = self._gi_profile(uuid, self._gi_info(uuid, gi).profile_id)
            ci_profiles = self._ci_profiles_of_gi(uuid, known, gpu_instance_id, gi)
            result = []
            for ci in self._ci_handles(uuid, gpu_instance_id, gi, ci_profiles):
                info = self._ci_info(uuid, gpu_instance_id, ci)
                result.append(
                    ComputeInstanceInfo(
                        id=int(info.id),
                        gpu_instance_id=gpu_instance_id,
                        profile_id=int(info.profileId),
                    )
                )
            return sorted(result, key=lambda info: info.id)

    def mig_devices(self, uuid: str) -> list[MigDeviceInfo]:
        with self._lock:
            if not self._mig_enabled(uuid):
                return []
            parent_minor = self._minor(uuid, self._handle(uuid))
            devices = []
            for known in self._known_gi_profiles(uuid):
                for gi in self._gpu_instance_handles(uuid, known):
                    gi_info = self._gi_info(uuid, gi)
                    ci_profiles = self._ci_profiles_of_gi(uuid, known, gi_info.id, gi)
                    ci_sms = {p.id: p.multiprocessors for p in ci_profiles}
                    for ci in self._ci_handles(uuid, gi_info.id, gi, ci_profiles):
                        ci_info = self._ci_info(uuid, gi_info.id, ci)
                        devices.append(
                            self._mig_device(
                                uuid,
                                parent_minor,
                                known,
                                gi_info=gi_info,
                                ci_info=ci_info,
                                ci_sms=ci_sms,
                            )
                        )
            return sorted(devices, key=lambda d: (d.gpu_instance_id, d.compute_instance_id))

    # ---------------------------------------------------------------- changes

    def set_mig_mode(self, uuid: str, enabled: bool) -> int:
        with self._lock:
            handle = self._handle(uuid)
            mode = _MIG_ENABLE if enabled else _MIG_DISABLE
            word = "enable" if enabled else "disable"
            try:
                status = self._call(
                    f"{word} MIG mode on {uuid}", self._lib.nvmlDeviceSetMigMode, handle, mode
                )
            finally:
                # The change may reset the GPU: handles and MIG-mode-dependent facts are stale.
                self._forget(uuid)
            return int(status)

    def create_gpu_instance(
        self, uuid: str, profile_id: int, placement: Placement
    ) -> GpuInstanceInfo:
        with self._lock:
            lib = self._lib
            handle = self._handle(uuid)
            c_placement = lib.c_nvmlGpuInstancePlacement_t()
            c_placement.start = placement.start
            c_placement.size = placement.size
            gi = self._call(
                f"create GPU instance profile {profile_id} at placement "
                f"{placement.start}:{placement.size} on {uuid}",
                lib.nvmlDeviceCreateGpuInstanceWithPlacement,
                handle,
                profile_id,
                ctypes.byref(c_placement),
            )
            return self._gi_info(uuid, gi)

    def create_compute_instance(
        self, uuid: str, gpu_instance_id: int, ci_profile_id: int
    ) -> MigDeviceInfo:
        with self._lock:
            lib = self._lib
            gi = self._gi_by_id(uuid, gpu_instance_id)
            gi_info = self._gi_info(uuid, gi)
            known = self._gi_profile(uuid, gi_info.profile_id)
            where = f"compute instance profile {ci_profile_id} in GPU instance {gpu_instance_id}"
            # The CI profile id equals its enum; reading the info checks the GI accepts it.
            ci_profile = self._call(
                f"read {where} on {uuid}",
                lib.nvmlGpuInstanceGetComputeInstanceProfileInfo,
                gi,
                ci_profile_id,
                _CI_ENGINE_PROFILE_SHARED,
                _PROFILE_INFO_V1,
            )
            ci = self._call(
                f"create {where} on {uuid}",
                lib.nvmlGpuInstanceCreateComputeInstance,
                gi,
                int(ci_profile.id),
            )
            ci_info = self._ci_info(uuid, gpu_instance_id, ci)
            parent_minor = self._minor(uuid, self._handle(uuid))
            sms = {int(ci_profile.id): int(ci_profile.multiprocessorCount)}
            return self._mig_device(
                uuid, parent_minor, known, gi_info=gi_info, ci_info=ci_info, ci_sms=sms
            )

    def destroy_compute_instance(
        self, uuid: str, gpu_instance_id: int, compute_instance_id: int
    ) -> None:
        with self._lock:
            lib = self._lib
            gi = self._gi_by_id(uuid, gpu_instance_id)
            where = f"compute instance {compute_instance_id} in GPU instance {gpu_instance_id}"
            ci = self._call(
                f"look up {where} on {uuid}",
                lib.nvmlGpuInstanceGetComputeInstanceById,
                gi,
                compute_instance_id,
            )
            self._call(f"destroy {where} on {uuid}", lib.nvmlComputeInstanceDestroy, ci)

    def destroy_gpu_instance(self, uuid: str, gpu_instance_id: int) -> None:
        with self._lock:
            gi = self._gi_by_id(uuid, gpu_instance_id)
            self._call(
                f"destroy GPU instance {gpu_instance_id} on {uuid}",
                self._lib.nvmlGpuInstanceDestroy,
                gi,
            )

    # ---------------------------------------------------------------- health events

    def health_events(self, uuids: list[str]) -> RealHealthEventSet:
        """An NVML event set registered for Xid and double-bit ECC events of `uuids`."""
        with self._lock:
            event_set = self._call("create an NVML event set", self._lib.nvmlEventSetCreate)
            monitored: list[str] = []
            for uuid in uuids:
                try:
                    handle = self._handle(uuid)
                    supported = self._call(
                        f"GPU {uuid}: read its supported event types",
                        self._lib.nvmlDeviceGetSupportedEventTypes,
                        handle,
                    )
                    self._call(
                        f"GPU {uuid}: register for Xid and ECC events",
                        self._lib.nvmlDeviceRegisterEvents,
                        handle,
                        _HEALTH_EVENT_MASK & int(supported),
                        event_set,
                    )
                except NvmlError as exc:
                    log.warning("%s: the health of this GPU is not monitored", exc)
                    continue
                monitored.append(uuid)
            return RealHealthEventSet(self._lib, event_set, monitored)

    def gpu_recovery_action(self, uuid: str) -> int | None:
        """`NVML_FI_DEV_GET_GPU_RECOVERY_ACTION` of a physical GPU (None before R565).

        `nvmlDeviceGetFieldValues` fails only on the call's own return code;
        the field's `nvmlReturn` and `valueType` are checked here, as NVIDIA's
        driver does. NOT_SUPPORTED (an older driver) gives None.
        """
        with self._lock:
            handle = self._handle(uuid)
            values = self._call(
                f"read the recovery action of {uuid}",
                self._lib.nvmlDeviceGetFieldValues,
                handle,
                [codes.FI_DEV_GET_GPU_RECOVERY_ACTION],
            )
            value = values[0]
            code = int(value.nvmlReturn)
            if code == codes.ERROR_NOT_SUPPORTED:
                return None
            if code != codes.SUCCESS:
                raise NvmlError(
                    code,
                    f"read the recovery action of {uuid}: "
                    f"{codes.ERROR_STRINGS.get(code, f'NVML error {code}')}",
                )
            if int(value.valueType) != codes.VALUE_TYPE_UNSIGNED_INT:
                raise NvmlError(
                    codes.ERROR_UNKNOWN,
                    f"read the recovery action of {uuid}: value type {int(value.valueType)}, "
                    "expected unsigned int",
                )
            return int(value.value.uiVal)

    # ---------------------------------------------------------------- per-process use

    def running_compute_processes(self, uuid: str) -> list[ProcessMemory]:
        with self._lock:
            handle = self._device_handle(uuid)
            compute = self._call_versioned(
                f"list the compute processes of {uuid}",
                self._lib.nvmlDeviceGetComputeRunningProcesses,
                handle,
            )
            try:
                mps = self._call_versioned(
                    f"list the MPS client processes of {uuid}",
                    self._lib.nvmlDeviceGetMPSComputeRunningProcesses,
                    handle,
                )
            except NvmlError as exc:
                if exc.code != codes.ERROR_NOT_SUPPORTED:  # pre-Volta GPUs have no MPS list
                    raise
                mps = []
            found: dict[int, ProcessMemory] = {}
            for process in [*compute, *mps]:
                pid = int(process.pid)
                raw = process.usedGpuMemory
                used = None if raw is None else int(raw)
                known = found.get(pid)
                if known is None or known.used_memory_bytes is None:
                    found[pid] = ProcessMemory(pid=pid, used_memory_bytes=used)
            return sorted(found.values(), key=lambda p: p.pid)

    def process_utilization(self, uuid: str, last_seen_us: int) -> list[ProcessUtilization]:
        with self._lock:
            handle = self._device_handle(uuid)
            try:
                samples = self._call(
                    f"read the per-process utilization of {uuid}",
                    self._lib.nvmlDeviceGetProcessUtilization,
                    handle,
                    int(last_seen_us),
                )
            except NvmlError as exc:
                # NOT_FOUND: no sample since last_seen_us. pynvml raises NVMLError(SUCCESS)
                # when NVML answers the sizing call with SUCCESS (no buffer needed).
                if exc.code in (codes.ERROR_NOT_FOUND, codes.SUCCESS):
                    return []
                raise
            return [
                ProcessUtilization(
                    pid=int(sample.pid),
                    timestamp_us=int(sample.timeStamp),
                    sm_percent=int(sample.smUtil),
                    memory_percent=int(sample.memUtil),
                )
                for sample in samples
            ]

    # ---------------------------------------------------------------- calling pynvml

    def _call(self, action: str, fn: Callable[..., Any], *args: Any) -> Any:
        """Call a pynvml function; an NVMLError becomes NvmlError("<action>: <reason>")."""
        if not self._open:
            raise NvmlError(
                codes.ERROR_UNINITIALIZED, f"{action}: NVML is not initialized (it was shut down)"
            )
        try:
            return fn(*args)
        except self._lib.NVMLError as exc:
            self._raise(exc, action)

    def _call_unless(
        self, absent: tuple[int, ...], action: str, fn: Callable[..., Any], *args: Any
    ) -> Any | None:
        """Like `_call`, but None when NVML answers one of the `absent` codes."""
        try:
            return self._call(action, fn, *args)
        except NvmlError as exc:
            if exc.code in absent:
                return None
            raise

    def _call_versioned(self, action: str, fn: Callable[..., Any], *args: Any) -> Any:
        """`_call` for pynvml's unversioned wrappers, which raise NVMLLibraryMismatchError
        (not an NVMLError) when the library lacks the versioned entry point."""
        mismatch = getattr(self._lib, "NVMLLibraryMismatchError", None)
        try:
            return self._call(action, fn, *args)
        except Exception as exc:
            if mismatch is not None and isinstance(exc, mismatch):
                raise NvmlError(
                    codes.ERROR_NOT_SUPPORTED, f"{action}: the NVML library is too old: {exc}"
                ) from exc
            raise

    def _raise(self, exc: Any, action: str) -> NoReturn:
        code = int(getattr(exc, "value", codes.ERROR_UNKNOWN))
        raise NvmlError(code, f"{action}: {error_text(exc, code)}") from exc

    # ---------------------------------------------------------------- handles and caches

    def _handle(self, uuid: str) -> Any:
        handle = self._handles.get(uuid)
        if handle is not None:
            return handle
        if not uuid.startswith("GPU-"):
            raise NvmlError(
                codes.ERROR_INVALID_ARGUMENT, f"GPU {uuid!r}: not a GPU UUID (expected 'GPU-...')"
            )
        handle = self._call(f"look up GPU {uuid}", self._lib.nvmlDeviceGetHandleByUUID, uuid)
        self._handles[uuid] = handle
        return handle

    def _device_handle(self, uuid: str) -> Any:
        """The handle of a GPU (cached) or of a MIG device (`MIG-...`, looked up each time:
        a MIG UUID names one instance's life, and NVML resolves it directly)."""
        if uuid.startswith("MIG-"):
            return self._call(
                f"look up MIG device {uuid}", self._lib.nvmlDeviceGetHandleByUUID, uuid
            )
        return self._handle(uuid)

    def _forget(self, uuid: str) -> None:
        self._handles.pop(uuid, None)
        self._gi_profiles.pop(uuid, None)
        for key in [key for key in self._ci_profiles if key[0] == uuid]:
            del self._ci_profiles[key]

    # ---------------------------------------------------------------- full-GPU facts

    def _gpu_info(self, index: int, uuid: str, handle: Any) -> GpuInfo:
        lib = self._lib
        name = _text(self._call(f"read the name of {uuid}", lib.nvmlDeviceGetName, handle))
        pci = self._call(f"read the PCI info of {uuid}", lib.nvmlDeviceGetPciInfo, handle)
        bus_id = normalize_pci_bus_id(pci.busId)
        arch = self._call(f"read the architecture of {uuid}", lib.nvmlDeviceGetArchitecture, handle)
        major, minor_cc = self._call(
            f"read the CUDA compute capability of {uuid}",
            lib.nvmlDeviceGetCudaComputeCapability,
            handle,
        )
        brand = int(self._call(f"read the brand of {uuid}", lib.nvmlDeviceGetBrand, handle))
        mig_mode = self._mig_mode(uuid, handle)
        pcie_root, numa_node = pci_topology(self._sysfs_root, bus_id)
        return GpuInfo(
            index=index,
            minor=self._minor(uuid, handle),
            uuid=uuid,
            product_name=name,
            brand=codes.BRAND_NAMES.get(brand, "Unknown"),
            architecture_id=int(arch),
            cuda_compute_capability=(int(major), int(minor_cc)),
            memory_bytes=self._memory_total(uuid, handle),
            pci_bus_id=bus_id,
            pci_device_id=int(pci.pciDeviceId),
            mig_capable=mig_mode is not None,
            mig_enabled=mig_mode is not None and mig_mode[0],
            mig_pending=mig_mode is not None and mig_mode[1],
            pcie_root=pcie_root,
            numa_node=numa_node,
            addressing_mode=self._addressing_mode(uuid, handle),
            fabric=self._fabric_info(uuid, handle),
        )

    def fabric_info(self, uuid: str) -> FabricInfo | None:
        with self._lock:
            return self._fabric_info(uuid, self._handle(uuid))

    def _fabric_info(self, uuid: str, handle: Any) -> FabricInfo | None:
        lib = self._lib
        action = f"read the NVLink fabric info of {uuid}"
        attempts = [
            (getattr(lib, "nvmlDeviceGetGpuFabricInfoV", None), struct)
            for struct in ("c_nvmlGpuFabricInfo_v3_t", "c_nvmlGpuFabricInfo_v2_t")
        ]
        attempts.append((getattr(lib, "nvmlDeviceGetGpuFabricInfo", None), "c_nvmlGpuFabricInfo_t"))
        for fn, struct in attempts:
            cls = getattr(lib, struct, None)
            if fn is None or cls is None:
                continue
            info = cls()
            try:
                self._call(action, fn, handle, ctypes.byref(info))
            except NvmlError as exc:
                if exc.code == codes.ERROR_NOT_SUPPORTED:
                    return None  # no NVLink fabric on this GPU
                if exc.code not in (
                    codes.ERROR_ARGUMENT_VERSION_MISMATCH,  # an older struct version next
                    codes.ERROR_FUNCTION_NOT_FOUND,  # the library lacks this entry point
                ):
                    raise
                continue
            return _fabric_record(info)
        if not self._fabric_missing_logged:
            self._fabric_missing_logged = True
            log.info(
                "%s: this driver's NVML has no nvmlDeviceGetGpuFabricInfo(V) (an older driver), "
                "so no GPU publishes an NVLink clique",
                action,
            )
        return None

    def _addressing_mode(self, uuid: str, handle: Any) -> str | None:
        """go-nvlib's name of the GPU's addressing mode ("ATS", "HMM", "None"), or None.

        None where NVML answers NOT_SUPPORTED (not a coherent platform) or the
        library has no such call (logged once); an unknown mode value is logged
        and left out rather than published under a made-up name.
        """
        action = f"read the addressing mode of {uuid}"
        fn = getattr(self._lib, "nvmlDeviceGetAddressingMode", None)
        try:
            if fn is None:
                raise NvmlError(codes.ERROR_FUNCTION_NOT_FOUND, f"{action}: pynvml has no call")
            mode = self._call_unless((codes.ERROR_NOT_SUPPORTED,), action, fn, handle)
        except NvmlError as exc:
            if exc.code != codes.ERROR_FUNCTION_NOT_FOUND:
                raise
            if not self._addressing_mode_missing_logged:
                self._addressing_mode_missing_logged = True
                log.info(
                    "%s: this driver's NVML has no nvmlDeviceGetAddressingMode (an older driver), "
                    "so no GPU publishes addressingMode",
                    exc,
                )
            return None
        if mode is None:
            return None
        name = codes.ADDRESSING_MODE_NAMES.get(int(mode))
        if name is None:
            log.warning("%s: unknown mode %d, addressingMode left out", action, int(mode))
        return name

    def _minor(self, uuid: str, handle: Any) -> int:
        return int(
            self._call(
                f"read the minor number of {uuid}", self._lib.nvmlDeviceGetMinorNumber, handle
            )
        )

    def _memory_total(self, uuid: str, handle: Any | None = None) -> int:
        if handle is None:
            handle = self._handle(uuid)
        memory = self._call(
            f"read the memory info of {uuid}", self._lib.nvmlDeviceGetMemoryInfo, handle
        )
        return int(memory.total)

    def _mig_mode(self, uuid: str, handle: Any) -> tuple[bool, bool] | None:
        """(current, pending), or None when the GPU is not MIG-capable (NOT_SUPPORTED)."""
        mode = self._call_unless(
            (codes.ERROR_NOT_SUPPORTED,),
            f"read the MIG mode of {uuid}",
            self._lib.nvmlDeviceGetMigMode,
            handle,
        )
        if mode is None:
            return None
        current, pending = mode
        return bool(int(current)), bool(int(pending))

    def _mig_enabled(self, uuid: str) -> bool:
        mode = self._mig_mode(uuid, self._handle(uuid))
        return mode is not None and mode[0]

    # ---------------------------------------------------------------- GI profiles

    def _known_gi_profiles(self, uuid: str) -> tuple[_KnownGiProfile, ...]:
        cached = self._gi_profiles.get(uuid)
        if cached is not None:
            return cached
        lib = self._lib
        handle = self._handle(uuid)
        mig_mode = self._mig_mode(uuid, handle)
        if mig_mode is None:
            self._gi_profiles[uuid] = ()
            return ()
        total = self._memory_total(uuid, handle)
        found = []
        for enum in range(codes.GPU_INSTANCE_PROFILE_COUNT):
            info = self._call_unless(
                _ABSENT_PROFILE,
                f"read GPU instance profile enum {enum} of {uuid}",
                lib.nvmlDeviceGetGpuInstanceProfileInfo,
                handle,
                enum,
                _PROFILE_INFO_V1,
            )
            if info is None:
                continue
            profile_id = int(info.id)
            memory_mib = int(info.memorySizeMB)
            profile = GpuInstanceProfile(
                id=profile_id,
                name=mig_profile_name(enum, memory_mib, total),
                slice_count=codes.GI_ENUM_SLICES[enum],
                instance_count=int(info.instanceCount),
                memory_mib=memory_mib,
                multiprocessors=int(info.multiprocessorCount),
                copy_engines=int(info.copyEngineCount),
                decoders=int(info.decoderCount),
                encoders=int(info.encoderCount),
                jpeg_engines=int(info.jpegCount),
                ofa_engines=int(info.ofaCount),
                placements=self._possible_placements(uuid, handle, profile_id, mig_mode[0]),
            )
            found.append(_KnownGiProfile(enum=enum, profile=profile))
        result = tuple(found)
        self._gi_profiles[uuid] = result
        return result

    def _gi_profile(self, uuid: str, profile_id: int) -> _KnownGiProfile:
        for known in self._known_gi_profiles(uuid):
            if known.profile.id == profile_id:
                return known
        raise NvmlError(
            codes.ERROR_INVALID_ARGUMENT,
            f"GPU {uuid}: GPU instance profile {profile_id} is not supported by this GPU",
        )

    def _possible_placements(
        self, uuid: str, handle: Any, profile_id: int, mig_enabled: bool
    ) -> tuple[Placement, ...]:
        """Every placement of a profile, free or not (two calls: count, then fill).

        Should a driver refuse the query while MIG is disabled, the profile is
        reported without placements rather than failing discovery of the node.
        """
        lib = self._lib
        action = f"read the possible placements of GPU instance profile {profile_id} on {uuid}"
        count = ctypes.c_uint(0)
        absent = () if mig_enabled else (codes.ERROR_NOT_SUPPORTED,)
        done = self._call_unless(
            absent,
            action,
            lib.nvmlDeviceGetGpuInstancePossiblePlacements,
            handle,
            profile_id,
            None,
            ctypes.byref(count),
        )
        if done is None or count.value == 0:
            return ()
        array = (lib.c_nvmlGpuInstancePlacement_t * count.value)()
        self._call(
            action,
            lib.nvmlDeviceGetGpuInstancePossiblePlacements,
            handle,
            profile_id,
            array,
            ctypes.byref(count),
        )
        return tuple(Placement(start=int(p.start), size=int(p.size)) for p in array[: count.value])

    # ---------------------------------------------------------------- GI and CI handles

    def _gpu_instance_handles(self, uuid: str, known: _KnownGiProfile) -> list[Any]:
        lib = self._lib
        size = max(known.profile.instance_count, 1)
        array = (lib.c_nvmlGpuInstance_t * size)()
        count = ctypes.c_uint(0)
        self._call(
            f"list GPU instances of profile {known.profile.id} on {uuid}",
            lib.nvmlDeviceGetGpuInstances,
            self._handle(uuid),
            known.profile.id,
            array,
            ctypes.byref(count),
        )
        return list(array[: count.value])

    def _gi_by_id(self, uuid: str, gpu_instance_id: int) -> Any:
        return self._call(
            f"look up GPU instance {gpu_instance_id} on {uuid}",
            self._lib.nvmlDeviceGetGpuInstanceById,
            self._handle(uuid),
            gpu_instance_id,
        )

    def _gi_info(self, uuid: str, gi: Any) -> GpuInstanceInfo:
        info = self._call(f"read GPU instance info on {uuid}", self._lib.nvmlGpuInstanceGetInfo, gi)
        return GpuInstanceInfo(
            id=int(info.id),
            profile_id=int(info.profileId),
            placement=Placement(start=int(info.placement.start), size=int(info.placement.size)),
        )

    def _ci_profile_infos(self, uuid: str, gi_id: int, gi: Any) -> list[Any]:
        """NVML's CI profile infos for every CI enum the GI accepts."""
        infos = []
        for enum in range(codes.COMPUTE_INSTANCE_PROFILE_COUNT):
            info = self._call_unless(
                _ABSENT_PROFILE,
                f"read compute instance profile enum {enum} of GPU instance {gi_id} on {uuid}",
                self._lib.nvmlGpuInstanceGetComputeInstanceProfileInfo,
                gi,
                enum,
                _CI_ENGINE_PROFILE_SHARED,
                _PROFILE_INFO_V1,
            )
            if info is not None:
                infos.append(info)
        return infos

    def _ci_profiles_of_gi(
        self, uuid: str, known: _KnownGiProfile, gi_id: int, gi: Any
    ) -> tuple[ComputeInstanceProfile, ...]:
        """NVML's CI profiles of an existing GI, cached per GI profile until MIG mode changes."""
        cached = self._ci_profiles.get((uuid, known.profile.id))
        if cached is not None:
            return cached
        total = self._memory_total(uuid)
        profiles = tuple(
            ComputeInstanceProfile(
                id=int(info.id),
                name=mig_profile_name(
                    known.enum, known.profile.memory_mib, total, ci_slices=int(info.sliceCount)
                ),
                slice_count=int(info.sliceCount),
                instance_count=int(info.instanceCount),
                multiprocessors=int(info.multiprocessorCount),
            )
            for info in self._ci_profile_infos(uuid, gi_id, gi)
        )
        self._ci_profiles[(uuid, known.profile.id)] = profiles
        return profiles

    def _ci_handles(
        self, uuid: str, gi_id: int, gi: Any, profiles: tuple[ComputeInstanceProfile, ...]
    ) -> list[Any]:
        """Handles of every CI in the GI, listed per CI profile the GI offers."""
        lib = self._lib
        handles: list[Any] = []
        for profile in profiles:
            array = (lib.c_nvmlComputeInstance_t * max(profile.instance_count, 1))()
            count = ctypes.c_uint(0)
            self._call(
                f"list compute instances of profile {profile.id} in GPU instance {gi_id} on {uuid}",
                lib.nvmlGpuInstanceGetComputeInstances,
                gi,
                profile.id,
                array,
                ctypes.byref(count),
            )
            handles.extend(array[: count.value])
        return handles

    def _ci_info(self, uuid: str, gi_id: int, ci: Any) -> Any:
        return self._call(
            f"read compute instance info in GPU instance {gi_id} on {uuid}",
            self._lib.nvmlComputeInstanceGetInfo,
            ci,
        )

    def _mig_device(
        self,
        uuid: str,
        parent_minor: int,
        known: _KnownGiProfile,
        *,
        gi_info: GpuInstanceInfo,
        ci_info: Any,
        ci_sms: dict[int, int],
    ) -> MigDeviceInfo:
        lib = self._lib
        where = f"MIG device GI {gi_info.id} CI {int(ci_info.id)} of {uuid}"
        mig_handle = ci_info.device
        mig_uuid = _text(self._call(f"read the UUID of {where}", lib.nvmlDeviceGetUUID, mig_handle))
        memory = self._call(
            f"read the memory info of {where}", lib.nvmlDeviceGetMemoryInfo, mig_handle
        )
        ci_profile_id = int(ci_info.profileId)
        return MigDeviceInfo(
            parent_uuid=uuid,
            parent_minor=parent_minor,
            uuid=mig_uuid,
            gpu_instance_id=gi_info.id,
            compute_instance_id=int(ci_info.id),
            gi_profile=known.profile,
            ci_profile_id=ci_profile_id,
            placement=gi_info.placement,
            multiprocessors=ci_sms.get(ci_profile_id, known.profile.multiprocessors),
            memory_bytes=int(memory.total),
        )


class RealHealthEventSet:
    """`HealthEventSet` over one NVML event set (`nvmlEventSetWait_v2`).

    NVML sends no event when a GPU recovers: the health monitor polls
    `RealNvml.gpu_recovery_action` for that.
    """

    def __init__(self, lib: ModuleType, event_set: Any, uuids: list[str]) -> None:
        self._lib = lib
        self._set = event_set
        self.uuids = tuple(uuids)

    def wait(self, timeout: float) -> list[HealthEvent]:
        lib = self._lib
        try:
            data = lib.nvmlEventSetWait_v2(self._set, max(int(timeout * 1000), 0))
            uuid = _text(lib.nvmlDeviceGetUUID(data.device))
        except lib.NVMLError as exc:
            code = int(getattr(exc, "value", codes.ERROR_UNKNOWN))
            if code == codes.ERROR_TIMEOUT:
                return []
            if code == codes.ERROR_GPU_IS_LOST:
                # NVML does not say which GPU fell off the bus: all of them are suspect.
                return [HealthEvent(gpu_uuid=u, kind=HealthEventKind.GPU_LOST) for u in self.uuids]
            raise NvmlError(code, f"wait for NVML events: {error_text(exc, code)}") from exc
        event_type = int(data.eventType)
        gi, ci = int(data.gpuInstanceId), int(data.computeInstanceId)
        where = {
            "gpu_instance_id": None if gi == NO_INSTANCE else gi,
            "compute_instance_id": None if ci == NO_INSTANCE else ci,
        }
        if event_type & _EVENT_XID:
            return [HealthEvent(uuid, HealthEventKind.XID, xid=int(data.eventData), **where)]
        if event_type & _EVENT_DOUBLE_BIT_ECC:
            return [HealthEvent(uuid, HealthEventKind.DOUBLE_BIT_ECC, **where)]
        return []

    def close(self) -> None:
        try:
            self._lib.nvmlEventSetFree(self._set)
        except self._lib.NVMLError as exc:
            log.warning("free the NVML event set: %s", exc)


def _derived_ci_profiles(
    known: _KnownGiProfile,
    all_known: tuple[_KnownGiProfile, ...],
    architecture_id: int,
    total_bytes: int,
) -> list[ComputeInstanceProfile]:
    """The CI profiles of a GI profile when no GI exists to ask NVML (see the caller).

    Sizes follow go-nvlib's rule; a CI of C slices gets C times the SMs of the
    1-slice GI profile (each compute slice has that many), and the CI filling
    the GI gets the GI's SMs. On Hopper and newer the CI filling the
    2-memory-slice 1g GI (1_SLICE_REV2) is CI profile 7 (1_SLICE_REV1), as
    `nvidia-smi mig -cgi 15 -C` reports; CI profile 0 there is a plain 1-slice CI.
    """
    gi = known.profile
    g = gi.slice_count
    base_sms = next(
        (k.profile.multiprocessors for k in all_known if k.enum == _GI_1_SLICE),
        gi.multiprocessors // g,
    )
    rev1_fills = architecture_id >= codes.ARCH_HOPPER and known.enum == _GI_1_SLICE_REV2
    sizes = [(enum, codes.CI_ENUM_SLICES[enum]) for enum in _PLAIN_CI_ENUMS]
    if rev1_fills:
        sizes.append((_CI_1_SLICE_REV1, 1))
    result = []
    for ci_enum, c in sizes:
        if not ci_profile_offered(g, c):
            continue
        fills = c == g and (ci_enum == _CI_1_SLICE_REV1 or not rev1_fills)
        result.append(
            ComputeInstanceProfile(
                id=ci_enum,
                name=mig_profile_name(known.enum, gi.memory_mib, total_bytes, ci_slices=c),
                slice_count=c,
                instance_count=g // c,
                multiprocessors=gi.multiprocessors if fills else c * base_sms,
            )
        )
    return result


def _fabric_record(info: Any) -> FabricInfo:
    """A filled `c_nvmlGpuFabricInfo_t`/`_v2_t`/`_v3_t` as a `FabricInfo`."""
    fields = {name for name, *_ in type(info)._fields_}
    return FabricInfo(
        cluster_uuid=cluster_uuid_text(bytes(info.clusterUuid)),
        clique_id=int(info.cliqueId),
        state=int(info.state),
        status=int(info.status),
        health_mask=int(info.healthMask) if "healthMask" in fields else None,
        health_summary=int(info.healthSummary) if "healthSummary" in fields else None,
    )


def _text(value: bytes | str) -> str:
    """pynvml string getters return str; tolerate bytes from older releases."""
    return value.decode() if isinstance(value, bytes) else str(value)
