"""The real pynvml backend loads a real libnvidia-ml.so.1 from a driver root.

No GPU is needed: the library is compiled by the test (`fake_libnvml`), put
into a fake driver root (RHEL layout, and mounted at a path other than the
host's, as the GPU Operator's root is), and opened by `open_hardware`
without LD_LIBRARY_PATH. pynvml's own ctypes calls go into it.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from dra_driver.composition import hardware as backend
from dra_driver.container.driver_root import DriverRoot
from dra_driver.errors import DriverRootError, NvmlError
from dra_driver.hardware.gpu_policy import NvidiaSmi
from dra_driver.hardware.nvml import codes
from dra_driver.hardware.nvml.real import RealNvml, import_pynvml
from dra_driver.hardware.simulated.driver_root import LIBRARY_DIRS, materialize_driver_root
from tests.dra_driver.hardware.nvml.fake_libnvml import install_libnvml

VERSION = "570.172.08"


@pytest.fixture(autouse=True)
def _restore_pynvml() -> Iterator[None]:
    """pynvml keeps its library in a module global: give it back after each test."""
    lib = import_pynvml()
    saved = (lib.nvmlLib, dict(lib._nvmlGetFunctionPointer_cache))
    yield
    lib.nvmlLib = saved[0]
    lib._nvmlGetFunctionPointer_cache.clear()
    lib._nvmlGetFunctionPointer_cache.update(saved[1])
    if hasattr(lib, "_dra_gpu_library"):
        delattr(lib, "_dra_gpu_library")


def _root(tmp_path: Path, gpu_count: int) -> DriverRoot:
    mounted = materialize_driver_root(tmp_path / "driver-root", VERSION, "rhel")
    install_libnvml(mounted, LIBRARY_DIRS["rhel"], version=VERSION, gpu_count=gpu_count)
    return DriverRoot(host_path="/run/nvidia/driver", container_path=str(mounted))


def test_loads_nvml_from_the_driver_root_without_ld_library_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("LD_LIBRARY_PATH", raising=False)
    root = _root(tmp_path, gpu_count=0)
    hardware = backend.open_hardware(backend.REAL_SPEC, driver_root=root)
    assert isinstance(hardware.nvml, RealNvml)
    system = hardware.nvml.system()
    assert (system.driver_version, system.cuda_driver_version) == (VERSION, 12080)
    assert hardware.nvml.gpus() == []
    assert hardware.host.proc_root == Path("/proc")
    assert isinstance(hardware.gpu_policy, NvidiaSmi)
    assert hardware.mps_shm_tmpfs  # a real node mounts a tmpfs per MPS daemon
    # The library pynvml talks to is the root's file, not one on the loader's path.
    lib = import_pynvml()
    assert lib.nvmlLib._name == f"{root.container_path}/usr/lib64/libnvidia-ml.so.{VERSION}"
    # And the driver files of that version are found in the same root.
    files = hardware.driver.files(hardware.driver_version())
    assert "/usr/lib64/libnvidia-ml.so.570.172.08" in [lib.path for lib in files.libraries]
    hardware.nvml.close()  # type: ignore[attr-defined]


def test_reads_the_device_count_through_the_library(tmp_path: Path) -> None:
    hardware = backend.open_hardware(backend.REAL_SPEC, driver_root=_root(tmp_path, gpu_count=2))
    assert import_pynvml().nvmlDeviceGetCount() == 2
    # The backend walks both GPUs: the first handle lookup is what this library refuses.
    with pytest.raises(NvmlError, match="GPU index 0") as err:
        hardware.nvml.gpus()
    assert err.value.code == codes.ERROR_GPU_IS_LOST


def test_a_driver_root_without_nvml_names_the_root(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    root = DriverRoot(host_path="/run/nvidia/driver", container_path=str(tmp_path / "empty"))
    with pytest.raises(DriverRootError, match=r"/run/nvidia/driver \(mounted at .*empty\)"):
        backend.open_hardware(backend.REAL_SPEC, driver_root=root)


def test_a_driver_not_loaded_is_an_nvml_error_with_its_code(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_NVML_INIT_RESULT", str(codes.ERROR_DRIVER_NOT_LOADED))
    with pytest.raises(NvmlError, match="initialize NVML") as err:
        backend.open_hardware(backend.REAL_SPEC, driver_root=_root(tmp_path, gpu_count=1))
    assert err.value.code == codes.ERROR_DRIVER_NOT_LOADED
