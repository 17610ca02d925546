"""The usage sampler without a plugin: NVML failures, pod look-ups, idle reports, metrics."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest

from dra_driver.claims.checkpoint import Checkpoint, ClaimEntry, ClaimState, PreparedDevice
from dra_driver.claims.usage import ClaimDeviceUsage
from dra_driver.errors import NvmlError
from dra_driver.hardware.nvml import codes
from dra_driver.hardware.nvml.interface import ProcessMemory
from dra_driver.hardware.simulated.hardware import SimHardware
from dra_driver.hardware.simulated.nvml import SimNvml
from dra_driver.hardware.simulated.shapes import load_shape
from dra_driver.kube.local_store import LocalCluster
from dra_driver.node.devices import build_devices
from dra_driver.node.inventory import discover
from kubelet_plugin.usage_metrics import UsageCollector
from kubelet_plugin.usage_sampler import (
    ClaimPods,
    UsageLoop,
    UsageSampler,
    read_report,
)
from tests.fakes import make_allocated_claim

UID = "0b7cf0d2-5d1e-4c61-9a0e-3f5a1c2b7d90"
POD = "9e2d4b6a-0000-4000-8000-000000000001"


class _Node:
    def __init__(self, tmp_path: Path) -> None:
        self.proc = tmp_path / "proc"
        self.hw = SimHardware(load_shape("l4-node"), proc_root=self.proc)
        self.nvml = SimNvml(self.hw)
        self.devices = build_devices(discover(self.nvml))
        entry = ClaimEntry(
            uid=UID,
            namespace="ml",
            name="train",
            state=ClaimState.PrepareCompleted,
            devices=(
                PreparedDevice(
                    request_names=("gpu",), pool="node", device="gpu-0", cdi_device_ids=()
                ),
            ),
        )
        self.checkpoint = Checkpoint(boot_id="b", claims={UID: entry})
        self.pods = ClaimPods()
        self.sampler = UsageSampler(
            self.nvml,
            self.proc,
            prepared=lambda: self.checkpoint,
            devices=lambda: self.devices,
            claim_pods=self.pods,
        )

    @property
    def uuid(self) -> str:
        return self.hw.gpus()[0].uuid


def test_a_failing_nvml_call_is_unknown_not_zero(tmp_path: Path, caplog: Any) -> None:
    node = _Node(tmp_path)
    node.hw.run_workload(node.uuid, POD, sm_percent=10, memory_bytes=2**30)
    calls = []

    def broken(uuid: str) -> list[ProcessMemory]:
        calls.append(uuid)
        raise NvmlError(codes.ERROR_NO_PERMISSION, "list processes: Insufficient Permissions")

    node.nvml.running_compute_processes = broken  # type: ignore[method-assign]
    for _ in range(3):
        (usage,) = node.sampler.sample().claims
        assert usage.memory_used_bytes is None
        assert usage.sm_percent is None  # samples exist, but whose pid is whose is unknown
        assert usage.sm_unavailable == "error"
    assert len(calls) == 3
    assert caplog.text.count("cannot list processes") == 1  # logged once, not every pass


def test_a_pod_no_claim_names_triggers_a_claim_refresh(tmp_path: Path) -> None:
    node = _Node(tmp_path)
    cluster = LocalCluster(tmp_path / "cluster")
    claim = make_allocated_claim("train", "ml", UID, [("gpu", "gpu-0")], pool="node")
    claim["status"]["reservedFor"] = [{"resource": "pods", "name": "train-0", "uid": POD}]
    status = claim.pop("status")
    claim["metadata"].pop("resourceVersion")
    stored = cluster.put_resource_claim(claim)
    stored["status"] = status
    cluster.update_resource_claim_status(stored)
    node.pods.record({"metadata": {"uid": UID}, "status": {}})  # known, but without the pod
    node.hw.run_workload(node.uuid, POD, sm_percent=10, memory_bytes=2**30)
    loop = UsageLoop(
        node.sampler,
        interval=1,
        claim_pods=node.pods,
        cluster=cluster,
        report_file=tmp_path / "usage.json",
    )
    first = loop.run_once()
    assert first.unknown_pods == {UID: frozenset({POD})}
    (pod,) = first.claims[0].pods
    assert pod.pod == POD  # the only claim of the device: counted, named by its UID
    node.pods.touch(UID)  # pretend the last read was long ago: refreshed on the next pass
    node.pods._read_at[UID] -= 3600
    loop.run_once()
    second = loop.run_once()
    (pod,) = second.claims[0].pods
    assert pod.pod == "train-0"
    report = read_report(tmp_path / "usage.json")
    assert report is not None
    assert report["claims"][0]["pods"][0]["pod"] == "train-0"


def test_an_idle_claim_is_reported_once_per_idle_period(tmp_path: Path) -> None:
    node = _Node(tmp_path)
    now = [1_800_000_000.0]
    node.sampler._clock = lambda: now[0]
    reported: list[tuple[str, float]] = []

    def on_idle(usages: Any, idle: float) -> None:
        usage: ClaimDeviceUsage = usages[0]
        reported.append((usage.target.claim, idle))

    loop = UsageLoop(
        node.sampler,
        interval=1,
        claim_pods=node.pods,
        cluster=None,
        idle_after=60,
        on_idle=on_idle,
    )
    for _ in range(3):
        loop.run_once()
        now[0] += 40
    assert reported == [("train", 80.0)]
    node.hw.run_workload(node.uuid, POD, sm_percent=50, memory_bytes=1)  # busy again
    loop.run_once()
    node.hw.stop_workload(node.uuid, POD)
    for _ in range(3):
        now[0] += 40
        loop.run_once()
    assert reported == [("train", 80.0), ("train", 80.0)]


def test_the_collector_leaves_out_what_was_not_measured(tmp_path: Path) -> None:
    node = _Node(tmp_path)
    node.hw.run_workload(node.uuid, POD, sm_percent=0, memory_bytes=2**30)  # no SM sample
    report = node.sampler.sample()
    registry = CollectorRegistry()
    registry.register(UsageCollector(lambda: report))
    text = generate_latest(registry).decode()
    assert "dra_gpu_claim_sm_utilization_percent{" not in text
    assert (
        'dra_gpu_claim_usage_unavailable{claim="train",device="gpu-0",metric="sm_utilization",'
        f'namespace="ml",pod="{POD}",reason="no-samples"}} 1.0'
    ) in text
    assert (
        f'dra_gpu_claim_memory_used_bytes{{claim="train",device="gpu-0",namespace="ml",pod="{POD}"}}'
        " 1.073741824e+09"
    ) in text
    empty = CollectorRegistry()
    empty.register(UsageCollector(lambda: None))
    assert "dra_gpu_claim_idle_seconds{" not in generate_latest(empty).decode()


def test_claims_read_and_gone_are_forgotten_even_when_the_read_failed() -> None:
    pods = ClaimPods()
    for i in range(100):
        pods.touch(f"uid-{i}")  # a failed read of a claim that is then unprepared
    assert pods.due(["uid-1"], min_age=1e9) == []
    pods.forget_all_but(set())
    # Nothing is kept of them: a claim with that UID prepared again is read at once.
    assert pods.due(["uid-1"], min_age=1e9) == ["uid-1"]
