"""PCI bus ids and PCIe roots read the way NVIDIA's driver publishes them."""

from __future__ import annotations

from pathlib import Path

import pytest

from dra_driver.errors import NvmlError
from dra_driver.hardware.nvml.pci import normalize_pci_bus_id, pci_topology


def make_device(sysfs: Path, chain: list[str], numa: str | None) -> None:
    device_dir = sysfs.joinpath("devices", *chain)
    device_dir.mkdir(parents=True)
    if numa is not None:
        (device_dir / "numa_node").write_text(numa)
    link = sysfs / "bus" / "pci" / "devices" / chain[-1]
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(device_dir)


def test_root_complex_behind_bridges_and_numa_node(tmp_path: Path) -> None:
    make_device(tmp_path, ["pci0000:3a", "0000:3a:00.0", "0000:3b:00.0", "0000:3f:00.0"], "1\n")
    assert pci_topology(tmp_path, "0000:3f:00.0") == ("pci0000:3a", 1)


def test_no_numa_is_none(tmp_path: Path) -> None:
    make_device(tmp_path, ["pci0009:00", "0009:01:00.0"], "-1\n")
    assert pci_topology(tmp_path, "0009:01:00.0") == ("pci0009:00", None)
    make_device(tmp_path, ["pci0000:00", "0000:07:00.0"], None)
    assert pci_topology(tmp_path, "0000:07:00.0") == ("pci0000:00", None)


def test_unknown_device_or_no_sysfs_is_unknown(tmp_path: Path) -> None:
    assert pci_topology(tmp_path, "0000:99:00.0") == (None, None)
    assert pci_topology(None, "0000:99:00.0") == (None, None)


@pytest.mark.parametrize(
    ("raw", "normalized"),
    [
        (b"00000000:3F:00.0", "0000:3f:00.0"),
        ("00000000:3F:00.0", "0000:3f:00.0"),
        (b"00000009:01:00.0", "0009:01:00.0"),  # GH200: nonzero domain kept
        ("0000:3f:00.0", "0000:3f:00.0"),  # already short
        (b"00000000:B7:00.0\x00\x00", "0000:b7:00.0"),
    ],
)
def test_bus_id_normalization(raw: bytes | str, normalized: str) -> None:
    assert normalize_pci_bus_id(raw) == normalized


def test_malformed_bus_id_is_an_nvml_error() -> None:
    with pytest.raises(NvmlError, match="PCI bus id 'garbage'"):
        normalize_pci_bus_id(b"garbage")
