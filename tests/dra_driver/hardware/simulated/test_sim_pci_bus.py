"""The simulated node's PCI side behaves as the kernel does (`simulated.pci_bus`).

Every write goes through `PciSysfs`, the reader and writer the plugin uses,
so what these tests see is what the plugin sees on a simulated node.
"""

from __future__ import annotations

import errno
import time

import pytest

from dra_driver.composition.hardware import SimulatedNode, open_simulated
from dra_driver.errors import ConfigError, PassthroughError
from dra_driver.hardware.pci_sysfs import PciSysfs


@pytest.fixture
def node() -> SimulatedNode:
    return open_simulated("l4-node", latency={"vfio-node": 0.2})


def pci(node: SimulatedNode) -> PciSysfs:
    assert node.hardware.pci is not None
    return node.hardware.pci


def refused(action: object) -> int | None:
    with pytest.raises(PassthroughError) as caught:
        action()  # type: ignore[operator]
    return caught.value.errno_code


def test_sysfs_lists_the_gpus_in_address_order_on_the_nvidia_driver(node: SimulatedNode) -> None:
    gpus = pci(node).gpus()
    assert [g.address for g in gpus] == sorted(g.pci_bus_id for g in node.hardware.nvml.gpus())
    assert [g.index for g in gpus] == list(range(len(gpus)))
    assert all(g.vendor_id == 0x10DE for g in gpus)
    first = gpus[0].address
    assert pci(node).driver(first) == "nvidia"
    assert pci(node).driver_override(first) == ""
    groups = [pci(node).iommu_group(g.address) for g in gpus]
    assert len(set(groups)) == len(gpus)  # one group per GPU
    assert pci(node).iommu_enabled()
    assert pci(node).iommufd_enabled()


def test_nvidias_sequence_moves_a_gpu_to_vfio_pci_and_udev_makes_its_nodes_later(
    node: SimulatedNode,
) -> None:
    bdf = pci(node).gpus()[1].address
    group = pci(node).iommu_group(bdf)
    assert group is not None
    pci(node).write_override(bdf, None)
    pci(node).unbind(bdf)
    assert pci(node).driver(bdf) is None
    pci(node).write_override(bdf, "vfio-pci")
    assert pci(node).driver_override(bdf) == "vfio-pci"
    pci(node).bind(bdf, "vfio-pci")

    assert pci(node).driver(bdf) == "vfio-pci"
    cdev = pci(node).iommufd_cdev(bdf)
    assert cdev == "vfio0"
    assert not pci(node).group_node(group).exists()  # udev has not got to it yet
    deadline = time.monotonic() + 5
    while not (pci(node).group_node(group).exists() and pci(node).cdev_node(cdev).exists()):
        assert time.monotonic() < deadline
        time.sleep(0.01)

    pci(node).write_override(bdf, None)
    pci(node).unbind(bdf)
    assert not pci(node).group_node(group).exists()
    assert not pci(node).cdev_node(cdev).exists()
    pci(node).write_override(bdf, "nvidia")
    pci(node).bind(bdf, "nvidia")
    assert pci(node).driver(bdf) == "nvidia"


def test_the_kernel_refuses_what_it_refuses(node: SimulatedNode) -> None:
    bdf = pci(node).gpus()[0].address
    assert refused(lambda: pci(node).bind(bdf, "vfio-pci")) == errno.EBUSY  # nvidia holds it
    pci(node).unbind(bdf)
    # vfio-pci matches no device by id: without driver_override it takes nothing.
    assert refused(lambda: pci(node).bind(bdf, "vfio-pci")) == errno.ENODEV
    pci(node).write_override(bdf, "vfio-pci")
    assert refused(lambda: pci(node).bind(bdf, "nvidia")) == errno.ENODEV  # override says no
    assert refused(lambda: pci(node).bind(bdf, "nouveau")) == errno.ENOENT  # not loaded


def test_a_gpu_a_process_has_open_cannot_be_unbound(node: SimulatedNode) -> None:
    gpu = node.hardware.nvml.gpus()[0]
    node.sim.run_workload(gpu.uuid, "pod-1", sm_percent=50, memory_bytes=2**30)
    assert refused(lambda: pci(node).unbind(gpu.pci_bus_id)) == errno.EBUSY
    assert pci(node).driver(gpu.pci_bus_id) == "nvidia"


def test_no_cuda_process_runs_on_a_gpu_vfio_pci_holds(node: SimulatedNode) -> None:
    gpu = node.hardware.nvml.gpus()[0]
    pci(node).unbind(gpu.pci_bus_id)
    with pytest.raises(ConfigError, match="bound to no driver, not nvidia"):
        node.sim.run_workload(gpu.uuid, "pod-1", sm_percent=50, memory_bytes=2**30)


def test_a_kernel_without_iommufd_has_no_cdev_and_a_reboot_binds_nvidia_again(
    node: SimulatedNode,
) -> None:
    node.sim.set_iommufd(False)
    bdf = pci(node).gpus()[0].address
    pci(node).unbind(bdf)
    pci(node).write_override(bdf, "vfio-pci")
    pci(node).bind(bdf, "vfio-pci")
    assert not pci(node).iommufd_enabled()
    assert pci(node).iommufd_cdev(bdf) is None

    node.sim.reboot()

    assert pci(node).driver(bdf) == "nvidia"
    assert pci(node).driver_override(bdf) == ""
