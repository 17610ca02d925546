"""A lost checkpoint loses nothing: the real plugin rebuilds it from CDI specs, hardware and API.

Each test prepares claims over the socket, SIGKILLs the plugin, damages its
checkpoint files (garbage, one flipped bit, a legacy single file), and starts
it again. Claims still in use must keep their CDI spec, answer a repeated
Prepare exactly as before, and leave nothing behind (no MIG instance, no CDI
spec, no checkpoint entry) after Unprepare. Only what no source vouches for
is removed.
"""

from __future__ import annotations

import dataclasses
import signal
from collections.abc import Iterator

import grpc
import pytest
import yaml

from dra_driver.claims.checkpoint import ClaimState, encode
from dra_driver.container import cdi
from dra_driver.container.cdi_store import RECORD_PREFIX
from dra_driver.hardware.simulated.hardware import SimHardware
from dra_driver.hardware.simulated.node_files import sim_proc_root
from dra_driver.hardware.simulated.shapes import load_shape
from kubelet_plugin.service import ClaimRef, PrepareResult
from tests.fakes import PluginProcess, live_mig_instances, make_allocated_claim

pytestmark = pytest.mark.slow

SHAPE = "dgx-h100"
WHOLE = ClaimRef("default", "4eb1d000-0000-4000-8000-000000000001", "whole-gpu")
MIG = ClaimRef("default", "4eb1d000-0000-4000-8000-000000000002", "dynamic-mig")
MIG_DEVICE = "gpu-0-mig-3g40gb-9-0"
OLD_SPEC = ClaimRef("default", "4eb1d000-0000-4000-8000-000000000003", "old-spec")
GONE = ClaimRef("default", "4eb1d000-0000-4000-8000-000000000004", "gone")
GANG = ClaimRef("default", "4eb1d000-0000-4000-8000-000000000005", "gang")


class Node:
    """The plugin with dynamic MIG on a simulated dgx-h100, and its hardware."""

    def __init__(self, plugin: PluginProcess) -> None:
        self.plugin = plugin
        self.hardware = SimHardware(
            load_shape(SHAPE),
            node_name=plugin.node_name,
            state_path=plugin.sim_state,
            proc_root=sim_proc_root(plugin.sim_state),
        )

    def prepare(self, *refs: ClaimRef) -> dict[str, PrepareResult]:
        answers = dict(self.plugin.client.prepare(list(refs)))
        assert all(a.error == "" for a in answers.values()), answers
        return answers

    def unprepare(self, *refs: ClaimRef) -> None:
        answers = self.plugin.client.unprepare(list(refs))
        assert all(a.error == "" for a in answers.values()), answers

    def specs(self) -> dict[str, bytes]:
        return {
            name: (self.plugin.cdi_root / name).read_bytes() for name in self.plugin.cdi_files()
        }

    def assert_empty(self) -> None:
        assert self.plugin.cdi_files() == []
        assert live_mig_instances(self.hardware) == {}
        checkpoint = self.plugin.checkpoint()
        assert checkpoint is not None
        assert dict(checkpoint.claims) == {}


@pytest.fixture
def node() -> Iterator[Node]:
    with PluginProcess(
        shape=SHAPE, extra_args=["--dynamic-mig"], prefix="dra-gpu-rebuild-", mps_host=False
    ) as p:  # no MPS claim here: no MPS host
        p.store_claim(make_allocated_claim(WHOLE.name, uid=WHOLE.uid, results=[("g", "gpu-3")]))
        p.store_claim(make_allocated_claim(MIG.name, uid=MIG.uid, results=[("m", MIG_DEVICE)]))
        yield Node(p)


def _reserve(plugin: PluginProcess, ref: ClaimRef, devices: list[tuple[str, str]]) -> None:
    claim = make_allocated_claim(ref.name, uid=ref.uid, results=devices)
    claim["status"]["reservedFor"] = [{"resource": "pods", "name": f"{ref.name}-pod", "uid": "p1"}]
    plugin.store_claim(claim)


def test_garbage_checkpoint_keeps_claims_in_use_and_unprepare_leaves_nothing(node: Node) -> None:
    first = node.prepare(WHOLE, MIG)
    specs = node.specs()
    instances = live_mig_instances(node.hardware)
    assert len(specs) == 2
    assert len(instances) == 1
    node.plugin.kill()
    files = node.plugin.checkpoint_files()
    assert len(files) == 2
    for path in files:
        path.write_bytes(b"\x00garbage, not a checkpoint\n")

    node.plugin.start()

    log = node.plugin.log_tail(20000)
    assert log.count("checkpoint unreadable") == 2
    assert f"rebuilt ResourceClaim {MIG.namespace}/{MIG.name} (uid {MIG.uid}) from CDI specs" in log
    assert len(list(node.plugin.checkpoint_dir.glob("*.corrupt-*"))) == 2
    assert node.specs() == specs  # both specs stay: their pods still run
    assert live_mig_instances(node.hardware) == instances
    checkpoint = node.plugin.checkpoint()
    assert checkpoint is not None
    assert {u: e.state for u, e in checkpoint.claims.items()} == {
        WHOLE.uid: ClaimState.PrepareCompleted,
        MIG.uid: ClaimState.PrepareCompleted,
    }
    assert node.prepare(WHOLE, MIG) == first  # same devices, nothing redone
    assert node.specs() == specs
    node.unprepare(WHOLE, MIG)
    node.assert_empty()  # the MIG instance stayed owned: Unprepare destroyed it


def test_one_flipped_bit_costs_only_that_claims_file(node: Node) -> None:
    first = node.prepare(WHOLE, MIG)
    node.plugin.kill()
    path = node.plugin.checkpoint_dir / f"{WHOLE.uid}.json"
    damaged = bytearray(path.read_bytes())
    damaged[-10] ^= 0x01
    path.write_bytes(bytes(damaged))

    node.plugin.start()

    quarantined = list(node.plugin.checkpoint_dir.glob(f"{WHOLE.uid}.json.corrupt-*"))
    assert [q.read_bytes() for q in quarantined] == [bytes(damaged)]
    log = node.plugin.log_tail(20000)
    assert "checksum mismatch" in log
    assert f"rebuilt ResourceClaim {WHOLE.namespace}/{WHOLE.name}" in log
    assert f"rebuilt ResourceClaim {MIG.namespace}/{MIG.name}" not in log
    assert node.prepare(WHOLE, MIG) == first
    node.unprepare(WHOLE, MIG)
    node.assert_empty()


def _without_base(result: PrepareResult) -> PrepareResult:
    """`result` as a claim rebuilt from the API answers: without the base spec's id."""
    return dataclasses.replace(
        result,
        devices=tuple(
            dataclasses.replace(d, cdi_device_ids=d.cdi_device_ids[1:]) for d in result.devices
        ),
    )


def test_the_api_vouches_for_an_old_spec_and_nothing_vouches_for_a_stale_one(node: Node) -> None:
    """Specs written before specs carried their entry: kept if the API still reserves the claim."""
    _reserve(node.plugin, OLD_SPEC, [("g", "gpu-5")])
    node.plugin.store_claim(make_allocated_claim(GONE.name, uid=GONE.uid, results=[("g", "gpu-6")]))
    first = node.prepare(OLD_SPEC, GONE)
    for ref in (OLD_SPEC, GONE):  # as an older dra-gpu wrote them: no record
        spec_path = node.plugin.cdi_spec_path(ref.uid)
        record, rest = spec_path.read_text().split("\n", 1)
        assert record.startswith(RECORD_PREFIX)
        spec_path.write_text(rest)
    node.plugin.kill()
    for path in node.plugin.checkpoint_files():
        path.write_bytes(b"garbage")

    node.plugin.start()

    assert f"rebuilt ResourceClaim default/{OLD_SPEC.name}" in node.plugin.log_tail(20000)
    assert node.plugin.cdi_files() == [cdi.spec_file_name(OLD_SPEC.uid)]  # GONE: no pod uses it
    # Rebuilt from the API alone: its devices and their own CDI ids (an older dra-gpu's
    # spec was whole; it names no base spec).
    assert node.prepare(OLD_SPEC)[OLD_SPEC.uid] == _without_base(first[OLD_SPEC.uid])
    node.unprepare(OLD_SPEC, GONE)
    node.assert_empty()


def test_a_claim_reserved_for_a_podgroup_is_kept_as_one_reserved_for_pods(node: Node) -> None:
    """Kubernetes 1.37 (DRAWorkloadResourceClaims): a gang's claim is reserved for its
    PodGroup, its pods are not listed. The API still vouches for it: it is in use."""
    claim = make_allocated_claim(GANG.name, uid=GANG.uid, results=[("g", "gpu-5")])
    claim["status"]["reservedFor"] = [
        {"apiGroup": "scheduling.k8s.io", "resource": "podgroups", "name": "gang-1", "uid": "pg1"}
    ]
    node.plugin.store_claim(claim)
    first = node.prepare(GANG)
    spec_path = node.plugin.cdi_spec_path(GANG.uid)
    spec_path.write_text(spec_path.read_text().split("\n", 1)[1])  # only the API can vouch
    node.plugin.kill()
    for path in node.plugin.checkpoint_files():
        path.write_bytes(b"garbage")

    node.plugin.start()

    assert f"rebuilt ResourceClaim default/{GANG.name}" in node.plugin.log_tail(20000)
    assert node.plugin.cdi_files() == [cdi.spec_file_name(GANG.uid)]
    assert node.prepare(GANG)[GANG.uid] == _without_base(first[GANG.uid])
    node.unprepare(GANG)
    node.assert_empty()


def test_the_api_and_hardware_vouch_for_a_mig_claim_caught_before_its_spec(node: Node) -> None:
    """Killed after the MIG instance was made, before the spec: the instance is still found."""
    _reserve(node.plugin, MIG, [("m", MIG_DEVICE)])
    clean = node.prepare(WHOLE)[WHOLE.uid]
    node.plugin.arm(["mig-after-ci-created"])
    with pytest.raises(grpc.RpcError):
        node.plugin.client.prepare([MIG])
    assert node.plugin.wait_exit() == -signal.SIGKILL
    node.plugin.client.close()
    assert len(live_mig_instances(node.hardware)) == 1
    for path in node.plugin.checkpoint_files():
        path.write_bytes(b"garbage")

    node.plugin.start(failpoints=())

    log = node.plugin.log_tail(20000)
    assert f"rebuilt ResourceClaim default/{MIG.name}" in log
    assert "from MIG instances" in log
    assert live_mig_instances(node.hardware) == {}  # rolled back as half-prepared
    assert node.prepare(MIG)[MIG.uid].devices[0].device_name == MIG_DEVICE
    assert node.prepare(WHOLE)[WHOLE.uid] == clean
    node.unprepare(WHOLE, MIG)
    node.assert_empty()


def test_a_checkpoint_of_the_single_file_format_is_migrated(node: Node) -> None:
    first = node.prepare(WHOLE, MIG)
    checkpoint = node.plugin.checkpoint()
    assert checkpoint is not None
    node.plugin.kill()
    for path in node.plugin.checkpoint_files():
        path.unlink()
    node.plugin.legacy_checkpoint_path.write_bytes(encode(checkpoint))  # what dra-gpu wrote

    node.plugin.start()

    assert not node.plugin.legacy_checkpoint_path.exists()
    assert node.plugin.checkpoint() == checkpoint
    assert [p.name for p in node.plugin.checkpoint_files()] == sorted(
        f"{uid}.json" for uid in checkpoint.claims
    )
    assert node.prepare(WHOLE, MIG) == first
    node.unprepare(WHOLE, MIG)
    node.assert_empty()


def test_specs_carry_the_claims_entry_and_stay_plain_cdi(node: Node) -> None:
    node.prepare(MIG)
    text = node.plugin.cdi_spec_path(MIG.uid).read_text()
    spec = yaml.safe_load(text)
    assert "annotations" not in spec  # no cdiVersion 0.6.0 needed
    assert spec["cdiVersion"] == cdi.minimum_cdi_version(spec)
    cdi.validate_spec(spec)
    checkpoint = node.plugin.checkpoint()
    assert checkpoint is not None
    entry = checkpoint.claims[MIG.uid]
    record = text.split("\n", 1)[0]
    assert record.startswith(RECORD_PREFIX)
    mig = entry.devices[0].mig
    assert mig is not None
    assert mig.ci_id is not None
    for value in (MIG.uid, MIG.namespace, MIG.name, MIG_DEVICE, f'"giId":{mig.gi_id}'):
        assert value in record
    node.unprepare(MIG)
