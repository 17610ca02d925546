"""Which interval each GPU gets: full GPUs only, one interval per GPU, kept while wanted."""

from __future__ import annotations

from typing import Any

import pytest

from dra_driver import DEFAULT_DRIVER_NAME
from dra_driver.claims.allocated import parse_allocated_claim
from dra_driver.claims.checkpoint import Checkpoint, ClaimEntry, PreparedDevice, TimeSliceRecord
from dra_driver.claims.device_config import effective_configs
from dra_driver.errors import ClaimError
from dra_driver.node.devices import build_devices
from dra_driver.planning.time_slices import intervals, plan_time_slices, wanted_interval
from tests.fakes import (
    TEST_POOL,
    a100_static_mig_inventory,
    dgx_h100_inventory,
    make_allocated_claim,
    make_opaque_config,
)

H100 = {d.name: d for d in build_devices(dgx_h100_inventory())}
A100_MIG = {d.name: d for d in build_devices(a100_static_mig_inventory())}


def _config(kind: str, sharing: dict[str, Any], requests: tuple[str, ...] = ()) -> dict[str, Any]:
    return make_opaque_config(
        {"apiVersion": "resource.nvidia.com/v1beta1", "kind": kind, "sharing": sharing},
        requests=requests,
    )


def _ts(interval: str | None = None) -> dict[str, Any]:
    sharing: dict[str, Any] = {"strategy": "TimeSlicing"}
    if interval is not None:
        sharing["timeSlicingConfig"] = {"interval": interval}
    return sharing


def _plan(
    uid: str,
    results: list[tuple[str, str]],
    configs: list[dict[str, Any]],
    checkpoint: Checkpoint,
    devices: dict[str, Any] = H100,
) -> list[PreparedDevice]:
    claim = parse_allocated_claim(
        make_allocated_claim(f"claim-{uid}", uid=uid, results=results, configs=configs),
        driver=DEFAULT_DRIVER_NAME,
        expected_uid=uid,
    )
    prepared = [
        PreparedDevice(
            request_names=(r.request,), pool=TEST_POOL, device=r.device, cdi_device_ids=()
        )
        for r in claim.results
    ]
    configs_by_key = effective_configs(
        claim, {r.device: devices[r.device].kind for r in claim.results}
    )
    return plan_time_slices(claim, configs_by_key, prepared, devices, checkpoint)


def _entry(uid: str, prepared: list[PreparedDevice]) -> ClaimEntry:
    return ClaimEntry(uid=uid, namespace="default", name=f"claim-{uid}", devices=tuple(prepared))


EMPTY = Checkpoint(boot_id="b")
GPU0 = H100["gpu-0"].gpu.uuid


def test_the_wanted_interval_is_recorded_per_full_gpu() -> None:
    planned = _plan(
        "a", [("gpu", "gpu-0"), ("gpu", "gpu-1")], [_config("GpuConfig", _ts("Long"))], EMPTY
    )
    assert [p.time_slice for p in planned] == [
        TimeSliceRecord(GPU0, "Long"),
        TimeSliceRecord(H100["gpu-1"].gpu.uuid, "Long"),
    ]


def test_no_interval_means_default_and_no_config_means_nothing() -> None:
    (planned,) = _plan("a", [("gpu", "gpu-0")], [_config("GpuConfig", _ts())], EMPTY)
    assert planned.time_slice == TimeSliceRecord(GPU0, "Default")
    (untouched,) = _plan("a", [("gpu", "gpu-0")], [], EMPTY)
    assert untouched.time_slice is None


def test_time_slicing_on_a_mig_device_does_nothing() -> None:
    mig = next(name for name, d in A100_MIG.items() if d.kind == "mig")
    (planned,) = _plan(
        "a", [("mig", mig)], [_config("MigDeviceConfig", _ts())], EMPTY, devices=A100_MIG
    )
    assert planned.time_slice is None


def test_another_claims_different_interval_is_a_conflict() -> None:
    other = _entry("a", _plan("a", [("gpu", "gpu-0")], [_config("GpuConfig", _ts("Long"))], EMPTY))
    held = Checkpoint(boot_id="b", claims={"a": other})
    with pytest.raises(ClaimError) as refused:
        _plan("b", [("gpu", "gpu-0")], [_config("GpuConfig", _ts("Short"))], held)
    assert str(refused.value) == (
        "ResourceClaim default/claim-b: request 'gpu' (device gpu-0) asks for time-slice "
        f"interval Short on GPU {GPU0}, but claim default/claim-a (uid a) prepared on it uses "
        "Long; the interval is GPU-wide, so claims sharing a GPU must ask for the same one"
    )
    _plan("b", [("gpu", "gpu-0")], [_config("GpuConfig", _ts("Long"))], held)  # same: fine
    (record,) = other.devices
    assert wanted_interval(held, record, without="b") == "Long"
    assert wanted_interval(held, record, without="a") is None
    assert intervals(held) == {GPU0: "Long"}


def test_two_requests_of_one_claim_on_one_gpu_must_agree() -> None:
    configs = [
        _config("GpuConfig", _ts("Long"), requests=("a",)),
        _config("GpuConfig", _ts("Short"), requests=("b",)),
    ]
    with pytest.raises(ClaimError, match="request 'a' of the same claim asks for Long"):
        _plan("c", [("a", "gpu-0"), ("b", "gpu-0")], configs, EMPTY)
