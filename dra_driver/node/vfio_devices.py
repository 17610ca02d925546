"""The VFIO passthrough devices a node publishes with `--passthrough` (NVIDIA's
`PassthroughSupport`): one `gpu-vfio-<idx>` device per GPU a VM can be given.

NVIDIA's plugin (`nvlib.go` `getVfioDeviceInfo`, `deviceinfo.go`
`VfioDeviceInfo.GetDevice`) adds one for each GPU without MIG devices;
`<idx>` is the GPU's place among the node's NVIDIA GPUs in PCI address
order (nvpci's enumeration), not its minor. The attributes are NVIDIA's:

* `type` "vfio";
* `uuid`: a UUIDv5 of the PCI address in the DNS namespace (not the GPU's
  UUID: the device is the PCI function, whichever driver holds it);
* `deviceID`, `vendorID`: "0x%04x";
* `productName`; `iommuFDEnabled` (the kernel has `/dev/iommu`);
* `resource.kubernetes.io/pciBusID`, `pcieRoot`, `numaNode`.

NVIDIA also publishes the capacity `addressableMemory` (the GPU's 64-bit BAR
sizes); dra-gpu does not read BARs yet and leaves it out. `productName` is
NVML's name for the GPU (NVIDIA takes the PCI ID database's).

A GPU's vfio device and its other devices (the whole GPU, its MIG devices,
its shares) are one piece of hardware: the node plugin refuses a claim on
one while a claim holds the other (`dra_driver.planning.devices`), and
withdraws the sibling from the published slices meanwhile
(`hidden_siblings`). Pure: the PCI view comes in as `PciGpu` records.
"""

from __future__ import annotations

import uuid
from collections.abc import Collection, Iterable, Sequence
from types import MappingProxyType

from dra_driver.hardware.pci_sysfs import PciGpu
from dra_driver.node.devices import (
    NUMA_NODE_ATTRIBUTE,
    PCI_BUS_ID_ATTRIBUTE,
    PCIE_ROOT_ATTRIBUTE,
    AllocatableDevice,
    AttributeValue,
)
from dra_driver.node.inventory import NodeInventory, pci_sort_key

VFIO_TYPE = "vfio"


def vfio_device_name(index: int) -> str:
    """NVIDIA's name of the vfio device of the GPU at `index` in PCI address order."""
    return f"gpu-vfio-{index}"


def vfio_uuid(pci_bus_id: str) -> str:
    """NVIDIA's `uuid` of a vfio device: `uuid.NewSHA1(uuid.NameSpaceDNS, pciAddress)`."""
    return str(uuid.uuid5(uuid.NAMESPACE_DNS, pci_bus_id))


def build_vfio_devices(
    inventory: NodeInventory, pci_gpus: Sequence[PciGpu], *, iommufd_enabled: bool
) -> list[AllocatableDevice]:
    """One vfio device per GPU of `inventory` that has no MIG devices, named by its index in
    `pci_gpus` (the node's NVIDIA GPUs in address order, `PciSysfs.gpus`)."""
    by_address = {gpu.address.lower(): gpu for gpu in pci_gpus}
    devices = []
    for gpu in inventory.gpus:
        if gpu.mig_devices:
            continue
        info = gpu.info
        pci = by_address.get(info.pci_bus_id.lower())
        if pci is None:
            continue  # not on the PCI bus as sysfs shows it: nothing to bind
        attributes = {
            "type": AttributeValue.of_string(VFIO_TYPE),
            "uuid": AttributeValue.of_string(vfio_uuid(pci.address)),
            "deviceID": AttributeValue.of_string(f"0x{pci.device_id:04x}"),
            "vendorID": AttributeValue.of_string(f"0x{pci.vendor_id:04x}"),
            "productName": AttributeValue.of_string(info.product_name),
            "iommuFDEnabled": AttributeValue.of_bool(iommufd_enabled),
            PCI_BUS_ID_ATTRIBUTE: AttributeValue.of_string(pci.address),
        }
        if info.pcie_root:
            attributes[PCIE_ROOT_ATTRIBUTE] = AttributeValue.of_string(info.pcie_root)
        numa = pci.numa_node if pci.numa_node is not None else info.numa_node
        if numa is not None and numa >= 0:
            attributes[NUMA_NODE_ATTRIBUTE] = AttributeValue.of_int(numa)
        devices.append(
            AllocatableDevice(
                name=vfio_device_name(pci.index),
                kind="vfio",
                gpu=info,
                mig=None,
                attributes=MappingProxyType(attributes),
                capacity=MappingProxyType({}),
            )
        )
    return devices


def pci_view(inventory: NodeInventory) -> list[PciGpu]:
    """What sysfs shows of a node whose GPUs NVML all lists (every one on the nvidia driver):
    for nodes known only through NVML, such as `dra-gpu simulate`'s."""
    ordered = sorted(inventory.gpus, key=lambda gpu: pci_sort_key(gpu.info.pci_bus_id))
    return [
        PciGpu(
            index=index,
            address=gpu.info.pci_bus_id,
            vendor_id=gpu.info.pci_device_id & 0xFFFF,
            device_id=gpu.info.pci_device_id >> 16,
            numa_node=gpu.info.numa_node,
        )
        for index, gpu in enumerate(ordered)
    ]


def hidden_siblings(devices: Iterable[AllocatableDevice], held: Collection[str]) -> set[str]:
    """The devices to withdraw from the slices while the devices named in `held` are
    prepared: the other forms of a GPU whose vfio device is held, and the vfio device of a
    GPU whose whole GPU, MIG device or share is held."""
    devices = list(devices)
    by_name = {device.name: device for device in devices}
    vfio_gpus: set[str] = set()
    other_gpus: set[str] = set()
    for name in held:
        device = by_name.get(name)
        if device is None:
            continue
        (vfio_gpus if device.kind == "vfio" else other_gpus).add(device.gpu.uuid)
    return {
        device.name
        for device in devices
        if (device.kind != "vfio" and device.gpu.uuid in vfio_gpus)
        or (device.kind == "vfio" and device.gpu.uuid in other_gpus)
    }
