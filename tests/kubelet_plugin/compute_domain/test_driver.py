"""The ComputeDomain plugin's Prepare and Unprepare, on in-memory stores.

The test plays the node's IMEX host: it turns the node's ComputeDomainMember
Ready (or says why not), as `dra-gpu imex-host` does on a real node.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from dra_driver.claims.checkpoint import ClaimState
from dra_driver.compute_domain.membership import (
    CliqueRow,
    MemberState,
    build_clique,
    member_name,
    member_spec,
)
from dra_driver.kube.apiserver_rules import RESOURCE_CLAIM
from dra_driver.kube.object_store import (
    COMPUTE_DOMAIN,
    COMPUTE_DOMAIN_CLIQUE,
    COMPUTE_DOMAIN_MEMBER,
)
from kubelet_plugin.imex_host import HostConfig, ImexHost
from tests.fakes.imex_runner import FakeImexRunner
from tests.fakes.waiting import wait_until
from tests.kubelet_plugin.compute_domain.harness import (
    CHANNELS_MAJOR,
    CLAIM_UIDS,
    CLIQUE,
    DOMAIN_UID,
    NAMESPACE,
    NODE,
    OTHER_DOMAIN_UID,
    Node,
    channel_config,
    compute_domain,
    make_node,
)

CHANNEL0 = {
    "path": "/dev/nvidia-caps-imex-channels/channel0",
    "type": "c",
    "major": CHANNELS_MAJOR,
    "minor": 0,
    "fileMode": 0o666,
}


@pytest.fixture
def node(tmp_path: Path) -> Iterator[Node]:
    yield from make_node(tmp_path)


def _nodes(spec: dict[str, object] | None) -> list[dict[str, object]]:
    assert spec is not None
    devices = spec["devices"]
    assert isinstance(devices, list)
    assert len(devices) == 1
    return list(devices[0]["containerEdits"]["deviceNodes"])


def test_prepare_waits_for_imex_on_the_node_then_injects_channel0(node: Node) -> None:
    node.new_driver()
    ref = node.claim()
    results: list[object] = []
    preparing = threading.Thread(target=lambda: results.append(node.prepare(ref)))
    preparing.start()
    name = member_name(DOMAIN_UID, NODE)
    wait_until(lambda: name in node.members(), "the node's ComputeDomainMember")
    member = member_spec(node.objects.get_object(COMPUTE_DOMAIN_MEMBER, NAMESPACE, name))
    assert (member.domain_uid, member.domain_namespace, member.domain_name) == (
        DOMAIN_UID,
        "default",
        "x",
    )
    assert (member.node_name, member.clique_id) == (NODE, CLIQUE)
    time.sleep(0.3)  # IMEX is not Ready: Prepare must not hand out the channel
    assert preparing.is_alive()
    assert node.spec(ref) is None
    node.set_member(state=MemberState.STARTING)
    time.sleep(0.1)
    assert preparing.is_alive()
    ready_at = time.monotonic()
    node.set_member(state=MemberState.READY)
    preparing.join(timeout=5)
    assert time.monotonic() - ready_at < 1.0  # woken by the watch, not a slow poll
    (result,) = results
    assert result.error == ""  # type: ignore[attr-defined]
    (device,) = result.devices  # type: ignore[attr-defined]
    assert device.device_name == "channel-0"
    assert device.cdi_device_ids == (f"k8s.compute-domain.nvidia.com/claim={ref.uid}-channel-0",)
    spec = node.spec(ref)
    assert spec is not None
    assert spec["kind"] == "k8s.compute-domain.nvidia.com/claim"
    assert _nodes(spec) == [CHANNEL0]
    assert "env" not in spec["devices"][0]["containerEdits"]
    assert node.checkpoint().claims[ref.uid].state is ClaimState.PrepareCompleted


def test_allocation_mode_all_gives_2048_channels(node: Node) -> None:
    node.new_driver()
    node.auto_ready()
    ref = node.claim(config=channel_config(allocationMode="All"))
    assert node.prepare(ref).error == ""
    nodes = _nodes(node.spec(ref))
    assert len(nodes) == 2048
    assert nodes[-1] == {
        **CHANNEL0,
        "path": "/dev/nvidia-caps-imex-channels/channel2047",
        "minor": 2047,
    }


def test_a_repeated_prepare_returns_the_same_devices(node: Node) -> None:
    node.new_driver()
    node.auto_ready()
    ref = node.claim()
    first = node.prepare(ref)
    node.cluster.delete_resource_claim("default", "claim-0")  # a completed claim needs no API
    assert node.prepare(ref) == first


def test_a_prepare_that_times_out_says_what_imex_is_doing_and_a_retry_resumes(
    tmp_path: Path,
) -> None:
    for node in make_node(tmp_path, prepare_wait=0.3):
        node.new_driver()
        ref = node.claim()
        error = node.prepare(ref).error
        assert error.startswith(
            f"IMEX on {NODE} for ComputeDomain default/x: Pending: waiting for an index"
        ), error
        assert node.checkpoint().claims[ref.uid].state is ClaimState.PrepareStarted
        node.set_member(
            state=MemberState.FAILED,
            reason="HostImexRunning",
            message="a host nvidia-imex service holds the IMEX channels",
        )
        error = node.prepare(ref).error
        assert "Failed (HostImexRunning): a host nvidia-imex service holds" in error
        assert node.members() == [member_name(DOMAIN_UID, NODE)]  # kept for the retry
        node.set_member(state=MemberState.READY)
        assert node.prepare(ref).error == ""
        assert _nodes(node.spec(ref)) == [CHANNEL0]


@pytest.mark.parametrize(
    ("config", "device", "expected"),
    [
        (
            channel_config(allocationMode="Single", bogus=1),
            "channel-0",
            "bogus",
        ),
        (
            {**channel_config(), "kind": "ComputeDomainDaemonConfig", "requests": ["channel"]},
            "channel-0",
            "a ComputeDomainDaemonConfig names request 'channel', but its device channel-0",
        ),
        (
            channel_config("9f9f9f9f-0000-4000-8000-000000000000"),
            "channel-0",
            "ComputeDomain with UID 9f9f9f9f-0000-4000-8000-000000000000 does not exist",
        ),
        (
            {**channel_config(), "kind": "ComputeDomainDaemonConfig"},
            "daemon-0",
            "dra-gpu runs IMEX in its per-node IMEX host",
        ),
        (channel_config(allocationMode="Some"), "channel-0", "allocationMode"),
    ],
    ids=["unknown-field", "wrong-kind", "missing-domain", "daemon-claim", "bad-mode"],
)
def test_bad_input_is_a_clear_error_and_the_daemon_keeps_serving(
    node: Node, config: dict[str, object], device: str, expected: str
) -> None:
    node.new_driver()
    node.auto_ready()
    bad = node.claim(0, config=config, device=device)
    error = node.prepare(bad).error
    assert expected in error
    assert error.startswith("ResourceClaim default/claim-0")
    assert node.members() == []
    assert bad.uid not in node.checkpoint().claims
    good = node.claim(1)
    assert node.prepare(good).error == ""


def test_a_channel_of_another_node_is_refused(node: Node) -> None:
    node.new_driver()
    error = node.prepare(node.claim(pool="gb-1")).error
    assert "of pool 'gb-1', but this is node 'gb-0'" in error
    assert node.members() == []


def test_a_domain_of_another_namespace_is_refused(node: Node) -> None:
    node.new_driver()
    ref = node.claim(namespace="team-b")
    error = node.prepare(ref).error
    assert "ComputeDomain default/x" in error
    assert "namespace 'default'" in error
    assert "'team-b'" in error


def test_a_second_domain_on_the_node_is_refused_naming_both(node: Node) -> None:
    node.objects.create_object(COMPUTE_DOMAIN, compute_domain("y", uid=OTHER_DOMAIN_UID))
    node.new_driver()
    node.auto_ready()
    assert node.prepare(node.claim(0)).error == ""
    other = node.claim(1, config=channel_config(OTHER_DOMAIN_UID))
    error = node.prepare(other).error
    assert "ComputeDomain default/x" in error
    assert "ComputeDomain default/y" in error
    assert "two domains scheduled at once onto a free node" in error  # the backstop says why
    assert node.members() == [member_name(DOMAIN_UID, NODE)]
    assert other.uid not in node.checkpoint().claims


def test_unprepare_deletes_the_member_with_the_last_claim_of_the_domain(node: Node) -> None:
    node.new_driver()
    node.auto_ready()
    first, second = node.claim(0), node.claim(1)
    assert node.prepare(first).error == ""
    assert node.prepare(second).error == ""
    node.objects.delete_object(COMPUTE_DOMAIN, "default", "x")  # Unprepare never needs it
    assert node.unprepare(first) == ""
    assert node.spec(first) is None
    assert node.spec(second) is not None
    assert node.members() == [member_name(DOMAIN_UID, NODE)]
    assert node.unprepare(second) == ""
    assert node.members() == []
    assert node.checkpoint().claims == {}
    assert node.unprepare(second) == ""  # again: nothing to do


def test_a_node_without_a_clique_prepares_without_channels_and_warns(tmp_path: Path) -> None:
    for node in make_node(tmp_path, clique=None):
        node.new_driver()
        node.auto_ready(MemberState.NO_FABRIC)
        ref = node.claim()
        result = node.prepare(ref)
        assert result.error == ""
        assert [d.cdi_device_ids for d in result.devices] == [()]
        assert node.spec(ref) is None
        ((uid, text),) = node.warnings
        assert uid == ref.uid
        assert "no multi-node NVLink clique" in text
        member = node.objects.get_object(
            COMPUTE_DOMAIN_MEMBER, NAMESPACE, member_name(DOMAIN_UID, NODE)
        )
        assert member["spec"]["cliqueID"] == ""


def test_a_restart_rolls_back_half_prepared_claims_and_keeps_completed_ones(
    tmp_path: Path,
) -> None:
    for node in make_node(tmp_path, prepare_wait=0.2):
        node.objects.create_object(COMPUTE_DOMAIN, compute_domain("y", uid=OTHER_DOMAIN_UID))
        node.new_driver()
        done = node.claim(0)
        node.auto_ready()
        assert node.prepare(done).error == ""
        node.set_member(state=MemberState.STARTING)  # IMEX restarts: the next claim waits
        pending = node.claim(1)
        assert "not Ready" in node.prepare(pending).error
        # a member nobody holds (a crash right after creating it, before the checkpoint)
        stray = compute_domain("z", uid="8a8a8a8a-0000-4000-8000-000000000000")
        node.objects.create_object(
            COMPUTE_DOMAIN_MEMBER,
            {
                "apiVersion": "resource.nvidia.com/v1beta1",
                "kind": "ComputeDomainMember",
                "metadata": {
                    "name": member_name(stray["metadata"]["uid"], NODE),
                    "namespace": NAMESPACE,
                    "labels": {"resource.nvidia.com/computeDomain.nodeName": NODE},
                },
                "spec": {},
            },
        )
        orphan = "3e0f2305-8041-4f94-ad31-6c8d4e5f0ac3"
        node.cdi.write(orphan, node.cdi.read(done.uid) or {})
        node.new_driver()  # the restart
        checkpoint = node.checkpoint()
        assert list(checkpoint.claims) == [done.uid]
        assert node.members() == [member_name(DOMAIN_UID, NODE)]
        assert node.spec(done) is not None
        assert node.cdi.read(orphan) is None
        assert node.unprepare(done) == ""
        assert node.members() == []


def test_host_managed_imex_forces_single_creates_no_member_and_needs_ready(
    tmp_path: Path,
) -> None:
    from kubelet_plugin.compute_domain.host_imex import HostImex

    ctl = tmp_path / "nvidia-imex-ctl"
    answer = tmp_path / "answer"
    ctl.write_text(f'#!/bin/sh\necho "$@" > {tmp_path}/args\ncat {answer}\n')
    ctl.chmod(0o755)
    answer.write_text("NOT READY\n")
    imex = HostImex(ctl=ctl, socket="/run/imex.sock", node_name=NODE)
    for node in make_node(tmp_path, host_imex=imex):
        node.new_driver()
        ref = node.claim(config=channel_config(allocationMode="All"))
        error = node.prepare(ref).error
        assert f"host-managed IMEX on node {NODE} is not ready" in error
        assert "NOT READY" in error
        assert (tmp_path / "args").read_text().split() == ["-q", "--u=/run/imex.sock"]
        answer.write_text("READY\n")
        assert node.prepare(ref).error == ""
        assert _nodes(node.spec(ref)) == [CHANNEL0]  # Single, whatever the config says
        assert node.members() == []
        assert node.unprepare(ref) == ""


def test_a_restart_while_the_api_is_down_still_serves_and_rolls_back_later(
    tmp_path: Path,
) -> None:
    from dra_driver.errors import ClusterError

    for node in make_node(tmp_path, prepare_wait=0.2):
        node.new_driver()
        ref = node.claim()
        assert "not Ready" in node.prepare(ref).error  # PrepareStarted, member created
        node.objects.fail_next("delete", ClusterError("the API server is unreachable"))
        node.new_driver()  # the restart cannot delete the member: it starts anyway
        assert ref.uid in node.checkpoint().claims
        assert node.unprepare(ref) == ""  # the kubelet's Unprepare finishes the rollback
        assert node.members() == []
        assert node.checkpoint().claims == {}


def test_a_second_claim_of_the_domain_on_the_node_creates_no_member(
    node: Node, monkeypatch: pytest.MonkeyPatch
) -> None:
    node.new_driver()
    node.auto_ready()
    creates: list[str] = []
    create = node.objects.create_object

    def counting(kind: Any, obj: Any) -> Any:
        creates.append(kind.kind)
        return create(kind, obj)

    monkeypatch.setattr(node.objects, "create_object", counting)
    assert node.prepare(node.claim(0)).error == ""
    assert creates.count("ComputeDomainMember") == 1
    assert node.prepare(node.claim(1)).error == ""  # a second pod of the domain on the node
    assert creates.count("ComputeDomainMember") == 1  # no create, so no 409 AlreadyExists
    assert node.objects.conflicts["ComputeDomainMember"] == 0
    assert node.members() == [member_name(DOMAIN_UID, NODE)]


def test_a_node_beyond_a_full_clique_fails_prepare_saying_the_clique_is_full(
    tmp_path: Path,
) -> None:
    for node in make_node(tmp_path, prepare_wait=0.2):
        node.new_driver()
        rows = [CliqueRow(f"n{i + 2}", f"127.0.1.{i + 2}", CLIQUE, i, "Ready") for i in range(18)]
        node.objects.create_object(
            COMPUTE_DOMAIN_CLIQUE, build_clique(DOMAIN_UID, CLIQUE, rows, namespace=NAMESPACE)
        )
        ref = node.claim()
        assert "waiting for an index" in node.prepare(ref).error  # the member exists now
        host = ImexHost(
            node.objects,
            FakeImexRunner(),
            HostConfig(
                node_name=NODE,
                node_ip="127.0.1.1",
                namespace=NAMESPACE,
                state_dir=tmp_path / "imex",
            ),
        )
        host.reconcile()  # the node's IMEX host reads the clique
        error = node.prepare(ref).error
        assert f"Pending (CliqueFull): clique {CLIQUE} of ComputeDomain default/x" in error, error
        assert "already has 18 nodes" in error
        assert "--max-nodes-per-imex-domain 18" in error


@pytest.mark.parametrize("how", ["deleted", "being-deleted", "re-created"])
def test_a_stale_prepare_of_a_gone_claim_is_refused_and_undoes_its_earlier_prepare(
    tmp_path: Path, how: str
) -> None:
    """NVIDIA's PrepareAborted case: a Prepare timed out waiting (entry and member kept for
    the retry), then the claim went away; the kubelet's late retry is refused, naming the
    claim, and what the earlier Prepare left is undone (nothing would ever unprepare it)."""
    for node in make_node(tmp_path, prepare_wait=0.2):
        node.new_driver()
        ref = node.claim()
        assert "Pending" in node.prepare(ref).error
        assert node.members() == [member_name(DOMAIN_UID, NODE)]
        claim = node.cluster.get_resource_claim(ref.namespace, ref.name)
        if how == "being-deleted":  # a finalizer keeps it while it is deleted
            claim["metadata"]["finalizers"] = ["resource.kubernetes.io/delete-protection"]
            node.cluster.put_resource_claim(claim)
            node.cluster.delete_object(RESOURCE_CLAIM, ref.namespace, ref.name)
        else:
            node.cluster.delete_resource_claim(ref.namespace, ref.name)
        expected = {
            "deleted": "not found: it was deleted",
            "being-deleted": "metadata.deletionTimestamp is",
            "re-created": "the claim was deleted and re-created",
        }[how]
        if how == "re-created":  # the same name, another UID
            again = dict(claim, metadata={**claim["metadata"], "uid": CLAIM_UIDS[1]})
            again["metadata"].pop("resourceVersion", None)
            node.cluster.put_resource_claim(again)
        error = node.prepare(ref).error
        assert f"ResourceClaim default/claim-0 (UID {ref.uid})" in error, error
        assert expected in error, error
        assert "stale and refused" in error
        assert ref.uid not in node.checkpoint().claims
        assert node.members() == []
        assert node.spec(ref) is None
