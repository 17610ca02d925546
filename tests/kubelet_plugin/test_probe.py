"""The liveness and readiness probes, over the real gRPC health service.

What the kubelet's `grpc` probes must see: a plugin that starts or waits
for the driver is alive (liveness SERVING) but not ready; a serving plugin
is ready only once the kubelet registered it and while both sockets answer;
and the probe dials exactly the sockets the server bound, per-instance names
included.
"""

from __future__ import annotations

import logging
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from dra_driver.errors import ConfigError
from kubelet_plugin.metrics import PluginMetrics
from kubelet_plugin.probe import (
    HealthCheckServer,
    Phase,
    PluginHealthServicer,
    PluginProbe,
)
from kubelet_plugin.registration import RegistrationStatus
from kubelet_plugin.server import PluginServer
from tests.fakes import FakeDraService, KubeletClient

DRIVER = "gpu.nvidia.com"
POD = "7c0f3f4e-2b7a-4c1e-8d4b-5a1f00000001"
SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING
Ask = Callable[[str], int]


@pytest.fixture
def kubelet_root() -> Iterator[Path]:
    root = Path(tempfile.mkdtemp(prefix="kp-", dir="/tmp"))  # short socket paths
    yield root
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def probe() -> PluginProbe:
    return PluginProbe(DRIVER)


@pytest.fixture
def ask(probe: PluginProbe) -> Iterator[Ask]:
    """`ask(service)`: the status the health port answers for `service`."""
    server = HealthCheckServer(PluginHealthServicer(probe), 0, host="127.0.0.1")
    server.start()
    channel = grpc.insecure_channel(f"127.0.0.1:{server.port}")
    stub = health_pb2_grpc.HealthStub(channel)

    def ask(service: str) -> int:
        request = health_pb2.HealthCheckRequest(service=service)
        return int(stub.Check(request, timeout=10).status)

    yield ask
    channel.close()
    server.stop()


@pytest.mark.parametrize(
    "phase",
    [Phase.STARTING, Phase.WAITING_FOR_DRIVER, Phase.WAITING_FOR_INSTANCE, Phase.RECOVERING],
)
def test_a_plugin_not_serving_yet_is_alive_but_not_ready(
    probe: PluginProbe, ask: Ask, phase: Phase
) -> None:
    probe.set_phase(phase, "no libnvidia-ml.so.1 under /driver-root")
    assert ask("liveness") == SERVING
    assert ask("") == NOT_SERVING
    assert ask("readiness") == NOT_SERVING
    assert probe.check("") == f"{phase.value}: no libnvidia-ml.so.1 under /driver-root"


def test_a_serving_plugin_is_ready_once_registered_and_while_its_sockets_answer(
    probe: PluginProbe, ask: Ask, kubelet_root: Path
) -> None:
    with PluginServer(
        FakeDraService(), driver_name=DRIVER, kubelet_root=kubelet_root, pod_uid=POD
    ) as server:
        probe.serving(
            registration_socket=server.registration_socket,
            dra_socket=server.dra_socket,
            registration=lambda: server.registration_status,
        )
        assert ask("liveness") == SERVING
        assert ask("") == NOT_SERVING
        assert probe.check("") == "the kubelet has not registered the plugin yet"

        with KubeletClient(kubelet_root, DRIVER, timeout=10, pod_uid=POD) as kubelet:
            kubelet.register()
        assert ask("") == SERVING
        assert ask("readiness") == SERVING

        server.dra_socket.unlink()  # the kubelet can no longer reach this instance
        assert ask("") == NOT_SERVING
        assert ask("liveness") == NOT_SERVING


def test_a_rejected_registration_is_not_ready(probe: PluginProbe, kubelet_root: Path) -> None:
    with PluginServer(FakeDraService(), driver_name=DRIVER, kubelet_root=kubelet_root) as server:
        probe.serving(
            registration_socket=server.registration_socket,
            dra_socket=server.dra_socket,
            registration=lambda: server.registration_status,
        )
        with (
            KubeletClient(kubelet_root, DRIVER, timeout=10) as kubelet,
            pytest.raises(grpc.RpcError),
        ):
            kubelet.notify_registration(False, "version mismatch")
        assert probe.check("") == "the kubelet rejected the registration: version mismatch"
        assert probe.check("liveness") is None


def test_a_stopping_plugin_is_not_restarted_by_liveness(probe: PluginProbe, ask: Ask) -> None:
    probe.set_phase(Phase.STOPPING)
    assert ask("liveness") == SERVING
    assert ask("") == NOT_SERVING


def test_an_unknown_service_is_not_found(ask: Ask) -> None:
    with pytest.raises(grpc.RpcError) as failed:
        ask("dra")
    assert isinstance(failed.value, grpc.Call)
    assert failed.value.code() == grpc.StatusCode.NOT_FOUND


def test_a_taken_health_port_is_a_config_error(probe: PluginProbe) -> None:
    first = HealthCheckServer(PluginHealthServicer(probe), 0, host="127.0.0.1")
    try:
        with pytest.raises(ConfigError, match=f"--healthcheck-port {first.port}: cannot listen"):
            HealthCheckServer(PluginHealthServicer(probe), first.port, host="127.0.0.1")
    finally:
        first.stop()


def test_a_minute_of_probes_is_no_prepare_in_the_metrics_and_no_log_line(
    kubelet_root: Path, probe: PluginProbe, caplog: pytest.LogCaptureFixture
) -> None:
    metrics = PluginMetrics()
    server = PluginServer(
        FakeDraService(),
        driver_name=DRIVER,
        kubelet_root=kubelet_root,
        pod_uid=POD,
        metrics=metrics,
    )
    server.start()
    try:
        probe.serving(
            registration_socket=server.registration_socket,
            dra_socket=server.dra_socket,
            registration=lambda: RegistrationStatus(True),
        )
        caplog.set_level(logging.INFO)
        caplog.clear()  # the server's own start-up lines
        for _ in range(12):  # a minute of readiness probes (periodSeconds 5)
            assert probe.check("") is None
        for operation in ("prepare", "unprepare"):
            for result in ("success", "error"):
                labels = {"operation": operation, "result": result}
                assert not metrics.registry.get_sample_value("dra_gpu_requests_total", labels)
        assert [r.getMessage() for r in caplog.records if r.levelno >= logging.INFO] == []
    finally:
        server.stop(grace=0)
