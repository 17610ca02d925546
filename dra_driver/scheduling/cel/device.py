"""The `device` variable: a ResourceSlice device as CEL sees it.

`DeviceView` is what the allocator hands in: the driver name plus the
device's `attributes` and `capacity` in API form. On first use it is turned
into `DeviceValue`, the run-time value of `device`, exactly as Kubernetes'
`DeviceMatches` builds its variables:

* a name without `/` goes under the driver's own domain, `<domain>/<id>`
  under `<domain>`;
* attribute values become CEL int, bool, string or `kubernetes.Semver`, and
  the list values of DRAListTypeAttributes (`ints`, `bools`, `strings`,
  `versions`) lists of those; capacities become `kubernetes.Quantity`;
* the two outer maps yield an empty map for an unknown domain.

The conversion is cached on the view (and semvers/quantities are cached by
text), so a view evaluated against many selectors pays for it once.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from dra_driver.errors import QuantityError
from dra_driver.scheduling.cel.diagnostics import EvalError
from dra_driver.scheduling.cel.quantity import cel_quantity
from dra_driver.scheduling.cel.semver import SemverError, parse_semver
from dra_driver.scheduling.cel.values import DefaultingMap, register_kind


@dataclass(frozen=True)
class DeviceView:
    """A device as a selector sees it (API form of a ResourceSlice device).

    `attributes` maps qualified names to one-key unions, e.g.
    `{"productName": {"string": "NVIDIA H100 80GB HBM3"},
    "cudaComputeCapability": {"version": "9.0.0"}}`; `capacity` maps
    qualified names to `{"value": "80Gi"}`.
    """

    driver: str
    attributes: Mapping[str, Mapping[str, Any]]
    capacity: Mapping[str, Mapping[str, Any]]
    allow_multiple_allocations: bool = False

    def cel_value(self) -> DeviceValue:
        """The run-time value of `device` for this view (built once, then kept).

        It is kept outside the dataclass fields, so equality, repr and
        `dataclasses.replace` see only the four fields above.
        """
        return self._cel_value

    @functools.cached_property
    def _cel_value(self) -> DeviceValue:
        return DeviceValue(self)


class DeviceValue:
    """The run-time value of `device` (CEL type `kubernetes.DRADevice`)."""

    __slots__ = ("_attributes", "_capacity", "_view", "allow_multiple_allocations", "driver")

    def __init__(self, view: DeviceView) -> None:
        self._view = view
        self.driver = view.driver
        self.allow_multiple_allocations = bool(view.allow_multiple_allocations)
        self._attributes: DefaultingMap | None = None
        self._capacity: DefaultingMap | None = None

    def attributes(self, pos: int | None = None) -> DefaultingMap:
        result = self._attributes
        if result is None:
            result = _group(self._view.attributes, self.driver, _attribute_value, "attribute", pos)
            self._attributes = result
        return result

    def capacity(self, pos: int | None = None) -> DefaultingMap:
        result = self._capacity
        if result is None:
            result = _group(self._view.capacity, self.driver, _capacity_value, "capacity", pos)
            self._capacity = result
        return result

    def field(self, name: str, pos: int | None) -> Any:
        """Field selection by name, for `device` reached through a dynamic value."""
        if name == "driver":
            return self.driver
        if name == "attributes":
            return self.attributes(pos)
        if name == "capacity":
            return self.capacity(pos)
        if name == "allowMultipleAllocations":
            return self.allow_multiple_allocations
        raise EvalError(f"no such key: {name}", pos)

    def has_field(self, name: str) -> bool:
        return name in ("driver", "attributes", "capacity", "allowMultipleAllocations")


register_kind(DeviceValue, "kubernetes.DRADevice")


def _group(
    entries: Mapping[str, Mapping[str, Any]],
    driver: str,
    convert: Any,
    what: str,
    pos: int | None,
) -> DefaultingMap:
    result = DefaultingMap()
    for name, raw in entries.items():
        domain, sep, ident = name.partition("/")
        if not sep:
            domain, ident = driver, name
        inner = result.get(domain)
        if inner is None:
            inner = {}
            dict.__setitem__(result, domain, inner)
        try:
            inner[ident] = convert(raw)
        except ValueError as exc:
            raise EvalError(f"{what} {name}: {exc}", pos) from exc
    return result


def _attribute_value(raw: Mapping[str, Any]) -> Any:
    if type(raw) is not dict and not isinstance(raw, Mapping):
        raise ValueError("unsupported attribute value")
    if len(raw) != 1:
        raise ValueError("unsupported attribute value")
    ((kind, value),) = raw.items()
    value_type = type(value)
    if kind == "string" and (value_type is str or isinstance(value, str)):
        return str(value)
    if kind == "int" and (value_type is int or _is_int(value)):
        return int(value)
    if kind == "bool" and isinstance(value, bool):
        return value
    if kind == "version" and isinstance(value, str):
        return _version(value)
    if kind in _LIST_KINDS and isinstance(value, list | tuple):
        scalar = _LIST_KINDS[kind]
        return [_attribute_value({scalar: item}) for item in value]
    raise ValueError("unsupported attribute value")


# DeviceAttribute's list fields (k8s.io/api/resource/v1, DRAListTypeAttributes).
_LIST_KINDS = {"ints": "int", "bools": "bool", "strings": "string", "versions": "version"}


def _version(value: str) -> Any:
    try:
        return parse_semver(value)
    except SemverError as exc:
        raise ValueError(f"parse semantic version: {exc}") from exc


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _capacity_value(raw: Mapping[str, Any]) -> Any:
    value = raw.get("value") if isinstance(raw, Mapping) else None
    if _is_int(value):
        value = str(value)
    if not isinstance(value, str):
        raise ValueError("capacity has no quantity value")
    try:
        return cel_quantity(value)
    except QuantityError as exc:
        raise ValueError(str(exc)) from exc
