"""Setting a GPU's compute mode and time-slice interval: the seam, and nvidia-smi behind it.

NVML has no public call for the time-slice interval (gpu-mig-nvml.md 6.1),
so, like NVIDIA's driver (`nvlib.go` setTimeSlice / setComputeMode), the
plugin runs the driver's own nvidia-smi:

    nvidia-smi -i <uuid> -c DEFAULT
    nvidia-smi compute-policy -i <uuid> --set-timeslice <0..3>

found in the driver root (`dra_driver.container.driver_root.DriverBinaries`, which also
gives the environment that lets it find the root's libnvidia-ml). It is looked
up at each use, so a driver installed or upgraded after the plugin started is
used as it is now. `GpuPolicy` is that narrow interface; `NvidiaSmi` runs
the real binary, and the simulator's `SimGpuPolicy`
(`dra_driver.hardware.simulated.gpu_policy`) records the same settings in a
simulated node's hardware state, so a simulated node goes through the same
time-slicing code as a real one. The composition root puts one of them in
`Hardware.gpu_policy`; nothing else chooses.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable, Sequence
from typing import Final, Protocol

from dra_driver.container.driver_root import DriverBinaries
from dra_driver.errors import DraGpuError, GpuSettingError

TIMEOUT_S: Final = 30.0


class GpuPolicy(Protocol):
    """The two GPU-wide settings time-slicing needs."""

    def set_compute_mode(self, uuid: str, mode: str) -> None:
        """`nvidia-smi -i <uuid> -c <mode>`; GpuSettingError on failure."""
        ...

    def set_time_slice(self, uuid: str, level: int) -> None:
        """`nvidia-smi compute-policy -i <uuid> --set-timeslice <level>`; GpuSettingError."""
        ...

    def time_slice(self, uuid: str) -> int | None:
        """The `--set-timeslice` level the GPU runs with, or None where it cannot be read."""
        ...


class NvidiaSmi:
    """The real nvidia-smi of the node's driver, as `binaries()` finds it."""

    def __init__(self, binaries: Callable[[], DriverBinaries]) -> None:
        self._binaries = binaries

    def set_compute_mode(self, uuid: str, mode: str) -> None:
        self._run(["-i", uuid, "-c", mode], f"set the compute mode of GPU {uuid} to {mode}")

    def set_time_slice(self, uuid: str, level: int) -> None:
        self._run(
            ["compute-policy", "-i", uuid, "--set-timeslice", str(level)],
            f"set the time-slice of GPU {uuid} to {level}",
        )

    def time_slice(self, uuid: str) -> int | None:  # noqa: ARG002 (the protocol's signature)
        """Unknown: neither NVML nor nvidia-smi reads the interval back."""
        return None

    def _run(self, args: Sequence[str], what: str) -> None:
        try:
            binaries = self._binaries()
        except DraGpuError as exc:
            raise GpuSettingError(f"cannot {what}: {exc}") from exc
        path = binaries.nvidia_smi
        if path is None:
            raise GpuSettingError(
                f"cannot {what}: the driver root has no nvidia-smi (check --nvidia-driver-root)"
            )
        try:
            done = subprocess.run(
                [str(path), *args],
                env={**os.environ, **binaries.env},
                capture_output=True,
                text=True,
                timeout=TIMEOUT_S,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise GpuSettingError(f"cannot {what}: running {path} failed: {exc}") from exc
        if done.returncode != 0:
            output = " ".join((done.stdout + done.stderr).split())
            raise GpuSettingError(
                f"cannot {what}: {path} exited with status {done.returncode}: {output}",
                not_supported="not supported" in output.lower(),
            )


class UnavailableGpuPolicy:
    """For a driver built without a way to set GPU policies: every setting fails clearly."""

    def set_compute_mode(self, uuid: str, mode: str) -> None:
        raise GpuSettingError(f"cannot set compute mode {mode} on GPU {uuid}: no nvidia-smi")

    def set_time_slice(self, uuid: str, level: int) -> None:
        raise GpuSettingError(f"cannot set time-slice {level} on GPU {uuid}: no nvidia-smi")

    def time_slice(self, uuid: str) -> int | None:  # noqa: ARG002 (the protocol's signature)
        return None
