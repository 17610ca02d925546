"""The CDI edits of passthrough GPUs (`dra_driver.container.vfio_cdi`), both IOMMU backends."""

from __future__ import annotations

import pytest

from dra_driver.claims.checkpoint import VfioRecord
from dra_driver.container import cdi
from dra_driver.container.vfio_cdi import vfio_common_edits, vfio_device_edits
from dra_driver.errors import CdiError

LEGACY = VfioRecord(pci_bus_id="0000:3b:00.0", gpu_uuid="GPU-1", taken=True, iommu_group=42)
IOMMUFD = VfioRecord(
    pci_bus_id="0000:3b:00.0",
    gpu_uuid="GPU-1",
    prefer_iommufd=True,
    taken=True,
    iommu_group=42,
    iommufd_cdev="vfio3",
)


def test_legacy_backend_gives_the_group_node_and_the_vfio_container() -> None:
    assert vfio_device_edits(LEGACY).to_dict() == {"deviceNodes": [{"path": "/dev/vfio/42"}]}
    with_api = VfioRecord(**{**LEGACY.__dict__, "api_device": True})
    assert vfio_common_edits([with_api]).to_dict() == {
        "env": ["NVIDIA_VISIBLE_DEVICES=void"],
        "deviceNodes": [{"path": "/dev/vfio/vfio"}],
    }


def test_iommufd_backend_gives_the_cdev_and_dev_iommu() -> None:
    assert vfio_device_edits(IOMMUFD).to_dict() == {
        "deviceNodes": [{"path": "/dev/vfio/devices/vfio3"}]
    }
    with_api = VfioRecord(**{**IOMMUFD.__dict__, "api_device": True})
    assert vfio_common_edits([with_api]).to_dict()["deviceNodes"] == [{"path": "/dev/iommu"}]


def test_no_api_device_unless_asked_as_nvidias_default() -> None:
    assert vfio_common_edits([LEGACY]).to_dict() == {"env": ["NVIDIA_VISIBLE_DEVICES=void"]}


def test_a_spec_with_path_only_nodes_validates() -> None:
    spec = cdi.claim_spec(
        "0b1e0000-0000-4000-8000-000000000001",
        [cdi.CdiDevice("gpu-vfio-0", vfio_device_edits(LEGACY))],
        vfio_common_edits([LEGACY]),
    )
    cdi.validate_spec(spec)


def test_a_record_without_its_node_cannot_make_edits() -> None:
    with pytest.raises(CdiError, match="no IOMMU group was recorded"):
        vfio_device_edits(VfioRecord(pci_bus_id="0000:3b:00.0", gpu_uuid="GPU-1"))
