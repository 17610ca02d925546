"""The opaque configs of `compute-domain.nvidia.com`, decoded strictly.

NVIDIA's two kinds (`api/nvidia.com/resource/v1beta1/computedomainconfig.go`;
computedomain.md §1.3): `ComputeDomainChannelConfig` (`domainID`, the
ComputeDomain's UID, and `allocationMode`) for channel devices and
`ComputeDomainDaemonConfig` (`domainID`) for the daemon device. `domainID`
must not be empty. NVIDIA leaves `allocationMode` free text (anything but
`All` means one channel); here it is `Single` or `All` (absent: `Single`), so a
typo is an error instead of a silent single channel.

Decoding and precedence are the GPU driver's machinery
(`dra_driver.claims.device_config.decode_kind` and `select_config`): class
configs, then claim configs, the last one that applies wins; a config naming
a request whose device is of the other type is an error ("a
ComputeDomainChannelConfig names request 'x', but its device daemon-0 is a
daemon device"). A channel or daemon device with no config at all is an error
too: NVIDIA's default config has an empty `domainID`, which its validation
refuses, so such a claim never prepares there either; here the message says why.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Literal

from pydantic import Field, StringConstraints

from dra_driver.claims.allocated import AllocatedClaim
from dra_driver.claims.device_config import (
    OpaqueConfigModel,
    config_key,
    decode_kind,
    select_config,
)
from dra_driver.compute_domain.names import (
    CHANNEL_TYPE,
    DAEMON_TYPE,
    DRIVER_NAME,
)
from dra_driver.errors import ClaimError

_DomainID = Annotated[str, StringConstraints(min_length=1)]


class ComputeDomainChannelConfig(OpaqueConfigModel):
    api_version: Literal["resource.nvidia.com/v1beta1"] = Field(alias="apiVersion")
    kind: Literal["ComputeDomainChannelConfig"]
    domain_id: _DomainID = Field(alias="domainID")
    allocation_mode: Literal["Single", "All"] = Field(default="Single", alias="allocationMode")


class ComputeDomainDaemonConfig(OpaqueConfigModel):
    api_version: Literal["resource.nvidia.com/v1beta1"] = Field(alias="apiVersion")
    kind: Literal["ComputeDomainDaemonConfig"]
    domain_id: _DomainID = Field(alias="domainID")


ComputeDomainConfig = ComputeDomainChannelConfig | ComputeDomainDaemonConfig
_KINDS: Mapping[str, type[ComputeDomainConfig]] = {
    "ComputeDomainChannelConfig": ComputeDomainChannelConfig,
    "ComputeDomainDaemonConfig": ComputeDomainDaemonConfig,
}
_KIND_OF_DEVICE: Mapping[str, str] = {
    CHANNEL_TYPE: "ComputeDomainChannelConfig",
    DAEMON_TYPE: "ComputeDomainDaemonConfig",
}


def device_type(device: str) -> str:
    """`channel` or `daemon` from a device name (`channel-0`, `daemon-0`); ClaimError otherwise."""
    kind, _, index = device.rpartition("-")
    if kind in _KIND_OF_DEVICE and index.isdigit():
        return kind
    raise ClaimError(f"device {device!r} is not a {DRIVER_NAME} device (channel-<n> or daemon-<n>)")


def effective_configs(claim: AllocatedClaim) -> dict[str, ComputeDomainConfig]:
    """The config of each of the claim's results (keyed by "request/device").

    Raises ClaimError naming the claim and the field for a config that cannot
    be decoded, one of the wrong kind for its device, and a device no config
    applies to.
    """
    decoded: dict[int, ComputeDomainConfig] = {}
    for index, config in enumerate(claim.configs):
        where = f"{claim.ref}: status.allocation.devices.config[{index}] ({config.source})"
        decoded[id(config)] = decode_kind(config, where, _KINDS, reader=DRIVER_NAME)
    chosen: dict[str, ComputeDomainConfig] = {}
    for result in claim.results:
        kind = device_type(result.device)
        applicable = [(config, decoded[id(config)]) for config in claim.configs_for(result)]
        match = select_config(
            claim.ref,
            applicable,
            request=result.request,
            device=result.device,
            device_kind=kind,
            kind_of_device=_KIND_OF_DEVICE,
        )
        if match is None:
            raise ClaimError(
                f"{claim.ref}: request {result.request!r} got {result.device}, but no "
                f"{_KIND_OF_DEVICE[kind]} applies to it: a {kind} claim needs the "
                "ComputeDomain's domainID (use the ResourceClaimTemplate the ComputeDomain names)"
            )
        chosen[config_key(result)] = match
    return chosen


__all__ = [
    "ComputeDomainChannelConfig",
    "ComputeDomainConfig",
    "ComputeDomainDaemonConfig",
    "device_type",
    "effective_configs",
]
