"""NVIDIA's `VfioDeviceConfig`, decoded strictly (`dra_driver.claims.device_config`)."""

from __future__ import annotations

from typing import Any

import pytest

from dra_driver.claims.allocated import OpaqueConfig
from dra_driver.claims.device_config import (
    IommuBackendPolicy,
    VfioDeviceConfig,
    decode,
)
from dra_driver.errors import ClaimError


def config(**fields: Any) -> OpaqueConfig:
    params = {"apiVersion": "resource.nvidia.com/v1beta1", "kind": "VfioDeviceConfig", **fields}
    return OpaqueConfig(source="FromClaim", requests=(), driver="gpu.nvidia.com", parameters=params)


def test_defaults_are_nvidias_legacy_only_without_the_api_device() -> None:
    decoded = decode(config(), "claim vm")
    assert isinstance(decoded, VfioDeviceConfig)
    assert decoded.iommu.backend_policy == IommuBackendPolicy.LEGACY_ONLY
    assert decoded.iommu.enable_api_device is False
    assert decode(config(iommu={"backendPolicy": ""}), "x").iommu.prefer_iommufd is False  # type: ignore[union-attr]


def test_prefer_iommufd_with_the_api_device() -> None:
    decoded = decode(
        config(iommu={"backendPolicy": "PreferIommuFD", "enableAPIDevice": True}), "claim vm"
    )
    assert isinstance(decoded, VfioDeviceConfig)
    assert decoded.iommu.prefer_iommufd
    assert decoded.iommu.enable_api_device


@pytest.mark.parametrize(
    ("fields", "problem"),
    [
        ({"iommu": {"backendPolicy": "IommuFDOnly"}}, "iommu.backendPolicy"),
        ({"iommu": {"enableAPIDevice": "yes"}}, "iommu.enableAPIDevice"),
        ({"iommu": {"backend": "LegacyOnly"}}, "iommu.backend"),
        ({"sharing": {"strategy": "MPS"}}, "sharing"),
    ],
)
def test_bad_fields_are_named(fields: dict[str, Any], problem: str) -> None:
    with pytest.raises(ClaimError) as caught:
        decode(config(**fields), "ResourceClaim default/vm: config[0]")
    assert "ResourceClaim default/vm: config[0]: invalid VfioDeviceConfig" in str(caught.value)
    assert problem in str(caught.value)
