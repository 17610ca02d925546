"""`Hardware`: every seam through which a process sees a node's GPUs, in one value.

The plugin, the inventory, status and cdi commands and the demo run the same
code on a real node and on a simulated one. What differs is only what stands
behind these seams: NVML (`nvml.interface.Nvml`), the host's procfs
(`HostInfo`: device numbers, MIG capabilities, boot id), the driver's user
space under the driver root (whose `nvidia-cuda-mps-control` starts the MPS
daemons, and whose modprobe loads a missing nvidia-uvm), the GPU policy
(`gpu_policy.GpuPolicy`: compute mode and time-slice), the device-health
events and the PCI layer (sysfs and /dev/vfio, for VFIO passthrough). The
composition root builds one
(`dra_driver.composition.hardware`); everything else takes it as given and
never asks which kind it got.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from pathlib import Path

from dra_driver.container.driver_root import DriverBinaries, DriverUserSpace
from dra_driver.hardware.gpu_policy import GpuPolicy
from dra_driver.hardware.nvml.interface import HealthEventSource, Nvml
from dra_driver.hardware.pci_sysfs import PciSysfs
from dra_driver.node.host import HostInfo
from dra_driver.node.kernel_modules import ModuleLoader


@dataclass
class Hardware:
    """What a process needs to see and set up GPUs.

    `mps_shm_tmpfs`: MPS daemons get a tmpfs of their own as `/dev/shm`
    (needs root and a real node, as NVIDIA's plugin has); otherwise a plain
    directory (`kubelet_plugin.mps_daemons`).
    """

    nvml: Nvml
    host: HostInfo
    driver: DriverUserSpace
    gpu_policy: GpuPolicy
    health: HealthEventSource | None = None  # device-health events (both backends have them)
    mps_shm_tmpfs: bool = False
    # Loads a missing nvidia-uvm (`dra_driver.node.kernel_modules`); None: cannot.
    modules: ModuleLoader | None = None
    dev_root: Path | None = None  # where missing control nodes are made; None: not made
    pci: PciSysfs | None = None  # the PCI side, for VFIO passthrough (None: not available)
    # NVML let go of every GPU for a block: a GPU changes kernel driver only then
    # (`RealNvml.released`); a simulated node's kernel does not see NVML's handles.
    release_nvml: Callable[[], AbstractContextManager[None]] = nullcontext

    def driver_version(self) -> str:
        """The driver version NVML reports (what the driver files must match)."""
        return self.nvml.system().driver_version

    def driver_binaries(self) -> DriverBinaries:
        """nvidia-smi and the MPS binaries of the running driver, as this process runs them."""
        return self.driver.binaries(self.driver_version())
