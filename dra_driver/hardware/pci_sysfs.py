"""A node's NVIDIA GPUs as the kernel's PCI layer shows them: sysfs and the /dev/vfio nodes.

VFIO passthrough works below NVML: a GPU handed to a VM is bound to
`vfio-pci`, which NVML cannot see. What the plugin needs to know and do
there is read from and written to sysfs, as NVIDIA's plugin does through
go-nvlib's `nvpci` and `nvpassthrough`:

* enumerate the NVIDIA GPUs (`bus/pci/devices/*` with vendor 0x10de and a
  display class, 0x03xxxx), in address order: a GPU's index there names its
  `gpu-vfio-<idx>` device;
* read a GPU's driver (`driver` link), `driver_override`, IOMMU group
  (`iommu_group` link), iommufd cdev (`vfio-dev/vfio<N>`) and NUMA node;
* change its driver with NVIDIA's sequence (`change_driver`): clear
  `driver_override`, unbind from the current driver, set `driver_override`
  to the new one, bind;
* say whether the kernel has an IOMMU (`kernel/iommu_groups` not empty) and
  iommufd (`/dev/iommu`), and where a group's or cdev's node is in `/dev`.

Writes go through a `SysfsWriter`: on a node, a plain write of the file
(`FileWriter`); on a simulated node, the simulator's kernel
(`dra_driver.hardware.simulated.pci_bus`), which refuses what the kernel
refuses with the same errno. No library reads these files (pyudev needs
libudev and offers no driver binding), so this module does.
"""

from __future__ import annotations

import errno
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Protocol

from dra_driver.errors import PassthroughError

NVIDIA_VENDOR: Final = 0x10DE
NVIDIA_DRIVER: Final = "nvidia"
VFIO_DRIVER: Final = "vfio-pci"
DEVICES_DIR: Final = "bus/pci/devices"
DRIVERS_DIR: Final = "bus/pci/drivers"


class SysfsWriter(Protocol):
    """Writes `text` to a sysfs file; OSError (with the kernel's errno) when refused."""

    def __call__(self, path: Path, text: str) -> None: ...


def file_writer(path: Path, text: str) -> None:
    """A real node's writer: one write(2) of `text` to the file, as `echo > file` does."""
    with open(path, "w", encoding="ascii") as sysfs_file:
        sysfs_file.write(text)


@dataclass(frozen=True)
class PciGpu:
    """One NVIDIA GPU as sysfs lists it (`index`: its place among them, in address order)."""

    index: int
    address: str  # "0000:3b:00.0"
    vendor_id: int
    device_id: int
    numa_node: int | None


class PciSysfs:
    """The PCI files under `sys_root` (default `/sys`) and device nodes under `dev_root`."""

    def __init__(
        self,
        sys_root: Path = Path("/sys"),
        dev_root: Path = Path("/dev"),
        writer: SysfsWriter = file_writer,
    ) -> None:
        self.sys_root = Path(sys_root)
        self.dev_root = Path(dev_root)
        self._write = writer

    # -- reading -------------------------------------------------------------------

    def gpus(self) -> list[PciGpu]:
        """Every NVIDIA display-class PCI function, in address order (nvpci's `GetGPUs`)."""
        folder = self.sys_root / DEVICES_DIR
        try:
            addresses = sorted(entry.name for entry in folder.iterdir())
        except OSError:
            return []
        found: list[PciGpu] = []
        for address in addresses:
            vendor = self._hex(address, "vendor")
            klass = self._hex(address, "class")
            if vendor != NVIDIA_VENDOR or klass is None or klass >> 16 != 0x03:
                continue
            numa = self._read(address, "numa_node")
            found.append(
                PciGpu(
                    index=len(found),
                    address=address,
                    vendor_id=vendor,
                    device_id=self._hex(address, "device") or 0,
                    numa_node=int(numa) if numa and numa.lstrip("-").isdigit() else None,
                )
            )
        return found

    def driver(self, address: str) -> str | None:
        """The driver bound to the device (basename of its `driver` link); None for none."""
        try:
            return os.path.basename(os.readlink(self._device(address) / "driver"))
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise PassthroughError(f"{self._device(address)}/driver: cannot read: {exc}") from exc

    def driver_override(self, address: str) -> str:
        """The device's `driver_override` ("" when none: the kernel shows "(null)")."""
        value = self._read(address, "driver_override") or ""
        return "" if value == "(null)" else value

    def iommu_group(self, address: str) -> int | None:
        """The device's IOMMU group number; None when the kernel has no IOMMU for it."""
        try:
            name = os.path.basename(os.readlink(self._device(address) / "iommu_group"))
        except OSError:
            return None
        return int(name) if name.isdigit() else None

    def iommufd_cdev(self, address: str) -> str | None:
        """The device's iommufd cdev name ("vfio3") while vfio-pci holds it on an iommufd
        kernel; None otherwise."""
        folder = self._device(address) / "vfio-dev"
        try:
            names = sorted(p.name for p in folder.iterdir() if p.name.startswith("vfio"))
        except OSError:
            return None
        return names[0] if names else None

    def iommu_enabled(self) -> bool:
        """Whether the kernel has an IOMMU: `kernel/iommu_groups` has an entry."""
        try:
            return any(True for _ in (self.sys_root / "kernel" / "iommu_groups").iterdir())
        except OSError:
            return False

    def iommufd_enabled(self) -> bool:
        """Whether the kernel has iommufd: `/dev/iommu` exists (NVIDIA's test)."""
        return (self.dev_root / "iommu").exists()

    def group_node(self, group: int) -> Path:
        """Where the legacy VFIO group node of `group` is on this host (`/dev/vfio/<group>`)."""
        return self.dev_root / "vfio" / str(group)

    def cdev_node(self, cdev: str) -> Path:
        """Where an iommufd cdev's node is on this host (`/dev/vfio/devices/vfio<N>`)."""
        return self.dev_root / "vfio" / "devices" / cdev

    # -- writing -------------------------------------------------------------------

    def write_override(self, address: str, driver: str | None) -> None:
        """Set `driver_override` to `driver`, or clear it (None: a lone newline)."""
        self._write_file(self._device(address) / "driver_override", f"{driver or ''}\n")

    def unbind(self, address: str) -> None:
        """Unbind the device from its driver (through its `driver` link); none bound: no-op."""
        if self.driver(address) is None:
            return
        self._write_file(self._device(address) / "driver" / "unbind", address)

    def bind(self, address: str, driver: str) -> None:
        """Ask `driver` to take the device (`bus/pci/drivers/<driver>/bind`)."""
        self._write_file(self.sys_root / DRIVERS_DIR / driver / "bind", address)

    # -- helpers -------------------------------------------------------------------

    def _device(self, address: str) -> Path:
        return self.sys_root / DEVICES_DIR / address

    def _read(self, address: str, name: str) -> str | None:
        try:
            return (self._device(address) / name).read_text(encoding="ascii").strip()
        except (OSError, UnicodeDecodeError):
            return None

    def _hex(self, address: str, name: str) -> int | None:
        text = self._read(address, name)
        try:
            return int(text, 16) if text else None
        except ValueError:
            return None

    def _write_file(self, path: Path, text: str) -> None:
        try:
            self._write(path, text)
        except OSError as exc:
            reason = os.strerror(exc.errno) if exc.errno else str(exc)
            hint = _HINTS.get(exc.errno or 0, "")
            raise PassthroughError(
                f"writing {text.strip()!r} to {path} failed: {reason}{hint}",
                errno_code=exc.errno,
            ) from exc


_HINTS: Final = {
    errno.EBUSY: " (the device is in use or already bound)",
    errno.ENODEV: " (the driver does not accept the device: check driver_override)",
}
