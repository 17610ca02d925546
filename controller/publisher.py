"""Keeps this node's ResourceSlices in the API equal to what the node has.

The scheduler allocates only what the slices say, so they must be right and
must be there. `SlicePublisher.publish` makes the slices of one
(driver, node) pair match the desired ones from `controller.slices`, and
`run_forever` repeats that. The kubelet deletes every slice of its node when
it starts, and 30 s after the plugin's connection drops, so the driver has to
put them back.

How a publish works (per pool; the driver publishes one pool per node):

* It lists the node's slices for the driver (field selector
  `spec.driver`, `spec.nodeName`).
* Nothing is written when the existing slices already match: same names,
  one generation, and the same spec apart from `pool.generation`. Labels,
  annotations and ownerReferences are compared too; server-set metadata
  (uid, resourceVersion, ...) is ignored. Quantities are compared by value.
* Otherwise the new generation is max(existing generations) + 1, which is 1
  for a fresh pool (an absent generation reads as 0, so the first published
  one is strictly newer). The new generation and `resourceSliceCount` go on
  every desired slice. Slices whose name exists are updated, carrying their
  resourceVersion and uid as preconditions; missing ones are created; slices
  whose name is not desired are deleted.
* Writes go first, deletes last. Consumers only look at a pool's highest
  generation and treat it as complete when it holds `resourceSliceCount`
  slices. Each write lifts one slice to generation G+1, which no other slice
  has, so the slices at the highest generation are always a subset of the
  desired ones. Device names are unique across the desired slices (checked
  here before anything is written), and the G+1 pool becomes complete only
  with the last write, when it is exactly the desired set. So a consumer
  never sees a complete pool with a device listed twice. Leftovers at G are
  ignored from the first write on and deleted at the end. A publish that
  fails half way therefore never leaves fewer slices than it found, and the
  next publish moves everything to G+2.
* If another writer gets in first (`ConflictError`, or `NotFoundError` for a
  slice deleted between list and update), the publisher lists again and
  retries once.
* The apiserver silently drops fields of disabled feature gates. When a
  written slice comes back without fields that were sent, that is logged
  with the likely gate, and the gate is remembered (`dropped_gates`: the
  kubelet plugin refuses dynamic MIG once DRAPartitionableDevices shows up
  there). The server's version is then remembered as equivalent to the
  desired one, so the publisher does not rewrite it on every round.

Slice names are deterministic (`controller.slices`), so matching is by name.
"""

from __future__ import annotations

import copy
import json
import logging
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Final

from dra_driver.backoff import backoff_delay
from dra_driver.errors import ConfigError, DraGpuError, NotFoundError, SliceError
from dra_driver.kube.cluster import Cluster, ConflictError
from dra_driver.kube.objects import Obj
from dra_driver.kube.quantity import parse_quantity

__all__ = ["DEFAULT_INTERVAL", "PublishResult", "SlicePublisher"]

log = logging.getLogger(__name__)

DEFAULT_INTERVAL: Final = 30.0
"""Seconds between republishes in `run_forever` (the helper library's sync delay)."""

_STOP_CHECK_SECONDS: Final = 0.5
LEASE_RETRY_SECONDS: Final = 1.0
"""How often a publisher without the lease asks for it again."""

_COMPARED_METADATA: Final = ("labels", "annotations", "ownerReferences")

# Field name found missing after a write -> the feature gate that most likely dropped it.
_GATE_OF_FIELD: Final = {
    "taints": "DRADeviceTaints",
    "sharedCounters": "DRAPartitionableDevices",
    "consumesCounters": "DRAPartitionableDevices",
    "perDeviceNodeSelection": "DRAPartitionableDevices",
    "bindsToNode": "DRADeviceBindingConditions",
    "bindingConditions": "DRADeviceBindingConditions",
    "bindingFailureConditions": "DRADeviceBindingConditions",
    "allowMultipleAllocations": "DRAConsumableCapacity",
    "requestPolicy": "DRAConsumableCapacity",
}


@dataclass(frozen=True)
class PublishResult:
    """Names of the slices one `publish` created, updated and deleted, in write order."""

    created: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        """Whether anything was written."""
        return bool(self.created or self.updated or self.deleted)


@dataclass
class _Plan:
    """The writes that bring one listing in line with the desired slices, in order."""

    replace_deletes: list[str] = field(default_factory=list)
    writes: list[tuple[str, Obj]] = field(default_factory=list)  # ("create" | "update", slice)
    deletes: list[str] = field(default_factory=list)


class SlicePublisher:
    """Publishes one node's ResourceSlices for one driver.

    `owner_node_uid`, when known, makes every slice owned by the Node object
    (`ownerReferences`), so the garbage collector removes the slices when the
    node is deleted.
    """

    def __init__(
        self,
        cluster: Cluster,
        *,
        driver: str,
        node_name: str,
        owner_node_uid: str | None = None,
    ) -> None:
        self._cluster = cluster
        self._driver = driver
        self._node_name = node_name
        self._owner_node_uid = owner_node_uid
        # slice name -> (spec we sent, spec the apiserver stored), when they differ
        self._server_form: dict[str, tuple[str, str]] = {}
        self._dropped_gates: set[str] = set()

    @property
    def dropped_gates(self) -> frozenset[str]:
        """The feature gates whose ResourceSlice fields the apiserver was seen dropping."""
        return frozenset(self._dropped_gates)

    def publish(self, desired: Sequence[Obj]) -> PublishResult:
        """Make this node's slices for this driver equal `desired`; see the module doc.

        `desired` are complete ResourceSlice dicts with unique names, this
        driver and this node (`spec.pool.generation` is ignored). Raises
        `SliceError` for a bad desired set (before writing anything) and
        `ClusterError` when the API refuses a write twice.
        """
        wanted = [self._prepare(obj) for obj in desired]
        _check_unique(wanted)
        result = PublishResult()
        for attempt in (1, 2):
            existing = self._cluster.list_resource_slices(
                driver=self._driver, node_name=self._node_name
            )
            plan = self._plan(existing, wanted)
            try:
                self._execute(plan, result)
            except (ConflictError, NotFoundError) as exc:
                if attempt == 2:
                    raise
                log.info(
                    "ResourceSlices of node %s changed while publishing (%s); retrying",
                    self._node_name,
                    exc,
                )
                continue
            break
        return PublishResult(
            created=_unique(result.created),
            updated=_unique(result.updated),
            deleted=_unique(result.deleted),
        )

    def run_forever(
        self,
        build: Callable[[], list[Obj]],
        stop: threading.Event,
        interval: float = DEFAULT_INTERVAL,
        *,
        immediately: bool = True,
        wake: threading.Event | None = None,
        on_result: Callable[[bool], None] | None = None,
        may_publish: Callable[[], bool] | None = None,
    ) -> None:
        """Publish `build()` now, whenever `wake` is set, and every `interval` seconds.

        Runs until `stop` is set (set `wake` too, to end the wait at once).
        With `immediately=False` the first round waits (the caller has just
        published). `wake` is set by whoever sees a reason to look again: a
        watch on the slices (someone deleted or changed one), or a device
        whose health changed. Errors are logged and retried after an
        exponential back-off with jitter (`dra_driver.backoff`), during which
        wake-ups are not acted on, so a down apiserver is not hammered.
        `on_result(ok)` is told the outcome of every round (metrics).
        `may_publish()` is asked before every round: while it says no (another
        publisher of the node has the lease), nothing is published and it is
        asked again every `LEASE_RETRY_SECONDS`.
        """
        wake = wake if wake is not None else threading.Event()
        failures = 0
        if not immediately:
            self._sleep(interval, stop, wake)
        while not stop.is_set():
            wake.clear()
            if may_publish is not None and not may_publish():
                self._sleep(min(interval, LEASE_RETRY_SECONDS), stop, wake)
                continue
            try:
                result = self.publish(build())
            except Exception as exc:
                failures += 1
                delay = backoff_delay(failures)
                if isinstance(exc, DraGpuError):
                    log.error(
                        "publishing ResourceSlices of node %s failed, again in %.1f s: %s",
                        self._node_name,
                        delay,
                        exc,
                    )
                else:
                    log.exception("publishing ResourceSlices of node %s failed", self._node_name)
                if on_result is not None:
                    on_result(False)
                stop.wait(delay)
                continue
            failures = 0
            if on_result is not None:
                on_result(True)
            if result.changed:
                log.info(
                    "republished ResourceSlices of node %s: created %s, updated %s, deleted %s",
                    self._node_name,
                    result.created,
                    result.updated,
                    result.deleted,
                )
            self._sleep(interval, stop, wake)

    @staticmethod
    def _sleep(seconds: float, stop: threading.Event, wake: threading.Event) -> None:
        """Wait until `wake` or `stop` is set, or `seconds` pass."""
        deadline = time.monotonic() + seconds
        while not stop.is_set():
            remaining = deadline - time.monotonic()
            if remaining <= 0 or wake.wait(min(remaining, _STOP_CHECK_SECONDS)):
                return

    # Planning

    def _prepare(self, obj: Obj) -> Obj:
        """A clean copy of one desired slice: checked, client-owned metadata only."""
        meta = obj.get("metadata") or {}
        name = meta.get("name")
        if not isinstance(name, str) or not name:
            raise SliceError("ResourceSlice: metadata.name is required (names are deterministic)")
        spec = obj.get("spec")
        if not isinstance(spec, dict) or not isinstance(spec.get("pool"), dict):
            raise SliceError(f"ResourceSlice {name}: spec.pool is required")
        for key, expected in (("driver", self._driver), ("nodeName", self._node_name)):
            if spec.get(key) != expected:
                raise SliceError(
                    f"ResourceSlice {name}: spec.{key} is {spec.get(key)!r}, but this publisher "
                    f"publishes for {expected!r}"
                )
        new_meta: Obj = {"name": name}
        for key in ("labels", "annotations", "ownerReferences"):
            if meta.get(key):
                new_meta[key] = copy.deepcopy(meta[key])
        if self._owner_node_uid is not None:
            new_meta["ownerReferences"] = [
                {
                    "apiVersion": "v1",
                    "kind": "Node",
                    "name": self._node_name,
                    "uid": self._owner_node_uid,
                    "controller": True,
                }
            ]
        return {
            "apiVersion": obj.get("apiVersion", "resource.k8s.io/v1"),
            "kind": obj.get("kind", "ResourceSlice"),
            "metadata": new_meta,
            "spec": copy.deepcopy(spec),
        }

    def _plan(self, existing: Sequence[Obj], wanted: Sequence[Obj]) -> _Plan:
        plan = _Plan()
        existing_by_name = {obj["metadata"]["name"]: obj for obj in existing}
        existing_pools = _group_by_pool(existing)
        wanted_pools = _group_by_pool(wanted)
        for pool, slices in wanted_pools.items():
            current = existing_pools.get(pool, [])
            if self._pool_matches(current, slices):
                continue
            generation = max((_generation(obj) for obj in current), default=0) + 1
            current_names = {obj["metadata"]["name"] for obj in current}
            for want in slices:
                obj = copy.deepcopy(want)
                obj["spec"]["pool"]["generation"] = generation
                obj["spec"]["pool"]["resourceSliceCount"] = len(slices)
                name = obj["metadata"]["name"]
                if name in current_names:
                    stored_meta = existing_by_name[name]["metadata"]
                    for key in ("resourceVersion", "uid"):
                        if stored_meta.get(key):
                            obj["metadata"][key] = stored_meta[key]
                    plan.writes.append(("update", obj))
                else:
                    plan.writes.append(("create", obj))
            wanted_names = {obj["metadata"]["name"] for obj in slices}
            plan.deletes.extend(sorted(current_names - wanted_names))
        for pool, slices in existing_pools.items():
            if pool not in wanted_pools:
                plan.deletes.extend(sorted(obj["metadata"]["name"] for obj in slices))
        # A name moving to another pool: pool.name is immutable, so the old
        # slice goes first and the name is created anew in its new pool.
        created = {obj["metadata"]["name"] for action, obj in plan.writes if action == "create"}
        plan.replace_deletes = [name for name in plan.deletes if name in created]
        plan.deletes = [name for name in plan.deletes if name not in created]
        return plan

    def _pool_matches(self, current: Sequence[Obj], wanted: Sequence[Obj]) -> bool:
        if len(current) != len(wanted) or len({_generation(obj) for obj in current}) != 1:
            return False
        by_name = {obj["metadata"]["name"]: obj for obj in current}
        for want in wanted:
            name = want["metadata"]["name"]
            have = by_name.get(name)
            if have is None:
                return False
            for key in _COMPARED_METADATA:
                if not _same(have["metadata"].get(key) or None, want["metadata"].get(key) or None):
                    return False
            want_spec = _spec_without_generation(want, len(wanted))
            have_spec = _spec_without_generation(have, None)
            if _same(have_spec, want_spec):
                continue
            if self._server_form.get(name) == (_canonical(want_spec), _canonical(have_spec)):
                continue  # the apiserver's form of what we want (fields dropped by a gate)
            return False
        return True

    # Writing

    def _execute(self, plan: _Plan, result: PublishResult) -> None:
        for name in plan.replace_deletes:
            self._cluster.delete_resource_slice(name)
            result.deleted.append(name)
        for action, obj in plan.writes:
            name = obj["metadata"]["name"]
            if action == "update":
                stored = self._cluster.update_resource_slice(obj)
                result.updated.append(name)
            else:
                stored = self._cluster.create_resource_slice(obj)
                result.created.append(name)
            self._note_dropped_fields(obj, stored)
        for name in plan.deletes:
            self._cluster.delete_resource_slice(name)
            result.deleted.append(name)

    def _note_dropped_fields(self, sent: Obj, stored: Obj) -> None:
        name = sent["metadata"]["name"]
        sent_spec = _spec_without_generation(sent, None)
        stored_spec = _spec_without_generation(stored, None)
        if _same(sent_spec, stored_spec):
            self._server_form.pop(name, None)
            return
        form = (_canonical(sent_spec), _canonical(stored_spec))
        if self._server_form.get(name) == form:
            return
        self._server_form[name] = form
        missing = sorted(_missing_paths(sent_spec, stored_spec, "spec"))
        gates = sorted(
            {
                gate
                for path in missing
                for key, gate in _GATE_OF_FIELD.items()
                if path.rsplit(".", 1)[-1].split("[")[0] == key
            }
        )
        self._dropped_gates.update(gates)
        log.warning(
            "ResourceSlice %s: the apiserver did not store %s%s; publishing what it accepts",
            name,
            ", ".join(missing) or "the spec as sent (it changed it)",
            f" (feature gate {', '.join(gates)} disabled?)" if gates else "",
        )


def _check_unique(wanted: Iterable[Obj]) -> None:
    """Slice names unique; device and counter-set names unique within each pool."""
    names: set[str] = set()
    devices: dict[str, dict[str, str]] = {}
    counter_sets: dict[str, dict[str, str]] = {}
    for obj in wanted:
        name = obj["metadata"]["name"]
        if name in names:
            raise SliceError(f"ResourceSlice {name}: metadata.name appears twice")
        names.add(name)
        pool = str(obj["spec"]["pool"].get("name"))
        for key, seen in (("devices", devices), ("sharedCounters", counter_sets)):
            pool_seen = seen.setdefault(pool, {})
            for entry in obj["spec"].get(key) or []:
                entry_name = entry.get("name")
                if entry_name in pool_seen:
                    raise SliceError(
                        f"ResourceSlice {name}: spec.{key} name {entry_name!r} is also in "
                        f"ResourceSlice {pool_seen[entry_name]} of pool {pool}"
                    )
                pool_seen[entry_name] = name


def _group_by_pool(slices: Iterable[Obj]) -> dict[str, list[Obj]]:
    pools: dict[str, list[Obj]] = {}
    for obj in slices:
        pool = ((obj.get("spec") or {}).get("pool") or {}).get("name")
        pools.setdefault(str(pool or ""), []).append(obj)
    return pools


def _generation(obj: Obj) -> int:
    value = ((obj.get("spec") or {}).get("pool") or {}).get("generation", 0)
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _spec_without_generation(obj: Obj, slice_count: int | None) -> Obj:
    """The spec to compare: `pool` copied without its generation; the rest is shared with
    `obj`, read only (a deep copy of 200 devices cost more than the whole comparison)."""
    spec = dict(obj.get("spec") or {})
    pool = spec.get("pool")
    if isinstance(pool, dict):
        pool = {key: value for key, value in pool.items() if key != "generation"}
        if slice_count is not None:
            pool["resourceSliceCount"] = slice_count
        spec["pool"] = pool
    return spec


def _same(a: Any, b: Any, key: str | None = None) -> bool:
    """Deep equality where quantity strings under a `value` key compare by value."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k], k) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if key == "value" and isinstance(a, str) and isinstance(b, str) and a != b:
        return _quantity(a) is not None and _quantity(a) == _quantity(b)
    return bool(a == b) and type(a) is type(b)


def _quantity(text: str) -> Fraction | None:
    try:
        return parse_quantity(text).value
    except ConfigError:
        return None


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def _missing_paths(sent: Any, stored: Any, path: str) -> Iterable[str]:
    """Paths present in `sent` but absent from `stored`."""
    if isinstance(sent, dict) and isinstance(stored, dict):
        for key, value in sent.items():
            if key not in stored:
                yield f"{path}.{key}"
            else:
                yield from _missing_paths(value, stored[key], f"{path}.{key}")
    elif isinstance(sent, list) and isinstance(stored, list):
        for index, (x, y) in enumerate(zip(sent, stored, strict=False)):
            yield from _missing_paths(x, y, f"{path}[{index}]")


def _unique(names: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(names))
