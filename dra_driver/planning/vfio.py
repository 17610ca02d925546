"""Passthrough GPUs in a claim's plan: what Prepare records before it binds them to vfio-pci.

Each allocated vfio device (`dra_driver.node.vfio_devices`) gets a
`VfioRecord` with its GPU's PCI address and UUID and the IOMMU settings of
its `VfioDeviceConfig` (NVIDIA's defaults where none applies: LegacyOnly,
no API device). Recording them first lets a crash at any later step be
rolled back (`kubelet_plugin.vfio`). Whether the GPU is free of other
claims is `dra_driver.planning.devices`' business (a vfio device takes the
whole GPU). Pure; the same planner the node plugin and `dra-gpu simulate` run.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from dra_driver.claims.checkpoint import Checkpoint, VfioRecord
from dra_driver.claims.device_config import config_key
from dra_driver.planning.plan import ClaimPlan

if TYPE_CHECKING:  # the models load pydantic, only once a claim has a config
    from dra_driver.claims.device_config import VfioDeviceConfig


def plan_vfio(plan: ClaimPlan, placed: Checkpoint) -> ClaimPlan:  # noqa: ARG001 (planner)
    """`plan` with a `VfioRecord` on each passthrough device's record."""
    records = list(plan.records)
    changed = False
    for index, item in enumerate(plan.devices):
        if item.device.kind != "vfio":
            continue
        config = plan.configs.get(config_key(item.result))
        vfio_config: VfioDeviceConfig | None = (
            config if config is not None and config.kind == "VfioDeviceConfig" else None
        )
        iommu = vfio_config.iommu if vfio_config is not None else None
        records[index] = dataclasses.replace(
            records[index],
            vfio=VfioRecord(
                pci_bus_id=item.device.gpu.pci_bus_id,
                gpu_uuid=item.device.gpu.uuid,
                prefer_iommufd=iommu.prefer_iommufd if iommu is not None else False,
                api_device=iommu.enable_api_device if iommu is not None else False,
            ),
        )
        changed = True
    return plan.with_records(records) if changed else plan
