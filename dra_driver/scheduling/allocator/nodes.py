"""Nodes and node selectors, as far as device allocation looks at them.

ResourceSlices (and, with per-device node selection, single devices) say where
their devices are reachable: one node by name, all nodes, or a core/v1
NodeSelector. The allocator needs the same matching rules as the scheduler's
`nodeaffinity.NodeSelector`: terms are ORed, the requirements inside a term are
ANDed, an empty term matches nothing, `matchFields` only knows `metadata.name`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from dra_driver.errors import AllocationError


@dataclass(frozen=True)
class Node:
    """The node an allocation is attempted for: its name and labels."""

    name: str
    labels: Mapping[str, str] = field(default_factory=dict)


def node_matches(
    node: Node,
    node_name: str | None,
    all_nodes: bool,
    node_selector: Mapping[str, Any] | None,
    *,
    where: str,
) -> bool:
    """Whether a slice/device with these node-selection fields is reachable from `node`.

    Mirrors `NodeMatches`: a node name wins, then `allNodes`, then the selector;
    nothing set means "not reachable". A malformed selector raises
    AllocationError naming `where`.
    """
    if node_name:
        return node.name == node_name
    if all_nodes:
        return True
    if node_selector is not None:
        return selector_matches(node, node_selector, where=where)
    return False


def selector_matches(node: Node, selector: Mapping[str, Any], *, where: str) -> bool:
    """core/v1 NodeSelector semantics: any term matches."""
    terms = selector.get("nodeSelectorTerms") or []
    return any(_term_matches(node, term, where=where) for term in terms)


def _term_matches(node: Node, term: Mapping[str, Any], *, where: str) -> bool:
    expressions: Sequence[Mapping[str, Any]] = term.get("matchExpressions") or []
    fields: Sequence[Mapping[str, Any]] = term.get("matchFields") or []
    if not expressions and not fields:
        return False
    for requirement in expressions:
        if not _requirement_matches(requirement, node.labels, where=where):
            return False
    for requirement in fields:
        key = requirement.get("key")
        if key != "metadata.name":
            raise AllocationError(
                f"{where}: nodeSelector matchFields key {key!r} is not supported "
                "(only metadata.name)"
            )
        operator = requirement.get("operator")
        if operator not in ("In", "NotIn"):
            raise AllocationError(
                f"{where}: nodeSelector matchFields operator {operator!r} is not supported "
                "(only In and NotIn)"
            )
        if not _requirement_matches(requirement, {"metadata.name": node.name}, where=where):
            return False
    return True


def _requirement_matches(
    requirement: Mapping[str, Any], labels: Mapping[str, str], *, where: str
) -> bool:
    key = requirement.get("key", "")
    operator = requirement.get("operator")
    values: Sequence[str] = requirement.get("values") or []
    present = key in labels
    if operator == "In":
        return present and labels[key] in values
    if operator == "NotIn":
        return not present or labels[key] not in values
    if operator == "Exists":
        return present
    if operator == "DoesNotExist":
        return not present
    if operator in ("Gt", "Lt"):
        if len(values) != 1:
            raise AllocationError(
                f"{where}: nodeSelector requirement {key!r} {operator} needs exactly one value"
            )
        try:
            bound = int(values[0])
        except ValueError as exc:
            raise AllocationError(
                f"{where}: nodeSelector requirement {key!r} {operator} value {values[0]!r} "
                "is not an integer"
            ) from exc
        if not present:
            return False
        try:
            actual = int(labels[key])
        except ValueError:
            return False
        return actual > bound if operator == "Gt" else actual < bound
    raise AllocationError(f"{where}: nodeSelector operator {operator!r} is not supported")
