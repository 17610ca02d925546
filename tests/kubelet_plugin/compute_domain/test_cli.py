"""`dra-gpu compute-domain-kubelet-plugin` flags: the CLI contract and NVIDIA's env fallbacks."""

from __future__ import annotations

import pytest

from dra_driver.cli import build_parser


def test_the_defaults_are_the_contracts() -> None:
    args = build_parser().parse_args(
        ["compute-domain-kubelet-plugin", "--node-name=n1", "--nvml=sim:gb200-node"]
    )
    assert args.imex_mode == "driverManaged"
    assert args.imex_host_socket_path == "/etc/nvidia-imex/imex_ctrl.sock"
    assert args.gpu_clique_label is False
    assert (args.fabric_check_interval, args.prepare_wait) == (10.0, 45.0)
    assert args.healthcheck_port is None


def test_nvidias_environment_variables_are_the_fallbacks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NODE_NAME", "gb-7")
    monkeypatch.setenv("IMEX_MODE", "hostManaged")
    monkeypatch.setenv("IMEX_HOST_SOCKET_PATH", "/run/imex.sock")
    monkeypatch.setenv("GPU_CLIQUE_LABEL_ENABLED", "true")
    monkeypatch.setenv("NAMESPACE", "dra-gpu")
    args = build_parser().parse_args(["compute-domain-kubelet-plugin", "--nvml=real"])
    assert args.node_name == "gb-7"
    assert args.imex_mode == "hostManaged"
    assert args.imex_host_socket_path == "/run/imex.sock"
    assert args.gpu_clique_label is True
    assert args.namespace == "dra-gpu"


def test_an_unknown_imex_mode_is_refused() -> None:
    with pytest.raises(SystemExit) as exited:
        build_parser().parse_args(
            ["compute-domain-kubelet-plugin", "--node-name=n1", "--nvml=real", "--imex-mode=x"]
        )
    assert exited.value.code == 2
