"""The fake pynvml keeps to the real module's API, so tests over it mean something."""

from __future__ import annotations

import ctypes
import inspect
from typing import Any

import pynvml
import pytest

from dra_driver.hardware.nvml import codes
from dra_driver.hardware.simulated.hardware import SimHardware
from dra_driver.hardware.simulated.shapes import load_shape
from tests.fakes import FAKE_NVML_ERRORS, FakeNVMLError, FakePynvml, fake_pynvml

MIB = 2**20


def started(shape: str) -> FakePynvml:
    lib = fake_pynvml(SimHardware(load_shape(shape)))
    lib.nvmlInit()
    return lib


def fake_functions(lib: FakePynvml) -> list[str]:
    return sorted(
        n for n in dir(lib) if n.startswith("nvml") and inspect.isroutine(getattr(lib, n))
    )


def test_every_fake_function_has_the_real_signature() -> None:
    lib = fake_pynvml(SimHardware(load_shape("l4-node")))
    names = fake_functions(lib)
    assert len(names) > 40
    for name in names:
        assert hasattr(pynvml, name), f"real pynvml has no {name}"
        fake_params = inspect.signature(getattr(lib, name)).parameters
        real_params = inspect.signature(getattr(pynvml, name)).parameters
        assert [(p.name, p.default, p.kind) for p in fake_params.values()] == [
            (p.name, p.default, p.kind) for p in real_params.values()
        ], name


def test_every_fake_error_class_exists_in_pynvml_with_the_same_code() -> None:
    lib = fake_pynvml(SimHardware(load_shape("l4-node")))
    for code, cls in FAKE_NVML_ERRORS.items():
        real_cls = getattr(pynvml, cls.__name__)
        assert real_cls().value == code == cls().value, cls.__name__
        assert getattr(lib, cls.__name__) is cls
        assert issubclass(cls, lib.NVMLError)
    for name in (
        "NVMLError_NotSupported",
        "NVMLError_InsufficientResources",
        "NVMLError_InUse",
        "NVMLError_NotFound",
        "NVMLError_InvalidArgument",
        "NVMLError_Uninitialized",
        "NVMLError_NoPermission",
        "NVMLError_ResetRequired",
        "NVMLError_GpuIsLost",
    ):
        assert hasattr(lib, name), name
    assert lib.nvmlExceptionClass(codes.ERROR_IN_USE).__name__ == "NVMLError_InUse"


def test_errors_read_like_pynvml() -> None:
    # pynvml's own table where it has one; the rest come from nvmlErrorString (nvml.h wording)
    for code, text in pynvml.NVMLError._errcode_to_string.items():
        if code in FAKE_NVML_ERRORS:
            assert str(FAKE_NVML_ERRORS[code]()) == text
    assert str(FAKE_NVML_ERRORS[codes.ERROR_INSUFFICIENT_RESOURCES]()) == "Insufficient Resources"
    assert FakeNVMLError(codes.ERROR_NOT_FOUND).value == codes.ERROR_NOT_FOUND


def test_structs_and_constants_are_the_real_ones() -> None:
    lib = fake_pynvml(SimHardware(load_shape("l4-node")))
    assert lib.c_nvmlGpuInstancePlacement_t is pynvml.c_nvmlGpuInstancePlacement_t
    assert lib.nvmlPciInfo_t is pynvml.nvmlPciInfo_t
    assert lib.NVML_DEVICE_MIG_ENABLE == pynvml.NVML_DEVICE_MIG_ENABLE
    assert lib.NVML_GPU_INSTANCE_PROFILE_COUNT == codes.GPU_INSTANCE_PROFILE_COUNT


def test_every_call_before_init_is_uninitialized() -> None:
    lib = fake_pynvml(SimHardware(load_shape("dgx-h100")))
    with pytest.raises(lib.NVMLError_Uninitialized) as excinfo:
        lib.nvmlDeviceGetCount()
    assert excinfo.value.value == codes.ERROR_UNINITIALIZED
    with pytest.raises(lib.NVMLError_Uninitialized):
        lib.nvmlShutdown()
    lib.nvmlInit()
    lib.nvmlInitWithFlags(1)
    lib.nvmlShutdown()
    assert lib.nvmlDeviceGetCount() == 8  # init is reference-counted
    lib.nvmlShutdown()
    with pytest.raises(lib.NVMLError_Uninitialized):
        lib.nvmlSystemGetDriverVersion()


def test_getters_return_what_pynvml_returns() -> None:
    lib = started("dgx-h100")
    handle = lib.nvmlDeviceGetHandleByIndex(0)
    assert isinstance(handle, pynvml.c_nvmlDevice_t)
    name = lib.nvmlDeviceGetName(handle)
    assert name == "NVIDIA H100 80GB HBM3"
    assert isinstance(name, str)
    uuid = lib.nvmlDeviceGetUUID(handle)
    assert isinstance(uuid, str)
    assert uuid.startswith("GPU-")
    pci = lib.nvmlDeviceGetPciInfo(handle)
    assert isinstance(pci, pynvml.nvmlPciInfo_t)
    # NVML's "%08X:%02X:%02X.0"; pynvml's _PrintableStructure hands char fields out as str
    assert pci.busId == "00000000:1B:00.0"
    assert pci.busIdLegacy == "0000:1B:00.0"
    assert (pci.domain, pci.bus, pci.device) == (0, 0x1B, 0)
    assert pci.pciDeviceId == 0x233010DE
    assert lib.nvmlDeviceGetCudaComputeCapability(handle) == (9, 0)
    assert lib.nvmlDeviceGetArchitecture(handle) == pynvml.NVML_DEVICE_ARCH_HOPPER
    assert lib.nvmlDeviceGetBrand(handle) == pynvml.NVML_BRAND_NVIDIA
    memory = lib.nvmlDeviceGetMemoryInfo(handle)
    assert isinstance(memory, pynvml.c_nvmlMemory_t)
    assert memory.total == 81559 * MIB
    memory_v2 = lib.nvmlDeviceGetMemoryInfo(handle, version=pynvml.nvmlMemory_v2)
    assert isinstance(memory_v2, pynvml.c_nvmlMemory_v2_t)
    assert memory_v2.version == pynvml.nvmlMemory_v2
    mode = lib.nvmlDeviceGetMigMode(handle)
    assert mode == [0, 0]
    assert isinstance(mode, list)
    assert lib.nvmlSystemGetDriverVersion() == "570.172.08"
    assert lib.nvmlSystemGetCudaDriverVersion() == 12080
    assert lib.nvmlSystemGetNVMLVersion() == "12.570.172.08"
    same = lib.nvmlDeviceGetHandleByUUID(uuid)
    assert lib.nvmlDeviceGetIndex(same) == 0
    by_bus = lib.nvmlDeviceGetHandleByPciBusId("00000000:1B:00.0")
    assert lib.nvmlDeviceGetUUID(by_bus) == uuid


def test_mig_mode_on_a_gpu_without_mig_is_not_supported() -> None:
    lib = started("l4-node")
    handle = lib.nvmlDeviceGetHandleByIndex(0)
    with pytest.raises(lib.NVMLError_NotSupported):
        lib.nvmlDeviceGetMigMode(handle)
    with pytest.raises(lib.NVMLError_NotSupported):
        lib.nvmlDeviceGetGpuInstanceProfileInfo(handle, 0, 1)


def test_profile_info_v1_answers_with_mig_off_and_v2_does_not() -> None:
    lib = started("dgx-h100")
    handle = lib.nvmlDeviceGetHandleByIndex(0)
    info = lib.nvmlDeviceGetGpuInstanceProfileInfo(handle, 0, 1)
    assert isinstance(info, pynvml.c_nvmlGpuInstanceProfileInfo_t)
    assert (info.id, info.memorySizeMB, info.instanceCount) == (19, 9984, 7)
    with pytest.raises(lib.NVMLError_NotSupported):
        lib.nvmlDeviceGetGpuInstanceProfileInfo(handle, 0)
    with pytest.raises(lib.NVMLError_InvalidArgument):
        lib.nvmlDeviceGetGpuInstanceProfileInfo(handle, codes.GPU_INSTANCE_PROFILE_COUNT, 1)
    with pytest.raises(lib.NVMLError_NotSupported):
        lib.nvmlDeviceGetGpuInstanceProfileInfo(handle, 5, 1)  # 8_SLICE: not on H100
    assert lib.nvmlDeviceSetMigMode(handle, pynvml.NVML_DEVICE_MIG_ENABLE) == 0
    info_v2 = lib.nvmlDeviceGetGpuInstanceProfileInfoV(handle, 0)
    assert isinstance(info_v2, pynvml.c_nvmlGpuInstanceProfileInfo_v2_t)
    assert info_v2.name == "MIG 1g.10gb"


def test_placements_take_a_null_array_for_the_count_and_refuse_short_arrays() -> None:
    lib = started("dgx-a100-40gb")
    handle = lib.nvmlDeviceGetHandleByIndex(0)
    count = ctypes.c_uint(0)
    result = lib.nvmlDeviceGetGpuInstancePossiblePlacements(handle, 20, None, ctypes.byref(count))
    assert result == pynvml.NVML_SUCCESS
    assert count.value == 7
    short = (pynvml.c_nvmlGpuInstancePlacement_t * 1)()
    with pytest.raises(lib.NVMLError_InsufficientSize):
        lib.nvmlDeviceGetGpuInstancePossiblePlacements(handle, 20, short, ctypes.byref(count))
    array = (pynvml.c_nvmlGpuInstancePlacement_t * 7)()
    lib.nvmlDeviceGetGpuInstancePossiblePlacements(handle, 20, array, ctypes.byref(count))
    assert [(p.start, p.size) for p in array] == [(s, 1) for s in range(7)]


def test_instances_and_mig_handles_behave_like_nvml() -> None:
    lib = started("dgx-a100-40gb")
    device = lib.nvmlDeviceGetHandleByIndex(1)
    placement = pynvml.c_nvmlGpuInstancePlacement_t(start=4, size=4)
    gi = lib.nvmlDeviceCreateGpuInstanceWithPlacement(device, 9, ctypes.byref(placement))
    assert isinstance(gi, pynvml.c_nvmlGpuInstance_t)
    gi_info = lib.nvmlGpuInstanceGetInfo(gi)
    assert (gi_info.profileId, gi_info.placement.start, gi_info.placement.size) == (9, 4, 4)
    assert lib.nvmlDeviceGetIndex(gi_info.device) == 1

    ci_profile = lib.nvmlGpuInstanceGetComputeInstanceProfileInfo(gi, 2, 0, 1)
    assert isinstance(ci_profile, pynvml.c_nvmlComputeInstanceProfileInfo_t)
    ci = lib.nvmlGpuInstanceCreateComputeInstance(gi, ci_profile.id)
    assert isinstance(ci, pynvml.c_nvmlComputeInstance_t)
    ci_info = lib.nvmlComputeInstanceGetInfo(ci)
    mig = ci_info.device

    is_mig: Any = lib.nvmlDeviceIsMigDeviceHandle(mig)
    assert is_mig != 1  # the pynvml trap: test it with bool(), never == 1
    assert bool(is_mig)
    assert isinstance(is_mig, ctypes.c_uint)
    assert not lib.nvmlDeviceIsMigDeviceHandle(device).value
    assert lib.nvmlDeviceGetName(mig) == "NVIDIA A100-SXM4-40GB MIG 3g.20gb"
    assert lib.nvmlDeviceGetUUID(mig).startswith("MIG-")
    assert lib.nvmlDeviceGetMemoryInfo(mig).total == 19968 * MIB
    assert lib.nvmlDeviceGetGpuInstanceId(mig) == gi_info.id
    assert lib.nvmlDeviceGetComputeInstanceId(mig) == ci_info.id
    assert lib.nvmlDeviceGetIndex(lib.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(mig)) == 1
    assert lib.nvmlDeviceGetMaxMigDeviceCount(device) == 7
    by_index = lib.nvmlDeviceGetMigDeviceHandleByIndex(device, 0)
    assert lib.nvmlDeviceGetUUID(by_index) == lib.nvmlDeviceGetUUID(mig)
    with pytest.raises(lib.NVMLError_NotFound):
        lib.nvmlDeviceGetMigDeviceHandleByIndex(device, 1)

    gis = (pynvml.c_nvmlGpuInstance_t * 2)()
    count = ctypes.c_uint(0)
    lib.nvmlDeviceGetGpuInstances(device, 9, gis, ctypes.byref(count))
    assert count.value == 1
    assert lib.nvmlGpuInstanceGetInfo(gis[0]).id == gi_info.id

    with pytest.raises(lib.NVMLError_InUse):
        lib.nvmlGpuInstanceDestroy(gi)
    lib.nvmlComputeInstanceDestroy(ci)
    with pytest.raises(lib.NVMLError_InvalidArgument):  # a stale MIG handle
        lib.nvmlDeviceGetUUID(mig)
    lib.nvmlGpuInstanceDestroy(gi)
    with pytest.raises(lib.NVMLError_NotFound):
        lib.nvmlDeviceGetGpuInstanceById(device, gi_info.id)


def test_overlap_raises_insufficient_resources() -> None:
    lib = started("dgx-a100-40gb")
    device = lib.nvmlDeviceGetHandleByIndex(0)
    lib.nvmlDeviceCreateGpuInstanceWithPlacement(
        device, 0, ctypes.byref(pynvml.c_nvmlGpuInstancePlacement_t(start=0, size=8))
    )
    with pytest.raises(lib.NVMLError_InsufficientResources) as excinfo:
        lib.nvmlDeviceCreateGpuInstance(device, 19)
    assert excinfo.value.value == codes.ERROR_INSUFFICIENT_RESOURCES


def test_handles_of_the_wrong_kind_are_invalid_arguments() -> None:
    lib = started("dgx-a100-40gb")
    device = lib.nvmlDeviceGetHandleByIndex(0)
    gi = lib.nvmlDeviceCreateGpuInstance(device, 0)
    with pytest.raises(lib.NVMLError_InvalidArgument):
        lib.nvmlDeviceGetName(gi)
    with pytest.raises(lib.NVMLError_InvalidArgument):
        lib.nvmlGpuInstanceDestroy(device)
    with pytest.raises(lib.NVMLError_InvalidArgument):
        lib.nvmlDeviceGetName(pynvml.c_nvmlDevice_t())  # NULL


def test_injected_failures_fire_once() -> None:
    lib = started("l4-node")
    lib.fail_next("nvmlDeviceGetCount", codes.ERROR_GPU_IS_LOST)
    with pytest.raises(lib.NVMLError_GpuIsLost):
        lib.nvmlDeviceGetCount()
    assert lib.nvmlDeviceGetCount() == 4
    with pytest.raises(AttributeError):
        lib.fail_next("nvmlNoSuchCall", codes.ERROR_UNKNOWN)
