"""The CD plugin's numbers from kernel files: read from a simulated gb200-node's /proc, and
clear errors naming the file where a line is missing."""

from __future__ import annotations

from pathlib import Path

import pytest

from dra_driver.compute_domain.kernel_files import (
    FABRIC_IMEX_MGMT,
    PROC_DEVICES,
    Capability,
    char_major,
    imex_channels_major,
    parse_capability,
)
from dra_driver.errors import CdiError
from dra_driver.hardware.simulated.hardware import SimHardware
from dra_driver.hardware.simulated.shapes import load_shape


def test_a_simulated_node_has_the_imex_majors_and_the_fabric_capability(tmp_path: Path) -> None:
    proc = tmp_path / "proc"
    SimHardware(load_shape("gb200-node"), proc_root=proc)
    devices = (proc / PROC_DEVICES).read_text()
    assert imex_channels_major(devices) == 510
    assert char_major(devices, "nvidia-caps") == 236
    assert "510 nvidia-caps-imex-channels\n511 nvidia-uvm\n" in devices  # major order
    capability = parse_capability((proc / FABRIC_IMEX_MGMT).read_text(), path="x")
    assert capability == Capability(minor=4323, mode=256, modify=True)


def test_missing_lines_are_errors_that_name_the_file() -> None:
    devices = "Character devices:\n195 nvidia\n\nBlock devices:\n510 nvidia-caps-imex-channels\n"
    with pytest.raises(
        CdiError,
        match=r"/host/proc/devices: no character device "
        r"'nvidia-caps-imex-channels'",
    ):
        imex_channels_major(devices, path="/host/proc/devices")
    with pytest.raises(CdiError, match="fabric-imex-mgmt: no DeviceFileModify line"):
        parse_capability("DeviceFileMinor: 1\nDeviceFileMode: 256\n", path="fabric-imex-mgmt")
