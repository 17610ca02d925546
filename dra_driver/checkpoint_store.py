"""The checkpoint file on disk: load, save, quarantine, and a cross-process lock.

The kubelet plugin keeps its record of prepared claims in one file under its
plugin data directory (e.g. `/var/lib/kubelet/plugins/gpu.nvidia.com/`).
This module is the only code that touches that file:

* `load()` turns the file into a `Checkpoint`. A missing file is an empty
  checkpoint; a file from an earlier boot is discarded (devices, MIG
  instances and CDI specs under /var/run do not survive a reboot) and the
  discarded claims are reported in `last_load` so the plugin can log them;
  a corrupt file raises `CheckpointError` and is left untouched, so the
  plugin can decide to `quarantine()` it and start fresh instead of
  crash-looping (NVIDIA's issue #1100).
* `save()` writes atomically, so a crash mid-write keeps the previous file.
* `lock()` serialises read-modify-write cycles across processes (rolling
  updates run two plugin pods side by side) with `flock` on a sibling
  `.lock` file that is never deleted.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from dra_driver import fsutil
from dra_driver.checkpoint import Checkpoint, ClaimEntry, decode, encode
from dra_driver.errors import CheckpointError
from dra_driver.flock import file_lock

DEFAULT_LOCK_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class LoadOutcome:
    """What `CheckpointStore.load()` found, for the plugin's start-up log.

    `file_existed` is False for a fresh node. `discarded_boot_id` is the
    boot id of a file from an earlier boot (None otherwise) and
    `discarded_claims` the entries it held, which were dropped.
    """

    checkpoint: Checkpoint
    file_existed: bool
    discarded_boot_id: str | None = None
    discarded_claims: tuple[ClaimEntry, ...] = ()

    @property
    def rebooted(self) -> bool:
        return self.discarded_boot_id is not None


class CheckpointStore:
    """The checkpoint file at `path`, for the current boot `boot_id`."""

    def __init__(self, path: Path, boot_id: str) -> None:
        if not boot_id:
            raise CheckpointError(f"{path}: empty boot id")
        self.path = Path(path)
        self.boot_id = boot_id
        self.lock_path = self.path.with_name(self.path.name + ".lock")
        self.last_load: LoadOutcome | None = None

    def load(self) -> Checkpoint:
        """The checkpoint for this boot; see `load_outcome` for details of what was found."""
        return self.load_outcome().checkpoint

    def load_outcome(self) -> LoadOutcome:
        """Read the file; also stored in `last_load`.

        Missing file -> empty checkpoint. Other boot id -> empty checkpoint,
        the old entries in `discarded_claims` (nothing is written; the next
        `save` replaces the file). Unreadable or corrupt -> `CheckpointError`
        naming the path and the problem.
        """
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            outcome = LoadOutcome(Checkpoint(boot_id=self.boot_id), file_existed=False)
        except OSError as exc:
            raise CheckpointError(f"{self.path}: cannot read: {exc.strerror or exc}") from exc
        else:
            stored = decode(data, source=str(self.path))
            if stored.boot_id == self.boot_id:
                outcome = LoadOutcome(stored, file_existed=True)
            else:
                outcome = LoadOutcome(
                    Checkpoint(boot_id=self.boot_id),
                    file_existed=True,
                    discarded_boot_id=stored.boot_id,
                    discarded_claims=tuple(stored.claims[u] for u in sorted(stored.claims)),
                )
        self.last_load = outcome
        return outcome

    def save(self, checkpoint: Checkpoint) -> None:
        """Write `checkpoint` atomically (mode 0600); it must be for this boot."""
        if checkpoint.boot_id != self.boot_id:
            raise CheckpointError(
                f"{self.path}: refusing to save a checkpoint of boot {checkpoint.boot_id} "
                f"during boot {self.boot_id}"
            )
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fsutil.atomic_write(self.path, encode(checkpoint), mode=0o600)
        except OSError as exc:
            raise CheckpointError(f"{self.path}: cannot write: {exc.strerror or exc}") from exc

    def quarantine(self) -> Path:
        """Move a (corrupt) file aside as `<name>.corrupt-<UTC time>` and return the new path.

        The evidence is kept for a bug report while the plugin starts with
        an empty checkpoint. Raises `CheckpointError` if there is no file.
        """
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S.%fZ")
        target = self.path.with_name(f"{self.path.name}.corrupt-{stamp}")
        suffix = 1
        while target.exists():
            target = self.path.with_name(f"{self.path.name}.corrupt-{stamp}-{suffix}")
            suffix += 1
        try:
            self.path.rename(target)
            fsutil.fsync_dir(self.path.parent)
        except FileNotFoundError as exc:
            raise CheckpointError(f"{self.path}: nothing to quarantine, the file is gone") from exc
        except OSError as exc:
            raise CheckpointError(
                f"{self.path}: cannot move aside to {target.name}: {exc.strerror or exc}"
            ) from exc
        return target

    @contextlib.contextmanager
    def lock(self, timeout_s: float = DEFAULT_LOCK_TIMEOUT_S) -> Iterator[None]:
        """Hold an exclusive inter-process lock for a read-modify-write cycle.

        `flock` on `<path>.lock`; waits up to `timeout_s` and then raises
        `CheckpointError`. Not re-entrant: a second `lock()` in the same
        process while one is held waits like any other process would.
        """
        try:
            self.lock_path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise CheckpointError(f"{self.lock_path}: cannot open: {exc.strerror or exc}") from exc
        with file_lock(self.lock_path, timeout_s=timeout_s, error=CheckpointError):
            yield
