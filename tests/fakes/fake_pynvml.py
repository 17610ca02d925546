"""A fake `pynvml` module backed by the simulated hardware, with pynvml's real signatures, structs
and error classes.
"""

from __future__ import annotations

import ctypes
import functools
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType, ModuleType
from typing import Any, TypeVar, cast

import pynvml as _real_pynvml

from dra_driver.errors import NvmlError
from dra_driver.hardware.nvml import codes as nvml_codes
from dra_driver.hardware.nvml.fabric import FabricInfo
from dra_driver.hardware.nvml.interface import (
    Placement,
)
from dra_driver.hardware.nvml.pci import normalize_pci_bus_id
from dra_driver.hardware.simulated.hardware import SimHardware
from dra_driver.hardware.simulated.models import GiProfileSpec
from dra_driver.hardware.simulated.views import ComputeInstanceView, GpuFacts, GpuInstanceView

# nvml.h NVML_ERROR_FUNCTION_NOT_FOUND: pynvml raises it for an unknown `version` argument and
# for an entry point the loaded library lacks (an older driver).
_NVML_ERROR_FUNCTION_NOT_FOUND = nvml_codes.ERROR_FUNCTION_NOT_FOUND
_FAKE_NVML_ERROR_STRINGS: Mapping[int, str] = MappingProxyType(dict(nvml_codes.ERROR_STRINGS))
_NVML_INIT_FLAGS = 0x1 | 0x2  # NVML_INIT_FLAG_NO_GPUS | NVML_INIT_FLAG_NO_ATTACH
# ctypes types and constants the fake re-exports from the real module
_PYNVML_STRUCTS = (
    "c_nvmlDevice_t",
    "c_nvmlGpuInstance_t",
    "c_nvmlComputeInstance_t",
    "c_nvmlGpuInstancePlacement_t",
    "c_nvmlComputeInstancePlacement_t",
    "c_nvmlGpuInstanceProfileInfo_t",
    "c_nvmlGpuInstanceProfileInfo_v2_t",
    "c_nvmlComputeInstanceProfileInfo_t",
    "c_nvmlComputeInstanceProfileInfo_v2_t",
    "c_nvmlGpuInstanceInfo_t",
    "c_nvmlComputeInstanceInfo_t",
    "c_nvmlMemory_t",
    "c_nvmlMemory_v2_t",
    "nvmlPciInfo_t",
    "c_nvmlGpuFabricInfo_t",
    "c_nvmlGpuFabricInfo_v2_t",
    "c_nvmlGpuFabricInfo_v3_t",
)


class FakeNVMLError(Exception):
    """The fake module's `NVMLError`: `.value` is the NVML return code, as in pynvml.

    Like pynvml's generated subclasses, `NVMLError_InUse()` needs no argument;
    the base class takes the code (`NVMLError(23)`).
    """

    fixed_value: int | None = None

    def __init__(self, value: int | None = None) -> None:
        code = self.fixed_value if self.fixed_value is not None else value
        if code is None:
            raise TypeError("NVMLError needs an NVML return code")
        super().__init__(code)
        self.value: int = code

    def __str__(self) -> str:
        return _FAKE_NVML_ERROR_STRINGS.get(self.value, f"NVML Error with code {self.value}")

    def __eq__(self, other: object) -> bool:
        return isinstance(other, FakeNVMLError) and self.value == other.value

    def __hash__(self) -> int:
        return hash(self.value)


def _nvml_error_class_name(constant: str) -> str:
    """pynvml's class name for `NVML_ERROR_<constant>`: "IN_USE" -> "NVMLError_InUse"."""
    return "NVMLError_" + "".join(part.capitalize() for part in constant.lower().split("_"))


def _fake_nvml_error_classes() -> dict[int, type[FakeNVMLError]]:
    constants: dict[str, int] = {
        name.removeprefix("ERROR_"): value
        for name, value in vars(nvml_codes).items()
        if name.startswith("ERROR_") and isinstance(value, int)
    }
    classes: dict[int, type[FakeNVMLError]] = {}
    for constant, value in constants.items():
        cls = type(_nvml_error_class_name(constant), (FakeNVMLError,), {"fixed_value": value})
        cls.__module__ = "pynvml"
        classes[value] = cls
    return classes


FAKE_NVML_ERRORS: Mapping[int, type[FakeNVMLError]] = MappingProxyType(_fake_nvml_error_classes())


def fake_nvml_error(code: int) -> FakeNVMLError:
    """The fake module's exception for an NVML return code (its NVMLError_* subclass)."""
    cls = FAKE_NVML_ERRORS.get(code)
    return cls() if cls is not None else FakeNVMLError(code)


@dataclass
class _FakeEventSet:
    """An NVML event set: registered event masks per GPU index, and the last event seen."""

    seen: int
    masks: dict[int, int] = field(default_factory=dict)


@dataclass(frozen=True)
class _FakeHandle:
    """What one opaque pynvml handle stands for."""

    kind: str  # "gpu", "mig", "gi" or "ci"
    gpu: int  # NVML index of the (parent) GPU
    gi: int = -1
    ci: int = -1
    mig_uuid: str = ""  # MIG handles: a recreated CI is a new device


_AnyFn = TypeVar("_AnyFn", bound=Callable[..., Any])
_NO_INIT_NEEDED = frozenset({"nvmlInit", "nvmlInitWithFlags", "nvmlErrorString"})


def _pynvml_call(fn: _AnyFn) -> _AnyFn:
    """Count the call, refuse it before init, inject failures, and turn the
    simulator's NvmlError into the fake's NVMLError_* class."""
    name = fn.__name__

    @functools.wraps(fn)
    def call(self: FakePynvml, *args: Any, **kwargs: Any) -> Any:
        self.calls[name] += 1
        if name not in _NO_INIT_NEEDED and not self.initialized:
            raise fake_nvml_error(nvml_codes.ERROR_UNINITIALIZED)
        if name in self.missing_functions:  # pynvml's _nvmlGetFunctionPointer on an old driver
            raise fake_nvml_error(nvml_codes.ERROR_FUNCTION_NOT_FOUND)
        self._fail_if_injected(name)
        try:
            return fn(self, *args, **kwargs)
        except NvmlError as exc:
            raise fake_nvml_error(exc.code) from exc

    return cast(_AnyFn, call)


def _deref(ref: Any) -> Any:
    """The object behind `byref(x)` or `pointer(x)`, or `ref` itself."""
    if type(ref).__name__ == "CArgObject":
        return ref._obj
    if isinstance(ref, ctypes._Pointer):
        return ref.contents
    return ref


def _out_uint(ref: Any, function: str) -> ctypes.c_uint:
    target = _deref(ref)
    if not isinstance(target, ctypes.c_uint):
        raise NvmlError(
            nvml_codes.ERROR_INVALID_ARGUMENT, f"{function}: countRef must be byref(c_uint())"
        )
    return target


def _text_arg(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class FakePynvml(ModuleType):
    """A `pynvml` look-alike over `SimHardware` (see the section comment).

    Test hooks: `calls` counts calls per function name; `fail_next(name, code)`
    makes the next call(s) of a function raise that NVMLError (a GPU falling
    off the bus, a missing privilege); `unsupported_fields` are field ids
    `nvmlDeviceGetFieldValues` answers NOT_SUPPORTED for (a driver before
    R565); `missing_functions` are entry points the "driver" lacks: calling
    one raises NVMLError_FunctionNotFound, as pynvml does when the loaded
    library has no such symbol. `initialized` is true between init and the
    matching shutdown (calls are ref-counted, like pynvml's).
    """

    def __init__(self, hw: SimHardware) -> None:
        super().__init__(
            "pynvml", "Fake pynvml backed by dra_driver.hardware.simulated.hardware.SimHardware"
        )
        self.hw = hw
        self.calls: Counter[str] = Counter()
        self._failures: dict[str, list[int]] = {}
        self._refcount = 0
        self._lock = threading.Lock()
        self.unsupported_fields: set[int] = set()  # field ids answered NOT_SUPPORTED (old drivers)
        self.missing_functions: set[str] = set()  # entry points an older driver lacks
        # GetGpuFabricInfoV struct versions the "driver" knows (an older one: v2 only)
        self.fabric_versions: set[int] = {
            _real_pynvml.nvmlGpuFabricInfo_v2,
            _real_pynvml.nvmlGpuFabricInfo_v3,
        }
        self._tokens: dict[_FakeHandle, int] = {}
        self._handles: dict[int, _FakeHandle] = {}
        for name in _PYNVML_STRUCTS:
            setattr(self, name, getattr(_real_pynvml, name))
        for name in dir(_real_pynvml):
            if name.startswith("NVML_") and isinstance(getattr(_real_pynvml, name), int):
                setattr(self, name, getattr(_real_pynvml, name))
        self.NVMLError = FakeNVMLError
        self.nvmlGpuFabricInfo_v2 = _real_pynvml.nvmlGpuFabricInfo_v2  # struct version tags
        self.nvmlGpuFabricInfo_v3 = _real_pynvml.nvmlGpuFabricInfo_v3
        for cls in FAKE_NVML_ERRORS.values():
            setattr(self, cls.__name__, cls)
        # pynvml's aliases for the versioned entry points
        self.nvmlDeviceGetGpuInstanceProfileInfoV = self.nvmlDeviceGetGpuInstanceProfileInfo
        self.nvmlDeviceGetGpuInstanceProfileInfoByIdV = self.nvmlDeviceGetGpuInstanceProfileInfoById
        self.nvmlGpuInstanceGetComputeInstanceProfileInfoV = (
            self.nvmlGpuInstanceGetComputeInstanceProfileInfo
        )

    def __dir__(self) -> list[str]:
        """Functions too, as `dir(pynvml)` lists them."""
        return sorted(set(super().__dir__()) | {n for n in dir(type(self)) if n.startswith("nvml")})

    # -- test hooks ----------------------------------------------------------

    @property
    def initialized(self) -> bool:
        return self._refcount > 0

    def fail_next(self, function: str, code: int, times: int = 1) -> None:
        """Make the next `times` calls of `function` raise the NVMLError for `code`."""
        if not callable(getattr(self, function, None)):
            raise AttributeError(f"fake pynvml has no function {function}")
        self._failures.setdefault(function, []).extend([code] * times)

    def _fail_if_injected(self, function: str) -> None:
        pending = self._failures.get(function)
        if pending:
            raise fake_nvml_error(pending.pop(0))

    def nvmlExceptionClass(self, nvmlErrorCode: int) -> type[FakeNVMLError]:
        if nvmlErrorCode not in FAKE_NVML_ERRORS:
            raise ValueError(f"nvmlErrorCode {nvmlErrorCode} is not valid")
        return FAKE_NVML_ERRORS[nvmlErrorCode]

    # -- handles -------------------------------------------------------------

    def _pointer(self, handle: _FakeHandle) -> Any:
        """An opaque pynvml handle of the right ctypes type; its address names `handle`."""
        with self._lock:
            token = self._tokens.get(handle)
            if token is None:
                token = 0x1000 + 0x10 * len(self._tokens)
                self._tokens[handle] = token
                self._handles[token] = handle
        ctype = {
            "gpu": _real_pynvml.c_nvmlDevice_t,
            "mig": _real_pynvml.c_nvmlDevice_t,
            "gi": _real_pynvml.c_nvmlGpuInstance_t,
            "ci": _real_pynvml.c_nvmlComputeInstance_t,
        }[handle.kind]
        return ctypes.cast(ctypes.c_void_p(token), ctype)

    def _resolve(self, pointer: Any, *kinds: str) -> _FakeHandle:
        handle = None
        if isinstance(pointer, ctypes._Pointer):
            address = ctypes.cast(pointer, ctypes.c_void_p).value
            handle = self._handles.get(address or 0)
        if handle is None or handle.kind not in kinds:
            raise NvmlError(
                nvml_codes.ERROR_INVALID_ARGUMENT,
                f"not a {' or '.join(kinds)} handle of this fake NVML: {pointer!r}",
            )
        return handle

    def _gpu(self, device: Any) -> GpuFacts:
        return self.hw.gpu(self._resolve(device, "gpu").gpu)

    def _mig(self, handle: _FakeHandle) -> ComputeInstanceView:
        try:
            return self.hw.find_mig_device(handle.mig_uuid)
        except NvmlError as exc:  # its compute instance was destroyed: the handle is stale
            raise NvmlError(nvml_codes.ERROR_INVALID_ARGUMENT, str(exc)) from exc

    def _device_pointer(self, index: int) -> Any:
        return self._pointer(_FakeHandle("gpu", index))

    def _gi_pointer(self, view: GpuInstanceView) -> Any:
        return self._pointer(_FakeHandle("gi", view.gpu_index, view.id))

    def _ci_pointer(self, view: ComputeInstanceView) -> Any:
        return self._pointer(_FakeHandle("ci", view.gpu_index, view.gpu_instance_id, view.id))

    def _mig_pointer(self, view: ComputeInstanceView) -> Any:
        handle = _FakeHandle("mig", view.gpu_index, view.gpu_instance_id, view.id, view.uuid)
        return self._pointer(handle)

    def _fill_array(self, function: str, ref: Any, count_ref: Any, items: list[Any]) -> int:
        """Fill a caller-allocated ctypes array (or only the count when `ref` is None)."""
        count = _out_uint(count_ref, function)
        if ref is None:
            count.value = len(items)
            return nvml_codes.SUCCESS
        target = _deref(ref)
        if isinstance(target, ctypes.Array) and len(target) < len(items):
            count.value = len(items)
            raise NvmlError(
                nvml_codes.ERROR_INSUFFICIENT_SIZE,
                f"{function}: array of {len(target)} for {len(items)} entries",
            )
        for i, item in enumerate(items):
            target[i] = item
        count.value = len(items)
        return nvml_codes.SUCCESS

    # -- events (the injected health events of the simulated hardware) ----------

    @_pynvml_call
    def nvmlEventSetCreate(self) -> Any:
        _, seen = self.hw.health_events_after(0)
        return _FakeEventSet(seen=seen)

    @_pynvml_call
    def nvmlDeviceGetSupportedEventTypes(self, handle: Any) -> int:
        self._gpu(handle)
        return 0x1 | 0x2 | 0x8  # single-bit ECC, double-bit ECC, Xid

    @_pynvml_call
    def nvmlDeviceRegisterEvents(self, handle: Any, eventTypes: int, eventSet: Any) -> None:
        gpu = self._resolve(handle, "gpu").gpu
        eventSet.masks[gpu] = eventSet.masks.get(gpu, 0) | int(eventTypes)

    @_pynvml_call
    def nvmlEventSetWait_v2(self, eventSet: Any, timeoutms: int) -> Any:
        """The next registered event; Timeout when none comes, GpuIsLost for a lost GPU.

        NVML has no recovery event: injected recoveries are not delivered.
        """
        bits = {"xid": 0x8, "double-bit-ecc": 0x2, "gpu-lost": -1}
        deadline = time.monotonic() + timeoutms / 1000
        while True:
            found, _ = self.hw.health_events_after(eventSet.seen)
            for _uuid, event in found:
                eventSet.seen = event.seq
                mask = eventSet.masks.get(event.gpu_index, 0)
                bit = bits.get(event.kind, 0)
                if bit == -1 and mask:
                    raise NvmlError(nvml_codes.ERROR_GPU_IS_LOST, "GPU is lost")
                if bit > 0 and mask & bit:
                    data = _real_pynvml.c_nvmlEventData_t()
                    data.device = self._device_pointer(event.gpu_index)
                    data.eventType = bit
                    data.eventData = event.xid if event.xid is not None else 0
                    data.gpuInstanceId = data.computeInstanceId = 0xFFFFFFFF
                    return data
            if time.monotonic() >= deadline:
                raise NvmlError(nvml_codes.ERROR_TIMEOUT, "no event before the timeout")
            time.sleep(0.02)

    @_pynvml_call
    def nvmlEventSetFree(self, eventSet: Any) -> None:
        eventSet.masks.clear()

    # -- library and system --------------------------------------------------

    @_pynvml_call
    def nvmlInitWithFlags(self, flags: int) -> None:
        if flags & ~_NVML_INIT_FLAGS:
            raise NvmlError(nvml_codes.ERROR_INVALID_ARGUMENT, f"unknown init flags {flags:#x}")
        with self._lock:
            self._refcount += 1

    @_pynvml_call
    def nvmlInit(self) -> None:
        self.nvmlInitWithFlags(0)

    @_pynvml_call
    def nvmlShutdown(self) -> None:
        with self._lock:
            self._refcount -= 1

    @_pynvml_call
    def nvmlErrorString(self, result: int) -> str:
        return _FAKE_NVML_ERROR_STRINGS.get(result, "Unknown Error")

    @_pynvml_call
    def nvmlSystemGetDriverVersion(self) -> str:
        return self.hw.driver_version()

    @_pynvml_call
    def nvmlSystemGetCudaDriverVersion(self) -> int:
        return self.hw.cuda_driver_version()

    @_pynvml_call
    def nvmlSystemGetCudaDriverVersion_v2(self) -> int:
        return self.hw.cuda_driver_version()

    @_pynvml_call
    def nvmlSystemGetNVMLVersion(self) -> str:
        return f"{self.hw.cuda_driver_version() // 1000}.{self.hw.driver_version()}"

    # -- device handles ------------------------------------------------------

    @_pynvml_call
    def nvmlDeviceGetCount(self) -> int:
        return self.hw.gpu_count()

    @_pynvml_call
    def nvmlDeviceGetHandleByIndex(self, index: int) -> Any:
        return self._device_pointer(self.hw.gpu(int(index)).index)

    @_pynvml_call
    def nvmlDeviceGetHandleByUUID(self, uuid: str | bytes) -> Any:
        text = _text_arg(uuid)
        if text.startswith("MIG-"):
            return self._mig_pointer(self.hw.find_mig_device(text))
        return self._device_pointer(self.hw.index_of(text))

    @_pynvml_call
    def nvmlDeviceGetHandleByPciBusId(self, pciBusId: str | bytes) -> Any:
        wanted = normalize_pci_bus_id(_text_arg(pciBusId))
        for facts in self.hw.gpus():
            if facts.pci_bus_id == wanted:
                return self._device_pointer(facts.index)
        raise NvmlError(nvml_codes.ERROR_NOT_FOUND, f"no GPU at PCI bus id {wanted}")

    @_pynvml_call
    def nvmlDeviceGetIndex(self, handle: Any) -> int:
        return self._gpu(handle).index

    # -- device facts --------------------------------------------------------

    @_pynvml_call
    def nvmlDeviceGetName(self, handle: Any) -> str:
        h = self._resolve(handle, "gpu", "mig")
        product = self.hw.gpu(h.gpu).model.product_name
        if h.kind == "mig":
            return f"{product} MIG {self._mig(h).profile.name}"
        return product

    @_pynvml_call
    def nvmlDeviceGetUUID(self, handle: Any) -> str:
        h = self._resolve(handle, "gpu", "mig")
        return self._mig(h).uuid if h.kind == "mig" else self.hw.gpu(h.gpu).uuid

    @_pynvml_call
    def nvmlDeviceGetMinorNumber(self, handle: Any) -> int:
        return self._gpu(handle).minor

    @_pynvml_call
    def nvmlDeviceGetMemoryInfo(self, handle: Any, version: int | None = None) -> Any:
        h = self._resolve(handle, "gpu", "mig")
        if h.kind == "mig":
            total = self._mig(h).gi_profile.memory_mib * 2**20
        else:
            total = self.hw.gpu(h.gpu).model.memory_bytes
        if not version:
            return _real_pynvml.c_nvmlMemory_t(total=total, free=total, used=0)
        memory = _real_pynvml.c_nvmlMemory_v2_t(total=total, reserved=0, free=total, used=0)
        memory.version = version
        return memory

    @_pynvml_call
    def nvmlDeviceGetPciInfo_v3(self, handle: Any) -> Any:
        facts = self._gpu(handle)
        domain_text, bus_text, rest = facts.pci_bus_id.split(":")
        device_text, function_text = rest.split(".")
        domain, bus = int(domain_text, 16), int(bus_text, 16)
        device, function = int(device_text, 16), int(function_text, 16)
        info = _real_pynvml.nvmlPciInfo_t()
        info.busIdLegacy = f"{domain:04X}:{bus:02X}:{device:02X}.{function:X}".encode()
        info.domain, info.bus, info.device = domain, bus, device
        info.pciDeviceId = facts.model.pci_device_id
        info.pciSubSystemId = 0  # not modelled by the simulator
        info.busId = f"{domain:08X}:{bus:02X}:{device:02X}.{function:X}".encode()
        return info

    @_pynvml_call
    def nvmlDeviceGetPciInfo(self, handle: Any) -> Any:
        return self.nvmlDeviceGetPciInfo_v3(handle)

    @_pynvml_call
    def nvmlDeviceGetArchitecture(self, device: Any) -> int:
        return self._gpu(device).model.architecture_id

    @_pynvml_call
    def nvmlDeviceGetCudaComputeCapability(self, handle: Any) -> tuple[int, int]:
        major, minor = self._gpu(handle).model.compute_capability
        return (major, minor)

    @_pynvml_call
    def nvmlDeviceGetBrand(self, handle: Any) -> int:
        return self._gpu(handle).model.brand_id

    # -- NVLink fabric (NVIDIA's mock NVML: bridge/fabric.go) ----------------

    def _fabric(self, device: Any, ref: Any) -> tuple[FabricInfo, Any]:
        facts = self._gpu(device)
        if ref is None:
            raise NvmlError(nvml_codes.ERROR_INVALID_ARGUMENT, "gpuFabricInfo is NULL")
        if facts.fabric is None:
            raise NvmlError(nvml_codes.ERROR_NOT_SUPPORTED, f"GPU {facts.index}: no NVLink fabric")
        return facts.fabric, _deref(ref)

    @staticmethod
    def _fill_fabric(target: Any, info: FabricInfo) -> None:
        target.clusterUuid[:] = list(uuid.UUID(info.cluster_uuid).bytes)
        target.status = info.status
        target.cliqueId = info.clique_id
        target.state = info.state

    @_pynvml_call
    def nvmlDeviceGetGpuFabricInfo(self, device: Any, gpuFabricInfo: Any) -> int:
        """v1 (no version field): cluster UUID, status, clique, state."""
        info, target = self._fabric(device, gpuFabricInfo)
        self._fill_fabric(target, info)
        return nvml_codes.SUCCESS

    @_pynvml_call
    def nvmlDeviceGetGpuFabricInfoV(self, device: Any, gpuFabricInfo: Any) -> int:
        """v2 adds the health mask, v3 the health summary; any other version tag answers
        ARGUMENT_VERSION_MISMATCH, as NVML and NVIDIA's mock do."""
        info, target = self._fabric(device, gpuFabricInfo)
        version = int(getattr(target, "version", 0))
        if version not in self.fabric_versions:
            raise NvmlError(
                nvml_codes.ERROR_ARGUMENT_VERSION_MISMATCH, f"fabric info version {version:#x}"
            )
        self._fill_fabric(target, info)
        target.healthMask = info.health_mask or 0
        if version == _real_pynvml.nvmlGpuFabricInfo_v3:
            target.healthSummary = info.health_summary or 0
        return nvml_codes.SUCCESS

    @_pynvml_call
    def nvmlDeviceGetAddressingMode(self, device: Any) -> int:
        """pynvml returns the struct's `value`; NOT_SUPPORTED off coherent platforms."""
        facts = self._gpu(device)
        if facts.model.addressing_mode is None:
            raise NvmlError(
                nvml_codes.ERROR_NOT_SUPPORTED, f"GPU {facts.index}: no addressing mode"
            )
        return facts.model.addressing_mode

    # -- MIG mode and GPU-instance profiles ----------------------------------

    @_pynvml_call
    def nvmlDeviceGetMigMode(self, device: Any) -> list[int]:
        current, pending = self.hw.mig_mode(self._resolve(device, "gpu").gpu)
        return [current, pending]

    @_pynvml_call
    def nvmlDeviceSetMigMode(self, device: Any, mode: int) -> int:
        index = self._resolve(device, "gpu").gpu
        if mode not in (0, 1):
            raise NvmlError(nvml_codes.ERROR_INVALID_ARGUMENT, f"MIG mode {mode} is not 0 or 1")
        return self.hw.set_mig_mode(index, bool(mode))

    def _gi_profile_info(self, index: int, spec: GiProfileSpec, version: int) -> Any:
        """v1 answers with MIG on or off (go-nvlib relies on it); the V call, like its
        nvml.h doc says, only with MIG on."""
        if version == 2:
            if not self.hw.mig_mode(index)[0]:
                raise NvmlError(nvml_codes.ERROR_NOT_SUPPORTED, f"GPU {index}: MIG mode is off")
            info = _real_pynvml.c_nvmlGpuInstanceProfileInfo_v2_t()
            info.name = f"MIG {spec.name}".encode()
        elif version == 1:
            info = _real_pynvml.c_nvmlGpuInstanceProfileInfo_t()
        else:
            raise NvmlError(_NVML_ERROR_FUNCTION_NOT_FOUND, f"profile info version {version}")
        info.id = spec.id
        info.isP2pSupported = 0
        info.sliceCount = spec.slice_count
        info.instanceCount = spec.instance_count
        info.multiprocessorCount = spec.multiprocessors
        info.copyEngineCount = spec.copy_engines
        info.decoderCount = spec.decoders
        info.encoderCount = spec.encoders
        info.jpegCount = spec.jpeg_engines
        info.ofaCount = spec.ofa_engines
        info.memorySizeMB = spec.memory_mib
        return info

    @_pynvml_call
    def nvmlDeviceGetGpuInstanceProfileInfo(
        self, device: Any, profile: int, version: int = 2
    ) -> Any:
        index = self._resolve(device, "gpu").gpu
        return self._gi_profile_info(index, self.hw.gi_profile_by_enum(index, profile), version)

    @_pynvml_call
    def nvmlDeviceGetGpuInstanceProfileInfoById(self, device: Any, profileId: int) -> Any:
        index = self._resolve(device, "gpu").gpu
        return self._gi_profile_info(index, self.hw.gi_profile_by_id(index, profileId), 2)

    @_pynvml_call
    def nvmlDeviceGetGpuInstanceRemainingCapacity(self, device: Any, profileId: int) -> int:
        return self.hw.gi_remaining_capacity(self._resolve(device, "gpu").gpu, profileId)

    @_pynvml_call
    def nvmlDeviceGetGpuInstancePossiblePlacements(
        self, device: Any, profileId: int, placementsRef: Any, countRef: Any
    ) -> int:
        placements = self.hw.possible_placements(self._resolve(device, "gpu").gpu, profileId)
        items = [
            _real_pynvml.c_nvmlGpuInstancePlacement_t(start=p.start, size=p.size)
            for p in placements
        ]
        return self._fill_array(
            "nvmlDeviceGetGpuInstancePossiblePlacements", placementsRef, countRef, items
        )

    # -- GPU instances -------------------------------------------------------

    @_pynvml_call
    def nvmlDeviceCreateGpuInstance(self, device: Any, profileId: int) -> Any:
        """Without a placement NVML picks one; the fake takes the first that fits."""
        index = self._resolve(device, "gpu").gpu
        last: NvmlError | None = None
        for placement in self.hw.possible_placements(index, profileId):
            try:
                return self._gi_pointer(self.hw.create_gpu_instance(index, profileId, placement))
            except NvmlError as exc:
                if exc.code != nvml_codes.ERROR_INSUFFICIENT_RESOURCES:
                    raise
                last = exc
        raise last or NvmlError(nvml_codes.ERROR_INSUFFICIENT_RESOURCES, "no placement")

    @_pynvml_call
    def nvmlDeviceCreateGpuInstanceWithPlacement(
        self, device: Any, profileId: int, placement: Any
    ) -> Any:
        index = self._resolve(device, "gpu").gpu
        wanted = _deref(placement)
        if not isinstance(wanted, _real_pynvml.c_nvmlGpuInstancePlacement_t):
            raise NvmlError(
                nvml_codes.ERROR_INVALID_ARGUMENT,
                "placement must be byref(c_nvmlGpuInstancePlacement_t)",
            )
        view = self.hw.create_gpu_instance(
            index, profileId, Placement(int(wanted.start), int(wanted.size))
        )
        return self._gi_pointer(view)

    @_pynvml_call
    def nvmlGpuInstanceDestroy(self, gpuInstance: Any) -> int:
        h = self._resolve(gpuInstance, "gi")
        self.hw.destroy_gpu_instance(h.gpu, h.gi)
        return nvml_codes.SUCCESS

    @_pynvml_call
    def nvmlDeviceGetGpuInstances(
        self, device: Any, profileId: int, gpuInstancesRef: Any, countRef: Any
    ) -> int:
        views = self.hw.gpu_instances(self._resolve(device, "gpu").gpu, profileId)
        items = [self._gi_pointer(v) for v in views]
        return self._fill_array("nvmlDeviceGetGpuInstances", gpuInstancesRef, countRef, items)

    @_pynvml_call
    def nvmlDeviceGetGpuInstanceById(self, device: Any, gpuInstanceId: int) -> Any:
        index = self._resolve(device, "gpu").gpu
        return self._gi_pointer(self.hw.gpu_instance(index, gpuInstanceId))

    @_pynvml_call
    def nvmlGpuInstanceGetInfo(self, gpuInstance: Any) -> Any:
        h = self._resolve(gpuInstance, "gi")
        view = self.hw.gpu_instance(h.gpu, h.gi)
        info = _real_pynvml.c_nvmlGpuInstanceInfo_t()
        info.device = self._device_pointer(view.gpu_index)
        info.id = view.id
        info.profileId = view.profile_id
        info.placement.start = view.placement.start
        info.placement.size = view.placement.size
        return info

    # -- compute instances ---------------------------------------------------

    @_pynvml_call
    def nvmlGpuInstanceGetComputeInstanceProfileInfo(
        self, device: Any, profile: int, engProfile: int, version: int = 2
    ) -> Any:
        h = self._resolve(device, "gi")
        if engProfile != 0:  # NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_COUNT is 1 (SHARED)
            raise NvmlError(
                nvml_codes.ERROR_INVALID_ARGUMENT, f"engine profile {engProfile} out of range"
            )
        spec = self.hw.ci_profile_by_enum(h.gpu, h.gi, profile)
        if version == 2:
            info = _real_pynvml.c_nvmlComputeInstanceProfileInfo_v2_t()
            info.name = f"MIG {spec.name}".encode()
        elif version == 1:
            info = _real_pynvml.c_nvmlComputeInstanceProfileInfo_t()
        else:
            raise NvmlError(_NVML_ERROR_FUNCTION_NOT_FOUND, f"profile info version {version}")
        info.id = spec.id
        info.sliceCount = spec.slice_count
        info.instanceCount = spec.instance_count
        info.multiprocessorCount = spec.multiprocessors
        info.sharedCopyEngineCount = spec.shared_copy_engines
        info.sharedDecoderCount = spec.shared_decoders
        info.sharedEncoderCount = spec.shared_encoders
        info.sharedJpegCount = spec.shared_jpeg_engines
        info.sharedOfaCount = spec.shared_ofa_engines
        return info

    @_pynvml_call
    def nvmlGpuInstanceGetComputeInstanceRemainingCapacity(
        self, gpuInstance: Any, profileId: int
    ) -> int:
        h = self._resolve(gpuInstance, "gi")
        return self.hw.ci_remaining_capacity(h.gpu, h.gi, profileId)

    @_pynvml_call
    def nvmlGpuInstanceCreateComputeInstance(self, gpuInstance: Any, profileId: int) -> Any:
        h = self._resolve(gpuInstance, "gi")
        return self._ci_pointer(self.hw.create_compute_instance(h.gpu, h.gi, profileId))

    @_pynvml_call
    def nvmlComputeInstanceDestroy(self, computeInstance: Any) -> int:
        h = self._resolve(computeInstance, "ci")
        self.hw.destroy_compute_instance(h.gpu, h.gi, h.ci)
        return nvml_codes.SUCCESS

    @_pynvml_call
    def nvmlGpuInstanceGetComputeInstances(
        self, gpuInstance: Any, profileId: int, computeInstancesRef: Any, countRef: Any
    ) -> int:
        h = self._resolve(gpuInstance, "gi")
        items = [self._ci_pointer(v) for v in self.hw.compute_instances(h.gpu, h.gi, profileId)]
        return self._fill_array(
            "nvmlGpuInstanceGetComputeInstances", computeInstancesRef, countRef, items
        )

    @_pynvml_call
    def nvmlGpuInstanceGetComputeInstanceById(
        self, gpuInstance: Any, computeInstanceId: int
    ) -> Any:
        h = self._resolve(gpuInstance, "gi")
        return self._ci_pointer(self.hw.compute_instance(h.gpu, h.gi, computeInstanceId))

    @_pynvml_call
    def nvmlComputeInstanceGetInfo_v2(self, computeInstance: Any) -> Any:
        h = self._resolve(computeInstance, "ci")
        view = self.hw.compute_instance(h.gpu, h.gi, h.ci)
        info = _real_pynvml.c_nvmlComputeInstanceInfo_t()
        info.device = self._mig_pointer(view)
        info.gpuInstance = self._pointer(_FakeHandle("gi", view.gpu_index, view.gpu_instance_id))
        info.id = view.id
        info.profileId = view.profile_id
        info.placement.start = view.placement.start
        info.placement.size = view.placement.size
        return info

    @_pynvml_call
    def nvmlComputeInstanceGetInfo(self, computeInstance: Any) -> Any:
        return self.nvmlComputeInstanceGetInfo_v2(computeInstance)

    # -- MIG device handles --------------------------------------------------

    @_pynvml_call
    def nvmlDeviceIsMigDeviceHandle(self, device: Any) -> ctypes.c_uint:
        """A c_uint, as pynvml returns it: `bool()` works, `== 1` does not."""
        return ctypes.c_uint(1 if self._resolve(device, "gpu", "mig").kind == "mig" else 0)

    @_pynvml_call
    def nvmlDeviceGetGpuInstanceId(self, device: Any) -> int:
        return self._mig(self._resolve(device, "mig")).gpu_instance_id

    @_pynvml_call
    def nvmlDeviceGetComputeInstanceId(self, device: Any) -> int:
        return self._mig(self._resolve(device, "mig")).id

    @_pynvml_call
    def nvmlDeviceGetMaxMigDeviceCount(self, device: Any) -> int:
        return self.hw.max_mig_devices(self._resolve(device, "gpu").gpu)

    @_pynvml_call
    def nvmlDeviceGetMigDeviceHandleByIndex(self, device: Any, index: int) -> Any:
        gpu = self._resolve(device, "gpu").gpu
        return self._mig_pointer(self.hw.mig_device_by_index(gpu, int(index)))

    @_pynvml_call
    def nvmlDeviceGetDeviceHandleFromMigDeviceHandle(self, migDevice: Any) -> Any:
        return self._device_pointer(self._mig(self._resolve(migDevice, "mig")).gpu_index)

    # -- per-process use and field values (the simulated workloads) -------------

    def _device_uuid(self, handle: Any) -> str:
        h = self._resolve(handle, "gpu", "mig")
        return self._mig(h).uuid if h.kind == "mig" else self.hw.gpu(h.gpu).uuid

    def _process_infos(self, workloads: list[Any]) -> list[Any]:
        """pynvml's friendly objects of `c_nvmlProcessInfo_t`, as its wrapper returns them."""
        infos = []
        for w in workloads:
            info = _real_pynvml.c_nvmlProcessInfo_t()
            info.pid = w.pid
            info.usedGpuMemory = w.memory_bytes
            info.gpuInstanceId = info.computeInstanceId = 0xFFFFFFFF
            infos.append(_real_pynvml.nvmlStructToFriendlyObject(info))
        return infos

    @_pynvml_call
    def nvmlDeviceGetComputeRunningProcesses(self, handle: Any) -> list[Any]:
        return self._process_infos(self.hw.processes_on(self._device_uuid(handle)))

    @_pynvml_call
    def nvmlDeviceGetMPSComputeRunningProcesses(self, handle: Any) -> list[Any]:
        """Simulated workloads are plain CUDA processes: no MPS clients to list."""
        self._device_uuid(handle)
        return []

    @_pynvml_call
    def nvmlDeviceGetProcessUtilization(self, handle: Any, timeStamp: int) -> list[Any]:
        """ctypes samples, as pynvml returns them; NOT_FOUND when none is newer than
        `timeStamp`, NOT_SUPPORTED under MIG."""
        samples = self.hw.utilization_samples(self._device_uuid(handle))
        now_us = time.time_ns() // 1000
        if not samples or now_us <= int(timeStamp):
            raise NvmlError(nvml_codes.ERROR_NOT_FOUND, "no utilization samples")
        out = []
        for w in samples:
            sample = _real_pynvml.c_nvmlProcessUtilizationSample_t()
            sample.pid, sample.timeStamp, sample.smUtil = w.pid, now_us, w.sm_percent
            out.append(sample)
        return out

    @_pynvml_call
    def nvmlDeviceGetFieldValues(self, handle: Any, fieldIds: list[Any]) -> Any:
        """Field 230 (the GPU recovery action) is known; any other answers NOT_SUPPORTED
        in its own `nvmlReturn`, as NVML does for fields a GPU lacks."""
        gpu = self._resolve(handle, "gpu").gpu
        values = (_real_pynvml.c_nvmlFieldValue_t * len(fieldIds))()
        for i, field_id in enumerate(fieldIds):
            values[i].fieldId = int(field_id)
            known = int(field_id) == nvml_codes.FI_DEV_GET_GPU_RECOVERY_ACTION
            if not known or int(field_id) in self.unsupported_fields:
                values[i].nvmlReturn = nvml_codes.ERROR_NOT_SUPPORTED
                continue
            values[i].valueType = nvml_codes.VALUE_TYPE_UNSIGNED_INT
            values[i].value.uiVal = self.hw.recovery_action(gpu)
            values[i].nvmlReturn = nvml_codes.SUCCESS
        return values


def fake_pynvml(hw: SimHardware) -> FakePynvml:
    """A fresh, uninitialised fake `pynvml` module over `hw` (see `FakePynvml`)."""
    return FakePynvml(hw)


def fake_sysfs(hw: SimHardware, root: Path) -> Path:
    """A `/sys` tree with the PCI topology of `hw`'s GPUs, for `RealNvml(sysfs_root=...)`.

    `<root>/bus/pci/devices/<bdf>` links to `<root>/devices/<pcie root>/<bdf>`,
    which holds `numa_node`, as on Linux.
    """
    for facts in hw.gpus():
        device_dir = root / "devices" / facts.pcie_root / facts.pci_bus_id
        device_dir.mkdir(parents=True, exist_ok=True)
        (device_dir / "numa_node").write_text(f"{facts.numa_node}\n")
        link = root / "bus" / "pci" / "devices" / facts.pci_bus_id
        link.parent.mkdir(parents=True, exist_ok=True)
        if not link.is_symlink():
            link.symlink_to(device_dir)
    return root
