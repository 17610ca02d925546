"""The kubelet's device-health stream: `DRAResourceHealth/NodeWatchResources`, v1 and v1alpha1.

The kubelet (gate `ResourceHealthStatus`, KEP-4680) opens this server stream
on the DRA socket and shows each device's health in the status of the pods
that use it (`allocatedResourcesStatus`). Kubelet 1.37 opens it only for a
service the registration lists and prefers `v1.DRAResourceHealth`; older
kubelets always call `v1alpha1.DRAResourceHealth`. The two protos differ only
in their package, so one servicer answers both (`add_to_server`). Every response lists all of the
driver's devices, as the kubelet expects: UNHEALTHY with the fault's message
when the device's GPU is faulty, HEALTHY when its GPU is watched and fine,
UNKNOWN when its GPU's events cannot be watched. A response goes out when the
stream opens, whenever the health changes, and at least every
`HEARTBEAT_SECONDS`, so the kubelet never times a device out
(`health_check_timeout_seconds`).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import grpc

from dra_driver.node.devices import AllocatableDevice
from dra_driver.node.health import Fault
from kubelet_plugin.gen.dra_health.v1 import api_pb2 as health_v1_pb2
from kubelet_plugin.gen.dra_health.v1 import api_pb2_grpc as health_v1_grpc
from kubelet_plugin.gen.dra_health.v1alpha1 import api_pb2 as health_pb2
from kubelet_plugin.gen.dra_health.v1alpha1 import api_pb2_grpc as health_grpc
from kubelet_plugin.health_monitor import HealthMonitor

SERVICE_NAME = "v1alpha1.DRAResourceHealth"
V1_SERVICE_NAME = "v1.DRAResourceHealth"
SERVICE_NAMES = (V1_SERVICE_NAME, SERVICE_NAME)
"""What the plugin advertises in `supported_versions` when it serves the streams."""

HEARTBEAT_SECONDS = 10.0
HEALTH_CHECK_TIMEOUT_SECONDS = 30
"""After this long without an update the kubelet reports a device as Unknown."""

MAX_MESSAGE_CHARS = 1024
_POLL_SECONDS = 0.5  # how often an idle stream checks that it is still wanted


def health_response(
    pool_name: str,
    devices: Sequence[AllocatableDevice],
    faults: Mapping[str, Fault],
    monitored: frozenset[str],
    now: int,
    *,
    api: Any = health_pb2,
) -> Any:
    """One complete answer: the health of every device, in messages of `api` (either
    version's `api_pb2`; v1alpha1 by default)."""
    response = api.NodeWatchResourcesResponse()
    for device in devices:
        fault = faults.get(device.gpu.uuid)
        if fault is not None:
            health, message = api.UNHEALTHY, fault.message
        elif device.gpu.uuid in monitored:
            health, message = api.HEALTHY, ""
        else:
            health, message = (
                api.UNKNOWN,
                f"the events of GPU {device.gpu.uuid} are not watched",
            )
        response.devices.append(
            api.DeviceHealth(
                device=api.DeviceIdentifier(pool_name=pool_name, device_name=device.name),
                health=health,
                last_updated_time=now,
                health_check_timeout_seconds=HEALTH_CHECK_TIMEOUT_SECONDS,
                message=message[:MAX_MESSAGE_CHARS],
            )
        )
    return response


class DeviceHealthServicer(health_grpc.DRAResourceHealthServicer):
    """Serves the health of `devices()` as `monitor` sees it."""

    def __init__(
        self,
        monitor: HealthMonitor,
        *,
        pool_name: str,
        devices: Callable[[], Sequence[AllocatableDevice]],
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._monitor = monitor
        self._pool_name = pool_name
        self._devices = devices
        self._clock = clock
        self._closed = threading.Event()

    def close(self) -> None:
        """End every open stream (within `_POLL_SECONDS`), before the server stops."""
        self._closed.set()

    def add_to_server(self, server: grpc.Server) -> None:
        """Serve the stream as both `v1.DRAResourceHealth` and `v1alpha1.DRAResourceHealth`."""
        health_grpc.add_DRAResourceHealthServicer_to_server(self, server)
        health_v1_grpc.add_DRAResourceHealthServicer_to_server(_V1Servicer(self), server)

    def NodeWatchResources(
        self,
        _request: health_pb2.NodeWatchResourcesRequest,
        context: grpc.ServicerContext,
    ) -> Iterator[health_pb2.NodeWatchResourcesResponse]:
        yield from self.stream(context, health_pb2)

    def stream(self, context: grpc.ServicerContext, api: Any) -> Iterator[Any]:
        """The responses of one stream, in messages of `api`."""
        while context.is_active() and not self._closed.is_set():
            version, faults, monitored = self._monitor.snapshot()
            yield health_response(
                self._pool_name, self._devices(), faults, monitored, int(self._clock()), api=api
            )
            deadline = time.monotonic() + HEARTBEAT_SECONDS
            while context.is_active() and not self._closed.is_set():
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                if self._monitor.wait_for_change(version, min(remaining, _POLL_SECONDS)) != version:
                    break


class _V1Servicer(health_v1_grpc.DRAResourceHealthServicer):
    """`v1.DRAResourceHealth` (kubelet 1.37), answered by the same stream."""

    def __init__(self, core: DeviceHealthServicer) -> None:
        self._core = core

    def NodeWatchResources(
        self,
        _request: health_v1_pb2.NodeWatchResourcesRequest,
        context: grpc.ServicerContext,
    ) -> Iterator[health_v1_pb2.NodeWatchResourcesResponse]:
        yield from self._core.stream(context, health_v1_pb2)
