"""The plugin's Prometheus metrics (`--metrics-address HOST:PORT`, path `/metrics`).

One `PluginMetrics` per plugin holds every metric in its own registry, so two
plugins in one process (tests) do not share counters. Components get the
object and record what they do; nothing here knows how they work.

- `dra_gpu_requests_total{operation,result}`: NodePrepare/NodeUnprepareResources
  calls; `error` when some claim failed.
- `dra_gpu_request_duration_seconds{operation}` (histogram), and
  `dra_gpu_requests_in_flight{operation}`.
- `dra_gpu_claims_total{operation,result}`: claims prepared / unprepared.
- `dra_gpu_prepared_claims`, `dra_gpu_prepared_devices`: from the checkpoint.
- `dra_gpu_mig_operations_total{operation,result}` and
  `dra_gpu_mig_operation_duration_seconds{operation}`: dynamic MIG create/destroy.
- `dra_gpu_mps_daemons`: MPS control daemons running, counted at each scrape.
- `dra_gpu_slice_publish_total{result}`: ResourceSlice syncs; `error` = failed.
- `dra_gpu_unhealthy_devices`: devices tainted unhealthy.
- `dra_gpu_claim_*{namespace,claim,pod,device}`: GPU use per claim and pod
  (`--usage-interval`), from `kubelet_plugin.usage_metrics` via `track_usage`.
- `dra_gpu_claim_status_writes_total{result}`: `status.devices` applies.
- `dra_gpu_kernel_module_loaded{module="nvidia-uvm"}`: 0 while nvidia-uvm is not
  loaded and could not be loaded (every Prepare fails), 1 once it is.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Final

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server
from prometheus_client.registry import Collector

from dra_driver.errors import ConfigError

log = logging.getLogger(__name__)

_NAMESPACE: Final = "dra_gpu"
# Prepare spans ~1 ms (a repeat) to tens of seconds (MIG creation on Ampere).
_REQUEST_BUCKETS: Final = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 45)
_MIG_BUCKETS: Final = (0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 20, 45)


class PluginMetrics:
    """Every metric of one plugin, in `registry`."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        r = self.registry
        self.requests = Counter(
            "requests",
            "DRA gRPC calls (NodePrepareResources, NodeUnprepareResources) by result",
            ["operation", "result"],
            namespace=_NAMESPACE,
            registry=r,
        )
        self.request_seconds = Histogram(
            "request_duration_seconds",
            "Latency of DRA gRPC calls",
            ["operation"],
            namespace=_NAMESPACE,
            buckets=_REQUEST_BUCKETS,
            registry=r,
        )
        self.in_flight = Gauge(
            "requests_in_flight",
            "DRA gRPC calls being served",
            ["operation"],
            namespace=_NAMESPACE,
            registry=r,
        )
        self.claims = Counter(
            "claims",
            "ResourceClaims prepared or unprepared, by result",
            ["operation", "result"],
            namespace=_NAMESPACE,
            registry=r,
        )
        self.prepared_claims = Gauge(
            "prepared_claims",
            "ResourceClaims prepared on this node",
            namespace=_NAMESPACE,
            registry=r,
        )
        self.prepared_devices = Gauge(
            "prepared_devices",
            "Devices of the ResourceClaims prepared on this node",
            namespace=_NAMESPACE,
            registry=r,
        )
        self.mig_operations = Counter(
            "mig_operations",
            "Dynamic MIG device creations and destructions, by result",
            ["operation", "result"],
            namespace=_NAMESPACE,
            registry=r,
        )
        self.mig_seconds = Histogram(
            "mig_operation_duration_seconds",
            "Latency of dynamic MIG device creation and destruction",
            ["operation"],
            namespace=_NAMESPACE,
            buckets=_MIG_BUCKETS,
            registry=r,
        )
        self.mps_daemons = Gauge(
            "mps_daemons",
            "MPS control daemons running",
            namespace=_NAMESPACE,
            registry=r,
        )
        self.publishes = Counter(
            "slice_publish",
            "ResourceSlice syncs with the API server, by result",
            ["result"],
            namespace=_NAMESPACE,
            registry=r,
        )
        self.status_writes = Counter(
            "claim_status_writes",
            "Server-side applies of ResourceClaim status.devices, by result",
            ["result"],
            namespace=_NAMESPACE,
            registry=r,
        )
        self.unhealthy_devices = Gauge(
            "unhealthy_devices",
            "Devices tainted unhealthy in the node's ResourceSlices",
            namespace=_NAMESPACE,
            registry=r,
        )
        self.kernel_module_loaded = Gauge(
            "kernel_module_loaded",
            "1 while the NVIDIA kernel module every Prepare needs is loaded, 0 while it is not "
            "and could not be loaded (kubelet_plugin.kernel_status)",
            ["module"],
            namespace=_NAMESPACE,
            registry=r,
        )

    def track_prepared(self, counts: Callable[[], tuple[int, int]]) -> None:
        """Read (claims, devices) from `counts` at every scrape."""
        self.prepared_claims.set_function(lambda: counts()[0])
        self.prepared_devices.set_function(lambda: counts()[1])

    def track_mps_daemons(self, running: Callable[[], int]) -> None:
        """Read the number of running MPS control daemons from `running` at every scrape."""
        self.mps_daemons.set_function(running)

    def track_usage(self, collector: Collector) -> None:
        """Serve the per-claim usage metrics of `collector` (`kubelet_plugin.usage_metrics`)."""
        self.registry.register(collector)

    @contextmanager
    def mig_operation(self, operation: str) -> Iterator[None]:
        """Count and time one MIG `create` or `destroy`; an exception counts as an error."""
        started = time.monotonic()
        try:
            yield
        except BaseException:
            self.mig_operations.labels(operation, "error").inc()
            raise
        finally:
            self.mig_seconds.labels(operation).observe(time.monotonic() - started)
        self.mig_operations.labels(operation, "success").inc()

    def serve(self, address: str) -> Callable[[], None]:
        """Serve `/metrics` on `HOST:PORT` in a daemon thread; returns a function that stops it."""
        host, port = parse_address(address)
        try:
            server, thread = start_http_server(port, addr=host, registry=self.registry)
        except OSError as exc:
            raise ConfigError(f"--metrics-address {address}: cannot listen: {exc}") from exc
        log.info("serving metrics on http://%s:%d/metrics", host, server.server_port)

        def stop() -> None:
            server.shutdown()
            server.server_close()
            thread.join(timeout=5)

        return stop


def parse_address(address: str) -> tuple[str, int]:
    """`HOST:PORT` (`[::1]:8080`, `:8080` = all interfaces) -> (host, port)."""
    host, sep, port_text = address.rpartition(":")
    if not sep or not port_text.isdigit() or not 0 <= int(port_text) <= 65535:
        raise ConfigError(f"address {address!r}: expected HOST:PORT with a port 0..65535")
    host = host.strip("[]") or "0.0.0.0"
    return host, int(port_text)
