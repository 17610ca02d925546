"""The simulated node's PCI side: which kernel driver holds each GPU, as sysfs and /dev show it.

VFIO passthrough (`kubelet_plugin.vfio`) moves a GPU from the `nvidia`
driver to `vfio-pci` by writing sysfs files, and hands the VM the device
nodes udev then makes. On a simulated node those writes come here
(`SimHardware.write_sysfs`), and are refused or carried out as the kernel
does (drivers/pci/pci-driver.c, pci-sysfs.c, bus.c):

* `devices/<bdf>/driver_override`: any text; a lone newline clears it (reads
  back `(null)`);
* `drivers/<drv>/unbind` (or `devices/<bdf>/driver/unbind`, the same file
  through the `driver` link): ENODEV unless `<drv>` holds the device;
  EBUSY while a process has the GPU open (the simulator's stand-in for the
  nvidia driver waiting on its open handles);
* `drivers/<drv>/bind`: EBUSY if a driver holds the device, ENODEV when its
  `driver_override` names another driver or when `vfio-pci` is asked without
  one (vfio-pci matches no device by id);
* any other file: EACCES (a read-only attribute); an unknown path: ENOENT.

`PciTree.sync` writes the files a reader sees: under the fake `/sys`,
`bus/pci/devices/<bdf>/{vendor,device,class,numa_node,driver_override}`,
the `driver` and `iommu_group` links, `vfio-dev/vfio<N>` while vfio-pci
holds the GPU on an iommufd kernel, `bus/pci/drivers/<drv>/{bind,unbind}`,
`kernel/iommu_groups/<g>/devices/<bdf>` and `module/vfio_pci`; under the
fake `/dev`, `vfio/vfio`, `iommu` (iommufd kernels) and, once udev got to
them (`vfio-node` latency after the bind), `vfio/<group>` and
`vfio/devices/vfio<N>`. Device nodes are plain files: only their presence
matters to the plugin, which never opens them.

The simulated NVML keeps listing a GPU vfio-pci holds (a real NVML
initialized after the bind would not); no CUDA process can start on it
(`SimHardware.run_workload`), and the plugin asks NVML nothing about it.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Final

from dra_driver.files.atomic import atomic_write, remove_file
from dra_driver.hardware.simulated.state import GpuState, NodeState

NVIDIA_DRIVER: Final = "nvidia"
VFIO_DRIVER: Final = "vfio-pci"
DRIVERS: Final = (NVIDIA_DRIVER, VFIO_DRIVER)
DEVICES_DIR: Final = "bus/pci/devices"
DRIVERS_DIR: Final = "bus/pci/drivers"
GPU_CLASS: Final = 0x030200  # 3D controller: NVIDIA's data-center GPUs
NVIDIA_VENDOR: Final = 0x10DE
DEFAULT_NODE_DELAY_S: Final = 0.05
"""How long udev takes to make the /dev/vfio nodes after a bind, unless `--sim-latency
vfio-node=<s>` says otherwise."""


def write(
    state: NodeState, rel_path: str, text: str, *, in_use: set[int], now: float, node_delay: float
) -> None:
    """Apply a write of `text` to `<sys>/<rel_path>` to `state`, as the kernel would.

    `in_use` holds the NVML indices of GPUs a process has open. Raises
    OSError with the kernel's errno.
    """
    parts = Path(rel_path).parts
    if len(parts) == 5 and parts[:3] == ("bus", "pci", "devices"):
        gpu = _gpu_at(state, parts[3], rel_path)
        if parts[4] == "driver_override":
            value = text[:-1] if text.endswith("\n") else text
            gpu.driver_override = value
            return
        raise _error(errno.EACCES, rel_path)
    if (
        len(parts) == 6
        and parts[:3] == ("bus", "pci", "devices")
        and parts[4:] == ("driver", "unbind")
    ):
        gpu = _gpu_at(state, parts[3], rel_path)
        if not gpu.pci_driver:
            raise _error(errno.ENOENT, rel_path)
        parts = ("bus", "pci", "drivers", gpu.pci_driver, "unbind")
    if len(parts) == 5 and parts[:3] == ("bus", "pci", "drivers"):
        driver, action = parts[3], parts[4]
        if driver not in DRIVERS or action not in ("bind", "unbind"):
            raise _error(errno.ENOENT, rel_path)
        gpu = _gpu_named(state, text.strip(), rel_path)
        if action == "unbind":
            _unbind(gpu, driver, rel_path, in_use)
        else:
            _bind(state, gpu, driver, rel_path, now + node_delay)
        return
    raise _error(errno.ENOENT, rel_path)


def _unbind(gpu: GpuState, driver: str, rel_path: str, in_use: set[int]) -> None:
    if gpu.pci_driver != driver:
        raise _error(errno.ENODEV, rel_path)
    if driver == NVIDIA_DRIVER and gpu.index in in_use:
        raise _error(errno.EBUSY, rel_path)
    gpu.pci_driver = ""
    gpu.vfio_cdev = None
    gpu.vfio_nodes_at = 0.0


def _bind(state: NodeState, gpu: GpuState, driver: str, rel_path: str, nodes_at: float) -> None:
    if gpu.pci_driver:
        raise _error(errno.EBUSY, rel_path)
    override = gpu.driver_override
    if (override and override != driver) or (driver == VFIO_DRIVER and not override):
        raise _error(errno.ENODEV, rel_path)
    gpu.pci_driver = driver
    if driver == VFIO_DRIVER:
        taken = {g.vfio_cdev for g in state.gpus if g.vfio_cdev is not None}
        gpu.vfio_cdev = min(n for n in range(len(state.gpus) + 1) if n not in taken)
        gpu.vfio_nodes_at = nodes_at


def _gpu_at(state: NodeState, bdf: str, rel_path: str) -> GpuState:
    for gpu in state.gpus:
        if gpu.pci_bus_id == bdf:
            return gpu
    raise _error(errno.ENOENT, rel_path)


def _gpu_named(state: NodeState, bdf: str, rel_path: str) -> GpuState:
    for gpu in state.gpus:
        if gpu.pci_bus_id == bdf:
            return gpu
    raise _error(errno.ENODEV, rel_path)


def _error(code: int, rel_path: str) -> OSError:
    return OSError(code, os.strerror(code), rel_path)


class PciTree:
    """The fake `/sys` PCI files and `/dev/vfio` nodes of a simulated node (see the module
    docstring); `sync` makes them match a state."""

    def __init__(self, sys_root: Path, dev_root: Path) -> None:
        self.sys_root = Path(sys_root)
        self.dev_root = Path(dev_root)
        self._synced: tuple[object, ...] | None = None  # what the files show now

    def sync(self, state: NodeState, now: float) -> float | None:
        """Write the files of `state` as they are at `now`; the time at which a device
        node still missing is due (for a later `sync`), or None. Nothing is read or
        written when the PCI side did not change since the last call (most state changes
        are MIG or workload changes)."""
        key = (
            state.iommufd,
            tuple(
                (
                    g.pci_bus_id,
                    g.pci_driver,
                    g.driver_override,
                    g.vfio_cdev,
                    g.vfio_nodes_at,
                    now >= g.vfio_nodes_at,  # udev made the nodes
                )
                for g in state.gpus
            ),
        )
        if key == self._synced:
            pending = [
                g.vfio_nodes_at
                for g in state.gpus
                if g.pci_driver == VFIO_DRIVER and now < g.vfio_nodes_at
            ]
            return min(pending) if pending else None
        due = self._write_files(state, now)
        self._synced = key
        return due

    def _write_files(self, state: NodeState, now: float) -> float | None:
        due: float | None = None
        sys, dev = self.sys_root, self.dev_root
        for driver in DRIVERS:
            for action in ("bind", "unbind"):
                _file(sys / DRIVERS_DIR / driver / action, "")
        (sys / "module" / "vfio_pci").mkdir(parents=True, exist_ok=True)
        (sys / "module" / "nvidia").mkdir(parents=True, exist_ok=True)
        _file(dev / "vfio" / "vfio", "")
        _present(dev / "iommu", state.iommufd)
        for gpu in state.gpus:
            folder = sys / DEVICES_DIR / gpu.pci_bus_id
            model = gpu.model
            _file(folder / "vendor", f"0x{NVIDIA_VENDOR:04x}\n")
            _file(folder / "device", f"0x{model.pci_device_id >> 16:04x}\n")
            _file(folder / "class", f"0x{GPU_CLASS:06x}\n")
            _file(folder / "numa_node", f"{gpu.numa_node}\n")
            _file(folder / "driver_override", f"{gpu.driver_override or '(null)'}\n")
            group = gpu.iommu_group
            _link(folder / "iommu_group", f"../../../../kernel/iommu_groups/{group}")
            _link(
                sys / "kernel" / "iommu_groups" / str(group) / "devices" / gpu.pci_bus_id,
                f"../../../../{DEVICES_DIR}/{gpu.pci_bus_id}",
            )
            _link(folder / "driver", f"../../drivers/{gpu.pci_driver}" if gpu.pci_driver else None)
            vfio = gpu.pci_driver == VFIO_DRIVER
            cdev = gpu.vfio_cdev if vfio and state.iommufd else None
            vfio_dev = folder / "vfio-dev"
            for stale in sorted(vfio_dev.glob("vfio*")) if vfio_dev.is_dir() else []:
                if stale.name != f"vfio{cdev}":
                    remove_file(stale / "dev")
                    stale.rmdir()
            if cdev is not None:
                _file(vfio_dev / f"vfio{cdev}" / "dev", f"{VFIO_DEV_MAJOR}:{cdev}\n")
            ready = vfio and now >= gpu.vfio_nodes_at
            if vfio and not ready:
                due = gpu.vfio_nodes_at if due is None else min(due, gpu.vfio_nodes_at)
            _present(dev / "vfio" / str(group), ready)
        live = {
            f"vfio{g.vfio_cdev}"
            for g in state.gpus
            if g.pci_driver == VFIO_DRIVER
            and g.vfio_cdev is not None
            and state.iommufd
            and now >= g.vfio_nodes_at
        }
        nodes = dev / "vfio" / "devices"
        for node in sorted(nodes.glob("vfio*")) if nodes.is_dir() else []:
            if node.name not in live:
                remove_file(node)
        for name in live:
            _file(nodes / name, "")
        return due


VFIO_DEV_MAJOR: Final = 511
"""The dynamic char major the simulated kernel gave "vfio-dev" (/dev/vfio/devices/vfio<N>)."""


def _file(path: Path, text: str) -> None:
    data = text.encode()
    try:
        if path.read_bytes() == data:
            return
    except FileNotFoundError:
        path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, data)


def _present(path: Path, present: bool) -> None:
    if present:
        _file(path, "")
    else:
        remove_file(path)


def _link(path: Path, target: str | None) -> None:
    try:
        current: str | None = os.readlink(path)
    except FileNotFoundError:
        current = None
    if current == target:
        return
    if current is not None:
        path.unlink()
    if target is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.symlink_to(target)
