"""GpuDriver and plan_claim in-process: the Prepare/Unprepare rules without sockets.

The process-level tests (`test_plugin_over_socket.py`, `test_crash_recovery.py`)
cover the wire and crashes; these cover what is easier to reach from inside:
the overlap and ownership rules of `plan_claim`, static MIG devices (CDI
capability nodes, and that Unprepare never destroys a MIG device it did not
create), a Prepare that fails half-way, and what `recover` repairs.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from dra_driver import DEFAULT_DRIVER_NAME
from dra_driver.claims.allocated import parse_allocated_claim
from dra_driver.claims.checkpoint import Checkpoint, ClaimEntry, ClaimState, PreparedDevice
from dra_driver.claims.checkpoint_store import CheckpointStore
from dra_driver.container.cdi import ContainerEdits
from dra_driver.container.cdi_store import CdiStore
from dra_driver.errors import ClaimError
from dra_driver.files.atomic import temp_prefix_for
from dra_driver.hardware.nvml.interface import Placement
from dra_driver.hardware.simulated.hardware import SimHardware
from dra_driver.hardware.simulated.nvml import SimNvml
from dra_driver.hardware.simulated.shapes import load_shape
from dra_driver.kube.local_store import LocalCluster
from dra_driver.node.devices import AllocatableDevice, build_devices
from dra_driver.node.host import HostInfo
from dra_driver.node.inventory import discover
from dra_driver.planning import plan_claim
from kubelet_plugin.driver import GpuDriver
from kubelet_plugin.gpu_locks import GpuLocks
from kubelet_plugin.mig_lifecycle import MigLifecycle
from kubelet_plugin.service import ClaimRef, UnprepareResult
from tests.fakes import TEST_CLAIM_UID, TEST_POOL, make_allocated_claim, make_opaque_config

BOOT = "b00710d0-0000-4000-8000-000000000000"


@dataclass
class Node:
    """A GpuDriver on simulated hardware, with the stores it writes."""

    hardware: SimHardware
    driver: GpuDriver
    cluster: LocalCluster
    checkpoints: CheckpointStore
    cdi: CdiStore
    devices: list[AllocatableDevice]

    def store(self, name: str, uid: str, devices: list[str]) -> ClaimRef:
        claim = make_allocated_claim(name, uid=uid, results=[("gpu", d) for d in devices])
        del claim["metadata"]["resourceVersion"]
        status = claim.pop("status")
        stored = self.cluster.put_resource_claim(claim)
        stored["status"] = status
        self.cluster.update_resource_claim_status(stored)
        return ClaimRef("default", uid, name)

    def new_driver(self) -> GpuDriver:
        """A second driver on the same node and files: what a restarted plugin gets."""
        return _driver(self.hardware, self.cluster, self.checkpoints, self.cdi, self.devices)


def _driver(
    hardware: SimHardware,
    cluster: LocalCluster,
    checkpoints: CheckpointStore,
    cdi: CdiStore,
    devices: list[AllocatableDevice],
) -> GpuDriver:
    assert hardware.proc_root is not None
    return GpuDriver(
        driver_name=DEFAULT_DRIVER_NAME,
        pool_name=TEST_POOL,
        cluster=cluster,
        devices=devices,
        host=HostInfo(hardware.proc_root),
        checkpoints=checkpoints,
        cdi_store=cdi,
        mig=MigLifecycle(SimNvml(hardware)),
        gpu_locks=GpuLocks(checkpoints.directory.parent / "locks"),
    )


def _node(tmp_path: Path, hardware: SimHardware) -> Node:
    devices = build_devices(discover(SimNvml(hardware)))
    cluster = LocalCluster(tmp_path / "cluster")
    checkpoints = CheckpointStore(tmp_path / "plugin" / "checkpoint", BOOT)
    cdi = CdiStore(tmp_path / "cdi")
    driver = _driver(hardware, cluster, checkpoints, cdi, devices)
    return Node(hardware, driver, cluster, checkpoints, cdi, devices)


@pytest.fixture
def h100(tmp_path: Path) -> Node:
    """Eight H100s with MIG off: eight whole-GPU devices gpu-0..gpu-7."""
    return _node(tmp_path, SimHardware(load_shape("dgx-h100"), proc_root=tmp_path / "proc"))


def _entry(uid: str, device: str, state: ClaimState, *, admin: bool = False) -> ClaimEntry:
    return ClaimEntry(
        uid=uid,
        namespace="default",
        name=f"holder-{uid}",
        state=state,
        devices=(
            PreparedDevice(
                request_names=("gpu",),
                pool=TEST_POOL,
                device=device,
                cdi_device_ids=(f"k8s.gpu.nvidia.com/claim={uid}-{device}",),
                admin_access=admin,
            ),
        ),
    )


# --------------------------------------------------------------------------- plan_claim


def _plan(h100: Node, results: list[dict[str, object]], checkpoint: Checkpoint) -> list[str]:
    claim = parse_allocated_claim(
        make_allocated_claim("planned", uid="p1", results=results),
        driver=DEFAULT_DRIVER_NAME,
        expected_uid="p1",
    )
    plan = plan_claim(
        claim,
        pool_name=TEST_POOL,
        devices={d.name: d for d in h100.devices},
        placed=checkpoint,
    )
    return [item.device.name for item in plan.devices]


@pytest.mark.parametrize("state", list(ClaimState))
def test_plan_refuses_a_device_another_claim_holds_in_any_state(
    h100: Node, state: ClaimState
) -> None:
    checkpoint = Checkpoint(boot_id=BOOT, claims={"other": _entry("other", "gpu-3", state)})

    with pytest.raises(ClaimError) as refused:
        _plan(
            h100,
            [{"request": "gpu", "device": "gpu-2"}, {"request": "gpu", "device": "gpu-3"}],
            checkpoint,
        )

    assert str(refused.value) == (
        "ResourceClaim default/planned: status.allocation.devices.results[1]: device 'gpu-3' is "
        "already prepared for claim default/holder-other (uid other); refusing to hand it out twice"
    )


def test_plan_lets_admin_access_share_a_held_device(h100: Node) -> None:
    held = Checkpoint(
        boot_id=BOOT, claims={"other": _entry("other", "gpu-3", ClaimState.PrepareCompleted)}
    )
    monitor = Checkpoint(
        boot_id=BOOT,
        claims={"mon": _entry("mon", "gpu-3", ClaimState.PrepareCompleted, admin=True)},
    )

    assert _plan(h100, [{"request": "gpu", "device": "gpu-3", "adminAccess": True}], held) == [
        "gpu-3"
    ]
    assert _plan(h100, [{"request": "gpu", "device": "gpu-3"}], monitor) == ["gpu-3"]


def test_plan_does_not_count_the_claims_own_record_as_a_conflict(h100: Node) -> None:
    own = Checkpoint(boot_id=BOOT, claims={"p1": _entry("p1", "gpu-4", ClaimState.PrepareStarted)})

    assert _plan(h100, [{"request": "gpu", "device": "gpu-4"}], own) == ["gpu-4"]


# --------------------------------------------------------------------------- GpuDriver


def test_prepare_that_fails_half_way_leaves_nothing_behind(h100: Node) -> None:
    ref = h100.store("no-majors", "c1", ["gpu-0"])
    assert h100.hardware.proc_root is not None
    devices_file = h100.hardware.proc_root / "devices"
    hidden = devices_file.with_name("devices.hidden")
    devices_file.rename(hidden)  # the CDI spec needs the nvidia-uvm major from it

    result = h100.driver.prepare([ref])["c1"]

    hidden.rename(devices_file)
    assert result.devices == ()
    assert str(devices_file) in result.error
    assert dict(h100.checkpoints.load().claims) == {}
    assert h100.cdi.claim_uids() == set()
    # gpu-0 is free: the same claim (a kubelet retry) and then another claim get it
    assert h100.driver.prepare([ref])["c1"].error == ""
    assert h100.driver.unprepare([ref]) == {"c1": UnprepareResult()}
    other = h100.store("next", "c2", ["gpu-0"])
    assert h100.driver.prepare([other])["c2"].error == ""


def test_static_mig_device_gets_capability_nodes_and_survives_unprepare(tmp_path: Path) -> None:
    hardware = SimHardware(load_shape("dgx-a100-40gb"), proc_root=tmp_path / "proc")
    gi = hardware.create_gpu_instance(1, 9, Placement(4, 4))  # 3g.20gb at slices 4..7
    ci = hardware.create_compute_instance(1, gi.id, 2)
    node = _node(tmp_path, hardware)
    (mig,) = [d for d in node.devices if d.mig is not None]
    ref = node.store("slice", "m1", [mig.name])
    caps_major = HostInfo(tmp_path / "proc").char_major("nvidia-caps")

    result = node.driver.prepare([ref])["m1"]

    assert result.error == ""
    assert [d.device_name for d in result.devices] == [mig.name]
    spec = node.cdi.read("m1")
    assert spec is not None
    (device,) = spec["devices"]
    assert device["name"] == f"m1-{mig.name}"
    assert device["containerEdits"]["deviceNodes"] == [
        {"path": f"/dev/nvidia{gi.gpu_minor}", "type": "c", "major": 195, "minor": gi.gpu_minor},
        {
            "path": f"/dev/nvidia-caps/nvidia-cap{ci.gi_cap_minor}",
            "type": "c",
            "major": caps_major,
            "minor": ci.gi_cap_minor,
            "fileMode": 0o444,
        },
        {
            "path": f"/dev/nvidia-caps/nvidia-cap{ci.cap_minor}",
            "type": "c",
            "major": caps_major,
            "minor": ci.cap_minor,
            "fileMode": 0o444,
        },
    ]

    assert node.driver.unprepare([ref]) == {"m1": UnprepareResult()}
    assert node.cdi.read("m1") is None
    # The MIG device existed before the claim; Unprepare must not destroy it.
    assert [g.id for g in hardware.gpu_instances(1)] == [gi.id]
    assert [c.id for c in hardware.compute_instances(1, gi.id)] == [ci.id]


def test_recover_finishes_an_unprepare_that_removed_the_spec(h100: Node) -> None:
    ref = h100.store("half-unprepared", "u1", ["gpu-5"])
    assert h100.driver.prepare([ref])["u1"].error == ""
    h100.cdi.remove("u1")  # Unprepare removes the spec first; the plugin died right after

    report = h100.new_driver().recover()

    assert report.unprepare_finished == ["u1"]
    assert dict(h100.checkpoints.load().claims) == {}
    # A Prepare now (the kubelet's next call could be one) writes the spec again.
    restarted = h100.new_driver()
    assert restarted.prepare([ref])["u1"].error == ""
    assert h100.cdi.read("u1") is not None


def test_recover_removes_orphan_specs_and_temp_files_but_nothing_else(h100: Node) -> None:
    ref = h100.store("kept", "k1", ["gpu-6"])
    assert h100.driver.prepare([ref])["k1"].error == ""
    kept = h100.cdi.path_for("k1")
    orphan = h100.cdi.path_for("gone")
    orphan.write_text(kept.read_text())
    temp = h100.cdi.root / f"{temp_prefix_for(kept.name)}.abc123"
    temp.write_text("half")
    foreign = h100.cdi.root / "vendor.example.com-net.yaml"
    foreign.write_text("cdiVersion: 0.6.0\n")
    (base,) = h100.cdi.base_names()
    stale = h100.cdi.base_path("common-00000000000000aa")  # of a driver no claim uses now
    stale.write_text(h100.cdi.base_path(base).read_text())

    report = h100.new_driver().recover()

    assert report.orphan_cdi_specs_removed == ["gone"]
    assert sorted(p.name for p in h100.cdi.root.iterdir()) == sorted(
        [kept.name, foreign.name, h100.cdi.base_path(base).name]
    )
    assert set(h100.checkpoints.load().claims) == {"k1"}


def test_a_base_spec_stays_while_a_claim_names_it(h100: Node) -> None:
    """A driver change gives a new base spec; the old one goes with its last claim, and
    a restarted plugin writes the current one again and removes what no claim names."""
    driver_env = ["NVIDIA_CTK_LIBCUDA_DIR=/usr/lib/x86_64-linux-gnu"]
    assert h100.hardware.proc_root is not None
    driver = GpuDriver(
        driver_name=DEFAULT_DRIVER_NAME,
        pool_name=TEST_POOL,
        cluster=h100.cluster,
        devices=h100.devices,
        host=HostInfo(h100.hardware.proc_root),
        checkpoints=h100.checkpoints,
        cdi_store=h100.cdi,
        mig=MigLifecycle(SimNvml(h100.hardware)),
        gpu_locks=GpuLocks(h100.checkpoints.directory.parent / "locks"),
        driver_edits=lambda: _edits(driver_env[0]),
    )
    driver.recover()
    (first,) = h100.cdi.base_names()
    old = h100.store("old", "o1", ["gpu-0"])
    assert driver.prepare([old])["o1"].devices[0].cdi_device_ids[0] == (
        f"k8s.gpu.nvidia.com/driver={first}"
    )

    driver_env[0] = "NVIDIA_CTK_LIBCUDA_DIR=/usr/lib64"  # another driver install
    new = h100.store("new", "n1", ["gpu-1"])
    (ids,) = [d.cdi_device_ids for d in driver.prepare([new])["n1"].devices]
    second = ids[0].removeprefix("k8s.gpu.nvidia.com/driver=")
    assert second != first
    assert h100.cdi.base_names() == {first, second}
    assert "NVIDIA_CTK_LIBCUDA_DIR=/usr/lib64" in h100.cdi.base_path(second).read_text()

    h100.cdi.base_path(second).unlink()  # someone deleted it: the next Prepare writes it
    again = h100.store("again", "a1", ["gpu-2"])
    assert driver.prepare([again])["a1"].error == ""
    assert h100.cdi.base_names() == {first, second}

    assert driver.unprepare([old])["o1"].error == ""
    assert h100.cdi.base_names() == {second}  # its last claim is gone

    driver_env[0] = "NVIDIA_CTK_LIBCUDA_DIR=/opt/lib"
    restarted = GpuDriver(
        driver_name=DEFAULT_DRIVER_NAME,
        pool_name=TEST_POOL,
        cluster=h100.cluster,
        devices=h100.devices,
        host=HostInfo(h100.hardware.proc_root),
        checkpoints=h100.checkpoints,
        cdi_store=h100.cdi,
        mig=MigLifecycle(SimNvml(h100.hardware)),
        gpu_locks=GpuLocks(h100.checkpoints.directory.parent / "locks"),
        driver_edits=lambda: _edits(driver_env[0]),
    )
    restarted.recover()
    (third,) = h100.cdi.base_names() - {second}
    assert second in h100.cdi.base_names()  # n1 and a1 still name it
    assert restarted.unprepare([new, again]) == {"n1": UnprepareResult(), "a1": UnprepareResult()}
    assert h100.cdi.base_names() == {third}


def _edits(env: str) -> ContainerEdits:
    return ContainerEdits(env=(env,))


def test_mps_claim_on_a_driver_without_mps_support_is_refused_cleanly(h100: Node) -> None:
    config = make_opaque_config(
        {
            "apiVersion": "resource.nvidia.com/v1beta1",
            "kind": "GpuConfig",
            "sharing": {"strategy": "MPS"},
        }
    )
    claim = make_allocated_claim("mps", uid=TEST_CLAIM_UID, configs=[config])
    del claim["metadata"]["resourceVersion"]
    status = claim.pop("status")
    stored = h100.cluster.put_resource_claim(claim)
    stored["status"] = status
    h100.cluster.update_resource_claim_status(stored)

    result = h100.driver.prepare([ClaimRef("default", TEST_CLAIM_UID, "mps")])[TEST_CLAIM_UID]

    assert "gpu-0: MPS was asked for, but this plugin runs without MPS" in result.error
    assert h100.checkpoints.load().claims == {}
    assert h100.cdi.claim_uids() == set()
