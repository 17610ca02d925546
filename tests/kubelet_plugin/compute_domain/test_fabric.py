"""The CD plugin re-reads the NVLink fabric and republishes, without a restart.

NVIDIA's plugin exits while a GPU's fabric is IN_PROGRESS (#1264). Here a
GB200 node whose fabric is still registering publishes an empty pool, and the
channel appears once the fabric manager reports COMPLETED: the timer loop
(`NodeFabric.run`) wakes the real slice publisher.
"""

from __future__ import annotations

import dataclasses
import threading
from pathlib import Path

from controller.publisher import SlicePublisher
from dra_driver.compute_domain.membership import MemberSpec, build_member
from dra_driver.compute_domain.names import CLIQUE_NODE_LABEL, DRIVER_NAME
from dra_driver.errors import InventoryError
from dra_driver.hardware.nvml import fabric
from dra_driver.hardware.simulated.hardware import SimHardware
from dra_driver.hardware.simulated.nvml import SimNvml
from dra_driver.hardware.simulated.shapes import load_shape
from dra_driver.kube.local_store import LocalCluster
from dra_driver.kube.object_store import COMPUTE_DOMAIN_MEMBER, NODE
from dra_driver.node.inventory import NodeInventory, discover
from kubelet_plugin.compute_domain.fabric import NodeFabric
from kubelet_plugin.compute_domain.member_watch import MemberWatch
from tests.fakes.object_store import MemoryObjectStore
from tests.fakes.waiting import wait_until

CLIQUE = "00000000-0000-0000-0000-000000000001.0"


def _registering_node() -> tuple[SimHardware, fabric.FabricInfo]:
    hw = SimHardware(load_shape("gb200-node"), node_name="gb-0")
    settled = hw.gpu(2).fabric
    assert settled is not None
    hw.set_fabric(2, dataclasses.replace(settled, state=fabric.STATE_IN_PROGRESS))
    return hw, settled


def _published(cluster: LocalCluster) -> list[str]:
    return [
        device["name"]
        for obj in cluster.list_resource_slices(driver=DRIVER_NAME, node_name="gb-0")
        for device in obj["spec"].get("devices", [])
    ]


def test_a_fabric_that_settles_is_published_without_a_restart(tmp_path: Path) -> None:
    hw, settled = _registering_node()
    nvml = SimNvml(hw)
    cluster = LocalCluster(tmp_path / "cluster")
    wake, stop = threading.Event(), threading.Event()
    node_fabric = NodeFabric(lambda: discover(nvml), node_name="gb-0", on_change=wake.set)
    node_fabric.evaluate()
    assert node_fabric.clique() is None
    assert "registering (state in-progress" in " ".join(node_fabric.current.withheld)
    publisher = SlicePublisher(cluster, driver=DRIVER_NAME, node_name="gb-0")
    publisher.publish(node_fabric.slices())
    assert _published(cluster) == []  # the pool is there, empty
    threads = [
        threading.Thread(
            target=publisher.run_forever,
            args=(node_fabric.slices, stop, 30.0),
            kwargs={"immediately": False, "wake": wake},
        ),
        threading.Thread(target=node_fabric.run, args=(stop, 0.05)),
    ]
    for thread in threads:
        thread.start()
    try:
        hw.set_fabric(2, settled)
        wait_until(lambda: _published(cluster) == ["channel-0", "daemon-0"], "the channel")
        assert node_fabric.clique() == CLIQUE
        hw.set_fabric(2, dataclasses.replace(settled, state=fabric.STATE_IN_PROGRESS))
        wait_until(lambda: _published(cluster) == [], "the channel withdrawn")
    finally:
        stop.set()
        wake.set()
        for thread in threads:
            thread.join(timeout=5)


def test_a_failing_nvml_keeps_the_last_answer() -> None:
    nvml = SimNvml(SimHardware(load_shape("gb200-node"), node_name="gb-0"))
    broken = False

    def inventory() -> NodeInventory:
        if broken:
            raise InventoryError("NVML: the GPU fell off the bus")
        return discover(nvml)

    node_fabric = NodeFabric(inventory, node_name="gb-0")
    assert node_fabric.evaluate() is True
    broken = True
    assert node_fabric.evaluate() is False  # logged, never an exit
    assert node_fabric.clique() == CLIQUE


def test_the_clique_label_follows_the_fabric_and_goes_on_shutdown() -> None:
    hw, settled = _registering_node()
    nvml = SimNvml(hw)
    objects = MemoryObjectStore()
    objects.create_object(NODE, {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "gb-0"}})
    node_fabric = NodeFabric(
        lambda: discover(nvml), node_name="gb-0", objects=objects, clique_label=True
    )

    def label() -> str | None:
        labels = objects.get_object(NODE, None, "gb-0")["metadata"].get("labels") or {}
        value = labels.get(CLIQUE_NODE_LABEL)
        return None if value is None else str(value)

    node_fabric.evaluate()
    assert label() is None
    hw.set_fabric(2, settled)
    node_fabric.evaluate()
    assert label() == CLIQUE
    writes = objects.writes["Node"]
    node_fabric.evaluate()
    assert objects.writes["Node"] == writes  # on change only
    node_fabric.clear_label()
    assert label() is None


def test_the_channel_carries_the_served_domain_while_a_member_exists(tmp_path: Path) -> None:

    hw = SimHardware(load_shape("gb200-node"), node_name="gb-0")
    nvml = SimNvml(hw)
    cluster = LocalCluster(tmp_path / "cluster")
    objects = MemoryObjectStore()
    wake, stop = threading.Event(), threading.Event()
    node_fabric = NodeFabric(lambda: discover(nvml), node_name="gb-0", on_change=wake.set)
    node_fabric.evaluate()

    def serve_domain() -> None:  # as main.py wires it
        node_fabric.set_domain(members.serving("gb-0"))

    members = MemberWatch(objects, "dra-gpu", on_change=serve_domain)
    publisher = SlicePublisher(cluster, driver=DRIVER_NAME, node_name="gb-0")
    publisher.publish(node_fabric.slices())
    threads = [
        threading.Thread(target=members.run, args=(stop,), daemon=True),
        threading.Thread(
            target=publisher.run_forever,
            args=(node_fabric.slices, stop, 30.0),
            kwargs={"immediately": False, "wake": wake},
            daemon=True,
        ),
    ]
    for thread in threads:
        thread.start()

    def channel_domain() -> str | None:
        for obj in cluster.list_resource_slices(driver=DRIVER_NAME, node_name="gb-0"):
            for device in obj["spec"].get("devices", []):
                if device["name"] == "channel-0":
                    return (device["attributes"].get("domain") or {}).get("string")
        return None

    uid = "aaaaaaaa-0000-0000-0000-000000000001"
    try:
        assert channel_domain() is None
        spec = MemberSpec(
            domain_uid=uid,
            domain_name="d",
            domain_namespace="team-a",
            node_name="gb-0",
            clique_id=CLIQUE,
        )
        member = build_member(spec, namespace="dra-gpu")
        objects.create_object(COMPUTE_DOMAIN_MEMBER, member)
        wait_until(lambda: channel_domain() == uid, timeout=5)
        objects.delete_object(COMPUTE_DOMAIN_MEMBER, "dra-gpu", member["metadata"]["name"])
        wait_until(lambda: channel_domain() is None, timeout=5)
    finally:
        stop.set()
        for thread in threads:
            thread.join(5)
