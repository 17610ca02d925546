"""Simulated operation latencies.

Real MIG operations are slow (creating a GPU instance takes about a second),
and the driver's concurrency only shows when they are: prepares on different
GPUs must overlap, retries must not pile up. `--sim-latency` gives the
simulator per-operation delays in seconds, e.g.
`gi-create=1,gi-destroy=1,ci-create=0.1`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from types import MappingProxyType

from dra_driver.errors import ConfigError

LATENCY_KEYS = ("gi-create", "gi-destroy", "ci-create", "ci-destroy", "mig-mode", "vfio-node")
"""`vfio-node`: how long udev takes to make a GPU's /dev/vfio nodes after vfio-pci binds it."""


def check_latency(latency: Mapping[str, float] | None) -> Mapping[str, float]:
    """Validate a latency mapping (keys from LATENCY_KEYS, finite seconds >= 0)."""
    checked: dict[str, float] = {}
    for key, value in (latency or {}).items():
        if key not in LATENCY_KEYS:
            raise ConfigError(
                f"simulated latency: unknown operation {key!r} (known: {', '.join(LATENCY_KEYS)})"
            )
        seconds = float(value)
        if not math.isfinite(seconds) or seconds < 0:
            raise ConfigError(f"simulated latency {key}: {value!r} is not a number of seconds >= 0")
        checked[key] = seconds
    return MappingProxyType(checked)


def parse_latency(text: str) -> dict[str, float]:
    """Parse `"gi-create=1,gi-destroy=1,ci-create=0.1"` into seconds per operation."""
    result: dict[str, float] = {}
    for raw in text.split(","):
        item = raw.strip()
        if not item:
            continue
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep:
            raise ConfigError(f"simulated latency {item!r}: expected <operation>=<seconds>")
        try:
            seconds = float(value)
        except ValueError:
            raise ConfigError(
                f"simulated latency {key}: {value.strip()!r} is not a number of seconds"
            ) from None
        if key in result:
            raise ConfigError(f"simulated latency {key}: given twice")
        result[key] = seconds
    return dict(check_latency(result))
