"""The kubelet-like client reaches a plugin that is slow to answer, as a busy node's is."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path

import grpc
import pytest

from kubelet_plugin.gen.pluginregistration.v1 import api_pb2 as registration_pb2
from kubelet_plugin.gen.pluginregistration.v1 import api_pb2_grpc as registration_pb2_grpc
from kubelet_plugin.kubelet_client import KubeletClient
from kubelet_plugin.socket_names import registration_socket_path

DRIVER = "gpu.nvidia.com"
HANDSHAKE_DELAY_S = 0.4


class _Registration(registration_pb2_grpc.RegistrationServicer):
    def GetInfo(self, request, context):
        return registration_pb2.PluginInfo(
            type="DRAPlugin", name=DRIVER, endpoint="", supported_versions=["v1.DRAPlugin"]
        )


def _pump(source: socket.socket, sink: socket.socket, delay: float) -> None:
    """Copy bytes until EOF, holding back the first chunk for `delay` seconds."""
    try:
        first = True
        while data := source.recv(65536):
            if first:
                time.sleep(delay)
                first = False
            sink.sendall(data)
    except OSError:
        pass
    finally:
        for s in (source, sink):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)


@pytest.fixture
def slow_plugin(tmp_path: Path) -> Iterator[Path]:
    """A registration server behind a socket whose first answer bytes come 0.4 s late: the
    HTTP/2 SETTINGS frame of a plugin on a node too busy to answer at once."""
    backend = tmp_path / "backend.sock"
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    registration_pb2_grpc.add_RegistrationServicer_to_server(_Registration(), server)
    server.add_insecure_port(f"unix://{backend}")
    server.start()
    front = registration_socket_path(tmp_path, DRIVER, None)
    front.parent.mkdir(parents=True, exist_ok=True)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(front))
    listener.listen()
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            try:
                client, _ = listener.accept()
            except OSError:
                return
            upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            upstream.connect(str(backend))
            threading.Thread(target=_pump, args=(client, upstream, 0), daemon=True).start()
            threading.Thread(
                target=_pump, args=(upstream, client, HANDSHAKE_DELAY_S), daemon=True
            ).start()

    acceptor = threading.Thread(target=accept, daemon=True)
    acceptor.start()
    try:
        yield tmp_path
    finally:
        stop.set()
        listener.close()
        server.stop(0).wait()


def test_a_plugin_slow_to_finish_the_handshake_is_still_reached(slow_plugin: Path) -> None:
    # With grpc.min_reconnect_backoff_ms at 100 (gRPC's minimum connect timeout) this call
    # failed with UNAVAILABLE: "connection attempt timed out before receiving SETTINGS frame".
    client = KubeletClient(slow_plugin, DRIVER, timeout=10)
    try:
        assert client.get_info().name == DRIVER
    finally:
        client.close()
