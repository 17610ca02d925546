"""The liveness/readiness probe: the standard gRPC health service on a TCP port.

`--healthcheck-port PORT` serves `grpc.health.v1.Health` (from
`grpcio-health-checking`), which the DaemonSet's `grpc` probes call. As in
dra-example-driver's `health.go`, a check answers SERVING only when the
plugin's own sockets answer as the kubelet would call them: `GetInfo` on the
registration socket (naming this driver) and an empty `NodePrepareResources`
on the DRA socket. A socket removed from under the plugin, or a server that
stopped answering, makes the probe fail, and the kubelet restarts the pod.

Each check opens fresh connections: a kept-open channel would go on working
after its socket file was deleted, which the kubelet could no longer reach.
Service names "" and "liveness" are known; others are NOT_FOUND.
"""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from dra_driver.errors import ConfigError
from kubelet_plugin.gen.dra.v1 import api_pb2 as dra_v1
from kubelet_plugin.gen.dra.v1 import api_pb2_grpc as dra_v1_grpc
from kubelet_plugin.gen.pluginregistration.v1 import api_pb2 as registration_pb2
from kubelet_plugin.gen.pluginregistration.v1 import api_pb2_grpc as registration_grpc

log = logging.getLogger(__name__)

KNOWN_SERVICES = frozenset({"", "liveness"})
CALL_TIMEOUT_SECONDS = 5.0


def sockets_answer(driver_name: str, registration_socket: Path, dra_socket: Path) -> str | None:
    """None when both sockets answer as the kubelet expects, else what is wrong."""
    try:
        with grpc.insecure_channel(f"unix:{registration_socket}") as channel:
            info = registration_grpc.RegistrationStub(channel).GetInfo(
                registration_pb2.InfoRequest(), timeout=CALL_TIMEOUT_SECONDS
            )
        if info.name != driver_name:
            return f"{registration_socket}: GetInfo names {info.name!r}, not {driver_name!r}"
        with grpc.insecure_channel(f"unix:{dra_socket}") as channel:
            dra_v1_grpc.DRAPluginStub(channel).NodePrepareResources(
                dra_v1.NodePrepareResourcesRequest(), timeout=CALL_TIMEOUT_SECONDS
            )
    except grpc.RpcError as exc:
        if isinstance(exc, grpc.Call):
            return f"{exc.code().name}: {exc.details()}"
        return str(exc)
    return None


class PluginHealthServicer(health_pb2_grpc.HealthServicer):  # type: ignore[misc]
    """`grpc.health.v1.Health/Check` answered by calling the plugin's own sockets."""

    def __init__(self, driver_name: str, registration_socket: Path, dra_socket: Path) -> None:
        self._driver_name = driver_name
        self._registration_socket = registration_socket
        self._dra_socket = dra_socket

    def Check(
        self, request: health_pb2.HealthCheckRequest, context: grpc.ServicerContext
    ) -> health_pb2.HealthCheckResponse:
        if request.service not in KNOWN_SERVICES:
            context.abort(grpc.StatusCode.NOT_FOUND, f"unknown service {request.service!r}")
        problem = sockets_answer(self._driver_name, self._registration_socket, self._dra_socket)
        if problem is not None:
            log.warning("health check: NOT_SERVING: %s", problem)
            return health_pb2.HealthCheckResponse(status=health_pb2.HealthCheckResponse.NOT_SERVING)
        return health_pb2.HealthCheckResponse(status=health_pb2.HealthCheckResponse.SERVING)


class HealthCheckServer:
    """Serves `PluginHealthServicer` on `HOST:PORT` until `stop()`."""

    def __init__(self, servicer: PluginHealthServicer, port: int, host: str = "[::]") -> None:
        self._executor = ThreadPoolExecutor(max_workers=2, thread_name_prefix="healthcheck-grpc")
        self._server = grpc.server(self._executor)
        health_pb2_grpc.add_HealthServicer_to_server(servicer, self._server)
        try:
            self.port = self._server.add_insecure_port(f"{host}:{port}")
        except RuntimeError as exc:
            raise ConfigError(f"--healthcheck-port {port}: cannot listen: {exc}") from exc
        if not self.port:
            raise ConfigError(f"--healthcheck-port {port}: cannot listen on {host}:{port}")

    def start(self) -> None:
        self._server.start()
        log.info("serving the gRPC health service on port %d", self.port)

    def stop(self) -> None:
        self._server.stop(0).wait()
        self._executor.shutdown(wait=False)
