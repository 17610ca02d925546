"""The CDI edits of a passthrough GPU, as NVIDIA's `vfio-cdi.go` writes them.

A VM's launcher needs the GPU's VFIO node and nothing of the NVIDIA driver:

* per device: the legacy group node `/dev/vfio/<group>`, or, when the claim
  prefers iommufd (`VfioDeviceConfig.iommu.backendPolicy: PreferIommuFD`) and
  the kernel has it, the device's cdev `/dev/vfio/devices/vfio<N>`;
* once per claim (these replace the driver's files and control nodes, so no
  driver library is mounted): `NVIDIA_VISIBLE_DEVICES=void` and, with
  `enableAPIDevice`, the IOMMU API node: `/dev/iommu` with iommufd, else the
  VFIO container `/dev/vfio/vfio`.

Nodes carry only their path, as NVIDIA's do: the runtime takes their type
and numbers from the host's node. Pure: what Prepare found is in the
claim's `VfioRecord`s.
"""

from __future__ import annotations

from collections.abc import Iterable

from dra_driver.claims.checkpoint import VfioRecord
from dra_driver.container.cdi import ContainerEdits, DeviceNode
from dra_driver.errors import CdiError

VFIO_DIR = "/dev/vfio"
VFIO_CONTAINER = "/dev/vfio/vfio"
IOMMU_DEVICE = "/dev/iommu"


def vfio_node_path(record: VfioRecord) -> str:
    """The container path of the GPU's VFIO node (the same path as on the host)."""
    if record.iommufd_cdev is not None:
        if not record.iommufd_cdev.startswith("vfio"):
            raise CdiError(f"GPU {record.pci_bus_id}: iommufd cdev {record.iommufd_cdev!r}")
        return f"{VFIO_DIR}/devices/{record.iommufd_cdev}"
    if record.iommu_group is None:
        raise CdiError(f"GPU {record.pci_bus_id}: no IOMMU group was recorded for it")
    return f"{VFIO_DIR}/{record.iommu_group}"


def vfio_device_edits(record: VfioRecord) -> ContainerEdits:
    """The edits of one passthrough GPU: its VFIO node."""
    return ContainerEdits(device_nodes=(_node(vfio_node_path(record)),))


def vfio_common_edits(records: Iterable[VfioRecord]) -> ContainerEdits:
    """The claim-wide edits of passthrough GPUs (see the module docstring)."""
    records = list(records)
    nodes = []
    if any(record.api_device for record in records):
        iommufd = any(record.iommufd_cdev is not None for record in records)
        nodes.append(_node(IOMMU_DEVICE if iommufd else VFIO_CONTAINER))
    return ContainerEdits(env=("NVIDIA_VISIBLE_DEVICES=void",), device_nodes=tuple(nodes))


def _node(path: str) -> DeviceNode:
    return DeviceNode(path=path, major=None, minor=None)
