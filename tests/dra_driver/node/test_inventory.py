"""Discovery: one NVML snapshot, GPUs in PCI bus order, MIG data only where it exists."""

from __future__ import annotations

import dataclasses

import pytest

from dra_driver.errors import InventoryError, NvmlError
from dra_driver.hardware.nvml import codes
from dra_driver.node.inventory import NodeInventory, discover, pci_sort_key
from tests.fakes import (
    InventoryNvml,
    a100_40gb_gi_profiles,
    a100_static_mig_inventory,
    dgx_h100_inventory,
    make_gpu_info,
    make_gpu_inventory,
    make_mig_device,
    make_system_info,
)


def test_discover_orders_gpus_by_pci_bus_id_not_nvml_index() -> None:
    node = dgx_h100_inventory()
    shuffled = NodeInventory(system=node.system, gpus=tuple(reversed(node.gpus)))
    inventory = discover(InventoryNvml(shuffled))
    assert [gpu.info.pci_bus_id for gpu in inventory.gpus] == [
        "0000:1b:00.0",
        "0000:43:00.0",
        "0000:52:00.0",
        "0000:61:00.0",
        "0000:9d:00.0",
        "0000:c3:00.0",
        "0000:d1:00.0",
        "0000:df:00.0",
    ]
    assert inventory.system == node.system


def test_pci_order_is_numeric_across_domains_and_widths() -> None:
    ids = ["0009:01:00.0", "0000:ff:00.0", "00000008:01:00.0", "0000:0a:00.1", "0000:0a:00.0"]
    assert sorted(ids, key=pci_sort_key) == [
        "0000:0a:00.0",
        "0000:0a:00.1",
        "0000:ff:00.0",
        "00000008:01:00.0",
        "0009:01:00.0",
    ]


def test_unparsable_bus_ids_sort_last() -> None:
    assert sorted(["garbage", "0000:01:00.0"], key=pci_sort_key) == ["0000:01:00.0", "garbage"]


def test_discover_reads_mig_profiles_only_for_mig_capable_gpus() -> None:
    capable = make_gpu_info(index=0)
    plain = make_gpu_info(index=1, mig_capable=False)
    fake = InventoryNvml(
        NodeInventory(
            system=make_system_info(),
            gpus=(
                make_gpu_inventory(capable, a100_40gb_gi_profiles()),
                make_gpu_inventory(plain),
            ),
        )
    )
    inventory = discover(fake)
    assert ("gpu_instance_profiles", capable.uuid) in fake.calls
    assert ("gpu_instance_profiles", plain.uuid) not in fake.calls
    assert inventory.gpus[0].gi_profiles == a100_40gb_gi_profiles()
    assert inventory.gpus[1].gi_profiles == ()


def test_discover_reads_mig_devices_only_when_mig_is_on() -> None:
    node = a100_static_mig_inventory()
    fake = InventoryNvml(node)
    inventory = discover(fake)
    mig_calls = [uuid for method, uuid in fake.calls if method == "mig_devices"]
    assert mig_calls == [node.gpus[0].info.uuid, node.gpus[2].info.uuid]
    assert len(inventory.gpus[0].mig_devices) == 4
    assert inventory.gpus[1].mig_devices == ()
    assert inventory.gpus[2].mig_devices == ()


def test_discover_orders_mig_devices_by_placement() -> None:
    node = a100_static_mig_inventory()
    gpu0 = node.gpus[0]
    scrambled = dataclasses.replace(gpu0, mig_devices=tuple(reversed(gpu0.mig_devices)))
    inventory = discover(InventoryNvml(NodeInventory(node.system, (scrambled,))))
    starts = [mig.placement.start for mig in inventory.gpus[0].mig_devices]
    assert starts == [0, 2, 3, 4]


def test_discover_lets_nvml_errors_through() -> None:
    class BrokenNvml(InventoryNvml):
        def mig_devices(self, uuid: str) -> list:  # type: ignore[type-arg]
            raise NvmlError(codes.ERROR_GPU_IS_LOST, f"GPU {uuid}: GPU is lost")

    with pytest.raises(NvmlError) as info:
        discover(BrokenNvml(a100_static_mig_inventory()))
    assert info.value.code == codes.ERROR_GPU_IS_LOST


def test_node_inventory_finds_gpus_by_uuid() -> None:
    node = a100_static_mig_inventory()
    assert node.gpu(node.gpus[1].info.uuid) is node.gpus[1]
    with pytest.raises(InventoryError, match="GPU GPU-nope: not found"):
        node.gpu("GPU-nope")


def test_builders_keep_mig_devices_inside_real_placements() -> None:
    profile = a100_40gb_gi_profiles()[4]  # 3g.20gb: starts 0 and 4 only
    parent = make_gpu_info(mig_enabled=True)
    assert make_mig_device(parent, profile, 4, gpu_instance_id=2).placement.slices == range(4, 8)
    with pytest.raises(ValueError, match="no placement starting at 2"):
        make_mig_device(parent, profile, 2, gpu_instance_id=2)
