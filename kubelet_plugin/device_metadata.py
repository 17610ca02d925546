"""Writes the KEP-5304 device metadata files of prepared claims (`--device-metadata`).

`DeviceMetadataService` wraps the driver's `DraService`. After a claim is
prepared it reads the claim (for its requests and the pod-claim-name
annotation), writes one metadata file per request and the CDI spec that
mounts it read-only (formats and paths: `dra_driver.container.device_metadata`),
and adds that spec's device id to the first device of the request in the
answer. The attributes are the device's ResourceSlice attributes, plus what
the slice cannot show: the live `uuid` of a dynamic MIG device, and the MPS
pipe directory a client of an MPS share must use.

As with upstream's helper, a failure to write is logged ("Failed to write
device metadata") and the claim is still prepared, without the mount.
Files are written atomically; `generation` goes up only when the content
changes. Unprepare removes the claim's files and specs (whether or not the
flag is on), and `remove_orphans` removes those of claims the checkpoint no
longer holds, at start-up.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import shutil
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from dra_driver.claims.checkpoint import Checkpoint, PreparedDevice
from dra_driver.claims.identity import device_identity
from dra_driver.claims.mps import CONTAINER_PIPE_DIR
from dra_driver.container import device_metadata as meta
from dra_driver.errors import DraGpuError
from dra_driver.files.atomic import atomic_write, remove_file
from dra_driver.kube.cluster import Cluster
from dra_driver.kube.objects import Obj
from dra_driver.node.devices import AllocatableDevice
from kubelet_plugin.service import ClaimRef, DraService, PrepareResult, UnprepareResult

log = logging.getLogger(__name__)


class DeviceMetadataService:
    """A `DraService` that gives each prepared claim's containers its device metadata."""

    def __init__(
        self,
        inner: DraService,
        cluster: Cluster,
        *,
        driver_name: str,
        pool_name: str,
        plugin_data_dir: Path,
        cdi_root: Path,
        prepared: Callable[[], Checkpoint],
        devices: Callable[[], Sequence[AllocatableDevice]],
        enabled: bool = True,
    ) -> None:
        self._inner = inner
        self._cluster = cluster
        self._driver = driver_name
        self._pool = pool_name
        self._data_dir = plugin_data_dir
        self._cdi_root = cdi_root
        self._prepared = prepared
        self._devices = devices
        self.enabled = enabled

    def prepare(self, claims: Sequence[ClaimRef]) -> Mapping[str, PrepareResult]:
        results = self._inner.prepare(claims)
        if not self.enabled:
            return results
        out = dict(results)
        for ref in claims:
            result = results.get(ref.uid)
            if result is None or result.error:
                continue
            try:
                out[ref.uid] = self._write(ref, result)
            except (DraGpuError, OSError, ValueError) as exc:
                log.error("Failed to write device metadata of %s: %s", ref, exc)
        return out

    def unprepare(self, claims: Sequence[ClaimRef]) -> Mapping[str, UnprepareResult]:
        results = self._inner.unprepare(claims)
        for ref in claims:
            result = results.get(ref.uid)
            if result is not None and not result.error:
                try:
                    self.remove(ref.namespace, ref.name, ref.uid)
                except OSError as exc:
                    log.warning("cannot remove the device metadata of %s: %s", ref, exc)
        return results

    # -- files ------------------------------------------------------------------------

    def remove(self, namespace: str, name: str, uid: str) -> None:
        """Remove a claim's metadata files and CDI specs (none: nothing to do)."""
        shutil.rmtree(meta.host_claim_dir(self._data_dir, namespace, name), ignore_errors=True)
        prefix = meta.cdi_spec_prefix(self._driver, uid)
        for path in self._spec_files():
            if path.name.startswith(prefix):
                remove_file(path)

    def remove_orphans(self, checkpoint: Checkpoint) -> list[str]:
        """Remove metadata of claims `checkpoint` does not hold; what was removed."""
        removed: list[str] = []
        uids = set(checkpoint.claims)
        prefix = meta.cdi_spec_prefix(self._driver)
        for path in self._spec_files():
            uid = path.name[len(prefix) :].partition("_")[0]
            if path.name.startswith(prefix) and uid not in uids:
                remove_file(path)
                removed.append(str(path))
        names = {f"{e.namespace}_{e.name}" for e in checkpoint.claims.values()}
        root = self._data_dir / meta.HOST_SUBDIR
        for directory in sorted(root.iterdir()) if root.is_dir() else ():
            if directory.name not in names:
                shutil.rmtree(directory, ignore_errors=True)
                removed.append(str(directory))
        for item in removed:
            log.warning("removed device metadata no prepared claim owns: %s", item)
        return removed

    def _spec_files(self) -> list[Path]:
        # Names first, Paths only for the few that match: every Unprepare lists the CDI
        # directory, which holds a spec per prepared claim.
        prefix = meta.cdi_spec_prefix(self._driver)
        try:
            names = os.listdir(self._cdi_root)
        except FileNotFoundError:
            return []
        return [
            self._cdi_root / name
            for name in names
            if name.startswith(prefix) and name.endswith(".json")
        ]

    def _write(self, ref: ClaimRef, result: PrepareResult) -> PrepareResult:
        claim = self._cluster.get_resource_claim(ref.namespace, ref.name)
        identity = meta.ClaimIdentity.of(claim)
        if identity.uid != ref.uid:
            raise ValueError(f"the claim now has uid {identity.uid} (re-created)")
        entry = self._prepared().claims.get(ref.uid)
        recorded = {d.device: d for d in entry.devices} if entry is not None else {}
        devices = {d.name: d for d in self._devices()}
        ids: dict[str, str] = {}
        for request, names in self._requests(claim).items():
            listed = [
                meta.MetadataDevice(
                    driver=self._driver,
                    pool=self._pool,
                    name=name,
                    attributes=_attributes(recorded.get(name), devices.get(name)),
                )
                for name in names
            ]
            self._write_request(identity, request, listed)
            ids[meta.base_request(request)] = meta.cdi_device_id(self._driver, ref.uid, request)
        return _with_metadata_ids(result, ids)

    def _requests(self, claim: Obj) -> dict[str, list[str]]:
        """Request (as allocated, `request/subrequest`) -> our devices, in allocation order."""
        allocation = (claim.get("status") or {}).get("allocation") or {}
        out: dict[str, list[str]] = {}
        for result in (allocation.get("devices") or {}).get("results") or []:
            if result.get("driver") != self._driver or result.get("pool") != self._pool:
                continue
            names = out.setdefault(str(result.get("request")), [])
            if result.get("device") not in names:
                names.append(str(result.get("device")))
        return out

    def _write_request(
        self, identity: meta.ClaimIdentity, request: str, devices: list[meta.MetadataDevice]
    ) -> None:
        host = meta.host_file(self._data_dir, identity.namespace, identity.name, request)
        wanted = meta.device_metadata(identity, request, devices, generation=1)
        try:
            previous: bytes | None = host.read_bytes()
        except FileNotFoundError:
            previous = None
        generation = meta.next_generation(previous, wanted)
        if generation is not None:
            wanted["metadata"]["generation"] = generation
            host.parent.mkdir(parents=True, exist_ok=True, mode=0o755)
            atomic_write(host, meta.encode_stream([wanted]), mode=0o644)
        spec = meta.cdi_spec(self._driver, identity, request, host)
        path = self._cdi_root / meta.cdi_spec_file_name(self._driver, identity.uid, request)
        data = (json.dumps(spec, indent=2) + "\n").encode()
        try:
            if path.read_bytes() == data:
                return
        except FileNotFoundError:
            pass
        self._cdi_root.mkdir(parents=True, exist_ok=True)
        atomic_write(path, data, mode=0o644)


def _attributes(
    prepared: PreparedDevice | None, device: AllocatableDevice | None
) -> dict[str, dict[str, Any]]:
    """The slice's attributes of the device, with the live UUID and the MPS pipe directory."""
    attributes: dict[str, dict[str, Any]] = (
        dict(device.to_api()["attributes"]) if device is not None else {}
    )
    if prepared is not None:
        uuid = device_identity(prepared, device).uuid
        if uuid is not None and "uuid" not in attributes:
            attributes["uuid"] = {"string": uuid}
        if prepared.mps is not None:
            attributes["mpsPipeDirectory"] = {"string": CONTAINER_PIPE_DIR}
    return attributes


def _with_metadata_ids(result: PrepareResult, ids: Mapping[str, str]) -> PrepareResult:
    """Add each request's metadata device id to the first device of that request."""
    devices = list(result.devices)
    for request, cdi_id in ids.items():
        for index, device in enumerate(devices):
            if device.request_names and request not in device.request_names:
                continue
            if cdi_id not in device.cdi_device_ids:
                devices[index] = dataclasses.replace(
                    device, cdi_device_ids=(*device.cdi_device_ids, cdi_id)
                )
            break
    return dataclasses.replace(result, devices=tuple(devices))


__all__ = ["DeviceMetadataService"]
