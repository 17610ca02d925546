"""Pick the hardware a process talks to from one `--nvml` flag.

The plugin, the inventory, status, cdi and MIG commands and the demo all run
the same code against either the GPUs of the machine (`"real"`: pynvml, the
real `/proc`, the driver's nvidia-smi) or a simulated node (`"sim:<shape>"`:
`SimHardware` behind `SimNvml` and `SimGpuPolicy`, with a fake `/proc` tree
kept next to the state file). This module is the one place that knows how to
build each, and only composition roots import it (`.importlinter`), so no
other module can branch on "is this simulated".

Both come with their driver root (`DriverUserSpace`): real hardware loads
`libnvidia-ml.so.1` from the driver root given (default `/`); a simulated
node gets a fake root of its shape's driver version next to its state file
(or the root given), generated when first needed. Its
`nvidia-cuda-mps-control` runs the simulated MPS control daemon, so MPS
goes through the plugin's real daemon code too.
"""

from __future__ import annotations

import dataclasses
import shutil
import tempfile
import weakref
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from dra_driver.container.driver_root import DriverRoot, DriverUserSpace
from dra_driver.errors import ConfigError
from dra_driver.hardware.gpu_policy import NvidiaSmi
from dra_driver.hardware.machine import Hardware
from dra_driver.hardware.pci_sysfs import PciSysfs, SysfsWriter
from dra_driver.hardware.simulated.gpu_policy import SimGpuPolicy
from dra_driver.hardware.simulated.hardware import SimHardware
from dra_driver.hardware.simulated.node_files import (
    sim_dev_root,
    sim_driver_root,
    sim_proc_root,
    sim_sys_root,
)
from dra_driver.node.host import HostInfo
from dra_driver.node.kernel_modules import Modprobe

REAL_SPEC = "real"
SIM_PREFIX = "sim:"
SPEC_FORMS = (
    "'real' (this machine's GPUs through NVML) or 'sim:<shape>' where <shape> is a built-in "
    "node shape (dgx-a100-40gb, dgx-a100-80gb, dgx-h100, dgx-h200, a30-node, l4-node, "
    "h100-pcie-node) or the path of a YAML shape file"
)


@dataclass(frozen=True)
class SimulatedNode:
    """A simulated node: the `Hardware` the code under test sees, and the simulator behind it
    (for tests and the demo to read or change the node directly)."""

    hardware: Hardware
    sim: SimHardware


def open_hardware(
    spec: str,
    *,
    sim_state: Path | None = None,
    node_name: str = "sim-node",
    latency: Mapping[str, float] | None = None,
    driver_root: DriverRoot | None = None,
) -> Hardware:
    """Open the hardware `spec` names (see SPEC_FORMS).

    For a simulated node, `sim_state` is the state file shared with other
    processes (its fake `/proc` is `<sim_state>.proc/`); without it the node
    lives in memory with its `/proc` in a temporary directory removed when the
    simulator is garbage collected. `latency` (seconds per operation) only
    applies to simulated nodes. `driver_root` is where the driver's files are
    (default: `/` for real hardware, a generated fake root for a simulated
    node). Real hardware loads NVML from it: `DriverRootError` if it holds no
    `libnvidia-ml.so.1`, `NvmlError` if the library cannot be initialised.
    """
    if spec == REAL_SPEC:
        return open_real(driver_root)
    if not spec.startswith(SIM_PREFIX) or not spec[len(SIM_PREFIX) :].strip():
        raise ConfigError(f"--nvml {spec!r}: expected {SPEC_FORMS}")
    return open_simulated(
        spec[len(SIM_PREFIX) :].strip(),
        sim_state=sim_state,
        node_name=node_name,
        latency=latency,
        driver_root=driver_root,
    ).hardware


def open_real(driver_root: DriverRoot | None = None) -> Hardware:
    """This machine's GPUs: NVML loaded from the driver root, `/proc`, the driver's nvidia-smi."""
    from dra_driver.container.driver_root import nvml_library
    from dra_driver.hardware.nvml.real import RealNvml, load_pynvml

    root = driver_root or DriverRoot()
    nvml = RealNvml(lib=load_pynvml(nvml_library(root)))
    user_space = DriverUserSpace(root)
    return Hardware(
        nvml=nvml,
        host=HostInfo(Path("/proc")),
        driver=user_space,
        gpu_policy=NvidiaSmi(lambda: user_space.binaries(nvml.system().driver_version)),
        health=nvml,
        mps_shm_tmpfs=True,
        # As `nvidia-ctk system create-device-nodes --load-kernel-modules`: modprobe in a
        # chroot of the driver root, nodes under its /dev.
        modules=Modprobe(root.local_path),
        dev_root=root.local_path / "dev",
        pci=PciSysfs(),
        release_nvml=nvml.released,
    )


def open_simulated(
    shape_name: str,
    *,
    sim_state: Path | None = None,
    node_name: str = "sim-node",
    latency: Mapping[str, float] | None = None,
    driver_root: DriverRoot | None = None,
) -> SimulatedNode:
    """A simulated node of shape `shape_name` (see `open_hardware` for the arguments)."""
    from dra_driver.hardware.simulated.driver_root import materialize_driver_root
    from dra_driver.hardware.simulated.nvml import SimNvml
    from dra_driver.hardware.simulated.shapes import load_shape
    from dra_driver.hardware.simulated.sysfs import materialize_sysfs

    shape = load_shape(shape_name)
    if sim_state is not None:
        proc_root = sim_proc_root(Path(sim_state))
        sys_root, dev_root = sim_sys_root(Path(sim_state)), sim_dev_root(Path(sim_state))
        hw = SimHardware(
            shape,
            node_name=node_name,
            state_path=sim_state,
            proc_root=proc_root,
            sys_root=sys_root,
            dev_root=dev_root,
            latency=latency,
        )
    else:
        proc_root = Path(tempfile.mkdtemp(prefix="dra-gpu-sim-proc-"))
        sys_root, dev_root = sim_sys_root(proc_root), sim_dev_root(proc_root)
        try:
            hw = SimHardware(
                shape,
                node_name=node_name,
                proc_root=proc_root,
                sys_root=sys_root,
                dev_root=dev_root,
                latency=latency,
            )
        except BaseException:
            shutil.rmtree(proc_root, ignore_errors=True)
            shutil.rmtree(sys_root, ignore_errors=True)
            shutil.rmtree(dev_root, ignore_errors=True)
            raise
        weakref.finalize(hw, shutil.rmtree, proc_root, ignore_errors=True)
        weakref.finalize(hw, shutil.rmtree, sys_root, ignore_errors=True)
        weakref.finalize(hw, shutil.rmtree, dev_root, ignore_errors=True)
    if driver_root is not None and driver_root.host_path is not None:
        user_space = DriverUserSpace(driver_root)
    else:
        fake = sim_driver_root(Path(sim_state) if sim_state is not None else proc_root)
        if sim_state is None:
            weakref.finalize(hw, shutil.rmtree, fake, ignore_errors=True)

        def write_fake_root(version: str) -> None:
            materialize_driver_root(fake, version)

        root = dataclasses.replace(
            driver_root or DriverRoot(), host_path=str(fake), container_path=None
        )
        user_space = DriverUserSpace(root, setup=write_fake_root)
    sim_nvml = SimNvml(hw)
    materialize_sysfs(sys_root, [gpu.pci_bus_id for gpu in sim_nvml.gpus()])
    hardware = Hardware(
        nvml=sim_nvml,
        host=HostInfo(proc_root, sys_root=sys_root),
        driver=user_space,
        gpu_policy=SimGpuPolicy(hw),
        health=sim_nvml,
        modules=_SimModprobe(hw),
        pci=PciSysfs(sys_root, dev_root, writer=_sim_writer(hw, sys_root)),
    )
    return SimulatedNode(hardware=hardware, sim=hw)


class _SimModprobe:
    """`ModuleLoader` of a simulated node: its `/proc/devices` gains the module's lines
    (no device nodes: a simulated node has no /dev of its own)."""

    def __init__(self, hw: SimHardware) -> None:
        self._hw = hw

    def load(self, module: str) -> None:
        self._hw.load_module(module)


def _sim_writer(hw: SimHardware, sys_root: Path) -> SysfsWriter:
    """Sysfs writes of the plugin, handed to the simulated kernel (`simulated.pci_bus`)."""

    def write(path: Path, text: str) -> None:
        hw.write_sysfs(str(Path(path).relative_to(sys_root)), text)

    return write
