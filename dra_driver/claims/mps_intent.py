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

This module is the format only: pure, bytes in and out. Its pydantic records
are in `mps_intent_records`, imported on first use (the plugin of a node
without MPS claims never loads pydantic). Both files are JSON
objects with a `format` and a `version`; unknown fields are ignored, so a
newer plugin and an older host (or the reverse) still understand each other
within one version.
"""

from __future__ import annotations

import re
from enum import StrEnum
from typing import TYPE_CHECKING, Final

from dra_driver.claims.mps import MpsLimits
from dra_driver.errors import MpsError

if TYPE_CHECKING:
    from pydantic import ValidationError

    from dra_driver.claims.mps_intent_records import DaemonIntent, DaemonStatus, R

VERSION: Final = 1
INTENT_FORMAT: Final = "dra-gpu/mps-intent"
STATUS_FORMAT: Final = "dra-gpu/mps-status"
INTENT_SUFFIX: Final = ".intent.json"
STATUS_SUFFIX: Final = ".status.json"
HOST_LOCK_FILE: Final = "host.lock"
HOST_WAKE_FIFO: Final = "host.wake"
MAX_FILE_BYTES: Final = 1 << 20
"""Larger intent or status files are refused unread (a node holds at most a few hundred claims)."""

DEVICE_UUID = re.compile(r"(GPU|MIG)-[A-Za-z0-9][A-Za-z0-9-]{0,127}")


class DaemonState(StrEnum):
    """What the host reports for a device's daemon."""

    RUNNING = "running"
    """The daemon runs with the intent's mode and limits."""
    STOPPED = "stopped"
    """The intent had no claims: no daemon runs and its directory is gone."""
    FAILED = "failed"
    """The host could not do what the intent asks; `error` says why."""


def __getattr__(name: str) -> object:
    """The records, imported on first use (`mps_intent_records`: pydantic)."""
    if name in ("DaemonIntent", "DaemonStatus"):
        from dra_driver.claims import mps_intent_records

        return getattr(mps_intent_records, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def intent_file_name(device_uuid: str) -> str:
    return f"{device_uuid}{INTENT_SUFFIX}"


def status_file_name(device_uuid: str) -> str:
    return f"{device_uuid}{STATUS_SUFFIX}"


def device_uuid_of(file_name: str) -> str | None:
    """The device UUID an intent or status file is named after; None for other names."""
    for suffix in (INTENT_SUFFIX, STATUS_SUFFIX):
        if file_name.endswith(suffix):
            uuid = file_name[: -len(suffix)]
            return uuid if DEVICE_UUID.fullmatch(uuid) else None
    return None


def is_device_uuid(value: str) -> bool:
    """Whether `value` can name a daemon's directory (a GPU or MIG UUID)."""
    return DEVICE_UUID.fullmatch(value) is not None


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
    from pydantic import ValidationError

    from dra_driver.claims.mps_intent_records import DaemonIntent

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
    from dra_driver.claims.mps_intent_records import DaemonIntent

    return _decode(DaemonIntent, data, source)


def decode_status(data: bytes, *, source: str) -> DaemonStatus:
    """Parse a status file; `MpsError` naming `source` and the field if it is bad."""
    from dra_driver.claims.mps_intent_records import DaemonStatus

    return _decode(DaemonStatus, data, source)


def _decode(model: type[R], data: bytes, source: str) -> R:
    from pydantic import ValidationError

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
