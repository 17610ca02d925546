"""GpuDriver when undoing its own work fails: the kubelet and the node must not pay for it.

A dynamic MIG device is created, then the claim's Prepare fails later (its CDI
spec cannot be written) and destroying the GPU instance is refused by the GPU
("In use by another client"). The kubelet must still be told why Prepare
failed, and a restarted plugin must still start (and do the rest of its
start-up recovery) instead of crash-looping on that one claim; the claim is
rolled back once the GPU lets go.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from dra_driver import DEFAULT_DRIVER_NAME
from dra_driver.claims.checkpoint import ClaimState, MigRecord
from dra_driver.claims.checkpoint_store import CheckpointStore
from dra_driver.container import cdi
from dra_driver.container.cdi_store import CdiStore
from dra_driver.errors import NvmlError
from dra_driver.hardware.nvml import codes
from dra_driver.hardware.nvml.interface import MigDeviceInfo, Placement
from dra_driver.hardware.simulated.hardware import SimHardware
from dra_driver.hardware.simulated.nvml import SimNvml
from dra_driver.hardware.simulated.shapes import load_shape
from dra_driver.kube.local_store import LocalCluster
from dra_driver.node.devices import AllocatableDevice, build_devices
from dra_driver.node.host import HostInfo
from dra_driver.node.inventory import discover
from kubelet_plugin.driver import GpuDriver
from kubelet_plugin.gpu_locks import GpuLocks
from kubelet_plugin.mig_lifecycle import MigLifecycle
from kubelet_plugin.service import ClaimRef, UnprepareResult
from tests.fakes import TEST_POOL, make_allocated_claim

BOOT = "b00710d0-0000-4000-8000-0000000000f1"
DEVICE = "gpu-1-mig-1g10gb-19-6"
UID = "f0000000-0000-4000-8000-000000000001"
ORPHAN_UID = "f0000000-0000-4000-8000-0000000000ff"
GPU0 = cdi.CdiDevice(name="gpu-0", edits=cdi.gpu_edits(0))


class BusyMig(MigLifecycle):
    """MigLifecycle whose GPU refuses to destroy instances while `busy` is set."""

    busy = False

    def destroy(self, record: MigRecord) -> None:
        if self.busy and record.gi_id is not None:
            raise NvmlError(
                codes.ERROR_IN_USE,
                f"nvmlGpuInstanceDestroy(GI {record.gi_id} on {record.parent_uuid}): "
                "In use by another client",
            )
        super().destroy(record)


@dataclass
class Node:
    hardware: SimHardware
    cluster: LocalCluster
    checkpoints: CheckpointStore
    cdi: CdiStore
    devices: list[AllocatableDevice]
    mig: BusyMig

    def driver(self) -> GpuDriver:
        assert self.hardware.proc_root is not None
        return GpuDriver(
            driver_name=DEFAULT_DRIVER_NAME,
            pool_name=TEST_POOL,
            cluster=self.cluster,
            devices=self.devices,
            host=HostInfo(self.hardware.proc_root),
            checkpoints=self.checkpoints,
            cdi_store=self.cdi,
            mig=self.mig,
            gpu_locks=GpuLocks(self.checkpoints.directory.parent / "locks"),
        )

    def store(self, name: str, uid: str, device: str) -> ClaimRef:
        claim = make_allocated_claim(name, uid=uid, results=[("gpu", device)])
        del claim["metadata"]["resourceVersion"]
        status = claim.pop("status")
        stored = self.cluster.put_resource_claim(claim)
        stored["status"] = status
        self.cluster.update_resource_claim_status(stored)
        return ClaimRef("default", uid, name)

    def gpu_instances(self) -> int:
        nvml = SimNvml(self.hardware)
        return sum(len(nvml.gpu_instances(g.uuid)) for g in nvml.gpus() if g.mig_enabled)


@pytest.fixture
def node(tmp_path: Path) -> Node:
    hardware = SimHardware(load_shape("dgx-h100"), proc_root=tmp_path / "proc")
    return Node(
        hardware=hardware,
        cluster=LocalCluster(tmp_path / "cluster"),
        checkpoints=CheckpointStore(tmp_path / "plugin" / "checkpoint", BOOT),
        cdi=CdiStore(tmp_path / "cdi"),
        devices=build_devices(discover(SimNvml(hardware)), dynamic_mig=True),
        mig=BusyMig(SimNvml(hardware)),
    )


def _fail_half_way(node: Node, driver: GpuDriver) -> tuple[ClaimRef, str]:
    """Prepare a MIG claim whose CDI spec cannot be written while the GPU is busy."""
    ref = node.store("mig", UID, DEVICE)
    node.cdi.root.write_text("not a directory\n")  # the spec write fails
    node.mig.busy = True
    try:
        error = driver.prepare([ref])[UID].error
    finally:
        node.cdi.root.unlink()
    return ref, error


def test_failed_rollback_does_not_hide_why_prepare_failed(node: Node) -> None:
    driver = node.driver()

    ref, error = _fail_half_way(node, driver)

    # the real cause (the node's base spec, written first, or the claim's)
    assert f"{node.cdi.root}/k8s.gpu.nvidia.com-" in error
    assert ": cannot write CDI spec" in error
    assert "In use by another client" in error  # and why nothing was undone
    entry = node.checkpoints.load().claims[UID]
    assert entry.state is ClaimState.PrepareStarted  # the record of the instance is kept
    assert node.gpu_instances() == 1
    # once the GPU lets go, the kubelet's retry undoes it and prepares cleanly
    node.mig.busy = False
    assert driver.prepare([ref])[UID].error == ""
    assert node.gpu_instances() == 1
    assert driver.unprepare([ref]) == {UID: UnprepareResult()}
    assert node.gpu_instances() == 0
    assert dict(node.checkpoints.load().claims) == {}


def test_start_up_survives_a_rollback_the_gpu_refuses(node: Node) -> None:
    ref, _error = _fail_half_way(node, node.driver())
    orphan = node.cdi.path_for(ORPHAN_UID)
    node.cdi.write(ORPHAN_UID, cdi.claim_spec(ORPHAN_UID, [GPU0], cdi.common_edits(195)))

    restarted = node.driver()
    report = restarted.recover()  # the GPU is still busy

    assert report.rollback_failed == [UID]
    assert report.rolled_back == []
    assert report.orphan_cdi_specs_removed == [ORPHAN_UID]  # the rest of recovery still ran
    assert not orphan.exists()
    assert node.checkpoints.load().claims[UID].state is ClaimState.PrepareStarted
    # the held placement stays refused to others until the claim is rolled back
    node.mig.busy = False
    assert restarted.unprepare([ref]) == {UID: UnprepareResult()}
    assert node.gpu_instances() == 0
    assert dict(node.checkpoints.load().claims) == {}


class StuckNvml(SimNvml):
    """NVML on which compute instances cannot be created and GPU instances are busy."""

    busy = True

    def create_compute_instance(
        self, uuid: str, gpu_instance_id: int, ci_profile_id: int
    ) -> MigDeviceInfo:
        raise NvmlError(codes.ERROR_INSUFFICIENT_RESOURCES, "nvmlComputeInstanceCreate: refused")

    def destroy_gpu_instance(self, uuid: str, gpu_instance_id: int) -> None:
        if self.busy:
            raise NvmlError(codes.ERROR_IN_USE, "nvmlGpuInstanceDestroy: In use by another client")
        super().destroy_gpu_instance(uuid, gpu_instance_id)


def test_a_refused_compute_instance_is_reported_even_when_its_gi_cannot_go(node: Node) -> None:
    nvml = StuckNvml(node.hardware)
    node.mig = BusyMig(nvml)
    driver = node.driver()
    ref = node.store("mig", UID, DEVICE)

    error = driver.prepare([ref])[UID].error

    assert "creating the compute instance failed" in error
    assert "nvmlComputeInstanceCreate: refused" in error
    assert node.checkpoints.load().claims[UID].state is ClaimState.PrepareStarted
    nvml.busy = False  # the GPU lets go: Unprepare removes the recorded GI
    assert driver.unprepare([ref]) == {UID: UnprepareResult()}
    assert node.gpu_instances() == 0


class StuckInstanceMig(MigLifecycle):
    """MigLifecycle whose GPU refuses to destroy any instance."""

    def destroy_instance(self, uuid: str, gi_id: int) -> None:
        raise NvmlError(codes.ERROR_IN_USE, f"GI {gi_id} on {uuid}: In use by another client")


def test_reclaiming_an_unknown_instance_the_gpu_refuses_does_not_stop_start_up(
    node: Node,
) -> None:
    nvml = SimNvml(node.hardware)
    uuid = nvml.gpus()[2].uuid
    nvml.set_mig_mode(uuid, True)
    gi = nvml.create_gpu_instance(uuid, 19, Placement(3, 1))
    node.mig = StuckInstanceMig(SimNvml(node.hardware))  # type: ignore[assignment]
    driver = node.driver()

    lines = driver.reconcile_mig(reclaim_unknown=True)

    assert lines == [
        f"could not destroy MIG instance GI {gi.id} (1g.10gb) on {uuid}: GI {gi.id} on {uuid}: "
        "In use by another client; it stays published as a static MIG device"
    ]
    assert node.gpu_instances() == 1
