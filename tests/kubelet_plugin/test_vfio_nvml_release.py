"""A GPU changes kernel driver only while this process holds NVML released.

An initialized NVML has every GPU open, and the nvidia driver does not let
go of a GPU a process has open, so `VfioPassthrough` writes the driver
change with NVML released (`RealNvml.released`, exercised here at the pynvml
seam over the fake pynvml) and NVML works again afterwards.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from dra_driver.claims.checkpoint import (
    Checkpoint,
    ClaimEntry,
    ClaimState,
    PreparedDevice,
    VfioRecord,
)
from dra_driver.composition.hardware import open_simulated
from dra_driver.errors import NvmlError
from dra_driver.hardware.nvml import codes
from dra_driver.hardware.nvml.real import RealNvml
from dra_driver.hardware.pci_sysfs import PciSysfs
from kubelet_plugin.gpu_locks import GpuLocks
from kubelet_plugin.vfio import VfioPassthrough
from tests.fakes import fake_pynvml


class _Book:
    def __init__(self, checkpoint: Checkpoint) -> None:
        self.checkpoint = checkpoint

    def snapshot(self) -> Checkpoint:
        return self.checkpoint

    def current(self) -> Checkpoint:
        return self.checkpoint

    def update(
        self, mutate: Callable[[Checkpoint], Checkpoint], *, durable: bool = True
    ) -> Checkpoint:
        self.checkpoint = mutate(self.checkpoint)
        return self.checkpoint


def test_released_nvml_lets_go_and_comes_back() -> None:
    node = open_simulated("l4-node")
    lib = fake_pynvml(node.sim)
    nvml = RealNvml(lib, sysfs_root=None)
    uuid = nvml.gpus()[0].uuid

    with nvml.released():
        assert not lib.initialized

    assert lib.initialized
    assert nvml.gpu(uuid).uuid == uuid  # handles looked up again


def test_nvml_that_cannot_come_back_says_so() -> None:
    node = open_simulated("l4-node")
    lib = fake_pynvml(node.sim)
    nvml = RealNvml(lib, sysfs_root=None)
    lib.fail_next("nvmlInitWithFlags", codes.ERROR_DRIVER_NOT_LOADED)

    with pytest.raises(NvmlError, match="initialize NVML again"), nvml.released():
        pass
    with pytest.raises(NvmlError):
        nvml.gpus()


def test_the_driver_changes_happen_while_nvml_is_released(tmp_path: Path) -> None:
    node = open_simulated("l4-node")
    lib = fake_pynvml(node.sim)
    nvml = RealNvml(lib, sysfs_root=None)
    assert node.hardware.pci is not None
    sys_root, dev_root = node.hardware.pci.sys_root, node.hardware.pci.dev_root
    writes: list[tuple[str, bool]] = []

    def write(path: Path, text: str) -> None:
        writes.append((path.name, lib.initialized))
        node.sim.write_sysfs(str(path.relative_to(sys_root)), text)

    gpu = nvml.gpus()[0]
    record = VfioRecord(pci_bus_id=gpu.pci_bus_id, gpu_uuid=gpu.uuid)
    entry = ClaimEntry(
        uid="0b1e0000-0000-4000-8000-000000000001",
        namespace="default",
        name="vm",
        state=ClaimState.PrepareStarted,
        devices=(
            PreparedDevice(
                request_names=("gpu",),
                pool="n",
                device="gpu-vfio-0",
                cdi_device_ids=(),
                vfio=record,
            ),
        ),
    )
    book = _Book(Checkpoint(boot_id="b", claims={entry.uid: entry}))
    passthrough = VfioPassthrough(
        PciSysfs(sys_root, dev_root, writer=write),
        nvml,
        GpuLocks(tmp_path / "locks"),
        book,
        release_nvml=nvml.released,
    )
    plan: Any = None

    passthrough.apply(plan, entry)
    passthrough.release(book.checkpoint.claims[entry.uid])

    assert {name for name, _ in writes} == {"driver_override", "unbind", "bind"}
    assert [name for name, held in writes if held] == []  # NVML released for every write
    assert lib.initialized
    assert node.hardware.pci.driver(gpu.pci_bus_id) == "nvidia"
