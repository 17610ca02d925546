"""Running nvidia-smi for time-slicing (the simulated node: simulated/test_sim_gpu_policy.py)."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from dra_driver.container.driver_root import DriverBinaries
from dra_driver.errors import GpuSettingError
from dra_driver.hardware.gpu_policy import NvidiaSmi

UUID = "GPU-5125b2ef-ba33-5f8f-a987-df64488caedb"


def _smi(tmp_path: Path, body: str) -> NvidiaSmi:
    """nvidia-smi of a driver root, as a script that logs its argv and LD_LIBRARY_PATH."""
    path = tmp_path / "nvidia-smi"
    log = tmp_path / "calls"
    path.write_text(f'#!/bin/sh\necho "$LD_LIBRARY_PATH|$*" >> {log}\n{body}\n', encoding="utf-8")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return NvidiaSmi(lambda: _binaries(path))


def _binaries(nvidia_smi: Path | None) -> DriverBinaries:
    return DriverBinaries(
        nvidia_smi=nvidia_smi,
        nvidia_cuda_mps_control=None,
        nvidia_cuda_mps_server=None,
        nvidia_persistenced=None,
        nvidia_debugdump=None,
        library_dirs=(Path("/driver-root/usr/lib64"),),
    )


def test_nvidia_smi_gets_nvidias_command_lines(tmp_path: Path) -> None:
    smi = _smi(tmp_path, "exit 0")

    smi.set_compute_mode(UUID, "DEFAULT")
    smi.set_time_slice(UUID, 3)

    assert (tmp_path / "calls").read_text().splitlines() == [
        f"/driver-root/usr/lib64|-i {UUID} -c DEFAULT",
        f"/driver-root/usr/lib64|compute-policy -i {UUID} --set-timeslice 3",
    ]


def test_a_failing_nvidia_smi_is_reported_with_its_output(tmp_path: Path) -> None:
    smi = _smi(tmp_path, 'echo "Setting time-slice is Not Supported for GPU"; exit 3')

    with pytest.raises(GpuSettingError) as failed:
        smi.set_time_slice(UUID, 0)

    assert failed.value.not_supported
    assert f"cannot set the time-slice of GPU {UUID} to 0:" in str(failed.value)
    assert "exited with status 3: Setting time-slice is Not Supported for GPU" in str(failed.value)


def test_a_driver_root_without_nvidia_smi_names_the_flag(tmp_path: Path) -> None:
    with pytest.raises(GpuSettingError, match="no nvidia-smi \\(check --nvidia-driver-root\\)"):
        NvidiaSmi(lambda: _binaries(None)).set_time_slice(UUID, 1)
    with pytest.raises(GpuSettingError, match=r"running .*/missing failed"):
        NvidiaSmi(lambda: _binaries(tmp_path / "missing")).set_time_slice(UUID, 1)
