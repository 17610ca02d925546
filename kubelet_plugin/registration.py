"""The kubelet plugin-registration handshake (`pluginregistration.Registration`).

The kubelet discovers plugins by watching `<kubelet-root>/plugins_registry`
for sockets. For each one it calls `GetInfo` to learn the plugin's type, name,
endpoint and API versions, tries to register it, and reports the outcome with
`NotifyRegistrationStatus`. This module answers those two calls for a DRA
driver and keeps the last reported outcome, which is the only way a plugin
learns whether the kubelet accepted it.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

import grpc

from kubelet_plugin.gen.pluginregistration.v1 import api_pb2, api_pb2_grpc

log = logging.getLogger("kubelet_plugin.server")

DRA_PLUGIN_TYPE = "DRAPlugin"
"""`PluginInfo.type` of a DRA driver."""

SUPPORTED_VERSIONS = ("v1.DRAPlugin", "v1beta1.DRAPlugin")
"""The DRA services served on the DRA socket, in order of preference.

Kubelets 1.34+ take the first entry they know, so v1 comes first; kubelets
1.32/1.33 know only v1beta1. When the plugin serves the device-health stream,
`v1.DRAResourceHealth` and `v1alpha1.DRAResourceHealth` follow them (kubelet
1.37 opens the stream only when it is advertised, and prefers v1).
"""


@dataclass(frozen=True, slots=True)
class RegistrationStatus:
    """What the kubelet last said about registering this plugin."""

    registered: bool
    error: str = ""


class RegistrationState:
    """The latest `RegistrationStatus`, shared between gRPC threads and the caller."""

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._status: RegistrationStatus | None = None

    @property
    def status(self) -> RegistrationStatus | None:
        """The latest status, or None while the kubelet has not reported one."""
        with self._changed:
            return self._status

    def record(self, status: RegistrationStatus) -> None:
        with self._changed:
            self._status = status
            self._changed.notify_all()

    def wait(self, timeout: float | None = None) -> RegistrationStatus | None:
        """Block until the kubelet has reported a status (or `timeout` passes); return it."""
        with self._changed:
            self._changed.wait_for(lambda: self._status is not None, timeout)
            return self._status


def _abort_rejected(context: grpc.ServicerContext, error: str) -> NoReturn:
    """Answer a failed registration with an error, as the Go helper does.

    The kubelet only logs it; it retries registration from scratch later.
    """
    context.abort(grpc.StatusCode.UNKNOWN, f"plugin registration failed: {error}")


class RegistrationServicer(api_pb2_grpc.RegistrationServicer):
    """Answers the kubelet's plugin watcher on the registration socket."""

    def __init__(
        self,
        *,
        driver_name: str,
        endpoint: Path,
        state: RegistrationState,
        supported_versions: tuple[str, ...] = SUPPORTED_VERSIONS,
    ) -> None:
        self._info = api_pb2.PluginInfo(
            type=DRA_PLUGIN_TYPE,
            name=driver_name,
            endpoint=str(endpoint),
            supported_versions=supported_versions,
        )
        self._state = state

    def GetInfo(
        self, _request: api_pb2.InfoRequest, _context: grpc.ServicerContext
    ) -> api_pb2.PluginInfo:
        # Debug: the readiness probe asks too, every few seconds. The kubelet's own
        # registration shows at info through NotifyRegistrationStatus.
        log.debug(
            "registration: GetInfo -> name=%s endpoint=%s versions=%s",
            self._info.name,
            self._info.endpoint,
            ",".join(self._info.supported_versions),
        )
        return self._info

    def NotifyRegistrationStatus(
        self, request: api_pb2.RegistrationStatus, context: grpc.ServicerContext
    ) -> api_pb2.RegistrationStatusResponse:
        status = RegistrationStatus(registered=request.plugin_registered, error=request.error)
        self._state.record(status)
        if status.registered:
            log.info("registration: kubelet registered plugin %s", self._info.name)
            return api_pb2.RegistrationStatusResponse()
        log.error(
            "registration: kubelet rejected plugin %s: %s",
            self._info.name,
            status.error or "(no reason given)",
        )
        _abort_rejected(context, status.error)
