"""MigLifecycle and GpuLocks in-process, over simulated hardware.

The MIG side effects of Prepare and Unprepare one call at a time: what is
created, what each step reports for the checkpoint, which errors a claim
gets (naming the device, profile and memory slices), what `find_unrecorded`
recovers after a crash, what `destroy` refuses to touch, and when MIG mode
is switched. Then the per-GPU locks that let claims on different GPUs run in
parallel: different GPUs at once, one GPU exclusively, also across
processes, and released when a holder is SIGKILLed. Last, the order in which
a real Prepare and Unprepare pass the MIG failpoints, which is the order
`MIG_PREPARE_STEPS` and `MIG_UNPREPARE_STEPS` promise.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from dra_driver import DEFAULT_DRIVER_NAME, failpoints
from dra_driver.claims.checkpoint import MigRecord
from dra_driver.claims.checkpoint_store import CheckpointStore
from dra_driver.container.cdi_store import CdiStore
from dra_driver.errors import CheckpointError, ClaimError, NvmlError, PluginError
from dra_driver.hardware.nvml import codes
from dra_driver.hardware.nvml.interface import Placement
from dra_driver.hardware.simulated.hardware import SimHardware
from dra_driver.hardware.simulated.nvml import SimNvml
from dra_driver.hardware.simulated.shapes import load_shape
from dra_driver.kube.local_store import LocalCluster
from dra_driver.node.devices import build_devices
from dra_driver.node.host import HostInfo
from dra_driver.node.inventory import discover
from dra_driver.planning.plan import MigTarget
from kubelet_plugin.driver import GpuDriver
from kubelet_plugin.gpu_locks import GpuLocks
from kubelet_plugin.mig_lifecycle import MigLifecycle
from kubelet_plugin.service import ClaimRef
from tests.fakes import TEST_POOL, live_mig_instances, make_allocated_claim

GPU = 0


def _hardware(shape: str = "dgx-h100") -> SimHardware:
    return SimHardware(load_shape(shape))


def _target(
    hw: SimHardware,
    *,
    profile: int = 19,
    start: int = 2,
    size: int = 1,
    ci_profile: int = 0,
    name: str = "gpu-0-mig-1g10gb-19-2",
    profile_name: str = "1g.10gb",
) -> MigTarget:
    return MigTarget(
        device_name=name,
        parent_uuid=hw.gpu(GPU).uuid,
        parent_minor=hw.gpu(GPU).minor,
        gi_profile_id=profile,
        ci_profile_id=ci_profile,
        placement=Placement(start, size),
        profile_name=profile_name,
    )


class Progress:
    """Collects what `create` reports for the checkpoint."""

    def __init__(self) -> None:
        self.records: list[MigRecord] = []

    def __call__(self, record: MigRecord) -> None:
        self.records.append(record)


# --------------------------------------------------------------------------- create


def test_create_switches_hopper_mig_on_and_reports_each_id() -> None:
    hw = _hardware()
    progress = Progress()

    record, mig = MigLifecycle(SimNvml(hw)).create(_target(hw), progress)

    assert hw.mig_mode(GPU) == (1, 1)
    (gi,) = hw.gpu_instances(GPU)
    (ci,) = hw.compute_instances(GPU, gi.id)
    assert (gi.profile_id, gi.placement, ci.profile_id) == (19, Placement(2, 1), 0)
    assert [r.stage for r in progress.records] == ["gi-created", "complete"]
    assert progress.records[0].gi_id == gi.id
    assert progress.records[-1] == record
    assert (record.gi_id, record.ci_id, record.uuid) == (gi.id, ci.id, ci.uuid)
    assert record.created_by_us
    assert (mig.uuid, mig.gpu_instance_id, mig.multiprocessors) == (ci.uuid, gi.id, 16)


def test_create_uses_the_ci_profile_it_is_given_for_asymmetric_profiles() -> None:
    hw = _hardware()
    target = _target(hw, profile=15, start=4, size=2, ci_profile=7, profile_name="1g.20gb")

    _record, mig = MigLifecycle(SimNvml(hw)).create(target, Progress())

    assert (mig.ci_profile_id, mig.multiprocessors) == (7, 26)


def test_create_on_an_occupied_placement_names_device_and_slices() -> None:
    hw = _hardware()
    lifecycle = MigLifecycle(SimNvml(hw))
    lifecycle.create(
        _target(hw, profile=9, start=0, size=4, ci_profile=2, name="big", profile_name="3g.40gb"),
        Progress(),
    )
    progress = Progress()

    with pytest.raises(ClaimError) as refused:
        lifecycle.create(_target(hw), progress)

    message = str(refused.value)
    assert "gpu-0-mig-1g10gb-19-2" in message
    assert "1g.10gb at memory slices 2..2" in message
    assert hw.gpu(GPU).uuid in message
    assert "occupied" in message
    assert isinstance(refused.value.__cause__, NvmlError)
    assert refused.value.__cause__.code == codes.ERROR_INSUFFICIENT_RESOURCES
    assert progress.records == []
    assert len(hw.gpu_instances(GPU)) == 1


def test_a_failed_compute_instance_undoes_its_gpu_instance() -> None:
    hw = _hardware()
    progress = Progress()

    with pytest.raises(ClaimError, match="creating the compute instance failed"):
        # CI profile 4 (7 slices) cannot live in a 1-slice GI.
        MigLifecycle(SimNvml(hw)).create(_target(hw, ci_profile=4), progress)

    assert [r.stage for r in progress.records] == ["gi-created"]
    assert hw.gpu_instances(GPU) == []


def test_a_gpu_instance_that_cannot_be_recorded_is_undone() -> None:
    hw = _hardware()

    def full_disk(record: MigRecord) -> None:
        raise CheckpointError(f"checkpoint: no space left to record GI {record.gi_id}")

    with pytest.raises(CheckpointError, match="no space left"):
        MigLifecycle(SimNvml(hw)).create(_target(hw), full_disk)

    assert hw.gpu_instances(GPU) == []  # nobody could have found it later


def test_create_on_ampere_with_mig_off_explains_the_reset() -> None:
    hw = _hardware("dgx-a100-80gb")
    progress = Progress()

    with pytest.raises(ClaimError) as refused:
        MigLifecycle(SimNvml(hw)).create(_target(hw), progress)

    message = str(refused.value)
    assert "gpu-0-mig-1g10gb-19-2" in message
    assert "MIG mode is off" in message
    assert "needs a GPU reset" in message
    assert "nvidia-smi -i 0 -mig 1" in message
    assert hw.mig_mode(GPU) == (0, 0)
    assert progress.records == []


def test_mig_mode_switch_refused_by_a_busy_gpu_is_a_claim_error() -> None:
    hw = _hardware()
    hw.set_busy(GPU, True)

    with pytest.raises(ClaimError, match=r"switching MIG mode on returned In use .*\(19\)"):
        MigLifecycle(SimNvml(hw)).ensure_mig_mode(hw.gpu(GPU).uuid, enabled=True, where="here")

    assert hw.mig_mode(GPU) == (0, 0)


# --------------------------------------------------------------------------- recovery


def test_find_unrecorded_fills_in_a_gpu_instance_created_before_a_crash() -> None:
    hw = _hardware()
    lifecycle = MigLifecycle(SimNvml(hw))
    planned = _target(hw).planned_record()
    assert lifecycle.find_unrecorded(planned) == planned  # MIG off: nothing was created

    hw.set_mig_mode(GPU, True)
    assert lifecycle.find_unrecorded(planned) == planned  # MIG on, no instance yet
    other = hw.create_gpu_instance(GPU, 19, Placement(3, 1))
    assert lifecycle.find_unrecorded(planned) == planned  # same profile, other placement
    gi = hw.create_gpu_instance(GPU, 19, Placement(2, 1))

    found = lifecycle.find_unrecorded(planned)

    assert found.gi_id == gi.id != other.id
    assert found.stage == "gi-created"
    recorded = planned.with_gpu_instance(other.id)
    assert lifecycle.find_unrecorded(recorded) == recorded  # an id is kept as recorded


def test_destroy_removes_ci_then_gi_and_is_harmless_to_repeat() -> None:
    hw = _hardware()
    lifecycle = MigLifecycle(SimNvml(hw))
    record, _ = lifecycle.create(_target(hw), Progress())

    lifecycle.destroy(record)
    lifecycle.destroy(record)

    assert hw.gpu_instances(GPU) == []
    # A GI that was created but whose CI was not (crash in between) goes too.
    hw.set_mig_mode(GPU, True)
    gi = hw.create_gpu_instance(GPU, 19, Placement(2, 1))
    lifecycle.destroy(_target(hw).planned_record().with_gpu_instance(gi.id))
    assert hw.gpu_instances(GPU) == []


def test_destroy_leaves_alone_what_it_did_not_create() -> None:
    hw = _hardware()
    lifecycle = MigLifecycle(SimNvml(hw))
    record, _ = lifecycle.create(_target(hw), Progress())
    # Someone else destroyed our instance, and the id was handed to an admin's instance.
    hw.destroy_compute_instance(GPU, record.gi_id or 0, record.ci_id or 0)
    hw.destroy_gpu_instance(GPU, record.gi_id or 0)
    admin = hw.create_gpu_instance(GPU, 9, Placement(4, 4))
    hw.create_compute_instance(GPU, admin.id, 2)
    reused = MigRecord(
        parent_uuid=record.parent_uuid,
        profile_id=19,
        placement_start=2,
        placement_size=1,
        created_by_us=True,
        gi_id=admin.id,
    )
    static = MigRecord(
        parent_uuid=record.parent_uuid,
        profile_id=9,
        placement_start=4,
        placement_size=4,
        created_by_us=False,
        gi_id=admin.id,
    )

    lifecycle.destroy(reused)
    lifecycle.destroy(static)

    assert [gi.id for gi in hw.gpu_instances(GPU)] == [admin.id]


def test_release_gpu_switches_only_an_empty_hopper_gpu_off() -> None:
    hw = _hardware()
    lifecycle = MigLifecycle(SimNvml(hw))
    uuid = hw.gpu(GPU).uuid
    record, _ = lifecycle.create(_target(hw), Progress())

    lifecycle.release_gpu(uuid)
    assert hw.mig_mode(GPU) == (1, 1)  # still has an instance

    lifecycle.destroy(record)
    hw.set_busy(GPU, True)
    lifecycle.release_gpu(uuid)
    assert hw.mig_mode(GPU) == (1, 1)  # a process holds the GPU: stays on, only a warning

    hw.set_busy(GPU, False)
    lifecycle.release_gpu(uuid)
    assert hw.mig_mode(GPU) == (0, 0)


def test_release_gpu_keeps_mig_on_ampere_and_when_asked_to() -> None:
    ampere = _hardware("dgx-a100-40gb")
    MigLifecycle(SimNvml(ampere)).release_gpu(ampere.gpu(GPU).uuid)
    assert ampere.mig_mode(GPU) == (1, 1)

    hopper = _hardware()
    hopper.set_mig_mode(GPU, True)
    MigLifecycle(SimNvml(hopper), disable_mig_when_empty=False).release_gpu(hopper.gpu(GPU).uuid)
    assert hopper.mig_mode(GPU) == (1, 1)


def test_instances_lists_and_destroy_instance_removes_any_instance() -> None:
    hw = _hardware("dgx-a100-40gb")
    lifecycle = MigLifecycle(SimNvml(hw))
    gi = hw.create_gpu_instance(1, 9, Placement(4, 4))
    hw.create_compute_instance(1, gi.id, 2)
    uuid = hw.gpu(1).uuid

    assert lifecycle.instances() == [(uuid, gi.id, "3g.20gb")]
    lifecycle.destroy_instance(uuid, gi.id)
    assert lifecycle.instances() == []


# --------------------------------------------------------------------------- GpuLocks

HOLD_SCRIPT = """
import sys
from pathlib import Path
from kubelet_plugin.gpu_locks import GpuLocks
with GpuLocks(Path(sys.argv[1])).hold([sys.argv[2]]):
    print("held", flush=True)
    sys.stdin.read()
"""


@pytest.fixture
def lock_dir(tmp_path: Path) -> Path:
    return tmp_path / "locks"


@contextmanager
def _holder(lock_dir: Path, uuid: str) -> Iterator[subprocess.Popen[str]]:
    """Another process (a second plugin) holding `uuid` until its stdin closes."""
    with subprocess.Popen(
        [sys.executable, "-c", HOLD_SCRIPT, str(lock_dir), uuid],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    ) as process:
        try:
            assert process.stdout is not None
            assert process.stdout.readline() == "held\n"
            yield process
        finally:
            if process.poll() is None:
                process.kill()
            process.wait(timeout=10)


def test_two_gpus_are_held_at_once(lock_dir: Path) -> None:
    locks = GpuLocks(lock_dir)
    holding = threading.Event()
    release = threading.Event()
    other_held = threading.Event()

    def hold_a() -> None:
        with locks.hold(["GPU-a"]):
            holding.set()
            release.wait(10)

    thread = threading.Thread(target=hold_a)
    thread.start()
    try:
        assert holding.wait(10)
        with locks.hold(["GPU-b"]):  # does not wait for GPU-a
            other_held.set()
        assert other_held.is_set()
        assert thread.is_alive()
    finally:
        release.set()
        thread.join(10)


def test_one_gpu_is_held_by_one_thread_at_a_time(lock_dir: Path) -> None:
    locks = GpuLocks(lock_dir, timeout_s=0.2)
    holding = threading.Event()
    release = threading.Event()

    def hold_a() -> None:
        with locks.hold(["GPU-a"]):
            holding.set()
            release.wait(10)

    thread = threading.Thread(target=hold_a)
    thread.start()
    try:
        assert holding.wait(10)
        with (
            pytest.raises(PluginError, match="GPU GPU-a: another operation held its lock"),
            locks.hold(["GPU-b", "GPU-a"]),
        ):
            pass
    finally:
        release.set()
        thread.join(10)
    with locks.hold(["GPU-b", "GPU-a"]):  # free again
        pass


def test_one_gpu_is_held_by_one_process_at_a_time(lock_dir: Path) -> None:
    locks = GpuLocks(lock_dir, timeout_s=0.2)
    with _holder(lock_dir, "GPU-a") as holder:
        with (
            pytest.raises(PluginError, match="GPU GPU-a: another plugin process held its lock"),
            locks.hold(["GPU-a"]),
        ):
            pass
        with locks.hold(["GPU-b"]):  # another GPU is free meanwhile
            pass

        assert holder.stdin is not None
        holder.stdin.close()  # the holder finishes and releases
        assert holder.wait(10) == 0
        with locks.hold(["GPU-a"]):
            pass


def test_a_killed_holder_releases_its_gpu(lock_dir: Path) -> None:
    with _holder(lock_dir, "GPU-a") as holder:
        os.kill(holder.pid, signal.SIGKILL)
        assert holder.wait(10) == -signal.SIGKILL

        with GpuLocks(lock_dir, timeout_s=5).hold(["GPU-a"]):
            pass


# --------------------------------------------------------------------------- failpoint order


def test_prepare_and_unprepare_pass_the_mig_failpoints_in_the_listed_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    hw = SimHardware(load_shape("dgx-h100"), proc_root=tmp_path / "proc")
    nvml = SimNvml(hw)
    cluster = LocalCluster(tmp_path / "cluster")
    driver = GpuDriver(
        driver_name=DEFAULT_DRIVER_NAME,
        pool_name=TEST_POOL,
        cluster=cluster,
        devices=build_devices(discover(nvml), dynamic_mig=True),
        host=HostInfo(tmp_path / "proc"),
        checkpoints=CheckpointStore(tmp_path / "plugin" / "checkpoint", hw.boot_id()),
        cdi_store=CdiStore(tmp_path / "cdi"),
        mig=MigLifecycle(nvml),
        gpu_locks=GpuLocks(tmp_path / "locks"),
    )
    claim = make_allocated_claim("one", uid="0de00000-0000-4000-8000-000000000001")
    claim["status"]["allocation"]["devices"]["results"][0]["device"] = "gpu-3-mig-2g20gb-14-0"
    status = claim.pop("status")
    del claim["metadata"]["resourceVersion"]
    stored = cluster.put_resource_claim(claim)
    cluster.update_resource_claim_status({**stored, "status": status})
    ref = ClaimRef("default", claim["metadata"]["uid"], "one")
    passed: list[str] = []
    monkeypatch.setattr(failpoints, "hit", passed.append)

    assert driver.prepare([ref])[ref.uid].error == ""
    (instance,) = live_mig_instances(hw).values()
    assert instance.profile_id == 14
    assert driver.unprepare([ref])[ref.uid].error == ""

    assert passed == [
        failpoints.PREPARE_STEPS[0],
        *failpoints.MIG_PREPARE_STEPS,
        *failpoints.PREPARE_STEPS[1:],
        failpoints.UNPREPARE_STEPS[0],
        *failpoints.MIG_UNPREPARE_STEPS,
        *failpoints.UNPREPARE_STEPS[1:],
    ]
    assert live_mig_instances(hw) == {}
    assert hw.mig_mode(3) == (0, 0)
