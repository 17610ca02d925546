"""Device taints and request tolerations (DRADeviceTaints).

A device with a `NoSchedule` or `NoExecute` taint may only be allocated to a
request that tolerates it; `None` and effects this code does not know are
ignored, exactly like the scheduler. Toleration matching follows
`resourceclaim.ToleratesTaint`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

BLOCKING_EFFECTS: Final = frozenset({"NoSchedule", "NoExecute"})


def tolerates(toleration: Mapping[str, Any], taint: Mapping[str, Any]) -> bool:
    """Whether one toleration tolerates one taint.

    Effect: empty matches every effect. Key: empty matches every key.
    Operator: `Exists` matches any value, `Equal` (or empty) needs an equal
    value, anything else matches nothing.
    """
    effect = toleration.get("effect") or ""
    if effect and effect != (taint.get("effect") or ""):
        return False
    key = toleration.get("key") or ""
    if key and key != (taint.get("key") or ""):
        return False
    operator = toleration.get("operator") or "Equal"
    if operator == "Exists":
        return True
    if operator == "Equal":
        return (toleration.get("value") or "") == (taint.get("value") or "")
    return False


def untolerated_taint(
    taints: Sequence[Mapping[str, Any]], tolerations: Sequence[Mapping[str, Any]]
) -> Mapping[str, Any] | None:
    """The first blocking taint none of the tolerations tolerates, or None."""
    for taint in taints:
        if taint.get("effect") not in BLOCKING_EFFECTS:
            continue
        if not any(tolerates(toleration, taint) for toleration in tolerations):
            return taint
    return None
