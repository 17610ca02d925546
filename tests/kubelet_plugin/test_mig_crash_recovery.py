"""Dynamic MIG survives the plugin being killed at every step of creating or destroying it.

The real plugin (`--dynamic-mig`, simulated dgx-h100) is armed with one
failpoint of `MIG_PREPARE_STEPS` or `MIG_UNPREPARE_STEPS` at a time and
SIGKILLs itself there mid-RPC. The victim claim has three MIG devices on two
GPUs (created in parallel, so the other GPU's thread is somewhere else when
the process dies); a survivor claim shares GPU 0 with it, and an admin's
instance on GPU 2 predates the plugin. After the restart (start-up recovery)
and the kubelet's retry of the same call, or an Unprepare instead, the
hardware must match the checkpoint exactly: every GPU instance belongs to a
completed claim or to the admin, every recorded instance exists with its
recorded compute instance and MIG UUID, the CDI specs are those of the
completed claims and point at those instances' capability nodes, and an
emptied H100 is back to MIG off. A final Unprepare leaves nothing but the
admin's instance.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator

import grpc
import pytest
import yaml

from dra_driver import failpoints
from dra_driver.claims.checkpoint import ClaimState
from dra_driver.container import cdi
from dra_driver.container.cdi_store import CdiStore
from dra_driver.hardware.nvml.interface import Placement
from dra_driver.hardware.simulated.hardware import SimHardware
from dra_driver.hardware.simulated.node_files import sim_proc_root
from dra_driver.hardware.simulated.shapes import load_shape
from dra_driver.node.host import HostInfo
from kubelet_plugin.service import ClaimRef, PrepareResult
from tests.fakes import (
    LiveMigInstance,
    PluginProcess,
    live_mig_instances,
    make_allocated_claim,
)

pytestmark = pytest.mark.slow

SHAPE = "dgx-h100"
VICTIM = ClaimRef("default", "c0a5e000-0000-4000-8000-000000000001", "victim")
VICTIM_DEVICES = ("gpu-0-mig-3g40gb-9-0", "gpu-0-mig-1g20gb-15-4", "gpu-1-mig-1g10gb-19-6")
SURVIVOR = ClaimRef("default", "c0a5e000-0000-4000-8000-000000000002", "survivor")
SURVIVOR_DEVICES = ("gpu-0-mig-1g10gb-19-6",)
ADMIN_GPU = 2


class Node:
    """The plugin, its simulated hardware and the admin's instance on it."""

    def __init__(self, plugin: PluginProcess, hardware: SimHardware, admin: LiveMigInstance):
        self.plugin = plugin
        self.hardware = hardware
        self.admin = admin

    def prepare(self, ref: ClaimRef) -> PrepareResult:
        answer = self.plugin.client.prepare([ref])[ref.uid]
        assert answer.error == "", answer.error
        return answer

    def unprepare(self, ref: ClaimRef) -> None:
        assert self.plugin.client.unprepare([ref])[ref.uid].error == ""

    def crash_during(self, call: str, ref: ClaimRef, step: str) -> None:
        """Arm `step` in the running plugin, make the call, check it died right there."""
        self.plugin.arm([step])
        rpc = self.plugin.client.prepare if call == "prepare" else self.plugin.client.unprepare
        with pytest.raises(grpc.RpcError) as failed:
            rpc([ref])
        assert failed.value.code() == grpc.StatusCode.UNAVAILABLE
        assert self.plugin.wait_exit() == -signal.SIGKILL, self.plugin.log_tail()
        self.plugin.client.close()

    def instance_of(self, ref: ClaimRef) -> set[LiveMigInstance]:
        checkpoint = self.plugin.checkpoint()
        assert checkpoint is not None
        live = live_mig_instances(self.hardware)
        return {
            live[(d.mig.parent_uuid, d.mig.gi_id)]
            for d in checkpoint.claims[ref.uid].devices
            if d.mig is not None and d.mig.gi_id is not None
        }

    def assert_consistent(self) -> None:
        """Hardware, checkpoint and CDI directory agree exactly (see the module docstring)."""
        checkpoint = self.plugin.checkpoint()
        assert checkpoint is not None
        live = live_mig_instances(self.hardware)
        assert checkpoint.in_state(ClaimState.PrepareStarted) == [], "half-prepared after recovery"
        owned: dict[tuple[str, int], LiveMigInstance] = {}
        host = HostInfo(sim_proc_root(self.plugin.sim_state))
        for entry in checkpoint.claims.values():
            spec = yaml.safe_load(self.plugin.cdi_spec_path(entry.uid).read_text())
            nodes = {d["name"]: d["containerEdits"]["deviceNodes"] for d in spec["devices"]}
            for device in entry.devices:
                mig = device.mig
                assert mig is not None, device
                assert mig.created_by_us, device
                assert mig.stage == "complete", (entry.ref, device.device, mig)
                assert mig.gi_id is not None
                assert mig.ci_id is not None
                key = (mig.parent_uuid, mig.gi_id)
                assert key in live, f"{entry.ref}: recorded GI {key} does not exist"
                instance = live[key]
                assert (instance.profile_id, instance.placement) == (
                    mig.profile_id,
                    Placement(mig.placement_start, mig.placement_size),
                )
                (ci,) = instance.compute_instances
                assert (ci[0], ci[2]) == (mig.ci_id, mig.uuid)
                minor = int(device.device.split("-")[1])
                caps = [n["minor"] for n in nodes[cdi.cdi_device_name(entry.uid, device.device)]]
                assert caps == [
                    minor,
                    host.mig_cap(minor, mig.gi_id)[0],
                    host.mig_cap(minor, mig.gi_id, mig.ci_id)[0],
                ]
                assert key not in owned, f"GI {key} recorded twice"
                owned[key] = instance
        foreign = {key: i for key, i in live.items() if key not in owned}
        assert foreign == {(self.admin.parent_uuid, self.admin.gi_id): self.admin}, "leaked GIs"
        specs = CdiStore(self.plugin.cdi_root).claim_uids()
        assert specs == set(checkpoint.claims)
        assert len(self.plugin.cdi_files()) == len(specs)  # no temp file left behind
        with_instances = {i.parent_uuid for i in live.values()}
        for gpu in self.hardware.gpus():
            expected = (1, 1) if gpu.uuid in with_instances else (0, 0)
            assert self.hardware.mig_mode(gpu.uuid) == expected, f"gpu-{gpu.minor}"

    def assert_clean(self) -> None:
        """Only the admin's instance is left; nothing prepared; MIG off where it is empty."""
        checkpoint = self.plugin.checkpoint()
        assert checkpoint is not None
        assert dict(checkpoint.claims) == {}
        self.assert_consistent()
        assert list(live_mig_instances(self.hardware).values()) == [self.admin]


@pytest.fixture
def node() -> Iterator[Node]:
    plugin = PluginProcess(  # no MPS claim here: no MPS host
        shape=SHAPE, extra_args=["--dynamic-mig"], prefix="dra-gpu-migcrash-", mps_host=False
    )
    try:
        hardware = SimHardware(
            load_shape(SHAPE),
            node_name=plugin.node_name,
            state_path=plugin.sim_state,
            proc_root=sim_proc_root(plugin.sim_state),
        )
        uuid = hardware.gpu(ADMIN_GPU).uuid
        hardware.set_mig_mode(uuid, True)
        gi = hardware.create_gpu_instance(uuid, 19, Placement(0, 1))
        ci = hardware.create_compute_instance(uuid, gi.id, 0)
        admin = LiveMigInstance(uuid, gi.id, 19, Placement(0, 1), ((ci.id, 0, ci.uuid),))
        plugin.start()
        for ref, devices in ((VICTIM, VICTIM_DEVICES), (SURVIVOR, SURVIVOR_DEVICES)):
            results = [(f"mig-{i}", device) for i, device in enumerate(devices)]
            plugin.store_claim(make_allocated_claim(ref.name, uid=ref.uid, results=results))
        yield Node(plugin, hardware, admin)
    finally:
        plugin.close()


def _expected_answer(
    node: Node, ref: ClaimRef, devices: tuple[str, ...]
) -> list[tuple[str, tuple[str, ...]]]:
    base = node.plugin.base_cdi_id()  # the node's base spec, then the device's own
    return [(d, (base, cdi.qualified_device_id(ref.uid, d))) for d in devices]


def _answer(result: PrepareResult) -> list[tuple[str, tuple[str, ...]]]:
    return [(d.device_name, d.cdi_device_ids) for d in result.devices]


# --------------------------------------------------------------------------- creation


@pytest.mark.parametrize("step", failpoints.MIG_PREPARE_STEPS)
def test_crash_while_creating_then_prepare_again(node: Node, step: str) -> None:
    node.prepare(SURVIVOR)
    survivor = node.instance_of(SURVIVOR)

    node.crash_during("prepare", VICTIM, step)
    node.plugin.start(failpoints=[])

    node.assert_consistent()
    answer = node.prepare(VICTIM)  # the kubelet repeats the call
    assert _answer(answer) == _expected_answer(node, VICTIM, VICTIM_DEVICES)
    node.assert_consistent()
    assert len(node.instance_of(VICTIM)) == 3
    assert node.instance_of(SURVIVOR) == survivor  # same instance, same MIG UUID
    node.unprepare(VICTIM)
    node.unprepare(SURVIVOR)
    node.assert_clean()


@pytest.mark.parametrize("step", failpoints.MIG_PREPARE_STEPS)
def test_crash_while_creating_then_unprepare(node: Node, step: str) -> None:
    node.prepare(SURVIVOR)
    survivor = node.instance_of(SURVIVOR)

    node.crash_during("prepare", VICTIM, step)
    node.plugin.start(failpoints=[])
    node.unprepare(VICTIM)  # the pod was deleted meanwhile

    node.assert_consistent()
    checkpoint = node.plugin.checkpoint()
    assert checkpoint is not None
    assert set(checkpoint.claims) == {SURVIVOR.uid}
    assert node.instance_of(SURVIVOR) == survivor
    node.unprepare(SURVIVOR)
    node.assert_clean()


# --------------------------------------------------------------------------- destruction


@pytest.mark.parametrize("step", failpoints.MIG_UNPREPARE_STEPS)
def test_crash_while_destroying_then_unprepare_again(node: Node, step: str) -> None:
    node.prepare(SURVIVOR)
    node.prepare(VICTIM)
    survivor = node.instance_of(SURVIVOR)

    node.crash_during("unprepare", VICTIM, step)
    node.plugin.start(failpoints=[])

    node.assert_consistent()
    node.unprepare(VICTIM)  # the kubelet repeats the call
    node.assert_consistent()
    checkpoint = node.plugin.checkpoint()
    assert checkpoint is not None
    assert set(checkpoint.claims) == {SURVIVOR.uid}
    assert node.instance_of(SURVIVOR) == survivor
    node.unprepare(SURVIVOR)
    node.assert_clean()


@pytest.mark.parametrize("step", failpoints.MIG_UNPREPARE_STEPS)
def test_crash_while_destroying_then_prepare_again(node: Node, step: str) -> None:
    # A shared claim: the kubelet may prepare it for a new pod instead of finishing.
    node.prepare(VICTIM)

    node.crash_during("unprepare", VICTIM, step)
    node.plugin.start(failpoints=[])

    node.assert_consistent()
    answer = node.prepare(VICTIM)
    assert _answer(answer) == _expected_answer(node, VICTIM, VICTIM_DEVICES)
    node.assert_consistent()
    assert len(node.instance_of(VICTIM)) == 3
    node.unprepare(VICTIM)
    node.assert_clean()
