"""A directory of YAML files standing in for the Kubernetes API.

Demos, benchmarks and tests run the real plugin without a cluster: the
plugin publishes its ResourceSlices here while a demo writes ResourceClaims
next to them, possibly from another process. Each object is one file holding
plain resource.k8s.io/v1 YAML as `kubectl get -o yaml` prints it, so a person
can read, diff and hand-edit the "cluster":

    DIR/resourceslices/<name>.yaml
    DIR/deviceclasses/<name>.yaml
    DIR/resourceclaims/<namespace>/<name>.yaml
    DIR/nodes/<name>.yaml                 (optional; labels written through `update_object`)
    DIR/events/<namespace>/<name>.yaml    (events.k8s.io/v1 Events the plugin reports)
    DIR/<plural>/<namespace>/<name>.yaml  (any other `ResourceKind` of the `ObjectStore`
                                           protocol: ComputeDomains, their members, ...;
                                           cluster-scoped kinds: DIR/<plural>/<name>.yaml)
    DIR/<plural>/.last-write              (the resourceVersion of the kind's last write)
    DIR/.parsed/...                       (a cache: files as parsed, in JSON; may be deleted)

Writes follow the apiserver's rules (`apiserver_rules`), are atomic (readers
never see half a file; not fsynced: this is no durable store) and are
serialised across processes by an flock on `DIR/.lock`; `DIR/.resource-version`
holds the last resourceVersion handed out. The lock is held only to check
that the file is still the one read and to rename the new one into place: the
YAML is rendered before (`LocalCluster._write`), and the threads of one process
queue on an in-process lock rather than all polling the flock (64 simulated
nodes' daemons, the controller and a scheduler write through this one lock).
A file that cannot be parsed is
reported, never skipped, and so is anything but a regular file (a FIFO would
block the reader: `dra_driver.files.regular`); a file is parsed once per
version (its inode, mtime and size) by one thread of a process, and the
writer keeps what it wrote, so listing unchanged objects again is cheap.

Watching is polling, for slices as for any other kind (below).

The `ObjectStore` half (`dra_driver.kube.object_store`) serves any kind the
same way, with the apiserver's finalizer rule (a delete only marks an object
with finalizers; the update that empties them removes it) and the immutable
ComputeDomain spec. Watching those kinds polls one small file per kind,
`.last-write`, which every write of the kind (delete included) replaces under
the lock with the resourceVersion it took: a counter cannot come back to an
old value, so no change is missed however fast writes follow each other, and
a poll costs a read and a few stats per kind however many objects there are
(64 nodes each running two watchers stay cheap). The mtimes of the kind's
directory and its namespace directories are compared too, so a file put
there by hand (an editor's rename, a `cp` of a new file) is seen; a file
edited in place by hand is seen at the next write of its kind.
"""

from __future__ import annotations

import contextlib
import enum
import json
import logging
import os
import secrets
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from dra_driver.backoff import backoff_delay
from dra_driver.errors import ClusterError, yaml_problem
from dra_driver.files.atomic import atomic_write, remove_file
from dra_driver.files.flock import file_lock
from dra_driver.files.regular import read_regular, require_regular
from dra_driver.kube import apiserver_rules as rules
from dra_driver.kube import device_status, yaml_io
from dra_driver.kube.apiserver_rules import (
    DEVICE_CLASS,
    EVENT,
    NODE,
    RESOURCE_CLAIM,
    RESOURCE_SLICE,
    ResourceKind,
)
from dra_driver.kube.objects import Obj

__all__ = ["OBJECT_POLL_SECONDS", "SLICE_POLL_SECONDS", "LocalCluster", "dump_yaml"]

log = logging.getLogger(__name__)

SLICE_POLL_SECONDS = 0.5
"""How often `watch_resource_slices` looks at the slice directory."""

OBJECT_POLL_SECONDS = 0.25
"""How often `watch_objects` looks at the watched kinds' `.last-write` files."""

_LOCK_FILE = ".lock"
_LAST_WRITE_FILE = ".last-write"
# A write holds the lock for one file write; a minute means a stuck process, not a busy one.
LOCK_TIMEOUT_S = 60.0
LOCK_POLL_S = 0.004
"""The longest wait between two tries for the store's lock. Every process of a simulated
cluster (64 nodes' daemons, the controller, the scheduler) writes through this one lock, each
write holds it for a few milliseconds, and a poller that sleeps 20 ms loses its turn to the
others again and again: the 64-node benchmark's scheduler spent 61 of its 80 s waiting here."""
_VERSION_FILE = ".resource-version"
_SUFFIX = ".yaml"
_PARSED_DIR = ".parsed"


class _Loader(yaml_io.SafeLoader):
    """SafeLoader that keeps timestamps as strings, as they are in the API's JSON."""


_Loader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


class _KubectlDumper(yaml.SafeDumper):
    """SafeDumper styled like kubectl: strings that need quotes get double quotes.

    Python's emitter, not libyaml's: the quoting style is chosen in the emitter.
    `yaml_io.dump` writes the plain parts itself and asks this dumper only for
    the scalars that need quotes (a claim's file in a tenth of the time: the
    local store's writes hold its one lock, which every process of a
    simulated cluster shares).
    """

    def choose_scalar_style(self) -> str:
        style = super().choose_scalar_style()
        return '"' if style == "'" else style


def _represent_str(dumper: yaml.SafeDumper, data: str) -> yaml.ScalarNode:
    if "\n" in data:
        return dumper.represent_scalar("tag:yaml.org,2002:str", data, style="|")
    return dumper.represent_str(data)


_KubectlDumper.add_representer(str, _represent_str)


def dump_yaml(obj: Any) -> str:
    """YAML the way `kubectl get -o yaml` prints it.

    Block style, keys sorted, list items not indented under their key, double
    quotes on strings that need quoting, `|` blocks for multi-line text.
    """
    return yaml_io.dump(obj, Dumper=_KubectlDumper, sort_keys=True, allow_unicode=True)


class LocalCluster:
    """`Cluster` backed by the YAML directory `root` (created if missing).

    `server_version` is what `server_version()` reports (None by default:
    there is no apiserver). Unlike kube-apiserver, a `metadata.uid` given on
    create is kept, so a demo can write claims with known UIDs.
    """

    def __init__(self, root: Path, *, server_version: tuple[int, int] | None = None) -> None:
        self._root = Path(root)
        self._server_version = server_version
        # path -> the file as parsed (`_parsed_file`), shared by the process's stores of
        # the same directory: 16 simulated nodes' daemons in one process parse a file once.
        self._state = _process_state(self._root)
        self._parsed = self._state.parsed
        try:
            for kind in (RESOURCE_SLICE, DEVICE_CLASS, RESOURCE_CLAIM):
                (self._root / kind.plural).mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ClusterError(f"local cluster {self._root}: cannot create it: {exc}") from exc

    @property
    def root(self) -> Path:
        """The directory holding the objects."""
        return self._root

    def __repr__(self) -> str:
        return f"LocalCluster({str(self._root)!r})"

    # ResourceClaims

    def get_resource_claim(self, namespace: str, name: str) -> Obj:
        return self._get(RESOURCE_CLAIM, namespace, name)

    def list_resource_claims(self, namespace: str | None = None) -> list[Obj]:
        if namespace is not None:
            rules.check_namespace(RESOURCE_CLAIM, namespace)
            return self._list_dir(RESOURCE_CLAIM, namespace)
        claims_dir = self._root / RESOURCE_CLAIM.plural
        out: list[Obj] = []
        for ns_dir in sorted(self._entries(claims_dir)):
            if ns_dir.is_dir() and not ns_dir.name.startswith("."):
                out.extend(self._list_dir(RESOURCE_CLAIM, ns_dir.name))
        return out

    def put_resource_claim(self, obj: Obj) -> Obj:
        return self._put(RESOURCE_CLAIM, obj)

    def update_resource_claim_status(self, obj: Obj) -> Obj:
        return self._update(RESOURCE_CLAIM, obj, status_only=True)

    def apply_resource_claim_status(
        self, obj: Obj, *, field_manager: str, force: bool = True
    ) -> Obj:
        namespace, name = rules.object_key(RESOURCE_CLAIM, obj)

        def decide(stored: Obj | None) -> _Decision:
            stored = _existing(RESOURCE_CLAIM, namespace, name, stored)
            new = device_status.apply_device_status(
                stored,
                obj,
                field_manager=field_manager,
                force=force,
                now=rules.timestamp_now(),
                what=rules.describe(RESOURCE_CLAIM, namespace, name),
            )
            return _Decision.keep(stored) if new is None else _Decision.store(new)

        return self._write(RESOURCE_CLAIM, namespace, name, decide)

    def delete_resource_claim(self, namespace: str, name: str) -> None:
        self._delete(RESOURCE_CLAIM, namespace, name)

    # ResourceSlices

    def list_resource_slices(
        self, *, driver: str | None = None, node_name: str | None = None
    ) -> list[Obj]:
        wanted = {}
        if driver is not None:
            wanted["spec.driver"] = driver
        if node_name is not None:
            wanted["spec.nodeName"] = node_name
        return self._list_dir(
            RESOURCE_SLICE, None, lambda obj: rules.matches_field_selector(obj, wanted)
        )

    def create_resource_slice(self, obj: Obj) -> Obj:
        return self._create(RESOURCE_SLICE, obj)

    def update_resource_slice(self, obj: Obj) -> Obj:
        return self._update(RESOURCE_SLICE, obj)

    def delete_resource_slice(self, name: str) -> None:
        self._delete(RESOURCE_SLICE, None, name)

    def watch_resource_slices(
        self,
        *,
        driver: str,
        node_name: str,
        on_change: Callable[[], None],
        stop: threading.Event,
    ) -> None:
        seen: tuple[object, ...] | None = None
        failures = 0
        while not stop.is_set():
            try:
                current = self._kind_signature(RESOURCE_SLICE)
            except OSError as exc:
                failures += 1
                log.warning(
                    "local cluster %s: cannot watch the ResourceSlices of %s on node %s: %s",
                    self._root,
                    driver,
                    node_name,
                    exc,
                )
                stop.wait(backoff_delay(failures))
                continue
            failures = 0
            if current != seen:
                # The first look counts too: a slice deleted between the caller's
                # first publish and this watch's start must not go unnoticed (the
                # API store's watch likewise begins with the slices it finds).
                on_change()
                seen = current
            stop.wait(SLICE_POLL_SECONDS)

    # Nodes and Events

    def get_node(self, name: str) -> Obj:
        return self._get(NODE, None, name)

    def create_event(self, obj: Obj) -> Obj:
        return self._create(EVENT, obj)

    # DeviceClasses

    def list_device_classes(self) -> list[Obj]:
        return self._list_dir(DEVICE_CLASS, None)

    def put_device_class(self, obj: Obj) -> Obj:
        return self._put(DEVICE_CLASS, obj)

    def server_version(self) -> tuple[int, int] | None:
        return self._server_version

    # ObjectStore (dra_driver.kube.object_store): any kind

    def get_object(self, kind: ResourceKind, namespace: str | None, name: str) -> Obj:
        return self._get(kind, namespace if kind.namespaced else None, name)

    def list_objects(
        self,
        kind: ResourceKind,
        namespace: str | None = None,
        *,
        labels: Mapping[str, str] | None = None,
    ) -> list[Obj]:
        keep = None if not labels else lambda obj: _has_labels(obj, labels)
        if not kind.namespaced:
            return self._list_dir(kind, None, keep)
        if namespace is not None:
            rules.check_namespace(kind, namespace)
            return self._list_dir(kind, namespace, keep)
        found = []
        for ns_dir in sorted(self._entries(self._root / kind.plural)):
            if ns_dir.is_dir() and not ns_dir.name.startswith("."):
                found.extend(self._list_dir(kind, ns_dir.name, keep))
        return found

    def create_object(self, kind: ResourceKind, obj: Obj) -> Obj:
        return self._create(kind, obj)

    def update_object(self, kind: ResourceKind, obj: Obj) -> Obj:
        namespace, name = rules.object_key(kind, obj)

        def decide(stored: Obj | None) -> _Decision:
            stored = _existing(kind, namespace, name, stored)
            new = rules.prepare_update(kind, stored, obj)
            if new is None:
                return _Decision.keep(stored)
            rules.check_immutable_spec(kind, stored, new)
            if rules.deletion_finished(new):
                return _Decision.remove(new)
            return _Decision.store(new)

        return self._write(kind, namespace, name, decide)

    def update_object_status(self, kind: ResourceKind, obj: Obj) -> Obj:
        namespace, name = rules.object_key(kind, obj)
        if not kind.has_status:
            raise ClusterError(
                f"{rules.describe(kind, namespace, name)}: a {kind.kind} has no status "
                f"subresource; write it with update_object"
            )
        return self._update(kind, obj, status_only=True)

    def delete_object(self, kind: ResourceKind, namespace: str | None, name: str) -> None:
        namespace = namespace if kind.namespaced else None

        def decide(stored: Obj | None) -> _Decision:
            if stored is None:
                return _Decision.keep({})
            marked = rules.prepare_delete(stored)
            if marked is None:
                return _Decision.remove(stored)
            if marked is stored:
                return _Decision.keep(stored)
            return _Decision.store(marked)

        self._write(kind, namespace, name, decide)

    def watch_objects(
        self,
        kinds: Sequence[ResourceKind],
        on_change: Callable[[], None],
        stop: threading.Event,
    ) -> None:
        seen: tuple[tuple[object, ...], ...] | None = None
        failures = 0
        names = ", ".join(kind.plural for kind in kinds)
        while not stop.is_set():
            try:
                current = tuple(self._kind_signature(kind) for kind in kinds)
            except (OSError, UnicodeDecodeError) as exc:
                failures += 1
                log.warning("local cluster %s: cannot watch %s: %s", self._root, names, exc)
                stop.wait(backoff_delay(failures))
                continue
            failures = 0
            if current != seen:
                # The first look counts too, as for slices: whatever changed before the
                # watch began is seen by the caller's first look.
                seen = current
                try:
                    on_change()
                except Exception:
                    log.exception(
                        "local cluster %s: watching %s: on_change failed", self._root, names
                    )
            stop.wait(OBJECT_POLL_SECONDS)

    def _kind_signature(self, kind: ResourceKind) -> tuple[object, ...]:
        """The kind's last-write resourceVersion and its directories' mtimes (a file put
        there by hand, not through this class, renames into one of them)."""
        directory = self._root / kind.plural
        try:
            last = read_regular(directory / _LAST_WRITE_FILE).decode("ascii").strip()
        except FileNotFoundError:
            last = ""
        try:
            mtimes = [directory.stat().st_mtime_ns]
            if kind.namespaced:
                with os.scandir(directory) as entries:
                    for entry in entries:
                        if not entry.name.startswith(".") and entry.is_dir(follow_symlinks=False):
                            with contextlib.suppress(FileNotFoundError):
                                mtimes.append(entry.stat(follow_symlinks=False).st_mtime_ns)
        except FileNotFoundError:
            mtimes = []
        return last, tuple(sorted(mtimes))

    # Storage

    def _path(self, kind: ResourceKind, namespace: str | None, name: str) -> Path:
        rules.check_name(kind, namespace, name)
        directory = self._root / kind.plural
        if kind.namespaced:
            directory = directory / str(namespace)
        return directory / f"{name}{_SUFFIX}"

    def _entries(self, directory: Path) -> list[Path]:
        try:
            return list(directory.iterdir())
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise ClusterError(
                f"local cluster {self._root}: cannot list {directory}: {exc}"
            ) from exc

    def _read(self, kind: ResourceKind, path: Path) -> Obj:
        """One object file, as a new object the caller may change (`_parsed_file`)."""
        loaded: Obj = json.loads(self._parsed_file(kind, path).text)
        return loaded

    def _parsed_file(self, kind: ResourceKind, path: Path) -> _Parsed:
        """One object file, parsed once per version of the file; FileNotFoundError passes
        through for the caller. The `_Parsed.obj` it gives is shared: only look at it.

        Files are replaced by rename, so an unchanged (inode, mtime, size) means
        unchanged content. The parsed object is kept as JSON, in memory and in
        `<root>/.parsed/` for the next process (a restarted plugin, a test
        reading what the plugin published): parsing a 200-device slice's YAML
        takes about 60 times longer than reading its JSON.
        """
        try:
            info = path.stat()
        except FileNotFoundError:
            self._parsed.pop(path, None)
            raise
        except OSError as exc:
            raise ClusterError(f"{kind.kind} file {path}: cannot read it: {exc}") from exc
        try:
            require_regular(info.st_mode)
        except OSError as exc:
            raise ClusterError(f"{kind.kind} file {path}: cannot read it: {exc}") from exc
        identity = (info.st_ino, info.st_mtime_ns, info.st_size)
        cached = self._parsed.get(path)
        if cached is not None and cached.identity == identity:
            return cached
        # One thread of the process parses a new version; the others (16 simulated nodes'
        # watchers see a write at once) wait for it instead of all parsing and saving it.
        with self._state.parse_lock(path):
            cached = self._parsed.get(path)
            if cached is not None and cached.identity == identity:
                return cached
            text = self._parsed_copy(path, identity)
            if text is None:
                text = json.dumps(self._parse(kind, path))
                self._save_parsed_copy(path, identity, text)
            parsed = _Parsed(identity, text, json.loads(text))
            self._parsed[path] = parsed
            return parsed

    def _parsed_copy_path(self, path: Path) -> Path:
        return self._root / _PARSED_DIR / path.relative_to(self._root).with_suffix(".json")

    def _parsed_copy(self, path: Path, identity: tuple[int, int, int]) -> str | None:
        """The JSON a process saved when it parsed this version of `path`, or None."""
        try:
            stamp, _, text = (
                read_regular(self._parsed_copy_path(path)).decode("utf-8").partition("\n")
            )
        except (OSError, UnicodeDecodeError):
            return None
        return text if stamp == _identity_stamp(identity) else None

    def _save_parsed_copy(self, path: Path, identity: tuple[int, int, int], text: str) -> None:
        """Keep the parsed form for other processes; a cache: no fsync, failures ignored."""
        target = self._parsed_copy_path(path)
        temp = target.with_name(f".{target.name}.{os.getpid()}.{threading.get_ident()}")
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            temp.write_text(f"{_identity_stamp(identity)}\n{text}", encoding="utf-8")
            os.replace(temp, target)
        except OSError:
            with contextlib.suppress(OSError):
                temp.unlink()

    def _parse(self, kind: ResourceKind, path: Path) -> Obj:
        try:
            text = read_regular(path).decode("utf-8")
        except FileNotFoundError:
            raise
        except (OSError, UnicodeDecodeError) as exc:
            raise ClusterError(f"{kind.kind} file {path}: cannot read it: {exc}") from exc
        try:
            obj = yaml_io.load(text, _Loader)
        except yaml_io.YAMLError as exc:
            raise ClusterError(
                f"{kind.kind} file {path}: not valid YAML: {yaml_problem(exc)}"
            ) from exc
        if not isinstance(obj, dict) or not isinstance(obj.get("metadata"), dict):
            raise ClusterError(f"{kind.kind} file {path}: not an API object (no metadata)")
        meta = obj["metadata"]
        if obj.get("kind") != kind.kind or meta.get("name") != path.name[: -len(_SUFFIX)]:
            raise ClusterError(
                f"{kind.kind} file {path}: holds kind {obj.get('kind')!r} named "
                f"{meta.get('name')!r}; expected a {kind.kind} named after the file"
            )
        if kind.namespaced and meta.get("namespace") != path.parent.name:
            raise ClusterError(
                f"{kind.kind} file {path}: metadata.namespace is {meta.get('namespace')!r}, "
                f"expected {path.parent.name!r} (its directory)"
            )
        return obj

    def _get(self, kind: ResourceKind, namespace: str | None, name: str) -> Obj:
        try:
            return self._read(kind, self._path(kind, namespace, name))
        except FileNotFoundError:
            raise rules.not_found(kind, namespace, name) from None

    def _list_dir(
        self,
        kind: ResourceKind,
        namespace: str | None,
        keep: Callable[[Obj], bool] | None = None,
    ) -> list[Obj]:
        """The directory's objects (with `keep`, those it keeps: a label or field selector
        looks at the shared parsed object before it is copied, as a node's daemons list a
        few of 64 nodes' objects)."""
        directory = self._root / kind.plural
        if namespace is not None:
            directory = directory / namespace
        out: list[Obj] = []
        for parsed in self._listing(kind, directory):
            if keep is not None and not keep(parsed.obj):
                continue
            loaded: Obj = json.loads(parsed.text)
            out.append(loaded)
        return out

    def _listing(self, kind: ResourceKind, directory: Path) -> tuple[_Parsed, ...]:
        """The directory's files as parsed, in name order; shared by the process's stores
        and looked at again only when the kind's `.last-write` or the directory's mtime
        changed since (each of 64 nodes' daemons lists the members after every write of
        one: a stat of every file each time was most of their CPU). The signature is read
        first, so a listing is never kept under a signature older than what it saw. A file
        edited in place by hand (no rename, no write through this class) is seen at the
        next write of its kind, as by `watch_objects`; `get_object` sees it at once."""
        signature = self._kind_signature(kind), _mtime_ns(directory)
        listings = self._state.listings
        cached = listings.get(directory)
        if cached is not None and cached[0] == signature:
            return cached[1]
        found = []
        for path in sorted(self._entries(directory)):
            if path.name.startswith(".") or path.suffix != _SUFFIX:  # .lock, temp files
                continue
            try:
                found.append(self._parsed_file(kind, path))
            except FileNotFoundError:
                continue  # deleted between listing and reading: not part of the list
        listing = tuple(found)
        listings[directory] = (signature, listing)
        return listing

    @contextmanager
    def _write_lock(self) -> Iterator[None]:
        """Exclusive across processes (the flock) and threads (each holder opens its own
        descriptor). The threads of one process queue on an in-process lock first, so only
        one of them polls the flock: 256 pod threads of the benchmark's scheduler each
        polling every few milliseconds burned the CPU the lock's holder needed."""
        lock = self._state.lock
        if not lock.acquire(timeout=LOCK_TIMEOUT_S):
            raise ClusterError(
                f"local cluster {self._root}: still locked by another thread after "
                f"{LOCK_TIMEOUT_S:g} s"
            )
        try:
            with file_lock(
                self._root / _LOCK_FILE,
                timeout_s=LOCK_TIMEOUT_S,
                error=ClusterError,
                what=f"local cluster {self._root}",
                poll_s=LOCK_POLL_S,
            ):
                yield
        finally:
            lock.release()

    def _next_resource_version(self) -> int:
        """Hand out the next resourceVersion; call with the write lock held."""
        path = self._root / _VERSION_FILE
        try:
            text = read_regular(path).decode("ascii").strip()
        except FileNotFoundError:
            text = "0"
        except (OSError, UnicodeDecodeError) as exc:
            raise ClusterError(f"local cluster file {path}: cannot read it: {exc}") from exc
        if not text.isdigit():
            raise ClusterError(f"local cluster file {path}: {text!r} is not a resourceVersion")
        version = int(text) + 1
        self._write_file(path, f"{version}\n")
        return version

    def _write_file(self, path: Path, text: str) -> None:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            # Atomic, not synced: the directory stands in for the API server on a dev
            # machine, where a power loss ends the "cluster" anyway; two fsyncs a write
            # were a fifth of a prepare's time in tests.
            atomic_write(path, text.encode("utf-8"), sync=False)
        except OSError as exc:
            raise ClusterError(f"local cluster file {path}: cannot write it: {exc}") from exc

    def _write(
        self,
        kind: ResourceKind,
        namespace: str | None,
        name: str,
        decide: Callable[[Obj | None], _Decision],
    ) -> Obj:
        """Write one object as `decide(stored or None)` says, and return the result.

        Optimistic, to keep the one lock short: the current file is read and the
        new YAML rendered (most of a write's time) before the lock is taken, with
        a placeholder where the resourceVersion goes. Under the lock the file's
        identity is checked: unchanged, the version is filled in and the file
        replaced; changed (another writer came between), it starts again. After
        `_OPTIMISTIC_TRIES` it decides under the lock, so a busy object still
        gets its turn. `decide` raises the apiserver's errors (not found, a
        conflict, ...) from the object as it was read, as a request that reached
        the apiserver at that moment would get them.
        """
        path = self._path(kind, namespace, name)
        for _ in range(_OPTIMISTIC_TRIES):
            seen, stored = self._snapshot(kind, path)
            decision = decide(stored)
            if decision.action is _Action.KEEP:
                return decision.obj
            rendered = _render(decision) if decision.action is _Action.STORE else None
            with self._write_lock():
                if self._identity(kind, path) != seen:
                    continue
                return self._apply_locked(kind, path, decision, rendered)
        with self._write_lock():
            _, stored = self._snapshot(kind, path)
            decision = decide(stored)
            if decision.action is _Action.KEEP:
                return decision.obj
            return self._apply_locked(kind, path, decision, None)

    def _apply_locked(
        self,
        kind: ResourceKind,
        path: Path,
        decision: _Decision,
        rendered: tuple[str, str] | None,
    ) -> Obj:
        """Carry out a decision; call with the write lock held. `rendered` is the YAML with
        its version placeholder (None: render it now)."""
        obj = decision.obj
        if decision.action is _Action.REMOVE:
            try:
                removed = remove_file(path)
            except OSError as exc:
                meta = obj.get("metadata") or {}
                raise ClusterError(
                    f"{rules.describe(kind, meta.get('namespace'), meta.get('name', ''))}: "
                    f"cannot delete {path}: {exc}"
                ) from exc
            self._parsed.pop(path, None)
            if removed:
                self._mark_written(kind, self._next_resource_version())
            return obj
        version = self._next_resource_version()
        if rendered is None:
            obj["metadata"]["resourceVersion"] = str(version)
            text = dump_yaml(obj)
        else:
            template, placeholder = rendered
            text = template.replace(placeholder, f'"{version}"', 1)
            obj["metadata"]["resourceVersion"] = str(version)
        self._write_file(path, text)
        self._mark_written(kind, version)
        identity = self._identity(kind, path)
        if identity is not None:  # the writer knows what it wrote: nobody parses it again
            encoded = json.dumps(obj)
            self._parsed[path] = _Parsed(identity, encoded, json.loads(encoded))
        return obj

    def _snapshot(self, kind: ResourceKind, path: Path) -> tuple[_Identity | None, Obj | None]:
        """The file's identity, then its object (None, None: no such file). The identity is
        taken first, so an object newer than it only costs a retry, never a lost write."""
        identity = self._identity(kind, path)
        if identity is None:
            return None, None
        try:
            return identity, self._read(kind, path)
        except FileNotFoundError:
            return None, None

    def _identity(self, kind: ResourceKind, path: Path) -> _Identity | None:
        try:
            info = path.stat()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise ClusterError(f"{kind.kind} file {path}: cannot read it: {exc}") from exc
        return (info.st_ino, info.st_mtime_ns, info.st_size)

    def _mark_written(self, kind: ResourceKind, version: int) -> None:
        """Record the kind's last write for `watch_objects`; call with the write lock held."""
        self._write_file(self._root / kind.plural / _LAST_WRITE_FILE, f"{version}\n")

    def _create(self, kind: ResourceKind, obj: Obj) -> Obj:
        namespace, name = rules.object_key(kind, obj)

        def decide(stored: Obj | None) -> _Decision:
            if stored is not None:
                raise rules.already_exists(kind, namespace, name)
            return _Decision.store(
                rules.prepare_create(kind, obj, namespace=namespace, keep_uid=True)
            )

        return self._write(kind, namespace, name, decide)

    def _update(self, kind: ResourceKind, obj: Obj, *, status_only: bool = False) -> Obj:
        namespace, name = rules.object_key(kind, obj)

        def decide(stored: Obj | None) -> _Decision:
            stored = _existing(kind, namespace, name, stored)
            new = rules.prepare_update(kind, stored, obj, status_only=status_only)
            return _Decision.keep(stored) if new is None else _Decision.store(new)

        return self._write(kind, namespace, name, decide)

    def _put(self, kind: ResourceKind, obj: Obj) -> Obj:
        namespace, name = rules.object_key(kind, obj)

        def decide(stored: Obj | None) -> _Decision:
            if stored is None:
                if obj["metadata"].get("resourceVersion") not in (None, ""):
                    # replacing a version of an object that is gone
                    raise rules.not_found(kind, namespace, name)
                return _Decision.store(
                    rules.prepare_create(kind, obj, namespace=namespace, keep_uid=True)
                )
            new = rules.prepare_update(kind, stored, obj)
            return _Decision.keep(stored) if new is None else _Decision.store(new)

        return self._write(kind, namespace, name, decide)

    def _delete(self, kind: ResourceKind, namespace: str | None, name: str) -> None:
        self._path(kind, namespace, name)  # checks the name before taking the lock

        def decide(stored: Obj | None) -> _Decision:
            return _Decision.keep({}) if stored is None else _Decision.remove(stored)

        self._write(kind, namespace, name, decide)


_Identity = tuple[int, int, int]
_OPTIMISTIC_TRIES = 3
"""Tries to write outside the lock before deciding under it (module docstring)."""


class _Action(enum.Enum):
    STORE = "store"
    REMOVE = "remove"
    KEEP = "keep"


@dataclass(frozen=True)
class _Decision:
    """What a write does with the object as read: store `obj`, remove the file, or keep
    it and answer `obj`."""

    action: _Action
    obj: Obj

    @classmethod
    def store(cls, obj: Obj) -> _Decision:
        return cls(_Action.STORE, obj)

    @classmethod
    def remove(cls, obj: Obj) -> _Decision:
        return cls(_Action.REMOVE, obj)

    @classmethod
    def keep(cls, obj: Obj) -> _Decision:
        return cls(_Action.KEEP, obj)


def _existing(kind: ResourceKind, namespace: str | None, name: str, stored: Obj | None) -> Obj:
    if stored is None:
        raise rules.not_found(kind, namespace, name)
    return stored


def _render(decision: _Decision) -> tuple[str, str] | None:
    """The object's YAML with a placeholder resourceVersion, and the placeholder as it
    appears there; None when it does not appear exactly once (then it is rendered under the
    lock). The placeholder is a digit string, quoted as the real version will be."""
    token = str(secrets.randbelow(10**30) + 10**30)
    meta = decision.obj["metadata"]
    meta["resourceVersion"] = token
    text = dump_yaml(decision.obj)
    placeholder = f'"{token}"'
    return (text, placeholder) if text.count(placeholder) == 1 else None


@dataclass(frozen=True)
class _Parsed:
    """One version of an object file as parsed: its identity (inode, mtime, size), its
    JSON (copied from for callers) and the object (shared: only looked at)."""

    identity: _Identity
    text: str
    obj: Obj


@dataclass
class _ProcessState:
    """What every `LocalCluster` of one directory shares within a process."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    parsed: dict[Path, _Parsed] = field(default_factory=dict)
    listings: dict[Path, tuple[object, tuple[_Parsed, ...]]] = field(default_factory=dict)
    parse_locks: tuple[threading.Lock, ...] = field(
        default_factory=lambda: tuple(threading.Lock() for _ in range(_PARSE_LOCK_STRIPES))
    )

    def parse_lock(self, path: Path) -> threading.Lock:
        """The lock under which this process parses `path` (one of a few, by its hash)."""
        return self.parse_locks[hash(path) % len(self.parse_locks)]


_PARSE_LOCK_STRIPES = 16


_PROCESS_STATES: dict[str, _ProcessState] = {}
_PROCESS_STATES_GUARD = threading.Lock()


def _process_state(root: Path) -> _ProcessState:
    """The in-process lock and parse cache of a store directory."""
    key = os.path.realpath(root)
    with _PROCESS_STATES_GUARD:
        state = _PROCESS_STATES.get(key)
        if state is None:
            state = _PROCESS_STATES[key] = _ProcessState()
        return state


def _mtime_ns(directory: Path) -> int | None:
    try:
        return directory.stat().st_mtime_ns
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise ClusterError(f"local cluster directory {directory}: cannot stat it: {exc}") from exc


def _has_labels(obj: Obj, labels: Mapping[str, str]) -> bool:
    have = (obj.get("metadata") or {}).get("labels") or {}
    return all(have.get(key) == value for key, value in labels.items())


def _identity_stamp(identity: tuple[int, int, int]) -> str:
    return " ".join(str(part) for part in identity)
