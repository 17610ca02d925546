"""The directory of our CDI spec files (usually `/var/run/cdi`).

Container runtimes scan this directory, so a spec file must appear whole
(atomic writes) and must disappear when its claim is unprepared. The
directory is shared with other vendors' specs: this store only ever reads,
lists or deletes files named `k8s.gpu.nvidia.com-claim_<uid>.yaml` (one per
prepared claim; `<vendor>-claim_<uid>.yaml` for a store of another kind, see
"Kind" below) and `k8s.gpu.nvidia.com-driver_common-<digest>.yaml` (the
node's base specs, `dra_driver.container.base_spec`), and `claim_uids()`
lets the plugin find specs whose claim it no longer knows (left behind by a
crash) to delete them.

No fsync: a claim's spec is written (and removed) without flushing it or
the directory to disk. Other processes see a rename or an unlink at once;
only a crash of the machine could lose one, and a machine crash is a reboot,
after which the plugin discards every claim of the earlier boot and removes
their specs (`dra_driver.claims.checkpoint_store`). NVIDIA's plugin writes
its specs the same way. Base specs, written once per driver, are fsync'd.

A spec may carry a one-line record of its claim for the plugin (the
checkpoint entry, so a lost checkpoint can be rebuilt) as its first line, a
YAML comment `# gpu.nvidia.com/dra-gpu-claim: <JSON>`. CDI parsers skip
comments; a spec annotation would do the same job but needs `cdiVersion`
0.6.0, which container runtimes with older CDI libraries reject.

Owner: a store made with an `owner` (the plugin's: its driver name and
data directory, `owner_of_data_dir`) writes it into every spec, in a comment
line `# gpu.nvidia.com/dra-gpu-owner: <owner>`, and lists, rebuilds from
and deletes only specs of that owner (or of no owner: written by a dra-gpu
from before owners, on a CDI directory the plugin's directory lock gives to
one installation). So a second installation pointed at the same CDI
directory can never delete the first one's specs. A store without an owner
(the CLI's tools, tests) sees every spec of ours.

Kind: a store handles the claim specs of one `cdi.ClaimKind` (default the
GPU driver's, `k8s.gpu.nvidia.com/claim`); the ComputeDomain plugin's store
is made with `kind=` its own (`k8s.compute-domain.nvidia.com/claim`), so each
driver lists and deletes only its own claim specs in a shared directory.

Removing is "nothing to do" for anything that cannot be one of our specs:
an odd claim UID (`../../etc/passwd`, 300 characters), a spec that is not
there (also on a read-only directory, where even unlinking a missing file
fails), a spec of another owner.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Any, Final

import yaml

from dra_driver.container import base_spec, cdi
from dra_driver.errors import CdiError
from dra_driver.files import atomic as fsutil
from dra_driver.kube import yaml_io

RECORD_PREFIX = "# gpu.nvidia.com/dra-gpu-claim: "
"""The first line of a spec that carries its claim's record, before the record."""
OWNER_PREFIX = "# gpu.nvidia.com/dra-gpu-owner: "
"""A comment line of a spec that names the plugin installation that wrote it."""
_MAX_HEADER_LINE: Final = 1 << 20
_FAST_DUMPER: Final = getattr(yaml, "CSafeDumper", None)
"""libyaml's emitter where PyYAML was built with it: a spec is plain data, and the pure
Python emitter cost a tenth of a Prepare."""


def _dump(spec: dict[str, Any]) -> str:
    if _FAST_DUMPER is None:
        return yaml_io.dump(spec, sort_keys=False)
    text: str = yaml.dump(spec, Dumper=_FAST_DUMPER, sort_keys=False, default_flow_style=False)
    return text


def owner_of_data_dir(driver_name: str, data_dir: Path) -> str:
    """The owner a plugin writes into its specs: `<driver>@<absolute plugin data dir>`.

    Rolling-upgrade peers share the data directory, hence the owner; another
    installation (another kubelet root) has another one.
    """
    return f"{driver_name}@{os.path.abspath(data_dir)}"


class CdiStore:
    """Reads and writes this driver's transient claim specs under `root`."""

    def __init__(
        self, root: Path, *, owner: str | None = None, kind: cdi.ClaimKind = cdi.GPU_CLAIMS
    ) -> None:
        if owner is not None and ("\n" in owner or "\r" in owner or not owner):
            raise CdiError(f"CDI spec owner {owner!r} must be one non-empty line")
        self.root = Path(root)
        self.owner = owner
        self.kind = kind

    def path_for(self, claim_uid: str) -> Path:
        """Where the spec of `claim_uid` lives (whether or not it exists)."""
        return self.root / self.kind.spec_file_name(claim_uid)

    def write(self, claim_uid: str, spec: dict[str, Any], *, record: str | None = None) -> Path:
        """Validate `spec` and write it atomically as the claim's spec file.

        `record` (one line of text) goes into the first line, a comment.
        Creates `root` if needed. Raises `CdiError` if the spec is invalid,
        is not of the store's kind (`k8s.gpu.nvidia.com/claim` by default), or
        cannot be written.
        """
        if record is not None and ("\n" in record or "\r" in record):
            raise CdiError(f"CDI spec for claim {claim_uid}: the record must be one line")
        if spec.get("kind") != self.kind.kind:
            raise CdiError(
                f"CDI spec for claim {claim_uid}: kind is {spec.get('kind')!r}, "
                f"expected {self.kind.kind!r}"
            )
        cdi.validate_spec(spec)
        path = self.path_for(claim_uid)
        self._write_file(path, spec, record=record, sync=False)
        return path

    def _write_file(
        self, path: Path, spec: dict[str, Any], *, record: str | None, sync: bool
    ) -> None:
        text = _dump(spec)
        if self.owner is not None:
            text = f"{OWNER_PREFIX}{self.owner}\n{text}"
        if record is not None:
            text = f"{RECORD_PREFIX}{record}\n{text}"
        data = text.encode()
        try:
            try:
                fsutil.atomic_write(path, data, mode=0o644, sync=sync)
            except FileNotFoundError:  # the first spec, or the directory was removed
                self.root.mkdir(parents=True, exist_ok=True)
                fsutil.atomic_write(path, data, mode=0o644, sync=sync)
        except OSError as exc:
            raise CdiError(f"{path}: cannot write CDI spec: {exc.strerror or exc}") from exc

    # -- the node's base specs --------------------------------------------------------

    def base_path(self, name: str) -> Path:
        """Where the base spec of device `name` (`common-<digest>`) lives."""
        return self.root / base_spec.file_name(name)

    def write_base(self, name: str, spec: dict[str, Any]) -> Path:
        """Write the base spec `name` (`base_spec.base_spec`) atomically and durably."""
        if spec.get("kind") != base_spec.KIND:
            raise CdiError(f"base CDI spec {name}: kind is {spec.get('kind')!r}")
        cdi.validate_spec(spec)
        path = self.base_path(name)
        self._write_file(path, spec, record=None, sync=True)
        return path

    def _file_names(self) -> list[str]:
        """The names of the files in `root` (none if it does not exist yet)."""
        try:
            return [p.name for p in self.root.iterdir()]
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise CdiError(f"{self.root}: cannot list CDI specs: {exc.strerror or exc}") from exc

    def base_names(self) -> set[str]:
        """The base specs of ours in `root` (with an `owner`: of that owner)."""
        names = self._file_names()
        found = {n for name in names if (n := base_spec.name_from_file_name(name)) is not None}
        if self.owner is None:
            return found
        return {name for name in found if self._base_owned_or_gone(name)}

    def remove_base(self, name: str) -> bool:
        """Delete the base spec `name` of ours; False if there is none (not an error)."""
        if not base_spec.is_name(name) or not self._base_owned_or_gone(name):
            return False
        path = self.base_path(name)
        try:
            return fsutil.remove_file(path)
        except OSError as exc:
            raise CdiError(f"{path}: cannot remove CDI spec: {exc.strerror or exc}") from exc

    def _base_owned_or_gone(self, name: str) -> bool:
        if self.owner is None:
            return True
        try:
            owner = self._header_of(self.base_path(name)).get(OWNER_PREFIX)
        except CdiError:
            return True
        return owner is None or owner == self.owner

    def read(self, claim_uid: str) -> dict[str, Any] | None:
        """The claim's spec as written, or None if it has none."""
        path = self.path_for(claim_uid)
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
        except (OSError, UnicodeDecodeError) as exc:
            raise CdiError(f"{path}: cannot read CDI spec: {exc}") from exc
        try:
            spec = yaml_io.load(text)
        except yaml_io.YAMLError as exc:
            raise CdiError(f"{path}: not valid YAML: {exc}") from exc
        if not isinstance(spec, dict):
            raise CdiError(f"{path}: not a CDI spec (top level is not a mapping)")
        return spec

    def read_record(self, claim_uid: str) -> str | None:
        """The record written with the claim's spec; None if no spec or no record."""
        return self._header(claim_uid).get(RECORD_PREFIX)

    def owner_of(self, claim_uid: str) -> str | None:
        """The owner written into the claim's spec; None if no spec or no owner line."""
        return self._header(claim_uid).get(OWNER_PREFIX)

    def owns(self, claim_uid: str) -> bool:
        """Whether this store may rebuild from and delete the claim's spec (see the
        module docstring); True without a spec."""
        if self.owner is None:
            return True
        owner = self.owner_of(claim_uid)
        return owner is None or owner == self.owner

    def _header(self, claim_uid: str) -> dict[str, str]:
        """The comment lines the plugin wrote at the top of the claim's spec, by prefix."""
        return self._header_of(self.path_for(claim_uid))

    def _header_of(self, path: Path) -> dict[str, str]:
        """The comment lines the plugin wrote at the top of a spec, by prefix."""
        found: dict[str, str] = {}
        try:
            with path.open("rb") as f:
                for _ in range(2):
                    line = f.readline(_MAX_HEADER_LINE).decode("utf-8", errors="replace")
                    line = line.rstrip("\n")
                    prefix = next(
                        (p for p in (RECORD_PREFIX, OWNER_PREFIX) if line.startswith(p)), None
                    )
                    if prefix is None:
                        break
                    found[prefix] = line[len(prefix) :]
        except FileNotFoundError:
            return {}
        except OSError as exc:
            raise CdiError(f"{path}: cannot read CDI spec: {exc.strerror or exc}") from exc
        return found

    def remove(self, claim_uid: str) -> bool:
        """Delete the claim's spec; False if there is none of ours (not an error).

        A UID that cannot name a spec of ours, a missing spec and a spec of
        another owner are all "nothing to do". `CdiError` only when a spec of
        ours exists and cannot be deleted.
        """
        try:
            path = self.path_for(claim_uid)
        except CdiError:
            return False  # no spec of ours can have this name
        if self.owner is not None:
            try:
                if not self.owns(claim_uid):  # reading its header says whether it exists
                    return False
            except CdiError as exc:
                cause = exc.__cause__
                if isinstance(cause, OSError) and cause.errno == errno.ENAMETOOLONG:
                    return False
                raise
        try:
            return fsutil.remove_file(path, sync=False)
        except OSError as exc:
            # A name too long to be ours, or a read-only directory, where even unlinking a
            # missing file fails: nothing to do unless the spec is there.
            if exc.errno == errno.ENAMETOOLONG or not os.path.lexists(path):
                return False
            raise CdiError(f"{path}: cannot remove CDI spec: {exc.strerror or exc}") from exc

    def claim_uids(self) -> set[str]:
        """UIDs of the claims that have a spec file of ours in `root` (empty if no root).

        With an `owner`, specs of other owners are left out.
        """
        names = self._file_names()
        uids = {
            uid for name in names if (uid := self.kind.claim_uid_from_file_name(name)) is not None
        }
        if self.owner is None:
            return uids
        return {uid for uid in uids if self._owned_or_gone(uid)}

    def _owned_or_gone(self, claim_uid: str) -> bool:
        try:
            return self.owns(claim_uid)
        except CdiError:
            return True  # unreadable: ours to deal with (rebuild or remove), as before owners

    def remove_temp_files(self) -> list[Path]:
        """Delete temp files a crash left in the middle of writing one of our specs.

        Runtimes ignore them (they do not end in `.yaml`), but they would
        pile up. Call it at start-up or under the plugin's serialization
        lock: a write in flight in another process would lose its temp file
        and fail. Returns what was removed.
        """
        removed: list[Path] = []
        try:
            candidates = list(self.root.iterdir())
        except FileNotFoundError:
            return removed
        except OSError as exc:
            raise CdiError(f"{self.root}: cannot list CDI specs: {exc.strerror or exc}") from exc
        markers = (
            fsutil.temp_prefix_for(self.kind.spec_file_prefix),
            fsutil.temp_prefix_for(base_spec.FILE_PREFIX),
        )
        for path in candidates:
            if path.name.startswith(markers):
                try:
                    fsutil.remove_file(path)
                except OSError as exc:
                    raise CdiError(f"{path}: cannot remove: {exc.strerror or exc}") from exc
                removed.append(path)
        return removed
