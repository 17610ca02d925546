"""Events for failed Prepares: what the admin reads in `kubectl get events`."""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from dra_driver.errors import ClusterError
from dra_driver.kube.local_store import LocalCluster
from kubelet_plugin import claim_events
from kubelet_plugin.claim_events import EventingService, prepare_failed_events
from kubelet_plugin.service import ClaimRef, PrepareResult, UnprepareResult
from tests.fakes import make_allocated_claim

NOW = 1_764_000_000.25


def _claim_with_pods() -> dict[str, object]:
    claim = make_allocated_claim("train", "ml", "11111111-2222-4333-8444-555555555555")
    claim["status"]["reservedFor"] = [
        {"resource": "pods", "name": "trainer-0", "uid": "pod-uid-0"},
        {"resource": "pods", "name": "trainer-1", "uid": "pod-uid-1"},
        {"apiGroup": "example.com", "resource": "jobs", "name": "j", "uid": "x"},
    ]
    return claim


def test_a_failed_claim_gets_a_warning_on_itself_and_on_each_pod_that_reserved_it() -> None:
    events = prepare_failed_events(
        _claim_with_pods(),
        "gpu-99 is not a device of this node",
        driver_name="gpu.nvidia.com",
        node_name="node-1",
        now=NOW,
    )
    assert [e["regarding"]["kind"] for e in events] == ["ResourceClaim", "Pod", "Pod"]
    assert [e["regarding"]["name"] for e in events] == ["train", "trainer-0", "trainer-1"]
    assert len({e["metadata"]["name"] for e in events}) == 3
    for event in events:
        assert event["apiVersion"] == "events.k8s.io/v1"
        assert event["metadata"]["namespace"] == "ml"
        assert event["type"] == "Warning"
        assert event["reason"] == "PrepareFailed"
        assert event["action"] == "PrepareResources"
        assert event["eventTime"] == "2025-11-24T16:00:00.250000Z"
        assert event["reportingController"] == "gpu.nvidia.com/kubelet-plugin"
        assert event["note"] == (
            "ResourceClaim ml/train (reserved for jobs.example.com j) on node node-1: "
            "gpu-99 is not a device of this node"
        )
    assert "related" not in events[0]
    assert events[1]["related"]["name"] == "train"


def test_a_claim_reserved_for_a_podgroup_names_it_in_the_claims_event() -> None:
    """Kubernetes 1.37 workload claims: the PodGroup holds the claim and its pods are not
    listed, so the claim's own Event says who holds it."""
    claim = make_allocated_claim("gang", "ml", "11111111-2222-4333-8444-555555555556")
    claim["status"]["reservedFor"] = [
        {"apiGroup": "scheduling.k8s.io", "resource": "podgroups", "name": "gang-1", "uid": "g1"}
    ]
    (event,) = prepare_failed_events(
        claim, "no GPU left", driver_name="gpu.nvidia.com", node_name="node-1", now=NOW
    )
    assert event["regarding"]["kind"] == "ResourceClaim"
    assert event["note"] == (
        "ResourceClaim ml/gang (reserved for podgroups.scheduling.k8s.io gang-1) on node "
        "node-1: no GPU left"
    )


def test_a_long_error_is_cut_to_the_apiservers_limit() -> None:
    (event,) = prepare_failed_events(
        make_allocated_claim(), "x" * 5000, driver_name="d.example.com", node_name="n", now=NOW
    )
    assert len(event["note"].encode()) == 1024


class _Failing:
    def prepare(self, claims: Sequence[ClaimRef]) -> Mapping[str, PrepareResult]:
        return {c.uid: PrepareResult(error=f"{c.name} failed") for c in claims}

    def unprepare(self, claims: Sequence[ClaimRef]) -> Mapping[str, UnprepareResult]:
        return {c.uid: UnprepareResult() for c in claims}


def test_the_service_posts_events_for_failed_claims_even_when_the_claim_is_gone(
    tmp_path: Path,
) -> None:
    cluster = LocalCluster(tmp_path / "cluster")
    claim = make_allocated_claim("present", "default", "uid-present")
    claim["metadata"].pop("resourceVersion", None)
    cluster.put_resource_claim(claim)
    service = EventingService(_Failing(), cluster, driver_name="gpu.nvidia.com", node_name="n1")
    results = service.prepare(
        [ClaimRef("default", "uid-present", "present"), ClaimRef("default", "uid-gone", "gone")]
    )
    service.close()  # posts what is queued
    assert results["uid-gone"].error == "gone failed"
    names = sorted(p.name for p in (cluster.root / "events" / "default").iterdir())
    assert [n.split(".")[0] for n in names] == ["gone", "present"]


class _SlowCluster(LocalCluster):
    """An API server that takes Events slowly (0.01 s each), as a busy one does."""

    def create_event(self, obj: dict[str, Any]) -> dict[str, Any]:
        time.sleep(0.01)
        return super().create_event(obj)


def test_a_flood_of_failures_posts_each_failure_once_and_queues_a_bounded_number(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(claim_events, "MAX_PENDING", 32)
    cluster = _SlowCluster(tmp_path / "cluster")
    service = EventingService(_Failing(), cluster, driver_name="gpu.nvidia.com", node_name="n1")
    repeated = ClaimRef("default", "uid-retried", "retried")
    for _ in range(50):  # the kubelet retrying one failing claim
        service.prepare([repeated])
    flood = [ClaimRef("default", f"uid-{i}", f"claim-{i}") for i in range(2000)]
    for start in range(0, len(flood), 8):
        service.prepare(flood[start : start + 8])
    assert service._pending.qsize() <= claim_events.MAX_PENDING
    assert service.dropped > 1000
    service.close()
    names = [p.name.split(".")[0] for p in (cluster.root / "events" / "default").iterdir()]
    assert names.count("retried") == 1
    assert len(names) + service.dropped == 1 + len(flood)  # each failure posted or dropped once


class _HangingCluster:
    """An API server that does not answer: every call waits until `release` is set."""

    def __init__(self) -> None:
        self.release = threading.Event()

    def get_resource_claim(self, namespace: str, name: str) -> Mapping[str, Any]:
        self.release.wait(60)
        raise ClusterError("timed out")

    def create_event(self, obj: Mapping[str, Any]) -> Mapping[str, Any]:
        self.release.wait(60)
        return obj


def test_a_stop_while_the_api_server_hangs_takes_the_time_it_is_given() -> None:
    # On SIGTERM the plugin gives the Events what is left of its clean stop (CLEAN_STOP_S,
    # inside the pod's 30 s grace period): a hanging API server must not hold it longer.
    cluster = _HangingCluster()
    service = EventingService(
        _Failing(),  # type: ignore[arg-type]
        cluster,  # type: ignore[arg-type]
        driver_name="gpu.nvidia.com",
        node_name="n1",
    )
    service.prepare([ClaimRef("ns", "5a1e0000-0000-4000-8000-000000000001", "c1")])
    started = time.monotonic()
    service.close(timeout=1.0)
    took = time.monotonic() - started
    cluster.release.set()
    assert took < 5  # 30 s before: the queue's and the worker's timeouts one after the other
