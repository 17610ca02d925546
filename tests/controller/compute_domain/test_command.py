"""`dra-gpu compute-domain-controller`: its flags (NVIDIA's env fallbacks), and the whole
command on a store: leader election, the health and metrics port, a clean stop."""

from __future__ import annotations

import socket
import threading
import urllib.request
from pathlib import Path

import pytest

from controller.compute_domain.leader import DEFAULT_LEASE_NAME
from controller.compute_domain.main import ControllerCommand, run
from dra_driver.cli import build_parser, main
from dra_driver.kube.object_store import LEASE, RESOURCE_CLAIM_TEMPLATE
from tests.controller.compute_domain.objects import DRIVER_NS, add_domain
from tests.fakes.object_store import MemoryObjectStore
from tests.fakes.waiting import wait_until


def test_flags_default_to_nvidias_and_fall_back_to_its_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in ("NAMESPACE", "IMEX_MODE", "MAX_NODES_PER_IMEX_DOMAIN"):
        monkeypatch.delenv(name, raising=False)
    args = build_parser().parse_args(["compute-domain-controller", "--namespace", "dra"])
    assert (args.cluster, args.namespace, args.imex_mode) == ("kube", "dra", "driverManaged")
    assert args.max_nodes_per_imex_domain is None  # 18 unless MAX_NODES_PER_IMEX_DOMAIN
    assert (args.leader_elect, args.leader_elect_lease_duration) == (False, 15.0)
    assert (args.leader_elect_renew_deadline, args.leader_elect_retry_period) == (10.0, 2.0)
    monkeypatch.setenv("NAMESPACE", "nvidia-dra")
    monkeypatch.setenv("IMEX_MODE", "hostManaged")
    args = build_parser().parse_args(["compute-domain-controller", "--leader-elect"])
    assert (args.namespace, args.imex_mode, args.leader_elect) == (
        "nvidia-dra",
        "hostManaged",
        True,
    )


def test_a_missing_namespace_is_refused_in_one_line(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("NAMESPACE", raising=False)
    code = main(["compute-domain-controller", "--cluster", f"local:{tmp_path}"])
    assert code == 2
    assert "--namespace: required (env NAMESPACE)" in capsys.readouterr().err


def test_a_bad_max_nodes_in_the_environment_is_refused(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("MAX_NODES_PER_IMEX_DOMAIN", "eighteen")
    code = main(["compute-domain-controller", "--cluster", f"local:{tmp_path}", "--namespace=d"])
    assert code == 2
    assert "env MAX_NODES_PER_IMEX_DOMAIN='eighteen': expected an integer" in (
        capsys.readouterr().err
    )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_the_command_leads_reconciles_serves_health_and_metrics_and_releases_on_stop() -> None:
    store = MemoryObjectStore()
    port = _free_port()
    stop = threading.Event()
    result: list[int] = []
    command = ControllerCommand(
        cluster="local:unused",
        namespace=DRIVER_NS,
        leader_elect=True,
        lease_duration=1.0,
        renew_deadline=0.6,
        retry_period=0.1,
        healthcheck_port=port,
        identity="replica-1",
    )
    thread = threading.Thread(target=lambda: result.append(run(command, store=store, stop=stop)))
    thread.start()
    try:
        add_domain(store)
        wait_until(lambda: bool(store.list_objects(RESOURCE_CLAIM_TEMPLATE)), "the template")
        lease = store.get_object(LEASE, DRIVER_NS, DEFAULT_LEASE_NAME)
        assert lease["spec"]["holderIdentity"] == "replica-1"
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as reply:
            assert reply.status == 200
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as reply:
            metrics = reply.read().decode()
        assert (
            'dra_gpu_compute_domain_controller_writes_total{kind="ResourceClaimTemplate",'
            'verb="create"} 1.0'
        ) in metrics
        assert "dra_gpu_compute_domain_controller_leader 1.0" in metrics
    finally:
        stop.set()
        thread.join(timeout=10)
    assert result == [0]
    assert store.get_object(LEASE, DRIVER_NS, DEFAULT_LEASE_NAME)["spec"]["holderIdentity"] == ""
