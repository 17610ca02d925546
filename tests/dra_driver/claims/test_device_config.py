"""NVIDIA's GpuConfig/MigDeviceConfig: strict decoding and which config applies where."""

from __future__ import annotations

from typing import Any

import pytest

from dra_driver.claims.allocated import parse_allocated_claim
from dra_driver.claims.device_config import (
    GpuConfig,
    MigDeviceConfig,
    effective_configs,
    mps_config_of,
    unsupported_sharing,
)
from dra_driver.errors import ClaimError
from tests.fakes import TEST_CLAIM_UID, make_allocated_claim, make_opaque_config

GPU = {"apiVersion": "resource.nvidia.com/v1beta1", "kind": "GpuConfig"}
MIG = {"apiVersion": "resource.nvidia.com/v1beta1", "kind": "MigDeviceConfig"}
KINDS = {"gpu-0": "gpu", "gpu-1": "gpu", "gpu-2-mig-1g10gb-19-0": "mig"}


def _claim(configs: list[dict[str, Any]], results: Any = (("gpu", "gpu-0"),)) -> Any:
    obj = make_allocated_claim(results=results, configs=configs)
    return parse_allocated_claim(obj, driver="gpu.nvidia.com", expected_uid=TEST_CLAIM_UID)


def test_no_config_means_exclusive_device() -> None:
    claim = _claim([])
    configs = effective_configs(claim, KINDS)
    assert configs == {"gpu/gpu-0": None}
    assert unsupported_sharing(claim, configs) is None


def test_plain_gpu_config_applies_to_gpus_only() -> None:
    claim = _claim(
        [make_opaque_config(GPU)],
        results=(("gpu", "gpu-0"), ("mig", "gpu-2-mig-1g10gb-19-0")),
    )
    configs = effective_configs(claim, KINDS)
    assert isinstance(configs["gpu/gpu-0"], GpuConfig)
    assert configs["mig/gpu-2-mig-1g10gb-19-0"] is None


def test_claim_config_beats_class_config_and_later_beats_earlier() -> None:
    ts = {**GPU, "sharing": {"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Long"}}}
    claim = _claim(
        [
            make_opaque_config(GPU, source="FromClaim"),
            make_opaque_config(ts, source="FromClass"),
        ]
    )
    chosen = effective_configs(claim, KINDS)["gpu/gpu-0"]
    assert isinstance(chosen, GpuConfig)
    assert chosen.sharing is None  # the claim's config wins over the class's


def test_config_naming_a_request_must_fit_the_device_type() -> None:
    claim = _claim(
        [make_opaque_config(GPU, requests=["mig"])],
        results=(("mig", "gpu-2-mig-1g10gb-19-0"),),
    )
    with pytest.raises(ClaimError, match=r"GpuConfig names request 'mig'.*use MigDeviceConfig"):
        effective_configs(claim, KINDS)


def test_mig_config_for_a_mig_request() -> None:
    claim = _claim(
        [make_opaque_config(MIG, requests=["mig"])],
        results=(("mig", "gpu-2-mig-1g10gb-19-0"), ("gpu", "gpu-1")),
    )
    configs = effective_configs(claim, KINDS)
    assert isinstance(configs["mig/gpu-2-mig-1g10gb-19-0"], MigDeviceConfig)
    assert configs["gpu/gpu-1"] is None


@pytest.mark.parametrize(
    ("parameters", "message"),
    [
        ({**GPU, "sharing": {"strategy": "Magic"}}, r"sharing\.strategy"),
        ({**GPU, "shareing": {}}, r"shareing: Extra inputs are not permitted"),
        ({**GPU, "apiVersion": "resource.nvidia.com/v1"}, r"apiVersion"),
        ({"apiVersion": "resource.nvidia.com/v1beta1", "kind": "VfioConfig"}, r"kind is 'Vfio"),
        (
            {
                **GPU,
                "sharing": {"strategy": "MPS", "mpsConfig": {"defaultActiveThreadPercentage": 150}},
            },
            r"defaultActiveThreadPercentage",
        ),
        (
            {
                **GPU,
                "sharing": {
                    "strategy": "MPS",
                    "mpsConfig": {"defaultPinnedDeviceMemoryLimit": "1Ki"},
                },
            },
            r"at least 1Mi",
        ),
        (  # a malformed quantity is a ClaimError naming the field, not a bare QuantityError
            {
                **GPU,
                "sharing": {
                    "strategy": "MPS",
                    "mpsConfig": {"defaultPerDevicePinnedMemoryLimit": {"0": "lots"}},
                },
            },
            r"defaultPerDevicePinnedMemoryLimit: Value error, quantity 'lots'",
        ),
    ],
)
def test_bad_configs_name_claim_entry_and_field(parameters: dict[str, Any], message: str) -> None:
    claim = _claim([make_opaque_config(parameters)])
    with pytest.raises(ClaimError, match=message) as raised:
        effective_configs(claim, KINDS)
    assert "ResourceClaim default/claim-1: status.allocation.devices.config[0]" in str(raised.value)


def test_time_slicing_is_no_longer_refused() -> None:
    ts = {**GPU, "sharing": {"strategy": "TimeSlicing"}}
    claim = _claim([make_opaque_config(ts)])
    assert unsupported_sharing(claim, effective_configs(claim, KINDS)) is None


def test_mps_is_applied_with_its_settings_or_defaults() -> None:
    with_settings = {
        **GPU,
        "sharing": {"strategy": "MPS", "mpsConfig": {"defaultActiveThreadPercentage": 20}},
    }
    for parameters, percentage in (
        ({**GPU, "sharing": {"strategy": "MPS"}}, None),
        (with_settings, 20),
    ):
        claim = _claim([make_opaque_config(parameters)])
        configs = effective_configs(claim, KINDS)
        assert unsupported_sharing(claim, configs) is None
        settings = mps_config_of(claim.results[0], configs)
        assert settings is not None
        assert settings.default_active_thread_percentage == percentage
    plain = _claim([make_opaque_config(GPU)])
    assert mps_config_of(plain.results[0], effective_configs(plain, KINDS)) is None
