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
holds the last resourceVersion handed out. A file that cannot be parsed is
reported, never skipped, and so is anything but a regular file (a FIFO would
block the reader: `dra_driver.files.regular`); a file is parsed once per
version (its inode, mtime and size), so listing unchanged slices again is cheap.

Watching slices is polling: the directory's mtime and its entries (name,
inode, size, mtime) are compared every `SLICE_POLL_SECONDS`, which is cheap
(no file is read) and sees writes by any process.

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
there by hand (an editor's rename, a `cp`) is seen.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml

from dra_driver.backoff import backoff_delay
from dra_driver.errors import ClusterError, NotFoundError, yaml_problem
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
        # path -> (inode, mtime, size) when parsed, and the object as JSON (see `_read`).
        self._parsed: dict[Path, tuple[tuple[int, int, int], str]] = {}
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
        with self._write_lock():
            stored = self._get(RESOURCE_CLAIM, namespace, name)
            new = device_status.apply_device_status(
                stored,
                obj,
                field_manager=field_manager,
                force=force,
                now=rules.timestamp_now(),
                what=rules.describe(RESOURCE_CLAIM, namespace, name),
            )
            return stored if new is None else self._store_new(RESOURCE_CLAIM, new)

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
        return [
            obj
            for obj in self._list_dir(RESOURCE_SLICE, None)
            if rules.matches_field_selector(obj, wanted)
        ]

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
        directory = self._root / RESOURCE_SLICE.plural
        seen: tuple[int, frozenset[tuple[str, int, int, int]]] | None = None
        failures = 0
        while not stop.is_set():
            try:
                current = _directory_signature(directory)
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
        if not kind.namespaced:
            found = self._list_dir(kind, None)
        elif namespace is not None:
            rules.check_namespace(kind, namespace)
            found = self._list_dir(kind, namespace)
        else:
            found = []
            for ns_dir in sorted(self._entries(self._root / kind.plural)):
                if ns_dir.is_dir() and not ns_dir.name.startswith("."):
                    found.extend(self._list_dir(kind, ns_dir.name))
        if not labels:
            return found
        return [obj for obj in found if _has_labels(obj, labels)]

    def create_object(self, kind: ResourceKind, obj: Obj) -> Obj:
        return self._create(kind, obj)

    def update_object(self, kind: ResourceKind, obj: Obj) -> Obj:
        namespace, name = rules.object_key(kind, obj)
        with self._write_lock():
            stored = self._get(kind, namespace, name)
            new = rules.prepare_update(kind, stored, obj)
            if new is None:
                return stored
            rules.check_immutable_spec(kind, stored, new)
            if rules.deletion_finished(new):
                self._remove_locked(kind, namespace, name)
                return new
            return self._store_new(kind, new)

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
        with self._write_lock():
            try:
                stored = self._get(kind, namespace, name)
            except NotFoundError:
                return
            marked = rules.prepare_delete(stored)
            if marked is None:
                self._remove_locked(kind, namespace, name)
            elif marked is not stored:
                self._store_new(kind, marked)

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
        """One object file, parsed once per version of the file; FileNotFoundError passes
        through for the caller.

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
        text = cached[1] if cached is not None and cached[0] == identity else None
        if text is None:
            text = self._parsed_copy(path, identity)
        if text is None:
            text = json.dumps(self._parse(kind, path))
            self._save_parsed_copy(path, identity, text)
        self._parsed[path] = (identity, text)
        loaded: Obj = json.loads(text)
        return loaded

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

    def _list_dir(self, kind: ResourceKind, namespace: str | None) -> list[Obj]:
        directory = self._root / kind.plural
        if namespace is not None:
            directory = directory / namespace
        out: list[Obj] = []
        for path in sorted(self._entries(directory)):
            if path.name.startswith(".") or path.suffix != _SUFFIX:  # .lock, temp files
                continue
            try:
                out.append(self._read(kind, path))
            except FileNotFoundError:
                continue  # deleted between listing and reading: not part of the list
        return out

    @contextmanager
    def _write_lock(self) -> Iterator[None]:
        """Exclusive across processes and threads (each holder opens its own descriptor)."""
        with file_lock(
            self._root / _LOCK_FILE,
            timeout_s=LOCK_TIMEOUT_S,
            error=ClusterError,
            what=f"local cluster {self._root}",
            poll_s=LOCK_POLL_S,
        ):
            yield

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

    def _store_new(self, kind: ResourceKind, obj: Obj) -> Obj:
        """Store `obj` under the next resourceVersion; call with the write lock held."""
        meta = obj["metadata"]
        version = self._next_resource_version()
        meta["resourceVersion"] = str(version)
        self._write_file(self._path(kind, meta.get("namespace"), meta["name"]), dump_yaml(obj))
        self._mark_written(kind, version)
        return obj

    def _mark_written(self, kind: ResourceKind, version: int) -> None:
        """Record the kind's last write for `watch_objects`; call with the write lock held."""
        self._write_file(self._root / kind.plural / _LAST_WRITE_FILE, f"{version}\n")

    def _remove_locked(self, kind: ResourceKind, namespace: str | None, name: str) -> None:
        """Remove the object's file (gone already is fine); call with the write lock held."""
        path = self._path(kind, namespace, name)
        try:
            removed = remove_file(path)
        except OSError as exc:
            raise ClusterError(
                f"{rules.describe(kind, namespace, name)}: cannot delete {path}: {exc}"
            ) from exc
        if removed:
            self._mark_written(kind, self._next_resource_version())

    def _create(self, kind: ResourceKind, obj: Obj) -> Obj:
        namespace, name = rules.object_key(kind, obj)
        path = self._path(kind, namespace, name)
        with self._write_lock():
            if path.exists():
                raise rules.already_exists(kind, namespace, name)
            return self._store_new(
                kind, rules.prepare_create(kind, obj, namespace=namespace, keep_uid=True)
            )

    def _update(self, kind: ResourceKind, obj: Obj, *, status_only: bool = False) -> Obj:
        namespace, name = rules.object_key(kind, obj)
        with self._write_lock():
            stored = self._get(kind, namespace, name)
            return self._update_locked(kind, stored, obj, status_only=status_only)

    def _update_locked(
        self, kind: ResourceKind, stored: Obj, obj: Obj, *, status_only: bool = False
    ) -> Obj:
        new = rules.prepare_update(kind, stored, obj, status_only=status_only)
        if new is None:
            return stored
        return self._store_new(kind, new)

    def _put(self, kind: ResourceKind, obj: Obj) -> Obj:
        namespace, name = rules.object_key(kind, obj)
        with self._write_lock():
            try:
                stored = self._get(kind, namespace, name)
            except NotFoundError:
                if obj["metadata"].get("resourceVersion") not in (None, ""):
                    raise  # replacing a version of an object that is gone
                new = rules.prepare_create(kind, obj, namespace=namespace, keep_uid=True)
                return self._store_new(kind, new)
            return self._update_locked(kind, stored, obj)

    def _delete(self, kind: ResourceKind, namespace: str | None, name: str) -> None:
        self._path(kind, namespace, name)  # checks the name before taking the lock
        with self._write_lock():
            self._remove_locked(kind, namespace, name)


def _has_labels(obj: Obj, labels: Mapping[str, str]) -> bool:
    have = (obj.get("metadata") or {}).get("labels") or {}
    return all(have.get(key) == value for key, value in labels.items())


def _identity_stamp(identity: tuple[int, int, int]) -> str:
    return " ".join(str(part) for part in identity)


def _directory_signature(directory: Path) -> tuple[int, frozenset[tuple[str, int, int, int]]]:
    """What changes whenever an object file is written or removed.

    The directory's own mtime changes with every create, rename and delete,
    so a slice deleted and re-created between two polls (the same files as
    before) still counts as a change; the files' (name, inode, size, mtime)
    catch edits in place.
    """
    out = set()
    with os.scandir(directory) as entries:
        for entry in entries:
            if entry.name.startswith(".") or not entry.name.endswith(_SUFFIX):
                continue
            try:
                info = entry.stat(follow_symlinks=False)
            except FileNotFoundError:
                continue
            out.add((entry.name, info.st_ino, info.st_size, info.st_mtime_ns))
    return directory.stat().st_mtime_ns, frozenset(out)
