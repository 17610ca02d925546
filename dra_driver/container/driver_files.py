"""Which files of the host's NVIDIA driver a GPU container needs (pure).

A container image has no driver: the runtime must bind-mount the user-space
half of the host's driver (libcuda, libnvidia-ml, nvidia-smi, GSP firmware)
into it, or CUDA and `nvidia-smi` fail. This module decides *which* files,
the way NVIDIA's container toolkit does it (`pkg/nvcdi/driver-nvml.go` and
`internal/discover`), for the driver version NVML reports:

* libraries: every `*.so.<driverVersion>` in the directory (or directories)
  holding `libcuda.so.<driverVersion>`, and in its `vdpau/` subdirectory,
  plus the legacy `libnvidia-nvvm70.so.*`. A library of another version, or
  one not named after the driver version (libz, libssl...), is never picked;
* the symlinks next to each library that resolve to it (the soname link
  `libcuda.so.1` and the `.so` link), so the CDI writer can recreate them;
* binaries `nvidia-smi`, `nvidia-debugdump`, `nvidia-persistenced`,
  `nvidia-cuda-mps-control`, `nvidia-cuda-mps-server`, `nvidia-imex`,
  `nvidia-imex-ctl`: the first executable of each name on the search path;
* GSP firmware `nvidia/<driverVersion>/gsp*.bin` under the firmware search
  paths, in the kernel's order;
* the IPC sockets that exist (persistenced, fabricmanager) and the MPS pipe
  directory.

Pure: the filesystem comes in through the narrow `FsView` protocol whose
paths are absolute paths *inside the driver root* (`/usr/lib64/...`), so the
same code serves a host driver (`/`), the GPU Operator's root mounted
anywhere in the plugin's container, and the tests' fake roots. The I/O
implementation and the cache live in `dra_driver.container.driver_root`; turning the
result into CDI edits is `dra_driver.container.cdi.driver_edits`.

Written here because no Python library does nvcdi's discovery.
"""

from __future__ import annotations

import fnmatch
import posixpath
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Final, Literal, Protocol

from dra_driver.errors import DriverRootError

FileKind = Literal["file", "dir", "socket", "other"]

LIBRARY_SEARCH_DIRS: Final = (
    "/usr/lib/x86_64-linux-gnu",
    "/lib/x86_64-linux-gnu",
    "/usr/lib/aarch64-linux-gnu",
    "/lib/aarch64-linux-gnu",
    "/usr/lib64",
    "/lib64",
    "/usr/lib",
    "/lib",
    "/usr/local/nvidia/lib64",
)
"""Standard library directories, searched after those the root's ld.so.conf lists."""

BINARY_SEARCH_DIRS: Final = (
    "/usr/local/sbin",
    "/usr/local/bin",
    "/usr/sbin",
    "/usr/bin",
    "/sbin",
    "/bin",
    "/usr/local/nvidia/bin",
)

DRIVER_BINARIES: Final = (
    "nvidia-smi",
    "nvidia-debugdump",
    "nvidia-persistenced",
    "nvidia-cuda-mps-control",
    "nvidia-cuda-mps-server",
    "nvidia-imex",
    "nvidia-imex-ctl",
)
"""nvcdi's driver binaries, in its order."""

LEGACY_NVVM: Final = "libnvidia-nvvm70.so.*"
NVML_SONAME: Final = "libnvidia-ml.so.1"
LIBCUDA_SONAME: Final = "libcuda.so.1"

IPC_PATHS: Final = (
    ("/run/nvidia-persistenced/socket", "/var/run/nvidia-persistenced/socket"),
    ("/run/nvidia-fabricmanager/socket", "/var/run/nvidia-fabricmanager/socket"),
)
MPS_PIPE_DIR: Final = "/tmp/nvidia-mps"


def firmware_search_paths(kernel_release: str, custom_path: str = "") -> tuple[str, ...]:
    """The kernel's firmware search order (nvcdi's `getFirmwareSearchPaths`)."""
    paths = [custom_path] if custom_path else []
    paths += [
        posixpath.join("/lib/firmware/updates", kernel_release),
        "/lib/firmware/updates",
        posixpath.join("/lib/firmware", kernel_release),
        "/lib/firmware",
    ]
    return tuple(paths)


class FsView(Protocol):
    """A read-only view of a driver root; every path is absolute inside the root."""

    def list_dir(self, path: str) -> Sequence[str]:
        """Entry names of directory `path` (sorted); empty if it is no directory."""
        ...

    def kind(self, path: str) -> FileKind | None:
        """What `path` is after following symlinks; None if it does not exist."""
        ...

    def resolve(self, path: str) -> str | None:
        """`path` with every symlink followed, within the root; None if dangling."""
        ...

    def read_link(self, path: str) -> str | None:
        """The target of symlink `path` as written; None if `path` is no symlink."""
        ...

    def is_executable(self, path: str) -> bool:
        """Whether `path` is a regular file with an execute bit."""
        ...

    def read_text(self, path: str) -> str | None:
        """The text of file `path`, or None if it cannot be read."""
        ...


@dataclass(frozen=True)
class DriverLibrary:
    """One versioned driver library and the symlinks next to it that reach it.

    `links` are `(name, target)` pairs in the library's directory, e.g.
    `("libcuda.so.1", "libcuda.so.570.172.08")` and
    `("libcuda.so", "libcuda.so.1")`: the names a container must also find.
    """

    path: str
    links: tuple[tuple[str, str], ...] = ()

    @property
    def directory(self) -> str:
        return posixpath.dirname(self.path)

    @property
    def name(self) -> str:
        return posixpath.basename(self.path)


@dataclass(frozen=True)
class DriverFiles:
    """Everything a container gets from the driver root, as paths inside the root."""

    version: str
    library_dirs: tuple[str, ...]  # the directories holding libcuda.so.<version>
    libraries: tuple[DriverLibrary, ...]
    binaries: tuple[str, ...]
    firmware: tuple[str, ...]
    ipc: tuple[str, ...]
    # (path, the file it resolves to inside the root) where a symlink lies between:
    # the runtime opens hostPaths on the host, where an absolute link in a root
    # mounted elsewhere would point outside it, so mounts name the file itself.
    sources: tuple[tuple[str, str], ...] = ()
    warnings: tuple[str, ...] = field(default=(), compare=False)

    def source(self, path: str) -> str:
        """The file inside the root that `path` resolves to (itself when no link)."""
        return dict(self.sources).get(path, path)

    def binary(self, name: str) -> str | None:
        """The path of driver binary `name` (e.g. "nvidia-smi"), or None if absent."""
        return next((b for b in self.binaries if posixpath.basename(b) == name), None)

    def library(self, name: str) -> DriverLibrary | None:
        """The library whose file or one of whose links is called `name`."""
        for lib in self.libraries:
            if lib.name == name or any(link == name for link, _ in lib.links):
                return lib
        return None


def library_search_dirs(fs: FsView) -> tuple[str, ...]:
    """Directories the root's dynamic loader searches: its ld.so.conf, then the standard ones."""
    dirs: list[str] = []
    for conf in _ld_so_conf_files(fs):
        text = fs.read_text(conf) or ""
        for raw in text.splitlines():
            line = raw.split("#", 1)[0].strip()
            if line.startswith("/") and not line.startswith("include"):
                dirs.append(posixpath.normpath(line))
    dirs += LIBRARY_SEARCH_DIRS
    return tuple(dict.fromkeys(dirs))


def find_library(fs: FsView, name: str) -> str | None:
    """The resolved path of library `name` (e.g. libnvidia-ml.so.1) in the root, or None."""
    for directory in library_search_dirs(fs):
        path = posixpath.join(directory, name)
        if fs.kind(path) == "file":
            return fs.resolve(path)
    return None


def discover_driver_files(
    fs: FsView, version: str, *, firmware_paths: Sequence[str] = ()
) -> DriverFiles:
    """The driver files of `version` in the root `fs` shows.

    Raises `DriverRootError` when no `libcuda.so.<version>` exists: the root
    holds no driver, or one of another version than the loaded kernel module.
    Missing binaries, firmware and sockets are only reported in `warnings`
    (a compute container works without nvidia-persistenced).
    """
    if not version or "*" in version or "/" in version:
        raise DriverRootError(f"driver version {version!r} from NVML is not a version")
    suffix = f".so.{version}"
    search = library_search_dirs(fs)
    lib_dirs: list[str] = []
    for directory in search:
        real_dir = fs.resolve(directory)
        if real_dir is None or real_dir in lib_dirs:
            continue
        if fs.kind(posixpath.join(real_dir, f"libcuda{suffix}")) == "file":
            lib_dirs.append(real_dir)
    if not lib_dirs:
        raise DriverRootError(
            f"no libcuda{suffix} in any library directory of the driver root "
            f"({', '.join(search)}): no NVIDIA driver {version} is installed there "
            "(wrong --nvidia-driver-root, or the user-space libraries do not match the "
            "loaded kernel module)"
        )

    libraries: list[DriverLibrary] = []
    for directory in lib_dirs:
        for folder in (directory, posixpath.join(directory, "vdpau")):
            libraries += _versioned_libraries(fs, folder, suffix)
        libraries += _versioned_libraries(fs, directory, None, pattern=LEGACY_NVVM)

    warnings: list[str] = []
    binaries: list[str] = []
    for name in DRIVER_BINARIES:
        found = next(
            (path for d in BINARY_SEARCH_DIRS if fs.is_executable(path := posixpath.join(d, name))),
            None,
        )
        if found is None:
            if name in ("nvidia-smi", "nvidia-cuda-mps-control"):
                warnings.append(f"driver binary {name} not found in {':'.join(BINARY_SEARCH_DIRS)}")
            continue
        binaries.append(found)

    firmware: list[str] = []
    seen_firmware: set[str] = set()
    for base in firmware_paths:
        folder = posixpath.join(base, "nvidia", version)
        for name in fs.list_dir(folder):
            path = posixpath.join(folder, name)
            real = fs.resolve(path) or path
            if fnmatch.fnmatchcase(name, "gsp*.bin") and fs.kind(path) == "file":
                if real in seen_firmware:  # updates/ may link to the same file
                    continue
                seen_firmware.add(real)
                firmware.append(path)

    ipc: list[str] = []
    for candidates in IPC_PATHS:
        for path in candidates:
            if fs.kind(path) == "socket":
                ipc.append(path)
                break  # /var/run is usually /run: one mount is enough
    if fs.kind(MPS_PIPE_DIR) == "dir":
        ipc.append(MPS_PIPE_DIR)

    sources = []
    for found_path in (*binaries, *firmware, *ipc):
        resolved = fs.resolve(found_path)
        if resolved is not None and resolved != found_path:
            sources.append((found_path, resolved))
    return DriverFiles(
        version=version,
        library_dirs=tuple(lib_dirs),
        libraries=tuple(libraries),
        binaries=tuple(binaries),
        firmware=tuple(firmware),
        ipc=tuple(ipc),
        sources=tuple(sources),
        warnings=tuple(warnings),
    )


def _versioned_libraries(
    fs: FsView, folder: str, suffix: str | None, *, pattern: str = ""
) -> list[DriverLibrary]:
    """Regular files of `folder` ending in `suffix` (or matching `pattern`), with their links."""
    names = fs.list_dir(folder)
    found = []
    for name in names:
        path = posixpath.join(folder, name)
        matches = name.endswith(suffix) if suffix else fnmatch.fnmatchcase(name, pattern)
        if not matches or fs.read_link(path) is not None or fs.kind(path) != "file":
            continue
        if not name.startswith("lib"):
            continue
        found.append(DriverLibrary(path=path, links=tuple(_links_to(fs, folder, names, path))))
    return found


def _links_to(fs: FsView, folder: str, names: Iterable[str], target: str) -> list[tuple[str, str]]:
    """`(name, what it points at)` for each symlink of `folder` that ends at `target`."""
    links = []
    for name in names:
        path = posixpath.join(folder, name)
        written = fs.read_link(path)
        if written is not None and path != target and fs.resolve(path) == target:
            links.append((name, posixpath.basename(written)))
    return links


def _ld_so_conf_files(fs: FsView) -> list[str]:
    files = ["/etc/ld.so.conf"]
    text = fs.read_text("/etc/ld.so.conf") or ""
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip()
        if line.startswith("include"):
            pattern = line[len("include") :].strip()
            if not pattern.startswith("/"):
                pattern = posixpath.join("/etc", pattern)
            folder, glob = posixpath.split(pattern)
            files += [
                posixpath.join(folder, n) for n in fs.list_dir(folder) if fnmatch.fnmatch(n, glob)
            ]
    return files
