"""One publisher per node: the second instance waits for the lease and takes it over."""

from __future__ import annotations

import threading
from pathlib import Path

from controller.publisher import SlicePublisher
from dra_driver.kube.local_store import LocalCluster
from kubelet_plugin.publish_lease import PublishLease


def test_the_lease_goes_to_one_instance_and_passes_on_when_it_leaves(tmp_path: Path) -> None:
    old, new = PublishLease(tmp_path), PublishLease(tmp_path)
    assert old.held()
    assert old.held()  # kept
    assert not new.held()
    old.release()
    assert new.held()
    assert not old.held()
    new.release()


def test_a_publisher_without_the_lease_publishes_nothing_until_it_has_it(tmp_path: Path) -> None:
    holder, waiting = PublishLease(tmp_path), PublishLease(tmp_path)
    assert holder.held()
    rounds: list[int] = []

    def build() -> list[dict[str, object]]:
        rounds.append(1)
        return []

    publisher = SlicePublisher(
        LocalCluster(tmp_path / "cluster"), driver="gpu.nvidia.com", node_name="n"
    )
    stop = threading.Event()
    thread = threading.Thread(
        target=publisher.run_forever,
        args=(build, stop, 0.05),
        kwargs={"may_publish": waiting.held},
        daemon=True,
    )
    thread.start()
    stop.wait(0.5)
    assert rounds == []
    holder.release()
    for _ in range(50):
        if rounds:
            break
        stop.wait(0.1)
    stop.set()
    thread.join(5)
    assert rounds
    waiting.release()
