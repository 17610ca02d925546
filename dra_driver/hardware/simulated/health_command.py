"""`dra-gpu sim health`: inject a device-health event into a simulated node.

The event goes into the node's state file, where the running plugin's
simulated NVML event set picks it up (as `nvmlEventSetWait` would return it),
so the demo and the tests exercise the plugin's real health path.
"""

from __future__ import annotations

from pathlib import Path

from dra_driver.errors import ConfigError
from dra_driver.hardware.nvml.interface import HealthEventKind
from dra_driver.hardware.simulated.hardware import SimHardware


def inject_health_event(
    sim_state: Path,
    *,
    gpu: int,
    xid: int | None = None,
    double_bit_ecc: bool = False,
    gpu_lost: bool = False,
) -> int:
    """Queue one event for GPU `gpu`; with no fault given, the GPU recovered. Exit status."""
    if not sim_state.is_file():
        raise ConfigError(f"--sim-state {sim_state}: no such state file (is the plugin running?)")
    hw = SimHardware(state_path=sim_state)
    if xid is not None:
        kind = HealthEventKind.XID
    elif double_bit_ecc:
        kind = HealthEventKind.DOUBLE_BIT_ECC
    elif gpu_lost:
        kind = HealthEventKind.GPU_LOST
    else:
        kind = HealthEventKind.RECOVERED
    seq = hw.inject_health_event(gpu, kind.value, xid)
    detail = f" {xid}" if xid is not None else ""
    print(f"GPU {gpu}: injected {kind.value}{detail} event (#{seq})")
    return 0
