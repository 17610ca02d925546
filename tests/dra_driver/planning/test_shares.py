"""The node-side share guard: capacity, exclusive vs shared use, unshared devices."""

from __future__ import annotations

from typing import Any

import pytest

from dra_driver import DEFAULT_DRIVER_NAME
from dra_driver.claims.allocated import AllocatedClaim, parse_allocated_claim
from dra_driver.claims.checkpoint import Checkpoint, ClaimEntry, ClaimState, PreparedDevice
from dra_driver.errors import ClaimError
from dra_driver.node.consumable_shares import ConsumableShares
from dra_driver.node.devices import AllocatableDevice, build_devices
from dra_driver.planning.shares import check_shares
from tests.fakes import TEST_POOL, dgx_h100_inventory, make_allocated_claim


def _devices(shares: ConsumableShares | None) -> dict[str, AllocatableDevice]:
    return {d.name: d for d in build_devices(dgx_h100_inventory(), consumable_shares=shares)}


MEMORY = _devices(ConsumableShares("memory"))
FOUR = _devices(ConsumableShares("shares", 4))


def _claim(uid: str, *results: dict[str, Any]) -> AllocatedClaim:
    return parse_allocated_claim(
        make_allocated_claim(f"claim-{uid}", uid=uid, results=list(results)),
        driver=DEFAULT_DRIVER_NAME,
        expected_uid=uid,
    )


def _share(share_id: str, **consumed: str) -> dict[str, Any]:
    return {"request": "gpu", "device": "gpu-0", "shareID": share_id, "consumedCapacity": consumed}


def _held(uid: str, share_id: str | None, **consumed: str) -> ClaimEntry:
    return ClaimEntry(
        uid=uid,
        namespace="default",
        name=f"holder-{uid}",
        state=ClaimState.PrepareCompleted,
        devices=(
            PreparedDevice(
                request_names=("gpu",),
                pool=TEST_POOL,
                device="gpu-0",
                cdi_device_ids=(),
                share_id=share_id,
                consumed_capacity=consumed,
            ),
        ),
    )


def _checkpoint(*entries: ClaimEntry) -> Checkpoint:
    return Checkpoint(boot_id="b", claims={e.uid: e for e in entries})


def test_memory_shares_fit_until_the_memory_is_used_up() -> None:
    held = _checkpoint(_held("a", "s-a", memory="80000Mi"))
    check_shares(_claim("b", _share("s-b", memory="1559Mi")), MEMORY, held)
    with pytest.raises(ClaimError) as refused:
        check_shares(_claim("b", _share("s-b", memory="1560Mi")), MEMORY, held)
    assert str(refused.value) == (
        "ResourceClaim default/claim-b: status.allocation.devices.results[0]: share s-b of "
        "device 'gpu-0' consumes 1560Mi memory, but 80000Mi of its 81559Mi are already held by "
        "other shares on this node; refusing to overcommit it"
    )


def test_two_shares_of_one_claim_count_together() -> None:
    claim = _claim("b", _share("s-1", shares="3"), _share("s-2", shares="2"))
    with pytest.raises(ClaimError, match=r"share s-2 .* but 3 of its 4 are already held"):
        check_shares(claim, FOUR, _checkpoint())


def test_the_claims_own_records_do_not_count() -> None:
    claim = _claim("a", _share("s-a", shares="4"))
    check_shares(claim, FOUR, _checkpoint(_held("a", "s-a", shares="4")))


def test_exclusive_and_shared_use_exclude_each_other() -> None:
    with pytest.raises(ClaimError, match="holds the device exclusively"):
        check_shares(_claim("b", _share("s-b", shares="1")), FOUR, _checkpoint(_held("a", None)))
    exclusive = _claim("b", {"request": "gpu", "device": "gpu-0"})
    with pytest.raises(ClaimError, match="being shared by claim default/holder-a"):
        check_shares(exclusive, FOUR, _checkpoint(_held("a", "s-a", shares="1")))


def test_capacities_the_device_does_not_publish_are_not_accounted() -> None:
    check_shares(_claim("b", _share("s-b", memory="1Gi")), _devices(None), _checkpoint())
    check_shares(_claim("b", _share("s-b", shares="1")), MEMORY, _checkpoint())


def test_a_bad_quantity_is_named() -> None:
    with pytest.raises(ClaimError, match=r"consumedCapacity\['memory'\]: quantity 'lots'"):
        check_shares(_claim("b", _share("s-b", memory="lots")), MEMORY, _checkpoint())
