"""Host /proc readers against fake proc trees, including garbage."""

from __future__ import annotations

from pathlib import Path

import pytest

from dra_driver.errors import CdiError, CheckpointError
from dra_driver.node.host import HostInfo

PROC_DEVICES = """\
Character devices:
  1 mem
  4 /dev/vc/0
  5 /dev/tty
195 nvidia-frontend
234 nvidia-uvm
508 nvidia-caps
510 nvidia-caps-imex-channels

Block devices:
  7 loop
259 blkext
"""


def write(root: Path, rel: str, text: str) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_char_major_reads_character_section(tmp_path: Path) -> None:
    write(tmp_path, "devices", PROC_DEVICES)
    host = HostInfo(tmp_path)
    assert host.char_major("nvidia-uvm") == 234
    assert host.char_major("nvidia-caps") == 508
    assert host.char_major("nvidia-caps-imex-channels") == 510
    assert host.char_major("/dev/vc/0") == 4


def test_nvidia_and_nvidia_frontend_are_aliases(tmp_path: Path) -> None:
    write(tmp_path, "devices", PROC_DEVICES)
    assert HostInfo(tmp_path).char_major("nvidia") == 195
    write(tmp_path, "devices", "Character devices:\n195 nvidia\n")
    assert HostInfo(tmp_path).char_major("nvidia-frontend") == 195


def test_block_devices_are_not_character_devices(tmp_path: Path) -> None:
    write(tmp_path, "devices", PROC_DEVICES)
    with pytest.raises(CdiError, match="'loop'"):
        HostInfo(tmp_path).char_major("loop")


def test_missing_module_names_file_and_device(tmp_path: Path) -> None:
    write(tmp_path, "devices", "Character devices:\n195 nvidia\n")
    with pytest.raises(CdiError, match=r"devices: no character device 'nvidia-uvm'"):
        HostInfo(tmp_path).char_major("nvidia-uvm")


def test_missing_proc_devices(tmp_path: Path) -> None:
    with pytest.raises(CdiError, match=rf"{tmp_path}/devices: file does not exist"):
        HostInfo(tmp_path).char_major("nvidia-uvm")


@pytest.mark.parametrize("line", ["abc nvidia-uvm", "234", "-1 nvidia-uvm", "2x4 nvidia-uvm"])
def test_garbled_proc_devices_line(tmp_path: Path, line: str) -> None:
    write(tmp_path, "devices", f"Character devices:\n{line}\n")
    with pytest.raises(CdiError, match="line 2"):
        HostInfo(tmp_path).char_major("nvidia-uvm")


def test_binary_proc_devices(tmp_path: Path) -> None:
    (tmp_path / "devices").write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(CdiError, match="not UTF-8"):
        HostInfo(tmp_path).char_major("nvidia-uvm")


def cap_file(minor: int, mode: int) -> str:
    return f"DeviceFileMinor: {minor}\nDeviceFileMode: {mode}\nDeviceFileModify: 1\n"


def test_mig_cap_for_gi_and_ci(tmp_path: Path) -> None:
    write(tmp_path, "driver/nvidia/capabilities/gpu0/mig/gi1/access", cap_file(12, 292))
    write(tmp_path, "driver/nvidia/capabilities/gpu0/mig/gi1/ci0/access", cap_file(13, 292))
    write(tmp_path, "driver/nvidia/capabilities/gpu3/mig/gi3/ci3/access", cap_file(439, 256))
    host = HostInfo(tmp_path)
    assert host.mig_cap(0, 1) == (12, 0o444)
    assert host.mig_cap(0, 1, 0) == (13, 0o444)
    assert host.mig_cap(3, 3, 3) == (439, 0o400)


def test_mig_cap_missing_file_names_path(tmp_path: Path) -> None:
    with pytest.raises(CdiError, match=r"gpu2/mig/gi7/ci1/access: file does not exist"):
        HostInfo(tmp_path).mig_cap(2, 7, 1)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("DeviceFileMode: 292\n", "DeviceFileMinor is missing"),
        ("DeviceFileMinor: 12\n", "DeviceFileMode is missing"),
        ("DeviceFileMinor: twelve\nDeviceFileMode: 292\n", "not decimal"),
        ("DeviceFileMinor: 12\nDeviceFileMode: 0o444\n", "not decimal"),
        ("DeviceFileMinor: -3\nDeviceFileMode: 292\n", "out of range"),
        ("DeviceFileMinor: 12\nDeviceFileMode: 4096\n", "out of range"),
        ("", "DeviceFileMinor is missing"),
    ],
)
def test_mig_cap_garbage(tmp_path: Path, text: str, message: str) -> None:
    write(tmp_path, "driver/nvidia/capabilities/gpu0/mig/gi1/access", text)
    with pytest.raises(CdiError, match=message) as info:
        HostInfo(tmp_path).mig_cap(0, 1)
    assert "gpu0/mig/gi1/access" in str(info.value)


def test_boot_id(tmp_path: Path) -> None:
    write(tmp_path, "sys/kernel/random/boot_id", "0f3b1c9e-8a5d-4b61-9d2e-6c7a8b9c0d1e\n")
    assert HostInfo(tmp_path).boot_id() == "0f3b1c9e-8a5d-4b61-9d2e-6c7a8b9c0d1e"


@pytest.mark.parametrize("text", ["", "\n", "two words\n"])
def test_boot_id_garbage(tmp_path: Path, text: str) -> None:
    write(tmp_path, "sys/kernel/random/boot_id", text)
    with pytest.raises(CheckpointError, match="boot_id: not a boot id"):
        HostInfo(tmp_path).boot_id()


def test_boot_id_missing(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match="boot_id: file does not exist"):
        HostInfo(tmp_path).boot_id()


def test_real_proc_boot_id_is_readable() -> None:
    boot_id = HostInfo().boot_id()
    assert len(boot_id) == 36


def test_mig_cap_agrees_with_mig_minors_and_a_mismatch_is_refused(tmp_path: Path) -> None:
    write(tmp_path, "driver/nvidia/capabilities/gpu0/mig/gi1/access", cap_file(12, 292))
    write(tmp_path, "driver/nvidia/capabilities/gpu0/mig/gi1/ci0/access", cap_file(13, 292))
    write(
        tmp_path,
        "driver/nvidia-caps/mig-minors",
        "config 1\nmonitor 2\ngpu0/gi0/access 3\ngpu0/gi1/access 12\ngpu0/gi1/ci0/access 14\n",
    )
    host = HostInfo(tmp_path)
    assert host.mig_minors()["gpu0/gi1/access"] == 12
    assert host.mig_cap(0, 1) == (12, 0o444)
    with pytest.raises(CdiError, match=r"DeviceFileMinor 13 differs from gpu0/gi1/ci0/access 14"):
        host.mig_cap(0, 1, 0)


def write_drm(sys_root: Path, bus_id: str, nodes: dict[str, str]) -> None:
    for name, dev in nodes.items():
        write(sys_root, f"bus/pci/devices/{bus_id}/drm/{name}/dev", dev + "\n")


def test_drm_nodes_of_a_gpu_come_from_its_pci_device_in_sysfs(tmp_path: Path) -> None:
    sys_root = tmp_path / "sys"
    write_drm(sys_root, "0000:3b:00.0", {"card1": "226:1", "renderD128": "226:128"})
    write_drm(sys_root, "0000:86:00.0", {"card2": "226:2", "renderD129": "226:129"})
    (sys_root / "bus/pci/devices/0000:3b:00.0/drm/version").mkdir()  # not a node
    host = HostInfo(tmp_path / "proc", sys_root=sys_root)
    assert host.drm_nodes("0000:3b:00.0") == [("card1", 226, 1), ("renderD128", 226, 128)]
    assert host.drm_nodes("0000:c1:00.0") == []  # no nvidia-drm: no DRM nodes
    write_drm(sys_root, "0000:c1:00.0", {"card3": "garbage"})
    with pytest.raises(CdiError, match=r"0000:c1:00.0/drm/card3/dev: not '<major>:<minor>'"):
        host.drm_nodes("0000:c1:00.0")
