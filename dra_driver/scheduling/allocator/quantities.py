"""Claim and slice quantities as the allocator reads them: a `Quantity` or an AllocationError.

The one `Quantity` (parse, compare, canonical format) lives in
`dra_driver.kube.quantity`; the allocator only adds the error it raises for a bad
quantity in an API object, which names the field at fault.
"""

from __future__ import annotations

from typing import Any

from dra_driver.errors import AllocationError, QuantityError
from dra_driver.kube.quantity import Quantity, parse_quantity


def to_quantity(raw: Any, where: str) -> Quantity:
    """Parse an API quantity (string or number) or raise AllocationError naming `where`."""
    text = str(raw) if isinstance(raw, int | float) and not isinstance(raw, bool) else raw
    try:
        return parse_quantity(text)
    except QuantityError as exc:
        raise AllocationError(f"{where}: {exc}") from exc
