"""The CDI spec of one prepared claim, built from its plan and what Prepare recorded.

Each result gets a CDI device (`<claimUID>-<device>`, or `-<shareID>` for a
share): a whole GPU its `/dev/nvidia<minor>` and its DRM nodes with their
by-path links; a MIG device its parent's node and its GPU- and
compute-instance capability nodes (a dynamic one's ids as recorded when it
was created), and the parent's DRM nodes for a `+gfx` profile; an MPS device
also the daemon's pipe and shm directories and the claim's own limits
(`dra_driver.claims.mps.container_edits`); a passthrough GPU its VFIO node
(`dra_driver.container.vfio_cdi`: a claim of passthrough GPUs only gets none
of the driver's files or control nodes).
The edits every other claim's containers get (`common_edits`: the control nodes,
the environment and the driver's files) are not in it: the node's base spec
carries them (`dra_driver.container.base_spec`).

Pure but for the device numbers, which the caller reads from the host
(`DeviceNumbers`: `dra_driver.node.host.HostInfo` on a node).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

from dra_driver.claims.checkpoint import ClaimEntry, PreparedDevice
from dra_driver.claims.mps import DaemonPaths, container_edits
from dra_driver.container import cdi
from dra_driver.container.vfio_cdi import vfio_common_edits, vfio_device_edits
from dra_driver.errors import CdiError
from dra_driver.node.devices import AllocatableDevice
from dra_driver.planning.plan import ClaimPlan, cdi_device


class DeviceNumbers(Protocol):
    """The host's device numbers a spec needs (from `/proc` and `/sys`)."""

    def char_major(self, name: str) -> int: ...

    def mig_cap(self, gpu_minor: int, gi: int, ci: int | None = None) -> tuple[int, int]: ...

    def drm_nodes(self, pci_bus_id: str) -> Sequence[tuple[str, int, int]]: ...


def common_edits(
    host: DeviceNumbers, driver_edits: cdi.ContainerEdits | None = None
) -> cdi.ContainerEdits:
    """The edits every claim's containers get once: the control nodes and
    `NVIDIA_VISIBLE_DEVICES=void` (`cdi.common_edits`), then `driver_edits`, the driver
    files' mounts, environment and hooks (None: left out)."""
    common = cdi.common_edits(host.char_major("nvidia-uvm"))
    return common if driver_edits is None else common.merged(driver_edits)


def build_claim_spec(
    plan: ClaimPlan,
    entry: ClaimEntry,
    *,
    host: DeviceNumbers,
    common: cdi.ContainerEdits | None = None,
    hooks: cdi.CdiHooks | None = None,
) -> dict[str, Any]:
    """The spec of `plan`'s claim; `entry` is the claim as recorded once every side effect
    is done (its MIG instances created, its MPS daemons known). `common` goes to the
    spec level (`common_edits`; None: none, the node's base spec carries them);
    `hooks` make the per-device hooks (the DRM by-path links; None: left out).
    Raises CdiError."""
    if plan.devices and all(item.device.kind == "vfio" for item in plan.devices):
        return _vfio_spec(plan, entry)  # a VM's GPUs: no driver files, no control nodes
    devices: dict[str, cdi.CdiDevice] = {}
    for item, record in zip(plan.devices, entry.devices, strict=True):
        name = cdi_device(item.result)
        if name in devices:
            continue
        if record.vfio is not None:
            devices[name] = cdi.CdiDevice(name=name, edits=vfio_device_edits(record.vfio))
            continue
        mig = _mig_ids(item.device, record)
        bus_id = item.device.gpu.pci_bus_id  # the GPU's (a MIG device's parent's) DRM nodes
        if mig is None:
            edits = cdi.gpu_edits(item.device.gpu.minor, pci_bus_id=bus_id, host=host, hooks=hooks)
        else:
            parent_minor, gi, ci = mig
            edits = cdi.mig_edits(
                parent_minor,
                caps_major=host.char_major("nvidia-caps"),
                gi_cap=host.mig_cap(parent_minor, gi),
                ci_cap=host.mig_cap(parent_minor, gi, ci),
                graphics=cdi.has_graphics(_gi_profile_name(item.device)),
                pci_bus_id=bus_id,
                host=host,
                hooks=hooks,
            )
        if item.mps is not None:
            if record.mps is None:
                raise CdiError(f"{item.device.name}: no MPS daemon was recorded for it")
            paths = DaemonPaths(Path(record.mps.daemon_dir))
            edits = edits.merged(container_edits(paths, item.mps))
        devices[name] = cdi.CdiDevice(name=name, edits=edits)
    spec_common = common if common is not None else cdi.ContainerEdits()
    vfio = [record.vfio for record in entry.devices if record.vfio is not None]
    if vfio:
        spec_common = spec_common.merged(dataclasses.replace(vfio_common_edits(vfio), env=()))
    return cdi.claim_spec(plan.claim.uid, list(devices.values()), spec_common)


def _vfio_spec(plan: ClaimPlan, entry: ClaimEntry) -> dict[str, Any]:
    """The spec of a claim of passthrough GPUs only (`dra_driver.container.vfio_cdi`)."""
    devices: dict[str, cdi.CdiDevice] = {}
    records = []
    for item, record in zip(plan.devices, entry.devices, strict=True):
        if record.vfio is None:
            raise CdiError(f"{item.device.name}: its passthrough was not recorded")
        records.append(record.vfio)
        name = cdi_device(item.result)
        devices[name] = cdi.CdiDevice(name=name, edits=vfio_device_edits(record.vfio))
    return cdi.claim_spec(plan.claim.uid, list(devices.values()), vfio_common_edits(records))


def _gi_profile_name(device: AllocatableDevice) -> str:
    """The GPU-instance profile name of a MIG device ("1g.24gb+gfx"); "" for a whole GPU."""
    if device.dynamic is not None:
        return device.dynamic.gi_profile.name
    return device.mig.gi_profile.name if device.mig is not None else ""


def _mig_ids(device: AllocatableDevice, record: PreparedDevice) -> tuple[int, int, int] | None:
    """(parent minor, GI id, CI id) of a MIG device; None for a whole GPU."""
    if device.dynamic is not None:
        mig = record.mig
        if mig is None or mig.gi_id is None or mig.ci_id is None:
            raise CdiError(f"{device.name}: its MIG device was not created")
        return device.dynamic.parent_minor, mig.gi_id, mig.ci_id
    if device.mig is not None:
        info = device.mig
        return info.parent_minor, info.gpu_instance_id, info.compute_instance_id
    return None
