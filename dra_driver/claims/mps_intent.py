"""The files through which the kubelet plugin tells the MPS host which daemons to run.

MPS control daemons must outlive the kubelet plugin: a plugin upgrade (a
new pod), an OOM kill or a SIGKILL of its whole process group must leave
every daemon, and with it every MPS client, running. So the plugin does not
run them. A separate per-node component, the MPS host
(`kubelet_plugin.mps_host`, its own DaemonSet with `updateStrategy:
OnDelete`), runs them as its children and reconciles them from *intent
files* the plugin writes; the plugin only writes intents and waits for the
host's answer. Everything lives under `<plugin data dir>/mps/`, a host path
both pods mount:

    host.lock               flock held by the running host (one host per node;
                            the plugin probes it to tell whether a host runs)
    host.wake               FIFO: the plugin writes a byte to wake the host at once
    <uuid>.intent.json      written by the plugin: the claims that use the daemon of
                            device <uuid>, its mode and its limits (ceiling)
    <uuid>.status.json      written by the host: what it did for which intent
    <uuid>/pipe, log, shm   the daemon's own directories (`mps.DaemonPaths`)

Protocol. The plugin writes an intent (always under the per-GPU lock of the
device's GPU, so intents of one device are never written concurrently, not
even by two plugin instances during a rolling upgrade) with a fresh random
`token`, wakes the host, and waits until `<uuid>.status.json` carries that
token. An intent with claims means "run the daemon in this mode with these
defaults": the host adopts a running daemon (pid file plus start time) or
starts one, sends the limits, and answers `running`. An intent without
claims means "stop it": the host stops the daemon, removes `<uuid>/` and
answers `stopped`; the plugin then removes both files. The host never
deletes an intent, so it never races a plugin writing one. A daemon that
dies is restarted on the host's next periodic pass while its intent has
claims.

This module is the format only: pure, bytes in and out. Both files are JSON
objects with a `format` and a `version`; unknown fields are ignored, so a
newer plugin and an older host (or the reverse) still understand each other
within one version.
"""

from __future__ import annotations

import re
from enum import StrEnum
from typing import Final, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from dra_driver.claims.mps import MpsLimits
from dra_driver.errors import MpsError

VERSION: Final = 1
INTENT_FORMAT: Final = "dra-gpu/mps-intent"
STATUS_FORMAT: Final = "dra-gpu/mps-status"
INTENT_SUFFIX: Final = ".intent.json"
STATUS_SUFFIX: Final = ".status.json"
HOST_LOCK_FILE: Final = "host.lock"
HOST_WAKE_FIFO: Final = "host.wake"
MAX_FILE_BYTES: Final = 1 << 20
"""Larger intent or status files are refused unread (a node holds at most a few hundred claims)."""

_R = TypeVar("_R", bound="_Record")
_DEVICE_UUID = re.compile(r"(GPU|MIG)-[A-Za-z0-9][A-Za-z0-9-]{0,127}")


class DaemonState(StrEnum):
    """What the host reports for a device's daemon."""

    RUNNING = "running"
    """The daemon runs with the intent's mode and limits."""
    STOPPED = "stopped"
    """The intent had no claims: no daemon runs and its directory is gone."""
    FAILED = "failed"
    """The host could not do what the intent asks; `error` says why."""


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
        if not _DEVICE_UUID.fullmatch(value):
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


def intent_file_name(device_uuid: str) -> str:
    return f"{device_uuid}{INTENT_SUFFIX}"


def status_file_name(device_uuid: str) -> str:
    return f"{device_uuid}{STATUS_SUFFIX}"


def device_uuid_of(file_name: str) -> str | None:
    """The device UUID an intent or status file is named after; None for other names."""
    for suffix in (INTENT_SUFFIX, STATUS_SUFFIX):
        if file_name.endswith(suffix):
            uuid = file_name[: -len(suffix)]
            return uuid if _DEVICE_UUID.fullmatch(uuid) else None
    return None


def is_device_uuid(value: str) -> bool:
    """Whether `value` can name a daemon's directory (a GPU or MIG UUID)."""
    return _DEVICE_UUID.fullmatch(value) is not None


def make_intent(
    device_uuid: str,
    *,
    claims: tuple[str, ...] | list[str] | set[str] | frozenset[str],
    multi_user: bool,
    limits: MpsLimits,
    token: str,
    gpu_uuid: str | None = None,
) -> DaemonIntent:
    """An intent; `MpsError` if a value is out of range (a bug in the caller)."""
    try:
        return DaemonIntent(
            device_uuid=device_uuid,
            claims=tuple(claims),
            multi_user=multi_user,
            active_thread_percentage=limits.active_thread_percentage,
            pinned_memory_mib=limits.pinned_memory_mib,
            token=token,
            gpu_uuid=gpu_uuid,
        )
    except ValidationError as exc:
        raise MpsError(f"MPS intent for {device_uuid}: {_first_error(exc)}") from exc


def encode_intent(intent: DaemonIntent) -> bytes:
    return (intent.model_dump_json(by_alias=True, indent=2) + "\n").encode()


def encode_status(status: DaemonStatus) -> bytes:
    return (status.model_dump_json(by_alias=True, indent=2) + "\n").encode()


def decode_intent(data: bytes, *, source: str) -> DaemonIntent:
    """Parse an intent file; `MpsError` naming `source` and the field if it is bad."""
    return _decode(DaemonIntent, data, source)


def decode_status(data: bytes, *, source: str) -> DaemonStatus:
    """Parse a status file; `MpsError` naming `source` and the field if it is bad."""
    return _decode(DaemonStatus, data, source)


def _decode(model: type[_R], data: bytes, source: str) -> _R:
    if len(data) > MAX_FILE_BYTES:
        raise MpsError(f"{source}: {len(data)} bytes, more than an MPS file may hold")
    try:
        return model.model_validate_json(data)
    except ValidationError as exc:
        raise MpsError(f"{source}: {_first_error(exc)}") from exc


def _first_error(exc: ValidationError) -> str:
    error = exc.errors()[0]
    where = ".".join(str(part) for part in error["loc"]) or "file"
    return f"{where}: {error['msg']}"
