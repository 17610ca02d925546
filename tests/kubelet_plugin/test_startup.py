"""Flags first, all or nothing: a plugin that cannot start says why in one line and
leaves nothing behind.

Each bad flag or path is refused before the plugin listens, binds or
publishes: exit status 2, one line on stderr naming the flag, no traceback,
no ResourceSlice, no socket, and the ports free again. A start that fails
after its first publish withdraws the slices it published.
"""

from __future__ import annotations

import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from dra_driver.cli import main
from dra_driver.composition.hardware import open_hardware
from dra_driver.errors import ClusterError
from dra_driver.kube.local_store import LocalCluster
from kubelet_plugin import main as plugin_main
from kubelet_plugin.main import PluginOptions
from kubelet_plugin.socket_names import dra_socket_path, registration_socket_path
from tests.fakes import wait_until

POD = "5f0e1d2c-3b4a-4958-8776-000000000001"


@pytest.fixture
def work() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="dra-gpu-start-", dir="/tmp"))  # short socket paths
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(autouse=True)
def _signal_handlers() -> Iterator[None]:
    """The plugin installs SIGTERM/SIGINT handlers when it gets that far: put them back."""
    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    yield
    for sig, handler in saved.items():
        signal.signal(sig, handler)


@pytest.fixture(autouse=True)
def _flags_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """Only the flags count: no NODE_NAME or POD_UID from the test's environment."""
    monkeypatch.delenv("NODE_NAME", raising=False)
    monkeypatch.delenv("POD_UID", raising=False)


@pytest.fixture
def taken_port() -> Iterator[int]:
    """A TCP port some other process listens on (all interfaces, IPv6 too where there is)."""
    dual_stack = socket.has_dualstack_ipv6()
    family = socket.AF_INET6 if dual_stack else socket.AF_INET
    with socket.create_server(("", 0), family=family, dualstack_ipv6=dual_stack) as blocker:
        yield blocker.getsockname()[1]


def _args(work: Path, **overrides: str | None) -> list[str]:
    flags: dict[str, str | None] = {
        "node-name": "gpu-node-1",
        "nvml": "sim:l4-node",
        "sim-state": str(work / "sim-state.json"),
        "cluster": f"local:{work / 'cluster'}",
        "kubelet-root": str(work / "kubelet"),
        "cdi-root": str(work / "cdi"),
    }
    flags.update({name.replace("_", "-"): value for name, value in overrides.items()})
    return ["kubelet-plugin", *(f"--{k}={v}" for k, v in flags.items() if v is not None)]


def _a_file(work: Path) -> str:
    path = work / "a-file"
    path.write_text("not a directory\n")
    return str(path)


def _with_a_directory_at(path: Path, args: list[str]) -> list[str]:
    path.mkdir(parents=True)
    (path / "keep").write_text("someone's data\n")
    return args


# (id, how to break the start, expected words in the one line)
Breaker = Callable[[Path, int], list[str]]
BAD_STARTS: list[tuple[str, Breaker, str]] = [
    ("metrics-address-no-host", lambda w, _: _args(w, metrics_address="8080"), "HOST:PORT"),
    (
        "metrics-address-bad-port",
        lambda w, _: _args(w, metrics_address=":99999"),
        "--metrics-address",
    ),
    ("metrics-port-taken", lambda w, p: _args(w, metrics_address=f":{p}"), "cannot listen"),
    ("healthcheck-port-not-a-number", lambda w, _: _args(w, healthcheck_port="abc"), "abc"),
    (
        "healthcheck-port-out-of-range",
        lambda w, _: _args(w, healthcheck_port="70000"),
        "--healthcheck-port 70000",
    ),
    (
        "healthcheck-port-taken",
        lambda w, p: _args(w, healthcheck_port=str(p)),
        "--healthcheck-port",
    ),
    ("kubelet-root-is-a-file", lambda w, _: _args(w, kubelet_root=_a_file(w)), "--kubelet-root"),
    (
        "kubelet-root-too-long",
        lambda w, _: _args(w, kubelet_root=str(w / ("k" * 90))),
        "bytes; Unix sockets allow at most 107",
    ),
    (
        # The helper's rule keeps the full UID at exactly 108 bytes, which gRPC cannot bind.
        "registration-socket-108-bytes-with-pod-uid",
        lambda w, _: _args(
            w, kubelet_root=str(w / ("k" * (39 - len(str(w))))), pod_uid=POD, driver_name="g.io"
        ),
        "the registration socket path",
    ),
    ("cdi-root-is-a-file", lambda w, _: _args(w, cdi_root=_a_file(w)), "--cdi-root"),
    (
        "sim-state-in-a-file",
        lambda w, _: _args(w, sim_state=f"{_a_file(w)}/state.json"),
        "--sim-state",
    ),
    ("node-name-invalid", lambda w, _: _args(w, node_name="Bad_Node"), "--node-name 'Bad_Node'"),
    ("node-name-missing", lambda w, _: _args(w, node_name=None), "--node-name"),
    ("driver-name-invalid", lambda w, _: _args(w, driver_name="GPU!"), "--driver-name"),
    ("pod-uid-with-a-slash", lambda w, _: _args(w, pod_uid="../x"), "--pod-uid"),
    ("nvml-unknown", lambda w, _: _args(w, nvml="gpu"), "--nvml 'gpu'"),
    ("nvml-unknown-shape", lambda w, _: _args(w, nvml="sim:no-such-node"), "no-such-node"),
    ("cluster-unknown", lambda w, _: _args(w, cluster="etcd"), "--cluster 'etcd'"),
    (
        "kubeconfig-missing",
        lambda w, _: _args(w, cluster="kube", kubeconfig=str(w / "nope")),
        "--kubeconfig",
    ),
    ("publish-interval-zero", lambda w, _: _args(w, publish_interval="0"), "--publish-interval"),
    (
        "consumable-shares-bad",
        lambda w, _: _args(w, consumable_shares="lots"),
        "lots",
    ),
    (
        "xids-bad",
        lambda w, _: _args(w, additional_xids_to_ignore="13,x"),
        "'x' is not an Xid number",
    ),
    (
        "driver-root-relative",
        lambda w, _: _args(w, nvidia_driver_root="run/nvidia/driver"),
        "must be absolute",
    ),
    (
        "container-driver-root-is-a-file",
        lambda w, _: _args(w, container_driver_root=_a_file(w)),
        "not a directory",
    ),
    (
        "directory-at-the-dra-socket",
        lambda w, _: _with_a_directory_at(
            dra_socket_path(w / "kubelet", "gpu.nvidia.com"), _args(w)
        ),
        "is a directory",
    ),
    (
        "directory-at-the-registration-socket",
        lambda w, _: _with_a_directory_at(
            registration_socket_path(w / "kubelet", "gpu.nvidia.com", POD), _args(w, pod_uid=POD)
        ),
        "is a directory",
    ),
]


@pytest.mark.parametrize(
    ("breaker", "words"), [(b, w) for _, b, w in BAD_STARTS], ids=[i for i, _, _ in BAD_STARTS]
)
def test_a_bad_start_is_one_line_exit_2_and_leaves_nothing(
    work: Path,
    taken_port: int,
    breaker: Breaker,
    words: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = breaker(work, taken_port)
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse's own checks
        code = exc.code  # type: ignore[assignment]
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.count("\n") == 1, err
    assert err.startswith("dra-gpu kubelet-plugin: "), err
    assert "Traceback" not in err
    assert words in err
    assert LocalCluster(work / "cluster").list_resource_slices() == []
    assert not [p for p in work.rglob("*") if p.is_socket()]


def test_a_taken_metrics_port_closes_the_health_port_it_had_opened(
    work: Path, taken_port: int, capsys: pytest.CaptureFixture[str]
) -> None:
    with socket.create_server(("", 0)) as probe:
        free = probe.getsockname()[1]
    argv = _args(work, healthcheck_port=str(free), metrics_address=f":{taken_port}")
    assert main(argv) == 2
    assert "--metrics-address" in capsys.readouterr().err
    with socket.create_server(("", free)):  # free again
        pass


def test_the_issue_example_from_a_shell(work: Path) -> None:
    """`--metrics-address 8080` from the real command line: one line, exit 2, no slices."""
    done = subprocess.run(
        [sys.executable, "-m", "dra_driver.cli", *_args(work), "--metrics-address", "8080"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        "dra-gpu kubelet-plugin: --metrics-address address '8080': expected HOST:PORT "
        "with a port 0..65535"
    ]
    assert LocalCluster(work / "cluster").list_resource_slices() == []


@pytest.mark.parametrize("flag", ["--healthcheck-port", "--metrics-address"])
def test_a_taken_port_from_a_shell_is_exactly_one_line(
    work: Path, taken_port: int, flag: str
) -> None:
    """No line of gRPC's own (its C core logs a failed bind to stderr by itself)."""
    value = str(taken_port) if flag == "--healthcheck-port" else f":{taken_port}"
    done = subprocess.run(
        [sys.executable, "-m", "dra_driver.cli", *_args(work), flag, value],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        f"dra-gpu kubelet-plugin: {flag} {value}: cannot listen: [Errno 98] Address already in use"
    ]


def _options(work: Path, **overrides: Any) -> PluginOptions:
    """An in-process plugin on a simulated L4 node under `work`, health checks off."""
    return PluginOptions(
        node_name="gpu-node-1",
        open_hardware=lambda: open_hardware(
            "sim:l4-node", sim_state=work / "sim-state.json", node_name="gpu-node-1"
        ),
        cluster=f"local:{work / 'cluster'}",
        kubelet_root=work / "kubelet",
        cdi_root=work / "cdi",
        driver_name="gpu.nvidia.com",
        health_checks=False,
        **overrides,
    )


def test_a_start_that_fails_after_publishing_withdraws_its_slices(
    work: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first publish is out, then a thread cannot start (the process ran out of them):
    the slices go, the sockets go, and the error reaches the caller."""
    real_start = threading.Thread.start
    published: list[int] = []

    def start(thread: threading.Thread) -> None:
        if thread.name == "slice-watch":
            published.append(len(LocalCluster(work / "cluster").list_resource_slices()))
            raise RuntimeError("can't start new thread")
        real_start(thread)

    monkeypatch.setattr(threading.Thread, "start", start)
    options = _options(work)
    with pytest.raises(RuntimeError, match="can't start new thread"):
        plugin_main.run(options, threading.Event())
    assert published
    assert published[0] > 0  # it had published
    assert LocalCluster(work / "cluster").list_resource_slices() == []
    assert not [p for p in work.rglob("*") if p.is_socket()]


def test_a_plugin_restarted_while_the_api_server_is_down_still_serves(
    work: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A restart (an OOM kill, an upgrade) during a control-plane outage: the plugin cannot
    ask the API server's version, and serves anyway (the kubelet's Unprepare needs no API)."""

    def unreachable(_self: LocalCluster) -> tuple[int, int] | None:
        raise ClusterError("apiserver version: get failed: connection refused")

    monkeypatch.setattr(LocalCluster, "server_version", unreachable)
    options = _options(work, usage_interval=0)
    stop = threading.Event()
    outcome: list[object] = []
    runner = threading.Thread(target=lambda: outcome.append(plugin_main.run(options, stop)))
    runner.start()
    try:
        wait_until(
            lambda: registration_socket_path(work / "kubelet", "gpu.nvidia.com").is_socket(),
            "the registration socket",
            details=lambda: f"run() returned {outcome}",
        )
    finally:
        stop.set()
        runner.join(30)
    assert outcome == [0]
    assert "cannot ask the API server for its version" in caplog.text
