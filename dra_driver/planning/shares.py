"""The node-side guard of consumable shares: no device handed out beyond its capacity.

The scheduler allocates shares of a multi-allocatable device
(`allowMultipleAllocations`) and records in each result a `shareID` and the
`consumedCapacity` it granted. The kubelet plugin does not trust that
blindly (NVIDIA's driver does): a stale allocation, two schedulers or a
device republished with less capacity could hand out more than the device
has. `check_shares` refuses, with a per-claim error naming both claims:

* a share of a device another claim holds exclusively, or an exclusive
  result on a device other claims hold shares of;
* shares whose `consumedCapacity` (per capacity, over every claim the
  checkpoint holds plus this one) exceed the device's published capacity.

Pure: the accounting is derived from the checkpoint every time, so it
survives restarts without state of its own.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from fractions import Fraction
from operator import itemgetter

from dra_driver.claims.allocated import AllocatedClaim
from dra_driver.claims.checkpoint import Checkpoint
from dra_driver.errors import ClaimError, ConfigError
from dra_driver.kube.quantity import parse_quantity, readable
from dra_driver.node.devices import AllocatableDevice


def check_shares(
    claim: AllocatedClaim,
    devices: Mapping[str, AllocatableDevice],
    checkpoint: Checkpoint,
) -> None:
    """Raise ClaimError if preparing `claim` would overcommit or mix sharing modes."""
    where = f"{claim.ref}: status.allocation.devices.results"
    used: dict[str, dict[str, Fraction]] = {}
    for index, result in enumerate(claim.results):
        if result.admin_access:
            continue
        device = devices.get(result.device)
        if device is None:
            continue  # plan_claim reports unknown devices
        holders = _holders(checkpoint, result.pool, result.device, claim.uid)
        if result.share_id is None:
            shared = [name for name, share in holders if share]
            if shared:
                raise ClaimError(
                    f"{where}[{index}]: device {result.device!r} is allocated exclusively, but "
                    f"it is being shared by claim {shared[0]}; refusing to prepare it"
                )
            continue
        exclusive = [name for name, share in holders if not share]
        if exclusive:
            raise ClaimError(
                f"{where}[{index}]: share {result.share_id} of device {result.device!r}, but "
                f"claim {exclusive[0]} holds the device exclusively; refusing to prepare it"
            )
        totals = used.get(result.device)
        if totals is None:
            totals = _consumed_by_others(checkpoint, result.pool, result.device, claim.uid)
            used[result.device] = totals
        for name, text in sorted(result.consumed_capacity.items()):
            amount = _quantity(text, f"{where}[{index}].consumedCapacity[{name!r}]")
            capacity = device.capacity.get(name)
            if capacity is None:
                continue  # not published (no --consumable-shares): nothing to account
            in_use = totals.get(name, Fraction(0))
            if in_use + amount > capacity:
                raise ClaimError(
                    f"{where}[{index}]: share {result.share_id} of device {result.device!r} "
                    f"consumes {text} {name}, but {readable(in_use)} of its "
                    f"{readable(Fraction(capacity))} are already held by other shares on this "
                    "node; refusing to overcommit it"
                )
            totals[name] = in_use + amount


def _holders(
    checkpoint: Checkpoint, pool: str, device: str, exclude_uid: str
) -> Sequence[tuple[str, bool]]:
    """(claim, holds a share) for every other claim that holds `device`."""
    out: list[tuple[str, bool]] = []
    for uid, prepared in sorted(checkpoint.device_holders(pool, device), key=itemgetter(0)):
        if uid != exclude_uid:
            entry = checkpoint.claims[uid]
            name = f"{entry.namespace}/{entry.name} (uid {uid})"
            out.append((name, prepared.share_id is not None))
    return out


def _consumed_by_others(
    checkpoint: Checkpoint, pool: str, device: str, exclude_uid: str
) -> dict[str, Fraction]:
    totals: dict[str, Fraction] = {}
    for uid, prepared in checkpoint.device_holders(pool, device):
        if uid == exclude_uid or prepared.share_id is None:
            continue
        for name, text in prepared.consumed_capacity.items():
            amount = _quantity(text, f"checkpoint of {checkpoint.claims[uid].ref}")
            totals[name] = totals.get(name, Fraction(0)) + amount
    return totals


def _quantity(text: str, where: str) -> Fraction:
    try:
        return parse_quantity(text).value
    except ConfigError as exc:
        raise ClaimError(f"{where}: {exc}") from exc
