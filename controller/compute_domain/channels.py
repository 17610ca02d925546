"""IMEX channel numbers of ComputeDomains in channel isolation (pure).

In channel isolation (`dra_driver.compute_domain.isolation`) every
ComputeDomain gets a channel of its own in its clique's one IMEX domain, and
all of its pods get that channel. The controller alone assigns them, by the
same rule as IMEX indices (`indices.assign_indices`):

- a domain that holds a channel keeps it for its whole life (its pods hold
  the device node `/dev/nvidia-caps-imex-channels/channel<N>`), deletion
  included: it is free again only once the ComputeDomain object is gone;
- a new domain gets the lowest free channel in 1..2047 (channel 0 is never
  handed out), so channels of deleted domains are reused;
- when none is free the domain gets none, and the caller says so
  (condition `ImexChannel`, reason `ChannelsExhausted`) instead of sharing one.

Scope: cluster-wide. A channel is a number on every node, and a domain may
span cliques, so one number per domain in the whole cluster is the simple
rule that never gives two domains on one node the same channel.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from dra_driver.compute_domain.isolation import FIRST_CHANNEL, LAST_CHANNEL

__all__ = ["ChannelPlacement", "assign_channels"]


@dataclass(frozen=True, slots=True)
class ChannelPlacement:
    """Each domain's channel, or left out for want of one."""

    channels: Mapping[str, int]  # domain UID -> channel
    left_out: tuple[str, ...]  # domains that need one and got none, in the order given


def assign_channels(
    current: Mapping[str, int | None],
    domains: Iterable[str],
    *,
    no_new: Iterable[str] = (),
    first: int = FIRST_CHANNEL,
    last: int = LAST_CHANNEL,
) -> ChannelPlacement:
    """The channels of `domains` (UIDs, oldest first), keeping `current` where valid.

    `current` is what each domain's annotation says now (None: none). A channel
    is kept when it is in `first..last` and no earlier domain kept it (a copied
    annotation goes to the first holder); every other domain gets the lowest
    free one, except those in `no_new` (being deleted: they need no new one).
    """
    if not 0 <= first <= last:
        raise ValueError(f"channel range {first}..{last} is empty")
    ordered = list(dict.fromkeys(domains))
    closing = set(no_new)
    taken: set[int] = set()
    placed: dict[str, int] = {}
    for uid in ordered:
        channel = current.get(uid)
        if channel is None or not first <= channel <= last or channel in taken:
            continue
        taken.add(channel)
        placed[uid] = channel
    free = (c for c in range(first, last + 1) if c not in taken)
    left_out: list[str] = []
    for uid in ordered:
        if uid in placed or uid in closing:
            continue
        channel = next(free, None)
        if channel is None:
            left_out.append(uid)
        else:
            placed[uid] = channel
    return ChannelPlacement(channels=placed, left_out=tuple(left_out))
