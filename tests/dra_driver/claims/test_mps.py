"""A claim's MPS limits: from its mpsConfig, from what it consumed of a shared device, or both."""

from __future__ import annotations

from typing import Any

import pytest

from dra_driver.claims.device_config import MpsConfig
from dra_driver.claims.mps import (
    MpsLimits,
    claim_limits,
    control_commands,
    daemon_ceiling,
    one_mps_device_per_claim,
)
from dra_driver.errors import ClaimError

UUID = "GPU-a2b56268-9156-5930-a747-ffec552f8b3a"
H100 = {"memory": 80 * 2**30}
H100_4_SHARES = {**H100, "shares": 4}


def limits(
    config: dict[str, Any] | None = None,
    consumed: dict[str, str] | None = None,
    capacity: dict[str, int] | None = None,
    index: int = 0,
) -> MpsLimits:
    return claim_limits(
        None if config is None else MpsConfig.model_validate(config),
        device_uuid=UUID,
        device_index=index,
        capacity=capacity or H100,
        consumed=consumed or {},
        where="ResourceClaim default/c: request 'gpu' on gpu-0",
    )


def test_config_limits_become_the_claims_own() -> None:
    got = limits({"defaultActiveThreadPercentage": 25, "defaultPinnedDeviceMemoryLimit": "10Gi"})
    assert got == MpsLimits(25, 10240)
    assert got.client_env() == (
        "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=25",
        "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=10240M",
    )


def test_per_device_limit_by_uuid_or_index_wins_over_the_default() -> None:
    config = {
        "defaultPinnedDeviceMemoryLimit": "10Gi",
        "defaultPerDevicePinnedMemoryLimit": {UUID: "2Gi", "1": "3Gi"},
    }
    assert limits(config).pinned_memory_mib == 2048
    other = {**config, "defaultPerDevicePinnedMemoryLimit": {"1": "3Gi"}}
    assert limits(other, index=1).pinned_memory_mib == 3072
    assert limits(other, index=0).pinned_memory_mib == 10240


def test_shares_are_enforced_as_a_thread_percentage_and_memory_as_pinned_memory() -> None:
    assert limits(consumed={"shares": "1"}, capacity=H100_4_SHARES) == MpsLimits(25, None)
    assert limits(consumed={"shares": "3", "memory": "20Gi"}, capacity=H100_4_SHARES) == (
        MpsLimits(75, 20480)
    )
    # Without a shares capacity, a consumed share count means nothing to enforce.
    assert limits(consumed={"memory": "0"}) == MpsLimits(None, None)


def test_config_and_consumption_together_take_the_smaller() -> None:
    config = {"defaultActiveThreadPercentage": 60, "defaultPinnedDeviceMemoryLimit": "30Gi"}
    got = limits(config, consumed={"shares": "1", "memory": "40Gi"}, capacity=H100_4_SHARES)
    assert got == MpsLimits(25, 30720)


@pytest.mark.parametrize(
    ("config", "consumed", "message"),
    [
        ({"defaultActiveThreadPercentage": 0}, {}, "must be 1..100, not 0"),
        (None, {"shares": "1"}, "less than 1% of the device's threads"),
    ],
)
def test_limits_that_cannot_be_applied_name_the_claim(
    config: dict[str, Any] | None, consumed: dict[str, str], message: str
) -> None:
    with pytest.raises(ClaimError, match=message) as raised:
        limits(config, consumed, capacity={**H100, "shares": 200})
    assert str(raised.value).startswith("ResourceClaim default/c: request 'gpu' on gpu-0")


def test_the_daemon_ceiling_is_the_most_generous_claim() -> None:
    ceiling = daemon_ceiling([MpsLimits(25, 1024), MpsLimits(50, None)], 81559)
    assert ceiling == MpsLimits(50, 81559)
    assert control_commands(ceiling, UUID) == (
        "set_default_active_thread_percentage 50",
        f"set_default_device_pinned_mem_limit {UUID} 81559M",
    )
    assert daemon_ceiling([MpsLimits(None, 512)], 81559) == MpsLimits(100, 512)


def test_one_claim_reaches_one_daemon() -> None:
    one_mps_device_per_claim("ResourceClaim default/c", ["gpu-0", "gpu-0"])
    with pytest.raises(ClaimError, match="MPS on 2 devices"):
        one_mps_device_per_claim("ResourceClaim default/c", ["gpu-0", "gpu-1"])
