"""SlicePublisher: writes only what changed, bumps generations, survives wipes and races.

Every test runs against the local store and against KubeCluster talking to the
fake apiserver, through a RecordingCluster that records each write.
"""

from __future__ import annotations

import copy
import itertools
import logging
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from controller.publisher import PublishResult, SlicePublisher
from controller.slices import build_resource_slices
from dra_driver.errors import ClusterError, SliceError
from dra_driver.kube.access import Cluster, ConflictError, LocalCluster
from dra_driver.kube.api_store import KubeCluster
from dra_driver.node.devices import build_devices
from tests.fakes import FakeApiServer, RecordingCluster, dgx_h100_inventory, wait_until

DRIVER = "gpu.nvidia.com"
NODE = "node-1"


@pytest.fixture(params=["local", "kube"])
def inner(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Cluster]:
    if request.param == "local":
        yield LocalCluster(tmp_path / "cluster")
        return
    with FakeApiServer() as server:
        client = server.api_client()
        try:
            yield KubeCluster(client)
        finally:
            client.close()


@pytest.fixture
def cluster(inner: Cluster) -> RecordingCluster:
    return RecordingCluster(inner)


@pytest.fixture
def publisher(cluster: RecordingCluster) -> SlicePublisher:
    return SlicePublisher(cluster, driver=DRIVER, node_name=NODE)


def device(name: str, memory: str = "80Gi", index: int = 0) -> dict[str, Any]:
    return {
        "name": name,
        "attributes": {
            "gpu.nvidia.com/type": {"string": "gpu"},
            "gpu.nvidia.com/index": {"int": index},
        },
        "capacity": {"gpu.nvidia.com/memory": {"value": memory}},
    }


def desired(
    *slices: list[str], node: str = NODE, driver: str = DRIVER, pool: str | None = None
) -> list[dict[str, Any]]:
    """Slices as controller.slices builds them: `<node>-<driver>-<i>`, placeholder generation."""
    return [
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": {"name": f"{node}-{driver}-{i}"},
            "spec": {
                "driver": driver,
                "nodeName": node,
                "pool": {"name": pool or node, "generation": 0, "resourceSliceCount": len(slices)},
                "devices": [device(name) for name in names],
            },
        }
        for i, names in enumerate(slices)
    ]


def published(cluster: Cluster, node: str = NODE, driver: str = DRIVER) -> dict[str, Any]:
    return {
        obj["metadata"]["name"]: obj
        for obj in cluster.list_resource_slices(driver=driver, node_name=node)
    }


def device_names(obj: dict[str, Any]) -> list[str]:
    return [d["name"] for d in obj["spec"]["devices"]]


def test_first_publish_creates_every_slice_at_generation_1(
    publisher: SlicePublisher, cluster: RecordingCluster
) -> None:
    result = publisher.publish(desired(["gpu-0", "gpu-1"], ["gpu-2"]))
    names = [f"{NODE}-{DRIVER}-0", f"{NODE}-{DRIVER}-1"]
    assert result == PublishResult(created=names, updated=[], deleted=[])
    assert result.changed
    slices = published(cluster)
    assert sorted(slices) == names
    for obj in slices.values():
        assert obj["spec"]["pool"] == {"name": NODE, "generation": 1, "resourceSliceCount": 2}
    assert device_names(slices[names[0]]) == ["gpu-0", "gpu-1"]


def test_identical_publish_writes_nothing(
    publisher: SlicePublisher, cluster: RecordingCluster
) -> None:
    publisher.publish(desired(["gpu-0"], ["gpu-1"]))
    before = published(cluster)
    cluster.writes.clear()
    result = publisher.publish(desired(["gpu-0"], ["gpu-1"]))
    assert not result.changed
    assert cluster.writes == []
    assert published(cluster) == before  # resourceVersions included


def test_changed_device_bumps_the_generation_of_the_whole_pool(
    publisher: SlicePublisher, cluster: RecordingCluster
) -> None:
    publisher.publish(desired(["gpu-0"], ["gpu-1"]))
    before = published(cluster)
    changed = desired(["gpu-0"], ["gpu-1"])
    changed[1]["spec"]["devices"][0]["capacity"]["gpu.nvidia.com/memory"]["value"] = "40Gi"
    result = publisher.publish(changed)
    assert result.created == []
    assert result.deleted == []
    assert sorted(result.updated) == sorted(before)
    after = published(cluster)
    assert {obj["spec"]["pool"]["generation"] for obj in after.values()} == {2}
    for name, obj in after.items():
        assert obj["metadata"]["uid"] == before[name]["metadata"]["uid"]  # updated in place
    memory = after[f"{NODE}-{DRIVER}-1"]["spec"]["devices"][0]["capacity"]
    assert memory == {"gpu.nvidia.com/memory": {"value": "40Gi"}}


def test_shrunk_inventory_deletes_the_extra_slice(
    publisher: SlicePublisher, cluster: RecordingCluster
) -> None:
    publisher.publish(desired(["gpu-0"], ["gpu-1"]))
    result = publisher.publish(desired(["gpu-0", "gpu-1"]))
    assert result == PublishResult(
        created=[], updated=[f"{NODE}-{DRIVER}-0"], deleted=[f"{NODE}-{DRIVER}-1"]
    )
    (only,) = published(cluster).values()
    assert only["spec"]["pool"] == {"name": NODE, "generation": 2, "resourceSliceCount": 1}
    assert device_names(only) == ["gpu-0", "gpu-1"]


def test_grown_inventory_creates_the_new_slice(
    publisher: SlicePublisher, cluster: RecordingCluster
) -> None:
    publisher.publish(desired(["gpu-0"]))
    result = publisher.publish(desired(["gpu-0"], ["gpu-1"]))
    assert result.created == [f"{NODE}-{DRIVER}-1"]
    assert result.updated == [f"{NODE}-{DRIVER}-0"]
    pools = [obj["spec"]["pool"] for obj in published(cluster).values()]
    assert pools == [{"name": NODE, "generation": 2, "resourceSliceCount": 2}] * 2


def test_slices_of_other_nodes_and_drivers_are_untouched(
    publisher: SlicePublisher, cluster: RecordingCluster
) -> None:
    other_node = cluster.inner.create_resource_slice(desired(["gpu-0"], node="node-2")[0])
    other_driver = cluster.inner.create_resource_slice(
        desired(["nic-0"], driver="nic.example.com")[0]
    )
    publisher.publish(desired(["gpu-0"], ["gpu-1"]))
    publisher.publish(desired(["gpu-0"]))
    assert published(cluster, node="node-2") == {other_node["metadata"]["name"]: other_node}
    assert published(cluster, driver="nic.example.com") == {
        other_driver["metadata"]["name"]: other_driver
    }


def test_slices_wiped_by_the_kubelet_are_recreated(
    publisher: SlicePublisher, cluster: RecordingCluster
) -> None:
    publisher.publish(desired(["gpu-0"], ["gpu-1"]))
    for name in published(cluster):
        cluster.inner.delete_resource_slice(name)
    result = publisher.publish(desired(["gpu-0"], ["gpu-1"]))
    assert sorted(result.created) == [f"{NODE}-{DRIVER}-0", f"{NODE}-{DRIVER}-1"]
    assert len(published(cluster)) == 2


def test_one_lost_slice_is_recreated_and_the_pool_moves_to_a_new_generation(
    publisher: SlicePublisher, cluster: RecordingCluster
) -> None:
    publisher.publish(desired(["gpu-0"], ["gpu-1"]))
    cluster.inner.delete_resource_slice(f"{NODE}-{DRIVER}-1")
    result = publisher.publish(desired(["gpu-0"], ["gpu-1"]))
    assert result.created == [f"{NODE}-{DRIVER}-1"]
    assert result.updated == [f"{NODE}-{DRIVER}-0"]
    assert {obj["spec"]["pool"]["generation"] for obj in published(cluster).values()} == {2}


def test_a_slice_changed_behind_our_back_is_retried_after_a_relist(
    publisher: SlicePublisher, cluster: RecordingCluster
) -> None:
    publisher.publish(desired(["gpu-0"]))
    name = f"{NODE}-{DRIVER}-0"

    def someone_else_writes() -> None:
        current = cluster.inner.list_resource_slices(driver=DRIVER, node_name=NODE)[0]
        current["metadata"]["labels"] = {"touched": "by-someone-else"}
        cluster.inner.update_resource_slice(current)

    cluster.before_next("update_resource_slice", someone_else_writes)
    result = publisher.publish(desired(["gpu-0", "gpu-1"]))
    assert result.updated == [name]
    assert [method for method, _ in cluster.writes].count("update_resource_slice") == 2
    obj = published(cluster)[name]
    assert device_names(obj) == ["gpu-0", "gpu-1"]
    assert "labels" not in obj["metadata"]
    assert obj["spec"]["pool"]["generation"] == 2


def test_a_second_conflict_is_raised(publisher: SlicePublisher, cluster: RecordingCluster) -> None:
    publisher.publish(desired(["gpu-0"]))

    def someone_else_writes() -> None:
        current = cluster.inner.list_resource_slices(driver=DRIVER, node_name=NODE)[0]
        labels = current["metadata"].setdefault("labels", {})
        labels["n"] = str(int(labels.get("n", "0")) + 1)
        cluster.inner.update_resource_slice(current)

    cluster.before_next("update_resource_slice", someone_else_writes)
    cluster.before_next("update_resource_slice", someone_else_writes)
    with pytest.raises(ConflictError, match=f"ResourceSlice {NODE}-{DRIVER}-0"):
        publisher.publish(desired(["gpu-0", "gpu-1"]))


def test_a_slice_deleted_between_list_and_update_is_recreated(
    publisher: SlicePublisher, cluster: RecordingCluster
) -> None:
    publisher.publish(desired(["gpu-0"]))
    name = f"{NODE}-{DRIVER}-0"
    cluster.before_next("update_resource_slice", lambda: cluster.inner.delete_resource_slice(name))
    result = publisher.publish(desired(["gpu-1"]))
    assert result == PublishResult(created=[name], updated=[], deleted=[])
    assert device_names(published(cluster)[name]) == ["gpu-1"]


def test_consumers_never_see_a_complete_pool_with_a_device_twice(
    publisher: SlicePublisher, cluster: RecordingCluster
) -> None:
    """Devices move between slices; after every single write, look as a scheduler would."""
    views: list[list[str]] = []

    def consumer_view(_method: str, _name: str) -> None:
        slices = list(published(cluster).values())
        if not slices:
            return
        top = max(obj["spec"]["pool"]["generation"] for obj in slices)
        current = [obj for obj in slices if obj["spec"]["pool"]["generation"] == top]
        if len(current) == current[0]["spec"]["pool"]["resourceSliceCount"]:
            devices = [name for obj in current for name in device_names(obj)]
            assert len(devices) == len(set(devices)), f"duplicate devices in {devices}"
            views.append(sorted(devices))

    publisher.publish(desired(["a", "b"], ["c", "d"], ["e"]))
    cluster.after_each_write(consumer_view)
    for slices in (
        desired(["a", "c"], ["b", "d", "e"]),  # devices move, a slice goes
        desired(["e"], ["d"], ["c"], ["b", "a"]),  # devices move, slices come
    ):
        cluster.writes.clear()
        views.clear()
        publisher.publish(slices)
        # the new generation is complete only once every write of it is done, and then whole
        assert views
        assert all(view == ["a", "b", "c", "d", "e"] for view in views)
        kinds = [method for method, _ in cluster.writes]
        deletes = [k == "delete_resource_slice" for k in kinds]
        assert deletes == sorted(deletes), f"a write after a delete: {kinds}"


def test_owner_reference_to_the_node(inner: Cluster) -> None:
    cluster = RecordingCluster(inner)
    publisher = SlicePublisher(cluster, driver=DRIVER, node_name=NODE, owner_node_uid="node-uid-1")
    publisher.publish(desired(["gpu-0"]))
    (obj,) = published(cluster).values()
    assert obj["metadata"]["ownerReferences"] == [
        {"apiVersion": "v1", "kind": "Node", "name": NODE, "uid": "node-uid-1", "controller": True}
    ]
    cluster.writes.clear()
    assert not publisher.publish(desired(["gpu-0"])).changed
    assert cluster.writes == []


def test_equal_quantities_in_another_spelling_are_not_a_change(
    publisher: SlicePublisher, cluster: RecordingCluster
) -> None:
    spelled = desired(["gpu-0"])
    spelled[0]["spec"]["devices"][0]["capacity"]["gpu.nvidia.com/memory"]["value"] = "81920Mi"
    publisher.publish(spelled)
    cluster.writes.clear()
    assert not publisher.publish(desired(["gpu-0"])).changed  # "80Gi"
    assert cluster.writes == []


def test_fields_dropped_by_the_apiserver_are_reported_once_and_not_rewritten(
    inner: Cluster, caplog: pytest.LogCaptureFixture
) -> None:
    def drop_taints(_method: str, obj: dict[str, Any]) -> dict[str, Any]:
        obj = copy.deepcopy(obj)
        for dev in obj["spec"].get("devices", []):
            dev.pop("taints", None)
        return obj

    cluster = RecordingCluster(inner, rewrite=drop_taints)
    publisher = SlicePublisher(cluster, driver=DRIVER, node_name=NODE)
    tainted = desired(["gpu-0"])
    tainted[0]["spec"]["devices"][0]["taints"] = [
        {"key": "gpu.nvidia.com/xid", "effect": "NoSchedule"}
    ]
    with caplog.at_level(logging.WARNING, logger="controller.publisher"):
        assert publisher.publish(tainted).changed
        cluster.writes.clear()
        assert not publisher.publish(copy.deepcopy(tainted)).changed
    assert cluster.writes == []
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert "spec.devices[0].taints" in warnings[0]
    assert "DRADeviceTaints" in warnings[0]
    assert publisher.dropped_gates == {"DRADeviceTaints"}


def test_a_name_moving_to_another_pool_is_replaced(
    publisher: SlicePublisher, cluster: RecordingCluster
) -> None:
    publisher.publish(desired(["gpu-0"]))
    result = publisher.publish(desired(["gpu-0"], pool="renamed-pool"))
    name = f"{NODE}-{DRIVER}-0"
    assert result == PublishResult(created=[name], updated=[], deleted=[name])
    (obj,) = published(cluster).values()
    assert obj["spec"]["pool"] == {"name": "renamed-pool", "generation": 1, "resourceSliceCount": 1}


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda s: s[0]["spec"].update(nodeName="node-2"), "spec.nodeName"),
        (lambda s: s[0]["spec"].update(driver="other.example.com"), "spec.driver"),
        (lambda s: s[1]["metadata"].update(name=s[0]["metadata"]["name"]), "appears twice"),
        (lambda s: s[1]["spec"]["devices"].append(device("gpu-0")), "'gpu-0' is also in"),
    ],
)
def test_a_bad_desired_set_is_refused_before_any_write(
    publisher: SlicePublisher, cluster: RecordingCluster, mutate: Any, message: str
) -> None:
    bad = desired(["gpu-0"], ["gpu-1"])
    mutate(bad)
    with pytest.raises(SliceError, match=message):
        publisher.publish(bad)
    assert cluster.writes == []


def test_real_slices_of_a_dgx_h100_publish_and_settle(
    publisher: SlicePublisher, cluster: RecordingCluster
) -> None:
    slices = build_resource_slices(
        build_devices(dgx_h100_inventory()), driver=DRIVER, node_name=NODE
    )
    assert publisher.publish(slices).created
    cluster.writes.clear()
    rebuilt = build_resource_slices(
        build_devices(dgx_h100_inventory()), driver=DRIVER, node_name=NODE
    )
    assert not publisher.publish(rebuilt).changed
    assert cluster.writes == []


def test_run_forever_repairs_wipes_and_survives_errors(
    publisher: SlicePublisher, cluster: RecordingCluster, caplog: pytest.LogCaptureFixture
) -> None:
    stop = threading.Event()
    rounds: list[int] = []

    def build() -> list[dict[str, Any]]:
        rounds.append(len(rounds) + 1)
        if len(rounds) == 1:
            raise RuntimeError("NVML went away")
        if len(rounds) == 3:
            for name in published(cluster):  # the kubelet restarted and wiped the node
                cluster.inner.delete_resource_slice(name)
        if len(rounds) == 4:
            stop.set()
        return desired(["gpu-0"])

    with caplog.at_level(logging.ERROR, logger="controller.publisher"):
        publisher.run_forever(build, stop, interval=0.001)
    assert rounds == [1, 2, 3, 4]
    assert "NVML went away" in caplog.text
    assert [method for method, _ in cluster.writes] == [
        "create_resource_slice",  # round 2: first successful publish
        "create_resource_slice",  # round 3: recreated after the wipe
    ]
    assert len(published(cluster)) == 1


def test_run_forever_logs_cluster_errors_and_goes_on(
    inner: Cluster, caplog: pytest.LogCaptureFixture
) -> None:
    cluster = RecordingCluster(inner)
    publisher = SlicePublisher(cluster, driver=DRIVER, node_name=NODE)
    stop = threading.Event()
    calls: list[int] = []

    def apiserver_down() -> None:
        raise ClusterError("ResourceSlices: list failed: cannot reach the apiserver")

    cluster.before_next("list_resource_slices", apiserver_down)

    def build() -> list[dict[str, Any]]:
        calls.append(1)
        if len(calls) == 2:
            stop.set()
        return desired(["gpu-0"])

    with caplog.at_level(logging.ERROR, logger="controller.publisher"):
        publisher.run_forever(build, stop, interval=0.001)
    assert "cannot reach the apiserver" in caplog.text
    assert len(published(cluster)) == 1


def test_run_forever_can_wait_an_interval_before_its_first_round(
    publisher: SlicePublisher, cluster: RecordingCluster
) -> None:
    """The daemon has just published: the loop must not list and compare again at once."""
    stop = threading.Event()
    stop.set()  # stopped during the first wait: no round at all
    built: list[int] = []

    def build() -> list[dict[str, Any]]:
        built.append(1)
        return desired(["gpu-0"])

    publisher.run_forever(build, stop, interval=0.001, immediately=False)
    assert built == []
    assert cluster.writes == []


def test_run_forever_publishes_at_once_when_woken_and_reports_each_round(
    publisher: SlicePublisher, cluster: RecordingCluster
) -> None:
    """A watch that sees a wiped slice wakes the loop; the hour-long interval is not waited."""
    stop, wake = threading.Event(), threading.Event()
    outcomes: list[bool] = []
    thread = threading.Thread(
        target=publisher.run_forever,
        args=(lambda: desired(["gpu-0"]), stop, 3600.0),
        kwargs={"wake": wake, "on_result": outcomes.append},
        daemon=True,
    )
    thread.start()
    try:
        wait_until(lambda: len(published(cluster)) == 1, "the first publish", timeout=30)
        (name,) = published(cluster)
        cluster.inner.delete_resource_slice(name)
        wake.set()
        wait_until(lambda: bool(published(cluster)), "the slice published again", timeout=30)
        assert list(published(cluster)) == [name]
        wait_until(lambda: len(outcomes) >= 2, "both outcomes", timeout=30)  # told after writing
        assert outcomes[:2] == [True, True]
    finally:
        stop.set()
        wake.set()
        thread.join(timeout=10)
    assert not thread.is_alive()


def test_run_forever_backs_off_after_errors_instead_of_acting_on_every_wake(
    inner: Cluster,
) -> None:
    cluster = RecordingCluster(inner)
    publisher = SlicePublisher(cluster, driver=DRIVER, node_name=NODE)
    stop, wake = threading.Event(), threading.Event()
    attempts: list[float] = []

    def build() -> list[dict[str, Any]]:
        attempts.append(time.monotonic())
        if len(attempts) == 3:
            stop.set()
        raise ClusterError("apiserver down")

    wake.set()  # woken all the time: only the back-off spaces the attempts
    thread = threading.Thread(
        target=publisher.run_forever, args=(build, stop, 3600.0), kwargs={"wake": wake}
    )
    thread.start()
    thread.join(timeout=60)
    assert len(attempts) == 3
    gaps = [b - a for a, b in itertools.pairwise(attempts)]
    assert gaps[0] >= 0.25  # first back-off: 0.5 s with up to half of it jittered away
    assert gaps[1] >= 0.5
