"""Fault injection from inside the plugin: faults a test can only make in the process itself.

The companion of test_fault_injection.py (the real process): a `GpuDriver`
on a simulated dgx-h100 with dynamic MIG, real files and a local cluster,
where the test can make the API raise what nothing expects, or make
destroying a MIG instance fail.

1. An exception nothing expected, from one claim's fetch or Prepare, fails
   that claim alone with a one-line reason; the others are prepared.
4. A Prepare that fails while the CDI directory is read-only (held claim
   kind: whole GPU), or whose MIG instance cannot be destroyed by the
   rollback (dynamic MIG), leaves the device free for other claims at once;
   the undo is finished later and nothing is leaked.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from dra_driver import DEFAULT_DRIVER_NAME
from dra_driver.claims.checkpoint import MigRecord
from dra_driver.claims.checkpoint_store import CheckpointStore
from dra_driver.container.cdi_store import CdiStore
from dra_driver.errors import NvmlError
from dra_driver.hardware.nvml import codes
from dra_driver.hardware.simulated.hardware import SimHardware
from dra_driver.hardware.simulated.nvml import SimNvml
from dra_driver.hardware.simulated.shapes import load_shape
from dra_driver.kube.local_store import LocalCluster
from dra_driver.node.devices import build_devices
from dra_driver.node.host import HostInfo
from dra_driver.node.inventory import discover
from kubelet_plugin.driver import GpuDriver
from kubelet_plugin.gpu_locks import GpuLocks
from kubelet_plugin.mig_lifecycle import MigLifecycle
from kubelet_plugin.service import ClaimRef
from tests.fakes import TEST_POOL, make_allocated_claim
from tests.fakes.mig import live_mig_instances
from tests.fakes.readonly import read_only

BOOT = "fa170000-b007-4000-8000-000000000000"
MIG_DEVICE = "gpu-1-mig-1g10gb-19-0"
OTHER_MIG_DEVICE = "gpu-1-mig-1g10gb-19-1"


class FlakyMig(MigLifecycle):
    """MigLifecycle whose `destroy` fails with NVML's IN_USE while `stuck` is set, as a GPU
    instance a process still holds does."""

    stuck = False

    def destroy(self, record: MigRecord) -> None:
        if self.stuck:
            raise NvmlError(
                codes.ERROR_IN_USE,
                f"GPU instance {record.gi_id} on {record.parent_uuid} is in use",
            )
        super().destroy(record)


class ExplodingCluster(LocalCluster):
    """A cluster whose API raises what no code expects for claims named `explode-*`."""

    def get_resource_claim(self, namespace: str, name: str) -> dict[str, Any]:
        if name.startswith("explode"):
            raise RuntimeError("the API client fell over")
        return super().get_resource_claim(namespace, name)


@dataclass
class Node:
    hardware: SimHardware
    driver: GpuDriver
    cluster: LocalCluster
    cdi: CdiStore
    checkpoints: CheckpointStore
    mig: FlakyMig

    def store(self, name: str, uid: str, device: str) -> ClaimRef:
        claim = make_allocated_claim(name, uid=uid, results=[("r", device)])
        del claim["metadata"]["resourceVersion"]
        status = claim.pop("status")
        stored = self.cluster.put_resource_claim(claim)
        stored["status"] = status
        self.cluster.update_resource_claim_status(stored)
        return ClaimRef("default", uid, name)

    def prepare(self, *refs: ClaimRef) -> dict[str, str]:
        return {uid: r.error for uid, r in self.driver.prepare(list(refs)).items()}

    def unprepare(self, *refs: ClaimRef) -> dict[str, str]:
        return {uid: r.error for uid, r in self.driver.unprepare(list(refs)).items()}


@pytest.fixture
def node(tmp_path: Path) -> Node:
    hardware = SimHardware(load_shape("dgx-h100"), proc_root=tmp_path / "proc")
    nvml = SimNvml(hardware)
    cluster = ExplodingCluster(tmp_path / "cluster")
    checkpoints = CheckpointStore(tmp_path / "plugin" / "checkpoint", BOOT)
    cdi_root = tmp_path / "cdi"
    cdi_root.mkdir()
    cdi = CdiStore(cdi_root)
    mig = FlakyMig(nvml)
    assert hardware.proc_root is not None
    driver = GpuDriver(
        driver_name=DEFAULT_DRIVER_NAME,
        pool_name=TEST_POOL,
        cluster=cluster,
        devices=build_devices(discover(nvml), dynamic_mig=True),
        host=HostInfo(hardware.proc_root),
        checkpoints=checkpoints,
        cdi_store=cdi,
        mig=mig,
        gpu_locks=GpuLocks(tmp_path / "plugin" / "locks"),
    )
    return Node(hardware, driver, cluster, cdi, checkpoints, mig)


def _uid(n: int) -> str:
    return f"fa170000-1115-4000-8000-{n:012d}"


# -- 1. claims are independent ----------------------------------------------------------


def test_1_an_unexpected_exception_fails_only_its_claim_with_one_line(node: Node) -> None:
    good = node.store("good", _uid(1), "gpu-0")
    bad = ClaimRef("default", _uid(2), "explode-1")
    other = node.store("other", _uid(3), "gpu-2")
    errors = node.prepare(good, bad, other)
    assert errors[good.uid] == ""
    assert errors[other.uid] == ""
    assert errors[bad.uid] == "internal error: RuntimeError: the API client fell over"
    assert node.unprepare(good, other) == {good.uid: "", other.uid: ""}


# -- 4. rollback that always frees ------------------------------------------------------


def test_4_a_prepare_failing_on_a_read_only_cdi_directory_leaves_the_gpu_free(
    node: Node,
) -> None:
    first = node.store("first", _uid(10), "gpu-3")
    second = node.store("second", _uid(11), "gpu-3")
    with read_only(node.cdi.root):
        error = node.prepare(first)[first.uid]
        assert "cannot write CDI spec" in error
        assert "already prepared" not in node.prepare(second)[second.uid]  # free, not phantom
    assert node.prepare(second) == {second.uid: ""}
    refused = node.prepare(first)[first.uid]
    assert "gpu-3" in refused
    assert second.uid in refused  # the real holder, not the failed claim
    assert node.unprepare(second, first) == {second.uid: "", first.uid: ""}
    assert node.prepare(first) == {first.uid: ""}
    assert node.unprepare(first) == {first.uid: ""}
    assert node.checkpoints.load().claims == {}
    assert node.cdi.claim_uids() == set()


def test_4_a_mig_instance_the_rollback_cannot_destroy_frees_the_claims_devices(
    node: Node,
) -> None:
    failed = node.store("failed", _uid(20), MIG_DEVICE)
    neighbour = node.store("neighbour", _uid(21), OTHER_MIG_DEVICE)
    same_place = node.store("same-place", _uid(22), MIG_DEVICE)
    node.mig.stuck = True
    with read_only(node.cdi.root):  # the Prepare fails after its MIG instance exists ...
        error = node.prepare(failed)[failed.uid]
    assert "cannot write CDI spec" in error
    assert "undoing the partial Prepare also failed" in error  # ... and the undo fails too
    assert "is in use" in error
    assert "devices are free for other claims" in error
    (record,) = node.checkpoints.load().claims.values()
    assert record.releasing

    assert node.prepare(neighbour) == {neighbour.uid: ""}  # the GPU serves other claims
    blocked = node.prepare(same_place)[same_place.uid]
    assert "already prepared" not in blocked  # no phantom holder; the slices are still taken
    node.mig.stuck = False
    assert node.prepare(same_place) == {same_place.uid: ""}  # the undo finished first
    assert failed.uid not in node.checkpoints.load().claims
    assert node.unprepare(neighbour, same_place, failed) == {
        neighbour.uid: "",
        same_place.uid: "",
        failed.uid: "",
    }
    assert live_mig_instances(node.hardware) == {}
    assert node.checkpoints.load().claims == {}


def test_4_a_failed_undo_is_finished_by_the_claims_own_unprepare(node: Node) -> None:
    failed = node.store("failed", _uid(30), MIG_DEVICE)
    node.mig.stuck = True
    with read_only(node.cdi.root):
        assert node.prepare(failed)[failed.uid] != ""
    assert len(live_mig_instances(node.hardware)) == 1
    node.mig.stuck = False
    assert node.unprepare(failed) == {failed.uid: ""}
    assert live_mig_instances(node.hardware) == {}
    assert node.checkpoints.load().claims == {}
