"""`dra-gpu compute-domain-controller`: the store, the elector, the loop and a health port.

Wiring only (flags are parsed in `dra_driver.cli`): open the cluster as an
`ObjectStore`, run the loop (`controller.compute_domain.loop`) in a thread,
and, with `--leader-elect`, hold the Lease in this one (the loop writes only
while it is held). Losing the Lease ends the process with status 1, as
client-go controllers do, so the kubelet restarts it with fresh state; SIGTERM
ends it with status 0 after releasing the Lease. `--healthcheck-port` serves
`/healthz` (the loop thread is alive) and `/metrics` (Prometheus: writes,
conflicts, errors, Events, leadership).
"""

from __future__ import annotations

import json
import logging
import signal
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Final, cast

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from controller.compute_domain.leader import LeaderConfig, LeaderElector, default_identity
from controller.compute_domain.loop import ComputeDomainController, ControllerStats, LoopOptions
from controller.compute_domain.reconcile import Options
from dra_driver.compute_domain import isolation
from dra_driver.errors import ConfigError
from dra_driver.kube.access import open_cluster
from dra_driver.kube.object_store import ObjectStore

__all__ = [
    "DRIVER_MANAGED",
    "HOST_MANAGED",
    "ControllerCommand",
    "open_store",
    "run",
]

log = logging.getLogger(__name__)

DRIVER_MANAGED: Final = "driverManaged"
HOST_MANAGED: Final = "hostManaged"
IMEX_MODES: Final = (DRIVER_MANAGED, HOST_MANAGED)


@dataclass(frozen=True, slots=True)
class ControllerCommand:
    cluster: str
    namespace: str
    max_nodes: int = 18
    imex_mode: str = DRIVER_MANAGED
    imex_isolation: str = isolation.DOMAIN
    leader_elect: bool = False
    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0
    healthcheck_port: int | None = None
    kubeconfig: str | None = None
    identity: str | None = None

    def check(self) -> None:
        if self.imex_mode not in IMEX_MODES:
            raise ConfigError(
                f"--imex-mode {self.imex_mode!r}: expected one of {', '.join(IMEX_MODES)}"
            )
        isolation.check_isolation(self.imex_isolation, host_managed=self.imex_mode == HOST_MANAGED)
        if self.max_nodes < 1:
            raise ConfigError(f"--max-nodes-per-imex-domain {self.max_nodes}: must be at least 1")
        if not self.namespace:
            raise ConfigError("--namespace: required (env NAMESPACE): the driver's namespace")


def open_store(spec: str, *, kubeconfig: str | None = None) -> ObjectStore:
    """The `--cluster` store, as the `ObjectStore` the controller needs."""
    cluster = open_cluster(spec, kubeconfig=kubeconfig)
    needed = ("get_object", "list_objects", "create_object", "update_object", "watch_objects")
    missing = [name for name in needed if not callable(getattr(cluster, name, None))]
    if missing:
        raise ConfigError(
            f"--cluster {spec}: this store does not serve ComputeDomain objects "
            f"(no {', '.join(missing)})"
        )
    return cast(ObjectStore, cluster)


def run(
    command: ControllerCommand,
    *,
    store: ObjectStore | None = None,
    stop: threading.Event | None = None,
) -> int:
    """Run until SIGTERM/SIGINT (or `stop`); 1 when the Lease was lost."""
    command.check()
    if store is None:
        store = open_store(command.cluster, kubeconfig=command.kubeconfig)
    stop = stop if stop is not None else threading.Event()
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: stop.set())
    identity = command.identity or default_identity()
    elector = None
    if command.leader_elect:
        elector = LeaderElector(
            store,
            LeaderConfig(
                namespace=command.namespace,
                identity=identity,
                lease_duration=command.lease_duration,
                renew_deadline=command.renew_deadline,
                retry_period=command.retry_period,
            ),
        )
    stats = ControllerStats()
    controller = ComputeDomainController(
        store,
        LoopOptions(
            Options(
                namespace=command.namespace,
                max_nodes=command.max_nodes,
                host_managed=command.imex_mode == HOST_MANAGED,
                isolation=command.imex_isolation,
            ),
            debounce=0.1,
            identity=identity,
        ),
        is_leader=elector.is_leader if elector is not None else (lambda: True),
        stats=stats,
    )
    loop = threading.Thread(target=controller.run, args=(stop,), name="compute-domain-loop")
    health = (
        _serve_health(command.healthcheck_port, loop, stats)
        if command.healthcheck_port is not None
        else None
    )
    log.info(
        "compute-domain-controller %s: namespace %s, imex mode %s, isolation %s, at most %d "
        "nodes per IMEX domain%s",
        identity,
        command.namespace,
        command.imex_mode,
        command.imex_isolation,
        command.max_nodes,
        ", leader election on" if elector else "",
    )
    loop.start()
    code = 0
    try:
        if elector is not None:
            if not elector.run(stop, on_started=controller.poke):
                code = 1
        else:
            stop.wait()
    finally:
        stop.set()
        loop.join()
        if health is not None:
            health.shutdown()
            health.server_close()
        # One line a benchmark or an admin can read: what this replica wrote, and its 409s.
        log.info("compute-domain-controller %s stopped: %s", identity, json.dumps(stats.snapshot()))
    return code


def _serve_health(port: int, loop: threading.Thread, stats: ControllerStats) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path == "/healthz":
                ok = loop.is_alive()
                body = b"ok\n" if ok else b"the controller loop is not running\n"
                self._reply(200 if ok else 503, body, "text/plain")
            elif self.path == "/metrics":
                self._reply(200, generate_latest(stats.registry), CONTENT_TYPE_LATEST)
            else:
                self._reply(404, b"not found\n", "text/plain")

        def _reply(self, code: int, body: bytes, content_type: str) -> None:
            self.send_response(code)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_args: object) -> None:
            return  # probes every few seconds: not worth a log line each

    try:
        server = ThreadingHTTPServer(("", port), Handler)
    except OSError as exc:
        raise ConfigError(f"--healthcheck-port {port}: {exc.strerror or exc}") from exc
    threading.Thread(target=server.serve_forever, name="health", daemon=True).start()
    return server
