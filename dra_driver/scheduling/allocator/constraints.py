"""Claim constraints: matchAttribute and distinctAttribute across a claim's devices.

A claim may require that all devices of some (or all) of its requests share
an attribute value (`matchAttribute`, e.g. same `productName`) or that they all
differ (`distinctAttribute`, e.g. different `uuid`). Constraints are checked
incrementally as the search adds devices and undone when it backtracks; like
upstream they are assumed monotonic (once violated, more devices can't fix it).
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
    """All covered devices must have the attribute, with equal type and value."""

    kind = "matchAttribute"

    def __init__(self, attribute: str, requests: Sequence[str]) -> None:
        super().__init__(attribute, requests)
        self._reference: AttributeValue = None
        self._count = 0

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
        value = attribute_value(attribute)
        if self._count == 0:
            self._reference = value
        elif value is None or value != self._reference:
            return ConstraintMismatch(
                self.attribute, render_value(value), render_value(self._reference)
            )
        self._count += 1
        return None

    def remove(self, request: str, subrequest: str | None) -> None:
        if self.applies(request, subrequest):
            self._count -= 1


class DistinctAttribute(Constraint):
    """All covered devices must have the attribute, with pairwise different values."""

    kind = "distinctAttribute"

    def __init__(self, attribute: str, requests: Sequence[str]) -> None:
        super().__init__(attribute, requests)
        self._values: list[AttributeValue] = []

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
        value = attribute_value(attribute)
        if self._values and (value is None or value in self._values):
            return DistinctViolation(self.attribute, render_value(value))
        self._values.append(value)
        return None

    def remove(self, request: str, subrequest: str | None) -> None:
        if self.applies(request, subrequest):
            self._values.pop()
