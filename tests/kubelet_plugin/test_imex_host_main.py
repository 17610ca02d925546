"""`dra-gpu imex-host`: the flags the deploy manifests use, and waiting for the driver."""

from __future__ import annotations

import logging
import threading
from pathlib import Path

import pytest

from dra_driver import cli
from dra_driver.cli import build_parser, main
from dra_driver.errors import DriverRootError
from kubelet_plugin.imex_host import HostConfig
from kubelet_plugin.imex_host_main import HostOptions, run
from tests.fakes.object_store import MemoryObjectStore


def test_the_contract_flags_parse(tmp_path: Path) -> None:
    args = build_parser().parse_args(
        [
            "imex-host",
            "--node-name=n1",
            "--node-ip=10.0.0.7",
            f"--cluster=local:{tmp_path}",
            "--namespace=dra-gpu",
            "--nvml=sim:gb200-node",
            f"--nvidia-driver-root={tmp_path}/root",
            f"--state-dir={tmp_path}/imex",
            "--hosts-file=/etc/hosts",
            "--max-nodes-per-imex-domain=18",
        ]
    )
    assert (args.node_name, args.node_ip, args.namespace) == ("n1", "10.0.0.7", "dra-gpu")
    assert (args.state_dir, args.hosts_file) == (tmp_path / "imex", Path("/etc/hosts"))
    assert args.max_nodes_per_imex_domain == 18
    assert args.imex_host_socket_path == "/etc/nvidia-imex/imex_ctrl.sock"
    assert (args.poll_interval, args.ready_poll_interval) == (0.5, 10.0)


def test_node_ip_name_namespace_and_limit_come_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("NODE_NAME", "gb200-a")
    monkeypatch.setenv("NODE_IP", "10.1.2.3")
    monkeypatch.setenv("NAMESPACE", "nvidia-dra-driver-gpu")
    monkeypatch.setenv("MAX_NODES_PER_IMEX_DOMAIN", "8")
    monkeypatch.setenv("IMEX_HOST_SOCKET_PATH", "/run/imex.sock")
    args = build_parser().parse_args(["imex-host", "--nvml=real"])
    assert (args.node_name, args.node_ip, args.namespace) == (
        "gb200-a",
        "10.1.2.3",
        "nvidia-dra-driver-gpu",
    )
    assert args.imex_host_socket_path == "/run/imex.sock"
    assert cli._max_nodes_per_imex_domain(args) == 8


def test_without_a_node_address_it_says_so_in_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("NODE_IP", raising=False)
    with pytest.raises(SystemExit) as exited:
        main(["imex-host", "--node-name=n1", "--namespace=x", "--nvml=real"])
    assert exited.value.code == 2
    assert "--node-ip" in capsys.readouterr().err


def test_it_waits_for_the_driver_and_exits_cleanly_when_stopped(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    attempts = []
    stop = threading.Event()

    def no_driver() -> object:
        attempts.append(1)
        if len(attempts) == 3:
            stop.set()
        raise DriverRootError("no libnvidia-ml.so.1 in the driver root /run/nvidia/driver")

    options = HostOptions(
        open_hardware=no_driver,  # type: ignore[arg-type]
        open_store=MemoryObjectStore,
        host=HostConfig(node_name="n1", node_ip="10.0.0.7", namespace="x", state_dir=tmp_path),
        driver_retry_interval=0.01,
    )
    with caplog.at_level(logging.ERROR):
        assert run(options, stop) == 0
    assert len(attempts) == 3
    [record] = [r for r in caplog.records if "NVIDIA driver not ready" in r.getMessage()]
    assert "no IMEX daemon can run yet" in record.getMessage()
