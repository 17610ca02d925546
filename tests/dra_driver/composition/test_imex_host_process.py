"""`dra-gpu imex-host` as its own process on a simulated node, over a local cluster directory.

What an operator would notice (wall-clock bound 30 s): the command finds the
simulated driver root's `nvidia-imex`, turns the node's member Ready, and an
upgrade of the host (stop, start) leaves the same IMEX daemon running and
adopted; removing the member stops the daemon and removes its files.
"""

from __future__ import annotations

import os
import random
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from dra_driver.composition.imex_host_process import ImexHostProcess
from dra_driver.compute_domain.membership import (
    CliqueRow,
    MemberSpec,
    build_clique,
    build_member,
    member_name,
    member_status,
)
from dra_driver.kube.local_store import LocalCluster
from dra_driver.kube.object_store import COMPUTE_DOMAIN_CLIQUE, COMPUTE_DOMAIN_MEMBER
from kubelet_plugin.imex_host_runner import DomainPaths, ProcessImexRunner
from tests.fakes import wait_until

NS = "dra-gpu"
UID = "7e2d9c1b-4a3f-4b5e-8c6d-1f0e9d8c7b6a"
CLIQUE = "00000000-0000-0000-0000-000000000001.0"
BOUND_S = 30.0


@pytest.fixture
def host(tmp_path: Path) -> Iterator[ImexHostProcess]:
    rng = random.Random(os.getpid() ^ time.monotonic_ns())
    made = ImexHostProcess(
        node_name="n1",
        node_ip=f"127.0.{rng.randint(2, 200)}.{rng.randint(1, 254)}",
        cluster_dir=tmp_path / "cluster",
        namespace=NS,
        shape="gb200-node",
        sim_state=tmp_path / "n1.json",
        state_dir=tmp_path / "n1" / "imex",
        log_path=tmp_path / "n1" / "imex-host.log",
        poll_interval=0.1,
    )
    yield made
    made.stop()
    made.stop_imex()


def test_the_host_process_serves_the_member_and_an_upgrade_keeps_imex(
    host: ImexHostProcess, tmp_path: Path
) -> None:
    start = time.monotonic()
    cluster = LocalCluster(tmp_path / "cluster")
    spec = MemberSpec(UID, "team-a", "train", "n1", CLIQUE)
    cluster.create_object(COMPUTE_DOMAIN_MEMBER, build_member(spec, namespace=NS))
    rows = [CliqueRow("n1", "", CLIQUE, 0, "NotReady")]
    cluster.create_object(COMPUTE_DOMAIN_CLIQUE, build_clique(UID, CLIQUE, rows, namespace=NS))
    host.start()

    def state() -> str:
        obj = cluster.get_object(COMPUTE_DOMAIN_MEMBER, NS, member_name(UID, "n1"))
        return member_status(obj).state

    wait_until(
        lambda: state() == "Ready",
        "the member Ready",
        timeout=BOUND_S,
        details=lambda: host.log_path.read_text(errors="replace")[-3000:],
    )
    paths = DomainPaths.of(host.state_dir, UID)
    runner = ProcessImexRunner(Path("nvidia-imex"), Path("nvidia-imex-ctl"))
    daemon = runner.find(paths)
    assert daemon is not None

    assert host.stop() == 0  # an upgrade: the host goes, IMEX stays
    assert runner.find(paths) == daemon
    host.start()
    wait_until(
        lambda: "adopted nvidia-imex pid" in host.log_path.read_text(errors="replace"),
        "the new host adopting the daemon",
        timeout=BOUND_S,
    )
    assert runner.find(paths) == daemon
    assert state() == "Ready"

    cluster.delete_object(COMPUTE_DOMAIN_MEMBER, NS, member_name(UID, "n1"))
    wait_until(lambda: not paths.root.exists(), "the daemon stopped", timeout=BOUND_S)
    assert runner.find(paths) is None
    assert time.monotonic() - start < BOUND_S
