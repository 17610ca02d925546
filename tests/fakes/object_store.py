"""An in-memory `ObjectStore` (dra_driver.kube.object_store) for unit tests.

Follows the same apiserver rules as `LocalCluster` (`dra_driver.kube.apiserver_rules`):
resourceVersion preconditions, status only through `update_object_status`,
finalizers holding a deleted object until they are emptied, the immutable
ComputeDomain spec. It counts writes and conflicts per kind, so tests can
assert "no conflict storm", and `fail_next` injects one failure.
"""

from __future__ import annotations

import copy
import threading
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from dra_driver.errors import ClusterError
from dra_driver.kube import apiserver_rules as rules
from dra_driver.kube.apiserver_rules import ResourceKind
from dra_driver.kube.cluster import ConflictError

Obj = dict[str, Any]


class MemoryObjectStore:
    def __init__(self) -> None:
        self._objects: dict[tuple[str, str | None, str], Obj] = {}
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._version = 0
        self.writes: Counter[str] = Counter()
        self.conflicts: Counter[str] = Counter()
        self._failures: dict[str, list[ClusterError]] = {}

    # -- test controls -------------------------------------------------------------
    def fail_next(self, verb: str, error: ClusterError) -> None:
        """The next `verb` call ("create", "update", "status", "delete") raises `error`."""
        with self._lock:
            self._failures.setdefault(verb, []).append(error)

    def _maybe_fail(self, verb: str) -> None:
        queue = self._failures.get(verb)
        if queue:
            raise queue.pop(0)

    # -- ObjectStore -----------------------------------------------------------------
    def get_object(self, kind: ResourceKind, namespace: str | None, name: str) -> Obj:
        namespace = namespace if kind.namespaced else None
        rules.check_name(kind, namespace, name)
        with self._lock:
            obj = self._objects.get((kind.plural, namespace, name))
            if obj is None:
                raise rules.not_found(kind, namespace, name)
            return copy.deepcopy(obj)

    def list_objects(
        self,
        kind: ResourceKind,
        namespace: str | None = None,
        *,
        labels: Mapping[str, str] | None = None,
    ) -> list[Obj]:
        if kind.namespaced and namespace is not None:
            rules.check_namespace(kind, namespace)
        with self._lock:
            out = []
            for (plural, ns, _), obj in sorted(self._objects.items(), key=_sort_key):
                if plural != kind.plural or (namespace is not None and ns != namespace):
                    continue
                have = obj["metadata"].get("labels") or {}
                if labels and any(have.get(k) != v for k, v in labels.items()):
                    continue
                out.append(copy.deepcopy(obj))
            return out

    def create_object(self, kind: ResourceKind, obj: Obj) -> Obj:
        with self._lock:
            self._maybe_fail("create")
            ns, name = rules.object_key(kind, obj)
            key = (kind.plural, ns, name)
            if key in self._objects:
                self.conflicts[kind.kind] += 1
                raise rules.already_exists(kind, ns, name)
            new = rules.prepare_create(kind, obj, namespace=ns, keep_uid=True)
            return self._store(kind, key, new)

    def update_object(self, kind: ResourceKind, obj: Obj) -> Obj:
        return self._update(kind, obj, status_only=False)

    def update_object_status(self, kind: ResourceKind, obj: Obj) -> Obj:
        if not kind.has_status:
            ns, name = rules.object_key(kind, obj)
            raise ClusterError(
                f"{rules.describe(kind, ns, name)}: a {kind.kind} has no status "
                f"subresource; write it with update_object"
            )
        return self._update(kind, obj, status_only=True)

    def delete_object(self, kind: ResourceKind, namespace: str | None, name: str) -> None:
        namespace = namespace if kind.namespaced else None
        rules.check_name(kind, namespace, name)
        with self._lock:
            self._maybe_fail("delete")
            key = (kind.plural, namespace, name)
            stored = self._objects.get(key)
            if stored is None:
                return
            marked = rules.prepare_delete(stored)
            self.writes[kind.kind] += 1
            if marked is None:
                del self._objects[key]
                self._bump()
            elif marked is not stored:
                self._store(kind, key, marked)

    def watch_objects(
        self,
        kinds: Sequence[ResourceKind],
        on_change: Callable[[], None],
        stop: threading.Event,
    ) -> None:
        seen = -1
        while not stop.is_set():
            with self._lock:
                if self._version == seen:
                    self._changed.wait(0.2)
                current = self._version
            if current != seen:
                seen = current
                on_change()

    # -- helpers ---------------------------------------------------------------------
    def _update(self, kind: ResourceKind, obj: Obj, *, status_only: bool) -> Obj:
        with self._lock:
            self._maybe_fail("status" if status_only else "update")
            ns, name = rules.object_key(kind, obj)
            key = (kind.plural, ns, name)
            stored = self._objects.get(key)
            if stored is None:
                raise rules.not_found(kind, ns, name)
            try:
                new = rules.prepare_update(kind, stored, obj, status_only=status_only)
            except ConflictError:
                self.conflicts[kind.kind] += 1
                raise
            if new is None:
                return copy.deepcopy(stored)
            if not status_only:
                rules.check_immutable_spec(kind, stored, new)
            if rules.deletion_finished(new):
                del self._objects[key]
                self.writes[kind.kind] += 1
                self._bump()
                return copy.deepcopy(new)
            return self._store(kind, key, new)

    def _store(self, kind: ResourceKind, key: tuple[str, str | None, str], obj: Obj) -> Obj:
        self._version += 1
        obj["metadata"]["resourceVersion"] = str(self._version)
        self._objects[key] = obj
        self.writes[kind.kind] += 1
        self._changed.notify_all()
        return copy.deepcopy(obj)

    def _bump(self) -> None:
        self._version += 1
        self._changed.notify_all()


def _sort_key(item: tuple[tuple[str, str | None, str], Obj]) -> tuple[str, str, str]:
    (plural, ns, name), _obj = item
    return plural, ns or "", name
