"""The real `dra-gpu compute-domain-kubelet-plugin` process on a simulated gb200-node.

Over its real Unix socket, as the kubelet calls it: the node's slice follows
the fabric (empty while a GPU's fabric registers, the channel once it settles,
no restart); a channel claim's Prepare waits for IMEX on the node (the test
plays the IMEX host and turns the member Ready), then the container gets
channel0 with the major of the node's /proc/devices; bad input is an error
and the plugin keeps serving; Unprepare deletes the member; SIGTERM stops it.
Bounded: the whole scenario in well under 30 s.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from typing import Any

import grpc
import pytest

from dra_driver.composition.compute_domain_plugin_process import ComputeDomainPluginProcess
from dra_driver.compute_domain import channel_cdi
from dra_driver.compute_domain.membership import (
    MemberState,
    MemberStatus,
    member_name,
    member_status_body,
)
from dra_driver.compute_domain.names import CHANNEL_DEVICE_CLASS, DRIVER_NAME
from dra_driver.hardware.nvml import fabric
from dra_driver.hardware.simulated.node_files import sim_proc_root
from dra_driver.kube import yaml_io
from dra_driver.kube.object_store import (
    COMPUTE_DOMAIN,
    COMPUTE_DOMAIN_MEMBER,
    EVENT,
    ObjectStore,
)
from kubelet_plugin.compute_domain.driver import read_channels_major
from kubelet_plugin.service import ClaimRef
from tests.fakes import make_allocated_claim, make_opaque_config
from tests.fakes.waiting import wait_until
from tests.kubelet_plugin.compute_domain.harness import (
    CLAIM_UIDS,
    DOMAIN_UID,
    channel_config,
    compute_domain,
)

NODE = "gb-0"
NAMESPACE = "nvidia-dra-driver-gpu"
BOUND_S = 30.0


def _claim(index: int, config: dict[str, Any]) -> dict[str, Any]:
    return make_allocated_claim(
        name=f"claim-{index}",
        uid=CLAIM_UIDS[index],
        results=(("channel", "channel-0"),),
        driver=DRIVER_NAME,
        pool=NODE,
        configs=[make_opaque_config(config, driver=DRIVER_NAME)],
        device_class=CHANNEL_DEVICE_CLASS,
    )


def test_the_plugin_process_prepares_a_channel_once_imex_is_ready() -> None:
    began = time.monotonic()
    plugin = ComputeDomainPluginProcess(
        node_name=NODE,
        namespace=NAMESPACE,
        extra_args=("--fabric-check-interval=0.2", "--prepare-wait=20"),
    )
    try:
        sim = plugin.simulated_node().sim  # a GPU's fabric still registers at the start
        settled = sim.gpu(1).fabric
        assert settled is not None
        sim.set_fabric(1, dataclasses.replace(settled, state=fabric.STATE_IN_PROGRESS))
        plugin.start()
        objects: ObjectStore = plugin.cluster

        def published() -> list[str]:
            return [
                device["name"]
                for obj in plugin.cluster.list_resource_slices(driver=DRIVER_NAME, node_name=NODE)
                for device in obj["spec"].get("devices", [])
            ]

        wait_until(
            lambda: bool(plugin.cluster.list_resource_slices(driver=DRIVER_NAME, node_name=NODE)),
            "the node's (empty) pool",
        )
        assert published() == []
        sim.set_fabric(1, settled)  # the fabric manager finishes: no restart needed
        wait_until(lambda: published() == ["channel-0", "daemon-0"], "the channel published")

        objects.create_object(COMPUTE_DOMAIN, compute_domain())
        bad = ClaimRef("default", CLAIM_UIDS[1], "claim-1")
        plugin.store_claim(_claim(1, channel_config(colour="blue")))
        error = plugin.client.prepare([bad])[bad.uid].error
        assert "colour" in error

        def warnings() -> list[str]:
            return [
                str(event.get("note"))
                for event in objects.list_objects(EVENT, "default")
                if event.get("reason") == "PrepareFailed" and event.get("type") == "Warning"
            ]

        wait_until(lambda: any("colour" in note for note in warnings()), "a Warning Event")

        ref = ClaimRef("default", CLAIM_UIDS[0], "claim-0")
        plugin.store_claim(_claim(0, channel_config()))
        results: list[Any] = []
        preparing = threading.Thread(target=lambda: results.append(plugin.client.prepare([ref])))
        preparing.start()
        name = member_name(DOMAIN_UID, NODE)

        def members() -> list[str]:
            return [
                obj["metadata"]["name"]
                for obj in objects.list_objects(COMPUTE_DOMAIN_MEMBER, NAMESPACE)
            ]

        wait_until(lambda: members() == [name], "the node's ComputeDomainMember")
        time.sleep(0.3)
        assert preparing.is_alive()  # IMEX is not Ready yet
        member = objects.get_object(COMPUTE_DOMAIN_MEMBER, NAMESPACE, name)
        member["status"] = member_status_body(MemberStatus(state=MemberState.READY))
        objects.update_object_status(COMPUTE_DOMAIN_MEMBER, member)
        preparing.join(timeout=20)
        ((result,),) = [list(r.values()) for r in results]
        assert result.error == ""
        (device,) = result.devices
        assert device.cdi_device_ids == (f"{channel_cdi.CLAIMS.kind}={ref.uid}-channel-0",)
        spec = yaml_io.load(plugin.cdi_spec_path(ref.uid).read_text())
        (node,) = spec["devices"][0]["containerEdits"]["deviceNodes"]
        assert node == {
            "path": "/dev/nvidia-caps-imex-channels/channel0",
            "type": "c",
            "major": read_channels_major(sim_proc_root(plugin.sim_state)),
            "minor": 0,
            "fileMode": 0o666,
        }

        assert plugin.client.unprepare([ref])[ref.uid].error == ""
        assert members() == []
        assert not plugin.cdi_spec_path(ref.uid).exists()
        assert plugin.terminate() == 0
    finally:
        plugin.close()
    assert time.monotonic() - began < BOUND_S


def test_a_plugin_killed_mid_prepare_recovers_on_restart() -> None:
    """SIGKILL right after the member is created (IMEX never Ready): the restarted plugin
    rolls the claim back and deletes the member nobody holds; the kubelet's retry then
    prepares it once IMEX is Ready. Bounded like the test above."""
    began = time.monotonic()
    plugin = ComputeDomainPluginProcess(
        node_name=NODE, namespace=NAMESPACE, extra_args=("--prepare-wait=20",)
    )
    try:
        plugin.arm(["cd-prepare-after-member-created"])
        plugin.start()
        objects: ObjectStore = plugin.cluster
        objects.create_object(COMPUTE_DOMAIN, compute_domain())
        ref = ClaimRef("default", CLAIM_UIDS[0], "claim-0")
        plugin.store_claim(_claim(0, channel_config()))
        with pytest.raises(grpc.RpcError):  # the plugin died under the call
            plugin.client.prepare([ref])
        assert plugin.kill() == -9
        name = member_name(DOMAIN_UID, NODE)
        assert [m["metadata"]["name"] for m in objects.list_objects(COMPUTE_DOMAIN_MEMBER)] == [
            name
        ]
        plugin.arm([])
        plugin.start()  # recovery: the half-done Prepare is rolled back
        assert objects.list_objects(COMPUTE_DOMAIN_MEMBER) == []
        results: list[Any] = []
        preparing = threading.Thread(target=lambda: results.append(plugin.client.prepare([ref])))
        preparing.start()
        wait_until(lambda: bool(objects.list_objects(COMPUTE_DOMAIN_MEMBER)), "the member again")
        member = objects.get_object(COMPUTE_DOMAIN_MEMBER, NAMESPACE, name)
        member["status"] = member_status_body(MemberStatus(state=MemberState.READY))
        objects.update_object_status(COMPUTE_DOMAIN_MEMBER, member)
        preparing.join(timeout=20)
        assert results[0][ref.uid].error == ""
        assert plugin.cdi_spec_path(ref.uid).exists()
        assert plugin.terminate() == 0
    finally:
        plugin.close()
    assert time.monotonic() - began < BOUND_S
