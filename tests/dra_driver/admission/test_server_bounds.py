"""The webhook server's bounds on time and connections, with the limits made small.

In-process (`WebhookServer` in a thread) so the limits can be lowered; the
command itself is tested over HTTPS in `test_server.py`.
"""

from __future__ import annotations

import http.client
import socket
import ssl
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import trustme

from dra_driver.admission import server
from dra_driver.admission.server import Certificates, WebhookOptions, WebhookServer


@dataclass
class Running:
    server: WebhookServer
    context: ssl.SSLContext

    def tls(self) -> ssl.SSLSocket:
        raw = socket.create_connection(("127.0.0.1", self.server.port), timeout=5)
        return self.context.wrap_socket(raw, server_hostname="127.0.0.1")

    def ready(self) -> bool:
        connection = http.client.HTTPSConnection(
            "127.0.0.1", self.server.port, context=self.context, timeout=5
        )
        try:
            connection.request("GET", "/readyz")
            return connection.getresponse().status == 200
        finally:
            connection.close()


def _start(tmp_path: Path) -> Iterator[Running]:
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1")
    cert_file, key_file = tmp_path / "tls.crt", tmp_path / "tls.key"
    cert.private_key_pem.write_to_path(str(key_file))
    cert_file.write_bytes(b"".join(blob.bytes() for blob in cert.cert_chain_pems))
    options = WebhookOptions(cert_file=cert_file, key_file=key_file, port=0, host="127.0.0.1")
    webhook = WebhookServer(options, Certificates(cert_file, key_file))
    thread = threading.Thread(target=webhook.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    context = ssl.create_default_context()
    ca.configure_trust(context)
    try:
        yield Running(webhook, context)
    finally:
        webhook.shutdown()
        webhook.server_close()
        thread.join(5)


@pytest.fixture
def small_limits(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Running]:
    monkeypatch.setattr(server, "BODY_DEADLINE_S", 0.5)
    monkeypatch.setattr(server, "MAX_CONNECTIONS", 2)
    yield from _start(tmp_path)


def test_a_body_sent_too_slowly_is_cut_off_with_408(small_limits: Running) -> None:
    with small_limits.tls() as sock:
        sock.sendall(
            b"POST /validate-resource-claim-parameters HTTP/1.1\r\nHost: x\r\n"
            b"Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{"
        )
        started = time.monotonic()
        answer = b""
        for _ in range(20):  # one byte every 0.1 s: each read is quick, the whole is not
            time.sleep(0.1)
            try:
                sock.sendall(b" ")
            except OSError:
                break
        sock.settimeout(5)
        while chunk := sock.recv(4096):
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 408 ")
    assert answer.endswith(b"the body took too long to arrive")
    assert time.monotonic() - started < 3
    assert small_limits.ready()


def _served(running: Running) -> bool:
    """Whether a fresh connection gets an answer to GET /readyz."""
    try:
        return running.ready()
    except (ssl.SSLError, OSError, http.client.HTTPException):
        return False


def test_connections_beyond_the_limit_are_closed_and_later_ones_served(
    small_limits: Running,
) -> None:
    held = [small_limits.tls(), small_limits.tls()]  # both handshaken, each in a thread
    try:
        assert not _served(small_limits)  # closed at accept
    finally:
        for sock in held:
            sock.close()
    deadline = time.monotonic() + 5
    while not _served(small_limits):
        assert time.monotonic() < deadline
        time.sleep(0.05)
