"""IMEX node indices within one clique of one ComputeDomain (pure).

NVIDIA's daemons each pick their own index in a shared clique object, so
indices churn and collide under load (computedomain.md §4.5, §7.3-7.4, #1418):
IMEX reads its nodes config once, so a node whose own index changes keeps a
stale identity. Here the controller alone assigns them, by one rule:

- a node that already holds an index keeps it while it is a member, whatever
  happens to its address;
- a new member gets the lowest free index below the limit
  (`--max-nodes-per-imex-domain`, 18 on GB200/GB300), so gaps are refilled;
- when none is free, the member is left out (no row), and the caller says so
  in a condition and an Event rather than retrying forever as NVIDIA does.

Members are placed in the order given (the caller passes them oldest first),
so a burst of joins is deterministic.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

__all__ = ["Placement", "assign_indices"]


@dataclass(frozen=True, slots=True)
class Placement:
    """Where each member of one clique sits: its index, or left out for want of one."""

    indices: Mapping[str, int]  # node name -> index, 0 <= index < max_nodes
    left_out: tuple[str, ...]  # members with no free index, in the order given


def assign_indices(current: Mapping[str, int], members: Iterable[str], max_nodes: int) -> Placement:
    """The indices of `members` (node names, oldest first), keeping `current` where valid.

    `current` is what the clique object says now (node -> index). An index is
    kept when its node is still a member, it is below `max_nodes` and no other
    kept node holds it (a hand-edited duplicate goes to the first holder in
    member order); every other member gets the lowest free index.
    """
    if max_nodes < 1:
        raise ValueError(f"max_nodes must be at least 1, got {max_nodes}")
    ordered = list(dict.fromkeys(members))
    taken: dict[int, str] = {}
    kept: dict[str, int] = {}
    for node in ordered:
        index = current.get(node)
        if index is None or not 0 <= index < max_nodes or index in taken:
            continue
        taken[index] = node
        kept[node] = index
    free = (i for i in range(max_nodes) if i not in taken)
    placed = dict(kept)
    left_out: list[str] = []
    for node in ordered:
        if node in kept:
            continue
        index = next(free, None)
        if index is None:
            left_out.append(node)
        else:
            placed[node] = index
    return Placement(indices=placed, left_out=tuple(left_out))
