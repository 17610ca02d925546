"""A kubelet-like gRPC client for the plugin's sockets: registration, Prepare, Unprepare.

`dra-gpu demo` plays the kubelet's part against the real plugin daemon, so
it needs the calls the kubelet makes, over the same Unix sockets and with the
generated stubs of both DRA API versions; the tests drive the plugin through
the same client. It has no kubelet logic beyond what a caller needs to talk
to a plugin: the registration handshake (`register`) and the DRA calls.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Self

import grpc

from dra_driver import DEFAULT_DRIVER_NAME
from dra_driver.errors import PluginError
from kubelet_plugin.gen.dra.v1 import api_pb2 as dra_v1_pb2
from kubelet_plugin.gen.dra.v1 import api_pb2_grpc as dra_v1_pb2_grpc
from kubelet_plugin.gen.dra.v1beta1 import api_pb2 as dra_v1beta1_pb2
from kubelet_plugin.gen.dra.v1beta1 import api_pb2_grpc as dra_v1beta1_pb2_grpc
from kubelet_plugin.gen.pluginregistration.v1 import api_pb2 as registration_pb2
from kubelet_plugin.gen.pluginregistration.v1 import api_pb2_grpc as registration_pb2_grpc
from kubelet_plugin.service import ClaimRef, PrepareResult, ResultDevice, UnprepareResult
from kubelet_plugin.socket_names import dra_socket_path, registration_socket_path

_RECONNECT_OPTIONS = [
    # Reconnect fast after a plugin restart (gRPC's default backoff grows to 120 s).
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 1000),
    # Not grpc.min_reconnect_backoff_ms: gRPC core takes it as the *minimum connect timeout*
    # (subchannel.cc), so 100 ms there made every connection attempt that took longer than
    # 100 ms to exchange HTTP/2 SETTINGS (a busy node) fail with UNAVAILABLE. The default, 20 s.
]
DRA_API_VERSIONS = ("v1", "v1beta1")


class KubeletClient:
    """Drives a kubelet plugin over its Unix sockets with the generated stubs, as the kubelet does.

    The registration socket is `<kubelet_root>/plugins_registry/<driver>-reg.sock`,
    or the instance's own name when the plugin runs with `pod_uid`
    (`kubelet_plugin.socket_names`). DRA calls go to the endpoint the plugin
    reported in the last `get_info()` / `register()`, else to the default
    `<kubelet_root>/plugins/<driver>/dra.sock` (`dra-<pod_uid>.sock`).
    Every call has the kubelet's deadline (45 s unless `timeout` says otherwise);
    with `wait_for_ready` a call waits (within the deadline) for the plugin to
    come up instead of failing with UNAVAILABLE. gRPC failures are raised as
    `grpc.RpcError`, which is what the kubelet would see. Thread-safe.
    """

    def __init__(
        self,
        kubelet_root: Path,
        driver: str = DEFAULT_DRIVER_NAME,
        *,
        timeout: float = 45.0,
        wait_for_ready: bool = False,
        pod_uid: str | None = None,
    ) -> None:
        root = Path(os.path.abspath(kubelet_root))
        self.driver = driver
        self.registration_socket = registration_socket_path(root, driver, pod_uid)
        self.dra_socket = dra_socket_path(root, driver, pod_uid)
        self.timeout = timeout
        self.wait_for_ready = wait_for_ready
        self._lock = threading.Lock()
        self._channels: dict[Path, grpc.Channel] = {}

    def get_info(self) -> registration_pb2.PluginInfo:
        """Call Registration/GetInfo; remember the reported DRA endpoint."""
        stub = registration_pb2_grpc.RegistrationStub(self._channel(self.registration_socket))
        info = stub.GetInfo(
            registration_pb2.InfoRequest(),
            timeout=self.timeout,
            wait_for_ready=self.wait_for_ready,
        )
        if info.endpoint:
            self.dra_socket = Path(info.endpoint)
        return info

    def notify_registration(self, ok: bool, error: str = "") -> None:
        """Call Registration/NotifyRegistrationStatus (raises grpc.RpcError if the plugin does)."""
        stub = registration_pb2_grpc.RegistrationStub(self._channel(self.registration_socket))
        stub.NotifyRegistrationStatus(
            registration_pb2.RegistrationStatus(plugin_registered=ok, error=error),
            timeout=self.timeout,
            wait_for_ready=self.wait_for_ready,
        )

    def register(self) -> str:
        """The kubelet's registration: GetInfo, check it, notify the outcome.

        Returns the DRA API version the kubelet would use ("v1" or "v1beta1").
        On a mismatch it notifies the plugin of the failure and raises PluginError.
        """
        info = self.get_info()
        problem = ""
        if info.type != "DRAPlugin":
            problem = f"PluginInfo.type is {info.type!r}, want 'DRAPlugin'"
        elif info.name != self.driver:
            problem = f"PluginInfo.name is {info.name!r}, want {self.driver!r}"
        # Like kubelet 1.34+: the first entry of the plugin's list that the kubelet knows.
        known = [f"{v}.DRAPlugin" for v in DRA_API_VERSIONS]
        version = next(
            (v.removesuffix(".DRAPlugin") for v in info.supported_versions if v in known), ""
        )
        if not problem and not version:
            problem = f"none of the versions {list(info.supported_versions)} is supported"
        if problem:
            self.notify_registration(False, problem)
            raise PluginError(f"registration of {self.driver} rejected: {problem}")
        self.notify_registration(True)
        return version

    def prepare(self, claims: Sequence[ClaimRef], version: str = "v1") -> dict[str, PrepareResult]:
        """Call DRAPlugin/NodePrepareResources of `version`; results keyed by claim UID."""
        pb2, pb2_grpc = self._dra_modules(version)
        response = pb2_grpc.DRAPluginStub(self._channel(self.dra_socket)).NodePrepareResources(
            pb2.NodePrepareResourcesRequest(claims=self._claims(pb2, claims)),
            timeout=self.timeout,
            wait_for_ready=self.wait_for_ready,
        )
        return {
            uid: PrepareResult(
                devices=tuple(
                    ResultDevice(
                        request_names=tuple(d.request_names),
                        pool_name=d.pool_name,
                        device_name=d.device_name,
                        cdi_device_ids=tuple(d.cdi_device_ids),
                        # share_id exists in v1 only
                        share_id=d.share_id if version == "v1" and d.HasField("share_id") else None,
                    )
                    for d in entry.devices
                ),
                error=entry.error,
            )
            for uid, entry in response.claims.items()
        }

    def unprepare(
        self, claims: Sequence[ClaimRef], version: str = "v1"
    ) -> dict[str, UnprepareResult]:
        """Call DRAPlugin/NodeUnprepareResources of `version`; results keyed by claim UID."""
        pb2, pb2_grpc = self._dra_modules(version)
        response = pb2_grpc.DRAPluginStub(self._channel(self.dra_socket)).NodeUnprepareResources(
            pb2.NodeUnprepareResourcesRequest(claims=self._claims(pb2, claims)),
            timeout=self.timeout,
            wait_for_ready=self.wait_for_ready,
        )
        return {uid: UnprepareResult(error=entry.error) for uid, entry in response.claims.items()}

    @staticmethod
    def _dra_modules(version: str) -> tuple[Any, Any]:
        """The generated message and stub modules of one DRA API version."""
        if version == "v1":
            return dra_v1_pb2, dra_v1_pb2_grpc
        if version == "v1beta1":
            return dra_v1beta1_pb2, dra_v1beta1_pb2_grpc
        raise ValueError(f"unknown DRA API version {version!r}; use one of {DRA_API_VERSIONS}")

    @staticmethod
    def _claims(pb2: Any, claims: Sequence[ClaimRef]) -> list[Any]:
        return [pb2.Claim(namespace=c.namespace, uid=c.uid, name=c.name) for c in claims]

    def close(self) -> None:
        """Close all channels; the client may be used again afterwards (it re-dials)."""
        with self._lock:
            channels, self._channels = self._channels, {}
        for channel in channels.values():
            channel.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def _channel(self, socket_path: Path) -> grpc.Channel:
        with self._lock:
            channel = self._channels.get(socket_path)
            if channel is None:
                channel = grpc.insecure_channel(f"unix:{socket_path}", options=_RECONNECT_OPTIONS)
                self._channels[socket_path] = channel
            return channel
