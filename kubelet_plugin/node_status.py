"""`dra-gpu status`: what each GPU of the node is set up for, in one view.

The admin debugging a slow or stuck pod asks: is this GPU in MIG mode, what
time-slice does it run, is an MPS daemon serving it and for which claims,
which MIG devices exist. `collect` reads the GPUs (NVML, real or simulated),
the plugin's checkpoint (which claims use which MPS daemon) and the MPS
daemon directories (which daemons really run: pid file and /proc), with no
plugin running needed; `to_dicts` and `render_table` are pure.
`dra-gpu mig status` stays the detailed MIG layout view.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dra_driver.claims.checkpoint import Checkpoint
from dra_driver.claims.checkpoint_store import CheckpointStore
from dra_driver.claims.mps import MPS_DIR
from dra_driver.hardware.machine import Hardware
from dra_driver.hardware.nvml.interface import GpuInfo
from dra_driver.kube import yaml_io
from dra_driver.planning.time_slices import LEVELS
from kubelet_plugin.main import CHECKPOINT_DIR, LEGACY_CHECKPOINT_FILE, plugin_data_dir
from kubelet_plugin.mps_daemons import MpsDaemons


@dataclass(frozen=True)
class MpsStatus:
    """The MPS control daemon of one device, as found on disk and in /proc."""

    running: bool
    pid: int | None
    pipe_directory: str
    clients: tuple[str, ...]  # "namespace/name" of the claims the checkpoint says use it

    def to_dict(self) -> dict[str, Any]:
        return {
            "running": self.running,
            "pid": self.pid,
            "pipeDirectory": self.pipe_directory,
            "clients": list(self.clients),
        }


@dataclass(frozen=True)
class MigDeviceStatus:
    uuid: str
    profile: str
    gpu_instance_id: int
    compute_instance_id: int
    mps: MpsStatus | None

    def to_dict(self) -> dict[str, Any]:
        return {
            "uuid": self.uuid,
            "profile": self.profile,
            "gpuInstanceId": self.gpu_instance_id,
            "computeInstanceId": self.compute_instance_id,
            "mps": None if self.mps is None else self.mps.to_dict(),
        }


@dataclass(frozen=True)
class GpuStatus:
    name: str
    uuid: str
    product_name: str
    mig_mode: str
    time_slice: str | None  # None: not known for this hardware
    mps: MpsStatus | None
    mig_devices: tuple[MigDeviceStatus, ...]

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "uuid": self.uuid,
            "productName": self.product_name,
            "migMode": self.mig_mode,
            "timeSlice": self.time_slice,
            "mps": None if self.mps is None else self.mps.to_dict(),
            "migDevices": [m.to_dict() for m in self.mig_devices],
        }


def _time_slices(hardware: Hardware) -> Mapping[str, str]:
    """Each GPU's time-slice interval where the GPU policy can read it back (a simulated
    node records it; neither NVML nor nvidia-smi reports it on a real one: unknown)."""
    names = {level: str(name) for name, level in LEVELS.items()}
    found = {}
    for gpu in hardware.nvml.gpus():
        level = hardware.gpu_policy.time_slice(gpu.uuid)
        if level is not None:
            found[gpu.uuid] = names.get(level, "Default")
    return found


def collect(
    hardware: Hardware,
    *,
    data_dir: Path | None,
    time_slices: Mapping[str, str] | None = None,
) -> list[GpuStatus]:
    """Read the node. `data_dir` is the plugin's (checkpoint, MPS daemons); None skips MPS.

    `time_slices` maps GPU UUID to its time-slice interval where it can be read.
    """
    daemons = _mps_daemons(hardware, data_dir)
    nvml = hardware.nvml
    if time_slices is None:
        time_slices = _time_slices(hardware)
    statuses = []
    for gpu in sorted(nvml.gpus(), key=lambda g: g.minor):
        migs = tuple(
            MigDeviceStatus(
                uuid=m.uuid,
                profile=m.gi_profile.name,
                gpu_instance_id=m.gpu_instance_id,
                compute_instance_id=m.compute_instance_id,
                mps=daemons.get(m.uuid),
            )
            for m in (nvml.mig_devices(gpu.uuid) if gpu.mig_enabled else ())
        )
        statuses.append(
            GpuStatus(
                name=f"gpu-{gpu.minor}",
                uuid=gpu.uuid,
                product_name=gpu.product_name,
                mig_mode=_mig_mode(gpu),
                time_slice=(time_slices or {}).get(gpu.uuid),
                mps=daemons.get(gpu.uuid),
                mig_devices=migs,
            )
        )
    return statuses


def to_dicts(statuses: list[GpuStatus]) -> list[dict[str, Any]]:
    return [s.to_dict() for s in statuses]


def render_table(statuses: list[GpuStatus]) -> str:
    """One line per GPU and one per MIG device below it."""
    rows = [("NAME", "UUID", "MIG", "TIMESLICE", "MPS")]
    for gpu in statuses:
        rows.append((gpu.name, gpu.uuid, gpu.mig_mode, gpu.time_slice or "-", _mps_cell(gpu.mps)))
        for mig in gpu.mig_devices:
            name = f"  {mig.profile} GI{mig.gpu_instance_id}/CI{mig.compute_instance_id}"
            rows.append((name, mig.uuid, "", "", _mps_cell(mig.mps)))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    return "".join(
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=False))
        + "  "
        + row[-1]
        + "\n"
        for row in rows
    )


def _mps_cell(mps: MpsStatus | None) -> str:
    if mps is None:
        return "-"
    state = f"running pid {mps.pid}" if mps.running else "NOT RUNNING"
    clients = ", ".join(mps.clients) or "no claims"
    return f"{state} ({clients}) {mps.pipe_directory}"


def _mig_mode(gpu: GpuInfo) -> str:
    if not gpu.mig_capable:
        return "Unsupported"
    current = "Enabled" if gpu.mig_enabled else "Disabled"
    if gpu.mig_pending != gpu.mig_enabled:
        return f"{current} (pending {'Enabled' if gpu.mig_pending else 'Disabled'})"
    return current


def _mps_daemons(hardware: Hardware, data_dir: Path | None) -> dict[str, MpsStatus]:
    """MPS status by device UUID: every daemon directory, and every daemon a claim records."""
    if data_dir is None:
        return {}
    checkpoint = CheckpointStore(
        data_dir / CHECKPOINT_DIR,
        hardware.host.boot_id(),
        legacy_file=data_dir / LEGACY_CHECKPOINT_FILE,
    ).load()
    clients = _clients(checkpoint)
    daemons = MpsDaemons(data_dir / MPS_DIR, ())
    found: dict[str, MpsStatus] = {}
    uuids = {p.device_uuid for p in daemons.daemon_dirs()} | set(clients)
    for uuid in sorted(uuids):
        paths = daemons.paths(uuid)
        running = daemons.find(paths)
        found[uuid] = MpsStatus(
            running=running is not None,
            pid=None if running is None else running.pid,
            pipe_directory=str(paths.pipe),
            clients=tuple(sorted(clients.get(uuid, ()))),
        )
    return found


def _clients(checkpoint: Checkpoint) -> dict[str, list[str]]:
    clients: dict[str, list[str]] = {}
    for entry in checkpoint.claims.values():
        for device in entry.devices:
            if device.mps is not None:
                clients.setdefault(device.mps.device_uuid, []).append(
                    f"{entry.namespace}/{entry.name}"
                )
    return clients


def print_status(hardware: Hardware, *, kubelet_root: Path, driver_name: str, output: str) -> int:
    """The `dra-gpu status` command."""
    statuses = collect(hardware, data_dir=plugin_data_dir(kubelet_root, driver_name))
    if output == "yaml":
        print(yaml_io.dump(to_dicts(statuses), sort_keys=False), end="")
    else:
        print(render_table(statuses), end="")
    return 0
