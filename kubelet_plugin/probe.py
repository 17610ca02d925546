"""The liveness and readiness probes: the standard gRPC health service on a TCP port.

`--healthcheck-port PORT` serves `grpc.health.v1.Health` (from
`grpcio-health-checking`), which the DaemonSet's `grpc` probes call. The port
listens from the plugin's first second, before the NVIDIA driver is found,
so that a plugin waiting for the GPU Operator's driver is seen alive instead
of being restarted into a crash loop. What a check answers depends on the
plugin's `Phase` and on its two sockets:

- service `liveness` (the liveness probe): SERVING while the plugin starts,
  waits for the driver or for an older instance, or stops; once it serves,
  SERVING only while both sockets answer as the kubelet calls them.
- service `""` or `readiness` (the readiness probe): SERVING only when the
  plugin serves, the kubelet has registered it (`NotifyRegistrationStatus`)
  and both sockets answer. A rolling upgrade (`maxSurge: 1`) stops the old
  pod only after the new one is ready, so "ready" must mean "the kubelet can
  use this instance".

"Sockets answer" is as in dra-example-driver's `health.go`: `GetInfo` on the
registration socket names this driver, and an empty `NodePrepareResources`
on the DRA socket succeeds. The socket paths are the ones the server bound
(computed by `kubelet_plugin.socket_names`, with the pod UID), never
re-derived here. Each check opens fresh connections: a kept-open channel
would go on working after its socket file was deleted, which the kubelet
could no longer reach. Other service names are NOT_FOUND.
"""

from __future__ import annotations

import enum
import logging
import socket
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from dra_driver.errors import ConfigError
from kubelet_plugin.gen.dra.v1 import api_pb2 as dra_v1
from kubelet_plugin.gen.dra.v1 import api_pb2_grpc as dra_v1_grpc
from kubelet_plugin.gen.pluginregistration.v1 import api_pb2 as registration_pb2
from kubelet_plugin.gen.pluginregistration.v1 import api_pb2_grpc as registration_grpc
from kubelet_plugin.registration import RegistrationStatus

log = logging.getLogger(__name__)

LIVENESS = "liveness"
READINESS_SERVICES = frozenset({"", "readiness"})
KNOWN_SERVICES = READINESS_SERVICES | {LIVENESS}
CALL_TIMEOUT_SECONDS = 5.0


class Phase(enum.Enum):
    """Where the plugin is in its life; decides what the probes may answer."""

    STARTING = "starting"
    WAITING_FOR_DRIVER = "waiting for the NVIDIA driver"
    WAITING_FOR_INSTANCE = "waiting for the plugin instance that holds the node"
    RECOVERING = "recovering prepared claims"
    SERVING = "serving"
    STOPPING = "stopping"


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


@dataclass(frozen=True, slots=True)
class _Serving:
    """What a serving plugin's probe checks: its sockets and the kubelet's verdict."""

    registration_socket: Path
    dra_socket: Path
    registration: Callable[[], RegistrationStatus | None]


class PluginProbe:
    """The plugin's phase, and the probe answers that follow from it. Thread-safe."""

    def __init__(self, driver_name: str) -> None:
        self.driver_name = driver_name
        self._lock = threading.Lock()
        self._phase = Phase.STARTING
        self._detail = ""
        self._serving: _Serving | None = None

    @property
    def phase(self) -> Phase:
        with self._lock:
            return self._phase

    def set_phase(self, phase: Phase, detail: str = "") -> None:
        """Move to `phase` (not SERVING: use `serving()`); `detail` says why, for the log."""
        with self._lock:
            self._phase, self._detail = phase, detail

    def serving(
        self,
        *,
        registration_socket: Path,
        dra_socket: Path,
        registration: Callable[[], RegistrationStatus | None],
    ) -> None:
        """The sockets serve: from now on the probes dial them."""
        with self._lock:
            self._serving = _Serving(registration_socket, dra_socket, registration)
            self._phase, self._detail = Phase.SERVING, ""

    def check(self, service: str) -> str | None:
        """None when `service` (`liveness`, `readiness` or "") is SERVING, else why not."""
        with self._lock:
            phase, detail, serving = self._phase, self._detail, self._serving
        if phase is not Phase.SERVING or serving is None:
            if service == LIVENESS:
                return None  # alive: starting, waiting or stopping is not a reason to restart
            return f"{phase.value}{': ' + detail if detail else ''}"
        if service != LIVENESS:
            status = serving.registration()
            if status is None:
                return "the kubelet has not registered the plugin yet"
            if not status.registered:
                return f"the kubelet rejected the registration: {status.error or 'no reason'}"
        return sockets_answer(self.driver_name, serving.registration_socket, serving.dra_socket)


class PluginHealthServicer(health_pb2_grpc.HealthServicer):  # type: ignore[misc]
    """`grpc.health.v1.Health/Check`, answered by `PluginProbe.check`."""

    def __init__(self, probe: PluginProbe) -> None:
        self._probe = probe
        self._lock = threading.Lock()
        self._last: dict[str, str | None] = {}  # service -> the last answer's problem

    def Check(
        self, request: health_pb2.HealthCheckRequest, context: grpc.ServicerContext
    ) -> health_pb2.HealthCheckResponse:
        if request.service not in KNOWN_SERVICES:
            context.abort(grpc.StatusCode.NOT_FOUND, f"unknown service {request.service!r}")
        problem = self._probe.check(request.service)
        self._log_change(request.service, problem)
        if problem is not None:
            return health_pb2.HealthCheckResponse(status=health_pb2.HealthCheckResponse.NOT_SERVING)
        return health_pb2.HealthCheckResponse(status=health_pb2.HealthCheckResponse.SERVING)

    def _log_change(self, service: str, problem: str | None) -> None:
        """Log an answer when it differs from the last one to that service (probes poll)."""
        with self._lock:
            changed = self._last.get(service, "") != problem
            self._last[service] = problem
        if changed:
            name = service or "readiness"
            if problem is None:
                log.info("health check %s: SERVING", name)
            else:
                log.info("health check %s: NOT_SERVING: %s", name, problem)


def _check_port_free(host: str, port: int) -> None:
    """Bind `host:port` as gRPC is about to (and let go): OSError if it is taken.

    gRPC's C core writes its own line to stderr for a failed bind, which a bad
    flag must not add to the one-line error, so a taken port is found here first.
    """
    if port == 0:
        return
    address = host.strip("[]")
    wildcard = address in ("", "::", "0.0.0.0")
    if wildcard:  # gRPC's wildcard listens on IPv6 and IPv4
        address = "::" if socket.has_dualstack_ipv6() else "0.0.0.0"
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as gRPC does
        if family == socket.AF_INET6 and wildcard:
            probe.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        probe.bind((address, port))


class HealthCheckServer:
    """Serves `PluginHealthServicer` on `HOST:PORT` until `stop()`.

    The port is bound when the object is made (ConfigError naming the flag if
    it cannot be), so a taken port stops the plugin before it does anything.
    """

    def __init__(self, servicer: PluginHealthServicer, port: int, host: str = "[::]") -> None:
        self._executor = ThreadPoolExecutor(max_workers=2, thread_name_prefix="healthcheck-grpc")
        # SO_REUSEPORT would let a second process share a taken port: a taken
        # port must be an error, as it is for the metrics port.
        self._server = grpc.server(self._executor, options=[("grpc.so_reuseport", 0)])
        health_pb2_grpc.add_HealthServicer_to_server(servicer, self._server)
        try:
            _check_port_free(host, port)
        except OSError as exc:
            self._executor.shutdown(wait=False)
            raise ConfigError(f"--healthcheck-port {port}: cannot listen: {exc}") from exc
        try:
            self.port = self._server.add_insecure_port(f"{host}:{port}")
        except RuntimeError as exc:
            self._executor.shutdown(wait=False)
            raise ConfigError(f"--healthcheck-port {port}: cannot listen: {exc}") from exc
        if not self.port:
            self._executor.shutdown(wait=False)
            raise ConfigError(f"--healthcheck-port {port}: cannot listen on {host}:{port}")

        self._started = False

    def start(self) -> None:
        self._server.start()
        self._started = True
        log.info("serving the gRPC health service on port %d", self.port)

    def stop(self) -> None:
        """Stop serving and free the port."""
        if not self._started:
            # gRPC frees a bound port only when a started server stops.
            self._server.start()
            self._started = True
        self._server.stop(0).wait()
        self._executor.shutdown(wait=False)
