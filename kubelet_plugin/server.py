"""The kubelet plugin's gRPC servers: the DRA API and registration, on Unix sockets.

The kubelet reaches a DRA driver only through two sockets, named by
`kubelet_plugin.socket_names` (per plugin instance when given a pod UID):

- `<kubelet-root>/plugins/<driver>/dra.sock` (`dra-<pod uid>.sock`) serves
  the DRA API (`k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin` and
  `...v1beta1.DRAPlugin`), and, when given a health servicer, the kubelet's
  device-health stream (`v1.DRAResourceHealth` and
  `v1alpha1.DRAResourceHealth`, advertised in `supported_versions`);
- `<kubelet-root>/plugins_registry/<driver>-reg.sock` (with a pod UID, the
  helper's rolling-update name) serves `pluginregistration.Registration`;
  its appearance registers the plugin and its removal deregisters it.

`PluginServer` owns both sockets and translates between protobuf and the
gRPC-free `DraService` interface (`kubelet_plugin.service`). It enforces the
wire rules the kubelet relies on, so the service never has to:

- every requested claim UID gets exactly one entry in the response, and no
  other UID does (the kubelet treats a missing UID as "skipped" and an unknown
  one as an error);
- claims with an empty namespace, uid or name get a per-claim error naming the
  field (`claims[1].namespace is empty`) and are not passed to the service;
  claims with an empty uid are answered under the key "" (the UID the kubelet
  sent); a UID repeated in one request is prepared once, and repeating it with
  a different namespace/name is an error for that UID;
- a service exception becomes a per-claim error for every claim of that call
  (logged with its traceback); it never fails the RPC or the server;
- `share_id` is sent only over v1 and only when the service set it.

Socket files: before binding, a leftover socket (or a dangling symlink) at a
socket path is removed, as the Go helper does; any other file or directory
there is not ours, so `start()` refuses with `PluginError` instead of deleting
it. Each socket is bound under a hidden temporary name in the same directory
and renamed into place once it serves, so the kubelet never sees a socket
nobody answers on. On stop, a socket file is removed only if it is still the
one we bound (a newer plugin instance may already have replaced it); with
per-instance names (a pod UID) an instance never touches another's sockets.

Each socket has its own gRPC server and thread pool, so slow Prepare calls
can neither delay each other beyond the pool size nor the kubelet's 1 s
GetInfo. Deadlines are the kubelet's (45 s per DRA call); none are added here.

Health streams (`NodeWatchResources`, every server-streaming method) hold a
gRPC worker thread for as long as they are open. So they are capped
(`max_streams`, default `MAX_HEALTH_STREAMS`: a kubelet opens one per
plugin instance; more are refused with RESOURCE_EXHAUSTED at once) and the
DRA socket's pool has `max_streams` threads on top of the `max_workers` that
serve Prepare and Unprepare: open streams can never take a Prepare's thread.

Stopping with a `drain` (rolling-upgrade peers): the registration socket
goes first, so the kubelet sends new calls to the other instance, and the
DRA socket keeps serving for `drain` seconds for the calls already on their
way, then finishes the calls in flight within `grace`.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import os
import secrets
import stat
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from types import TracebackType
from typing import Any, NoReturn, Protocol, Self, TypeVar

import grpc

from dra_driver.errors import DraGpuError, PluginError
from dra_driver.kube.names import driver_name_errors
from dra_driver.log_safety import claim_fields, one_line
from kubelet_plugin.gen.dra.v1 import api_pb2 as dra_v1
from kubelet_plugin.gen.dra.v1 import api_pb2_grpc as dra_v1_grpc
from kubelet_plugin.gen.dra.v1beta1 import api_pb2 as dra_v1beta1
from kubelet_plugin.gen.dra.v1beta1 import api_pb2_grpc as dra_v1beta1_grpc
from kubelet_plugin.gen.pluginregistration.v1 import api_pb2_grpc as registration_grpc
from kubelet_plugin.health_stream import SERVICE_NAMES as HEALTH_SERVICE_NAMES
from kubelet_plugin.health_stream import DeviceHealthServicer
from kubelet_plugin.metrics import PluginMetrics
from kubelet_plugin.registration import (
    SUPPORTED_VERSIONS,
    RegistrationServicer,
    RegistrationState,
    RegistrationStatus,
)
from kubelet_plugin.service import ClaimRef, DraService, PrepareResult, UnprepareResult
from kubelet_plugin.socket_names import (
    MAX_SOCKET_PATH_BYTES,
    check_pod_uid,
    dra_socket_path,
    registration_socket_path,
)

log = logging.getLogger("kubelet_plugin.server")

MAX_UNIX_SOCKET_PATH_BYTES = MAX_SOCKET_PATH_BYTES
"""Longest path a Unix socket can be bound to (sun_path is 108 bytes with the NUL)."""

REGISTRATION_WORKERS = 2
"""Threads for the registration socket: the kubelet makes two short calls per registration."""

MAX_HEALTH_STREAMS = 32
"""Open health streams served at once (the kubelet opens one per plugin instance)."""

NO_RESULT_ERROR = "internal error: no result"
MAX_ERROR_CHARS = 4096
"""A claim's error goes to the kubelet as one line of at most this many characters."""


# --------------------------------------------------------------------------- claim checks


@dataclass(frozen=True, slots=True)
class CheckedClaims:
    """A request's claims split into those the service may see and those answered here."""

    valid: tuple[ClaimRef, ...]
    """Claims with all fields set, each UID once, in request order."""
    errors: Mapping[str, str]
    """Error text per UID for claims that must not reach the service."""


def check_claims(claims: Sequence[ClaimRef]) -> CheckedClaims:
    """Validate the claims of one request (see the module docstring for the rules)."""
    first_seen: dict[str, tuple[int, ClaimRef]] = {}
    problems: dict[str, list[str]] = {}
    for index, claim in enumerate(claims):
        if not claim.uid:
            problems.setdefault("", []).append(f"claims[{index}].uid is empty")
            continue
        earlier = first_seen.get(claim.uid)
        if earlier is None:
            first_seen[claim.uid] = (index, claim)
            for field in ("namespace", "name"):
                if not getattr(claim, field):
                    problems.setdefault(claim.uid, []).append(f"claims[{index}].{field} is empty")
        elif earlier[1] != claim:
            problems.setdefault(claim.uid, []).append(
                f"claims[{index}] repeats the uid of claims[{earlier[0]}] "
                f"with a different namespace/name ({claim.namespace}/{claim.name} vs "
                f"{earlier[1].namespace}/{earlier[1].name})"
            )
    valid = tuple(claim for uid, (_, claim) in first_seen.items() if uid not in problems)
    return CheckedClaims(
        valid=valid, errors={uid: "; ".join(texts) for uid, texts in problems.items()}
    )


# --------------------------------------------------------------------------- service calls

_R = TypeVar("_R", PrepareResult, UnprepareResult)


class _ServiceCaller:
    """Runs one validated service call per RPC, with request ids, logging and metrics."""

    def __init__(self, service: DraService, metrics: PluginMetrics | None = None) -> None:
        self._service = service
        self._metrics = metrics
        self._ids = itertools.count(1)

    def next_request_id(self) -> int:
        return next(self._ids)

    def prepare(self, rid: int, api: str, claims: Sequence[ClaimRef]) -> dict[str, PrepareResult]:
        return self._call(
            rid,
            f"NodePrepareResources[{api}]",
            claims,
            self._service.prepare,
            _prepare_error,
            operation="prepare",
        )

    def unprepare(
        self, rid: int, api: str, claims: Sequence[ClaimRef]
    ) -> dict[str, UnprepareResult]:
        return self._call(
            rid,
            f"NodeUnprepareResources[{api}]",
            claims,
            self._service.unprepare,
            _unprepare_error,
            operation="unprepare",
        )

    def _call(
        self,
        rid: int,
        method: str,
        claims: Sequence[ClaimRef],
        call: Callable[[Sequence[ClaimRef]], Mapping[str, _R]],
        make_error: Callable[[str], _R],
        *,
        operation: str,
    ) -> dict[str, _R]:
        if not claims:
            # The kubelet never sends a call without claims; the liveness and readiness
            # probes do, every few seconds, to see the socket answer. Not a Prepare or an
            # Unprepare: neither counted in the metrics nor logged above debug.
            log.debug("request %d: %s without claims (a probe)", rid, method)
            return {}
        if self._metrics is None:
            return self._call_logged(rid, method, claims, call, make_error)
        metrics = self._metrics
        started = time.monotonic()
        with metrics.in_flight.labels(operation).track_inprogress():
            try:
                results = self._call_logged(rid, method, claims, call, make_error)
            except BaseException:
                metrics.requests.labels(operation, "error").inc()
                raise
            finally:
                metrics.request_seconds.labels(operation).observe(time.monotonic() - started)
        failed = sum(1 for result in results.values() if result.error)
        metrics.requests.labels(operation, "error" if failed else "success").inc()
        metrics.claims.labels(operation, "success").inc(len(results) - failed)
        metrics.claims.labels(operation, "error").inc(failed)
        return results

    def _call_logged(
        self,
        rid: int,
        method: str,
        claims: Sequence[ClaimRef],
        call: Callable[[Sequence[ClaimRef]], Mapping[str, _R]],
        make_error: Callable[[str], _R],
    ) -> dict[str, _R]:
        started = time.monotonic()
        log.info("request %d: %s %s", rid, method, ", ".join(map(str, claims)) or "(no claims)")
        checked = check_claims(claims)
        results: dict[str, _R] = {uid: make_error(text) for uid, text in checked.errors.items()}
        if checked.valid:
            results.update(self._results_from_service(rid, method, checked.valid, call, make_error))
        for uid, result in results.items():
            if result.error and one_line(result.error, MAX_ERROR_CHARS) != result.error:
                results[uid] = dataclasses.replace(
                    result, error=one_line(result.error, MAX_ERROR_CHARS)
                )
        failed = {uid: result.error for uid, result in results.items() if result.error}
        refs = {claim.uid: claim for claim in claims}
        for uid, error in failed.items():
            ref = refs.get(uid, ClaimRef("", uid, ""))
            log.warning(
                "request %d: %s claim %r failed: %s",
                rid,
                method,
                uid,
                error,
                extra=claim_fields(ref.namespace, ref.name, uid),
            )
        log.info(
            "request %d: %s done in %.1f ms: %d ok, %d failed",
            rid,
            method,
            (time.monotonic() - started) * 1000,
            len(results) - len(failed),
            len(failed),
        )
        return results

    @staticmethod
    def _results_from_service(
        rid: int,
        method: str,
        claims: tuple[ClaimRef, ...],
        call: Callable[[Sequence[ClaimRef]], Mapping[str, _R]],
        make_error: Callable[[str], _R],
    ) -> dict[str, _R]:
        uids = [claim.uid for claim in claims]
        try:
            returned = call(claims)
            results: dict[str, _R] = {}
            for uid in uids:
                result = returned.get(uid)
                results[uid] = make_error(NO_RESULT_ERROR) if result is None else result
            unexpected = sorted(set(returned) - set(uids))
        except Exception as exc:
            log.exception("request %d: %s: the service raised", rid, method)
            text = str(exc) if isinstance(exc, DraGpuError) else f"{type(exc).__name__}: {exc}"
            return {uid: make_error(f"internal error: {text}") for uid in uids}
        if unexpected:
            log.error(
                "request %d: %s: the service answered for claims it was not asked about "
                "(dropped): %s",
                rid,
                method,
                ", ".join(unexpected),
            )
        return results


def _prepare_error(text: str) -> PrepareResult:
    return PrepareResult(error=text)


def _unprepare_error(text: str) -> UnprepareResult:
    return UnprepareResult(error=text)


# --------------------------------------------------------------------------- protobuf conversion


class _ProtoClaim(Protocol):
    """The `Claim` message of either DRA API version."""

    @property
    def namespace(self) -> str: ...
    @property
    def uid(self) -> str: ...
    @property
    def name(self) -> str: ...


def _claim_refs(claims: Iterable[_ProtoClaim]) -> list[ClaimRef]:
    return [ClaimRef(namespace=c.namespace, uid=c.uid, name=c.name) for c in claims]


_PrepareResponse = TypeVar(
    "_PrepareResponse",
    dra_v1.NodePrepareResourcesResponse,
    dra_v1beta1.NodePrepareResourcesResponse,
)


def _prepare_response(
    response: _PrepareResponse,
    rid: int,
    results: Mapping[str, PrepareResult],
    *,
    share_id: bool,
) -> _PrepareResponse:
    """Fill either API version's NodePrepareResourcesResponse (the same shape in both,
    except that only v1 has `share_id`: kubelets speaking v1beta1 predate shared devices)."""
    for uid, result in results.items():
        entry = response.claims[uid]
        try:
            for device in result.devices:
                fields: dict[str, Any] = {
                    "request_names": device.request_names,
                    "pool_name": device.pool_name,
                    "device_name": device.device_name,
                    "cdi_device_ids": device.cdi_device_ids,
                }
                if share_id:
                    fields["share_id"] = device.share_id
                entry.devices.add(**fields)
        except (TypeError, ValueError) as exc:
            del entry.devices[:]
            entry.error = _invalid_result(rid, uid, exc)
            continue
        entry.error = result.error
    return response


def _invalid_result(rid: int, uid: str, exc: Exception) -> str:
    """A service result protobuf cannot carry fails that claim, not the whole call."""
    log.error("request %d: claim %r: the service returned an invalid result: %s", rid, uid, exc)
    return f"internal error: invalid prepare result: {exc}"


_T = TypeVar("_T")


def _abort_internal(context: grpc.ServicerContext, rid: int) -> NoReturn:
    context.abort(grpc.StatusCode.INTERNAL, f"request {rid}: internal error, see plugin log")


def _handle(
    caller: _ServiceCaller,
    context: grpc.ServicerContext,
    method: str,
    handler: Callable[[int], _T],
) -> _T:
    """Run one RPC under a fresh request id; a bug in it is an INTERNAL error, not a crash."""
    rid = caller.next_request_id()
    try:
        return handler(rid)
    except Exception:
        log.exception("request %d: %s failed", rid, method)
    _abort_internal(context, rid)


_UnprepareResponse = TypeVar(
    "_UnprepareResponse",
    dra_v1.NodeUnprepareResourcesResponse,
    dra_v1beta1.NodeUnprepareResourcesResponse,
)


def _unprepare_response(
    response: _UnprepareResponse, results: Mapping[str, UnprepareResult]
) -> _UnprepareResponse:
    """Fill either API version's NodeUnprepareResourcesResponse (the same shape in both)."""
    for uid, result in results.items():
        response.claims[uid].error = result.error
    return response


class _DraV1Servicer(dra_v1_grpc.DRAPluginServicer):
    def __init__(self, caller: _ServiceCaller) -> None:
        self._caller = caller

    def NodePrepareResources(
        self, request: dra_v1.NodePrepareResourcesRequest, context: grpc.ServicerContext
    ) -> dra_v1.NodePrepareResourcesResponse:
        def handle(rid: int) -> dra_v1.NodePrepareResourcesResponse:
            results = self._caller.prepare(rid, "v1", _claim_refs(request.claims))
            return _prepare_response(
                dra_v1.NodePrepareResourcesResponse(), rid, results, share_id=True
            )

        return _handle(self._caller, context, "NodePrepareResources[v1]", handle)

    def NodeUnprepareResources(
        self, request: dra_v1.NodeUnprepareResourcesRequest, context: grpc.ServicerContext
    ) -> dra_v1.NodeUnprepareResourcesResponse:
        def handle(rid: int) -> dra_v1.NodeUnprepareResourcesResponse:
            results = self._caller.unprepare(rid, "v1", _claim_refs(request.claims))
            return _unprepare_response(dra_v1.NodeUnprepareResourcesResponse(), results)

        return _handle(self._caller, context, "NodeUnprepareResources[v1]", handle)


class _DraV1beta1Servicer(dra_v1beta1_grpc.DRAPluginServicer):
    def __init__(self, caller: _ServiceCaller) -> None:
        self._caller = caller

    def NodePrepareResources(
        self, request: dra_v1beta1.NodePrepareResourcesRequest, context: grpc.ServicerContext
    ) -> dra_v1beta1.NodePrepareResourcesResponse:
        def handle(rid: int) -> dra_v1beta1.NodePrepareResourcesResponse:
            results = self._caller.prepare(rid, "v1beta1", _claim_refs(request.claims))
            return _prepare_response(
                dra_v1beta1.NodePrepareResourcesResponse(), rid, results, share_id=False
            )

        return _handle(self._caller, context, "NodePrepareResources[v1beta1]", handle)

    def NodeUnprepareResources(
        self, request: dra_v1beta1.NodeUnprepareResourcesRequest, context: grpc.ServicerContext
    ) -> dra_v1beta1.NodeUnprepareResourcesResponse:
        def handle(rid: int) -> dra_v1beta1.NodeUnprepareResourcesResponse:
            results = self._caller.unprepare(rid, "v1beta1", _claim_refs(request.claims))
            return _unprepare_response(dra_v1beta1.NodeUnprepareResourcesResponse(), results)

        return _handle(self._caller, context, "NodeUnprepareResources[v1beta1]", handle)


# --------------------------------------------------------------------------- the server


class _State(Enum):
    NEW = "new"
    STARTING = "starting"
    RUNNING = "running"
    STOPPED = "stopped"


@dataclass(slots=True)
class _Listener:
    """One started gRPC server and the socket file it bound."""

    server: grpc.Server
    executor: ThreadPoolExecutor
    socket: Path
    private: Path  # the hidden name it was bound under, until exposed
    identity: tuple[int, int, int] | None = None  # of the socket file in place, once exposed


class PluginServer:
    """Serves a `DraService` to the kubelet: DRA socket first, then registration.

    Use as a context manager, or call `start()` and `stop()`. `stop()` may be
    called more than once, from any thread, and from a signal handler (also
    one that interrupts `start()`, which then raises `PluginError`).
    """

    def __init__(
        self,
        service: DraService,
        *,
        driver_name: str,
        kubelet_root: Path,
        max_workers: int = 16,
        health: DeviceHealthServicer | None = None,
        metrics: PluginMetrics | None = None,
        max_streams: int = MAX_HEALTH_STREAMS,
        drain: float = 0.0,
        pod_uid: str | None = None,
    ) -> None:
        if errors := driver_name_errors(driver_name):
            raise PluginError(f"driver name {driver_name!r}: {'; '.join(errors)}")
        if max_workers < 1:
            raise PluginError(f"max_workers must be at least 1, got {max_workers}")
        self.driver_name = driver_name
        self.kubelet_root = Path(os.path.abspath(kubelet_root))
        if pod_uid:
            check_pod_uid(pod_uid)
        self.pod_uid = pod_uid or None
        self.dra_socket = dra_socket_path(self.kubelet_root, driver_name, self.pod_uid)
        self.registration_socket = registration_socket_path(
            self.kubelet_root, driver_name, self.pod_uid
        )
        for path in (self.dra_socket, self.registration_socket):
            _check_socket_path_length(path)
        self._max_workers = max_workers
        self._streams = _StreamLimit(max_streams)
        self._drain = drain
        self._caller = _ServiceCaller(service, metrics)
        self._health = health
        self._registration = RegistrationState()
        self._lock = threading.RLock()  # re-entrant: a signal handler may call stop() in start()
        self._state = _State.NEW
        self._listeners: list[_Listener] = []

    @property
    def registration_status(self) -> RegistrationStatus | None:
        """What the kubelet last reported via NotifyRegistrationStatus (None: nothing yet)."""
        return self._registration.status

    def wait_for_registration(self, timeout: float | None = None) -> RegistrationStatus | None:
        """Block until the kubelet reports a registration status or `timeout` passes."""
        return self._registration.wait(timeout)

    def start(self, *, expose: bool = True) -> None:
        """Create both sockets and serve; raise PluginError if that is impossible.

        With `expose=False` both servers run under hidden names, so that every
        way binding can fail has been tried while the kubelet sees nothing yet;
        `expose()` then puts the sockets in place (the DRA socket first).
        """
        with self._lock:
            if self._state is not _State.NEW:
                raise PluginError(
                    f"plugin server for {self.driver_name} was already started "
                    "(a PluginServer serves once; create a new one)"
                )
            self._state = _State.STARTING
        try:
            self._listen(
                self.dra_socket,
                self._max_workers + self._streams.limit,  # streams never take Prepare's threads
                "dra-grpc",
                self._add_dra_servicers,
                interceptors=(self._streams,),
            )
            self._listen(
                self.registration_socket,
                REGISTRATION_WORKERS,
                "registration-grpc",
                self._add_registration_servicer,
            )
        except BaseException:
            with self._lock:
                self._state = _State.STOPPED
            self._shutdown(grace=0)
            raise
        with self._lock:
            if self._state is _State.STARTING:
                self._state = _State.RUNNING
        if expose:
            self.expose()

    def expose(self) -> None:
        """Rename the started servers' sockets into place (see `start`); PluginError if one
        cannot be (the servers are then stopped)."""
        with self._lock:
            listeners = [listener for listener in self._listeners if listener.identity is None]
        try:
            for listener in listeners:
                try:
                    os.rename(listener.private, listener.socket)
                    listener.identity = _socket_identity(listener.socket)
                except OSError as exc:
                    raise PluginError(f"{listener.socket}: cannot listen: {exc}") from exc
        except BaseException:
            self.stop(grace=0)
            raise
        log.info(
            "serving %s: DRA API on %s, registration on %s",
            self.driver_name,
            self.dra_socket,
            self.registration_socket,
        )

    def stop(self, grace: float = 5.0) -> None:
        """Deregister, let in-flight DRA calls finish for up to `grace` seconds, remove sockets.

        Returns at once if the server is stopped or being stopped already.
        """
        with self._lock:
            if self._state is _State.STOPPED:
                return
            self._state = _State.STOPPED
        if self._health is not None:
            self._health.close()  # health streams would otherwise hold the grace period
        self._shutdown(grace)
        log.info("stopped serving %s", self.driver_name)

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()

    # ------------------------------------------------------------------ internals

    def _add_dra_servicers(self, server: grpc.Server) -> None:
        dra_v1_grpc.add_DRAPluginServicer_to_server(_DraV1Servicer(self._caller), server)
        dra_v1beta1_grpc.add_DRAPluginServicer_to_server(_DraV1beta1Servicer(self._caller), server)
        if self._health is not None:
            self._health.add_to_server(server)

    def _add_registration_servicer(self, server: grpc.Server) -> None:
        versions: tuple[str, ...] = SUPPORTED_VERSIONS
        if self._health is not None:
            versions = (*versions, *HEALTH_SERVICE_NAMES)
        servicer = RegistrationServicer(
            driver_name=self.driver_name,
            endpoint=self.dra_socket,
            state=self._registration,
            supported_versions=versions,
        )
        registration_grpc.add_RegistrationServicer_to_server(servicer, server)

    def _listen(
        self,
        socket_path: Path,
        workers: int,
        thread_prefix: str,
        add_servicers: Callable[[grpc.Server], None],
        interceptors: Sequence[grpc.ServerInterceptor] = (),
    ) -> None:
        _prepare_socket_path(socket_path)
        # gRPC unlinks the path it bound when it shuts down, even if another
        # plugin instance has put its own socket there since. So bind to a hidden
        # private name (the kubelet's plugin watcher ignores dot files), start
        # serving, then rename the socket into place (`expose`): it appears
        # already serving, and gRPC's unlink at shutdown hits the private name,
        # long gone.
        private = socket_path.with_name(f".{secrets.token_hex(4)[:7]}")
        executor = ThreadPoolExecutor(max_workers=workers, thread_name_prefix=thread_prefix)
        server = grpc.server(executor, interceptors=list(interceptors))
        add_servicers(server)
        try:
            if not server.add_insecure_port(f"unix:{private}"):
                raise PluginError(f"{socket_path}: cannot listen")
            server.start()
        except BaseException as exc:
            server.stop(0).wait()
            executor.shutdown(wait=False)
            private.unlink(missing_ok=True)
            if isinstance(exc, RuntimeError | OSError):
                raise PluginError(f"{socket_path}: cannot listen: {exc}") from exc
            raise
        listener = _Listener(server, executor, socket_path, private)
        with self._lock:
            self._listeners.append(listener)
            stopped = self._state is _State.STOPPED
        if stopped:
            raise PluginError(f"plugin server for {self.driver_name} was stopped while starting")
        log.debug("listening on %s", socket_path)

    def _shutdown(self, grace: float) -> None:
        """Stop the listeners, registration first (that deregisters us), and remove sockets."""
        with self._lock:
            listeners, self._listeners = self._listeners, []
        for index, listener in enumerate(reversed(listeners)):
            if index == 1 and self._drain > 0 and grace > 0:
                time.sleep(self._drain)  # deregistered: let calls on their way land here
            listener.server.stop(grace).wait()
            listener.executor.shutdown(wait=False)
            if listener.identity is None:
                listener.private.unlink(missing_ok=True)
            else:
                _remove_own_socket(listener.socket, listener.identity)


class _StreamLimit(grpc.ServerInterceptor):
    """Refuses server-streaming calls beyond `limit` open ones with RESOURCE_EXHAUSTED."""

    def __init__(self, limit: int) -> None:
        if limit < 1:
            raise PluginError(f"max_streams must be at least 1, got {limit}")
        self.limit = limit
        self._open = threading.BoundedSemaphore(limit)

    def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], grpc.RpcMethodHandler[Any, Any] | None],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler[Any, Any] | None:
        handler = continuation(handler_call_details)
        if handler is None or handler.unary_stream is None:
            return handler
        stream = handler.unary_stream
        method = handler_call_details.method

        def limited(request: Any, context: grpc.ServicerContext) -> Iterable[Any]:
            if not self._open.acquire(blocking=False):
                log.warning("%s: refused, %d streams are open already", method, self.limit)
                context.abort(
                    grpc.StatusCode.RESOURCE_EXHAUSTED,
                    f"{self.limit} streams are open already; a kubelet needs one per plugin",
                )
            try:
                yield from stream(request, context)
            finally:
                self._open.release()

        return grpc.unary_stream_rpc_method_handler(
            limited,
            request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer,
        )


def _check_socket_path_length(path: Path) -> None:
    size = len(os.fsencode(path))
    if size > MAX_UNIX_SOCKET_PATH_BYTES:
        raise PluginError(
            f"{path}: socket path is {size} bytes long; Unix sockets allow at most "
            f"{MAX_UNIX_SOCKET_PATH_BYTES} (use a shorter kubelet root directory)"
        )


def _prepare_socket_path(path: Path) -> None:
    """Make the parent directory and clear a stale socket; refuse to clobber anything else."""
    _check_socket_path_length(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        info = path.lstat()
    except FileNotFoundError:
        return
    except OSError as exc:
        raise PluginError(f"{path}: cannot prepare the socket location: {exc}") from exc
    dangling_link = stat.S_ISLNK(info.st_mode) and not path.exists()
    if not (stat.S_ISSOCK(info.st_mode) or dangling_link):
        raise PluginError(
            f"{path}: exists and is not a socket; refusing to replace it (remove it by hand)"
        )
    try:
        path.unlink()
    except FileNotFoundError:
        return
    except OSError as exc:
        raise PluginError(f"{path}: cannot remove the stale socket: {exc}") from exc
    log.info("removed stale socket %s", path)


def _socket_identity(path: Path) -> tuple[int, int, int]:
    """Device, inode and change time: tells our socket file from a newer one at the same path.

    The inode alone is not enough, because a file created right after ours was
    removed often gets the same inode number.
    """
    info = path.lstat()
    return (info.st_dev, info.st_ino, info.st_ctime_ns)


def _remove_own_socket(path: Path, identity: tuple[int, int, int]) -> None:
    """Remove the socket file if it is still the one we bound."""
    try:
        if _socket_identity(path) == identity:
            path.unlink()
    except FileNotFoundError:
        return
    except OSError as exc:
        log.warning("could not remove socket %s: %s", path, exc)
