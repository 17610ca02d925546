"""The IMEX host with `--imex-isolation channel`: one daemon per node for its clique's IMEX
domain, whatever domains its members belong to; its index and peers from the clique-wide
ComputeDomainClique; every member of the node gets that daemon's status; peers come and go
with a SIGUSR1; a member written in the other mode is named, not served."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dra_driver.compute_domain import isolation
from dra_driver.compute_domain.imex_config import render_nodes_config
from dra_driver.compute_domain.membership import (
    CliqueRow,
    MemberSpec,
    build_member,
    build_shared_clique,
    imex_node_name,
    member_name,
    member_status,
)
from dra_driver.kube.object_store import COMPUTE_DOMAIN_CLIQUE, COMPUTE_DOMAIN_MEMBER
from kubelet_plugin.imex_host import HostConfig, ImexHost
from kubelet_plugin.imex_host_runner import DomainPaths
from tests.fakes.imex_runner import FakeImexRunner
from tests.fakes.object_store import MemoryObjectStore

NS = "dra-gpu"
TRAIN = "3f6e6d2c-6a44-4a59-9c36-4b8d1c1a2b3c"
INFER = "9b1e4f7a-0c2d-4e5f-8a6b-7c8d9e0f1a2b"
CLIQUE = "00000000-0000-0000-0000-000000000001.0"
SHARED = isolation.shared_domain_uid(CLIQUE)
NODE, IP = "n1", "127.0.1.1"


class Env:
    def __init__(self, tmp_path: Path) -> None:
        self.store = MemoryObjectStore()
        self.runner = FakeImexRunner()
        self.now = 1000.0
        self.state_dir = tmp_path / "state"
        config = HostConfig(
            node_name=NODE, node_ip=IP, namespace=NS, state_dir=self.state_dir, isolation="channel"
        )
        self.host = ImexHost(self.store, self.runner, config, clock=lambda: self.now)

    def add_member(self, uid: str, name: str, *, mode: str = "channel") -> None:
        spec = MemberSpec(uid, "team-a", name, NODE, CLIQUE)
        obj = build_member(spec, namespace=NS, isolation_mode=mode)
        self.store.create_object(COMPUTE_DOMAIN_MEMBER, obj)

    def set_rows(self, rows: dict[str, tuple[str, int]]) -> None:
        obj = build_shared_clique(
            CLIQUE, [CliqueRow(n, ip, CLIQUE, i, "NotReady") for n, (ip, i) in rows.items()],
            namespace=NS,
        )  # fmt: skip
        try:
            current = self.store.get_object(COMPUTE_DOMAIN_CLIQUE, NS, obj["metadata"]["name"])
        except Exception:
            self.store.create_object(COMPUTE_DOMAIN_CLIQUE, obj)
        else:
            current["daemons"] = obj["daemons"]
            self.store.update_object(COMPUTE_DOMAIN_CLIQUE, current)

    def status(self, uid: str) -> Any:
        return member_status(
            self.store.get_object(COMPUTE_DOMAIN_MEMBER, NS, member_name(uid, NODE))
        )


def test_one_daemon_serves_every_domain_of_the_node_from_the_clique_wide_clique(
    tmp_path: Path,
) -> None:
    env = Env(tmp_path)
    env.add_member(TRAIN, "train")
    env.add_member(INFER, "infer")
    env.host.reconcile()
    for uid in (TRAIN, INFER):
        status = env.status(uid)
        assert (status.state, status.reason) == ("Pending", "WaitingForIndex")
        assert f"{SHARED}.{CLIQUE}" in status.message
    env.set_rows({NODE: ("", 0), "n2": ("127.0.1.2", 1)})
    env.runner.peer_states = {0: "C", 1: "C"}
    env.host.reconcile()
    assert env.runner.starts == [(SHARED, 0)]  # one daemon, for the clique
    paths = DomainPaths.of(env.state_dir, SHARED)
    assert paths.nodes.read_text() == render_nodes_config(SHARED)
    assert f"127.0.1.2\t{imex_node_name(SHARED, 1)}\n" in paths.hosts.read_text()
    for uid in (TRAIN, INFER):
        status = env.status(uid)
        assert (status.state, status.imex_node_id, dict(status.peers)) == ("Ready", 0, {"n2": "C"})
    # A peer joins: SIGUSR1, no restart.
    env.set_rows({NODE: (IP, 0), "n2": ("127.0.1.2", 1), "n3": ("127.0.1.3", 2)})
    env.host.reconcile()
    assert env.runner.starts == [(SHARED, 0)]
    assert len(env.runner.reloads) == 1
    # One domain leaves the node: the daemon keeps serving the other.
    env.store.delete_object(COMPUTE_DOMAIN_MEMBER, NS, member_name(INFER, NODE))
    env.host.reconcile()
    assert env.runner.stops == []
    assert env.status(TRAIN).state == "Ready"
    # The last one leaves: the daemon stops and its files go.
    env.store.delete_object(COMPUTE_DOMAIN_MEMBER, NS, member_name(TRAIN, NODE))
    env.host.reconcile()
    assert env.runner.stops == [SHARED]
    assert not paths.root.exists()


def test_a_member_of_a_domain_mode_plugin_is_failed_naming_both_modes(tmp_path: Path) -> None:
    env = Env(tmp_path)
    env.add_member(TRAIN, "train", mode="domain")
    env.host.reconcile()
    status = env.status(TRAIN)
    assert (status.state, status.reason) == ("Failed", "IsolationMismatch")
    assert "--imex-isolation domain" in status.message
    assert "--imex-isolation channel" in status.message
    assert env.runner.starts == []
