"""The scheduler and kubelet stand-in's scheduling half, without any daemon.

What a pod's claims become before any plugin is called: a claim per template
entry (owned by the pod, named as the resourceclaim controller names it), a
node chosen as kube-scheduler would (nodeName, nodeSelector, Ready), and a
clear error when no node offers a channel. Slices are what a node's CD plugin
publishes (`compute_domain_devices` of a simulated gb200-node).
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest

from controller.compute_domain_inventory import compute_domain_resource_slices
from dra_driver.composition.compute_domain_cluster import (
    channel_pod,
    create_node_object,
    set_node_ready,
)
from dra_driver.composition.compute_domain_kubelet import (
    POD_CLAIM_NAME_ANNOTATION,
    NodeAccess,
    SchedulerKubelet,
)
from dra_driver.compute_domain import manifests
from dra_driver.compute_domain.devices import compute_domain_devices
from dra_driver.errors import AllocationError
from dra_driver.hardware.simulated.hardware import SimHardware
from dra_driver.hardware.simulated.nvml import SimNvml
from dra_driver.hardware.simulated.shapes import load_shape
from dra_driver.kube.local_store import LocalCluster
from dra_driver.kube.object_store import RESOURCE_CLAIM_TEMPLATE
from dra_driver.node.inventory import discover

TEMPLATE = {
    "apiVersion": "resource.k8s.io/v1",
    "kind": "ResourceClaimTemplate",
    "metadata": {"namespace": "team", "name": "chan"},
    "spec": {
        "metadata": {"labels": {"app": "mpi"}},
        "spec": {
            "devices": {
                "requests": [
                    {
                        "name": "channel",
                        "exactly": {"deviceClassName": "compute-domain-default-channel.nvidia.com"},
                    }
                ]
            }
        },
    },
}


@pytest.fixture
def store(tmp_path: Path) -> LocalCluster:
    cluster = LocalCluster(tmp_path / "cluster")
    for device_class in manifests.device_classes():
        cluster.put_device_class(device_class)
    devices = compute_domain_devices(
        discover(SimNvml(SimHardware(load_shape("gb200-node"), node_name="n")))
    ).devices
    for index in (1, 2):
        name = f"node-{index}"
        create_node_object(cluster, name, f"127.0.1.{index}")
        for slice_ in compute_domain_resource_slices(list(devices), node_name=name):
            cluster.create_resource_slice(slice_)
    cluster.create_object(RESOURCE_CLAIM_TEMPLATE, TEMPLATE)
    return cluster


def _kubelet(store: LocalCluster) -> SchedulerKubelet:
    def access(name: str) -> NodeAccess | None:
        return None

    return SchedulerKubelet(store, access, node_names=lambda: ["node-1", "node-2"])


def _pod(name: str, **spec: Any) -> dict[str, Any]:
    pod = channel_pod("team", name, "chan")
    pod["metadata"]["uid"] = str(uuid.uuid4())
    pod["spec"].update(spec)
    return pod


def test_a_claim_per_template_entry_owned_by_the_pod(store: LocalCluster) -> None:
    kubelet = _kubelet(store)
    pod = _pod("w0")
    (claim,) = kubelet.claims_for(pod, timeout=1.0)
    meta = claim["metadata"]
    assert meta["name"].startswith("w0-imex-channel-0-")
    assert len(meta["name"]) == len("w0-imex-channel-0-") + 5
    assert meta["annotations"][POD_CLAIM_NAME_ANNOTATION] == "imex-channel-0"
    assert meta["labels"] == {"app": "mpi"}
    assert meta["ownerReferences"][0]["uid"] == pod["metadata"]["uid"]
    assert claim["spec"] == TEMPLATE["spec"]["spec"]
    # Asked again (a retry), the same claim comes back.
    assert [c["metadata"]["uid"] for c in kubelet.claims_for(pod, timeout=1.0)] == [meta["uid"]]


def test_node_name_and_node_selector_choose_the_node(store: LocalCluster) -> None:
    kubelet = _kubelet(store)
    pinned = _pod("w1", nodeName="node-2")
    node, (claim,) = kubelet.allocate(pinned, kubelet.claims_for(pinned, timeout=1.0))
    assert node == "node-2"
    (result,) = claim["status"]["allocation"]["devices"]["results"]
    assert (result["driver"], result["pool"], result["device"]) == (
        "compute-domain.nvidia.com",
        "node-2",
        "channel-0",
    )
    assert claim["status"]["reservedFor"][0]["name"] == "w1"
    selected = _pod("w2", nodeSelector={"kubernetes.io/hostname": "node-1"})
    node, _ = kubelet.allocate(selected, kubelet.claims_for(selected, timeout=1.0))
    assert node == "node-1"


def test_a_node_not_ready_is_not_chosen(store: LocalCluster) -> None:
    set_node_ready(store, "node-1", "127.0.1.1", False)
    kubelet = _kubelet(store)
    pod = _pod("w3")
    node, _ = kubelet.allocate(pod, kubelet.claims_for(pod, timeout=1.0))
    assert node == "node-2"
    pinned = _pod("w4", nodeName="node-1")
    with pytest.raises(AllocationError, match="no Ready node matches"):
        kubelet.allocate(pinned, kubelet.claims_for(pinned, timeout=1.0))


def test_a_missing_template_is_named(store: LocalCluster) -> None:
    pod = _pod("w5")
    pod["spec"]["resourceClaims"][0]["resourceClaimTemplateName"] = "nope"
    with pytest.raises(Exception, match=r"ResourceClaimTemplate team/nope not found"):
        _kubelet(store).claims_for(pod, timeout=0.2)
