"""NVIDIA's opaque device configs (`resource.nvidia.com/v1beta1`), decoded strictly.

Claims written for NVIDIA's driver carry `GpuConfig` and `MigDeviceConfig`
objects in `spec.devices.config[].opaque.parameters`. dra-gpu reads the same
kinds with the same fields, rejects unknown fields and bad values with a
message naming the claim, the config entry and the field (NVIDIA's driver
does this only in an optional webhook), and resolves which config applies to
which device the way NVIDIA does: class configs, then claim configs, the last
matching one wins; a config naming requests applies only to them and must fit
the device type; an unnamed config applies to devices of its own type.

Sharing is decoded and validated here and applied by the node plugin: MPS
(`mps_config_of` says which devices ask for it) and time-slicing
(`kubelet_plugin.sharing`). `unsupported_sharing` is where a strategy the
plugin cannot apply would be turned into a clear per-claim error instead of
a silently unshared device; today every strategy is applied.

The pydantic models live in `device_config_models`, imported only when a
claim carries a config (they are also reachable here, by name, on first use).
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import TYPE_CHECKING

from dra_driver.claims.allocated import AllocatedClaim, DeviceResult, OpaqueConfig
from dra_driver.errors import ClaimError

if TYPE_CHECKING:
    from dra_driver.claims.device_config_models import (
        DeviceConfig,
        GpuConfig,
        MigDeviceConfig,
        MpsConfig,
    )

API_VERSION = "resource.nvidia.com/v1beta1"


class SharingStrategy(StrEnum):
    TIME_SLICING = "TimeSlicing"
    MPS = "MPS"


class TimeSliceInterval(StrEnum):
    DEFAULT = "Default"
    SHORT = "Short"
    MEDIUM = "Medium"
    LONG = "Long"


_KIND_OF_DEVICE = {"gpu": "GpuConfig", "mig": "MigDeviceConfig"}


_MODELS = frozenset({"DeviceConfig", "GpuConfig", "MigDeviceConfig", "MpsConfig"})
_KIND_NAMES = ("GpuConfig", "MigDeviceConfig")


def __getattr__(name: str) -> object:
    """The config models, imported on first use (`device_config_models`: pydantic)."""
    if name in _MODELS:
        from dra_driver.claims import device_config_models

        return getattr(device_config_models, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def decode(config: OpaqueConfig, where: str) -> DeviceConfig:
    """Decode one opaque config strictly; ClaimError names `where` and the field."""
    params = config.parameters
    kind = params.get("kind") if isinstance(params, Mapping) else None
    if kind not in _KIND_NAMES:
        raise ClaimError(
            f"{where}: kind is {kind!r}; dra-gpu understands {API_VERSION} "
            f"{' and '.join(sorted(_KIND_NAMES))}"
        )
    from pydantic import ValidationError

    from dra_driver.claims.device_config_models import KINDS

    model = KINDS[str(kind)]
    try:
        return model.model_validate(dict(params))
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in error['loc']) or '(root)'}: {error['msg']}"
            for error in exc.errors()
        )
        raise ClaimError(f"{where}: invalid {kind}: {problems}") from exc


def effective_configs(
    claim: AllocatedClaim, kinds: Mapping[str, str]
) -> dict[str, DeviceConfig | None]:
    """The config that applies to each result (keyed by "request/device"), or None.

    `kinds` maps device name to "gpu" or "mig". Raises ClaimError for a
    config that cannot be decoded, or one that names a request whose device
    has the other type ("cannot apply GpuConfig to MIG device ...").
    """
    decoded: dict[int, DeviceConfig] = {}
    for index, config in enumerate(claim.configs):
        where = f"{claim.ref}: status.allocation.devices.config[{index}] ({config.source})"
        decoded[id(config)] = decode(config, where)
    chosen: dict[str, DeviceConfig | None] = {}
    for result in claim.results:
        device_kind = kinds.get(result.device, "gpu")
        wanted = _KIND_OF_DEVICE.get(device_kind, "GpuConfig")
        match: DeviceConfig | None = None
        for config in claim.configs_for(result):  # lowest precedence first
            value = decoded[id(config)]
            if config.requests:
                if value.kind != wanted:
                    raise ClaimError(
                        f"{claim.ref}: a {value.kind} names request {result.request!r}, but its "
                        f"device {result.device} is a {device_kind} device; use {wanted}"
                    )
                match = value
            elif value.kind == wanted:
                match = value
        chosen[config_key(result)] = match
    return chosen


def unsupported_sharing(
    claim: AllocatedClaim, configs: Mapping[str, DeviceConfig | None]
) -> str | None:
    """Why this plugin cannot honour the claim's sharing settings, or None."""
    for result in claim.results:
        config = configs.get(config_key(result))
        if config is None or config.sharing is None:
            continue
        if config.sharing.strategy not in (SharingStrategy.MPS, SharingStrategy.TIME_SLICING):
            return (
                f"{claim.ref}: request {result.request!r} asks for {config.sharing.strategy} "
                f"sharing of {result.device} ({config.kind}), which this dra-gpu release does "
                "not apply yet; remove the sharing section to get the device exclusively"
            )
    return None


def mps_config_of(
    result: DeviceResult, configs: Mapping[str, DeviceConfig | None]
) -> MpsConfig | None:
    """The MPS settings of `result`'s device (defaults when none are given), or None
    when its config does not ask for MPS."""
    config = configs.get(config_key(result))
    if config is None or config.sharing is None:
        return None
    if config.sharing.strategy is not SharingStrategy.MPS:
        return None
    from dra_driver.claims.device_config_models import MpsConfig

    return config.sharing.mps_config or MpsConfig()


def config_key(result: DeviceResult) -> str:
    """The key of `result` in `effective_configs`: "request/device"."""
    return f"{result.request}/{result.device}"


__all__ = [
    "API_VERSION",
    "DeviceConfig",
    "config_key",
    "GpuConfig",
    "MigDeviceConfig",
    "decode",
    "effective_configs",
    "mps_config_of",
    "unsupported_sharing",
]
