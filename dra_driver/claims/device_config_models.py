"""The pydantic models of NVIDIA's opaque device configs (`dra_driver.claims.device_config`).

Apart from their module so that pydantic (some 8 MiB of the kubelet plugin's
memory, and a tenth of a second to import) is loaded only once a claim
carries an opaque config: `device_config.decode` imports this module.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from fractions import Fraction
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, field_validator

from dra_driver.claims.device_config import SharingStrategy, TimeSliceInterval
from dra_driver.errors import ConfigError
from dra_driver.kube.quantity import parse_quantity


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class TimeSlicingConfig(_Strict):
    interval: TimeSliceInterval = TimeSliceInterval.DEFAULT


class MpsConfig(_Strict):
    default_active_thread_percentage: Annotated[int, Field(ge=0, le=100)] | None = Field(
        default=None, alias="defaultActiveThreadPercentage"
    )
    default_pinned_device_memory_limit: str | None = Field(
        default=None, alias="defaultPinnedDeviceMemoryLimit"
    )
    default_per_device_pinned_memory_limit: dict[str, str] | None = Field(
        default=None, alias="defaultPerDevicePinnedMemoryLimit"
    )
    multi_user: bool = Field(default=False, alias="multiUser")

    @field_validator("default_pinned_device_memory_limit")
    @classmethod
    def _limit(cls, value: str | None) -> str | None:
        if value is not None and _bytes(value) < 2**20:
            raise ValueError("must be at least 1Mi")
        return value

    @field_validator("default_per_device_pinned_memory_limit")
    @classmethod
    def _limits(cls, value: dict[str, str] | None) -> dict[str, str] | None:
        for device, limit in (value or {}).items():
            if _bytes(limit) < 2**20:
                raise ValueError(f"limit of {device!r} must be at least 1Mi")
        return value


def _bytes(text: str) -> Fraction:
    """A quantity; a malformed one is a ValueError, so pydantic names the field with it."""
    try:
        return parse_quantity(text).value
    except ConfigError as exc:
        raise ValueError(str(exc)) from exc


class GpuSharing(_Strict):
    strategy: SharingStrategy
    time_slicing_config: TimeSlicingConfig | None = Field(default=None, alias="timeSlicingConfig")
    mps_config: MpsConfig | None = Field(default=None, alias="mpsConfig")


class MigSharing(_Strict):
    strategy: SharingStrategy
    mps_config: MpsConfig | None = Field(default=None, alias="mpsConfig")


class OpaqueConfigModel(_Strict):
    """The base of every opaque config kind (each narrows `kind` to its own name); the
    ComputeDomain driver's kinds (`dra_driver.compute_domain.configs`) derive from it too."""

    kind: str


class GpuConfig(OpaqueConfigModel):
    api_version: Literal["resource.nvidia.com/v1beta1"] = Field(alias="apiVersion")
    kind: Literal["GpuConfig"]
    sharing: GpuSharing | None = None


class MigDeviceConfig(OpaqueConfigModel):
    api_version: Literal["resource.nvidia.com/v1beta1"] = Field(alias="apiVersion")
    kind: Literal["MigDeviceConfig"]
    sharing: MigSharing | None = None


class IommuBackendPolicy(StrEnum):
    """NVIDIA's `IOMMUBackendPolicy`: the legacy VFIO group, or iommufd where the kernel has it."""

    LEGACY_ONLY = "LegacyOnly"
    PREFER_IOMMUFD = "PreferIommuFD"


class IommuConfig(_Strict):
    """NVIDIA's `IOMMUConfig`; an empty `backendPolicy` means LegacyOnly (its `Normalize`)."""

    backend_policy: IommuBackendPolicy | Literal[""] = Field(
        default=IommuBackendPolicy.LEGACY_ONLY, alias="backendPolicy"
    )
    enable_api_device: StrictBool = Field(default=False, alias="enableAPIDevice")

    @property
    def prefer_iommufd(self) -> bool:
        return self.backend_policy == IommuBackendPolicy.PREFER_IOMMUFD


class VfioDeviceConfig(OpaqueConfigModel):
    """NVIDIA's `VfioDeviceConfig`: how a passthrough GPU's VFIO nodes reach the VM."""

    api_version: Literal["resource.nvidia.com/v1beta1"] = Field(alias="apiVersion")
    kind: Literal["VfioDeviceConfig"]
    iommu: IommuConfig = Field(default_factory=IommuConfig)

    @property
    def sharing(self) -> None:
        """A passthrough GPU is never shared."""
        return None


DeviceConfig = GpuConfig | MigDeviceConfig | VfioDeviceConfig
KINDS: Mapping[str, type[GpuConfig] | type[MigDeviceConfig] | type[VfioDeviceConfig]] = {
    "GpuConfig": GpuConfig,
    "MigDeviceConfig": MigDeviceConfig,
    "VfioDeviceConfig": VfioDeviceConfig,
}


__all__ = [
    "DeviceConfig",
    "GpuConfig",
    "GpuSharing",
    "IommuBackendPolicy",
    "IommuConfig",
    "KINDS",
    "MigDeviceConfig",
    "MigSharing",
    "MpsConfig",
    "OpaqueConfigModel",
    "TimeSlicingConfig",
    "VfioDeviceConfig",
]
