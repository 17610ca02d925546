"""`dra-gpu sim workload`: run (or stop) a pod's CUDA process on a simulated GPU or MIG device.

The process is recorded in the node's state file, so the running plugin's
simulated NVML lists it (`nvmlDeviceGetComputeRunningProcesses`) with its
memory and, off MIG, its SM utilization, and the node's fake `/proc`
gets its `/proc/<pid>/cgroup` naming the pod: the usage sampler's real path
end to end. Running it again for the same device and pod changes the
numbers; `--stop` ends it.
"""

from __future__ import annotations

from pathlib import Path

from dra_driver.errors import ConfigError, DraGpuError
from dra_driver.hardware.simulated.hardware import SimHardware
from dra_driver.hardware.simulated.nvml import SimNvml
from dra_driver.kube.quantity import parse_quantity
from dra_driver.node.devices import mig_device_name, mig_placement_name


def resolve_device(hw: SimHardware, device: str) -> str:
    """The UUID of `device`: a `GPU-`/`MIG-` UUID, `gpu-<minor>`, or a MIG device name as
    the plugin publishes it (`gpu-<minor>-mig-<profile>-<giProfileId>-<start>`)."""
    nvml = SimNvml(hw)
    gpus = nvml.gpus()
    names: dict[str, str] = {}
    for gpu in gpus:
        names[gpu.uuid] = gpu.uuid
        names[f"gpu-{gpu.minor}"] = gpu.uuid
        for mig in nvml.mig_devices(gpu.uuid) if gpu.mig_enabled else ():
            names[mig.uuid] = mig.uuid
            names[mig_device_name(mig)] = mig.uuid
            placement = mig_placement_name(
                mig.parent_minor, mig.gi_profile.name, mig.gi_profile.id, mig.placement.start
            )
            names.setdefault(placement, mig.uuid)
    uuid = names.get(device)
    if uuid is None:
        raise ConfigError(
            f"--device {device!r}: no such GPU or MIG device on this node (give a UUID, "
            "gpu-<minor>, or a MIG device name of an existing MIG device)"
        )
    return uuid


def run_workload(
    sim_state: Path,
    *,
    device: str,
    pod_uid: str,
    sm_percent: int,
    memory: str,
    stop: bool,
) -> int:
    """The command; exit status."""
    if not sim_state.is_file():
        raise ConfigError(f"--sim-state {sim_state}: no such state file (is the plugin running?)")
    if not pod_uid:
        raise ConfigError("--pod-uid: must not be empty")
    hw = SimHardware(state_path=sim_state)
    uuid = resolve_device(hw, device)
    if stop:
        pid = hw.stop_workload(uuid, pod_uid)
        if pid is None:
            print(f"{device}: pod {pod_uid} runs no process there")
        else:
            print(f"{device}: stopped pid {pid} of pod {pod_uid}")
        return 0
    try:
        memory_bytes = int(parse_quantity(memory).value)
    except DraGpuError as exc:
        raise ConfigError(f"--memory {memory!r}: {exc}") from exc
    workload = hw.run_workload(uuid, pod_uid, sm_percent=sm_percent, memory_bytes=memory_bytes)
    print(
        f"{device} ({uuid}): pid {workload.pid} of pod {pod_uid}, SM {workload.sm_percent} %, "
        f"memory {memory}"
    )
    return 0


__all__ = ["resolve_device", "run_workload"]
