"""The kubelet plugin's gRPC servers, driven over real Unix sockets like the kubelet does."""

from __future__ import annotations

import logging
import os
import shutil
import signal
import socket
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from dra_driver.errors import PluginError
from dra_driver.node.health import HealthPolicy
from kubelet_plugin import server as server_module
from kubelet_plugin.gen.dra_health.v1alpha1 import api_pb2 as dra_health_pb2
from kubelet_plugin.gen.dra_health.v1alpha1 import api_pb2_grpc as dra_health_grpc
from kubelet_plugin.health_monitor import HealthMonitor
from kubelet_plugin.health_stream import DeviceHealthServicer
from kubelet_plugin.registration import RegistrationStatus
from kubelet_plugin.server import (
    NO_RESULT_ERROR,
    PluginServer,
    check_claims,
)
from kubelet_plugin.service import ClaimRef, PrepareResult, ResultDevice, UnprepareResult
from tests.fakes import (
    FakeDraService,
    KubeletClient,
    claim_ref,
    fake_result_device,
    wait_until,
)

DRIVER = "gpu.nvidia.com"


@pytest.fixture
def kubelet_root() -> Iterator[Path]:
    # Short paths: a Unix socket path may be at most 107 bytes, pytest's tmp_path is long.
    root = Path(tempfile.mkdtemp(prefix="kr-", dir="/tmp"))
    yield root
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def service() -> FakeDraService:
    return FakeDraService()


@pytest.fixture
def plugin(service: FakeDraService, kubelet_root: Path) -> Iterator[PluginServer]:
    with PluginServer(service, driver_name=DRIVER, kubelet_root=kubelet_root, max_workers=4) as s:
        yield s


@pytest.fixture
def kubelet(plugin: PluginServer, kubelet_root: Path) -> Iterator[KubeletClient]:
    with KubeletClient(kubelet_root, DRIVER, timeout=30) as client:
        yield client


def _stale_socket(path: Path) -> None:
    """Leave a socket file behind, as a crashed plugin does."""
    path.parent.mkdir(parents=True, exist_ok=True)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(str(path))
    sock.close()


# --------------------------------------------------------------------------- registration


def test_get_info_tells_the_kubelet_where_the_dra_api_is(
    kubelet: KubeletClient, kubelet_root: Path
) -> None:
    info = kubelet.get_info()
    assert info.type == "DRAPlugin"
    assert info.name == DRIVER
    assert info.endpoint == str(kubelet_root / "plugins" / DRIVER / "dra.sock")
    assert list(info.supported_versions) == ["v1.DRAPlugin", "v1beta1.DRAPlugin"]


def test_sockets_are_where_the_kubelet_looks(plugin: PluginServer, kubelet_root: Path) -> None:
    assert (kubelet_root / "plugins" / DRIVER / "dra.sock").is_socket()
    assert (kubelet_root / "plugins_registry" / f"{DRIVER}-reg.sock").is_socket()
    assert plugin.dra_socket == kubelet_root / "plugins" / DRIVER / "dra.sock"


def test_successful_registration_is_recorded(plugin: PluginServer, kubelet: KubeletClient) -> None:
    assert plugin.registration_status is None
    assert kubelet.register() == "v1"
    assert plugin.wait_for_registration(timeout=10) == RegistrationStatus(registered=True)
    assert plugin.registration_status == RegistrationStatus(registered=True, error="")


def test_rejected_registration_is_answered_with_a_grpc_error(
    plugin: PluginServer, kubelet: KubeletClient, caplog: pytest.LogCaptureFixture
) -> None:
    with pytest.raises(grpc.RpcError) as failure:
        kubelet.notify_registration(False, "endpoint already registered")
    assert failure.value.code() == grpc.StatusCode.UNKNOWN
    assert "endpoint already registered" in (failure.value.details() or "")
    assert plugin.registration_status == RegistrationStatus(
        registered=False, error="endpoint already registered"
    )
    assert "endpoint already registered" in caplog.text


def test_dra_api_is_served_before_the_registration_socket_appears(
    service: FakeDraService, kubelet_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    registration_socket = kubelet_root / "plugins_registry" / f"{DRIVER}-reg.sock"
    seen_when_registration_appeared: list[str] = []
    real_rename = os.rename

    def rename(source: str | Path, target: str | Path) -> None:
        if Path(target) == registration_socket:
            # The kubelet may call the DRA API the moment the registration socket shows up.
            with KubeletClient(kubelet_root, DRIVER, timeout=10) as early:
                result = early.prepare([claim_ref(1)])
            seen_when_registration_appeared.extend(result)
        real_rename(source, target)

    monkeypatch.setattr(os, "rename", rename)  # the server renames its sockets into place
    with PluginServer(service, driver_name=DRIVER, kubelet_root=kubelet_root):
        assert registration_socket.is_socket()
    assert seen_when_registration_appeared == ["uid-1"]


def test_a_server_started_unexposed_shows_no_socket_until_exposed(
    service: FakeDraService, kubelet_root: Path
) -> None:
    """Binding can fail in every way before the kubelet sees anything (the plugin
    publishes its slices in between)."""
    server = PluginServer(service, driver_name=DRIVER, kubelet_root=kubelet_root)
    server.start(expose=False)
    try:
        assert not server.dra_socket.exists()
        assert not server.registration_socket.exists()
        server.expose()
        with KubeletClient(kubelet_root, DRIVER, timeout=10) as kubelet:
            assert kubelet.get_info().endpoint == str(server.dra_socket)
    finally:
        server.stop()
    assert [p.name for p in (kubelet_root / "plugins_registry").iterdir()] == []


def test_a_server_stopped_before_it_was_exposed_leaves_no_file(
    service: FakeDraService, kubelet_root: Path
) -> None:
    server = PluginServer(service, driver_name=DRIVER, kubelet_root=kubelet_root)
    server.start(expose=False)
    server.stop()
    assert [p.name for p in (kubelet_root / "plugins_registry").iterdir()] == []
    assert [p.name for p in server.dra_socket.parent.iterdir()] == []


# --------------------------------------------------------------------------- socket files


def test_stale_sockets_are_replaced(service: FakeDraService, kubelet_root: Path) -> None:
    dra = kubelet_root / "plugins" / DRIVER / "dra.sock"
    registration = kubelet_root / "plugins_registry" / f"{DRIVER}-reg.sock"
    _stale_socket(dra)
    _stale_socket(registration)
    with (
        PluginServer(service, driver_name=DRIVER, kubelet_root=kubelet_root),
        KubeletClient(kubelet_root, DRIVER, timeout=10) as kubelet,
    ):
        assert kubelet.get_info().name == DRIVER
        assert kubelet.prepare([claim_ref(1)])["uid-1"].error == ""


def test_refuses_to_replace_a_file_that_is_not_a_socket(
    service: FakeDraService, kubelet_root: Path
) -> None:
    registration = kubelet_root / "plugins_registry" / f"{DRIVER}-reg.sock"
    registration.parent.mkdir(parents=True)
    registration.write_text("not a socket")
    plugin = PluginServer(service, driver_name=DRIVER, kubelet_root=kubelet_root)
    with pytest.raises(PluginError, match="is not a socket"):
        plugin.start()
    assert registration.read_text() == "not a socket"
    assert not (kubelet_root / "plugins" / DRIVER / "dra.sock").exists()
    plugin.stop()


def test_sockets_are_removed_on_stop_and_stop_is_idempotent(
    service: FakeDraService, kubelet_root: Path
) -> None:
    plugin = PluginServer(service, driver_name=DRIVER, kubelet_root=kubelet_root)
    plugin.start()
    assert plugin.dra_socket.is_socket()
    assert plugin.registration_socket.is_socket()
    plugin.stop()
    assert not plugin.dra_socket.exists()
    assert not plugin.registration_socket.exists()
    plugin.stop()
    with pytest.raises(PluginError, match="already started"):
        plugin.start()


def test_stop_leaves_a_newer_instances_socket_alone(
    service: FakeDraService, kubelet_root: Path
) -> None:
    plugin = PluginServer(service, driver_name=DRIVER, kubelet_root=kubelet_root)
    plugin.start()
    plugin.registration_socket.unlink()
    _stale_socket(plugin.registration_socket)  # another instance took over the path
    plugin.stop()
    assert plugin.registration_socket.is_socket()
    assert not plugin.dra_socket.exists()


def test_stop_from_a_signal_handler(service: FakeDraService, kubelet_root: Path) -> None:
    plugin = PluginServer(service, driver_name=DRIVER, kubelet_root=kubelet_root)
    plugin.start()

    def on_signal(_signum: int, _frame: object) -> None:
        plugin.stop()
        plugin.stop()

    previous = signal.signal(signal.SIGUSR1, on_signal)
    try:
        signal.raise_signal(signal.SIGUSR1)
    finally:
        signal.signal(signal.SIGUSR1, previous)
    assert not plugin.dra_socket.exists()
    assert not plugin.registration_socket.exists()


def test_stop_during_start_leaves_nothing_behind(
    service: FakeDraService, kubelet_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    plugin = PluginServer(service, driver_name=DRIVER, kubelet_root=kubelet_root)
    real_prepare_socket_path = server_module._prepare_socket_path

    def prepare_socket_path(path: Path) -> None:
        if path == plugin.registration_socket:
            plugin.stop()  # e.g. SIGTERM arriving while the plugin starts up
        real_prepare_socket_path(path)

    monkeypatch.setattr(server_module, "_prepare_socket_path", prepare_socket_path)
    with pytest.raises(PluginError, match="stopped while starting"):
        plugin.start()
    assert sorted(p.name for p in kubelet_root.rglob("*") if not p.is_dir()) == []


def test_graceful_stop_deregisters_first_and_lets_inflight_calls_finish(
    service: FakeDraService, kubelet_root: Path
) -> None:
    plugin = PluginServer(service, driver_name=DRIVER, kubelet_root=kubelet_root)
    plugin.start()
    release = service.gate("uid-1")
    results: list[dict[str, PrepareResult]] = []
    with KubeletClient(kubelet_root, DRIVER, timeout=30) as kubelet:
        call = threading.Thread(target=lambda: results.append(kubelet.prepare([claim_ref(1)])))
        call.start()
        assert service.entered["uid-1"].wait(timeout=10)
        stopper = threading.Thread(target=plugin.stop, kwargs={"grace": 30})
        stopper.start()
        try:
            wait_until(lambda: not plugin.registration_socket.exists(), "the socket removed")
            assert plugin.dra_socket.is_socket()  # still draining the in-flight call
        finally:
            release.set()
            call.join(timeout=30)
            stopper.join(timeout=30)
    assert results == [{"uid-1": PrepareResult(devices=(fake_result_device("uid-1"),))}]
    assert not plugin.dra_socket.exists()


def test_socket_path_too_long_is_refused_clearly(service: FakeDraService) -> None:
    """Refused when the server is built, before the plugin publishes any device."""
    root = Path("/tmp") / ("x" * 90)
    with pytest.raises(PluginError, match="at most 107"):
        PluginServer(service, driver_name=DRIVER, kubelet_root=root)
    assert not root.exists()


# The rule of a ResourceSlice's spec.driver (`dra_driver.kube.names.driver_name_errors`):
# a DNS subdomain once lower-cased, at most 63 characters.
@pytest.mark.parametrize("name", ["", "x" * 60 + ".com", "gpu/nvidia", "-gpu"])
def test_driver_name_must_be_a_dns_subdomain(
    service: FakeDraService, kubelet_root: Path, name: str
) -> None:
    with pytest.raises(PluginError, match="driver name"):
        PluginServer(service, driver_name=name, kubelet_root=kubelet_root)


# --------------------------------------------------------------------------- prepare / unprepare


def test_prepare_v1_returns_devices_and_share_id(
    service: FakeDraService, kubelet: KubeletClient
) -> None:
    shared = ResultDevice(
        request_names=("gpu",),
        pool_name="node-a",
        device_name="gpu-0",
        cdi_device_ids=("k8s.gpu.nvidia.com/claim=uid-1-gpu-0", "k8s.gpu.nvidia.com/common"),
        share_id="7f2c",
    )
    service.results["uid-1"] = PrepareResult(devices=(shared,))
    results = kubelet.prepare([claim_ref(1), claim_ref(2)], version="v1")
    assert results == {
        "uid-1": PrepareResult(devices=(shared,)),
        "uid-2": PrepareResult(devices=(fake_result_device("uid-2"),)),
    }
    assert results["uid-2"].devices[0].share_id is None  # unset on the wire, not ""
    assert service.calls == [("prepare", (claim_ref(1), claim_ref(2)))]


def test_prepare_v1beta1_never_sends_share_id(
    service: FakeDraService, kubelet: KubeletClient
) -> None:
    device = ResultDevice(("gpu",), "node-a", "gpu-3", ("k8s.gpu.nvidia.com/claim=x",), "7f2c")
    service.results["uid-1"] = PrepareResult(devices=(device,))
    results = kubelet.prepare([claim_ref(1)], version="v1beta1")
    assert results == {
        "uid-1": PrepareResult(
            devices=(ResultDevice(("gpu",), "node-a", "gpu-3", ("k8s.gpu.nvidia.com/claim=x",)),)
        )
    }


@pytest.mark.parametrize("version", ["v1", "v1beta1"])
def test_unprepare_reports_each_claim(
    service: FakeDraService, kubelet: KubeletClient, version: str
) -> None:
    service.unprepare_errors["uid-2"] = "CDI spec for claim-2 could not be removed"
    results = kubelet.unprepare([claim_ref(1), claim_ref(2)], version=version)
    assert results == {
        "uid-1": UnprepareResult(),
        "uid-2": UnprepareResult(error="CDI spec for claim-2 could not be removed"),
    }
    assert service.calls == [("unprepare", (claim_ref(1), claim_ref(2)))]


@pytest.mark.parametrize("version", ["v1", "v1beta1"])
def test_per_claim_errors_are_passed_through(
    service: FakeDraService, kubelet: KubeletClient, version: str
) -> None:
    service.results["uid-1"] = PrepareResult(error="claim-1: no MIG placement left on GPU 0")
    results = kubelet.prepare([claim_ref(1), claim_ref(2)], version=version)
    assert results["uid-1"] == PrepareResult(error="claim-1: no MIG placement left on GPU 0")
    assert results["uid-2"].error == ""


@pytest.mark.parametrize("version", ["v1", "v1beta1"])
def test_invalid_claims_get_errors_and_valid_ones_are_still_served(
    service: FakeDraService, kubelet: KubeletClient, version: str
) -> None:
    claims = [
        claim_ref(1),
        ClaimRef(namespace="", uid="uid-2", name="claim-2"),
        ClaimRef(namespace="default", uid="", name="claim-x"),
        claim_ref(3),
        ClaimRef(namespace="default", uid="uid-4", name=""),
        claim_ref(1),  # the kubelet repeating a claim: prepared once
    ]
    results = kubelet.prepare(claims, version=version)
    assert set(results) == {"uid-1", "uid-2", "", "uid-3", "uid-4"}
    assert results["uid-2"].error == "claims[1].namespace is empty"
    assert results[""].error == "claims[2].uid is empty"
    assert results["uid-4"].error == "claims[4].name is empty"
    assert results["uid-1"] == PrepareResult(devices=(fake_result_device("uid-1"),))
    assert results["uid-3"].error == ""
    assert service.calls == [("prepare", (claim_ref(1), claim_ref(3)))]

    unprepared = kubelet.unprepare(claims, version=version)
    assert set(unprepared) == {"uid-1", "uid-2", "", "uid-3", "uid-4"}
    assert unprepared["uid-2"].error == "claims[1].namespace is empty"
    assert service.calls[-1] == ("unprepare", (claim_ref(1), claim_ref(3)))


def test_a_uid_repeated_with_another_name_is_an_error(
    service: FakeDraService, kubelet: KubeletClient
) -> None:
    claims = [claim_ref(1), ClaimRef(namespace="other", uid="uid-1", name="claim-9"), claim_ref(2)]
    results = kubelet.prepare(claims)
    assert set(results) == {"uid-1", "uid-2"}
    assert "claims[1] repeats the uid of claims[0]" in results["uid-1"].error
    assert service.calls == [("prepare", (claim_ref(2),))]


def test_all_claims_invalid_means_the_service_is_not_called(
    service: FakeDraService, kubelet: KubeletClient
) -> None:
    results = kubelet.prepare([ClaimRef(namespace="", uid="", name="")])
    assert results == {"": PrepareResult(error="claims[0].uid is empty")}
    assert kubelet.prepare([]) == {}
    assert service.calls == []


def test_claims_the_service_forgot_get_an_error(
    service: FakeDraService, kubelet: KubeletClient
) -> None:
    service.omit.add("uid-2")
    results = kubelet.prepare([claim_ref(1), claim_ref(2)])
    assert results["uid-2"] == PrepareResult(error=NO_RESULT_ERROR)
    assert results["uid-1"].error == ""
    assert kubelet.unprepare([claim_ref(2)]) == {"uid-2": UnprepareResult(error=NO_RESULT_ERROR)}


def test_answers_for_claims_not_asked_about_are_dropped(kubelet_root: Path) -> None:
    class Chatty(FakeDraService):
        def prepare(self, claims: object) -> dict[str, PrepareResult]:
            return {"uid-1": PrepareResult(), "uid-99": PrepareResult()}

    with (
        PluginServer(Chatty(), driver_name=DRIVER, kubelet_root=kubelet_root),
        KubeletClient(kubelet_root, DRIVER, timeout=10) as kubelet,
    ):
        assert set(kubelet.prepare([claim_ref(1)])) == {"uid-1"}


def test_a_result_protobuf_cannot_carry_fails_only_that_claim(
    service: FakeDraService, kubelet: KubeletClient
) -> None:
    broken = ResultDevice(("gpu",), "node-a", "gpu-0", ("cdi",), share_id=42)  # type: ignore[arg-type]
    service.results["uid-1"] = PrepareResult(devices=(broken,))
    results = kubelet.prepare([claim_ref(1), claim_ref(2)])
    assert results["uid-1"].error.startswith("internal error: invalid prepare result")
    assert results["uid-1"].devices == ()
    assert results["uid-2"].error == ""


@pytest.mark.parametrize("version", ["v1", "v1beta1"])
def test_service_exception_fails_the_claims_not_the_server(
    service: FakeDraService, kubelet: KubeletClient, version: str
) -> None:
    service.raises = RuntimeError("NVML exploded")
    results = kubelet.prepare([claim_ref(1), claim_ref(2)], version=version)
    assert results == {
        "uid-1": PrepareResult(error="internal error: RuntimeError: NVML exploded"),
        "uid-2": PrepareResult(error="internal error: RuntimeError: NVML exploded"),
    }
    unprepared = kubelet.unprepare([claim_ref(1)], version=version)
    assert unprepared == {
        "uid-1": UnprepareResult(error="internal error: RuntimeError: NVML exploded")
    }

    service.raises = None
    assert kubelet.prepare([claim_ref(1)], version=version)["uid-1"].error == ""


def test_dra_gpu_errors_keep_their_message(service: FakeDraService, kubelet: KubeletClient) -> None:
    service.raises = PluginError("checkpoint /var/lib/dra-gpu/checkpoint.json is corrupt")
    results = kubelet.prepare([claim_ref(1)])
    assert results["uid-1"].error == (
        "internal error: checkpoint /var/lib/dra-gpu/checkpoint.json is corrupt"
    )


def test_a_slow_claim_does_not_block_other_calls(
    service: FakeDraService, kubelet: KubeletClient
) -> None:
    release = service.gate("uid-1")
    slow_results: list[dict[str, PrepareResult]] = []
    slow = threading.Thread(target=lambda: slow_results.append(kubelet.prepare([claim_ref(1)])))
    slow.start()
    try:
        assert service.entered["uid-1"].wait(timeout=10)
        # While claim 1 is stuck in the service, the kubelet can still register and prepare.
        assert kubelet.get_info().name == DRIVER
        assert kubelet.prepare([claim_ref(2)])["uid-2"].error == ""
        assert slow_results == []
    finally:
        release.set()
        slow.join(timeout=10)
    assert slow_results[0]["uid-1"].error == ""


def test_calls_are_logged_with_a_request_id(
    kubelet: KubeletClient, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="kubelet_plugin.server"):
        kubelet.prepare([claim_ref(1)])
        kubelet.unprepare([claim_ref(1)])
    messages = [r.getMessage() for r in caplog.records if r.name == "kubelet_plugin.server"]
    assert any(
        m.startswith("request 1: NodePrepareResources[v1] default/claim-1 (uid-1)")
        for m in messages
    )
    assert any(m.startswith("request 2: NodeUnprepareResources[v1]") for m in messages)


def test_kubelet_client_waits_for_a_plugin_that_starts_later(
    service: FakeDraService, kubelet_root: Path
) -> None:
    with KubeletClient(kubelet_root, DRIVER, timeout=30, wait_for_ready=True) as kubelet:
        plugin = PluginServer(service, driver_name=DRIVER, kubelet_root=kubelet_root)
        starter = threading.Timer(0.2, plugin.start)
        starter.start()
        try:
            assert kubelet.prepare([claim_ref(1)])["uid-1"].error == ""
        finally:
            starter.join()
            plugin.stop()


# --------------------------------------------------------------------------- pure checks


def test_check_claims_keeps_request_order_and_reports_every_problem() -> None:
    checked = check_claims(
        [
            claim_ref(2),
            ClaimRef(namespace="", uid="uid-5", name=""),
            claim_ref(1),
            ClaimRef("", "", ""),
            ClaimRef("ns", "", "n"),
        ]
    )
    assert checked.valid == (claim_ref(2), claim_ref(1))
    assert checked.errors == {
        "uid-5": "claims[1].namespace is empty; claims[1].name is empty",
        "": "claims[3].uid is empty; claims[4].uid is empty",
    }


def test_socket_paths_up_to_the_limit_work(service: FakeDraService, kubelet_root: Path) -> None:
    suffix = f"/plugins_registry/{DRIVER}-reg.sock"  # the longer of the two socket paths
    padding = server_module.MAX_UNIX_SOCKET_PATH_BYTES - len(os.fsencode(kubelet_root)) - 1
    root = kubelet_root / ("r" * (padding - len(suffix)))
    with (
        PluginServer(service, driver_name=DRIVER, kubelet_root=root) as plugin,
        KubeletClient(root, DRIVER, timeout=10) as kubelet,
    ):
        assert len(os.fsencode(plugin.registration_socket)) == 107
        assert kubelet.get_info().endpoint == str(plugin.dra_socket)


def test_health_streams_are_capped_and_never_take_the_threads_of_prepare(
    service: FakeDraService, kubelet_root: Path
) -> None:
    monitor = HealthMonitor(None, [], HealthPolicy())
    health = DeviceHealthServicer(monitor, pool_name="node", devices=list)
    plugin = PluginServer(
        service,
        driver_name=DRIVER,
        kubelet_root=kubelet_root,
        max_workers=2,
        max_streams=3,
        health=health,
    )
    plugin.start()
    channel = grpc.insecure_channel(f"unix:{plugin.dra_socket}")
    stub = dra_health_grpc.DRAResourceHealthStub(channel)
    streams = []
    try:
        for _ in range(3):
            stream = stub.NodeWatchResources(dra_health_pb2.NodeWatchResourcesRequest())
            next(stream)  # open and answered; it now waits for a change
            streams.append(stream)
        extra = stub.NodeWatchResources(dra_health_pb2.NodeWatchResourcesRequest(), timeout=10)
        with pytest.raises(grpc.RpcError) as refused:
            next(extra)
        assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        with KubeletClient(kubelet_root, DRIVER, timeout=5) as kubelet:
            started = time.monotonic()
            results = kubelet.prepare([claim_ref(1), claim_ref(2)])
            assert time.monotonic() - started < 5
            assert all(result.error == "" for result in results.values())
        streams.pop().cancel()  # a closed stream frees its place

        def answered() -> bool:
            again = stub.NodeWatchResources(dra_health_pb2.NodeWatchResourcesRequest())
            try:
                next(again)
            except grpc.RpcError as exc:
                if exc.code() != grpc.StatusCode.RESOURCE_EXHAUSTED:
                    raise
                return False
            streams.append(again)
            return True

        wait_until(answered, "a freed stream place")
    finally:
        for stream in streams:
            stream.cancel()
        channel.close()
        plugin.stop(grace=1)


def test_a_claim_error_reaches_the_kubelet_as_one_bounded_line(
    service: FakeDraService, kubelet: KubeletClient
) -> None:
    forged = "bad name\nI1127 10:00:00 prepared fine" + "x" * 100_000
    service.results["uid-1"] = PrepareResult(error=f"claim {forged}: refused")
    error = kubelet.prepare([claim_ref(1)])["uid-1"].error
    assert "\n" not in error
    assert error.startswith("claim bad name\\nI1127 10:00:00 prepared fine")
    assert len(error) < server_module.MAX_ERROR_CHARS + 100


# --------------------------------------------------------------------------- rolling upgrades

OLD_POD = "0d9b7a5e-1c1f-4d55-9a5e-000000000001"
NEW_POD = "0d9b7a5e-1c1f-4d55-9a5e-000000000002"


def test_two_instances_with_pod_uids_serve_side_by_side_and_stop_alone(
    kubelet_root: Path,
) -> None:
    """A rolling upgrade with maxSurge 1: the old and the new pod each serve their own
    sockets in one kubelet root, and the old one's stop removes only its own."""
    old_service, new_service = FakeDraService(), FakeDraService()
    old = PluginServer(old_service, driver_name=DRIVER, kubelet_root=kubelet_root, pod_uid=OLD_POD)
    new = PluginServer(new_service, driver_name=DRIVER, kubelet_root=kubelet_root, pod_uid=NEW_POD)
    assert old.dra_socket.name == f"dra-{OLD_POD}.sock"
    assert old.registration_socket.name == f"{DRIVER}-{OLD_POD}-reg.sock"
    assert {old.dra_socket, old.registration_socket}.isdisjoint(
        {new.dra_socket, new.registration_socket}
    )
    with (
        old,
        new,
        KubeletClient(kubelet_root, DRIVER, timeout=10, pod_uid=OLD_POD) as to_old,
        KubeletClient(kubelet_root, DRIVER, timeout=10, pod_uid=NEW_POD) as to_new,
    ):
        assert to_old.get_info().endpoint == str(old.dra_socket)
        assert to_new.get_info().endpoint == str(new.dra_socket)
        to_old.prepare([claim_ref(1)])
        to_new.unprepare([claim_ref(1)])
        assert [op for op, _ in old_service.calls] == ["prepare"]
        assert [op for op, _ in new_service.calls] == ["unprepare"]

        old.stop()
        assert not old.dra_socket.exists()
        assert not old.registration_socket.exists()
        assert new.dra_socket.is_socket()
        assert new.registration_socket.is_socket()
        assert to_new.get_info().name == DRIVER  # the new instance still answers
    assert sorted(p.name for p in (kubelet_root / "plugins_registry").iterdir()) == []


def test_without_a_pod_uid_the_server_keeps_the_classic_names(
    plugin: PluginServer, kubelet_root: Path
) -> None:
    assert plugin.dra_socket == kubelet_root / "plugins" / DRIVER / "dra.sock"
    assert plugin.registration_socket == kubelet_root / "plugins_registry" / f"{DRIVER}-reg.sock"


@pytest.mark.parametrize(
    ("socket_of", "method"),
    [
        ("registration", "/pluginregistration.Registration/GetInfo"),
        ("registration", "/pluginregistration.Registration/NotifyRegistrationStatus"),
        ("dra", "/k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin/NodePrepareResources"),
    ],
)
def test_garbage_on_a_socket_is_the_callers_fault_logged_as_a_warning(
    plugin: PluginServer,
    kubelet: KubeletClient,
    caplog: pytest.LogCaptureFixture,
    socket_of: str,
    method: str,
) -> None:
    path = plugin.registration_socket if socket_of == "registration" else plugin.dra_socket
    with grpc.insecure_channel(f"unix:{path}") as channel:
        call = channel.unary_unary(method)  # raw bytes in, raw bytes out
        with caplog.at_level(logging.DEBUG), pytest.raises(grpc.RpcError) as failed:
            call(b"\xff\xff\xff\xff not a protobuf message", timeout=10)
    assert isinstance(failed.value, grpc.Call)
    assert failed.value.code() == grpc.StatusCode.INTERNAL
    assert [r for r in caplog.records if r.levelno >= logging.ERROR] == []
    (line,) = [r for r in caplog.records if "malformed" in r.getMessage()]
    assert line.levelno == logging.WARNING
    assert str(path) in line.getMessage()
    assert method in line.getMessage()
    assert kubelet.get_info().name == DRIVER  # and the plugin serves on
