"""What a prepared device is on the hardware: its live UUID, parent, MIG profile and ids.

A dynamic MIG device has no UUID in the ResourceSlice (it does not exist
until Prepare creates it; dcgm-exporter#714), so the claim status, the usage
sampler and the device metadata all need the live one. It comes from the
checkpoint's record of the claim (`PreparedDevice.mig`, written as the MIG
device was created) and, for whole GPUs and static MIG devices, from the
published device. This module is the one place that combines the two. Pure.
"""

from __future__ import annotations

from dataclasses import dataclass

from dra_driver.claims.checkpoint import PreparedDevice
from dra_driver.node.devices import AllocatableDevice


@dataclass(frozen=True)
class DeviceIdentity:
    """The hardware behind one prepared device.

    `uuid` is the GPU's (`GPU-...`), the MIG device's (`MIG-...`) or, for a GPU
    passed through to a VM, its vfio device's (a UUIDv5 of the PCI address); None only
    when neither the checkpoint nor the published device knows it (a dynamic
    MIG device whose creation did not finish). `parent_uuid`, `mig_profile`
    and the GI/CI ids are set for MIG devices.
    """

    uuid: str | None
    parent_uuid: str | None = None
    mig_profile: str | None = None
    gpu_instance_id: int | None = None
    compute_instance_id: int | None = None
    memory_bytes: int | None = None

    @property
    def is_mig(self) -> bool:
        return self.parent_uuid is not None


def device_identity(prepared: PreparedDevice, device: AllocatableDevice | None) -> DeviceIdentity:
    """The identity of `prepared`, given the published device of its name (None: unknown)."""
    memory = device.capacity.get("memory") if device is not None else None
    record = prepared.mig
    if record is not None:
        profile = None
        if device is not None and "profile" in device.attributes:
            profile = str(device.attributes["profile"].value)
        return DeviceIdentity(
            uuid=record.uuid,
            parent_uuid=record.parent_uuid,
            mig_profile=profile,
            gpu_instance_id=record.gi_id,
            compute_instance_id=record.ci_id,
            memory_bytes=memory,
        )
    if device is None:
        return DeviceIdentity(uuid=None)
    if device.mig is not None:
        mig = device.mig
        return DeviceIdentity(
            uuid=mig.uuid,
            parent_uuid=mig.parent_uuid,
            mig_profile=str(device.attributes["profile"].value)
            if "profile" in device.attributes
            else mig.gi_profile.name,
            gpu_instance_id=mig.gpu_instance_id,
            compute_instance_id=mig.compute_instance_id,
            memory_bytes=memory,
        )
    if device.dynamic is not None:  # a dynamic MIG device the checkpoint has no record of
        return DeviceIdentity(
            uuid=None,
            parent_uuid=device.dynamic.parent_uuid,
            mig_profile=device.dynamic.profile_name,
            memory_bytes=memory,
        )
    if device.kind == "vfio":  # the PCI function's UUID, as the slice publishes it
        return DeviceIdentity(uuid=str(device.attributes["uuid"].value), memory_bytes=memory)
    return DeviceIdentity(uuid=device.gpu.uuid, memory_bytes=memory)


__all__ = ["DeviceIdentity", "device_identity"]
