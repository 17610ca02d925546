"""`dra-gpu mig status`: the live MIG layout of every GPU, readable at a glance.

An admin debugging a pending MIG claim at 2 a.m. wants to see which memory
slices of which GPU are taken, by which profile, and whether MIG mode is on.
`collect` reads that through the NVML interface (real or simulated);
`render` is pure and draws one row of memory slices per GPU (`as_data` gives
the same facts as plain data, for `-o yaml|json`):

    gpu-0  NVIDIA A100-SXM4-40GB  GPU-a2b56268-…  MIG on
           slices |0      |1      |2      |3      |4      |5      |6      |7      |
                  |3g.20gb GI1                    |.......|1g.5gb |1g.10gb GI6    |
           GI 1  3g.20gb     slices 0-3  CI 0 (profile 2)  42 SMs  MIG-6793cb19-…
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from dra_driver.hardware.nvml.interface import (
    ComputeInstanceInfo,
    GpuInfo,
    GpuInstanceInfo,
    GpuInstanceProfile,
    MigDeviceInfo,
    Nvml,
)
from dra_driver.kube import yaml_io

CELL = 8


@dataclass(frozen=True)
class GpuLayout:
    """One GPU's MIG state."""

    gpu: GpuInfo
    profiles: tuple[GpuInstanceProfile, ...]
    gpu_instances: tuple[GpuInstanceInfo, ...]
    compute_instances: tuple[tuple[int, tuple[ComputeInstanceInfo, ...]], ...]
    mig_devices: tuple[MigDeviceInfo, ...]

    @property
    def grid_size(self) -> int:
        return max((p.size + p.start for prof in self.profiles for p in prof.placements), default=0)


def collect(nvml: Nvml) -> list[GpuLayout]:
    """Read the MIG layout of every GPU (the only I/O here)."""
    layouts = []
    for gpu in sorted(nvml.gpus(), key=lambda g: g.minor):
        profiles = tuple(nvml.gpu_instance_profiles(gpu.uuid)) if gpu.mig_capable else ()
        gis = tuple(nvml.gpu_instances(gpu.uuid)) if gpu.mig_enabled else ()
        cis = tuple((gi.id, tuple(nvml.compute_instances(gpu.uuid, gi.id))) for gi in gis)
        migs = tuple(nvml.mig_devices(gpu.uuid)) if gpu.mig_enabled else ()
        layouts.append(GpuLayout(gpu, profiles, gis, cis, migs))
    return layouts


def render(layouts: list[GpuLayout]) -> str:
    """The layout as text, one block per GPU."""
    return "\n".join(_render_gpu(layout) for layout in layouts)


def format_status(layouts: list[GpuLayout], output: str) -> str:
    """What `mig status -o OUTPUT` prints: the drawing ("text"), or `as_data` as yaml or json."""
    if output == "text":
        return render(layouts)
    data = {"gpus": as_data(layouts)}
    if output == "json":
        return json.dumps(data, indent=2) + "\n"
    return yaml_io.dump(data, sort_keys=False)


def as_data(layouts: list[GpuLayout]) -> list[dict[str, Any]]:
    """The layout as plain data (`mig status -o yaml|json`): per GPU its MIG mode and each
    GPU instance with its profile, memory slices and compute instances (MIG UUIDs)."""
    return [_gpu_data(layout) for layout in layouts]


def _gpu_data(layout: GpuLayout) -> dict[str, Any]:
    gpu = layout.gpu
    names = {p.id: p.name for p in layout.profiles}
    cis = dict(layout.compute_instances)
    migs = {(m.gpu_instance_id, m.compute_instance_id): m for m in layout.mig_devices}
    instances = []
    for gi in sorted(layout.gpu_instances, key=lambda g: g.placement.start):
        compute = []
        for ci in cis.get(gi.id, ()):
            mig = migs.get((gi.id, ci.id))
            entry: dict[str, Any] = {"id": ci.id, "profileId": ci.profile_id}
            if mig is not None:
                entry |= {"uuid": mig.uuid, "multiprocessors": mig.multiprocessors}
            compute.append(entry)
        instances.append(
            {
                "id": gi.id,
                "profile": names.get(gi.profile_id, str(gi.profile_id)),
                "profileId": gi.profile_id,
                "placement": {"start": gi.placement.start, "size": gi.placement.size},
                "computeInstances": compute,
            }
        )
    data: dict[str, Any] = {
        "name": f"gpu-{gpu.minor}",
        "uuid": gpu.uuid,
        "productName": gpu.product_name,
        "migCapable": gpu.mig_capable,
        "migEnabled": gpu.mig_enabled,
        "migPending": gpu.mig_pending,
    }
    if gpu.mig_enabled:
        data["memorySlices"] = layout.grid_size
        data["gpuInstances"] = instances
    return data


def _mode(gpu: GpuInfo) -> str:
    if not gpu.mig_capable:
        return "no MIG"
    current = "MIG on" if gpu.mig_enabled else "MIG off"
    if gpu.mig_pending != gpu.mig_enabled:
        return f"{current} (pending {'on' if gpu.mig_pending else 'off'} until a GPU reset)"
    return current


def _render_gpu(layout: GpuLayout) -> str:
    gpu = layout.gpu
    lines = [f"gpu-{gpu.minor}  {gpu.product_name}  {gpu.uuid}  {_mode(gpu)}"]
    if not gpu.mig_capable or not gpu.mig_enabled:
        if gpu.mig_capable:
            lines.append("       whole GPU (no GPU instances)")
        return "\n".join(lines) + "\n"
    names = {p.id: p.name for p in layout.profiles}
    grid = layout.grid_size
    header = "".join(f"|{i:<{CELL - 1}}" for i in range(grid)) + "|"
    cells = ["." * (CELL - 1)] * grid
    row = ""
    occupied: dict[int, GpuInstanceInfo] = {}
    for instance in layout.gpu_instances:
        for s in instance.placement.slices:
            occupied[s] = instance
    slot = 0
    while slot < grid:
        taken = occupied.get(slot)
        if taken is None:
            row += "|" + cells[slot]
            slot += 1
            continue
        width = taken.placement.size * CELL - 1
        label = f"{names.get(taken.profile_id, str(taken.profile_id))} GI{taken.id}"
        row += "|" + label[:width].ljust(width)
        slot += taken.placement.size
    lines.append(f"       slices {header}")
    lines.append(f"              {row}|")
    cis = dict(layout.compute_instances)
    uuids = {(m.gpu_instance_id, m.compute_instance_id): m for m in layout.mig_devices}
    for gi in sorted(layout.gpu_instances, key=lambda g: g.placement.start):
        span = f"{gi.placement.start}-{gi.placement.start + gi.placement.size - 1}"
        name = names.get(gi.profile_id, str(gi.profile_id))
        instances = cis.get(gi.id, ())
        if not instances:
            lines.append(f"       GI {gi.id:<2} {name:<11} slices {span:<4} no compute instance")
        for ci in instances:
            mig = uuids.get((gi.id, ci.id))
            detail = f"{mig.multiprocessors} SMs  {mig.uuid}" if mig else ""
            lines.append(
                f"       GI {gi.id:<2} {name:<11} slices {span:<4} CI {ci.id} "
                f"(profile {ci.profile_id})  {detail}".rstrip()
            )
    if not layout.gpu_instances:
        lines.append("       no GPU instances")
    return "\n".join(lines) + "\n"
