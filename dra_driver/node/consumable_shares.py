"""Consumable shares (KEP-5075): publishing GPUs that several claims may share.

NVIDIA's driver has a `--consumable-shares unlimited|memory|<N>` flag
(`cmd/gpu-kubelet-plugin/consumable_shares.go`); dra-gpu takes the same flag
with the same meaning, so slices, claims and DeviceClasses written for one
work with the other. With any mode, whole GPUs and MIG devices are published
with `allowMultipleAllocations: true`, `memory` is rounded down to 1Mi and
given a request policy, and:

=============  =======================================================  ==============
mode           `memory` requestPolicy                                    extra capacity
=============  =======================================================  ==============
`unlimited`    default 0, validRange 0..memory, step 1Mi                 -
`memory`       default = all memory, validRange 1Mi..memory, step 1Mi    -
`<N>`          as `unlimited`                                            `shares` = N,
                                                                         default 1,
                                                                         range 1..N,
                                                                         step 1
=============  =======================================================  ==============

As upstream, a capacity without a request policy (the engine counts of a MIG
device) is consumed whole by every share (`GetConsumedCapacityFromRequest`),
so a MIG device fits one share at a time, exactly as with NVIDIA's driver.

Pure: devices in, devices out.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Final

from dra_driver.errors import ConfigError
from dra_driver.kube.quantity import format_quantity

if TYPE_CHECKING:
    from dra_driver.node.devices import AllocatableDevice

MIB: Final = 2**20
SHARES_CAPACITY: Final = "shares"
MEMORY_CAPACITY: Final = "memory"
FLAG_HELP: Final = (
    "publish whole GPUs and MIG devices for sharing between claims (KEP-5075, needs the "
    "DRAConsumableCapacity feature gate): 'unlimited' (memory requests default to 0), "
    "'memory' (memory requests default to the whole device), or N (a 'shares' capacity of N, "
    "one share per claim by default); NVIDIA's --consumable-shares"
)


@dataclass(frozen=True)
class RequestPolicy:
    """A capacity's `requestPolicy` with a `validRange` (the only kind NVIDIA publishes)."""

    default: int
    minimum: int
    maximum: int
    step: int

    def to_api(self) -> dict[str, object]:
        return {
            "default": format_quantity(self.default),
            "validRange": {
                "min": format_quantity(self.minimum),
                "max": format_quantity(self.maximum),
                "step": format_quantity(self.step),
            },
        }


@dataclass(frozen=True)
class ConsumableShares:
    """A parsed `--consumable-shares` value: `mode` is "unlimited", "memory" or "shares"."""

    mode: str
    shares: int = 0

    def __str__(self) -> str:
        return str(self.shares) if self.mode == "shares" else self.mode


def parse_consumable_shares(text: str) -> ConsumableShares | None:
    """The flag's value; None for "" or "disabled" (NVIDIA's off values).

    Raises ConfigError for anything else that is not a positive integer.
    """
    value = text.strip()
    if value in ("", "disabled"):
        return None
    if value in ("unlimited", "memory"):
        return ConsumableShares(value)
    if value.isdigit() and int(value) > 0:
        return ConsumableShares("shares", int(value))
    raise ConfigError(
        f"--consumable-shares {text!r}: expected 'unlimited', 'memory' or a positive number "
        "of shares per device"
    )


def apply_consumable_shares(
    devices: Iterable[AllocatableDevice], shares: ConsumableShares | None
) -> list[AllocatableDevice]:
    """`devices` as published with `shares` (unchanged when None)."""
    return [_shared(device, shares) for device in devices]


def _shared(device: AllocatableDevice, shares: ConsumableShares | None) -> AllocatableDevice:
    if shares is None:
        return device
    capacity = dict(device.capacity)
    policies = dict(device.request_policies)
    memory = capacity.get(MEMORY_CAPACITY)
    if memory is not None:  # NVIDIA returns early for a device without memory
        rounded = memory // MIB * MIB
        capacity[MEMORY_CAPACITY] = rounded
        if shares.mode == "memory":
            policies[MEMORY_CAPACITY] = RequestPolicy(rounded, MIB, rounded, MIB)
        else:
            policies[MEMORY_CAPACITY] = RequestPolicy(0, 0, rounded, MIB)
        if shares.mode == "shares":
            capacity[SHARES_CAPACITY] = shares.shares
            policies[SHARES_CAPACITY] = RequestPolicy(1, 1, shares.shares, 1)
    return dataclasses.replace(
        device,
        allow_multiple_allocations=True,
        capacity=MappingProxyType(capacity),
        request_policies=MappingProxyType(policies),
    )


__all__ = [
    "FLAG_HELP",
    "ConsumableShares",
    "RequestPolicy",
    "apply_consumable_shares",
    "parse_consumable_shares",
]
