"""`plan_claim`, the plugin's own validation, run as a simulation would: claim after claim on one
node, each placed on top of the ones before."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from dra_driver import DEFAULT_DRIVER_NAME
from dra_driver.claims.allocated import parse_allocated_claim
from dra_driver.claims.checkpoint import Checkpoint
from dra_driver.claims.mps import MPS_DIR, MpsLimits
from dra_driver.errors import ClaimError
from dra_driver.node.consumable_shares import ConsumableShares
from dra_driver.node.devices import build_devices
from dra_driver.planning import ClaimPlan, plan_claim
from tests.fakes import TEST_POOL, dgx_h100_inventory, make_allocated_claim, make_opaque_config

SHARED = {
    d.name: d
    for d in build_devices(dgx_h100_inventory(), consumable_shares=ConsumableShares("shares", 4))
}
EMPTY = Checkpoint(boot_id="")


def _gpu_config(sharing: dict[str, Any]) -> dict[str, Any]:
    return make_opaque_config(
        {"apiVersion": "resource.nvidia.com/v1beta1", "kind": "GpuConfig", "sharing": sharing}
    )


def _mps(**config: Any) -> dict[str, Any]:
    return _gpu_config({"strategy": "MPS", "mpsConfig": config})


def _share(uid: str, device: str, config: dict[str, Any], share: int = 1) -> Any:
    result = {
        "request": "gpu",
        "device": device,
        "shareID": f"0d5c7e9a-1b3f-4d6e-8a0c-{share:012d}",
        "consumedCapacity": {"shares": "1"},
    }
    return parse_allocated_claim(
        make_allocated_claim(f"claim-{uid}", uid=uid, results=[result], configs=[config]),
        driver=DEFAULT_DRIVER_NAME,
        expected_uid=uid,
    )


def _place(placed: Checkpoint, claim: Any) -> tuple[ClaimPlan, Checkpoint]:
    plan = plan_claim(claim, pool_name=TEST_POOL, devices=SHARED, placed=placed)
    return plan, placed.start(plan.entry())


def test_an_mps_claim_records_its_daemon_and_its_own_limits() -> None:
    plan, placed = _place(EMPTY, _share("a", "gpu-2", _mps(defaultActiveThreadPercentage=30)))

    (item,) = plan.devices
    assert item.mps == MpsLimits(active_thread_percentage=25)  # its quarter of the shares wins
    (record,) = plan.records
    uuid = SHARED["gpu-2"].gpu.uuid
    assert record.mps is not None
    assert (record.mps.device_uuid, record.mps.daemon_dir) == (uuid, str(Path(MPS_DIR) / uuid))
    assert record.mps.active_thread_percentage == 25
    assert placed.device_holders(TEST_POOL, "gpu-2")[0][1] == record


def test_a_second_mps_claim_must_use_the_daemons_mode() -> None:
    _plan, placed = _place(EMPTY, _share("a", "gpu-3", _mps(multiUser=True)))

    with pytest.raises(ClaimError) as refused:
        _place(placed, _share("b", "gpu-3", _mps(), share=2))

    assert str(refused.value) == (
        "gpu-3: its MPS control daemon runs in multi-user mode for other claims; "
        "multiUser must match theirs"
    )
    _place(placed, _share("c", "gpu-3", _mps(multiUser=True), share=3))  # the same mode fits


def test_shares_beyond_capacity_are_refused_against_the_placed_claims() -> None:
    placed = EMPTY
    for share in range(4):
        _plan, placed = _place(placed, _share(f"s{share}", "gpu-1", _mps(), share=share))

    with pytest.raises(ClaimError, match="refusing to overcommit it"):
        _place(placed, _share("s4", "gpu-1", _mps(), share=4))


def test_a_time_slice_must_agree_with_the_claims_on_the_gpu() -> None:
    long, short = (
        _gpu_config({"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": i}})
        for i in ("Long", "Short")
    )
    _plan, placed = _place(EMPTY, _share("a", "gpu-4", long))

    with pytest.raises(ClaimError, match="uses Long; the interval is GPU-wide"):
        _place(placed, _share("b", "gpu-4", short, share=2))


def test_configs_are_decoded_strictly() -> None:
    with pytest.raises(ClaimError, match="invalid GpuConfig"):
        _place(EMPTY, _share("a", "gpu-5", _gpu_config({"strategy": "MPS", "mpsConfg": {}})))
