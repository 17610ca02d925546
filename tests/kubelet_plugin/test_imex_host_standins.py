"""Two IMEX hosts on two simulated nodes, running the driver root's IMEX stand-ins for real.

End to end below the controller: each host finds `nvidia-imex` in its
simulated node's driver root, writes the domain's files, starts the daemon
on its node's loopback address, and the two daemons connect. The test plays
the controller (it writes the clique rows). What a user would notice: both
members turn Ready with their peer `C` (within 20 s), a peer that joins later
is picked up with a SIGUSR1 (no restart), a member's departure stops its
daemon, a daemon that cannot start is reported with its own words, and one
that identifies itself as another node fails its member (#1418 guard).
"""

from __future__ import annotations

import os
import random
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from dra_driver.composition.hardware import open_hardware
from dra_driver.compute_domain.membership import (
    CliqueRow,
    MemberSpec,
    MemberStatus,
    build_clique,
    build_member,
    member_name,
    member_status,
)
from dra_driver.kube.object_store import COMPUTE_DOMAIN_CLIQUE, COMPUTE_DOMAIN_MEMBER
from kubelet_plugin.imex_host import HostConfig, ImexHost, serve
from kubelet_plugin.imex_host_main import imex_runner
from kubelet_plugin.imex_host_runner import DomainPaths, ProcessImexRunner
from tests.fakes import wait_until
from tests.fakes.object_store import MemoryObjectStore

NS = "dra-gpu"
UID = "5b0c7d4e-2f1a-4c3b-9d8e-7a6f5e4d3c2b"
CLIQUE = "00000000-0000-0000-0000-000000000001.0"
SHAPE = "gb200-node"
BOUND_S = 20.0


def _addresses(count: int) -> list[str]:
    """Loopback addresses of simulated nodes (127.0.1.x and up; the demo takes 127.0.1.x),
    random so that parallel runs do not share ports."""
    rng = random.Random(os.getpid() ^ time.monotonic_ns())
    picked: set[str] = set()
    while len(picked) < count:
        picked.add(f"127.0.{rng.randint(2, 200)}.{rng.randint(1, 254)}")
    return sorted(picked)


@dataclass
class Node:
    name: str
    ip: str
    host: ImexHost
    runner: ProcessImexRunner
    stop: threading.Event = field(default_factory=threading.Event)
    thread: threading.Thread | None = None

    def paths(self) -> DomainPaths:
        return DomainPaths.of(self.host.config.state_dir, UID)


class Cluster:
    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path
        self.store = MemoryObjectStore()
        self.nodes: dict[str, Node] = {}

    def node(self, name: str, ip: str, **env: str) -> Node:
        hardware = open_hardware(
            f"sim:{SHAPE}", sim_state=self.tmp_path / f"{name}.json", node_name=name
        )
        runner = imex_runner(
            hardware,
            query_timeout=2.0,
            env={"IMEX_STANDIN_SIGUSR1_MIN_INTERVAL": "0.2", **env},
        )
        config = HostConfig(
            node_name=name,
            node_ip=ip,
            namespace=NS,
            state_dir=self.tmp_path / name / "imex",
            host_proc_root=hardware.host.proc_root,
            sigusr1_min_interval=0.2,
            restart_backoff_base=0.05,
            restart_backoff_cap=0.2,
        )
        host = ImexHost(self.store, runner, config, own_pids=runner.own_pids)
        node = Node(name, ip, host, runner)
        node.thread = threading.Thread(
            target=serve,
            args=(host, node.stop),
            kwargs={"fast_interval": 0.1, "ready_interval": 1.0},
            daemon=True,
        )
        node.thread.start()
        self.nodes[name] = node
        return node

    def join(self, name: str) -> None:
        """What the CD plugin does at a node's first channel claim."""
        spec = MemberSpec(UID, "team-a", "train", name, CLIQUE)
        self.store.create_object(COMPUTE_DOMAIN_MEMBER, build_member(spec, namespace=NS))

    def rows(self, indices: dict[str, int]) -> None:
        """What the controller does: the clique's rows, addresses from the members."""
        rows = [
            CliqueRow(n, self.status(n).ip_address, CLIQUE, i, "NotReady")
            for n, i in indices.items()
        ]
        obj = build_clique(UID, CLIQUE, rows, namespace=NS)
        try:
            current = self.store.get_object(COMPUTE_DOMAIN_CLIQUE, NS, obj["metadata"]["name"])
        except Exception:
            self.store.create_object(COMPUTE_DOMAIN_CLIQUE, obj)
        else:
            current["daemons"] = obj["daemons"]
            self.store.update_object(COMPUTE_DOMAIN_CLIQUE, current)

    def status(self, name: str) -> MemberStatus:
        return member_status(
            self.store.get_object(COMPUTE_DOMAIN_MEMBER, NS, member_name(UID, name))
        )

    def close(self) -> None:
        for node in self.nodes.values():
            node.stop.set()
        for node in self.nodes.values():
            if node.thread is not None:
                node.thread.join(10)
            node.runner.stop(node.paths())


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    made = Cluster(tmp_path)
    yield made
    made.close()


def _log(node: Node) -> str:
    try:
        return node.paths().log.read_text(errors="replace")[-2000:]
    except FileNotFoundError:
        return "(no log)"


def test_two_hosts_connect_their_daemons_and_follow_a_departure(cluster: Cluster) -> None:
    start = time.monotonic()
    ip1, ip2 = _addresses(2)
    n1, n2 = cluster.node("n1", ip1), cluster.node("n2", ip2)
    cluster.join("n1")
    cluster.join("n2")
    wait_until(lambda: cluster.status("n2").ip_address == ip2, "n2's address", timeout=BOUND_S)
    cluster.rows({"n1": 0})  # n1 first: its daemon starts alone
    wait_until(
        lambda: cluster.status("n1").state == "Ready",
        "n1 Ready alone",
        timeout=BOUND_S,
        details=lambda: f"{cluster.status('n1')}\n{_log(n1)}",
    )
    first_pid = n1.runner.find(n1.paths())
    cluster.rows({"n1": 0, "n2": 1})  # n2 joins: n1 learns of it by SIGUSR1

    def connected() -> bool:
        s1, s2 = cluster.status("n1"), cluster.status("n2")
        return (s1.state, dict(s1.peers), s2.state, dict(s2.peers)) == (
            "Ready",
            {"n2": "C"},
            "Ready",
            {"n1": "C"},
        )

    wait_until(
        connected,
        "both members Ready with their peer connected",
        timeout=BOUND_S,
        details=lambda: (
            f"{cluster.status('n1')}\n{cluster.status('n2')}\nn1:\n{_log(n1)}\nn2:\n{_log(n2)}"
        ),
    )
    assert (cluster.status("n1").imex_node_id, cluster.status("n2").imex_node_id) == (0, 1)
    assert n1.runner.find(n1.paths()) == first_pid  # no restart for a new peer
    assert "SIGUSR1" in _log(n1)

    # n2's last claim is unprepared: its member goes, its daemon stops, its files go.
    cluster.store.delete_object(COMPUTE_DOMAIN_MEMBER, NS, member_name(UID, "n2"))
    cluster.rows({"n1": 0})
    wait_until(lambda: not n2.paths().root.exists(), "n2's IMEX stopped", timeout=BOUND_S)
    wait_until(lambda: cluster.status("n1").peers == {}, "n1 forgets n2", timeout=BOUND_S)
    assert ip2 not in n1.paths().hosts.read_text()
    assert time.monotonic() - start < BOUND_S


def test_a_daemon_that_cannot_start_is_reported_with_its_last_words(cluster: Cluster) -> None:
    (ip1,) = _addresses(1)
    node = cluster.node("n1", ip1, DRA_GPU_FAILPOINTS="imex-refuse-start")
    cluster.join("n1")
    cluster.rows({"n1": 0})
    wait_until(
        lambda: cluster.status("n1").reason == "ImexFailed",
        "the member Failed",
        timeout=BOUND_S,
        details=lambda: f"{cluster.status('n1')}\n{_log(node)}",
    )
    message = cluster.status("n1").message
    assert "exited 3 times in a row" in message
    assert "No matching network interface" in message


def test_a_daemon_that_identifies_as_another_node_fails_its_member(cluster: Cluster) -> None:
    (ip1,) = _addresses(1)
    node = cluster.node("n1", ip1, DRA_GPU_FAILPOINTS="imex-wrong-node-id")
    cluster.join("n1")
    cluster.rows({"n1": 0})
    wait_until(
        lambda: cluster.status("n1").reason == "IndexMismatch",
        "the member Failed",
        timeout=BOUND_S,
        details=lambda: f"{cluster.status('n1')}\n{_log(node)}",
    )
    status = cluster.status("n1")
    assert (status.state, status.imex_node_id) == ("Failed", 1)
