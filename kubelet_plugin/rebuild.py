"""Self-healing checkpoint: rebuild lost claim entries from what the node still shows.

When a checkpoint file is unreadable (disk corruption, a bad edit), the
claims it held are not gone: their pods may still run, their CDI specs are
on disk, their dynamic MIG instances on the GPU, their allocations in the
API. NVIDIA's driver (and dra-gpu before this module) started empty and
then deleted the CDI specs of running pods. Instead, the plugin asks each
*rebuild source* in turn what it can vouch for; a claim that some source
vouches for gets its entry back, so its CDI spec stays and its MIG
instances stay owned (a later Unprepare destroys them). Only what no source
vouches for is removed by the usual start-up recovery.

A source gets the checkpoint rebuilt so far and returns it with entries
added (`Checkpoint.adopt`) or completed; the driver logs every entry a
source added or changed. Sources run in the order of `default_sources`:

1. `CdiSpecSource`: every CDI spec carries its claim's completed entry in
   its first line (`CdiStore.read_record`), so a claim that was prepared
   comes back exactly (UID, namespace, name, devices, MIG ids).
2. `ClusterSource`: claims in the API that are allocated to this node's
   pool and still reserved, for Pods or, from Kubernetes 1.37, for a
   PodGroup (`dra_driver.claims.consumers`). A spec without the annotation (written by an
   older dra-gpu) is vouched for here, and a claim whose dynamic MIG
   devices were being created before the spec was written is taken back as
   half-prepared, so its instances are found and rolled back.
3. `MigInstanceSource`: fills in the GPU-instance ids of MIG records that
   lack them from the instances on the hardware (by profile and placement).

To rebuild another kind of side effect (MPS control daemons, time-slice
settings), write a class with a `name` and `rebuild(checkpoint)` and add it
to `default_sources`.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from dra_driver.claims.allocated import parse_allocated_claim
from dra_driver.claims.checkpoint import (
    Checkpoint,
    ClaimEntry,
    ClaimState,
    from_spec_record,
)
from dra_driver.claims.consumers import is_reserved
from dra_driver.container.cdi_store import CdiStore
from dra_driver.errors import DraGpuError
from dra_driver.kube.cluster import Cluster
from dra_driver.node.devices import AllocatableDevice
from dra_driver.planning.plan import prepared_device
from kubelet_plugin.mig_lifecycle import MigLifecycle

log = logging.getLogger(__name__)


class RebuildSource(Protocol):
    """Something on the node or in the API that can vouch for prepared claims."""

    name: str
    """What the log calls it, e.g. "CDI specs"."""

    def rebuild(self, checkpoint: Checkpoint) -> Checkpoint:
        """`checkpoint` with the entries this source vouches for added or completed.

        May raise `DraGpuError`; the driver logs it and goes on with the next source.
        """
        ...


class CdiSpecSource:
    """Claims whose CDI spec carries its entry (`CdiStore.read_record`)."""

    name = "CDI specs"

    def __init__(self, cdi_store: CdiStore) -> None:
        self._cdi = cdi_store

    def rebuild(self, checkpoint: Checkpoint) -> Checkpoint:
        for uid in sorted(self._cdi.claim_uids() - set(checkpoint.claims)):
            path = self._cdi.path_for(uid)
            try:
                value = self._cdi.read_record(uid)
            except DraGpuError as exc:
                log.warning("%s", exc)
                continue
            if value is None:
                continue  # written by an older dra-gpu: the API may vouch for it
            try:
                stored = from_spec_record(value, source=str(path))
            except DraGpuError as exc:
                log.warning("%s", exc)
                continue
            entry = stored.claims.get(uid)
            if stored.boot_id != checkpoint.boot_id or entry is None:
                log.warning(
                    "%s: its record is of claim %s of boot %s, not claim %s of boot %s",
                    path,
                    ", ".join(stored.claims),
                    stored.boot_id,
                    uid,
                    checkpoint.boot_id,
                )
                continue
            checkpoint = checkpoint.adopt(entry)
        return checkpoint


class ClusterSource:
    """Claims allocated to this node's pool that are still reserved (by a Pod or a PodGroup)."""

    name = "the API"

    def __init__(
        self,
        *,
        cluster: Cluster,
        cdi_store: CdiStore,
        driver_name: str,
        pool_name: str,
        devices: Callable[[], Sequence[AllocatableDevice]],
    ) -> None:
        self._cluster = cluster
        self._cdi = cdi_store
        self._driver_name = driver_name
        self._pool_name = pool_name
        self._devices = devices

    def rebuild(self, checkpoint: Checkpoint) -> Checkpoint:
        specs = self._cdi.claim_uids()
        devices: Mapping[str, AllocatableDevice] | None = None
        for obj in self._cluster.list_resource_claims():
            uid = _uid(obj)
            if uid is None or uid in checkpoint.claims or not is_reserved(obj):
                continue
            try:
                claim = parse_allocated_claim(obj, driver=self._driver_name, expected_uid=uid)
            except DraGpuError:
                continue  # not allocated, or not to this driver: nothing of ours
            results = [r for r in claim.results if r.pool == self._pool_name]
            if not results:
                continue
            if devices is None:
                devices = {device.name: device for device in self._devices()}
            prepared = tuple(prepared_device(uid, r, devices.get(r.device)) for r in results)
            has_spec = uid in specs
            if not has_spec and not any(d.mig is not None for d in prepared):
                continue  # nothing was prepared that would need an owner
            entry = ClaimEntry(
                uid=uid,
                namespace=claim.namespace,
                name=claim.name,
                state=ClaimState.PrepareCompleted if has_spec else ClaimState.PrepareStarted,
                devices=prepared,
            )
            checkpoint = checkpoint.adopt(entry)
        return checkpoint


class MigInstanceSource:
    """Fills in the GPU-instance ids of our MIG records from the instances on the hardware."""

    name = "MIG instances"

    def __init__(self, mig: MigLifecycle) -> None:
        self._mig = mig

    def rebuild(self, checkpoint: Checkpoint) -> Checkpoint:
        owned = {
            (d.mig.parent_uuid, d.mig.gi_id)
            for entry in checkpoint.claims.values()
            for d in entry.devices
            if d.mig is not None and d.mig.gi_id is not None
        }
        for uid in sorted(checkpoint.claims):
            entry = checkpoint.claims[uid]
            devices = list(entry.devices)
            for index, device in enumerate(devices):
                record = device.mig
                if record is None or not record.created_by_us or record.gi_id is not None:
                    continue
                found = self._mig.find_unrecorded(record)
                if found.gi_id is None or (found.parent_uuid, found.gi_id) in owned:
                    continue
                owned.add((found.parent_uuid, found.gi_id))
                devices[index] = dataclasses.replace(device, mig=found)
            if devices != list(entry.devices):
                checkpoint = checkpoint.remove(uid).adopt(
                    dataclasses.replace(entry, devices=tuple(devices))
                )
        return checkpoint


def default_sources(
    *,
    cdi_store: CdiStore,
    cluster: Cluster,
    mig: MigLifecycle,
    driver_name: str,
    pool_name: str,
    devices: Callable[[], Sequence[AllocatableDevice]],
) -> list[RebuildSource]:
    """The rebuild sources of the kubelet plugin, in the order they run.

    `devices` lists the node's devices with every existing MIG instance
    published as its dynamic device, to map allocated device names back to
    MIG profiles and placements.
    """
    return [
        CdiSpecSource(cdi_store),
        ClusterSource(
            cluster=cluster,
            cdi_store=cdi_store,
            driver_name=driver_name,
            pool_name=pool_name,
            devices=devices,
        ),
        MigInstanceSource(mig),
    ]


def _uid(obj: Mapping[str, Any]) -> str | None:
    metadata = obj.get("metadata")
    uid = metadata.get("uid") if isinstance(metadata, Mapping) else None
    return uid if isinstance(uid, str) and uid else None
