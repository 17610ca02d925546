"""The passthrough devices of a node (`dra_driver.node.vfio_devices`), from a simulated node."""

from __future__ import annotations

import hashlib
from pathlib import Path

from dra_driver.composition.hardware import open_simulated
from dra_driver.node.devices import build_devices
from dra_driver.node.inventory import discover
from dra_driver.node.vfio_devices import build_vfio_devices, hidden_siblings, vfio_uuid

MIXED_SHAPE = """
gpus:
  - model: A100-SXM4-40GB
    migDevices:
      - {profile: 3g.20gb, placement: 4}
  - model: A100-SXM4-40GB
    count: 2
"""


def test_a_gpu_with_mig_devices_gets_no_vfio_device_and_names_follow_pci_order(
    tmp_path: Path,
) -> None:
    shape = tmp_path / "mixed.yaml"
    shape.write_text(MIXED_SHAPE)
    hardware = open_simulated(str(shape)).hardware
    assert hardware.pci is not None
    inventory = discover(hardware.nvml)
    pci_gpus = hardware.pci.gpus()

    devices = build_vfio_devices(inventory, pci_gpus, iommufd_enabled=False)

    # GPU 0 has a MIG device: only GPUs 1 and 2 can go to a VM, named by PCI index.
    assert [d.name for d in devices] == ["gpu-vfio-1", "gpu-vfio-2"]
    assert [d.gpu.pci_bus_id for d in devices] == [g.address for g in pci_gpus[1:]]
    attributes = devices[0].attributes
    assert attributes["uuid"].value == vfio_uuid(pci_gpus[1].address)
    assert attributes["iommuFDEnabled"].value is False
    assert attributes["deviceID"].value == "0x20b0"  # A100-SXM4-40GB


def test_nvidias_uuid_is_gos_newsha1_of_the_pci_address_in_the_dns_namespace() -> None:
    # go's uuid.NewSHA1(space, data): SHA-1 of the space's 16 bytes then the data, first 16
    # bytes, version nibble 5, RFC 4122 variant bits.
    dns = bytes.fromhex("6ba7b8109dad11d180b400c04fd430c8")  # uuid.NameSpaceDNS
    digest = bytearray(hashlib.sha1(dns + b"0000:3b:00.0").digest()[:16])
    digest[6] = (digest[6] & 0x0F) | 0x50
    digest[8] = (digest[8] & 0x3F) | 0x80
    hexed = digest.hex()
    expected = f"{hexed[:8]}-{hexed[8:12]}-{hexed[12:16]}-{hexed[16:20]}-{hexed[20:]}"
    assert vfio_uuid("0000:3b:00.0") == expected
    assert vfio_uuid("0000:3b:00.0") != vfio_uuid("0000:3c:00.0")


def test_a_held_form_of_a_gpu_hides_the_other_forms_of_that_gpu_only() -> None:
    hardware = open_simulated("l4-node").hardware
    assert hardware.pci is not None
    inventory = discover(hardware.nvml)
    devices = build_devices(inventory) + build_vfio_devices(
        inventory, hardware.pci.gpus(), iommufd_enabled=True
    )
    by_gpu = {d.name: d.gpu.uuid for d in devices}
    vfio0 = next(d for d in devices if d.name == "gpu-vfio-0")
    whole0 = next(d.name for d in devices if d.kind == "gpu" and d.gpu.uuid == vfio0.gpu.uuid)

    assert hidden_siblings(devices, {"gpu-vfio-0"}) == {whole0}
    assert hidden_siblings(devices, {whole0}) == {"gpu-vfio-0"}
    assert hidden_siblings(devices, set()) == set()
    assert all(by_gpu[name] == vfio0.gpu.uuid for name in hidden_siblings(devices, {whole0}))
