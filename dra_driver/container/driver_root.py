"""The NVIDIA driver root: where the host's driver files are, seen from two sides.

The driver's user space lives under a *driver root*: `/` for a driver
installed on the host, `/run/nvidia/driver` for the GPU Operator's driver
container, `/home/kubernetes/bin/nvidia` on GKE. The plugin runs in a
container that sees that root mounted at another path, so two paths matter
(NVIDIA's `--nvidia-driver-root` and `--container-driver-root`): files are
*found* under the container path, and CDI `hostPath`s are *written* under the
host path, because the container runtime reads them on the host.

This module is the I/O side of `dra_driver.container.driver_files`:

* `RootFs` is the `FsView` over a directory, resolving symlinks inside it
  (an absolute link in the GPU Operator's root points into that root, not into
  the plugin's filesystem);
* `DriverUserSpace` runs the discovery once per driver version and keeps the
  CDI edits ready for every Prepare; a new version from NVML triggers a new
  discovery;
* `DriverBinaries` hands the paths of `nvidia-smi` and the MPS binaries, as the
  plugin can execute them, to the code that runs them;
* `nvml_library` finds `libnvidia-ml.so.1` in the root, which `--nvml real`
  loads instead of whatever the plugin image's loader would find.
"""

from __future__ import annotations

import dataclasses
import os
import posixpath
import stat
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from dra_driver.container import cdi
from dra_driver.container.driver_files import (
    NVML_SONAME,
    DriverFiles,
    FileKind,
    discover_driver_files,
    find_library,
    firmware_search_paths,
)
from dra_driver.errors import DriverRootError

DEFAULT_DRIVER_ROOT = "/"
_MAX_LINKS = 40  # the kernel's limit on symlinks followed in one lookup


@dataclass(frozen=True)
class DriverRoot:
    """The driver root as the host sees it and as this process sees it."""

    host_path: str | None = DEFAULT_DRIVER_ROOT  # None: the backend's default root
    container_path: str | None = None  # None: the same as host_path
    cdi_hook_path: str | None = None  # nvidia-cdi-hook on the host; None: nvcdi's default
    disabled_hooks: frozenset[str] = frozenset()  # NVIDIA's hook names, or "all"

    def __post_init__(self) -> None:
        for flag, value in (
            ("--nvidia-driver-root", self.host_path),
            ("--container-driver-root", self.container_path),
            ("--nvidia-cdi-hook-path", self.cdi_hook_path),
        ):
            if value is not None and not value.startswith("/"):
                raise DriverRootError(f"{flag} {value!r} must be absolute")
        self.hooks  # noqa: B018  (refuses unknown hook names now, not at the first Prepare)

    @property
    def hooks(self) -> cdi.CdiHooks:
        """Which nvidia-cdi-hook runs which of nvcdi's hooks in the CDI specs."""
        return cdi.CdiHooks(
            path=self.cdi_hook_path or cdi.DEFAULT_CDI_HOOK_PATH,
            disabled=frozenset(self.disabled_hooks),
        )

    @property
    def host(self) -> str:
        """The host path (`/` when none was given)."""
        return self.host_path or DEFAULT_DRIVER_ROOT

    @property
    def local_path(self) -> Path:
        """Where this process reads the root."""
        return Path(self.container_path or self.host)

    def in_container(self, path: str) -> Path:
        """Path `path` (inside the root) as this process can open it."""
        return self.local_path / path.lstrip("/")


class RootFs:
    """`FsView` of the directory `root`: paths inside it, symlinks resolved within it."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)

    def _real(self, path: str) -> str:
        return os.path.join(self.root, path.lstrip("/"))

    def list_dir(self, path: str) -> Sequence[str]:
        resolved = self.resolve(path)
        if resolved is None:
            return []
        try:
            return sorted(os.listdir(self._real(resolved)))
        except OSError:
            return []

    def read_link(self, path: str) -> str | None:
        try:
            return os.readlink(self._real(path))
        except OSError:
            return None

    def resolve(self, path: str) -> str | None:
        parts = [p for p in path.split("/") if p not in ("", ".")]
        current = "/"
        hops = 0
        while parts:
            part = parts.pop(0)
            if part == "..":
                current = posixpath.dirname(current) or "/"
                continue
            candidate = posixpath.join(current, part)
            target = self.read_link(candidate)
            if target is None:
                if not os.path.lexists(self._real(candidate)):
                    return None
                current = candidate
                continue
            hops += 1
            if hops > _MAX_LINKS:
                return None
            if target.startswith("/"):
                current = "/"
            parts = [p for p in target.split("/") if p not in ("", ".")] + parts
        return current

    def _mode(self, path: str) -> int | None:
        """st_mode of what `path` resolves to inside the root; None if nothing."""
        resolved = self.resolve(path)
        if resolved is None:
            return None
        try:
            return os.stat(self._real(resolved)).st_mode
        except OSError:
            return None

    def kind(self, path: str) -> FileKind | None:
        mode = self._mode(path)
        if mode is None:
            return None
        if stat.S_ISREG(mode):
            return "file"
        if stat.S_ISDIR(mode):
            return "dir"
        if stat.S_ISSOCK(mode):
            return "socket"
        return "other"

    def is_executable(self, path: str) -> bool:
        mode = self._mode(path)
        return mode is not None and stat.S_ISREG(mode) and bool(mode & 0o111)

    def read_text(self, path: str) -> str | None:
        resolved = self.resolve(path)
        if resolved is None:
            return None
        try:
            return Path(self._real(resolved)).read_text(errors="replace")
        except OSError:
            return None

    def open_binary(self, path: str) -> BinaryIO | None:
        resolved = self.resolve(path)
        if resolved is None:
            return None
        try:
            return open(self._real(resolved), "rb")  # the caller closes it
        except OSError:
            return None


@dataclass(frozen=True)
class DriverBinaries:
    """The driver's binaries as this process can run them (None: not installed).

    Paths are under the container driver root. `env` is what to add to the
    environment of such a process so the binary finds the root's libraries
    (`nvidia-smi` loads `libnvidia-ml.so.1` with dlopen).
    """

    nvidia_smi: Path | None
    nvidia_cuda_mps_control: Path | None
    nvidia_cuda_mps_server: Path | None
    nvidia_persistenced: Path | None
    nvidia_debugdump: Path | None
    library_dirs: tuple[Path, ...] = ()

    @property
    def env(self) -> Mapping[str, str]:
        return {"LD_LIBRARY_PATH": os.pathsep.join(str(d) for d in self.library_dirs)}

    @classmethod
    def of(cls, files: DriverFiles, root: DriverRoot) -> DriverBinaries:
        def local(name: str) -> Path | None:
            path = files.binary(name)
            return root.in_container(path) if path is not None else None

        return cls(
            nvidia_smi=local("nvidia-smi"),
            nvidia_cuda_mps_control=local("nvidia-cuda-mps-control"),
            nvidia_cuda_mps_server=local("nvidia-cuda-mps-server"),
            nvidia_persistenced=local("nvidia-persistenced"),
            nvidia_debugdump=local("nvidia-debugdump"),
            library_dirs=tuple(root.in_container(d) for d in files.library_dirs),
        )


def host_firmware_paths(sys_root: Path = Path("/sys")) -> tuple[str, ...]:
    """The firmware search paths of the running kernel (custom path first)."""
    try:
        custom = (sys_root / "module/firmware_class/parameters/path").read_text().strip()
    except OSError:
        custom = ""
    return firmware_search_paths(os.uname().release, custom)


def nvml_library(root: DriverRoot) -> Path:
    """`libnvidia-ml.so.1` of the driver root, as this process opens it.

    Raises `DriverRootError` naming the root when it holds none (no driver,
    or the GPU Operator has not installed it yet).
    """
    found = find_library(RootFs(root.local_path), NVML_SONAME)
    if found is None:
        where = root.host
        if root.container_path and root.container_path != root.host_path:
            where += f" (mounted at {root.container_path})"
        raise DriverRootError(
            f"no {NVML_SONAME} in the library directories of driver root {where}: the NVIDIA "
            "driver is not installed there (yet); check --nvidia-driver-root"
        )
    return root.in_container(found)


class DriverUserSpace:
    """The driver files of one root, discovered once per driver version.

    `edits(version)` is called by every Prepare with the version NVML reports;
    it discovers the files only when that version differs from the last one,
    so Prepare pays for a dictionary lookup, not a directory walk.
    """

    def __init__(
        self,
        root: DriverRoot,
        *,
        firmware_paths: Sequence[str] | None = None,
        setup: Callable[[str], None] | None = None,
    ) -> None:
        """`setup(version)` runs before each discovery (a simulated node writes its
        fake root there); `firmware_paths` default to the running kernel's."""
        self.root = root
        self._setup = setup
        self._firmware_paths = (
            tuple(firmware_paths) if firmware_paths is not None else host_firmware_paths()
        )
        self._lock = threading.Lock()
        self._cached: tuple[DriverFiles, cdi.ContainerEdits] | None = None
        self.discoveries = 0  # how many times the root was walked

    def files(self, version: str) -> DriverFiles:
        """The driver files of `version` (cached until the version changes)."""
        return self._load(version)[0]

    def edits(self, version: str) -> cdi.ContainerEdits:
        """The CDI edits that give a container the driver files of `version`."""
        return self._load(version)[1]

    def binaries(self, version: str) -> DriverBinaries:
        """nvidia-smi and the MPS binaries of `version`, as this process runs them."""
        return DriverBinaries.of(self.files(version), self.root)

    def _load(self, version: str) -> tuple[DriverFiles, cdi.ContainerEdits]:
        with self._lock:
            if self._cached is None or self._cached[0].version != version:
                if self._setup is not None:
                    self._setup(version)
                files = discover_driver_files(
                    RootFs(self.root.local_path),
                    version,
                    firmware_paths=self._firmware_paths,
                    machine=os.uname().machine,
                )
                files = dataclasses.replace(
                    files, warnings=(*files.warnings, *self._hook_warnings())
                )
                edits = cdi.driver_edits(files, host_root=self.root.host, hooks=self.root.hooks)
                self._cached = (files, edits)
                self.discoveries += 1
            return self._cached

    def _hook_warnings(self) -> list[str]:
        """A missing nvidia-cdi-hook, where this process can see the host path.

        The hook runs on the host; the plugin sees only the driver root. When the
        hook path lies inside it, a missing binary means every GPU container
        would fail to start.
        """
        hooks = self.root.hooks
        if not hooks.active:
            return []
        host = self.root.host.rstrip("/") + "/"
        if not hooks.path.startswith(host):
            return []
        inside = "/" + hooks.path[len(host) :]
        if RootFs(self.root.local_path).is_executable(inside):
            return []
        return [
            f"CDI hook {hooks.path} is not installed (containers of prepared claims will fail "
            f"to start): install nvidia-container-toolkit >= "
            f"{max((cdi.HOOK_MIN_TOOLKIT[h] for h in hooks.active), key=_version_key)}, point "
            "--nvidia-cdi-hook-path at it, or pass --disable-cdi-hook all"
        ]


def _version_key(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split("."))
