"""`dra-gpu status`: what each GPU of the node is set up for, in one view.

The admin debugging a slow or stuck pod asks: is this GPU in MIG mode, what
time-slice does it run, is an MPS daemon serving it and for which claims,
which MIG devices exist. `collect` reads the GPUs (NVML, real or simulated),
the plugin's checkpoint (which claims use which MPS daemon) and the MPS
daemon directories (which daemons really run: pid file and /proc), with no
plugin running needed; `to_dicts` and `render_table` are pure.
`dra-gpu mig status` stays the detailed MIG layout view.

The per-claim view (`collect_claims`, `render_claims`; `dra-gpu status
--claims`, and below the GPUs in the table) answers how much of its GPU each
claim uses: its pods, SM %, memory used against its limit, how long it has
been idle and whether it uses more than its share (`-o yaml|json` carries
both views: `{gpus: [...], claims: [...], claimsSource: ...}`). It shows the plugin's
last sampling pass (`usage.json` in its data directory, written every
`--usage-interval`); without a recent one it samples once itself, and then
idle time and pod names are unknown.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dra_driver import text_table
from dra_driver.claims.checkpoint import Checkpoint
from dra_driver.claims.checkpoint_store import CheckpointStore
from dra_driver.claims.mps import MPS_DIR
from dra_driver.hardware.machine import Hardware
from dra_driver.hardware.nvml.interface import GpuInfo
from dra_driver.kube import yaml_io
from dra_driver.kube.quantity import format_quantity
from dra_driver.node.devices import build_devices
from dra_driver.node.inventory import discover
from dra_driver.planning.time_slices import LEVELS
from kubelet_plugin.main import CHECKPOINT_DIR, LEGACY_CHECKPOINT_FILE, plugin_data_dir
from kubelet_plugin.mps_daemons import MpsDaemons
from kubelet_plugin.usage_sampler import REPORT_FILE, ClaimPods, UsageSampler, read_report


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


def render_table(statuses: list[GpuStatus], *, wide: bool = False) -> str:
    """One line per GPU and one per MIG device below it; at most 100 columns unless `wide`
    (which adds the MPS daemons' pipe directories)."""
    rows = []
    for gpu in statuses:
        rows.append(
            (gpu.name, gpu.uuid, gpu.mig_mode, gpu.time_slice or "-", _mps_cell(gpu.mps, wide))
        )
        for mig in gpu.mig_devices:
            name = f"  {mig.profile} GI{mig.gpu_instance_id}/CI{mig.compute_instance_id}"
            rows.append((name, mig.uuid, "", "", _mps_cell(mig.mps, wide)))
    header = ("NAME", "UUID", "MIG", "TIMESLICE", "MPS")
    width = None if wide else text_table.WIDTH
    lines = text_table.render(header, rows, width=width, wrap=(4,))
    return "".join(f"{line}\n" for line in lines)


def _mps_cell(mps: MpsStatus | None, wide: bool = True) -> str:
    if mps is None:
        return "-"
    state = f"running pid {mps.pid}" if mps.running else "NOT RUNNING"
    clients = ", ".join(mps.clients) or "no claims"
    return f"{state} ({clients}) {mps.pipe_directory}" if wide else f"{state} ({clients})"


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


# --------------------------------------------------------------------------- claims


@dataclass(frozen=True)
class ClaimUsageStatus:
    """One claim's use of one of its devices, as the last sampling pass saw it."""

    namespace: str
    claim: str
    device: str
    uuid: str
    pods: tuple[str, ...]
    sm_percent: float | None
    sm_unavailable: str | None  # why SM % is not known ("mig", "no-samples", "error")
    memory_used_bytes: int | None
    memory_limit_bytes: int | None
    memory_limit_source: str
    idle_seconds: float | None  # None: not known (no plugin pass to tell)
    over_share: bool

    @classmethod
    def from_report(cls, entry: Mapping[str, Any], *, idle_known: bool) -> ClaimUsageStatus:
        return cls(
            namespace=str(entry.get("namespace", "")),
            claim=str(entry.get("claim", "")),
            device=str(entry.get("device", "")),
            uuid=str(entry.get("uuid", "")),
            pods=tuple(str(p.get("pod") or "") for p in entry.get("pods") or [] if p.get("pod")),
            sm_percent=entry.get("smPercent"),
            sm_unavailable=entry.get("smUnavailable"),
            memory_used_bytes=entry.get("memoryUsedBytes"),
            memory_limit_bytes=entry.get("memoryLimitBytes"),
            memory_limit_source=str(entry.get("memoryLimitSource") or ""),
            idle_seconds=entry.get("idleSeconds") if idle_known else None,
            over_share=bool(entry.get("overShare")),
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "namespace": self.namespace,
            "claim": self.claim,
            "device": self.device,
            "uuid": self.uuid,
            "pods": list(self.pods),
            "smPercent": self.sm_percent,
            "smUnavailable": self.sm_unavailable,
            "memoryUsedBytes": self.memory_used_bytes,
            "memoryLimitBytes": self.memory_limit_bytes,
            "memoryLimitSource": self.memory_limit_source,
            "idleSeconds": self.idle_seconds,
            "overShare": self.over_share,
        }


@dataclass(frozen=True)
class ClaimsView:
    """The per-claim view and where its numbers come from."""

    claims: tuple[ClaimUsageStatus, ...]
    source: str  # for people: "sampled by the plugin 3 s ago", ...


STALE_PASSES = 3
"""A report older than this many sampling intervals (and `STALE_SECONDS`) is not current."""
STALE_SECONDS = 30.0


def collect_claims(hardware: Hardware, *, data_dir: Path, now: float | None = None) -> ClaimsView:
    """The plugin's last pass if recent, else one pass of our own (see the module docstring)."""
    now = time.time() if now is None else now
    report = read_report(data_dir / REPORT_FILE)
    if report is not None:
        sampled = float(report.get("sampledAtUnix") or 0.0)
        interval = float(report.get("intervalSeconds") or 0.0)
        age = now - sampled
        if 0 <= age <= max(STALE_PASSES * interval, STALE_SECONDS):
            claims = tuple(
                ClaimUsageStatus.from_report(entry, idle_known=True)
                for entry in report.get("claims") or []
            )
            return ClaimsView(claims, f"sampled by the plugin {age:.0f} s ago")
    checkpoint = CheckpointStore(
        data_dir / CHECKPOINT_DIR,
        hardware.host.boot_id(),
        legacy_file=data_dir / LEGACY_CHECKPOINT_FILE,
    ).load()
    devices = build_devices(discover(hardware.nvml), dynamic_mig=True)
    sampler = UsageSampler(
        hardware.nvml,
        hardware.host.proc_root,
        prepared=lambda: checkpoint,
        devices=lambda: devices,
        claim_pods=ClaimPods(),
    )
    own = sampler.sample()
    claims = tuple(
        ClaimUsageStatus.from_report(usage.to_dict(), idle_known=False) for usage in own.claims
    )
    return ClaimsView(
        claims, "sampled now; no recent pass of the plugin, so idle time and pod names are unknown"
    )


def render_claims(view: ClaimsView) -> str:
    """One line per claim and device: pods, SM %, memory used / limit, idle for, share."""
    rows = [("CLAIM", "DEVICE", "PODS", "SM", "MEMORY USED/LIMIT", "IDLE", "SHARE")]
    for c in view.claims:
        rows.append(
            (
                f"{c.namespace}/{c.claim}",
                c.device,
                ",".join(c.pods) or "-",
                _sm_cell(c),
                f"{_bytes(c.memory_used_bytes)}/{_bytes(c.memory_limit_bytes)}"
                + (f" ({c.memory_limit_source})" if c.memory_limit_source else ""),
                "-" if c.idle_seconds is None else _duration(c.idle_seconds),
                "OVER" if c.over_share else "ok",
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    table = "".join(
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=False))
        + "  "
        + row[-1]
        + "\n"
        for row in rows
    )
    return f"Claims ({view.source}):\n" + (table if view.claims else "  no prepared claims\n")


def _sm_cell(c: ClaimUsageStatus) -> str:
    if c.sm_percent is not None:
        return f"{c.sm_percent:g}%"
    return {"mig": "n/a (MIG)", "no-samples": "- (no sample)"}.get(c.sm_unavailable or "", "?")


def _bytes(value: int | None) -> str:
    if value is None:
        return "?"
    if value >= 2**30:
        return f"{value / 2**30:.1f}Gi"
    if value >= 2**20:
        return f"{value / 2**20:.0f}Mi"
    return format_quantity(value)


def _duration(seconds: float) -> str:
    whole = int(seconds)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m"
    if minutes:
        return f"{minutes}m{secs:02d}s"
    return f"{secs}s"


def claims_to_dicts(claims: Sequence[ClaimUsageStatus]) -> list[dict[str, Any]]:
    return [c.to_dict() for c in claims]


def print_status(
    hardware: Hardware,
    *,
    kubelet_root: Path,
    driver_name: str,
    output: str,
    claims: bool = False,
) -> int:
    """The `dra-gpu status` command: the GPUs, then the claims (`claims`: the claims only)."""
    data_dir = plugin_data_dir(kubelet_root, driver_name)
    if claims:
        view = collect_claims(hardware, data_dir=data_dir)
        if output == "yaml":
            print(yaml_io.dump(claims_to_dicts(view.claims), sort_keys=False), end="")
        elif output == "json":
            print(json.dumps(claims_to_dicts(view.claims), indent=2))
        else:
            print(render_claims(view), end="")
        return 0
    statuses = collect(hardware, data_dir=data_dir)
    view = collect_claims(hardware, data_dir=data_dir)
    if output == "yaml":
        print(yaml_io.dump(status_document(statuses, view), sort_keys=False), end="")
    elif output == "json":
        print(json.dumps(status_document(statuses, view), indent=2))
    else:
        print(render_table(statuses, wide=output == "wide"), end="")
        print()
        print(render_claims(view), end="")
    return 0


def status_document(statuses: list[GpuStatus], view: ClaimsView) -> dict[str, Any]:
    """`-o yaml|json`: what the table shows, `{gpus: [...], claims: [...], claimsSource}`."""
    return {
        "gpus": to_dicts(statuses),
        "claims": claims_to_dicts(view.claims),
        "claimsSource": view.source,
    }
