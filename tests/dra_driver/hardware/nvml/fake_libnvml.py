"""A real `libnvidia-ml.so.1` for tests, compiled with `cc` from a few lines of C.

The fake pynvml module cannot show that the real backend loads NVML from a
driver root without LD_LIBRARY_PATH: that needs a shared object pynvml's
ctypes calls really go into. This one implements the entry points start-up
uses (init, shutdown, driver and CUDA versions, device count) and answers
`NVML_ERROR_GPU_IS_LOST` for any device handle. `FAKE_NVML_INIT_RESULT` in
the environment makes `nvmlInit*` return that code (9: driver not loaded).
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

C_SOURCE = r"""
#include <stdlib.h>
#include <string.h>

static int init_result(void) {
    const char *forced = getenv("FAKE_NVML_INIT_RESULT");
    return forced ? atoi(forced) : 0;
}
int nvmlInitWithFlags(unsigned int flags) { (void)flags; return init_result(); }
int nvmlInit_v2(void) { return init_result(); }
int nvmlShutdown(void) { return 0; }
int nvmlSystemGetDriverVersion(char *version, unsigned int length) {
    if (length < sizeof(DRIVER_VERSION)) return 7; /* NVML_ERROR_INSUFFICIENT_SIZE */
    memcpy(version, DRIVER_VERSION, sizeof(DRIVER_VERSION));
    return 0;
}
int nvmlSystemGetCudaDriverVersion(int *version) { *version = CUDA_VERSION; return 0; }
int nvmlSystemGetCudaDriverVersion_v2(int *version) { *version = CUDA_VERSION; return 0; }
int nvmlDeviceGetCount_v2(unsigned int *count) { *count = GPU_COUNT; return 0; }
int nvmlDeviceGetHandleByIndex_v2(unsigned int index, void **device) {
    (void)index; (void)device; return 15; /* NVML_ERROR_GPU_IS_LOST */
}
const char *nvmlErrorString(int result) {
    switch (result) {
    case 9: return "Driver Not Loaded";
    case 15: return "GPU is lost";
    default: return "Unknown Error";
    }
}
"""


def build_libnvml(out_dir: Path, *, version: str, gpu_count: int, cuda: int = 12080) -> Path:
    """Compile the library into `out_dir/libnvidia-ml.so.<version>`; returns its path."""
    compiler = shutil.which("cc") or shutil.which("gcc")
    assert compiler is not None, "the tests need a C compiler (cc): apt-get install gcc"
    out_dir.mkdir(parents=True, exist_ok=True)
    source = out_dir / "fake_nvml.c"
    source.write_text(C_SOURCE)
    target = out_dir / f"libnvidia-ml.so.{version}"
    subprocess.run(
        [
            compiler,
            "-shared",
            "-fPIC",
            "-O0",
            f'-DDRIVER_VERSION="{version}"',
            f"-DCUDA_VERSION={cuda}",
            f"-DGPU_COUNT={gpu_count}",
            "-Wl,-soname,libnvidia-ml.so.1",
            "-o",
            str(target),
            str(source),
        ],
        check=True,
        capture_output=True,
    )
    source.unlink()
    return target


def install_libnvml(root: Path, lib_dir: str, *, version: str, gpu_count: int) -> Path:
    """Put the compiled library in place of the fake root's empty libnvidia-ml file."""
    built = build_libnvml(root.parent / f"build-{root.name}", version=version, gpu_count=gpu_count)
    target = root / lib_dir.lstrip("/") / built.name
    shutil.copyfile(built, target)
    return target
