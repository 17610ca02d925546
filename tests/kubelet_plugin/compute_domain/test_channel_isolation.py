"""The CD plugin with `--imex-isolation channel`: each domain's own channel, domains sharing
the node, `All` refused, and a mode that differs from the controller's or a member's named."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dra_driver.compute_domain import isolation
from dra_driver.compute_domain.membership import member_name
from dra_driver.kube.object_store import COMPUTE_DOMAIN, COMPUTE_DOMAIN_MEMBER
from tests.kubelet_plugin.compute_domain.harness import (
    CHANNELS_MAJOR,
    DOMAIN_UID,
    NAMESPACE,
    NODE,
    OTHER_DOMAIN_UID,
    Node,
    channel_config,
    compute_domain,
    make_node,
)


def _assign(node: Node, name: str, channel: int) -> None:
    """What the controller does in channel mode: annotate the domain with its channel."""
    obj = node.objects.get_object(COMPUTE_DOMAIN, "default", name)
    obj["metadata"].setdefault("annotations", {})[isolation.CHANNEL_ANNOTATION] = str(channel)
    node.objects.update_object(COMPUTE_DOMAIN, obj)


def _paths(node: Node, ref: Any) -> list[tuple[str, int, int]]:
    spec = node.spec(ref)
    assert spec is not None
    (device,) = spec["devices"]
    return [(n["path"], n["major"], n["minor"]) for n in device["containerEdits"]["deviceNodes"]]


def test_two_domains_share_the_node_each_pod_gets_only_its_domains_channel(
    tmp_path: Path,
) -> None:
    for node in make_node(tmp_path, isolation="channel"):
        node.objects.create_object(COMPUTE_DOMAIN, compute_domain("y", uid=OTHER_DOMAIN_UID))
        _assign(node, "x", 3)
        _assign(node, "y", 5)
        node.new_driver()
        node.auto_ready()
        x = node.claim(0)
        y = node.claim(1, config=channel_config(OTHER_DOMAIN_UID))
        assert node.prepare(x).error == ""
        assert node.prepare(y).error == ""
        assert _paths(node, x) == [("/dev/nvidia-caps-imex-channels/channel3", CHANNELS_MAJOR, 3)]
        assert _paths(node, y) == [("/dev/nvidia-caps-imex-channels/channel5", CHANNELS_MAJOR, 5)]
        assert sorted(node.members()) == sorted(
            [member_name(DOMAIN_UID, NODE), member_name(OTHER_DOMAIN_UID, NODE)]
        )
        for name in node.members():
            obj = node.objects.get_object(COMPUTE_DOMAIN_MEMBER, NAMESPACE, name)
            assert isolation.isolation_of(obj) == "channel"
        assert node.checkpoint().claims[x.uid].devices[0].channel.first == 3  # type: ignore[union-attr]
        # Unprepare from the checkpoint alone: the domain may be gone.
        node.objects.delete_object(COMPUTE_DOMAIN, "default", "y")
        assert node.unprepare(y) == ""
        assert node.members() == [member_name(DOMAIN_UID, NODE)]
        assert node.spec(x) is not None


def test_a_domain_without_its_channel_yet_fails_prepare_naming_the_controller(
    tmp_path: Path,
) -> None:
    for node in make_node(tmp_path, isolation="channel"):
        node.new_driver()
        error = node.prepare(node.claim()).error
        assert "ComputeDomain default/x has no IMEX channel yet" in error
        assert isolation.CHANNEL_ANNOTATION in error
        assert "--imex-isolation channel" in error
        assert node.members() == []


def test_allocation_mode_all_is_refused_naming_the_domain_and_the_field(tmp_path: Path) -> None:
    for node in make_node(tmp_path, isolation="channel"):
        _assign(node, "x", 1)
        node.new_driver()
        error = node.prepare(node.claim(config=channel_config(allocationMode="All"))).error
        assert "ComputeDomain default/x: spec.channel.allocationMode: All is refused" in error
        assert "isolation" in error
        assert node.members() == []


def test_a_plugin_in_domain_mode_names_the_mismatch_with_a_channel_controller(
    tmp_path: Path,
) -> None:
    for node in make_node(tmp_path):
        _assign(node, "x", 2)
        node.new_driver()
        error = node.prepare(node.claim()).error
        assert "has IMEX channel 2" in error
        assert "runs --imex-isolation domain" in error
        assert node.members() == []


def test_a_member_written_in_domain_mode_is_named_by_a_channel_plugin(tmp_path: Path) -> None:
    for node in make_node(tmp_path):
        node.objects.create_object(COMPUTE_DOMAIN, compute_domain("y", uid=OTHER_DOMAIN_UID))
        node.new_driver()
        node.auto_ready()
        assert node.prepare(node.claim(0)).error == ""  # a domain-mode member of x
        node.isolation = "channel"
        node.new_driver()
        _assign(node, "y", 1)
        error = node.prepare(node.claim(1, config=channel_config(OTHER_DOMAIN_UID))).error
        assert "--imex-isolation domain" in error
        assert "cannot share a node" in error
