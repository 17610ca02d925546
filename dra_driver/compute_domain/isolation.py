"""IMEX isolation modes, and channel isolation's identifiers, in one place (pure).

`imex.isolation` (NVIDIA's chart value, computedomain.md §7 item 6) says how
ComputeDomains on one NVLink clique are kept apart:

- `domain` (the default, NVIDIA's only mode): one IMEX domain per
  ComputeDomain, so a node runs IMEX for one domain at a time and every pod
  gets `channel0` (`devices.with_domain`, `templates.channel_selector`).
- `channel` (dra-gpu's, opt-in; the maintainers' target in §7.6): one
  long-lived IMEX domain per clique, whose peers are every node of the clique
  that is a member of any ComputeDomain; each ComputeDomain gets a channel
  number of its own (1..2047, never 0), and its pods get
  `/dev/nvidia-caps-imex-channels/channel<N>` only. Two domains' pods share a
  node, each with its own channel: IMEX keeps memory exported on one channel
  from being imported on another.

Who writes what in channel mode (one writer each, as for indices):

- the controller assigns each ComputeDomain its channel and records it in the
  annotation `CHANNEL_ANNOTATION` on the ComputeDomain (no field is added to
  NVIDIA's strict CRD or opaque configs); the plugin reads it in Prepare, and
  checkpoints it with the claim, so Unprepare never needs it;
- the controller writes one ComputeDomainClique per clique
  (`shared_clique_name`, label `ISOLATION_LABEL=channel`, no domain label):
  the clique-wide IMEX domain's rows, an index per (clique, node);
- the plugin labels each member it creates with `ISOLATION_LABEL`, so the
  IMEX host and the controller see a plugin run with another mode, and say
  so, instead of serving it wrongly.

All three programs take `--imex-isolation` and must agree.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any, Final

from dra_driver.errors import ClusterError, ConfigError

__all__ = [
    "CHANNEL",
    "CHANNEL_ANNOTATION",
    "DOMAIN",
    "FIRST_CHANNEL",
    "ISOLATIONS",
    "ISOLATION_LABEL",
    "LAST_CHANNEL",
    "check_isolation",
    "domain_channel",
    "isolation_of",
    "shared_domain_uid",
]

DOMAIN: Final = "domain"
CHANNEL: Final = "channel"
ISOLATIONS: Final = (DOMAIN, CHANNEL)

FIRST_CHANNEL: Final = 1
"""Channel 0 is never handed out in channel mode (every IMEX client may open it)."""
LAST_CHANNEL: Final = 2047
"""The driver creates channels 0..2047 (NVIDIA's hard-coded count, `channel_cdi`)."""

CHANNEL_ANNOTATION: Final = "resource.nvidia.com/computeDomain.imexChannel"
"""On a ComputeDomain, written by the controller alone in channel mode: its channel number."""
ISOLATION_LABEL: Final = "resource.nvidia.com/computeDomain.isolation"
"""On members (the plugin's mode) and clique-wide cliques (`channel`)."""


def domain_channel(obj: Mapping[str, Any]) -> int | None:
    """The channel the controller assigned to the ComputeDomain `obj` (None: none yet).

    ClusterError naming the domain and the annotation when it holds something
    that is not a channel number (someone edited it).
    """
    meta = obj.get("metadata") or {}
    annotations = meta.get("annotations") or {}
    raw = annotations.get(CHANNEL_ANNOTATION) if isinstance(annotations, Mapping) else None
    if raw is None:
        return None
    text = str(raw)
    if text.isdigit() and FIRST_CHANNEL <= int(text) <= LAST_CHANNEL:
        return int(text)
    raise ClusterError(
        f"ComputeDomain {meta.get('namespace')}/{meta.get('name')}: metadata.annotations"
        f"[{CHANNEL_ANNOTATION}]: {text!r} is not a channel number "
        f"{FIRST_CHANNEL}..{LAST_CHANNEL} (the controller writes it; do not edit it)"
    )


def isolation_of(obj: Mapping[str, Any]) -> str:
    """The isolation mode a member or clique was written for (no label: `domain`)."""
    labels = (obj.get("metadata") or {}).get("labels") or {}
    value = labels.get(ISOLATION_LABEL) if isinstance(labels, Mapping) else None
    return str(value) if value else DOMAIN


def shared_domain_uid(clique_id: str) -> str:
    """The identity of a clique's clique-wide IMEX domain (channel mode).

    It stands where a ComputeDomain's UID stands in domain mode: the IMEX
    host's directory `domains/<it>/`, the nodes-config names
    (`membership.imex_node_name`) and the clique object's name
    (`membership.clique_name`). A hash of the clique ID, so it is the same on
    every node and in the controller, and never a real UID.
    """
    if not clique_id:
        raise ValueError("a clique-wide IMEX domain needs a clique ID")
    return f"clique-{hashlib.sha256(clique_id.encode()).hexdigest()[:16]}"


def check_isolation(mode: str, *, host_managed: bool = False) -> None:
    """ConfigError unless `--imex-isolation mode` is known and fits `--imex-mode` (one rule
    for the controller, the CD plugin and the IMEX host)."""
    if mode not in ISOLATIONS:
        raise ConfigError(f"--imex-isolation {mode!r}: expected one of {', '.join(ISOLATIONS)}")
    if mode == CHANNEL and host_managed:
        raise ConfigError(
            "--imex-isolation channel needs --imex-mode driverManaged: a host-managed IMEX "
            "has channel 0 only, shared by every ComputeDomain"
        )
