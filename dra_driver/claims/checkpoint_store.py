"""The checkpoint on disk: one file per claim, load, commit, quarantine, and a lock.

The kubelet plugin keeps its record of prepared claims in a directory under
its plugin data directory (e.g. `/var/lib/kubelet/plugins/gpu.nvidia.com/
checkpoint/`), one file per claim named `<claim UID>.json`. Each file is a
complete one-claim checkpoint in the format of `dra_driver.claims.checkpoint`
(checksum header, versioned payload with the boot id), so the schema rules
and migrations of that module apply to every file unchanged.

Why a file per claim: a node may hold hundreds of shared claims. With one
file for the node, every Prepare rewrote (and fsync'd) every claim twice, so
Prepare got slower with every claim held. Now a transition writes only the
file of the claim it changes (temp file, rename; fsync'd and the directory
too when the caller asks: the plugin does not, see `GpuDriver.update`), so
its cost does not depend on how many claims the node holds, and every file
is still replaced atomically: a crash leaves each claim's old or new record,
never a mix. Claims are independent records; nothing needs two files to
change together.

This module is the only code that touches those files:

* `load_outcome()` reads every file. Files of an earlier boot are discarded
  (devices, MIG instances and CDI specs under /var/run do not survive a
  reboot) and reported; an unreadable file does not stop the others from
  loading, it is reported in `unreadable` so the plugin can `quarantine()`
  it and rebuild the claim from other sources (NVIDIA's issue #1100).
* The single `checkpoint.json` of dra-gpu before this layout (`legacy_file`)
  is read as well, and `save()` migrates it: its claims are written as
  claim files first, then the old file is removed, so a crash half-way
  migrates again on the next start.
* `commit(old, new)` writes the files of the claims that differ between two
  checkpoints and removes the files of claims that are gone; `save()`
  makes the directory hold exactly one checkpoint (start-up only).
* `lock()` serialises read-modify-write cycles across processes with
  `flock` on a sibling `.lock` file that is never deleted.

Shared by several processes: during a rolling upgrade two plugin instances
prepare and unprepare claims from the same directory, so each must see the
other's changes before it decides anything. Every change (`commit`, `save`,
`quarantine`) writes a new random *generation* token into the lock file
while the lock is held; a process that cached the checkpoint compares the
token under the lock (`generation()`, one small read) and reloads only when
another process changed something.

Damage: a checkpoint directory that is missing although this store wrote
to it (the token says so), a dangling symbolic link, something else than a
directory, or a directory that cannot be listed is reported in
`LoadOutcome.damaged` (and by `directory_problem()`), never read as "no
claims", so the plugin rebuilds the claims from the node instead of
forgetting them. `save()` moves such a path aside and recreates the directory.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import secrets
import stat
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from dra_driver.claims.checkpoint import Checkpoint, ClaimEntry, decode, encode
from dra_driver.errors import CheckpointError
from dra_driver.files import atomic as fsutil
from dra_driver.files.flock import acquire
from dra_driver.files.regular import read_regular
from dra_driver.kube.names import is_uid

DEFAULT_LOCK_TIMEOUT_S = 10.0
CLAIM_FILE_SUFFIX = ".json"
_GENERATION_BYTES = 32


@dataclass(frozen=True)
class Unreadable:
    """A checkpoint file that could not be read: its path, why, and the claim it was for.

    `claim_uid` comes from the file name; it is None for the legacy whole-node file.
    """

    path: Path
    error: str
    claim_uid: str | None


@dataclass(frozen=True)
class LoadOutcome:
    """What `CheckpointStore.load_outcome()` found, for the plugin's start-up log.

    `file_existed` is False for a fresh node. `discarded_boot_id` is the
    boot id of files from an earlier boot (None otherwise) and
    `discarded_claims` the entries they held, which were dropped.
    `unreadable` lists corrupt files, whose claims are missing from
    `checkpoint`. `legacy` is True when the single-file checkpoint of an
    older dra-gpu was read (the next `save()` migrates it). `damaged` says
    why the directory itself could not be read (see the module docstring):
    then `checkpoint` may lack any number of claims.
    """

    checkpoint: Checkpoint
    file_existed: bool
    discarded_boot_id: str | None = None
    discarded_claims: tuple[ClaimEntry, ...] = ()
    unreadable: tuple[Unreadable, ...] = ()
    legacy: bool = False
    damaged: str | None = None

    @property
    def rebooted(self) -> bool:
        return self.discarded_boot_id is not None

    @property
    def incomplete(self) -> bool:
        """True when claims may be missing: rebuild them from the node before trusting it."""
        return self.damaged is not None or bool(self.unreadable)

    @property
    def needs_save(self) -> bool:
        """True when the files on disk differ from `checkpoint` and `save()` should run."""
        return self.rebooted or self.legacy or self.incomplete


class CheckpointStore:
    """The claim files under `directory`, for the current boot `boot_id`."""

    def __init__(self, directory: Path, boot_id: str, *, legacy_file: Path | None = None) -> None:
        if not boot_id:
            raise CheckpointError(f"{directory}: empty boot id")
        self.directory = Path(directory)
        self.boot_id = boot_id
        self.legacy_file = None if legacy_file is None else Path(legacy_file)
        self.lock_path = self.directory.with_name(self.directory.name + ".lock")
        self.last_load: LoadOutcome | None = None
        # The lock file stays open between locks (see `lock`): (descriptor, (dev, inode)).
        self._lock_file: tuple[int, tuple[int, int]] | None = None
        self._threads = threading.Lock()
        self._held = False

    def path_for(self, claim_uid: str) -> Path:
        """The file of `claim_uid` (whether or not it exists)."""
        if not is_uid(claim_uid):
            raise CheckpointError(f"claim UID {claim_uid!r} cannot name a checkpoint file")
        return self.directory / f"{claim_uid}{CLAIM_FILE_SUFFIX}"

    # -- reading ------------------------------------------------------------------

    def load(self) -> Checkpoint:
        """This boot's checkpoint; `CheckpointError` if any file is unreadable.

        The strict read for tools and tests; the plugin uses `load_outcome`.
        """
        outcome = self.load_outcome()
        if outcome.damaged is not None:
            raise CheckpointError(f"{self.directory}: {outcome.damaged}")
        if outcome.unreadable:
            raise CheckpointError(
                "; ".join(f"{bad.path}: {bad.error}" for bad in outcome.unreadable)
            )
        return outcome.checkpoint

    def load_outcome(self) -> LoadOutcome:
        """Read every claim file (and the legacy file); also stored in `last_load`.

        Never raises for a bad file (it goes to `unreadable`) nor for a
        damaged directory (`damaged`).
        """
        found: list[tuple[Checkpoint, bool]] = []  # (one file's content, from the legacy file)
        unreadable: list[Unreadable] = []
        legacy = False
        damaged = self.directory_problem()
        if self.legacy_file is not None:
            stored = self._read(self.legacy_file, None, unreadable)
            if stored is not None:
                found.append((stored, True))
                legacy = True
            elif unreadable:
                legacy = True
        try:
            claim_files = [] if damaged is not None else self._claim_files()
        except CheckpointError as exc:
            damaged, claim_files = str(exc), []
        for path in claim_files:
            uid = path.name[: -len(CLAIM_FILE_SUFFIX)]
            stored = self._read(path, uid, unreadable)
            if stored is None:
                continue
            if set(stored.claims) != {uid}:
                unreadable.append(
                    Unreadable(path, f"holds claims {sorted(stored.claims)}, expected {uid}", uid)
                )
                continue
            found.append((stored, False))
        claims: dict[str, ClaimEntry] = {}
        discarded: list[ClaimEntry] = []
        discarded_boot: str | None = None
        for stored, _from_legacy in sorted(found, key=lambda item: not item[1]):
            if stored.boot_id == self.boot_id:
                claims.update(stored.claims)  # a claim file overrides the legacy file
            else:
                discarded_boot = stored.boot_id
                discarded.extend(stored.claims[u] for u in sorted(stored.claims))
        outcome = LoadOutcome(
            Checkpoint(boot_id=self.boot_id, claims=claims),
            file_existed=bool(found or unreadable or damaged),
            discarded_boot_id=discarded_boot,
            discarded_claims=tuple(discarded),
            unreadable=tuple(unreadable),
            legacy=legacy,
            damaged=damaged,
        )
        self.last_load = outcome
        return outcome

    def _read(self, path: Path, uid: str | None, unreadable: list[Unreadable]) -> Checkpoint | None:
        try:
            data = read_regular(path)  # a FIFO there must not hang the plugin
        except FileNotFoundError:
            return None
        except OSError as exc:
            unreadable.append(Unreadable(path, f"cannot read: {exc.strerror or exc}", uid))
            return None
        try:
            return decode(data, source=str(path))
        except CheckpointError as exc:
            unreadable.append(Unreadable(path, str(exc), uid))
            return None

    def directory_problem(self) -> str | None:
        """Why the checkpoint directory cannot be read as the claims' record now, or None.

        A missing directory is a problem only once this store has written to
        it (a fresh node has none yet). One `lstat` (and a small read when it
        is missing), so the plugin checks it on every call.
        """
        try:
            info = os.lstat(self.directory)
        except FileNotFoundError:
            return "is missing, although claims were recorded in it" if self.generation() else None
        except OSError as exc:
            return f"cannot be examined: {exc.strerror or exc}"
        if stat.S_ISLNK(info.st_mode):
            target = os.readlink(self.directory)
            try:
                info = os.stat(self.directory)
            except OSError:
                return f"is a dangling symbolic link (to {target})"
        if not stat.S_ISDIR(info.st_mode):
            return "is not a directory"
        return None

    def _claim_files(self) -> list[Path]:
        try:
            names = sorted(os.listdir(self.directory))
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise CheckpointError(f"{self.directory}: cannot list: {exc.strerror or exc}") from exc
        return [
            self.directory / name
            for name in names
            if name.endswith(CLAIM_FILE_SUFFIX) and is_uid(name[: -len(CLAIM_FILE_SUFFIX)])
        ]

    # -- writing ------------------------------------------------------------------

    def commit(self, old: Checkpoint, new: Checkpoint, *, sync: bool = True) -> str | None:
        """Make the files go from `old` (what is on disk) to `new`.

        Writes the file of each claim whose entry changed and removes the
        file of each claim that is gone; each file is replaced atomically.
        The cost depends on the claims that changed, not on how many there are.
        `sync=False` skips the fsyncs: the change is visible to every other
        process at once (a rolling-upgrade peer must see a reservation), only
        not guaranteed to survive a power loss, which voids the boot's
        claims anyway. Returns the new generation token (None: nothing
        changed on disk).
        """
        self._check_boot(new)
        changed = new.changed_since(old)
        candidates = set(new.claims) | set(old.claims) if changed is None else changed
        wrote = False
        for uid in sorted(candidates):
            entry = new.claims.get(uid)
            if entry is None:
                if uid in old.claims and self._remove(self.path_for(uid), sync=sync):
                    wrote = True
            elif old.claims.get(uid) is not entry:
                self._write(uid, entry, sync=sync)
                wrote = True
        if wrote:
            return self._bump_generation()
        return None

    def save(self, checkpoint: Checkpoint) -> None:
        """Make the directory hold exactly `checkpoint` (start-up: migrate, discard, rebuild).

        Writes every claim file, removes every other claim file and leftover
        temp file, and only then the legacy file.
        """
        self._check_boot(checkpoint)
        self._replace_damaged_directory()
        for uid, entry in checkpoint.claims.items():
            self._write(uid, entry)
        keep = {self.path_for(uid) for uid in checkpoint.claims}
        for path in self._claim_files():
            if path not in keep:
                self._remove(path)
        self.remove_temp_files()
        if self.legacy_file is not None:
            self._remove(self.legacy_file)
        self._bump_generation()

    def _write(self, uid: str, entry: ClaimEntry, *, sync: bool = True) -> None:
        path = self.path_for(uid)
        data = encode(Checkpoint(boot_id=self.boot_id, claims={uid: entry}))
        try:
            try:
                fsutil.atomic_write(path, data, mode=0o600, sync=sync)
            except FileNotFoundError:  # the first claim file
                self.directory.mkdir(parents=True, exist_ok=True)
                fsutil.atomic_write(path, data, mode=0o600, sync=sync)
        except OSError as exc:
            raise CheckpointError(f"{path}: cannot write: {exc.strerror or exc}") from exc

    def _remove(self, path: Path, *, sync: bool = True) -> bool:
        try:
            return fsutil.remove_file(path, sync=sync)
        except OSError as exc:
            raise CheckpointError(f"{path}: cannot remove: {exc.strerror or exc}") from exc

    def remove_temp_files(self) -> list[Path]:
        """Delete the temp files interrupted writes left (start-up, under `lock()`: a write
        in flight in another process would lose its temp file). Returns what went.

        Every temp file in the claim directory, and those of the legacy file next
        to it (`.tmp-checkpoint.json.<random>`, an older dra-gpu's interrupted write).
        """
        removed = self._remove_temp_files_in(self.directory, fsutil.temp_prefix_for(""))
        if self.legacy_file is not None:
            removed += self._remove_temp_files_in(
                self.legacy_file.parent, fsutil.temp_prefix_for(self.legacy_file.name) + "."
            )
        return removed

    def _remove_temp_files_in(self, directory: Path, prefix: str) -> list[Path]:
        try:
            names = os.listdir(directory)
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise CheckpointError(f"{directory}: cannot list: {exc.strerror or exc}") from exc
        removed = []
        for name in sorted(names):
            if name.startswith(prefix):
                self._remove(directory / name)
                removed.append(directory / name)
        return removed

    def _replace_damaged_directory(self) -> None:
        """Make `directory` a directory again: move a dangling link or a file aside."""
        problem = self.directory_problem()
        try:
            if problem is not None and os.path.lexists(self.directory):
                stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S.%fZ")
                os.rename(
                    self.directory,
                    self.directory.with_name(f"{self.directory.name}.damaged-{stamp}"),
                )
            self.directory.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise CheckpointError(
                f"{self.directory}: cannot write: {exc.strerror or exc}"
                + (f" (the path {problem})" if problem else "")
            ) from exc

    # -- the generation token ----------------------------------------------------------

    def generation(self) -> str:
        """The token of the last change by any process ("" before the first). Read it
        under `lock()`: a different value than last time means another process changed
        the checkpoint (reload it)."""
        try:
            if self._held and self._lock_file is not None:
                data = os.pread(self._lock_file[0], _GENERATION_BYTES, 0)
            else:
                with open(self.lock_path, "rb") as f:
                    data = f.read(_GENERATION_BYTES)
        except FileNotFoundError:
            return ""
        except OSError as exc:
            raise CheckpointError(f"{self.lock_path}: cannot read: {exc.strerror or exc}") from exc
        return data.decode("ascii", errors="replace").strip("\0 ")

    def _bump_generation(self) -> str:
        token = secrets.token_hex(_GENERATION_BYTES // 2)
        try:
            if self._held and self._lock_file is not None:
                os.pwrite(self._lock_file[0], token.encode("ascii"), 0)
            else:
                fd = os.open(self.lock_path, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o600)
                try:
                    os.pwrite(fd, token.encode("ascii"), 0)
                finally:
                    os.close(fd)
        except OSError as exc:
            raise CheckpointError(f"{self.lock_path}: cannot write: {exc.strerror or exc}") from exc
        return token

    def _check_boot(self, checkpoint: Checkpoint) -> None:
        if checkpoint.boot_id != self.boot_id:
            raise CheckpointError(
                f"{self.directory}: refusing to save a checkpoint of boot {checkpoint.boot_id} "
                f"during boot {self.boot_id}"
            )

    def quarantine(self, path: Path) -> Path:
        """Move a corrupt file aside as `<name>.corrupt-<UTC time>` and return the new path.

        The evidence is kept for a bug report while the plugin rebuilds the
        claim. Raises `CheckpointError` if there is no file.
        """
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S.%fZ")
        target = path.with_name(f"{path.name}.corrupt-{stamp}")
        suffix = 1
        while target.exists():
            target = path.with_name(f"{path.name}.corrupt-{stamp}-{suffix}")
            suffix += 1
        try:
            path.rename(target)
            fsutil.fsync_dir(path.parent)
            self._bump_generation()
        except FileNotFoundError as exc:
            raise CheckpointError(f"{path}: nothing to quarantine, the file is gone") from exc
        except OSError as exc:
            raise CheckpointError(
                f"{path}: cannot move aside to {target.name}: {exc.strerror or exc}"
            ) from exc
        return target

    @contextlib.contextmanager
    def lock(self, timeout_s: float = DEFAULT_LOCK_TIMEOUT_S) -> Iterator[None]:
        """Hold an exclusive inter-process lock for a read-modify-write cycle.

        `flock` on `<directory>.lock`; waits up to `timeout_s` and then raises
        `CheckpointError`. Not re-entrant: a second `lock()` in the same
        process while one is held waits like any other process would.

        The lock file is opened once and kept open (a Prepare takes this lock
        several times; opening, creating the directory and closing each time
        was most of its file operations), with a thread lock for this
        process's threads. Once the lock is held, the path must still name
        the open file: one deleted or replaced since (its directory was
        removed) is opened again, so two processes never lock two files.
        """
        deadline = time.monotonic() + timeout_s
        if not self._threads.acquire(timeout=timeout_s):
            raise CheckpointError(
                f"{self.lock_path}: still locked by another thread after {timeout_s:g} s"
            )
        try:
            fd = self._locked_descriptor(deadline)
            self._held = True
            try:
                yield
            finally:
                self._held = False
                fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            self._threads.release()

    def _locked_descriptor(self, deadline: float) -> int:
        """Under the thread lock: flock the lock file, (re)opening it as needed."""
        while True:
            if self._lock_file is None:
                self._lock_file = self._open_lock_file()
            fd, identity = self._lock_file
            acquire(
                fd,
                timeout_s=max(deadline - time.monotonic(), 0.0),
                error=CheckpointError,
                what=str(self.lock_path),
            )
            try:
                info = os.stat(self.lock_path)
            except FileNotFoundError:
                info = None
            except OSError as exc:
                fcntl.flock(fd, fcntl.LOCK_UN)
                raise CheckpointError(
                    f"{self.lock_path}: cannot examine: {exc.strerror or exc}"
                ) from exc
            if info is not None and (info.st_dev, info.st_ino) == identity:
                return fd
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)
            self._lock_file = None

    def _open_lock_file(self) -> tuple[int, tuple[int, int]]:
        try:
            self.lock_path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        except OSError as exc:
            raise CheckpointError(f"{self.lock_path}: cannot open: {exc.strerror or exc}") from exc
        info = os.fstat(fd)
        return fd, (info.st_dev, info.st_ino)
