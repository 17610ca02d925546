"""The `status.devices` entries a prepared (or failed) claim gets, as pure functions.

Kubernetes 1.37 makes `ResourceClaim.status.devices` (KEP-4817) GA: a driver
reports per allocated device whether it is ready and driver-specific data.
dra-gpu writes one entry per device of the claim, keyed like the allocation
result (driver, pool, device, shareID), with:

- a `Ready` condition: True with reason `Prepared` after a successful
  Prepare, False with reason `PrepareFailed` and the error as the message;
- `data` (a JSON object, well under the apiserver's 10 KiB): `version`
  (of this layout, "v1"), `type` ("gpu" or "mig"), `uuid` (the GPU's, or
  the live `MIG-...` UUID of a dynamic MIG device that the slice cannot
  show), `parentUUID`, `profile`, `gpuInstanceId`, `computeInstanceId`,
  `shareID`, and the sharing in force: `mps` (`pipeDirectory` as the
  container sees it, `hostPipeDirectory`, `activeThreadPercentage`,
  `pinnedMemoryMiB`) and `timeSlice`. Keys are NVIDIA's attribute names
  where one exists (`uuid`, `parentUUID`, `profile`, `type`), so
  dcgm-exporter-style consumers can read them like the slice's attributes.

Everything comes from the checkpoint's record of the claim (what Prepare
did) and the published device; the writer is `kubelet_plugin.claim_status`.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

from dra_driver.claims.checkpoint import ClaimEntry, PreparedDevice
from dra_driver.claims.identity import device_identity
from dra_driver.claims.mps import CONTAINER_PIPE_DIR, DaemonPaths
from dra_driver.kube.objects import Obj
from dra_driver.node.devices import AllocatableDevice

READY: Final = "Ready"
REASON_PREPARED: Final = "Prepared"
REASON_FAILED: Final = "PrepareFailed"
DATA_VERSION: Final = "v1"
MAX_MESSAGE_CHARS: Final = 4096
"""Condition messages are cut here (the apiserver allows 32768; a Prepare error is shorter)."""


def device_data(prepared: PreparedDevice, device: AllocatableDevice | None) -> dict[str, Any]:
    """The `data` object of one prepared device (see the module docstring)."""
    identity = device_identity(prepared, device)
    data: dict[str, Any] = {
        "version": DATA_VERSION,
        "type": "mig" if identity.is_mig else "gpu",
    }
    optional: dict[str, Any] = {
        "uuid": identity.uuid,
        "parentUUID": identity.parent_uuid,
        "profile": identity.mig_profile,
        "gpuInstanceId": identity.gpu_instance_id,
        "computeInstanceId": identity.compute_instance_id,
        "shareID": prepared.share_id,
    }
    data.update({key: value for key, value in optional.items() if value is not None})
    if prepared.mps is not None:
        mps: dict[str, Any] = {
            "pipeDirectory": CONTAINER_PIPE_DIR,
            "hostPipeDirectory": str(DaemonPaths(Path(prepared.mps.daemon_dir)).pipe),
        }
        if prepared.mps.active_thread_percentage is not None:
            mps["activeThreadPercentage"] = prepared.mps.active_thread_percentage
        if prepared.mps.pinned_memory_mib is not None:
            mps["pinnedMemoryMiB"] = prepared.mps.pinned_memory_mib
        data["mps"] = mps
    if prepared.time_slice is not None:
        data["timeSlice"] = prepared.time_slice.interval
    return data


def ready_entries(
    entry: ClaimEntry,
    devices: Mapping[str, AllocatableDevice],
    *,
    driver: str,
    node_name: str,
    now: str,
) -> list[dict[str, Any]]:
    """`Ready=True` entries for every device of a prepared claim."""
    return [
        _entry(
            driver,
            prepared.pool,
            prepared.device,
            prepared.share_id,
            status="True",
            reason=REASON_PREPARED,
            message=f"prepared on node {node_name}",
            now=now,
            data=device_data(prepared, devices.get(prepared.device)),
        )
        for prepared in entry.devices
    ]


def failed_entries(
    claim: Obj, error: str, *, driver: str, pool: str, now: str
) -> list[dict[str, Any]]:
    """`Ready=False` entries, with the error, for the claim's devices of this driver and pool."""
    allocation = (claim.get("status") or {}).get("allocation") or {}
    results = (allocation.get("devices") or {}).get("results") or []
    entries = []
    seen: set[tuple[str, str]] = set()
    for result in results:
        if result.get("driver") != driver or result.get("pool") != pool:
            continue
        key = (str(result.get("device")), str(result.get("shareID") or ""))
        if key in seen:
            continue
        seen.add(key)
        entries.append(
            _entry(
                driver,
                pool,
                key[0],
                result.get("shareID"),
                status="False",
                reason=REASON_FAILED,
                message=error,
                now=now,
            )
        )
    return entries


def _entry(
    driver: str,
    pool: str,
    device: str,
    share_id: str | None,
    *,
    status: str,
    reason: str,
    message: str,
    now: str,
    data: dict[str, Any] | None = None,
) -> dict[str, Any]:
    entry: dict[str, Any] = {"driver": driver, "pool": pool, "device": device}
    if share_id:
        entry["shareID"] = share_id
    entry["conditions"] = [
        {
            "type": READY,
            "status": status,
            "reason": reason,
            "message": message[:MAX_MESSAGE_CHARS],
            "lastTransitionTime": now,
        }
    ]
    if data is not None:
        entry["data"] = data
    return entry


__all__ = [
    "DATA_VERSION",
    "READY",
    "REASON_FAILED",
    "REASON_PREPARED",
    "device_data",
    "failed_entries",
    "ready_entries",
]
