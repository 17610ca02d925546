"""NVIDIA's opaque device configs (`resource.nvidia.com/v1beta1`), decoded strictly.

Claims written for NVIDIA's driver carry `GpuConfig`, `MigDeviceConfig` and
(for passthrough GPUs) `VfioDeviceConfig` objects in
`spec.devices.config[].opaque.parameters`. dra-gpu reads the same kinds
with the same fields, rejects unknown fields and bad values with a message
naming the claim, the config entry and the field (NVIDIA's driver does this
only in an optional webhook), and resolves which config applies to which
device the way NVIDIA does: class configs, then claim configs, the last
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

from collections.abc import Mapping, Sequence
from enum import StrEnum
from typing import TYPE_CHECKING, TypeVar

from dra_driver.claims.allocated import AllocatedClaim, DeviceResult, OpaqueConfig
from dra_driver.errors import ClaimError

if TYPE_CHECKING:
    from dra_driver.claims.device_config_models import (
        DeviceConfig,
        GpuConfig,
        IommuBackendPolicy,
        IommuConfig,
        MigDeviceConfig,
        MpsConfig,
        OpaqueConfigModel,
        VfioDeviceConfig,
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


_KIND_OF_DEVICE = {"gpu": "GpuConfig", "mig": "MigDeviceConfig", "vfio": "VfioDeviceConfig"}

_MODELS = frozenset(
    {
        "DeviceConfig",
        "GpuConfig",
        "IommuBackendPolicy",
        "IommuConfig",
        "MigDeviceConfig",
        "MpsConfig",
        "OpaqueConfigModel",
        "VfioDeviceConfig",
    }
)


def __getattr__(name: str) -> object:
    """The config models, imported on first use (`device_config_models`: pydantic)."""
    if name in _MODELS:
        from dra_driver.claims import device_config_models

        return getattr(device_config_models, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


ConfigT = TypeVar("ConfigT", bound="OpaqueConfigModel")


def decode(config: OpaqueConfig, where: str) -> DeviceConfig:
    """Decode one opaque config strictly; ClaimError names `where` and the field."""
    from dra_driver.claims.device_config_models import KINDS

    return decode_kind(config, where, KINDS)


def _in_words(names: Sequence[str]) -> str:
    """'A', 'A and B', 'A, B and C'."""
    return " and ".join(filter(None, (", ".join(names[:-1]), names[-1])))


def decode_kind(
    config: OpaqueConfig, where: str, kinds: Mapping[str, type[ConfigT]], reader: str = "dra-gpu"
) -> ConfigT:
    """Decode one opaque config strictly as one of `kinds` (kind name -> pydantic model);
    ClaimError names `where`, the field, and what `reader` understands. The second
    driver (`dra_driver.compute_domain.configs`) decodes its own kinds with it."""
    params = config.parameters
    kind = params.get("kind") if isinstance(params, Mapping) else None
    model = kinds.get(kind) if isinstance(kind, str) else None
    if model is None:
        raise ClaimError(
            f"{where}: kind is {kind!r}; {reader} understands {API_VERSION} "
            f"{_in_words(sorted(kinds))}"
        )
    from pydantic import ValidationError

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

    `kinds` maps device name to "gpu", "mig" or "vfio". Raises ClaimError for a
    config that cannot be decoded, or one that names a request whose device
    has the other type ("cannot apply GpuConfig to MIG device ...").
    """
    decoded: dict[int, DeviceConfig] = {}
    for index, config in enumerate(claim.configs):
        where = f"{claim.ref}: status.allocation.devices.config[{index}] ({config.source})"
        decoded[id(config)] = decode(config, where)
    chosen: dict[str, DeviceConfig | None] = {}
    for result in claim.results:
        applicable = [(config, decoded[id(config)]) for config in claim.configs_for(result)]
        chosen[config_key(result)] = select_config(
            claim.ref,
            applicable,
            request=result.request,
            device=result.device,
            device_kind=kinds.get(result.device, "gpu"),
        )
    return chosen


def select_config(
    ref: str,
    applicable: Sequence[tuple[OpaqueConfig, ConfigT]],
    *,
    request: str,
    device: str,
    device_kind: str,
    kind_of_device: Mapping[str, str] = _KIND_OF_DEVICE,
) -> ConfigT | None:
    """The config of one device of `device_kind` ("gpu" or "mig") for `request`, or None.

    `applicable` holds the configs that apply to the request, decoded, lowest
    precedence first (`AllocatedClaim.configs_for`): the last one of the
    device's own kind wins; one naming the request must be of that kind
    (ClaimError naming `ref`, the request and `device` otherwise). The plugin
    calls it per allocated device; the admission check per request, with the
    device described by its DeviceClass. `kind_of_device` maps device kinds to
    config kinds (the GPU driver's by default).
    """
    wanted = kind_of_device.get(device_kind) or next(iter(kind_of_device.values()))
    match: ConfigT | None = None
    for config, value in applicable:
        if config.requests:
            if value.kind != wanted:
                raise ClaimError(
                    f"{ref}: a {value.kind} names request {request!r}, but its "
                    f"device {device} is a {device_kind} device; use {wanted}"
                )
            match = value
        elif value.kind == wanted:
            match = value
    return match


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
    "IommuBackendPolicy",
    "IommuConfig",
    "MigDeviceConfig",
    "OpaqueConfigModel",
    "VfioDeviceConfig",
    "decode",
    "decode_kind",
    "effective_configs",
    "mps_config_of",
    "select_config",
    "unsupported_sharing",
]
