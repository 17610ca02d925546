"""The kubelet-like client reaches a plugin that is slow to answer, as a busy node's is."""

from __future__ import annotations

import contextlib
import shutil
import socket
import tempfile
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
    first = True
    with contextlib.suppress(OSError):
        while data := source.recv(65536):
            if first:
                time.sleep(delay)
                first = False
            sink.sendall(data)
    with contextlib.suppress(OSError):
        sink.shutdown(socket.SHUT_WR)


@pytest.fixture
def slow_plugin() -> Iterator[Path]:
    """A registration server behind a socket whose first answer bytes come 0.4 s late: the
    HTTP/2 SETTINGS frame of a plugin on a node too busy to answer at once."""
    # A short directory: pytest's tmp_path under xdist is too long for a socket path.
    root = Path(tempfile.mkdtemp(prefix="dra-gpu-client-", dir="/tmp"))
    backend = root / "backend.sock"
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    registration_pb2_grpc.add_RegistrationServicer_to_server(_Registration(), server)
    server.add_insecure_port(f"unix://{backend}")
    server.start()
    front = registration_socket_path(root, DRIVER, None)
    front.parent.mkdir(parents=True)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(front))
    listener.listen()
    sockets: list[socket.socket] = []
    pumps: list[threading.Thread] = []

    def accept() -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:  # the listener was closed
                return
            upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sockets.extend((client, upstream))
            upstream.connect(str(backend))
            for args in ((client, upstream, 0.0), (upstream, client, HANDSHAKE_DELAY_S)):
                pump = threading.Thread(target=_pump, args=args, daemon=True)
                pumps.append(pump)
                pump.start()

    acceptor = threading.Thread(target=accept, daemon=True)
    acceptor.start()
    try:
        yield root
    finally:
        with contextlib.suppress(OSError):
            listener.shutdown(socket.SHUT_RDWR)
        listener.close()
        acceptor.join(5)
        server.stop(0).wait()
        for s in sockets:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
        for pump in pumps:
            pump.join(5)
        for s in sockets:
            s.close()
        shutil.rmtree(root, ignore_errors=True)


def test_a_plugin_slow_to_finish_the_handshake_is_still_reached(slow_plugin: Path) -> None:
    # With grpc.min_reconnect_backoff_ms at 100 (gRPC's minimum connect timeout) this call
    # failed with UNAVAILABLE: "connection attempt timed out before receiving SETTINGS frame".
    client = KubeletClient(slow_plugin, DRIVER, timeout=10)
    try:
        assert client.get_info().name == DRIVER
    finally:
        client.close()
