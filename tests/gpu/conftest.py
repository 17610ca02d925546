"""Real-GPU tests: they run where NVML loads from the driver root, and fail elsewhere.

`make gpu-test` runs them (`pytest -m gpu tests/gpu`). The driver root is `/`
unless `GPU_TEST_DRIVER_ROOT` names another (the GPU Operator's
`/run/nvidia/driver`). Every test only reads the GPUs or uses them the way a
workload does: none changes MIG mode, compute mode, time-slice or clocks,
and none resets a GPU. See docs/validated-hardware.md.

On a machine where they cannot run (no NVML, no GPU) they fail, saying what is missing,
instead of skipping: `make gpu-test` validates a node, and a run that validated nothing must
not read as a pass. `make test` deselects them (`-m "not gpu"`).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from dra_driver.composition.hardware import REAL_SPEC, open_hardware
from dra_driver.errors import DriverRootError, NvmlError
from dra_driver.hardware.machine import Hardware
from tests.gpu.real_root import DRIVER_ROOT_ENV, driver_root


@pytest.fixture(scope="session")
def real() -> Iterator[Hardware]:
    """The machine's GPUs through the real pynvml path, or a failure that says why not."""
    root = driver_root()
    try:
        hardware = open_hardware(REAL_SPEC, driver_root=root)
    except DriverRootError as exc:
        pytest.fail(
            f"no NVML in the driver root {root.host}: {exc}. On a GPU node, point "
            f"{DRIVER_ROOT_ENV} at the driver's root (the GPU Operator's: /run/nvidia/driver)"
        )
    except NvmlError as exc:
        pytest.fail(
            f"NVML from the driver root {root.host} did not initialise: {exc}. Check that "
            "the NVIDIA kernel module is loaded (`nvidia-smi` works on the node)"
        )
    try:
        if not hardware.nvml.gpus():
            pytest.fail(
                f"NVML from the driver root {root.host} sees no GPU: run `make gpu-test` "
                "on a node with an NVIDIA GPU"
            )
        yield hardware
    finally:
        close = getattr(hardware.nvml, "close", None)
        if close is not None:
            close()
