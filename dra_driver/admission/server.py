"""The admission webhook's HTTPS server: `POST /validate-resource-claim-parameters`, `GET /readyz`.

The API server calls it with an AdmissionReview for every ResourceClaim and
ResourceClaimTemplate created or updated (NVIDIA's paths, flags and port);
the answer comes from `dra_driver.admission.review`.

Why the standard library's `http.server` (a `ThreadingHTTPServer` over
`ssl`): none of the project's dependencies is an HTTP server (gRPC and
Prometheus' client are not), and two fixed paths answering one JSON object
each do not justify an ASGI stack. What a framework would bound, this module
bounds itself, so no client can stop it serving:

* the body: `Content-Length` is required and at most `MAX_BODY_BYTES` (HTTP
  411/413 and the connection closed; a too large body is read and dropped
  for at most `LINGER_S`, so that a client still sending it can read the
  413); a body that is not JSON, or not an AdmissionReview, is HTTP 400 with
  the reason;
* time: every socket operation (TLS handshake included, done in the
  connection's thread, never in the accept loop) times out after
  `IO_TIMEOUT_S`, and a body must arrive within `BODY_DEADLINE_S`;
* connections: at most `MAX_CONNECTIONS` at once; more are closed at accept;
* errors: one log line each, never a traceback on stderr, and the server
  goes on serving.

TLS comes from the certificate and key files (a Secret, or cert-manager's),
read again when either file changes (checked at each new connection), so a
renewed certificate is served without a restart; a renewal that cannot be
loaded is logged and the previous certificate kept.

Each refusal is logged on one line naming the object and giving the message.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import ssl
import sys
import threading
import time
from dataclasses import dataclass
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Final

from dra_driver import DEFAULT_DRIVER_NAME
from dra_driver.admission import DEFAULT_PORT
from dra_driver.admission.review import review
from dra_driver.errors import AdmissionError, ConfigError

VALIDATE_PATH: Final = "/validate-resource-claim-parameters"
READY_PATH: Final = "/readyz"
MAX_BODY_BYTES: Final = 8 * 2**20
"""An AdmissionReview carries the object and, on UPDATE, the old one: each at most the
API server's 3 MiB request limit, in practice etcd's 1.5 MiB."""
IO_TIMEOUT_S: Final = 10.0
BODY_DEADLINE_S: Final = 30.0
MAX_CONNECTIONS: Final = 64
LINGER_S: Final = 2.0
LINGER_BYTES: Final = 4 * MAX_BODY_BYTES

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class WebhookOptions:
    cert_file: Path
    key_file: Path
    port: int = DEFAULT_PORT
    host: str = ""
    """"" listens on every address (IPv6 and IPv4 where the host has both)."""
    driver: str = DEFAULT_DRIVER_NAME


class Certificates:
    """The server's TLS context, loaded from the files and reloaded when they change."""

    def __init__(self, cert_file: Path, key_file: Path) -> None:
        self.cert_file = cert_file
        self.key_file = key_file
        self._lock = threading.Lock()
        self._stamp = self._file_stamp()
        self._context = self._load()  # a bad pair at start-up is a ConfigError

    def context(self) -> ssl.SSLContext:
        """The context for a new connection: the files' current pair, or the last good one."""
        with self._lock:
            stamp = self._file_stamp()
            if stamp != self._stamp:
                self._stamp = stamp
                try:
                    self._context = self._load()
                    log.info("reloaded the TLS certificate from %s", self.cert_file)
                except ConfigError as exc:
                    log.error("%s; still serving the previous certificate", exc)
            return self._context

    def _file_stamp(self) -> tuple[object, ...]:
        stamp: list[object] = []
        for path in (self.cert_file, self.key_file):
            try:
                info = path.stat()  # follows the Secret volume's ..data symlink
                stamp.append((info.st_ino, info.st_mtime_ns, info.st_size))
            except OSError:
                stamp.append(None)
        return tuple(stamp)

    def _load(self) -> ssl.SSLContext:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        try:
            context.load_cert_chain(self.cert_file, self.key_file)
        except (OSError, ssl.SSLError) as exc:
            raise ConfigError(
                f"cannot load the TLS certificate {self.cert_file} with key {self.key_file}: {exc}"
            ) from exc
        return context


class WebhookServer(ThreadingHTTPServer):
    """A threading HTTP server that speaks TLS with `certificates`' current context."""

    daemon_threads = True
    block_on_close = False
    request_queue_size = MAX_CONNECTIONS

    def __init__(self, options: WebhookOptions, certificates: Certificates) -> None:
        self.options = options
        self.certificates = certificates
        self._slots = threading.BoundedSemaphore(MAX_CONNECTIONS)
        host = options.host
        if host == "" and socket.has_dualstack_ipv6():
            self.address_family = socket.AF_INET6
            host = "::"
        elif ":" in host:
            self.address_family = socket.AF_INET6
        super().__init__((host, options.port), _Handler)

    def server_bind(self) -> None:
        if self.address_family == socket.AF_INET6:
            self.socket.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        super().server_bind()

    @property
    def port(self) -> int:
        return int(self.server_address[1])

    def get_request(self) -> tuple[Any, Any]:
        """Accept, and wrap in TLS without the handshake (the handler's thread does it)."""
        sock, address = self.socket.accept()
        sock.settimeout(IO_TIMEOUT_S)
        wrapped = self.certificates.context().wrap_socket(
            sock, server_side=True, do_handshake_on_connect=False
        )
        return wrapped, address

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._slots.acquire(blocking=False):
            log.warning(
                "%d connections open; closing one from %s", MAX_CONNECTIONS, _peer(client_address)
            )
            self.shutdown_request(request)
            return
        super().process_request(request, client_address)

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()

    def handle_error(self, request: Any, client_address: Any) -> None:  # noqa: ARG002
        """One line, not a traceback: a client that fails the handshake or hangs up."""
        exc = sys.exc_info()[1]
        log.warning("connection from %s: %s: %s", _peer(client_address), type(exc).__name__, exc)


class _Handler(BaseHTTPRequestHandler):
    server: WebhookServer
    protocol_version = "HTTP/1.1"  # the API server keeps connections open
    timeout = IO_TIMEOUT_S

    def do_GET(self) -> None:
        if self.path == READY_PATH:
            self._send(HTTPStatus.OK, b"ok", "text/plain")
        else:
            self._error(HTTPStatus.NOT_FOUND, f"no such path {self.path!r}")

    def do_POST(self) -> None:
        if self.path.partition("?")[0] != VALIDATE_PATH:
            self._refuse_body(HTTPStatus.NOT_FOUND, f"no such path {self.path!r}")
            return
        content_type = (self.headers.get("Content-Type") or "").split(";")[0].strip()
        if content_type != "application/json":
            self._refuse_body(
                HTTPStatus.UNSUPPORTED_MEDIA_TYPE,
                f"contentType={content_type}, expected application/json",
            )
            return
        length_text = self.headers.get("Content-Length")
        if length_text is None or self.headers.get("Transfer-Encoding"):
            self._refuse_body(HTTPStatus.LENGTH_REQUIRED, "a Content-Length is required")
            return
        try:
            length = int(length_text)
        except ValueError:
            self._refuse_body(HTTPStatus.BAD_REQUEST, f"Content-Length {length_text!r}")
            return
        if length < 0 or length > MAX_BODY_BYTES:
            self._refuse_body(
                HTTPStatus.REQUEST_ENTITY_TOO_LARGE,
                f"the AdmissionReview is {length} bytes, more than the {MAX_BODY_BYTES} "
                "this webhook reads",
            )
            self._discard(length)
            return
        body = self._read_body(length)
        if body is None:
            return
        try:
            document = json.loads(body)
            verdict = review(document, driver=self.server.options.driver)
        except (ValueError, RecursionError) as exc:
            self._error(
                HTTPStatus.BAD_REQUEST,
                f"failed to read AdmissionReview from request body: not JSON: {exc}",
            )
            return
        except AdmissionError as exc:
            self._error(
                HTTPStatus.BAD_REQUEST, f"failed to read AdmissionReview from request body: {exc}"
            )
            return
        if not verdict.allowed:
            log.warning("refused %s (uid %s): %s", verdict.subject, verdict.uid, verdict.message)
        else:
            log.debug("allowed %s (uid %s)", verdict.subject, verdict.uid)
        payload = json.dumps(verdict.response()).encode()
        self._send(HTTPStatus.OK, payload, "application/json")

    def _read_body(self, length: int) -> bytes | None:
        deadline = time.monotonic() + BODY_DEADLINE_S
        chunks: list[bytes] = []
        remaining = length
        while remaining > 0:
            if time.monotonic() > deadline:
                self._error(HTTPStatus.REQUEST_TIMEOUT, "the body took too long to arrive")
                self.close_connection = True
                return None
            chunk = self.rfile.read1(min(remaining, 1 << 16))
            if not chunk:
                log.warning("%s hung up before its body ended", _peer(self.client_address))
                self.close_connection = True
                return None
            chunks.append(chunk)
            remaining -= len(chunk)
        return b"".join(chunks)

    def _discard(self, length: int) -> None:
        """Let a client still sending a refused body finish, so it can read the answer
        (a lingering close): its bytes are read and dropped, within `LINGER_S` and
        `LINGER_BYTES`, then the connection closes whatever is left."""
        deadline = time.monotonic() + LINGER_S
        remaining = min(length, LINGER_BYTES)
        try:
            while remaining > 0 and time.monotonic() < deadline:
                chunk = self.rfile.read1(min(remaining, 1 << 16))
                if not chunk:
                    return
                remaining -= len(chunk)
        except OSError:
            return

    def _refuse_body(self, status: HTTPStatus, message: str) -> None:
        """An error before the body is read: answer and close (the body stays unread)."""
        self.close_connection = True
        self._error(status, message, close=True)

    def _error(self, status: HTTPStatus, message: str, *, close: bool = False) -> None:
        log.warning("%s %s from %s: %d %s", self.command, self.path,
                    _peer(self.client_address), status, message)  # fmt: skip
        self._send(status, message.encode(), "text/plain", close=close)

    def _send(self, status: HTTPStatus, payload: bytes, content_type: str, *,
              close: bool = False) -> None:  # fmt: skip
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(payload)))
        if close:
            self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s " + format, self.client_address[0], *args)


def _peer(address: Any) -> str:
    """`host:port` of a client address (IPv4 or IPv6 tuple)."""
    if isinstance(address, tuple) and len(address) >= 2:
        host = str(address[0]).removeprefix("::ffff:")
        return f"[{host}]:{address[1]}" if ":" in host else f"{host}:{address[1]}"
    return str(address)


def run(options: WebhookOptions) -> int:
    """Serve until SIGTERM or SIGINT; ConfigError when the certificate cannot be loaded or
    the port not bound."""
    import signal

    certificates = Certificates(options.cert_file, options.key_file)
    try:
        server = WebhookServer(options, certificates)
    except OSError as exc:
        raise ConfigError(f"cannot listen on port {options.port}: {exc}") from exc

    def stop(signum: int, _frame: object) -> None:
        log.info("signal %d: stopping", signum)
        threading.Thread(target=server.shutdown, daemon=True).start()

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, stop)
        signal.signal(signal.SIGINT, stop)
    log.info(
        "admission webhook for %s serving %s and %s over HTTPS on port %d (pid %d)",
        options.driver, VALIDATE_PATH, READY_PATH, server.port, os.getpid(),
    )  # fmt: skip
    with server:
        server.serve_forever(poll_interval=0.5)
    return 0
