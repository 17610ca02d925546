"""status.devices after Prepare, through the real client and the fake apiserver's rules.

Prepare's answer never waits for, or fails because of, the status write: a
failed write is retried, a Prepare error becomes `Ready=False` with the error,
a dynamic MIG device reports its live UUID and a share its shareID, and
repeating Prepare does not rewrite (or re-date) the status.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from types import MappingProxyType
from typing import Any

import pytest

from dra_driver.claims.checkpoint import (
    Checkpoint,
    ClaimEntry,
    ClaimState,
    MigRecord,
    MpsRecord,
    PreparedDevice,
    TimeSliceRecord,
)
from dra_driver.claims.device_status import device_data
from dra_driver.errors import ClusterError
from dra_driver.kube.api_store import KubeCluster
from dra_driver.kube.local_store import LocalCluster
from dra_driver.node.devices import build_devices
from kubelet_plugin.claim_status import SETTLE_S, ClaimStatusService, ClaimStatusWriter
from kubelet_plugin.metrics import PluginMetrics
from kubelet_plugin.service import ClaimRef, PrepareResult
from kubelet_plugin.usage_sampler import ClaimPods
from tests.fakes import (
    TEST_POOL,
    FakeApiServer,
    FakeDraService,
    dgx_h100_inventory,
    make_allocated_claim,
    make_opaque_config,
)

DRIVER = "gpu.nvidia.com"
UID = "0b7cf0d2-5d1e-4c61-9a0e-3f5a1c2b7d90"
SHARE = "0d5c7e9a-1b3f-4d6e-8a0c-000000000001"
DEVICES = build_devices(dgx_h100_inventory(), dynamic_mig=True)
MIG = "gpu-3-mig-1g10gb-19-0"


def _prepared(uid: str, *devices: PreparedDevice) -> Checkpoint:
    entry = ClaimEntry(
        uid=uid, namespace="ml", name="train", state=ClaimState.PrepareCompleted, devices=devices
    )
    return Checkpoint(boot_id="b", claims={uid: entry})


def _device(name: str, **fields: Any) -> PreparedDevice:
    return PreparedDevice(
        request_names=("gpu",), pool=TEST_POOL, device=name, cdi_device_ids=(), **fields
    )


MIG_RECORD = MigRecord(
    parent_uuid=next(d.gpu.uuid for d in DEVICES if d.name == "gpu-3"),
    profile_id=19,
    placement_start=0,
    placement_size=1,
    created_by_us=True,
    gi_id=9,
    ci_id=0,
    uuid="MIG-5b1c7d2e-0000-5000-8000-000000000001",
)


class _Setup:
    def __init__(self, server: FakeApiServer) -> None:
        self.server = server
        self.client = server.api_client()
        self.cluster = KubeCluster(self.client)
        self.inner = FakeDraService()
        self.checkpoint = Checkpoint(boot_id="b")
        self.uid = UID  # the stored claim's, once `store` made it (the apiserver picks it)
        self.pods = ClaimPods()
        self.metrics = PluginMetrics()
        self.writer = ClaimStatusWriter(
            self.cluster,
            driver_name=DRIVER,
            pool_name=TEST_POOL,
            claim_pods=self.pods,
            metrics=self.metrics,
        )
        self.service = ClaimStatusService(
            self.inner,
            self.writer,
            prepared=lambda: self.checkpoint,
            devices=lambda: DEVICES,
            driver_name=DRIVER,
            node_name=TEST_POOL,
        )

    def store(self, results: list[Any]) -> None:
        claim = make_allocated_claim("train", "ml", UID, results)
        claim["status"]["reservedFor"] = [{"resource": "pods", "name": "train-0", "uid": "p-1"}]
        claim["metadata"].pop("resourceVersion")
        status = claim.pop("status")
        stored = self.cluster.put_resource_claim(claim)
        self.uid = stored["metadata"]["uid"]
        stored["status"] = status
        self.cluster.update_resource_claim_status(stored)

    def ref(self) -> ClaimRef:
        return ClaimRef("ml", self.uid, "train")

    def devices(self) -> list[dict[str, Any]]:
        self.writer.wait_idle(20)
        claim = self.cluster.get_resource_claim("ml", "train")
        return list((claim.get("status") or {}).get("devices") or [])

    def writes(self) -> list[str]:
        return [path for method, path in self.server.requests if method == "PATCH"]


@pytest.fixture
def setup() -> Iterator[_Setup]:
    with FakeApiServer(version=("1", "37")) as server:
        made = _Setup(server)
        try:
            yield made
        finally:
            made.writer.close()
            made.client.close()


def test_a_prepared_claim_reports_ready_with_its_uuids(setup: _Setup) -> None:
    setup.store([("gpu", "gpu-0"), ("mig", MIG)])
    setup.checkpoint = _prepared(setup.uid, _device("gpu-0"), _device(MIG, mig=MIG_RECORD))
    ref = setup.ref()
    setup.service.prepare([ref])
    gpu, mig = setup.devices()
    assert (gpu["driver"], gpu["pool"], gpu["device"]) == (DRIVER, TEST_POOL, "gpu-0")
    (ready,) = gpu["conditions"]
    assert (ready["type"], ready["status"], ready["reason"]) == ("Ready", "True", "Prepared")
    assert ready["lastTransitionTime"].endswith("Z")
    assert gpu["data"]["uuid"] == next(d.gpu.uuid for d in DEVICES if d.name == "gpu-0")
    assert gpu["data"]["type"] == "gpu"
    assert mig["data"] == {
        "version": "v1",
        "type": "mig",
        "uuid": MIG_RECORD.uuid,
        "parentUUID": MIG_RECORD.parent_uuid,
        "profile": "1g.10gb",
        "gpuInstanceId": 9,
        "computeInstanceId": 0,
    }
    claim = setup.cluster.get_resource_claim("ml", "train")
    assert [m["manager"] for m in claim["metadata"]["managedFields"]] == [DRIVER]
    assert setup.pods.snapshot()[setup.uid][0].name == "train-0"  # reservedFor from the answer


def test_a_share_reports_its_share_id_and_sharing(setup: _Setup) -> None:
    setup.store([{"request": "gpu", "device": "gpu-1", "shareID": SHARE}])
    mps = MpsRecord(
        device_uuid="GPU-1",
        gpu_uuid="GPU-1",
        daemon_dir="/var/lib/kubelet/plugins/gpu.nvidia.com/mps/GPU-1",
        device_memory_mib=81559,
        active_thread_percentage=25,
        pinned_memory_mib=20480,
    )
    setup.checkpoint = _prepared(
        setup.uid,
        _device(
            "gpu-1",
            share_id=SHARE,
            mps=mps,
            time_slice=TimeSliceRecord("GPU-1", "Long"),
            consumed_capacity=MappingProxyType({"memory": "20Gi"}),
        ),
    )
    setup.service.prepare([setup.ref()])
    (entry,) = setup.devices()
    assert entry["shareID"] == SHARE
    assert entry["data"]["shareID"] == SHARE
    assert entry["data"]["mps"] == {
        "pipeDirectory": "/tmp/nvidia-mps",
        "hostPipeDirectory": "/var/lib/kubelet/plugins/gpu.nvidia.com/mps/GPU-1/pipe",
        "activeThreadPercentage": 25,
        "pinnedMemoryMiB": 20480,
    }
    assert entry["data"]["timeSlice"] == "Long"


def test_a_failed_prepare_reports_not_ready_with_the_error(setup: _Setup) -> None:
    setup.store([("gpu", "gpu-0"), {"request": "gpu", "device": "gpu-1", "shareID": SHARE}])
    setup.inner.results[setup.uid] = PrepareResult(error="gpu-0: MIG mode is pending a reset")
    result = setup.service.prepare([setup.ref()])
    assert result[setup.uid].error  # the kubelet gets the error as before
    entries = setup.devices()
    assert [(e["device"], e.get("shareID")) for e in entries] == [("gpu-0", None), ("gpu-1", SHARE)]
    for entry in entries:
        (ready,) = entry["conditions"]
        assert (ready["status"], ready["reason"]) == ("False", "PrepareFailed")
        assert ready["message"] == "gpu-0: MIG mode is pending a reset"


def test_a_repeated_prepare_keeps_the_status_and_its_transition_time(setup: _Setup) -> None:
    setup.store([("gpu", "gpu-0")])
    setup.checkpoint = _prepared(setup.uid, _device("gpu-0"))
    ref = setup.ref()
    setup.service.prepare([ref])
    (first,) = setup.devices()
    setup.service.prepare([ref])
    (again,) = setup.devices()
    assert again == first
    assert len(setup.writes()) == 1  # nothing new to say: no second write


def test_status_writes_are_retried_and_never_delay_prepare(setup: _Setup) -> None:
    setup.store([("gpu", "gpu-0")])
    setup.checkpoint = _prepared(setup.uid, _device("gpu-0"))
    setup.server.fail_next("PATCH", 503, "ServiceUnavailable")
    setup.server.fail_next("PATCH", 500, "InternalError")
    result = setup.service.prepare([setup.ref()])
    assert not result[setup.uid].error
    assert setup.writer.wait_idle(30)
    (entry,) = setup.devices()
    assert entry["conditions"][0]["status"] == "True"
    assert len(setup.writes()) == 3
    assert setup.metrics.status_writes.labels("success")._value.get() == 1


def test_a_service_that_raises_while_reporting_still_answers(setup: _Setup) -> None:
    def broken() -> Checkpoint:
        raise RuntimeError("checkpoint unreadable")

    service = ClaimStatusService(
        setup.inner,
        setup.writer,
        prepared=broken,
        devices=lambda: DEVICES,
        driver_name=DRIVER,
        node_name=TEST_POOL,
    )
    result = service.prepare([ClaimRef("ml", UID, "train")])
    assert not result[UID].error


def test_a_deleted_claim_is_given_up_quietly(setup: _Setup) -> None:
    setup.checkpoint = _prepared(setup.uid, _device("gpu-0"))
    setup.service.prepare([setup.ref()])  # no such claim in the apiserver
    assert setup.writer.wait_idle(20)
    assert setup.metrics.status_writes.labels("gone")._value.get() == 1


def test_the_data_of_a_whole_gpu_is_small_and_an_object() -> None:
    data = device_data(_device("gpu-0"), next(d for d in DEVICES if d.name == "gpu-0"))
    assert isinstance(data, dict)
    assert len(str(data)) < 10 * 1024


# --------------------------------------------------------------------------- races and faults


class _StubCluster:
    """Records applies; can fail them, or hold one open until `release` is set."""

    def __init__(self) -> None:
        self.applies: list[tuple[float, dict[str, Any]]] = []
        self.failures: list[Exception] = []
        self.release: threading.Event | None = None
        self.entered = threading.Event()
        self.claim_uid = UID

    def apply_resource_claim_status(
        self, obj: dict[str, Any], *, field_manager: str, force: bool = True
    ) -> dict[str, Any]:
        self.entered.set()
        if self.release is not None:
            self.release.wait(10)
        if self.failures:
            raise self.failures.pop(0)
        self.applies.append((time.monotonic(), obj))
        return {"metadata": {"uid": UID, "name": obj["metadata"]["name"]}, **obj}

    def get_resource_claim(self, namespace: str, name: str) -> dict[str, Any]:
        return {"metadata": {"uid": self.claim_uid, "name": name, "namespace": namespace}}


def _stub_writer(
    cluster: _StubCluster, *, settle_s: float = SETTLE_S
) -> tuple[ClaimStatusWriter, ClaimStatusService, ClaimRef]:
    writer = ClaimStatusWriter(
        cluster,  # type: ignore[arg-type]
        driver_name=DRIVER,
        pool_name=TEST_POOL,
        settle_s=settle_s,
    )
    entry = ClaimEntry(
        uid=UID,
        namespace="ml",
        name="train",
        state=ClaimState.PrepareCompleted,
        devices=(
            PreparedDevice(
                request_names=("gpu",), pool=TEST_POOL, device="gpu-0", cdi_device_ids=()
            ),
        ),
    )
    checkpoint = Checkpoint(boot_id="b", claims={UID: entry})
    service = ClaimStatusService(
        FakeDraService(),
        writer,
        prepared=lambda: checkpoint,
        devices=lambda: DEVICES,
        driver_name=DRIVER,
        node_name=TEST_POOL,
    )
    return writer, service, ClaimRef("ml", UID, "train")


def test_a_write_waiting_to_be_retried_is_dropped_at_unprepare() -> None:
    cluster = _StubCluster()
    cluster.failures = [ClusterError("503 Service Unavailable")]  # retried after a back-off
    writer, service, ref = _stub_writer(cluster)
    service.prepare([ref])
    assert cluster.entered.wait(5)
    service.unprepare([ref])  # while the write fails or waits for its retry
    unprepared_at = time.monotonic()
    assert writer.wait_idle(10)
    writer.close()
    assert [t for t, _ in cluster.applies if t > unprepared_at] == []  # no Ready=True after


def test_a_claim_unprepared_right_after_its_prepare_costs_no_write() -> None:
    cluster = _StubCluster()
    writer, service, ref = _stub_writer(cluster, settle_s=3.0)
    service.prepare([ref])
    time.sleep(0.3)  # a write not held back would be under way by now
    service.unprepare([ref])  # within the settle time, as a failed pod start does
    assert writer.wait_idle(10)
    writer.close()
    assert cluster.applies == []
    assert not cluster.entered.is_set()


def test_an_unprepare_during_a_write_does_not_stop_the_next_prepare_being_written() -> None:
    cluster = _StubCluster()
    cluster.release = threading.Event()
    writer, service, ref = _stub_writer(cluster)
    service.prepare([ref])
    assert cluster.entered.wait(5)
    service.unprepare([ref])  # while the apply is in flight
    cluster.release.set()
    assert writer.wait_idle(10)
    # Deallocated (the apiserver drops the entries), allocated again, prepared again.
    before = len(cluster.applies)
    service.prepare([ref])
    assert writer.wait_idle(10)
    writer.close()
    assert len(cluster.applies) == before + 1


def test_an_unexpected_error_does_not_end_status_writing() -> None:
    cluster = _StubCluster()
    cluster.failures = [RuntimeError("a client surprise")]
    writer, service, ref = _stub_writer(cluster)
    service.prepare([ref])
    assert writer.wait_idle(10)
    writer.forget(ref.uid)
    service.prepare([ref])
    assert writer.wait_idle(10)
    writer.close()
    assert len(cluster.applies) == 1


def test_the_apply_names_the_claims_uid_and_a_recreated_claim_is_left_alone() -> None:
    cluster = _StubCluster()
    writer, service, ref = _stub_writer(cluster)
    service.prepare([ref])
    assert writer.wait_idle(10)
    [(_, applied)] = cluster.applies
    assert applied["metadata"]["uid"] == UID
    # The claim is deleted and re-created under its name while a write is failing.
    writer.forget(ref.uid)
    cluster.claim_uid = "99999999-0000-4000-8000-000000000000"
    cluster.failures = [ClusterError('metadata.uid: Invalid value: "x": field is immutable')]
    service.prepare([ref])
    assert writer.wait_idle(10)  # not retried for 30 s
    writer.close()
    assert len(cluster.applies) == 1


def test_a_claim_nested_too_deep_for_the_local_store_is_one_log_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Opaque parameters nested 900 deep (a claim file anyone who can create claims can
    write): Prepare refused it; the status write is refused in one line, not a 3,000-line
    RecursionError traceback, and the claim next to it gets its status."""
    cluster = LocalCluster(tmp_path / "cluster")
    refs = []
    for name, uid in (("deep", "fa170000-0000-4000-8000-0000000000b1"), ("fine", UID)):
        config = make_opaque_config({"apiVersion": "resource.nvidia.com/v1beta1", "x": "HERE"})
        claim = make_allocated_claim(name, "ml", uid, [("gpu", "gpu-0")], configs=[config])
        status = claim.pop("status")
        claim["metadata"].pop("resourceVersion")
        stored = cluster.put_resource_claim(claim)
        cluster.update_resource_claim_status({**stored, "status": status})
        refs.append(ClaimRef("ml", uid, name))
    path = cluster.root / "resourceclaims" / "ml" / "deep.yaml"
    path.write_text(path.read_text().replace("HERE", '{"x": ' * 900 + "1" + "}" * 900))
    writer = ClaimStatusWriter(cluster, driver_name=DRIVER, pool_name=TEST_POOL)
    try:
        with caplog.at_level(logging.DEBUG, logger="kubelet_plugin.claim_status"):
            for ref in refs:
                writer.failed(ref, "nested more than 32 levels deep")
            assert writer.wait_idle(20)
    finally:
        writer.close()
    lines = [
        r
        for r in caplog.records
        if r.name == "kubelet_plugin.claim_status" and r.levelno >= logging.INFO
    ]
    assert [(r.levelname, r.exc_info) for r in lines] == [("WARNING", None)]
    message = lines[0].getMessage()
    assert "ml/deep (fa170000-0000-4000-8000-0000000000b1)" in message
    assert "nested deeper than 100 levels" in message
    (fine,) = cluster.get_resource_claim("ml", "fine")["status"]["devices"]
    assert fine["conditions"][0]["reason"] == "PrepareFailed"
