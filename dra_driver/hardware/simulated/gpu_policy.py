"""The simulator's side of the GPU-policy seam (`dra_driver.hardware.gpu_policy.GpuPolicy`).

A real node sets a GPU's compute mode and time-slice with nvidia-smi; a
simulated one records them in its hardware state file, where `dra-gpu
status` and the tests read them back, so the plugin's time-slicing code runs
unchanged on a simulated node.
"""

from __future__ import annotations

from dra_driver.errors import DraGpuError, GpuSettingError
from dra_driver.hardware.simulated.hardware import SimHardware


class SimGpuPolicy:
    """The settings of a simulated node, kept in its hardware state file."""

    def __init__(self, hardware: SimHardware) -> None:
        self._hardware = hardware

    def set_compute_mode(self, uuid: str, mode: str) -> None:
        try:
            self._hardware.set_compute_mode(uuid, mode)
        except DraGpuError as exc:
            raise GpuSettingError(f"cannot set the compute mode of GPU {uuid}: {exc}") from exc

    def set_time_slice(self, uuid: str, level: int) -> None:
        try:
            self._hardware.set_time_slice(uuid, level)
        except DraGpuError as exc:
            raise GpuSettingError(f"cannot set the time-slice of GPU {uuid}: {exc}") from exc

    def time_slice(self, uuid: str) -> int | None:
        return self._hardware.time_slice(uuid)
