"""The kubelet's device-health stream: `v1alpha1.DRAResourceHealth/NodeWatchResources`.

The kubelet (gate `ResourceHealthStatus`, KEP-4680) opens this server stream
on the DRA socket and shows each device's health in the status of the pods
that use it (`allocatedResourcesStatus`). Every response lists all of the
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

import grpc

from dra_driver.node.devices import AllocatableDevice
from dra_driver.node.health import Fault
from kubelet_plugin.gen.dra_health.v1alpha1 import api_pb2 as health_pb2
from kubelet_plugin.gen.dra_health.v1alpha1 import api_pb2_grpc as health_grpc
from kubelet_plugin.health_monitor import HealthMonitor

SERVICE_NAME = "v1alpha1.DRAResourceHealth"
"""What the plugin advertises in `supported_versions` when it serves the stream."""

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
) -> health_pb2.NodeWatchResourcesResponse:
    """One complete answer: the health of every device."""
    response = health_pb2.NodeWatchResourcesResponse()
    for device in devices:
        fault = faults.get(device.gpu.uuid)
        if fault is not None:
            health, message = health_pb2.UNHEALTHY, fault.message
        elif device.gpu.uuid in monitored:
            health, message = health_pb2.HEALTHY, ""
        else:
            health, message = (
                health_pb2.UNKNOWN,
                f"the events of GPU {device.gpu.uuid} are not watched",
            )
        response.devices.append(
            health_pb2.DeviceHealth(
                device=health_pb2.DeviceIdentifier(pool_name=pool_name, device_name=device.name),
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

    def NodeWatchResources(
        self,
        _request: health_pb2.NodeWatchResourcesRequest,
        context: grpc.ServicerContext,
    ) -> Iterator[health_pb2.NodeWatchResourcesResponse]:
        while context.is_active() and not self._closed.is_set():
            version, faults, monitored = self._monitor.snapshot()
            yield health_response(
                self._pool_name, self._devices(), faults, monitored, int(self._clock())
            )
            deadline = time.monotonic() + HEARTBEAT_SECONDS
            while context.is_active() and not self._closed.is_set():
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                if self._monitor.wait_for_change(version, min(remaining, _POLL_SECONDS)) != version:
                    break
