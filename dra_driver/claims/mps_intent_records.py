"""The pydantic records of the MPS intent and status files (`dra_driver.claims.mps_intent`).

Apart from their module so that the kubelet plugin loads pydantic only once
it writes or reads an MPS file; the MPS host imports them at once.
"""

from __future__ import annotations

from typing import Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, field_validator

from dra_driver.claims.mps import MpsLimits
from dra_driver.claims.mps_intent import (
    DEVICE_UUID,
    INTENT_FORMAT,
    STATUS_FORMAT,
    VERSION,
    DaemonState,
)

R = TypeVar("R", bound="_Record")


class _Record(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True, populate_by_name=True)


class DaemonIntent(_Record):
    """What the plugin wants for the daemon of one device."""

    format: Literal["dra-gpu/mps-intent"] = INTENT_FORMAT
    version: Literal[1] = VERSION
    device_uuid: str = Field(validation_alias="deviceUuid", serialization_alias="deviceUuid")
    claims: tuple[str, ...] = ()
    """UIDs of the claims the daemon serves, sorted; empty: stop the daemon."""
    multi_user: bool = Field(
        default=False, validation_alias="multiUser", serialization_alias="multiUser"
    )
    active_thread_percentage: int | None = Field(
        default=None,
        validation_alias="activeThreadPercentage",
        serialization_alias="activeThreadPercentage",
        ge=1,
        le=100,
    )
    pinned_memory_mib: int | None = Field(
        default=None,
        validation_alias="pinnedMemoryMiB",
        serialization_alias="pinnedMemoryMiB",
        ge=1,
    )
    token: str = Field(min_length=1, max_length=64)
    """Changes with every write; the host's status echoes the token it acted on."""
    gpu_uuid: str | None = Field(
        default=None, validation_alias="gpuUuid", serialization_alias="gpuUuid"
    )
    """The GPU whose lock guards the daemon (a MIG device's parent), for the plugin."""

    @field_validator("device_uuid")
    @classmethod
    def _uuid(cls, value: str) -> str:
        if not DEVICE_UUID.fullmatch(value):
            raise ValueError(f"{value!r} is not a GPU or MIG UUID")
        return value

    @field_validator("claims")
    @classmethod
    def _sorted(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(sorted(set(value)))

    @property
    def wanted(self) -> bool:
        """Whether a daemon should run (some claim uses it)."""
        return bool(self.claims)

    @property
    def limits(self) -> MpsLimits:
        """The daemon's defaults: the most any of its claims may use."""
        return MpsLimits(self.active_thread_percentage, self.pinned_memory_mib)


class DaemonStatus(_Record):
    """What the host did for an intent."""

    format: Literal["dra-gpu/mps-status"] = STATUS_FORMAT
    version: Literal[1] = VERSION
    device_uuid: str = Field(validation_alias="deviceUuid", serialization_alias="deviceUuid")
    token: str
    """The token of the intent this status answers ("" when there was no readable intent)."""
    state: DaemonState
    pid: int | None = None
    start_ticks: int | None = Field(
        default=None, validation_alias="startTicks", serialization_alias="startTicks"
    )
    multi_user: bool = Field(
        default=False, validation_alias="multiUser", serialization_alias="multiUser"
    )
    active_thread_percentage: int | None = Field(
        default=None,
        validation_alias="activeThreadPercentage",
        serialization_alias="activeThreadPercentage",
    )
    pinned_memory_mib: int | None = Field(
        default=None, validation_alias="pinnedMemoryMiB", serialization_alias="pinnedMemoryMiB"
    )
    error: str = ""

    @property
    def limits(self) -> MpsLimits:
        """The defaults the host last sent to the daemon."""
        return MpsLimits(self.active_thread_percentage, self.pinned_memory_mib)


__all__ = ["R", "DaemonIntent", "DaemonStatus"]
