"""The apiserver's rules for `ResourceClaim.status.devices` (KEP-4817), as pure functions.

Drivers report per-device state in `status.devices`; kube-apiserver checks
it strictly (`validateDeviceStatus`, upstream-facts §2.2) and keeps entries
apart by owner under server-side apply. The local store and the fake
apiserver of the tests must do the same, or code that passes against them
would be refused by a real cluster:

- an entry is keyed by (driver, pool, device, shareID) and must equal a
  result of `status.allocation.devices.results`, shareID included
  ("must be an allocated device in the claim"); keys are unique;
- at most 8 conditions, each with `type`, a `status` of True/False/Unknown,
  a `reason` and a `lastTransitionTime`;
- `data`, when set, is a JSON object of at most 10 KiB (10240 bytes);
- when a device leaves the allocation, the apiserver drops its entries
  itself (`dropDeallocatedStatusDevices`);
- server-side apply (`apply_device_status`): a field manager owns the
  entries it applied; each apply sets exactly the entries it sends and
  removes the ones the same manager sent before and no longer sends;
  entries of other managers stay; taking over another manager's entry
  conflicts unless the apply forces. Ownership is recorded in
  `metadata.managedFields` (`operation: Apply`, `subresource: status`,
  `fieldsV1` keys `k:{"device":...,"driver":...,"pool":...}`), as the
  apiserver does. A claim nested deeper than `MAX_OBJECT_DEPTH` is refused
  (`InvalidObjectError`) before it is copied.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterable, Mapping
from typing import Any, Final

from dra_driver.errors import ClusterError, ConflictError, InvalidObjectError
from dra_driver.kube.names import is_dns_label, is_dns_subdomain
from dra_driver.kube.objects import Obj

MAX_CONDITIONS: Final = 8
DATA_MAX_BYTES: Final = 10 * 1024
CONDITION_STATUSES: Final = ("True", "False", "Unknown")
MAX_OBJECT_DEPTH: Final = 100
"""Deepest nesting of a claim `apply_device_status` copies. A claim nests about 8
levels to its opaque parameters, which Prepare refuses deeper than 32
(`dra_driver.claims.allocated.MAX_PARAMETERS_DEPTH`); deeper than 100 is hostile
input, refused (`InvalidObjectError`) before Python's recursion limit is reached."""

DeviceKey = tuple[str, str, str, str]
"""(driver, pool, device, shareID or "") of a status.devices entry or allocation result."""


def device_key(entry: Mapping[str, Any]) -> DeviceKey:
    return (
        str(entry.get("driver") or ""),
        str(entry.get("pool") or ""),
        str(entry.get("device") or ""),
        str(entry.get("shareID") or ""),
    )


def allocated_keys(claim: Obj) -> set[DeviceKey]:
    """The keys of the claim's allocation results."""
    allocation = (claim.get("status") or {}).get("allocation") or {}
    results = (allocation.get("devices") or {}).get("results") or []
    return {device_key(result) for result in results if isinstance(result, dict)}


def validate_device_statuses(claim: Obj, what: str) -> None:
    """Refuse a claim whose `status.devices` the apiserver would refuse (ClusterError)."""
    entries = (claim.get("status") or {}).get("devices")
    if entries is None:
        return
    if not isinstance(entries, list):
        raise ClusterError(f"{what}: status.devices: Invalid value: must be a list")
    allowed = allocated_keys(claim)
    seen: set[DeviceKey] = set()
    problems: list[str] = []
    for index, entry in enumerate(entries):
        where = f"status.devices[{index}]"
        if not isinstance(entry, dict):
            problems.append(f"{where}: Invalid value: must be an object")
            continue
        problems.extend(_entry_problems(entry, where))
        key = device_key(entry)
        if key in seen:
            problems.append(f"{where}: Duplicate value: {_key_text(key)}")
        seen.add(key)
        if key not in allowed:
            problems.append(
                f"{where}: Invalid value: {_key_text(key)}: must be an allocated device in the "
                "claim"
            )
    if problems:
        raise ClusterError(f"{what}: {'; '.join(problems)}")


def _entry_problems(entry: Mapping[str, Any], where: str) -> list[str]:
    problems = []
    for field in ("driver", "pool", "device"):
        if not entry.get(field):
            problems.append(f"{where}.{field}: Required value")
    if entry.get("driver") and not is_dns_subdomain(str(entry["driver"])):
        problems.append(f"{where}.driver: Invalid value: must be a DNS subdomain")
    if entry.get("device") and not is_dns_label(str(entry["device"])):
        problems.append(f"{where}.device: Invalid value: must be a DNS label")
    conditions = entry.get("conditions")
    if conditions is not None:
        if not isinstance(conditions, list):
            problems.append(f"{where}.conditions: Invalid value: must be a list")
            conditions = []
        if len(conditions) > MAX_CONDITIONS:
            problems.append(
                f"{where}.conditions: Too many: {len(conditions)}: must have at most "
                f"{MAX_CONDITIONS} items"
            )
        types: set[str] = set()
        for i, condition in enumerate(conditions):
            at = f"{where}.conditions[{i}]"
            if not isinstance(condition, dict):
                problems.append(f"{at}: Invalid value: must be an object")
                continue
            for field in ("type", "reason", "lastTransitionTime"):
                if not condition.get(field):
                    problems.append(f"{at}.{field}: Required value")
            if condition.get("status") not in CONDITION_STATUSES:
                problems.append(
                    f"{at}.status: Unsupported value: {condition.get('status')!r}: supported "
                    f"values: {', '.join(CONDITION_STATUSES)}"
                )
            if condition.get("type") in types:
                problems.append(f"{at}.type: Duplicate value: {condition.get('type')!r}")
            types.add(str(condition.get("type")))
    if "data" in entry:
        data = entry["data"]
        size = len(json.dumps(data, separators=(",", ":")).encode())
        if not isinstance(data, dict):
            problems.append(f"{where}.data: Invalid value: must be a valid JSON object")
        elif size > DATA_MAX_BYTES:
            problems.append(
                f"{where}.data: Too long: may not be more than {DATA_MAX_BYTES} bytes ({size})"
            )
    return problems


def drop_deallocated(claim: Obj, previous: Obj) -> None:
    """After a status update, in place: remove the `status.devices` entries of devices that
    were allocated in `previous` and are not any more (`dropDeallocatedStatusDevices`), and
    the ownership of entries that are gone."""
    gone = allocated_keys(previous) - allocated_keys(claim)
    status = claim.get("status")
    entries = status.get("devices") if isinstance(status, dict) else None
    if isinstance(entries, list) and gone:
        kept = [e for e in entries if not (isinstance(e, dict) and device_key(e) in gone)]
        if kept:
            status["devices"] = kept  # type: ignore[index]
        else:
            del status["devices"]  # type: ignore[union-attr]
    present = {
        device_key(e)
        for e in ((claim.get("status") or {}).get("devices") or [])
        if isinstance(e, dict)
    }
    owners = _owners(claim)
    if any(key not in present for key in owners):
        trimmed = {key: ms for key, ms in owners.items() if key in present}
        _set_owners(claim, trimmed, touched=None, now="")


# --------------------------------------------------------------------------- server-side apply


def apply_device_status(
    stored: Obj,
    applied: Obj,
    *,
    field_manager: str,
    force: bool,
    now: str,
    what: str,
) -> Obj | None:
    """`stored` after a server-side apply of `applied` to its status, or None for a no-op.

    `applied` is an apply configuration holding only `status.devices`
    (anything else in `status` is refused: the only thing dra-gpu applies).
    Raises ConflictError when an entry belongs to another manager and
    `force` is false, ClusterError when the result fails validation or `applied`
    names another UID than the stored object's (a re-created claim).
    """
    if not field_manager:
        raise ClusterError(f"{what}: PATCH with apply requires a fieldManager")
    status = applied.get("status") or {}
    extra = sorted(set(status) - {"devices"})
    if extra:
        raise ClusterError(f"{what}: this apply supports only status.devices, not {extra}")
    uid = (applied.get("metadata") or {}).get("uid")
    if uid and uid != (stored.get("metadata") or {}).get("uid"):
        # The apiserver's ValidateObjectMetaUpdate: an apply naming another object's UID
        # (the claim was deleted and re-created under the same name) is refused.
        raise ClusterError(f'{what}: metadata.uid: Invalid value: "{uid}": field is immutable')
    wanted = status.get("devices") or []
    if not isinstance(wanted, list) or not all(isinstance(e, dict) for e in wanted):
        raise ClusterError(f"{what}: status.devices: Invalid value: must be a list of objects")
    wanted_keys = [device_key(e) for e in wanted]
    duplicates = sorted({_key_text(k) for k in wanted_keys if wanted_keys.count(k) > 1})
    if duplicates:
        raise ClusterError(
            f"{what}: status.devices: Duplicate value: {', '.join(duplicates)} (an apply lists "
            "each entry once)"
        )
    _check_depth(stored, what)
    new = copy.deepcopy(stored)
    owners = _owners(new)
    conflicts = sorted(
        _key_text(key) + f" (owned by {manager!r})"
        for key in wanted_keys
        for manager in owners.get(key, ())
        if manager != field_manager
        and _entry(new, key) is not None
        and _entry(new, key) != wanted[wanted_keys.index(key)]
    )
    if conflicts and not force:
        raise ConflictError(
            f"{what}: Apply failed with {len(conflicts)} conflict(s): "
            + "; ".join(f"conflict with .status.devices{text}" for text in conflicts)
        )
    previous = {key for key, managers in owners.items() if field_manager in managers}
    entries = [e for e in (new.get("status") or {}).get("devices") or [] if isinstance(e, dict)]
    by_key = {device_key(e): e for e in entries}
    for key in previous - set(wanted_keys):
        others = owners.get(key, set()) - {field_manager}
        if not others:
            by_key.pop(key, None)
    for key, entry in zip(wanted_keys, wanted, strict=True):
        by_key[key] = copy.deepcopy(entry)
    order = dict.fromkeys([*(device_key(e) for e in entries), *wanted_keys])
    devices = [by_key[key] for key in order if key in by_key]
    new_status = new.setdefault("status", {})
    if devices:
        new_status["devices"] = devices
    else:
        new_status.pop("devices", None)
    for key in wanted_keys:
        owners[key] = {field_manager} if force else owners.get(key, set()) | {field_manager}
    for key in previous - set(wanted_keys):
        owners.get(key, set()).discard(field_manager)
    _set_owners(new, owners, touched=field_manager, now=now)
    validate_device_statuses(new, what)
    if _without_times(new) == _without_times(stored):
        return None
    return new


def _check_depth(obj: Obj, what: str) -> None:
    """Refuse an object nested deeper than MAX_OBJECT_DEPTH before anything recursive
    (deepcopy, the YAML writer) walks it: Python's recursion limit would end the walk
    in a RecursionError after thousands of frames. Iterative, so bounded itself."""
    stack: list[tuple[object, int]] = [(obj, 1)]
    while stack:
        value, depth = stack.pop()
        if depth > MAX_OBJECT_DEPTH:
            raise InvalidObjectError(
                f"{what}: nested deeper than {MAX_OBJECT_DEPTH} levels; not copied"
            )
        if isinstance(value, dict):
            stack.extend((item, depth + 1) for item in value.values())
        elif isinstance(value, list):
            stack.extend((item, depth + 1) for item in value)


def _entry(claim: Obj, key: DeviceKey) -> dict[str, Any] | None:
    for entry in (claim.get("status") or {}).get("devices") or []:
        if isinstance(entry, dict) and device_key(entry) == key:
            return entry
    return None


def _key_text(key: DeviceKey) -> str:
    driver, pool, device, share_id = key
    fields = {"device": device, "driver": driver, "pool": pool}
    if share_id:
        fields["shareID"] = share_id
    return "k:" + json.dumps(fields, sort_keys=True, separators=(",", ":"))


def _key_of_text(text: str) -> DeviceKey | None:
    if not text.startswith("k:"):
        return None
    try:
        fields = json.loads(text[2:])
    except ValueError:
        return None
    return device_key(fields) if isinstance(fields, dict) else None


def _owners(claim: Obj) -> dict[DeviceKey, set[str]]:
    """Entry key -> the managers that applied it (from `metadata.managedFields`)."""
    owners: dict[DeviceKey, set[str]] = {}
    for managed in (claim.get("metadata") or {}).get("managedFields") or []:
        if managed.get("operation") != "Apply" or managed.get("subresource") != "status":
            continue
        devices = ((managed.get("fieldsV1") or {}).get("f:status") or {}).get("f:devices") or {}
        for text in devices:
            key = _key_of_text(text)
            if key is not None:
                owners.setdefault(key, set()).add(str(managed.get("manager")))
    return owners


def _set_owners(
    claim: Obj, owners: Mapping[DeviceKey, Iterable[str]], *, touched: str | None, now: str
) -> None:
    """Rewrite the status-apply entries of `metadata.managedFields` from `owners`; the
    `touched` manager's time becomes `now`, the others keep theirs."""
    meta = claim.setdefault("metadata", {})
    managed = meta.get("managedFields") or []
    is_ours = [m.get("operation") == "Apply" and m.get("subresource") == "status" for m in managed]
    kept = [m for m, ours in zip(managed, is_ours, strict=True) if not ours]
    times = {
        m.get("manager"): m.get("time") for m, ours in zip(managed, is_ours, strict=True) if ours
    }
    for manager in sorted({m for ms in owners.values() for m in ms}):
        keys = sorted(_key_text(k) for k, ms in owners.items() if manager in ms)
        kept.append(
            {
                "manager": manager,
                "operation": "Apply",
                "apiVersion": "resource.k8s.io/v1",
                "time": now if manager == touched else (times.get(manager) or now),
                "fieldsType": "FieldsV1",
                "fieldsV1": {"f:status": {"f:devices": {key: {".": {}} for key in keys}}},
                "subresource": "status",
            }
        )
    if kept:
        meta["managedFields"] = kept
    else:
        meta.pop("managedFields", None)


def _without_times(claim: Obj) -> Obj:
    """The claim without managedFields times (an apply that changes nothing else is a no-op)."""
    copied = copy.deepcopy(claim)
    for managed in (copied.get("metadata") or {}).get("managedFields") or []:
        managed.pop("time", None)
    return copied


__all__ = [
    "DATA_MAX_BYTES",
    "MAX_CONDITIONS",
    "allocated_keys",
    "apply_device_status",
    "device_key",
    "drop_deallocated",
    "validate_device_statuses",
]
