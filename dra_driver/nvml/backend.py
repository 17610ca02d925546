"""Pick the hardware a process talks to from one `--nvml` flag.

The plugin, the inventory command and the demo all run the same code against
either the GPUs of the machine (`"real"`: pynvml and the real `/proc`) or a
simulated node (`"sim:<shape>"`: `SimHardware` behind `SimNvml`, with a fake
`/proc` tree kept next to the state file). This module is the one place that
knows how to build each, so no caller branches on "is this simulated".
"""

from __future__ import annotations

import shutil
import tempfile
import weakref
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from dra_driver.errors import ConfigError
from dra_driver.host import HostInfo
from dra_driver.nvml.interface import HealthEventSource, Nvml
from dra_driver.sim.hardware import SimHardware

REAL_SPEC = "real"
SIM_PREFIX = "sim:"
SPEC_FORMS = (
    "'real' (this machine's GPUs through NVML) or 'sim:<shape>' where <shape> is a built-in "
    "node shape (dgx-a100-40gb, dgx-a100-80gb, dgx-h100, dgx-h200, a30-node, l4-node, "
    "h100-pcie-node) or the path of a YAML shape file"
)


@dataclass
class Hardware:
    """What a process needs to see GPUs: NVML, the host's procfs, and the simulator if any."""

    nvml: Nvml
    host: HostInfo
    sim: SimHardware | None = None
    health: HealthEventSource | None = None  # device-health events (both backends have them)


def sim_proc_root(sim_state: Path) -> Path:
    """Where the fake `/proc` of a simulated node with state file `sim_state` lives."""
    return sim_state.with_name(sim_state.name + ".proc")


def open_hardware(
    spec: str,
    *,
    sim_state: Path | None = None,
    node_name: str = "sim-node",
    latency: Mapping[str, float] | None = None,
) -> Hardware:
    """Open the hardware `spec` names (see SPEC_FORMS).

    For a simulated node, `sim_state` is the state file shared with other
    processes (its fake `/proc` is `<sim_state>.proc/`); without it the node
    lives in memory with its `/proc` in a temporary directory removed when the
    simulator is garbage collected. `latency` (seconds per operation) only
    applies to simulated nodes.
    """
    if spec == REAL_SPEC:
        from dra_driver.nvml.real import RealNvml

        nvml = RealNvml()
        return Hardware(nvml=nvml, host=HostInfo(Path("/proc")), health=nvml)
    if not spec.startswith(SIM_PREFIX) or not spec[len(SIM_PREFIX) :].strip():
        raise ConfigError(f"--nvml {spec!r}: expected {SPEC_FORMS}")

    from dra_driver.sim.nvml import SimNvml
    from dra_driver.sim.shapes import load_shape

    shape = load_shape(spec[len(SIM_PREFIX) :].strip())
    if sim_state is not None:
        proc_root = sim_proc_root(Path(sim_state))
        hw = SimHardware(
            shape, node_name=node_name, state_path=sim_state, proc_root=proc_root, latency=latency
        )
    else:
        proc_root = Path(tempfile.mkdtemp(prefix="dra-gpu-sim-proc-"))
        try:
            hw = SimHardware(shape, node_name=node_name, proc_root=proc_root, latency=latency)
        except BaseException:
            shutil.rmtree(proc_root, ignore_errors=True)
            raise
        weakref.finalize(hw, shutil.rmtree, proc_root, ignore_errors=True)
    sim_nvml = SimNvml(hw)
    return Hardware(nvml=sim_nvml, host=HostInfo(proc_root), sim=hw, health=sim_nvml)
