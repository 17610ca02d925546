"""`Cluster` on a real kube-apiserver, through the official `kubernetes` client.

Objects stay plain dicts holding the API's own JSON. Reads and deletes use the
typed `ResourceV1Api` calls with `_preload_content=False`, and the response
body is decoded as it is. Writes send the dict as the request body through the
same `ApiClient`, with the same configuration, auth and TLS. They do not go
through the typed `create_*`/`replace_*` methods, because in client 37 those
validate the body into pydantic models with `extra="forbid"`. Those models
would refuse any field the client does not know (a newer apiserver's claim
status, say) and would rewrite timestamps. What the apiserver returns is
exactly what callers get back, except that list items get the
`apiVersion`/`kind` that the apiserver leaves off them and `kubectl get -o
json` puts back.

Every failure becomes a `ClusterError` that names the object: a 404 becomes
`NotFoundError`, a 409 becomes `ConflictError` (`AlreadyExistsError` when a
create finds the name taken), and anything else carries the HTTP status and
the apiserver's message.

The `ObjectStore` half (`dra_driver.kube.object_store`: ComputeDomains and
their cliques and members, ResourceClaimTemplates, Leases, Nodes, Events)
goes through the same raw requests, by kind: the URL comes from the kind's
group/version and plural, lists take a `labelSelector`. `watch_objects`
runs one watch per kind (list, then watch from the list's resourceVersion),
each in a thread, and calls `on_change` one call at a time; a failed or
expired watch is logged and started again with backoff, never raised.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import os
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final
from urllib.parse import quote

import kubernetes.client
import kubernetes.config
import kubernetes.watch
import kubernetes.watch.watch
import urllib3

from dra_driver.backoff import backoff_delay
from dra_driver.errors import ClusterError, ConfigError, NotFoundError
from dra_driver.kube import apiserver_rules as rules
from dra_driver.kube.apiserver_rules import (
    DEVICE_CLASS,
    EVENT,
    NODE,
    RESOURCE_CLAIM,
    RESOURCE_SLICE,
    ResourceKind,
)
from dra_driver.kube.cluster import API_VERSION, AlreadyExistsError, ConflictError
from dra_driver.kube.objects import Obj

__all__ = ["DEFAULT_REQUEST_TIMEOUT", "WATCH_SECONDS", "KubeCluster", "load_api_client"]

log = logging.getLogger(__name__)

WATCH_SECONDS: Final = 60
"""Server-side timeout of one slice watch; a new one starts right after."""

DEFAULT_REQUEST_TIMEOUT: Final = 30.0
"""Seconds one API request may take before it counts as failed."""


_WATCH_ERRORS: Final = (
    ClusterError,
    kubernetes.client.ApiException,
    urllib3.exceptions.HTTPError,
    OSError,
    ValueError,
)


def _interrupt(watch: kubernetes.watch.Watch) -> None:
    """End `watch`'s blocked read from another thread: shut its response's socket down
    (urllib3's `HTTPResponse.shutdown`, made for this); the watch's own loop then
    closes the response."""
    watch.stop()  # type: ignore[no-untyped-call]
    response = getattr(watch, "_resp", None)
    if response is not None:
        with contextlib.suppress(ValueError, RuntimeError, OSError):
            response.shutdown()


def _api_path(api_version: str) -> str:
    """`/apis/<group>/<version>`, or `/api/v1` for the core group."""
    return f"/apis/{api_version}" if "/" in api_version else f"/api/{api_version}"


_LIST_PAGE_SIZE: Final = 500
APPLY_PATCH: Final = "application/apply-patch+yaml"
"""Content-Type of a server-side apply."""


def load_api_client(kubeconfig: str | None = None) -> kubernetes.client.ApiClient:
    """An `ApiClient` for this process: in-cluster config in a pod, else a kubeconfig.

    An explicit `kubeconfig` wins over the in-cluster config; without one,
    `$KUBECONFIG` or `~/.kube/config` is used outside a pod.
    """
    try:
        if kubeconfig is None and os.environ.get("KUBERNETES_SERVICE_HOST"):
            configuration = kubernetes.client.Configuration()
            kubernetes.config.load_incluster_config(  # type: ignore[no-untyped-call]
                client_configuration=configuration
            )
            return kubernetes.client.ApiClient(configuration)
        client: kubernetes.client.ApiClient = kubernetes.config.new_client_from_config(  # type: ignore[no-untyped-call]
            config_file=kubeconfig
        )
        return client
    except (kubernetes.config.ConfigException, OSError) as exc:
        source = kubeconfig or "in-cluster config / $KUBECONFIG / ~/.kube/config"
        raise ConfigError(f"cannot load Kubernetes client config from {source}: {exc}") from exc


class KubeCluster:
    """`Cluster` talking to kube-apiserver.

    `api_client` is a `kubernetes.client.ApiClient`. Without one, the
    client is built by `load_api_client(kubeconfig)`. `request_timeout`
    bounds each request, so a hung apiserver cannot stall the plugin.
    """

    def __init__(
        self,
        api_client: kubernetes.client.ApiClient | None = None,
        *,
        kubeconfig: str | None = None,
        request_timeout: float = DEFAULT_REQUEST_TIMEOUT,
    ) -> None:
        self._client = api_client if api_client is not None else load_api_client(kubeconfig)
        self._resources = kubernetes.client.ResourceV1Api(self._client)
        self._core = kubernetes.client.CoreV1Api(self._client)
        self._versions = kubernetes.client.VersionApi(self._client)
        self._timeout = request_timeout

    def __repr__(self) -> str:
        return f"KubeCluster({self._client.configuration.host!r})"

    # ResourceClaims

    def get_resource_claim(self, namespace: str, name: str) -> Obj:
        rules.check_name(RESOURCE_CLAIM, namespace, name)
        what = rules.describe(RESOURCE_CLAIM, namespace, name)
        return self._decode(
            what,
            "get",
            lambda: self._resources.read_namespaced_resource_claim(
                name, namespace, **self._raw_options()
            ),
        )

    def list_resource_claims(self, namespace: str | None = None) -> list[Obj]:
        if namespace is None:
            return self._list(
                RESOURCE_CLAIM,
                "ResourceClaims in all namespaces",
                self._resources.list_resource_claim_for_all_namespaces,
            )

        rules.check_namespace(RESOURCE_CLAIM, namespace)

        def list_namespaced(**kwargs: Any) -> Any:
            return self._resources.list_namespaced_resource_claim(namespace, **kwargs)

        return self._list(
            RESOURCE_CLAIM, f"ResourceClaims in namespace {namespace}", list_namespaced
        )

    def put_resource_claim(self, obj: Obj) -> Obj:
        return self._put(RESOURCE_CLAIM, obj)

    def update_resource_claim_status(self, obj: Obj) -> Obj:
        namespace, name = rules.object_key(RESOURCE_CLAIM, obj)
        return self._send(RESOURCE_CLAIM, "PUT", namespace, name, obj, subresource="status")

    def apply_resource_claim_status(
        self, obj: Obj, *, field_manager: str, force: bool = True
    ) -> Obj:
        namespace, name = rules.object_key(RESOURCE_CLAIM, obj)
        query = [("fieldManager", field_manager), ("force", "true" if force else "false")]
        return self._send(
            RESOURCE_CLAIM,
            "PATCH",
            namespace,
            name,
            obj,
            subresource="status",
            query=query,
            content_type=APPLY_PATCH,
        )

    def delete_resource_claim(self, namespace: str, name: str) -> None:
        rules.check_name(RESOURCE_CLAIM, namespace, name)
        what = rules.describe(RESOURCE_CLAIM, namespace, name)
        self._delete(
            what,
            lambda: self._resources.delete_namespaced_resource_claim(
                name, namespace, **self._raw_options()
            ),
        )

    # ResourceSlices

    def list_resource_slices(
        self, *, driver: str | None = None, node_name: str | None = None
    ) -> list[Obj]:
        terms = []
        if driver is not None:
            terms.append(f"spec.driver={driver}")
        if node_name is not None:
            terms.append(f"spec.nodeName={node_name}")
        selector = ",".join(terms)

        def list_slices(**kwargs: Any) -> Any:
            if selector:
                kwargs["field_selector"] = selector
            return self._resources.list_resource_slice(**kwargs)

        what = f"ResourceSlices ({selector})" if selector else "ResourceSlices"
        return self._list(RESOURCE_SLICE, what, list_slices)

    def create_resource_slice(self, obj: Obj) -> Obj:
        _namespace, name = rules.object_key(RESOURCE_SLICE, obj)
        return self._send(RESOURCE_SLICE, "POST", None, name, obj)

    def update_resource_slice(self, obj: Obj) -> Obj:
        _namespace, name = rules.object_key(RESOURCE_SLICE, obj)
        return self._send(RESOURCE_SLICE, "PUT", None, name, obj)

    def delete_resource_slice(self, name: str) -> None:
        rules.check_name(RESOURCE_SLICE, None, name)
        what = rules.describe(RESOURCE_SLICE, None, name)
        self._delete(
            what, lambda: self._resources.delete_resource_slice(name, **self._raw_options())
        )

    def watch_resource_slices(
        self,
        *,
        driver: str,
        node_name: str,
        on_change: Callable[[], None],
        stop: threading.Event,
    ) -> None:
        selector = f"spec.driver={driver},spec.nodeName={node_name}"
        failures = 0
        current: list[kubernetes.watch.Watch] = []  # the running Watch, for the closer
        finished = threading.Event()

        def close_on_stop() -> None:
            # A watch blocks reading until the next event or the server's timeout
            # (WATCH_SECONDS). Shutting the response's socket down ends the read at
            # once; until the loop has seen the stop, a watch that starts meanwhile
            # is ended the same way.
            stop.wait()
            while not finished.is_set():
                for running in list(current):
                    _interrupt(running)
                finished.wait(0.05)

        threading.Thread(target=close_on_stop, name="slice-watch-closer", daemon=True).start()
        try:
            while not stop.is_set():
                watch = kubernetes.watch.Watch()  # type: ignore[no-untyped-call]
                current[:] = [watch]
                try:
                    for event in watch.stream(  # type: ignore[no-untyped-call]
                        self._resources.list_resource_slice,
                        field_selector=selector,
                        timeout_seconds=WATCH_SECONDS,
                        _request_timeout=WATCH_SECONDS + self._timeout,
                        deserialize=False,
                    ):
                        if isinstance(event, dict) and event.get("type") == "ERROR":
                            raise ClusterError(f"watch answered {event.get('raw_object')!r}")
                        failures = 0
                        on_change()
                        if stop.is_set():
                            break
                except Exception as exc:
                    if stop.is_set():
                        return  # the closer ended the read; how urllib3 fails then varies
                    if not isinstance(exc, _WATCH_ERRORS):
                        raise
                    failures += 1
                    delay = backoff_delay(failures)
                    log.warning(
                        "watching ResourceSlices (%s) failed, again in %.1f s: %s",
                        selector,
                        delay,
                        exc,
                    )
                    on_change()  # a change may have been missed: let the caller look
                    stop.wait(delay)
                finally:
                    watch.stop()  # type: ignore[no-untyped-call]
        finally:
            finished.set()

    # Nodes and Events

    def get_node(self, name: str) -> Obj:
        rules.check_name(NODE, None, name)
        return self._decode(
            rules.describe(NODE, None, name),
            "get",
            lambda: self._core.read_node(name, **self._raw_options()),
        )

    def create_event(self, obj: Obj) -> Obj:
        namespace, name = rules.object_key(EVENT, obj)
        return self._send(EVENT, "POST", namespace, name, obj)

    # DeviceClasses

    def list_device_classes(self) -> list[Obj]:
        return self._list(DEVICE_CLASS, "DeviceClasses", self._resources.list_device_class)

    def put_device_class(self, obj: Obj) -> Obj:
        return self._put(DEVICE_CLASS, obj)

    def server_version(self) -> tuple[int, int] | None:
        info = self._decode(
            "apiserver version", "get", lambda: self._versions.get_code(**self._raw_options())
        )
        try:
            return int(info["major"]), _leading_int(info["minor"])
        except (KeyError, TypeError, ValueError) as exc:
            raise ClusterError(
                f"apiserver version: cannot parse major/minor from {info!r}"
            ) from exc

    # ObjectStore (dra_driver.kube.object_store): any kind

    def get_object(self, kind: ResourceKind, namespace: str | None, name: str) -> Obj:
        namespace = namespace if kind.namespaced else None
        rules.check_name(kind, namespace, name)
        return self._send(kind, "GET", namespace, name, None)

    def list_objects(
        self,
        kind: ResourceKind,
        namespace: str | None = None,
        *,
        labels: Mapping[str, str] | None = None,
    ) -> list[Obj]:
        return self._list_kind(kind, namespace, labels)

    def create_object(self, kind: ResourceKind, obj: Obj) -> Obj:
        namespace, name = rules.object_key(kind, obj)
        return self._send(kind, "POST", namespace, name, obj)

    def update_object(self, kind: ResourceKind, obj: Obj) -> Obj:
        namespace, name = rules.object_key(kind, obj)
        return self._send(kind, "PUT", namespace, name, obj)

    def update_object_status(self, kind: ResourceKind, obj: Obj) -> Obj:
        namespace, name = rules.object_key(kind, obj)
        if not kind.has_status:
            raise ClusterError(
                f"{rules.describe(kind, namespace, name)}: a {kind.kind} has no status "
                f"subresource; write it with update_object"
            )
        return self._send(kind, "PUT", namespace, name, obj, subresource="status")

    def delete_object(self, kind: ResourceKind, namespace: str | None, name: str) -> None:
        namespace = namespace if kind.namespaced else None
        rules.check_name(kind, namespace, name)
        with contextlib.suppress(NotFoundError):
            self._send(kind, "DELETE", namespace, name, None)

    def watch_objects(
        self,
        kinds: Sequence[ResourceKind],
        on_change: Callable[[], None],
        stop: threading.Event,
    ) -> None:
        calling = threading.Lock()

        def notify() -> None:
            with calling:
                try:
                    on_change()
                except Exception:
                    log.exception("watching %s: on_change failed", kind_names)

        kind_names = ", ".join(kind.plural for kind in kinds)
        threads = [
            threading.Thread(
                target=self._watch_kind,
                args=(kind, notify, stop),
                name=f"watch-{kind.plural}",
                daemon=True,
            )
            for kind in kinds
        ]
        for thread in threads:
            thread.start()
        stop.wait()
        for thread in threads:
            thread.join(timeout=5)

    def _watch_kind(
        self, kind: ResourceKind, notify: Callable[[], None], stop: threading.Event
    ) -> None:
        """List, then watch from the list's resourceVersion, again and again until `stop`."""
        current: list[Any] = []  # the open watch response, for the closer
        finished = threading.Event()

        def close_on_stop() -> None:
            stop.wait()
            while not finished.is_set():
                for response in list(current):
                    with contextlib.suppress(ValueError, RuntimeError, OSError, AttributeError):
                        response.shutdown()
                finished.wait(0.05)

        threading.Thread(target=close_on_stop, name="object-watch-closer", daemon=True).start()
        failures = 0
        try:
            while not stop.is_set():
                try:
                    version = self._collection_version(kind)
                    notify()  # whatever changed before this watch is in the caller's next look
                    response = self._open_watch(kind, version)
                    current[:] = [response]
                    try:
                        for line in kubernetes.watch.watch.iter_resp_lines(response):  # type: ignore[no-untyped-call]
                            if stop.is_set():
                                break
                            if not line:
                                continue
                            event = json.loads(line)
                            if isinstance(event, dict) and event.get("type") == "ERROR":
                                raise ClusterError(
                                    f"watch of {kind.plural} answered {event.get('object')!r}"
                                )
                            failures = 0
                            notify()
                    finally:
                        current.clear()
                        with contextlib.suppress(Exception):
                            response.release_conn()
                except Exception as exc:
                    if stop.is_set():
                        return  # the closer ended the read
                    failures += 1
                    delay = backoff_delay(failures)
                    # Expected failures (the apiserver, the network) in one line; anything
                    # else with its traceback, but the watch goes on either way.
                    log.warning(
                        "watching %s failed, again in %.1f s: %s",
                        kind.plural,
                        delay,
                        exc,
                        exc_info=not isinstance(exc, _WATCH_ERRORS),
                    )
                    stop.wait(delay)
        finally:
            finished.set()

    def _open_watch(self, kind: ResourceKind, version: str) -> Any:
        """The streaming urllib3 response of a watch of every `kind` object from `version`."""
        query = [("watch", "true"), ("timeoutSeconds", str(WATCH_SECONDS))]
        if version:
            query.append(("resourceVersion", version))
        what = f"{kind.kind} objects"

        def request() -> Any:
            serialized = self._client.param_serialize(
                method="GET",
                resource_path=_collection_path(kind, None),
                header_params={"Accept": "application/json"},
                query_params=query,
                auth_settings=["BearerToken"],
            )
            response = self._client.call_api(
                *serialized, _request_timeout=WATCH_SECONDS + self._timeout
            )
            if not 200 <= response.status <= 299:
                response.read()  # type: ignore[no-untyped-call]
                raise _api_error(what, "watch", response.status, response.reason, response.data)
            return response.response

        return self._call(what, "watch", request)

    def _collection_version(self, kind: ResourceKind) -> str:
        """The resourceVersion to watch `kind` from: a list of one item is enough (the
        caller looks at the objects itself when told of a change)."""
        page = self._request(
            f"{kind.kind} objects",
            "list",
            "GET",
            _collection_path(kind, None),
            query=[("limit", "1")],
            kind=kind,
        )
        return str((page.get("metadata") or {}).get("resourceVersion") or "")

    def _list_kind(
        self,
        kind: ResourceKind,
        namespace: str | None,
        labels: Mapping[str, str] | None,
    ) -> list[Obj]:
        """All objects of `kind` (in `namespace`, with `labels`)."""
        if not kind.namespaced:
            namespace = None
        elif namespace is not None:
            rules.check_namespace(kind, namespace)
        selector = ",".join(f"{key}={value}" for key, value in sorted((labels or {}).items()))
        what = f"{kind.kind} objects"
        if namespace is not None:
            what += f" in namespace {namespace}"
        if selector:
            what += f" with labels {selector}"
        items: list[Obj] = []
        token = ""
        while True:
            query = [("limit", str(_LIST_PAGE_SIZE))]
            if selector:
                query.append(("labelSelector", selector))
            if token:
                query.append(("continue", token))
            page = self._request(
                what, "list", "GET", _collection_path(kind, namespace), query=query, kind=kind
            )
            for item in page.get("items") or []:
                items.append({"apiVersion": kind.api_version, "kind": kind.kind} | item)
            meta = page.get("metadata") or {}
            token = meta.get("continue") or ""
            if not token:
                return items

    # Plumbing

    def _raw_options(self) -> dict[str, Any]:
        return {"_preload_content": False, "_request_timeout": self._timeout}

    def _call(self, what: str, verb: str, request: Callable[[], Any]) -> Any:
        """Run one request; map every failure to a ClusterError naming `what`."""
        try:
            return request()
        except kubernetes.client.ApiException as exc:
            raise _api_error(what, verb, exc.status, exc.reason, exc.body) from exc
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            host = self._client.configuration.host
            raise ClusterError(
                f"{what}: {verb} failed: cannot reach the apiserver at {host}: {exc}"
            ) from exc

    def _decode(self, what: str, verb: str, request: Callable[[], Any]) -> Obj:
        response = self._call(what, verb, request)
        try:
            obj = json.loads(response.data)
        except (ValueError, UnicodeDecodeError) as exc:
            raise ClusterError(
                f"{what}: {verb}: the apiserver's answer is not JSON: {exc}"
            ) from exc
        if not isinstance(obj, dict):
            raise ClusterError(f"{what}: {verb}: the apiserver's answer is not a JSON object")
        return obj

    def _list(self, kind: ResourceKind, what: str, list_call: Callable[..., Any]) -> list[Obj]:
        items: list[Obj] = []
        token: str | None = None
        while True:
            kwargs = self._raw_options() | {"limit": _LIST_PAGE_SIZE}
            if token:
                kwargs["_continue"] = token
            page = self._decode(what, "list", functools.partial(list_call, **kwargs))
            for item in page.get("items") or []:
                # The apiserver omits type meta on list items; kubectl adds it back.
                items.append({"apiVersion": API_VERSION, "kind": kind.kind} | item)
            token = (page.get("metadata") or {}).get("continue")
            if not token:
                return items

    def _delete(self, what: str, request: Callable[[], Any]) -> None:
        try:
            self._call(what, "delete", request)
        except NotFoundError:
            return

    def _put(self, kind: ResourceKind, obj: Obj) -> Obj:
        """Create, or replace when the name is taken (the `put_*` calls of the protocol)."""
        namespace, name = rules.object_key(kind, obj)
        if obj["metadata"].get("resourceVersion") not in (None, ""):
            return self._send(kind, "PUT", namespace, name, obj)
        try:
            return self._send(kind, "POST", namespace, name, obj)
        except AlreadyExistsError:
            return self._send(kind, "PUT", namespace, name, obj)

    def _send(
        self,
        kind: ResourceKind,
        method: str,
        namespace: str | None,
        name: str,
        body: Obj | None,
        *,
        subresource: str | None = None,
        query: list[tuple[str, str]] | None = None,
        content_type: str = "application/json",
    ) -> Obj:
        """POST to the collection, or PUT or PATCH the object (or its subresource); JSON out.

        A server-side apply is a PATCH with `content_type` APPLY_PATCH (the
        client serialises the body as JSON, which is YAML) and the field
        manager in `query`.
        """
        path = _collection_path(kind, namespace)
        if method != "POST":
            path += f"/{quote(name, safe='')}"
        if subresource:
            path += f"/{subresource}"
        what = rules.describe(kind, namespace, name)
        verb = {"POST": "create", "PUT": "update", "PATCH": "apply"}.get(method, method.lower())
        if subresource:
            verb += f" {subresource}"
        return self._request(
            what, verb, method, path, body=body, query=query, content_type=content_type
        )

    def _request(
        self,
        what: str,
        verb: str,
        method: str,
        path: str,
        *,
        body: Obj | None = None,
        query: list[tuple[str, str]] | None = None,
        content_type: str = "application/json",
        kind: ResourceKind | None = None,
    ) -> Obj:
        """One raw request; the JSON answer, or a ClusterError naming `what`."""

        def request() -> Any:
            headers = {"Accept": "application/json"}
            if body is not None:
                headers["Content-Type"] = content_type
            serialized = self._client.param_serialize(
                method=method,
                resource_path=path,
                header_params=headers,
                query_params=query,
                body=body,
                auth_settings=["BearerToken"],
            )
            response = self._client.call_api(*serialized, _request_timeout=self._timeout)
            response.read()  # type: ignore[no-untyped-call]
            if not 200 <= response.status <= 299:
                raise _api_error(
                    what, verb, response.status, response.reason, response.data, kind=kind
                )
            return response

        return self._decode(what, verb, request)


def _collection_path(kind: ResourceKind, namespace: str | None) -> str:
    """The URL path of a kind's collection (in `namespace`; all namespaces when None)."""
    path = _api_path(kind.api_version)
    if kind.namespaced and namespace is not None:
        path += f"/namespaces/{quote(namespace, safe='')}"
    return f"{path}/{kind.plural}"


def _api_error(
    what: str,
    verb: str,
    status: int | None,
    reason: str | None,
    body: str | bytes | None,
    *,
    kind: ResourceKind | None = None,
) -> ClusterError:
    """The ClusterError for an HTTP error answer, with the apiserver's own message."""
    message, status_reason = "", ""
    if body:
        try:
            details = json.loads(body)
        except (ValueError, UnicodeDecodeError):
            details = None
        if isinstance(details, dict):
            message = str(details.get("message") or "")
            status_reason = str(details.get("reason") or "")
        elif isinstance(body, bytes | str):
            message = body.decode("utf-8", "replace") if isinstance(body, bytes) else body
    text = f"{what}: {verb} failed: HTTP {status} {status_reason or reason or ''}".rstrip()
    if message:
        text += f": {message.strip()}"
    if status == 404:
        if verb == "list" and kind is not None and kind.api_version.startswith("resource.nvidia"):
            return ClusterError(
                f"{text} (is the {kind.plural}.{kind.api_version.split('/')[0]} CRD installed? "
                f"`dra-gpu` ships it in dra_driver/data)"
            )
        if verb == "list" and (kind is None or kind.api_version == API_VERSION):
            return ClusterError(
                f"{text} (is {API_VERSION} served? it needs Kubernetes 1.34 or later)"
            )
        return NotFoundError(text)
    if status == 409:
        if status_reason == "AlreadyExists":
            return AlreadyExistsError(text)
        return ConflictError(text)
    return ClusterError(text)


def _leading_int(text: str) -> int:
    """`"34"` or `"34+"` (managed clusters add a plus) → 34."""
    digits = ""
    for char in str(text):
        if not char.isdigit():
            break
        digits += char
    return int(digits)
