"""A small resource.k8s.io/v1 apiserver over real HTTP (for KubeCluster and the real client) and a
recording Cluster wrapper.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Callable, Collection
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

import yaml

from dra_driver.errors import ClusterError
from dra_driver.kube import apiserver_rules as cluster_rules
from dra_driver.kube import device_status
from dra_driver.kube.cluster import Cluster, ConflictError
from dra_driver.kube.object_store import OBJECT_STORE_KINDS


def _api_groups() -> dict[tuple[str, ...], dict[str, cluster_rules.ResourceKind]]:
    """URL prefix (`apis/<group>/<version>` or `api/v1`) -> plural -> kind, for every kind
    the GPU driver's `Cluster` and the `ObjectStore` use."""
    groups: dict[tuple[str, ...], dict[str, cluster_rules.ResourceKind]] = {}
    for kind in (
        cluster_rules.RESOURCE_SLICE,
        cluster_rules.DEVICE_CLASS,
        cluster_rules.RESOURCE_CLAIM,
        *OBJECT_STORE_KINDS,
    ):
        if "/" in kind.api_version:
            prefix: tuple[str, ...] = ("apis", *kind.api_version.split("/"))
        else:
            prefix = ("api", kind.api_version)
        groups.setdefault(prefix, {})[kind.plural] = kind
    return groups


_FAKE_API_GROUPS = _api_groups()
_WATCH_POLL_SECONDS = 0.05


class _Server(ThreadingHTTPServer):
    """A client that hangs up (a watch closed, a test's plugin killed) is no server error:
    as a real API server, say nothing of it; anything else is printed as usual."""

    def handle_error(self, request: Any, client_address: Any) -> None:
        if not isinstance(sys.exc_info()[1], ConnectionResetError | BrokenPipeError):
            super().handle_error(request, client_address)


class _ApiFailure(Exception):
    """An HTTP error answer of the fake apiserver (a `Status` object)."""

    def __init__(self, code: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message


class FakeApiServer:
    """An in-memory kube-apiserver for the resource.k8s.io/v1 calls dra-gpu makes.

    It serves `/version` and, for resourceslices and deviceclasses (cluster
    scoped) and resourceclaims (namespaced, with `/status`, which also takes a
    server-side apply of `status.devices` with field-manager ownership and
    the apiserver's validation, `dra_driver.kube.device_status`), list (with
    `fieldSelector`, `limit`/`continue`), get, create, replace and delete;
    a `watch=true` list of any of them streams ADDED events for what exists,
    then ADDED/MODIFIED/DELETED as objects change, until `timeoutSeconds`.
    Nodes (`/api/v1`, add them with `add_node`) and events.k8s.io/v1 Events
    answer the same calls, and so do the `ObjectStore` kinds
    (`dra_driver.kube.object_store`: ComputeDomains and their cliques and
    members under resource.nvidia.com/v1beta1, ResourceClaimTemplates,
    coordination.k8s.io/v1 Leases), with `labelSelector` (`k=v` terms) on lists
    and watches, `/status` for kinds with a status subresource, the immutable
    ComputeDomain spec (422), and finalizers: a DELETE of an object with
    finalizers only sets its deletionTimestamp, and the update that empties
    them removes it. It
    listens on 127.0.0.1 on an ephemeral port, in a daemon thread. Writes
    follow `dra_driver.kube.apiserver_rules`, as in kube-apiserver: new UIDs on
    create, resourceVersion preconditions (409 Conflict), 409 AlreadyExists,
    status only through `/status`. Errors are `Status` objects worded like the
    apiserver's, and list items carry no `apiVersion`/`kind`, as on a real
    apiserver. `requests` records `(method, path?query)` of every request.
    `disabled_gates` (e.g. `{"DRAPartitionableDevices"}`, as on a default 1.34/1.35
    cluster) drops their ResourceSlice fields on write, as the apiserver does
    (`apiserver_rules.drop_disabled_fields`).

        with FakeApiServer() as server:
            cluster = KubeCluster(server.api_client())
    """

    def __init__(
        self, *, version: tuple[str, str] = ("1", "34"), disabled_gates: Collection[str] = ()
    ) -> None:
        self.version = version
        self.disabled_gates = frozenset(disabled_gates)
        self.requests: list[tuple[str, str]] = []
        self._objects: dict[tuple[str, str | None, str], dict[str, Any]] = {}
        self._resource_version = 0
        self._lock = threading.Lock()
        self._failures: list[tuple[str, int, str]] = []
        self._content_type = ""  # of the request being routed (set under the lock)
        self._stopping = threading.Event()
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        """`http://127.0.0.1:<port>` of the running server."""
        if self._httpd is None:
            raise RuntimeError("FakeApiServer is not running")
        host, port = self._httpd.server_address[:2]
        return f"http://{host!s}:{port}"

    def start(self) -> FakeApiServer:
        """Start serving (returns self)."""
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True  # headers and body go out in two writes

            def log_message(self, format: str, *args: Any) -> None:
                """Keep test output quiet."""

            def do_GET(self) -> None:
                server._handle(self, "GET")

            def do_POST(self) -> None:
                server._handle(self, "POST")

            def do_PUT(self) -> None:
                server._handle(self, "PUT")

            def do_DELETE(self) -> None:
                server._handle(self, "DELETE")

            def do_PATCH(self) -> None:
                server._handle(self, "PATCH")

        self._httpd = _Server(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(
            target=self._httpd.serve_forever,
            kwargs={"poll_interval": 0.05},
            name="fake-apiserver",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and close the listening socket."""
        self._stopping.set()  # ends open watches
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def __enter__(self) -> FakeApiServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def api_client(self) -> Any:
        """A real `kubernetes.client.ApiClient` pointed at this server (close it after use)."""
        import kubernetes.client

        configuration = kubernetes.client.Configuration(host=self.url)
        return kubernetes.client.ApiClient(configuration)

    def add_node(self, name: str, uid: str) -> None:
        """Store a Node object named `name` with metadata.uid `uid`."""
        with self._lock:
            self._resource_version += 1
            self._objects[("nodes", None, name)] = {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {
                    "name": name,
                    "uid": uid,
                    "resourceVersion": str(self._resource_version),
                },
            }

    def fail_next(self, method: str, code: int, reason: str) -> None:
        """Answer the next `method` request with HTTP `code` and Status reason `reason`."""
        with self._lock:
            self._failures.append((method, code, reason))

    def objects(self, plural: str) -> list[dict[str, Any]]:
        """Copies of the stored objects of one resource (e.g. "resourceslices")."""
        with self._lock:
            return [
                json.loads(json.dumps(obj))
                for (kind, _ns, _name), obj in sorted(self._objects.items(), key=_fake_key)
                if kind == plural
            ]

    # Request handling

    def _handle(self, handler: BaseHTTPRequestHandler, method: str) -> None:
        url = urlsplit(handler.path)
        self.requests.append((method, handler.path))
        length = int(handler.headers.get("Content-Length") or 0)
        raw_body = handler.rfile.read(length) if length else b""
        query = parse_qs(url.query)
        if method == "GET" and query.get("watch") == ["true"] and not self._failures:
            self._watch(handler, url.path, query)
            return
        try:
            with self._lock:
                self._content_type = handler.headers.get("Content-Type") or ""
                code, payload = self._route(method, url.path, parse_qs(url.query), raw_body)
        except _ApiFailure as failure:
            code = failure.code
            payload = {
                "kind": "Status",
                "apiVersion": "v1",
                "metadata": {},
                "status": "Failure",
                "message": failure.message,
                "reason": failure.reason,
                "code": failure.code,
            }
        data = json.dumps(payload).encode()
        handler.send_response(code)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(data)))
        handler.end_headers()
        handler.wfile.write(data)

    def _route(
        self, method: str, path: str, query: dict[str, list[str]], raw_body: bytes
    ) -> tuple[int, dict[str, Any]]:
        for index, (fail_method, code, reason) in enumerate(self._failures):
            if fail_method == method:
                del self._failures[index]
                raise _ApiFailure(code, reason, f"injected failure: {reason}")
        parts = [unquote(part) for part in path.strip("/").split("/")]
        if parts == ["version"] and method == "GET":
            major, minor = self.version
            return 200, {
                "major": major,
                "minor": minor,
                "gitVersion": f"v{major}.{minor.rstrip('+')}.0",
                "platform": "linux/amd64",
            }
        kind, namespace, rest = self._resolve(parts)
        if kind.namespaced != (namespace is not None) and not (
            kind.namespaced and len(rest) == 1 and method == "GET"
        ):
            raise _ApiFailure(404, "NotFound", "the server could not find the requested resource")
        body = self._decode_body(raw_body) if method in ("POST", "PUT") else None
        if len(rest) == 1:
            if method == "GET":
                return 200, self._list(kind, namespace, query)
            if method == "POST":
                return 201, self._create(kind, namespace, body)
        elif len(rest) == 2:
            name = rest[1]
            if method == "GET":
                return 200, self._get(kind, namespace, name)
            if method == "PUT":
                return 200, self._update(kind, namespace, name, body, status_only=False)
            if method == "DELETE":
                obj = self._get(kind, namespace, name)
                marked = cluster_rules.prepare_delete(obj)
                if marked is None:
                    del self._objects[(kind.plural, namespace, name)]
                    self._resource_version += 1
                    return 200, obj
                if marked is not obj:
                    self._resource_version += 1
                    marked["metadata"]["resourceVersion"] = str(self._resource_version)
                    self._objects[(kind.plural, namespace, name)] = marked
                return 202, marked
        elif len(rest) == 3 and rest[2] == "status" and kind.has_status:
            name = rest[1]
            if method == "GET":
                return 200, self._get(kind, namespace, name)
            if method == "PUT":
                return 200, self._update(kind, namespace, name, body, status_only=True)
            if method == "PATCH" and kind is cluster_rules.RESOURCE_CLAIM:
                return 200, self._apply_status(namespace, name, query, raw_body, self._content_type)
        raise _ApiFailure(405, "MethodNotAllowed", f"{method} is not supported on {path}")

    @staticmethod
    def _resolve(
        parts: list[str],
    ) -> tuple[cluster_rules.ResourceKind, str | None, list[str]]:
        """(kind, namespace, [plural, name?, subresource?]) of an API path."""
        for prefix, kinds in _FAKE_API_GROUPS.items():
            if tuple(parts[: len(prefix)]) != prefix:
                continue
            rest = parts[len(prefix) :]
            namespace: str | None = None
            if len(rest) >= 3 and rest[0] == "namespaces":
                namespace, rest = rest[1], rest[2:]
            if rest and rest[0] in kinds:
                return kinds[rest[0]], namespace, rest
        raise _ApiFailure(404, "NotFound", "the server could not find the requested resource")

    def _watch(
        self, handler: BaseHTTPRequestHandler, path: str, query: dict[str, list[str]]
    ) -> None:
        """Stream watch events of one collection until the timeout or `stop()`."""
        parts = [unquote(part) for part in path.strip("/").split("/")]
        try:
            kind, namespace, rest = self._resolve(parts)
            wanted = cluster_rules.parse_field_selector(
                ",".join(query.get("fieldSelector", [])), kind
            )
            labels = _parse_label_selector(query)
        except (_ApiFailure, ClusterError) as exc:
            handler.send_error(404 if isinstance(exc, _ApiFailure) else 400, str(exc))
            return
        timeout = float(query.get("timeoutSeconds", ["30"])[0])
        handler.send_response(200)
        handler.send_header("Content-Type", "application/json")
        # Chunked, like kube-apiserver: clients read each event as its chunk arrives.
        handler.send_header("Transfer-Encoding", "chunked")
        handler.send_header("Connection", "close")
        handler.end_headers()
        handler.close_connection = True

        def write_chunk(data: bytes) -> None:
            handler.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            handler.wfile.flush()

        def matching() -> dict[str, dict[str, Any]]:
            with self._lock:
                return {
                    name: json.loads(json.dumps(obj))
                    for (plural, ns, name), obj in self._objects.items()
                    if plural == rest[0]
                    and namespace in (None, ns)
                    and cluster_rules.matches_field_selector(obj, wanted)
                    and _has_labels(obj, labels)
                }

        seen: dict[str, dict[str, Any]] = {}
        deadline = time.monotonic() + timeout
        try:
            while not self._stopping.is_set() and time.monotonic() < deadline:
                current = matching()
                events = [("ADDED", obj) for name, obj in current.items() if name not in seen]
                events += [
                    ("MODIFIED", obj)
                    for name, obj in current.items()
                    if name in seen
                    and obj["metadata"].get("resourceVersion")
                    != seen[name]["metadata"].get("resourceVersion")
                ]
                events += [("DELETED", obj) for name, obj in seen.items() if name not in current]
                for event_type, obj in events:
                    write_chunk((json.dumps({"type": event_type, "object": obj}) + "\n").encode())
                seen = current
                self._stopping.wait(_WATCH_POLL_SECONDS)
            write_chunk(b"")  # the last chunk
        except OSError:
            return  # the client went away

    @staticmethod
    def _decode_body(raw_body: bytes) -> dict[str, Any]:
        try:
            body = json.loads(raw_body)
        except ValueError as exc:
            raise _ApiFailure(400, "BadRequest", f"the body is not JSON: {exc}") from exc
        if not isinstance(body, dict):
            raise _ApiFailure(400, "BadRequest", "the body is not a JSON object")
        return body

    def _get(
        self, kind: cluster_rules.ResourceKind, namespace: str | None, name: str
    ) -> dict[str, Any]:
        obj = self._objects.get((kind.plural, namespace, name))
        if obj is None:
            raise _ApiFailure(404, "NotFound", f'{_resource(kind)} "{name}" not found')
        return obj

    def _list(
        self,
        kind: cluster_rules.ResourceKind,
        namespace: str | None,
        query: dict[str, list[str]],
    ) -> dict[str, Any]:
        try:
            wanted = cluster_rules.parse_field_selector(
                ",".join(query.get("fieldSelector", [])), kind
            )
            labels = _parse_label_selector(query)
        except ClusterError as exc:
            raise _ApiFailure(400, "BadRequest", str(exc)) from exc
        matching = [
            obj
            for (plural, ns, _name), obj in sorted(self._objects.items(), key=_fake_key)
            if plural == kind.plural
            and namespace in (None, ns)
            and cluster_rules.matches_field_selector(obj, wanted)
            and _has_labels(obj, labels)
        ]
        start = int(query.get("continue", ["0"])[0])
        limit = int(query.get("limit", ["0"])[0]) or len(matching)
        page = matching[start : start + limit]
        metadata: dict[str, Any] = {"resourceVersion": str(self._resource_version)}
        if start + limit < len(matching):
            metadata["continue"] = str(start + limit)
        items = [{k: v for k, v in obj.items() if k not in ("apiVersion", "kind")} for obj in page]
        return {
            "kind": f"{kind.kind}List",
            "apiVersion": kind.api_version,
            "metadata": metadata,
            "items": items,
        }

    def _create(
        self, kind: cluster_rules.ResourceKind, namespace: str | None, body: Any
    ) -> dict[str, Any]:
        try:
            ns, name = cluster_rules.object_key(kind, body, namespace)
            if kind is cluster_rules.RESOURCE_SLICE:
                body = cluster_rules.drop_disabled_fields(body, self.disabled_gates)
            if (kind.plural, ns, name) in self._objects:
                raise _ApiFailure(
                    409, "AlreadyExists", f'{_resource(kind)} "{name}" already exists'
                )
            new = cluster_rules.prepare_create(kind, body, namespace=ns, keep_uid=False)
        except ClusterError as exc:
            raise _ApiFailure(422, "Invalid", str(exc)) from exc
        self._resource_version += 1
        new["metadata"]["resourceVersion"] = str(self._resource_version)
        self._objects[(kind.plural, ns, name)] = new
        return new

    def _update(
        self,
        kind: cluster_rules.ResourceKind,
        namespace: str | None,
        name: str,
        body: Any,
        *,
        status_only: bool,
    ) -> dict[str, Any]:
        stored = self._get(kind, namespace, name)
        try:
            body_ns, body_name = cluster_rules.object_key(kind, body, namespace)
            if kind is cluster_rules.RESOURCE_SLICE:
                body = cluster_rules.drop_disabled_fields(body, self.disabled_gates)
            if body_name != name:
                raise ClusterError(
                    f"the name of the object ({body_name}) does not match the name on the URL "
                    f"({name})"
                )
            new = cluster_rules.prepare_update(kind, stored, body, status_only=status_only)
            if new is not None and not status_only:
                cluster_rules.check_immutable_spec(kind, stored, new)
        except ConflictError as exc:
            raise _ApiFailure(
                409,
                "Conflict",
                f'Operation cannot be fulfilled on {_resource(kind)} "{name}": '
                f"the object has been modified; please apply your changes to the latest "
                f"version and try again ({exc})",
            ) from exc
        except ClusterError as exc:
            raise _ApiFailure(422, "Invalid", str(exc)) from exc
        if new is None:
            return stored
        self._resource_version += 1
        if cluster_rules.deletion_finished(new):
            del self._objects[(kind.plural, body_ns, name)]
            return new
        new["metadata"]["resourceVersion"] = str(self._resource_version)
        self._objects[(kind.plural, body_ns, name)] = new
        return new

    def _apply_status(
        self,
        namespace: str | None,
        name: str,
        query: dict[str, list[str]],
        raw_body: bytes,
        content_type: str,
    ) -> dict[str, Any]:
        """Server-side apply of a claim's status.devices (the only apply dra-gpu makes)."""
        if content_type.split(";", maxsplit=1)[0].strip() != "application/apply-patch+yaml":
            raise _ApiFailure(
                415,
                "UnsupportedMediaType",
                "the body of the request was in an unknown format - accepted media types "
                f"include: application/apply-patch+yaml (got {content_type!r})",
            )
        manager = (query.get("fieldManager") or [""])[0]
        if not manager:
            raise _ApiFailure(400, "BadRequest", "fieldManager is required for apply requests")
        force = (query.get("force") or ["false"])[0] == "true"
        try:
            body = yaml.safe_load(raw_body)
        except yaml.YAMLError as exc:
            raise _ApiFailure(400, "BadRequest", f"the body is not YAML: {exc}") from exc
        if not isinstance(body, dict):
            raise _ApiFailure(400, "BadRequest", "the body is not an object")
        stored = self._get(cluster_rules.RESOURCE_CLAIM, namespace, name)
        what = cluster_rules.describe(cluster_rules.RESOURCE_CLAIM, namespace, name)
        try:
            cluster_rules.object_key(cluster_rules.RESOURCE_CLAIM, body, namespace)
            new = device_status.apply_device_status(
                stored,
                body,
                field_manager=manager,
                force=force,
                now=cluster_rules.timestamp_now(),
                what=what,
            )
        except ConflictError as exc:
            raise _ApiFailure(409, "Conflict", str(exc)) from exc
        except ClusterError as exc:
            raise _ApiFailure(422, "Invalid", str(exc)) from exc
        if new is None:
            return stored
        self._resource_version += 1
        new["metadata"]["resourceVersion"] = str(self._resource_version)
        self._objects[("resourceclaims", namespace, name)] = new
        return new


def _resource(kind: cluster_rules.ResourceKind) -> str:
    """How the apiserver names a resource in messages: `computedomains.resource.nvidia.com`."""
    group = kind.api_version.split("/")[0] if "/" in kind.api_version else ""
    return f"{kind.plural}.{group}" if group else kind.plural


def _parse_label_selector(query: dict[str, list[str]]) -> dict[str, str]:
    """`a=b,c==d` -> {a: b, c: d}; the equality terms dra-gpu sends, nothing else."""
    wanted: dict[str, str] = {}
    for term in filter(
        None, (t.strip() for t in ",".join(query.get("labelSelector", [])).split(","))
    ):
        if "!=" in term or "(" in term:
            raise ClusterError(f"label selector term {term!r} is not supported by the fake")
        key, sep, value = term.replace("==", "=").partition("=")
        if not sep:
            raise ClusterError(f"label selector term {term!r} has no '='")
        wanted[key] = value
    return wanted


def _has_labels(obj: dict[str, Any], wanted: dict[str, str]) -> bool:
    have = (obj.get("metadata") or {}).get("labels") or {}
    return all(have.get(key) == value for key, value in wanted.items())


def _fake_key(item: tuple[tuple[str, str | None, str], Any]) -> tuple[str, str, str]:
    (plural, namespace, name), _obj = item
    return plural, namespace or "", name


class RecordingCluster:
    """A `Cluster` that forwards to `inner` and records every write call.

    `writes` lists `(method, object name)` in call order, so a test can assert
    that a publish wrote nothing. `before_next(method, hook)` runs `hook` once,
    just before the next call of `method` reaches `inner` (e.g. to change a
    slice behind the caller's back and provoke a real conflict).
    `after_each_write(hook)` runs `hook(method, name)` after every successful
    write (to check what a consumer could see at that moment). `rewrite`, if
    given, maps `(method, obj)` to the object actually forwarded (e.g. to drop
    fields the way an apiserver with a feature gate off does).
    """

    def __init__(
        self,
        inner: Cluster,
        *,
        rewrite: Callable[[str, dict[str, Any]], dict[str, Any]] | None = None,
    ) -> None:
        self.inner = inner
        self.writes: list[tuple[str, str]] = []
        self._hooks: dict[str, list[Callable[[], None]]] = {}
        self._after_write: list[Callable[[str, str], None]] = []
        self._rewrite = rewrite

    def before_next(self, method: str, hook: Callable[[], None]) -> None:
        """Run `hook` right before the next call of `method`."""
        self._hooks.setdefault(method, []).append(hook)

    def after_each_write(self, hook: Callable[[str, str], None]) -> None:
        """Run `hook(method, name)` after every write that succeeded."""
        self._after_write.append(hook)

    def _enter(self, method: str) -> None:
        hooks = self._hooks.get(method)
        if hooks:
            hooks.pop(0)()

    def _write(self, method: str, name: str, call: Callable[[], Any]) -> Any:
        self._enter(method)
        self.writes.append((method, name))
        result = call()
        for hook in self._after_write:
            hook(method, name)
        return result

    def _obj(self, method: str, obj: dict[str, Any]) -> dict[str, Any]:
        return self._rewrite(method, obj) if self._rewrite is not None else obj

    def get_resource_claim(self, namespace: str, name: str) -> dict[str, Any]:
        self._enter("get_resource_claim")
        return self.inner.get_resource_claim(namespace, name)

    def list_resource_claims(self, namespace: str | None = None) -> list[dict[str, Any]]:
        self._enter("list_resource_claims")
        return self.inner.list_resource_claims(namespace)

    def put_resource_claim(self, obj: dict[str, Any]) -> dict[str, Any]:
        method = "put_resource_claim"
        obj = self._obj(method, obj)
        result: dict[str, Any] = self._write(
            method, obj["metadata"]["name"], lambda: self.inner.put_resource_claim(obj)
        )
        return result

    def update_resource_claim_status(self, obj: dict[str, Any]) -> dict[str, Any]:
        method = "update_resource_claim_status"
        obj = self._obj(method, obj)
        result: dict[str, Any] = self._write(
            method, obj["metadata"]["name"], lambda: self.inner.update_resource_claim_status(obj)
        )
        return result

    def apply_resource_claim_status(
        self, obj: dict[str, Any], *, field_manager: str, force: bool = True
    ) -> dict[str, Any]:
        method = "apply_resource_claim_status"
        obj = self._obj(method, obj)
        result: dict[str, Any] = self._write(
            method,
            obj["metadata"]["name"],
            lambda: self.inner.apply_resource_claim_status(
                obj, field_manager=field_manager, force=force
            ),
        )
        return result

    def delete_resource_claim(self, namespace: str, name: str) -> None:
        self._write(
            "delete_resource_claim", name, lambda: self.inner.delete_resource_claim(namespace, name)
        )

    def list_resource_slices(
        self, *, driver: str | None = None, node_name: str | None = None
    ) -> list[dict[str, Any]]:
        self._enter("list_resource_slices")
        return self.inner.list_resource_slices(driver=driver, node_name=node_name)

    def create_resource_slice(self, obj: dict[str, Any]) -> dict[str, Any]:
        method = "create_resource_slice"
        obj = self._obj(method, obj)
        result: dict[str, Any] = self._write(
            method, obj["metadata"]["name"], lambda: self.inner.create_resource_slice(obj)
        )
        return result

    def update_resource_slice(self, obj: dict[str, Any]) -> dict[str, Any]:
        method = "update_resource_slice"
        obj = self._obj(method, obj)
        result: dict[str, Any] = self._write(
            method, obj["metadata"]["name"], lambda: self.inner.update_resource_slice(obj)
        )
        return result

    def delete_resource_slice(self, name: str) -> None:
        self._write("delete_resource_slice", name, lambda: self.inner.delete_resource_slice(name))

    def list_device_classes(self) -> list[dict[str, Any]]:
        self._enter("list_device_classes")
        return self.inner.list_device_classes()

    def put_device_class(self, obj: dict[str, Any]) -> dict[str, Any]:
        method = "put_device_class"
        obj = self._obj(method, obj)
        result: dict[str, Any] = self._write(
            method, obj["metadata"]["name"], lambda: self.inner.put_device_class(obj)
        )
        return result

    def watch_resource_slices(
        self,
        *,
        driver: str,
        node_name: str,
        on_change: Callable[[], None],
        stop: threading.Event,
    ) -> None:
        self.inner.watch_resource_slices(
            driver=driver, node_name=node_name, on_change=on_change, stop=stop
        )

    def get_node(self, name: str) -> dict[str, Any]:
        self._enter("get_node")
        return self.inner.get_node(name)

    def create_event(self, obj: dict[str, Any]) -> dict[str, Any]:
        method = "create_event"
        obj = self._obj(method, obj)
        result: dict[str, Any] = self._write(
            method, obj["metadata"]["name"], lambda: self.inner.create_event(obj)
        )
        return result

    def server_version(self) -> tuple[int, int] | None:
        self._enter("server_version")
        return self.inner.server_version()
