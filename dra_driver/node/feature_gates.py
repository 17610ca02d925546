"""`--feature-gates` of the kubelet plugin and `dra-gpu inventory`: what the node publishes.

NVIDIA's plugin takes its optional behaviours as Kubernetes-style feature
gates (`--feature-gates Name=true,...`). Most of ours are plain flags
(`--dynamic-mig`, `--consumable-shares`); the gates here are the ones whose
name a cluster admin already knows from Kubernetes, because they must match
the cluster's own gate: with `DRAListTypeAttributes` on, devices carry
list-typed attributes, which an API server without the gate (before 1.36, or
1.36/1.37 with the alpha gate off) drops, and the slice is then refused.
`PassthroughSupport` is NVIDIA's only spelling of VFIO passthrough, so it is
taken here as the same switch as `--passthrough` (`dra_driver.cli` joins the
two, and refuses `--passthrough` with `PassthroughSupport=false`).

Parsing follows component-base's `--feature-gates` syntax: comma-separated
`Name=true|false`, case-insensitive values, the last entry of a name wins. An
unknown name or value is a ConfigError naming the entry and the known gates.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Final

from dra_driver.errors import ConfigError

LIST_TYPE_ATTRIBUTES: Final = "DRAListTypeAttributes"
PASSTHROUGH_SUPPORT: Final = "PassthroughSupport"

FLAG_HELP: Final = (
    f"comma-separated gates, e.g. {LIST_TYPE_ATTRIBUTES}=true: publish "
    "resource.kubernetes.io/numaNode as a list (KEP-6072), as NVIDIA's driver does with this "
    "gate; only for clusters that have it on (Kubernetes 1.36+, alpha). "
    f"{PASSTHROUGH_SUPPORT}=true: NVIDIA's name for --passthrough, the same switch"
)


@dataclass(frozen=True)
class DriverGates:
    """The gates' values; every gate is off unless turned on. `passthrough` is None when
    the gate is not named, so that a `false` given beside `--passthrough` can be refused."""

    list_type_attributes: bool = False
    passthrough: bool | None = None


_FIELDS: Final = {LIST_TYPE_ATTRIBUTES: "list_type_attributes", PASSTHROUGH_SUPPORT: "passthrough"}


def parse_driver_gates(text: str) -> DriverGates:
    """`Name=true,Name2=false` over the defaults (all off)."""
    gates = DriverGates()
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        name, sep, value = part.partition("=")
        field = _FIELDS.get(name.strip())
        flag = value.strip().lower()
        if not sep or field is None or flag not in ("true", "false"):
            raise ConfigError(
                f"--feature-gates {part!r}: expected NAME=true|false with NAME one of "
                f"{', '.join(_FIELDS)}"
            )
        gates = replace(gates, **{field: flag == "true"})
    return gates
