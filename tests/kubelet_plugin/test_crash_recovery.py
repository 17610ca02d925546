"""The plugin survives being killed at any step of Prepare or Unprepare, and node reboots.

Each test runs the real plugin process armed with a failpoint
(`dra_driver.failpoints`): at that step it SIGKILLs itself mid-RPC, as an OOM
kill or a node crash would. The kubelet sees the call fail with UNAVAILABLE
and repeats it once the plugin is back; after that the node must look exactly
as if nothing had happened (same answer, same CDI spec) and, after
Unprepare, hold no trace of the claim. The tests are parametrized over
`PREPARE_STEPS` and `UNPREPARE_STEPS`, so a new failpoint is covered as soon
as it is listed there.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from dataclasses import dataclass

import grpc
import pytest

from dra_driver import failpoints
from dra_driver.claims.checkpoint import ClaimEntry, ClaimState
from dra_driver.container.cdi_store import CdiStore
from dra_driver.files.atomic import temp_prefix_for
from dra_driver.hardware.simulated.node_files import sim_proc_root
from dra_driver.node.host import HostInfo
from kubelet_plugin.service import ClaimRef, PrepareResult, UnprepareResult
from tests.fakes import PluginProcess, make_allocated_claim

pytestmark = pytest.mark.slow

VICTIM = ClaimRef("default", "5a1e0000-0000-4000-8000-000000000001", "victim")
SURVIVOR = ClaimRef("default", "5a1e0000-0000-4000-8000-000000000002", "survivor")


@dataclass(frozen=True)
class Prepared:
    """What a clean Prepare of a claim produced: the answer, the CDI spec, the checkpoint entry."""

    result: PrepareResult
    cdi_spec: bytes
    entry: ClaimEntry


@pytest.fixture
def plugin() -> Iterator[PluginProcess]:
    """A plugin with two claims stored: the victim (gpu-0, gpu-1) and the survivor (gpu-2)."""
    with PluginProcess(mps_host=False) as process:  # no MPS claim here: no MPS host
        process.store_claim(
            make_allocated_claim(
                VICTIM.name, uid=VICTIM.uid, results=[("gpu", "gpu-0"), ("gpu", "gpu-1")]
            )
        )
        process.store_claim(
            make_allocated_claim(SURVIVOR.name, uid=SURVIVOR.uid, results=[("gpu", "gpu-2")])
        )
        yield process


def _prepare(plugin: PluginProcess, ref: ClaimRef) -> Prepared:
    result = plugin.client.prepare([ref])[ref.uid]
    assert result.error == ""
    checkpoint = plugin.checkpoint()
    assert checkpoint is not None
    return Prepared(result, plugin.cdi_spec_path(ref.uid).read_bytes(), checkpoint.claims[ref.uid])


def _unprepare(plugin: PluginProcess, ref: ClaimRef) -> None:
    assert plugin.client.unprepare([ref]) == {ref.uid: UnprepareResult()}


def _crash_during(plugin: PluginProcess, call: str, ref: ClaimRef, step: str) -> None:
    """Arm `step` in the running plugin, make the call, and check it died right there."""
    plugin.arm([step])
    rpc = plugin.client.prepare if call == "prepare" else plugin.client.unprepare
    with pytest.raises(grpc.RpcError) as failed:
        rpc([ref])
    assert failed.value.code() == grpc.StatusCode.UNAVAILABLE
    assert plugin.wait_exit() == -signal.SIGKILL, plugin.log_tail()


def _assert_consistent(plugin: PluginProcess) -> None:
    """Every CDI spec belongs to a checkpoint entry and every completed entry has its spec;
    no other file (such as a half-written temp file) is in the CDI directory."""
    checkpoint = plugin.checkpoint()
    entries = dict(checkpoint.claims) if checkpoint is not None else {}
    specs = CdiStore(plugin.cdi_root).claim_uids()
    assert specs <= set(entries), f"orphan CDI specs: {specs - set(entries)}"
    completed = {u for u, e in entries.items() if e.state is ClaimState.PrepareCompleted}
    assert completed <= specs, f"completed claims without a CDI spec: {completed - specs}"
    assert len(plugin.cdi_files()) == len(specs), plugin.cdi_files()


def _assert_no_trace(plugin: PluginProcess, ref: ClaimRef) -> None:
    checkpoint = plugin.checkpoint()
    assert checkpoint is not None
    assert ref.uid not in checkpoint.claims
    assert not plugin.cdi_spec_path(ref.uid).exists()
    _assert_consistent(plugin)


def _assert_intact(plugin: PluginProcess, ref: ClaimRef, before: Prepared) -> None:
    """A claim prepared before the crash is still prepared, unchanged."""
    assert _prepare(plugin, ref) == before


# --------------------------------------------------------------------------- Prepare


@pytest.mark.parametrize("step", failpoints.PREPARE_STEPS)
def test_crash_during_prepare_then_prepare_again_gives_the_clean_result(
    plugin: PluginProcess, step: str
) -> None:
    clean = _prepare(plugin, VICTIM)
    _unprepare(plugin, VICTIM)
    survivor = _prepare(plugin, SURVIVOR)

    _crash_during(plugin, "prepare", VICTIM, step)
    plugin.restart()

    _assert_consistent(plugin)
    assert _prepare(plugin, VICTIM) == clean
    _assert_consistent(plugin)
    _assert_intact(plugin, SURVIVOR, survivor)
    _unprepare(plugin, VICTIM)
    _unprepare(plugin, SURVIVOR)
    _assert_no_trace(plugin, VICTIM)
    _assert_no_trace(plugin, SURVIVOR)
    assert plugin.cdi_files() == []


@pytest.mark.parametrize("step", failpoints.PREPARE_STEPS)
def test_a_failure_at_any_step_of_a_whole_gpus_prepare_leaves_no_trace(
    plugin: PluginProcess, step: str
) -> None:
    """A whole GPU's claim is planned, recorded and completed in one checkpoint commit
    (its spec is all its Prepare makes): a failure inside that commit, after its spec was
    written, leaves neither spec nor record, and the kubelet's retry prepares it cleanly."""
    clean = _prepare(plugin, VICTIM)
    _unprepare(plugin, VICTIM)
    plugin.arm([f"fail:{step}"])

    result = plugin.client.prepare([VICTIM])[VICTIM.uid]

    assert f"failpoint {step}: injected failure" in result.error
    if step != "prepare-after-checkpoint-completed":  # the last step is after the commit
        _assert_no_trace(plugin, VICTIM)
    _assert_consistent(plugin)
    plugin.arm([])
    assert _prepare(plugin, VICTIM) == clean
    _unprepare(plugin, VICTIM)
    _assert_no_trace(plugin, VICTIM)


@pytest.mark.parametrize("step", failpoints.PREPARE_STEPS)
def test_crash_during_prepare_then_unprepare_leaves_no_trace(
    plugin: PluginProcess, step: str
) -> None:
    survivor = _prepare(plugin, SURVIVOR)

    _crash_during(plugin, "prepare", VICTIM, step)
    plugin.restart()
    _unprepare(plugin, VICTIM)

    _assert_no_trace(plugin, VICTIM)
    _assert_intact(plugin, SURVIVOR, survivor)
    # The devices the half-prepared claim held are free again.
    thief = ClaimRef("default", "5a1e0000-0000-4000-8000-000000000003", "thief")
    plugin.store_claim(make_allocated_claim(thief.name, uid=thief.uid, results=[("g", "gpu-1")]))
    assert plugin.client.prepare([thief])[thief.uid].error == ""


# --------------------------------------------------------------------------- Unprepare


@pytest.mark.parametrize("step", failpoints.UNPREPARE_STEPS)
def test_crash_during_unprepare_then_unprepare_again_leaves_no_trace(
    plugin: PluginProcess, step: str
) -> None:
    _prepare(plugin, VICTIM)
    survivor = _prepare(plugin, SURVIVOR)

    _crash_during(plugin, "unprepare", VICTIM, step)
    plugin.restart()

    _assert_consistent(plugin)
    _unprepare(plugin, VICTIM)
    _assert_no_trace(plugin, VICTIM)
    _assert_intact(plugin, SURVIVOR, survivor)


@pytest.mark.parametrize("step", failpoints.UNPREPARE_STEPS)
def test_crash_during_unprepare_then_prepare_again_gives_the_clean_result(
    plugin: PluginProcess, step: str
) -> None:
    # A shared claim: the kubelet may prepare it for a new pod instead of finishing Unprepare.
    clean = _prepare(plugin, VICTIM)

    _crash_during(plugin, "unprepare", VICTIM, step)
    plugin.restart()

    assert _prepare(plugin, VICTIM) == clean
    _assert_consistent(plugin)
    _unprepare(plugin, VICTIM)
    _assert_no_trace(plugin, VICTIM)


# --------------------------------------------------------------------------- start-up


def test_corrupt_checkpoint_is_quarantined_and_the_claim_rebuilt(plugin: PluginProcess) -> None:
    survivor = _prepare(plugin, SURVIVOR)
    plugin.kill()
    [path] = plugin.checkpoint_files()
    damaged = bytearray(path.read_bytes())
    damaged[-10] ^= 0x01  # one flipped bit in the payload: the checksum no longer matches
    path.write_bytes(bytes(damaged))

    plugin.start()

    quarantined = list(plugin.checkpoint_dir.glob(f"{path.name}.corrupt-*"))
    assert len(quarantined) == 1
    assert quarantined[0].read_bytes() == bytes(damaged)
    assert "checkpoint unreadable" in plugin.log_tail()
    # The claim is rebuilt from its CDI spec: its pod keeps running, nothing changes.
    _assert_intact(plugin, SURVIVOR, survivor)
    _prepare(plugin, VICTIM)
    _assert_consistent(plugin)


def test_garbage_checkpoint_is_quarantined_and_the_plugin_serves(plugin: PluginProcess) -> None:
    plugin.kill()
    plugin.checkpoint_dir.mkdir(parents=True, exist_ok=True)
    garbage = plugin.checkpoint_dir / f"{VICTIM.uid}.json"
    garbage.write_bytes(b"\x00not a checkpoint")
    plugin.legacy_checkpoint_path.write_bytes(b"\x00not a checkpoint either")

    plugin.start()

    assert len(list(plugin.checkpoint_dir.glob("*.json.corrupt-*"))) == 1
    assert len(list(plugin.checkpoint_dir.parent.glob("checkpoint.json.corrupt-*"))) == 1
    assert not plugin.legacy_checkpoint_path.exists()
    _prepare(plugin, VICTIM)
    _unprepare(plugin, VICTIM)
    _assert_no_trace(plugin, VICTIM)


def test_reboot_discards_old_claims_and_their_cdi_specs(plugin: PluginProcess) -> None:
    _prepare(plugin, VICTIM)
    _prepare(plugin, SURVIVOR)
    old_checkpoint = plugin.checkpoint()
    assert old_checkpoint is not None

    new_boot_id = plugin.reboot_node()
    plugin.start()

    assert new_boot_id != old_checkpoint.boot_id
    assert HostInfo(sim_proc_root(plugin.sim_state)).boot_id() == new_boot_id
    checkpoint = plugin.checkpoint()
    assert checkpoint is not None
    assert checkpoint.boot_id == new_boot_id
    assert dict(checkpoint.claims) == {}
    assert plugin.cdi_files() == []
    assert "node rebooted since the checkpoint was written" in plugin.log_tail()
    # The kubelet prepares the claims again after the reboot.
    _prepare(plugin, VICTIM)
    _unprepare(plugin, VICTIM)
    _assert_no_trace(plugin, VICTIM)


def test_orphan_spec_and_half_written_temp_file_are_removed_at_start_up(
    plugin: PluginProcess,
) -> None:
    _prepare(plugin, SURVIVOR)
    plugin.kill()
    orphan = plugin.cdi_spec_path("0rphan00-0000-4000-8000-000000000000")
    orphan.write_text("cdiVersion: 0.5.0\n")
    temp = plugin.cdi_root / f"{temp_prefix_for(plugin.cdi_spec_path(VICTIM.uid).name)}.x1y2z3"
    temp.write_text("cdiVers")
    foreign = plugin.cdi_root / "vendor.example.com-net.yaml"
    foreign.write_text("cdiVersion: 0.5.0\n")

    plugin.start()

    assert sorted(plugin.cdi_files()) == sorted(
        [plugin.cdi_spec_path(SURVIVOR.uid).name, foreign.name]
    )
