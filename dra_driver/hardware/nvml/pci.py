"""PCI facts of a GPU: the bus id in go-nvlib's form, and its place in the PCIe tree.

NVIDIA's driver publishes the bus id as go-nvlib normalises it and the PCIe
root from sysfs (the `resource.kubernetes.io/pcieRoot` attribute used to align
GPUs with NICs), so both must come out the same on every backend.
"""

from __future__ import annotations

from pathlib import Path

from dra_driver.errors import NvmlError
from dra_driver.hardware.nvml import codes


def normalize_pci_bus_id(raw: bytes | str) -> str:
    """go-nvlib's bus id: lower case, 8-digit domain cut to 4 digits.

    "00000000:3F:00.0" becomes "0000:3f:00.0".

    `nvmlPciInfo_t.busId` is a ctypes char field: nvidia-ml-py 13.x hands it out
    as str (its `_PrintableStructure` decodes bytes), older releases as bytes;
    both are accepted. Grace systems keep their nonzero domain
    ("00000009:01:00.0" -> "0009:01:00.0"). An id that already has a 4-digit
    domain is only lower-cased.
    """
    text = raw.decode("ascii", "replace") if isinstance(raw, bytes) else raw
    text = text.split("\x00", 1)[0].strip().lower()
    domain, sep, rest = text.partition(":")
    if not sep or not rest:
        raise NvmlError(
            codes.ERROR_UNKNOWN, f"PCI bus id {text!r}: expected 'domain:bus:device.function'"
        )
    if len(domain) == 8 and domain.startswith("0000"):
        domain = domain[4:]
    return f"{domain}:{rest}"


def pci_topology(sysfs_root: Path | None, bus_id: str) -> tuple[str | None, int | None]:
    """PCIe root complex ("pci0000:00") and NUMA node of a device, where sysfs says.

    `<sysfs>/bus/pci/devices/<bdf>` links into `<sysfs>/devices/pci<dddd:bb>/...`;
    the first path part is the root complex. `numa_node` of -1 (no NUMA) or any
    unreadable value gives None, as does a missing device or `sysfs_root=None`.
    """
    if sysfs_root is None:
        return None, None
    device_dir = sysfs_root / "bus" / "pci" / "devices" / bus_id
    try:
        real = device_dir.resolve(strict=True)
        parts = real.relative_to((sysfs_root / "devices").resolve(strict=True)).parts
    except (OSError, ValueError):
        return None, None
    root = parts[0] if parts and parts[0].startswith("pci") else None
    try:
        value = int((device_dir / "numa_node").read_text().strip())
    except (OSError, ValueError):
        return root, None
    return root, value if value >= 0 else None
