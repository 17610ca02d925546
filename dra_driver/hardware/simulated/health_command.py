"""`dra-gpu sim health`: inject a device-health event into a simulated node, or recover a GPU.

The event goes into the node's state file, where the running plugin's
simulated NVML event set picks it up (as `nvmlEventSetWait` would return it),
and the GPU's recovery action (`NVML_FI_DEV_GET_GPU_RECOVERY_ACTION`) is set
as the driver would set it, so the demo and the tests exercise the plugin's
real health path. `--healthy` is a GPU reset by the admin: no event (NVML
sends none), the recovery action goes back to none, and the plugin's health
poll notices.
"""

from __future__ import annotations

from pathlib import Path

from dra_driver.errors import ConfigError
from dra_driver.hardware.nvml import codes
from dra_driver.hardware.nvml.interface import HealthEventKind
from dra_driver.hardware.simulated.hardware import SimHardware


def inject_health_event(
    sim_state: Path,
    *,
    gpu: int,
    xid: int | None = None,
    double_bit_ecc: bool = False,
    gpu_lost: bool = False,
    recovery_action: str | None = None,
) -> int:
    """Queue one event for GPU `gpu`; with no fault given, the GPU was reset. Exit status."""
    if not sim_state.is_file():
        raise ConfigError(f"--sim-state {sim_state}: no such state file (is the plugin running?)")
    hw = SimHardware(state_path=sim_state)
    if xid is None and not double_bit_ecc and not gpu_lost:
        if recovery_action is not None:
            raise ConfigError("--recovery-action: only with --xid, --double-bit-ecc or --gpu-lost")
        hw.recover(gpu)
        print(f"GPU {gpu}: reset, no recovery action pending")
        return 0
    if xid is not None:
        kind = HealthEventKind.XID
    elif double_bit_ecc:
        kind = HealthEventKind.DOUBLE_BIT_ECC
    else:
        kind = HealthEventKind.GPU_LOST
    action = None
    if recovery_action is not None:
        by_name = {name: value for value, name in codes.RECOVERY_ACTION_NAMES.items()}
        if recovery_action not in by_name:
            raise ConfigError(
                f"--recovery-action {recovery_action!r}: expected one of {', '.join(by_name)}"
            )
        action = by_name[recovery_action]
    seq = hw.inject_health_event(gpu, kind.value, xid, recovery_action=action)
    detail = f" {xid}" if xid is not None else ""
    print(f"GPU {gpu}: injected {kind.value}{detail} event (#{seq})")
    return 0
