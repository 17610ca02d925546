"""Per-claim GPU use from one pass of NVML samples: who counts for which claim, and what is
"not measured" (never a made-up 0)."""

from __future__ import annotations

from types import MappingProxyType

import pytest

from dra_driver.claims.checkpoint import (
    Checkpoint,
    ClaimEntry,
    ClaimState,
    MigRecord,
    MpsRecord,
    PreparedDevice,
    VfioRecord,
)
from dra_driver.claims.usage import (
    UNAVAILABLE_ERROR,
    UNAVAILABLE_MIG,
    UNAVAILABLE_NO_SAMPLES,
    ClaimDeviceUsage,
    IdleTracker,
    PodRef,
    UsageTarget,
    UtilizationReading,
    attribute,
    usage_targets,
)
from dra_driver.hardware.nvml.interface import ProcessMemory, ProcessUtilization
from dra_driver.node.consumable_shares import ConsumableShares
from dra_driver.node.devices import AllocatableDevice, build_devices
from tests.fakes import dgx_h100_inventory

GI = 2**30
NOW = 1_800_000_000.0


def _devices(shares: ConsumableShares | None = None) -> dict[str, AllocatableDevice]:
    return {d.name: d for d in build_devices(dgx_h100_inventory(), consumable_shares=shares)}


def _entry(
    uid: str, *devices: PreparedDevice, state: ClaimState = ClaimState.PrepareCompleted
) -> ClaimEntry:
    return ClaimEntry(uid=uid, namespace="ml", name=f"claim-{uid}", state=state, devices=devices)


def _device(name: str, **fields: object) -> PreparedDevice:
    return PreparedDevice(
        request_names=("gpu",), pool="node", device=name, cdi_device_ids=(), **fields
    )  # type: ignore[arg-type]


def _checkpoint(*entries: ClaimEntry) -> Checkpoint:
    return Checkpoint(boot_id="b", claims={e.uid: e for e in entries})


def _usages(
    targets: list[UsageTarget],
    *,
    processes: dict[str, list[ProcessMemory]],
    utilization: dict[str, UtilizationReading],
    pods: dict[int, str | None],
    claim_pods: dict[str, tuple[PodRef, ...]],
    idle: IdleTracker | None = None,
    now: float = NOW,
) -> dict[tuple[str, str], ClaimDeviceUsage]:
    found = attribute(
        targets,
        processes=processes,
        utilization=utilization,
        pod_of_pid=pods,
        claim_pods=claim_pods,
        idle=idle or IdleTracker(),
        now=now,
    )
    return {(u.target.claim_uid, u.target.device): u for u in found}


def _sample(pid: int, sm: int, ts: int = 10) -> ProcessUtilization:
    return ProcessUtilization(pid=pid, timestamp_us=ts, sm_percent=sm, memory_percent=0)


def test_targets_know_the_live_mig_uuid_the_limits_and_the_sm_share() -> None:
    devices = _devices(ConsumableShares("shares", 4))
    gpu0 = devices["gpu-0"].gpu.uuid
    mig = MigRecord(
        parent_uuid=devices["gpu-3"].gpu.uuid,
        profile_id=19,
        placement_start=0,
        placement_size=1,
        created_by_us=True,
        gi_id=9,
        ci_id=0,
        uuid="MIG-live",
    )
    mps = MpsRecord(
        device_uuid=devices["gpu-1"].gpu.uuid,
        gpu_uuid=devices["gpu-1"].gpu.uuid,
        daemon_dir="/d",
        device_memory_mib=81559,
        pinned_memory_mib=20480,
        active_thread_percentage=25,
    )
    checkpoint = _checkpoint(
        _entry("a", _device("gpu-0")),
        _entry("b", _device("gpu-1", share_id="s1", mps=mps)),
        _entry(
            "c",
            _device(
                "gpu-2",
                share_id="s2",
                consumed_capacity=MappingProxyType({"shares": "1", "memory": "10Gi"}),
            ),
        ),
        _entry("d", _device("gpu-3-mig-1g10gb-19-0", mig=mig)),
        _entry("e", _device("gpu-4"), state=ClaimState.PrepareStarted),  # not prepared yet
    )
    targets = {t.claim_uid: t for t in usage_targets(checkpoint, devices)}
    assert set(targets) == {"a", "b", "c", "d"}
    assert (targets["a"].nvml_uuid, targets["a"].shared, targets["a"].limit_source) == (
        gpu0,
        False,
        "device",
    )
    assert targets["a"].memory_limit_bytes == devices["gpu-0"].capacity["memory"]
    assert (targets["b"].memory_limit_bytes, targets["b"].limit_source) == (20 * GI, "mps")
    assert targets["b"].shared
    assert (targets["c"].memory_limit_bytes, targets["c"].limit_source) == (10 * GI, "share")
    assert targets["c"].sm_share_percent == 25.0
    assert (targets["d"].nvml_uuid, targets["d"].is_mig) == ("MIG-live", True)


def _target(
    uid: str,
    device: str = "gpu-0",
    uuid: str = "GPU-0",
    *,
    shared: bool = False,
    limit: int | None = 80 * GI,
    source: str = "device",
    sm_share: float | None = None,
    is_mig: bool = False,
) -> UsageTarget:
    return UsageTarget(
        namespace="ml",
        claim=f"claim-{uid}",
        claim_uid=uid,
        device=device,
        nvml_uuid=uuid,
        is_mig=is_mig,
        shared=shared,
        memory_limit_bytes=limit,
        limit_source=source,
        sm_share_percent=sm_share,
        prepared_at=None,
    )


def test_processes_count_for_the_claim_their_pod_reserved() -> None:
    a = _target("a", shared=True, limit=20 * GI, source="share")
    b = _target("b", shared=True, limit=40 * GI, source="share")
    usages = _usages(
        [a, b],
        processes={"GPU-0": [ProcessMemory(1, 30 * GI), ProcessMemory(2, 5 * GI)]},
        utilization={"GPU-0": UtilizationReading(samples=(_sample(1, 40), _sample(2, 10)))},
        pods={1: "pod-a", 2: "pod-b"},
        claim_pods={"a": (PodRef("train-0", "pod-a"),), "b": (PodRef("infer-0", "pod-b"),)},
    )
    ua, ub = usages[("a", "gpu-0")], usages[("b", "gpu-0")]
    assert [(p.pod, p.sm_percent, p.memory_used_bytes) for p in ua.pods] == [
        ("train-0", 40.0, 30 * GI)
    ]
    assert [(p.pod, p.sm_percent, p.memory_used_bytes) for p in ub.pods] == [
        ("infer-0", 10.0, 5 * GI)
    ]
    assert ua.over_share  # 30Gi of its 20Gi
    assert not ub.over_share


def test_without_samples_sm_is_not_measured_and_memory_still_is() -> None:
    """NOT_FOUND (no sample since the last pass) is absence, not 0 %."""
    usages = _usages(
        [_target("a")],
        processes={"GPU-0": [ProcessMemory(1, GI)]},
        utilization={"GPU-0": UtilizationReading(unavailable=UNAVAILABLE_NO_SAMPLES)},
        pods={1: "pod-a"},
        claim_pods={"a": (PodRef("p", "pod-a"),)},
    )
    usage = usages[("a", "gpu-0")]
    assert usage.sm_percent is None
    assert usage.sm_unavailable == UNAVAILABLE_NO_SAMPLES
    assert usage.pods[0].sm_percent is None
    assert usage.memory_used_bytes == GI
    assert not usage.in_use


def test_a_process_nvml_did_not_sample_used_zero_percent() -> None:
    """With samples, NVML lists only processes with non-zero use: the others used 0 %."""
    usages = _usages(
        [_target("a"), _target("b")],
        processes={"GPU-0": [ProcessMemory(1, GI), ProcessMemory(2, GI)]},
        utilization={"GPU-0": UtilizationReading(samples=(_sample(1, 30),))},
        pods={1: "pod-a", 2: "pod-b"},
        claim_pods={"a": (PodRef("pa", "pod-a"),), "b": (PodRef("pb", "pod-b"),)},
    )
    assert usages[("b", "gpu-0")].sm_percent == 0.0
    assert usages[("a", "gpu-0")].sm_percent == 30.0


def test_the_latest_sample_of_a_pid_counts() -> None:
    usages = _usages(
        [_target("a")],
        processes={"GPU-0": [ProcessMemory(1, GI)]},
        utilization={
            "GPU-0": UtilizationReading(samples=(_sample(1, 90, ts=5), _sample(1, 20, ts=9)))
        },
        pods={1: "pod-a"},
        claim_pods={},
    )
    assert usages[("a", "gpu-0")].sm_percent == 20.0


def test_mig_has_no_sm_and_a_process_is_use() -> None:
    target = _target("m", "gpu-3-mig-1g10gb-19-0", "MIG-1", is_mig=True)
    tracker = IdleTracker()
    usages = _usages(
        [target],
        processes={"MIG-1": [ProcessMemory(7, 2 * GI)]},
        utilization={"MIG-1": UtilizationReading(unavailable=UNAVAILABLE_MIG)},
        pods={7: "pod-m"},
        claim_pods={"m": (PodRef("m-0", "pod-m"),)},
        idle=tracker,
    )
    usage = usages[("m", "gpu-3-mig-1g10gb-19-0")]
    assert usage.sm_percent is None
    assert usage.sm_unavailable == UNAVAILABLE_MIG
    assert usage.memory_used_bytes == 2 * GI
    assert usage.in_use
    assert usage.idle_seconds == 0


def test_unreadable_memory_is_none_not_zero() -> None:
    usages = _usages(
        [_target("a")],
        processes={"GPU-0": [ProcessMemory(1, None)]},
        utilization={"GPU-0": UtilizationReading(samples=(_sample(1, 5),))},
        pods={1: "pod-a"},
        claim_pods={"a": (PodRef("p", "pod-a"),)},
    )
    assert usages[("a", "gpu-0")].memory_used_bytes is None
    # And a device whose process list could not be read at all:
    usages = _usages(
        [_target("a")],
        processes={},
        utilization={"GPU-0": UtilizationReading(unavailable=UNAVAILABLE_NO_SAMPLES)},
        pods={},
        claim_pods={"a": (PodRef("p", "pod-a"),)},
    )
    assert usages[("a", "gpu-0")].memory_used_bytes is None


def test_unknown_pods_count_only_where_one_claim_holds_the_device() -> None:
    processes = {"GPU-0": [ProcessMemory(1, GI)], "GPU-1": [ProcessMemory(2, GI)]}
    samples = {
        "GPU-0": UtilizationReading(samples=(_sample(1, 50),)),
        "GPU-1": UtilizationReading(samples=(_sample(2, 50),)),
    }
    usages = _usages(
        [_target("a"), _target("b", "gpu-1", "GPU-1"), _target("c", "gpu-1", "GPU-1")],
        processes=processes,
        utilization=samples,
        pods={1: "stranger-1", 2: "stranger-2"},
        claim_pods={},
    )
    (pod,) = usages[("a", "gpu-0")].pods
    assert (pod.pod, pod.pod_uid, pod.sm_percent) == ("stranger-1", "stranger-1", 50.0)
    for uid in ("b", "c"):  # two claims share gpu-1: nobody can tell whose it is
        assert [(p.pod, p.processes) for p in usages[(uid, "gpu-1")].pods] == [("", 0)]
    # A process outside any pod (pid without a pod) counts for nobody.
    usages = _usages(
        [_target("a")],
        processes={"GPU-0": [ProcessMemory(1, GI)]},
        utilization={"GPU-0": UtilizationReading(samples=(_sample(1, 50),))},
        pods={1: None},
        claim_pods={},
    )
    assert usages[("a", "gpu-0")].memory_used_bytes == 0


def test_sm_over_a_share_of_the_time_is_over_share() -> None:
    quarter = _target("s", shared=True, sm_share=25.0)
    usages = _usages(
        [quarter],
        processes={"GPU-0": [ProcessMemory(1, GI)]},
        utilization={"GPU-0": UtilizationReading(samples=(_sample(1, 26),))},
        pods={1: "pod-s"},
        claim_pods={"s": (PodRef("s-0", "pod-s"),)},
    )
    assert usages[("s", "gpu-0")].over_share
    exclusive = _target("x", sm_share=None, limit=GI, source="device")
    usages = _usages(
        [exclusive],
        processes={"GPU-0": [ProcessMemory(1, 2 * GI)]},
        utilization={"GPU-0": UtilizationReading(samples=(_sample(1, 100),))},
        pods={1: "pod-x"},
        claim_pods={},
    )
    assert not usages[("x", "gpu-0")].over_share  # an exclusive claim has no share to exceed


@pytest.mark.parametrize("used", [True, False])
def test_idle_time_counts_from_the_last_use(used: bool) -> None:
    tracker = IdleTracker()
    target = _target("a")
    first = _usages(
        [target],
        processes={"GPU-0": [ProcessMemory(1, GI)]},
        utilization={"GPU-0": UtilizationReading(samples=(_sample(1, 10),) if used else ())},
        pods={1: "pod-a"},
        claim_pods={},
        idle=tracker,
        now=NOW,
    )
    assert first[("a", "gpu-0")].idle_seconds == 0
    later = _usages(
        [target],
        processes={"GPU-0": [ProcessMemory(1, GI)]},
        utilization={"GPU-0": UtilizationReading(unavailable=UNAVAILABLE_NO_SAMPLES)},
        pods={1: "pod-a"},
        claim_pods={},
        idle=tracker,
        now=NOW + 90,
    )
    assert later[("a", "gpu-0")].idle_seconds == 90


def test_idle_time_does_not_grow_while_nvml_cannot_measure() -> None:
    # A failed utilization reading is no evidence of idleness: the running process counts as
    # use, so a busy claim is never reported idle (or sent a GPUIdle Event) on a guess.
    target = _target("a")
    tracker = IdleTracker()
    for now in (NOW, NOW + 3600):
        usages = _usages(
            [target],
            processes={"GPU-0": [ProcessMemory(1, GI)]},
            utilization={"GPU-0": UtilizationReading(unavailable=UNAVAILABLE_ERROR)},
            pods={1: "pod-a"},
            claim_pods={},
            idle=tracker,
            now=now,
        )
        assert usages[("a", "gpu-0")].sm_percent is None
        assert usages[("a", "gpu-0")].idle_seconds == 0


def test_a_gpu_passed_through_to_a_vm_is_not_sampled() -> None:
    devices = _devices()
    vm = _device(
        "gpu-1", vfio=VfioRecord(pci_bus_id=devices["gpu-1"].gpu.pci_bus_id, gpu_uuid="GPU-1")
    )
    targets = usage_targets(_checkpoint(_entry("a", _device("gpu-0"), vm)), devices)
    assert [t.device for t in targets] == ["gpu-0"]
