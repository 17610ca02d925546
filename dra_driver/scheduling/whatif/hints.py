"""One more sentence for the mistakes users make most: a misspelt attribute, shares without shares.

A selector naming `cudaComputeCapabilty` fails on every device with "no such
key"; the scheduler leaves it at that, `simulate` and `explain` add "did you
mean `cudaComputeCapability`?" from the attribute names the devices publish.
A claim asking for capacity `shares` finds no device that has it unless the
kubelet plugin publishes shares (`--consumable-shares`, the deploy's sharing
component); the reason says so instead of only "device has no capacity shares".
Likewise a claim for `vfio.gpu.nvidia.com` finds nothing unless the plugin
runs with `--passthrough`.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Mapping
from typing import Any, Final

SHARES_CAPACITY: Final = "shares"
SHARES_HINT: Final = (
    "devices publish capacity shares only when the kubelet plugin runs with "
    "--consumable-shares (the sharing component of deploy/; simulate it with "
    "--consumable-shares N)"
)
VFIO_CLASS: Final = "vfio.gpu.nvidia.com"
VFIO_HINT: Final = (
    "the kubelet plugin publishes VFIO passthrough devices only with --passthrough (the "
    "passthrough component of deploy/; simulate it with --passthrough)"
)
_NO_SUCH_KEY: Final = re.compile(r"no such key: ([A-Za-z_][A-Za-z0-9_]*)")


def attribute_names(slices: Iterable[Mapping[str, Any]]) -> set[str]:
    """The identifiers of every attribute and capacity the slices' devices publish."""
    names: set[str] = set()
    for obj in slices:
        for device in (obj.get("spec") or {}).get("devices") or []:
            for key in ("attributes", "capacity"):
                for name in device.get(key) or {}:
                    names.add(str(name).rpartition("/")[2])
    return names


def did_you_mean(message: str, names: Iterable[str]) -> str:
    """`message` with "; did you mean `x`?" when it is a CEL "no such key" for a near-miss."""
    found = _NO_SUCH_KEY.search(message)
    if found is None or "did you mean" in message:
        return message
    close = difflib.get_close_matches(found.group(1), sorted(set(names)), n=1, cutoff=0.75)
    if not close or close[0] == found.group(1):
        return message
    return f"{message}; did you mean `{close[0]}`?"


def missing_capacity(text: str, capacities: Iterable[str]) -> str:
    """`text` (a missing-capacity reason) with how to get shares, when shares are missing."""
    if SHARES_CAPACITY in capacities:
        return f"{text}: {SHARES_HINT}"
    return text


def missing_class_devices(text: str, class_name: str) -> str:
    """`text` (no device in the class) with how to get vfio devices, for their class."""
    if class_name == VFIO_CLASS:
        return f"{text}: {VFIO_HINT}"
    return text
