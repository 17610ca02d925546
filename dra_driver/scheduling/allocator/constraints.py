"""Claim constraints: matchAttribute and distinctAttribute across a claim's devices.

A claim may require that all devices of some (or all) of its requests share
an attribute value (`matchAttribute`, e.g. same `productName`) or that they all
differ (`distinctAttribute`, e.g. different `uuid`). Constraints are checked
incrementally as the search adds devices and undone when it backtracks; like
upstream they are assumed monotonic (once violated, more devices can't fix it).

List-typed values (`ints`, `strings`, ..., DRAListTypeAttributes, 1.36+) follow
KEP-5491: a scalar counts as a one-element list; devices match when the
intersection of all their values is non-empty (a GPU on NUMA node [1] matches a
NIC on [0, 1]), and are distinct when no value of one is a value of another.
With scalars only, both rules are plain equality and inequality.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from typing import Any

from dra_driver.scheduling.allocator.trace import (
    AttributeMissing,
    ConstraintMismatch,
    DistinctViolation,
    Reason,
)

# (type, value); None for an attribute without a known value member
AttributeValue = tuple[str, Any] | None

_VALUE_KINDS = ("string", "int", "bool", "version")
_LIST_KINDS = {"strings": "string", "ints": "int", "bools": "bool", "versions": "version"}
# The typed values of one attribute, a scalar as a one-element set; None without a value member.
AttributeValues = frozenset[tuple[str, Any]] | None


def lookup_attribute(
    attributes: Mapping[str, Mapping[str, Any]], driver: str, name: str
) -> Mapping[str, Any] | None:
    """A device attribute by fully-qualified name.

    The exact key wins; otherwise a name whose domain is the device's driver
    also matches the bare identifier (`gpu.nvidia.com/index` finds `index` on a
    `gpu.nvidia.com` device).
    """
    found = attributes.get(name)
    if found is not None:
        return found
    domain, slash, identifier = name.partition("/")
    if not slash or domain != driver:
        return None
    return attributes.get(identifier)


def attribute_value(attribute: Mapping[str, Any]) -> AttributeValue:
    """The typed value of an attribute; values only compare equal with the same type."""
    for kind in _VALUE_KINDS:
        if kind in attribute and attribute[kind] is not None:
            return (kind, attribute[kind])
    return None


def attribute_values(attribute: Mapping[str, Any]) -> AttributeValues:
    """The typed values of an attribute as a set: a scalar, or each item of a list."""
    scalar = attribute_value(attribute)
    if scalar is not None:
        return frozenset({scalar})
    for kind, item_kind in _LIST_KINDS.items():
        items = attribute.get(kind)
        if isinstance(items, list) and items:
            return frozenset((item_kind, item) for item in items)
    return None


def render_values(values: AttributeValues) -> str:
    """One value as `render_value` shows it; several as `[0, 1]`, sorted."""
    if not values:
        return "<no value>"
    if len(values) == 1:
        return render_value(next(iter(values)))
    return "[" + ", ".join(sorted(render_value(v) for v in values)) + "]"


def render_value(value: AttributeValue) -> str:
    if value is None:
        return "<no value>"
    kind, raw = value
    if kind == "string":
        return f'"{raw}"'
    if kind == "bool":
        return "true" if raw else "false"
    if kind == "version":
        return f"version {raw}"
    return str(raw)


class Constraint(ABC):
    """Common scoping: a constraint with `requests` only applies to those requests."""

    kind = "constraint"

    def __init__(self, attribute: str, requests: Sequence[str]) -> None:
        self.attribute = attribute
        self.requests = frozenset(requests)

    def applies(self, request: str, subrequest: str | None) -> bool:
        """`req` covers all its subrequests; `req/sub` only that subrequest."""
        if not self.requests:
            return True
        if request in self.requests:
            return True
        return subrequest is not None and f"{request}/{subrequest}" in self.requests

    @abstractmethod
    def add(
        self,
        request: str,
        subrequest: str | None,
        attributes: Mapping[str, Mapping[str, Any]],
        driver: str,
    ) -> Reason | None:
        """Track a device about to be allocated; a Reason if it violates the constraint."""

    @abstractmethod
    def remove(self, request: str, subrequest: str | None) -> None:
        """Undo the matching successful `add` (called in reverse order when backtracking)."""


class MatchAttribute(Constraint):
    """All covered devices must have the attribute, with a common typed value."""

    kind = "matchAttribute"

    def __init__(self, attribute: str, requests: Sequence[str]) -> None:
        super().__init__(attribute, requests)
        # The values all devices added so far share, one entry per added device.
        self._common: list[AttributeValues] = []

    def add(
        self,
        request: str,
        subrequest: str | None,
        attributes: Mapping[str, Mapping[str, Any]],
        driver: str,
    ) -> Reason | None:
        if not self.applies(request, subrequest):
            return None
        attribute = lookup_attribute(attributes, driver, self.attribute)
        if attribute is None:
            return AttributeMissing(self.attribute, self.kind)
        values = attribute_values(attribute)
        if not self._common:
            self._common.append(values)
            return None
        shared = self._common[-1]
        common = values & shared if values is not None and shared is not None else None
        if not common:
            return ConstraintMismatch(self.attribute, render_values(values), render_values(shared))
        self._common.append(common)
        return None

    def remove(self, request: str, subrequest: str | None) -> None:
        if self.applies(request, subrequest):
            self._common.pop()


class DistinctAttribute(Constraint):
    """All covered devices must have the attribute, with no typed value in common."""

    kind = "distinctAttribute"

    def __init__(self, attribute: str, requests: Sequence[str]) -> None:
        super().__init__(attribute, requests)
        self._values: list[AttributeValues] = []

    def add(
        self,
        request: str,
        subrequest: str | None,
        attributes: Mapping[str, Mapping[str, Any]],
        driver: str,
    ) -> Reason | None:
        if not self.applies(request, subrequest):
            return None
        attribute = lookup_attribute(attributes, driver, self.attribute)
        if attribute is None:
            return AttributeMissing(self.attribute, self.kind)
        values = attribute_values(attribute)
        if self._values:
            taken = [v for v in self._values if v is None or values is None or v & values]
            if taken:
                clash = values & taken[0] if values is not None and taken[0] is not None else None
                return DistinctViolation(self.attribute, render_values(clash or values))
        self._values.append(values)
        return None

    def remove(self, request: str, subrequest: str | None) -> None:
        if self.applies(request, subrequest):
            self._values.pop()
