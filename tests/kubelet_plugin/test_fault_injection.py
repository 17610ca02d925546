"""Fault injection: no fault or hostile input costs a running claim, a device or the daemon.

One test (or group) per finding of the hardening review, each holding the
kinds of claims it names, against the real plugin process (real sockets,
files, MPS host and simulated daemons) unless the fault can only be made
from inside (then a `GpuDriver` on simulated hardware):

1. one bad claim fails only itself (opaque parameters nested too deep, an
   exception nothing expected), with a one-line reason;
2. a dangling checkpoint symlink or a wiped checkpoint directory, while
   claims of every kind are held (whole GPU, dynamic MIG, MPS, consumable
   shares, MIG+MPS), loses, leaks and double-allocates nothing, whether the
   plugin notices on its next call or at its next start;
4. a Prepare that fails with the CDI directory read-only, or whose MIG
   instance cannot be destroyed, leaves the device free for other claims;
5. a second plugin installation on the same CDI directory is refused, and
   specs carry their owner (tests/kubelet_plugin/test_node_ownership.py has
   the lock rules);
8. concurrent Unprepares of the MPS claims of one daemon stop it exactly
   once; a kill storm during MPS Prepares leaves no daemon without a claim;
9. temp files are cleaned at start; Unprepare of an unknown claim is a
   success whatever its UID; log lines stay one line; a FIFO in the local
   store fails one claim and stops no re-publishing.

6. 32 open health streams (the cap) leave Prepare its threads; a 33rd is
   refused (`bench health-streams` measures the latency).

Finding 3 (a failed start publishes nothing) is the start-up sequence's
(tests/kubelet_plugin/test_startup.py); 7 (memory under hostile calls) is
test_fuzz.py and `bench fuzz`.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import grpc
import pytest

from dra_driver.claims.checkpoint import ClaimState
from dra_driver.container.cdi_store import OWNER_PREFIX
from dra_driver.files.atomic import temp_prefix_for
from kubelet_plugin.gen.dra_health.v1alpha1 import api_pb2 as health_pb2
from kubelet_plugin.gen.dra_health.v1alpha1 import api_pb2_grpc as health_grpc
from kubelet_plugin.server import MAX_HEALTH_STREAMS
from kubelet_plugin.service import ClaimRef
from tests.fakes import PluginProcess, make_allocated_claim, make_opaque_config, plugin_sim
from tests.fakes.mig import live_mig_instances

pytestmark = pytest.mark.slow

WHOLE = ClaimRef("default", "fa170000-0000-4000-8000-000000000001", "whole-gpu")
MIG = ClaimRef("default", "fa170000-0000-4000-8000-000000000002", "dynamic-mig")
MPS = ClaimRef("default", "fa170000-0000-4000-8000-000000000003", "mps")
SHARE_A = ClaimRef("default", "fa170000-0000-4000-8000-000000000004", "share-a")
SHARE_B = ClaimRef("default", "fa170000-0000-4000-8000-000000000005", "share-b")
MIG_MPS = ClaimRef("default", "fa170000-0000-4000-8000-000000000006", "mig-mps")
HELD = (WHOLE, MIG, MPS, SHARE_A, SHARE_B, MIG_MPS)
KINDS = "whole GPU, dynamic MIG, MPS, consumable shares, MIG+MPS"

THIEF = ClaimRef("default", "fa170000-0000-4000-8000-0000000000a1", "wants-gpu-0")
MIG_THIEF = ClaimRef("default", "fa170000-0000-4000-8000-0000000000a2", "wants-the-mig-slices")
SHARE_C = ClaimRef("default", "fa170000-0000-4000-8000-0000000000a3", "share-c")

MIG_DEVICE = "gpu-1-mig-1g10gb-19-0"
MIG_MPS_DEVICE = "gpu-4-mig-1g10gb-19-0"


def _mps(kind: str, percentage: int) -> dict[str, Any]:
    return make_opaque_config(
        {
            "apiVersion": "resource.nvidia.com/v1beta1",
            "kind": kind,
            "sharing": {
                "strategy": "MPS",
                "mpsConfig": {"defaultActiveThreadPercentage": percentage},
            },
        }
    )


def _share(device: str, n: int, memory: str) -> dict[str, Any]:
    return {
        "request": "gpu",
        "device": device,
        "shareID": f"5fa1e000-0000-4000-8000-{n:012d}",
        "consumedCapacity": {"memory": memory},
    }


def _store(plugin: PluginProcess, ref: ClaimRef, **kwargs: Any) -> None:
    plugin.store_claim(make_allocated_claim(ref.name, uid=ref.uid, **kwargs))


def _store_every_kind(plugin: PluginProcess) -> None:
    _store(plugin, WHOLE, results=[("gpu", "gpu-0")])
    _store(plugin, MIG, results=[("mig", MIG_DEVICE)], device_class="mig.nvidia.com")
    _store(plugin, MPS, results=[_share("gpu-2", 1, "8Gi")], configs=[_mps("GpuConfig", 50)])
    _store(plugin, SHARE_A, results=[_share("gpu-3", 2, "30Gi")])
    _store(plugin, SHARE_B, results=[_share("gpu-3", 3, "30Gi")])
    _store(
        plugin,
        MIG_MPS,
        results=[("mig", MIG_MPS_DEVICE)],
        configs=[_mps("MigDeviceConfig", 40)],
        device_class="mig.nvidia.com",
    )
    # What a buggy scheduler, or a second installation, would hand out again:
    _store(plugin, THIEF, results=[("gpu", "gpu-0")])
    _store(plugin, MIG_THIEF, results=[("mig", MIG_DEVICE)], device_class="mig.nvidia.com")
    _store(plugin, SHARE_C, results=[_share("gpu-3", 4, "30Gi")])


@dataclass
class Held:
    """What the held claims have on the node; compared before and after a fault."""

    specs: set[str]
    daemons: dict[str, int]
    instances: int


def _held(plugin: PluginProcess) -> Held:
    return Held(
        specs={name for name in plugin.cdi_files() if name.endswith(".yaml")},
        daemons=plugin.mps_daemons(),
        instances=len(live_mig_instances(plugin_sim(plugin))),
    )


def _ok(plugin: PluginProcess, *refs: ClaimRef, unprepare: bool = False) -> None:
    call = plugin.client.unprepare if unprepare else plugin.client.prepare
    answers = call(list(refs))
    assert {uid: a.error for uid, a in answers.items()} == {ref.uid: "" for ref in refs}, (
        plugin.log_tail()
    )


def _assert_nothing_left(plugin: PluginProcess) -> None:
    checkpoint = plugin.checkpoint()
    assert checkpoint is None or dict(checkpoint.claims) == {}
    assert plugin.cdi_files() == []
    assert plugin.mps_daemons() == {}
    # The MPS host removes a stopped daemon's status file after it answers the plugin: give
    # it a moment (a file still there after that is a leak).
    deadline = time.monotonic() + 5.0
    while plugin.mps_files() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert plugin.mps_files() == []
    assert live_mig_instances(plugin_sim(plugin)) == {}


@pytest.fixture
def plugin() -> Iterator[PluginProcess]:
    with PluginProcess(prefix="dra-fi-", extra_args=["--dynamic-mig"]) as process:
        _store_every_kind(process)
        yield process


# -- 1. claims are independent -----------------------------------------------------


def test_1_a_claim_with_parameters_nested_500_deep_fails_alone(plugin: PluginProcess) -> None:
    deep: dict[str, Any] = {"leaf": True}
    for _ in range(199):  # deeper than the limit; the local store copies recursively
        deep = {"x": deep}
    bad = ClaimRef("default", "fa170000-0000-4000-8000-0000000000b1", "deep")
    config = make_opaque_config({"apiVersion": "resource.nvidia.com/v1beta1", "deep": deep})
    _store(plugin, bad, results=[("gpu", "gpu-5")], configs=[config])
    answers = plugin.client.prepare([WHOLE, bad, MPS])
    assert answers[WHOLE.uid].error == ""
    assert answers[MPS.uid].error == ""
    error = answers[bad.uid].error
    assert "config[0].opaque.parameters is nested more than 32 levels deep" in error
    assert "\n" not in error
    assert "Traceback" not in plugin.log_tail(20_000)
    _ok(plugin, WHOLE, MPS, bad, unprepare=True)
    _assert_nothing_left(plugin)


# -- 2. state that cannot be lost while claims run ------------------------------------


def _damage(plugin: PluginProcess, how: str) -> None:
    shutil.rmtree(plugin.checkpoint_dir)
    if how == "dangling-symlink":
        plugin.checkpoint_dir.symlink_to(plugin.work / "gone")


@pytest.mark.parametrize("when", ["next-call", "restart"])
@pytest.mark.parametrize("how", ["dangling-symlink", "wiped"])
def test_2_a_lost_checkpoint_loses_leaks_and_double_allocates_nothing(
    plugin: PluginProcess, how: str, when: str
) -> None:
    # Held: every kind (KINDS).
    _ok(plugin, *HELD)
    before = _held(plugin)
    assert len(before.specs) == len(HELD)
    assert len(before.daemons) == 2  # gpu-2's and the MIG device's on gpu-4
    assert before.instances == 2

    _damage(plugin, how)
    if when == "restart":
        plugin.kill()
        plugin.start()

    thief = plugin.client.prepare([THIEF, MIG_THIEF, SHARE_C])
    assert "gpu-0" in thief[THIEF.uid].error
    assert WHOLE.uid in thief[THIEF.uid].error  # held by the claim that had it
    assert thief[MIG_THIEF.uid].error != ""
    assert "refusing to overcommit" in thief[SHARE_C.uid].error  # 3 x 30Gi of an 80 GB GPU
    assert _held(plugin) == before  # no spec deleted, no daemon stopped, no instance lost
    checkpoint = plugin.checkpoint()
    assert checkpoint is not None
    assert {uid: e.state for uid, e in checkpoint.claims.items()} == {
        ref.uid: ClaimState.PrepareCompleted for ref in HELD
    }
    _ok(plugin, *HELD)  # the kubelet's repeated Prepares: same answers, no side effects

    _ok(plugin, *HELD, unprepare=True)
    _ok(plugin, THIEF, MIG_THIEF, SHARE_C)  # now free
    _ok(plugin, THIEF, MIG_THIEF, SHARE_C, unprepare=True)
    _assert_nothing_left(plugin)


# -- 5. one owner per node ----------------------------------------------------------------


def test_5_a_second_installation_on_the_same_cdi_directory_refuses_to_start(
    plugin: PluginProcess,
) -> None:
    _ok(plugin, WHOLE, MPS)
    specs = plugin.cdi_files()
    other_root = plugin.work / "other-kubelet"
    argv = [
        sys.executable,
        "-m",
        "dra_driver.cli",
        "kubelet-plugin",
        f"--node-name={plugin.node_name}",
        f"--nvml=sim:{plugin.shape}",
        f"--sim-state={plugin.sim_state}",
        f"--cluster=local:{plugin.cluster_root}",
        f"--kubelet-root={other_root}",
        f"--cdi-root={plugin.cdi_root}",
        "--publish-interval=3600",
        "--instance-wait=1",
    ]
    second = subprocess.run(argv, check=False, capture_output=True, text=True, timeout=120)
    assert second.returncode != 0
    assert "is in use by another dra-gpu installation" in second.stderr
    assert plugin.cdi_files() == specs  # it deleted nothing
    for uid in (WHOLE.uid, MPS.uid):
        text = plugin.cdi_spec_path(uid).read_text()
        assert f"{OWNER_PREFIX}gpu.nvidia.com@{plugin.kubelet_root}/plugins/gpu.nvidia.com" in (
            text
        )
    _ok(plugin, WHOLE, MPS, unprepare=True)


# -- 8. MPS bookkeeping ----------------------------------------------------------------


def test_8_unpreparing_two_mps_claims_of_one_daemon_in_one_call_stops_it_once(
    plugin: PluginProcess,
) -> None:
    other = ClaimRef("default", "fa170000-0000-4000-8000-0000000000c1", "mps-2")
    _store(plugin, other, results=[_share("gpu-2", 9, "8Gi")], configs=[_mps("GpuConfig", 20)])
    _ok(plugin, MPS, other)
    ((uuid, pid),) = plugin.mps_daemons().items()
    _ok(plugin, MPS, other, unprepare=True)
    assert plugin.mps_daemons() == {}
    log = plugin.log_tail(50_000)
    assert log.count(f"MPS control daemon for {uuid} stopped") == 1, log
    _assert_nothing_left(plugin)
    del pid


def test_8_a_kill_storm_during_mps_prepares_leaves_no_daemon_without_a_claim(
    plugin: PluginProcess,
) -> None:
    for step in (
        "mps-after-intent-recorded",
        "mps-after-daemon-started",
        "mps-after-daemon-recorded",
    ):
        plugin.crash_during("prepare", MPS, step)
    plugin.restart()
    assert plugin.mps_daemons() == {}  # the half-prepared claim was rolled back
    _ok(plugin, MPS)
    assert len(plugin.mps_daemons()) == 1
    _ok(plugin, MPS, unprepare=True)
    _assert_nothing_left(plugin)


# -- 9. the small ones --------------------------------------------------------------------


def test_9_unprepare_of_an_unknown_claim_is_a_success_whatever_its_uid(
    plugin: PluginProcess,
) -> None:
    for uid in ["../../etc/passwd", "u" * 300, "claim\nwith a newline", "-", "ä"]:
        answers = plugin.client.unprepare([ClaimRef("default", uid, "unknown")])
        assert answers == {uid: answers[uid]}, uid
        assert answers[uid].error == "", uid
    _assert_nothing_left(plugin)


def test_9_temp_files_of_interrupted_writes_are_removed_at_start(plugin: PluginProcess) -> None:
    _ok(plugin, WHOLE)
    litter = plugin.checkpoint_dir / f"{temp_prefix_for(WHOLE.uid + '.json')}.x1y2z3"
    litter.write_text("half a claim")
    cdi_litter = plugin.cdi_root / f"{temp_prefix_for('k8s.gpu.nvidia.com-claim_x')}.q"
    cdi_litter.write_text("half a spec")
    # the single-file checkpoint of an older dra-gpu, next to the claim files
    legacy_litter = plugin.checkpoint_dir.parent / f"{temp_prefix_for('checkpoint.json')}.k3j2"
    legacy_litter.write_text("half a checkpoint")
    plugin.kill()
    plugin.start()
    assert not litter.exists()
    assert not cdi_litter.exists()
    assert not legacy_litter.exists()
    _ok(plugin, WHOLE, unprepare=True)


def test_9_a_fifo_in_the_local_store_fails_one_claim_and_stops_no_republishing() -> None:
    """`--cluster local:DIR`: a FIFO where a claim file should be, or among the slices,
    is refused at once (reading one waits for a writer, for ever)."""
    fifo_claim = ClaimRef("default", "fa170000-0000-4000-8000-0000000000c1", "a-fifo")
    with PluginProcess(prefix="dra-fifo-", publish_interval=300) as plugin:
        _store(plugin, WHOLE, results=[("gpu", "gpu-0")])
        claim_file = plugin.cluster_root / "resourceclaims" / "default" / "a-fifo.yaml"
        os.mkfifo(claim_file)
        started = time.monotonic()
        answers = plugin.client.prepare([fifo_claim, WHOLE])
        assert time.monotonic() - started < 10
        assert answers[WHOLE.uid].error == ""
        assert f"{claim_file}: cannot read it: not a regular file (a FIFO)" in (
            answers[fifo_claim.uid].error
        )
        _ok(plugin, WHOLE, unprepare=True)

        # The slices' watch wakes the publisher, which lists the slices; the FIFO fails
        # that round (logged), and the next one after it is gone republishes.
        slices = plugin.cluster_root / "resourceslices"
        names = sorted(p.name for p in slices.glob("*.yaml"))
        assert names
        os.mkfifo(slices / "a-fifo.yaml")
        (slices / names[0]).unlink()
        plugin.wait_for(
            lambda: (
                "a-fifo.yaml: cannot read it: not a regular file (a FIFO)"
                in plugin.log_tail(20_000)
            ),
            "the publisher's error",
            timeout=30,
        )
        (slices / "a-fifo.yaml").unlink()
        plugin.wait_for((slices / names[0]).exists, "the slice republished", timeout=60)


def test_9_a_claim_name_with_newlines_cannot_forge_log_lines(plugin: PluginProcess) -> None:
    forged = "x\n2026-11-27 10:00:00,000 INFO kubelet_plugin.driver: prepared everything"
    plugin.client.prepare([ClaimRef("default", "fa170000-0000-4000-8000-0000000000d1", forged)])
    assert "\n2026-11-27 10:00:00,000 INFO" not in plugin.log_tail(20_000)
    assert "x\\n2026-11-27" in plugin.log_tail(20_000)


def test_8_unprepare_works_while_the_mps_host_is_down_and_the_next_host_cleans_up(
    plugin: PluginProcess,
) -> None:
    other = ClaimRef("default", "fa170000-0000-4000-8000-0000000000c2", "mps-3")
    _store(plugin, other, results=[_share("gpu-2", 8, "8Gi")], configs=[_mps("GpuConfig", 20)])
    _ok(plugin, MPS, other)
    assert plugin.mps_host is not None
    plugin.mps_host.stop()  # the daemon outlives it here (no container cgroup)
    _ok(plugin, MPS, unprepare=True)  # another claim still uses the daemon
    _ok(plugin, other, unprepare=True)  # the last one: the stop waits for the next host
    assert len(plugin.mps_daemons()) == 1
    plugin.mps_host.start()
    plugin.wait_for(lambda: plugin.mps_daemons() == {}, "the MPS daemon stopped", 15)
    plugin.restart()  # the plugin's start-up removes what the stopped daemon left
    _assert_nothing_left(plugin)


# -- 6. bounded resources ----------------------------------------------------------------


def test_6_twenty_open_health_streams_do_not_delay_prepare_and_more_than_32_are_refused(
    plugin: PluginProcess,
) -> None:
    channel = grpc.insecure_channel(f"unix:{plugin.dra_socket}")
    stub = health_grpc.DRAResourceHealthStub(channel)
    streams = []
    try:
        for _ in range(MAX_HEALTH_STREAMS):
            stream = stub.NodeWatchResources(health_pb2.NodeWatchResourcesRequest())
            next(stream)  # open and answered
            streams.append(stream)
        started = time.monotonic()
        _ok(plugin, WHOLE, MPS)
        assert time.monotonic() - started < 8  # the review saw no answer within 8 s
        extra = stub.NodeWatchResources(health_pb2.NodeWatchResourcesRequest(), timeout=10)
        with pytest.raises(grpc.RpcError) as refused:
            next(extra)
        assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        _ok(plugin, WHOLE, MPS, unprepare=True)
    finally:
        for stream in streams:
            stream.cancel()
        channel.close()
