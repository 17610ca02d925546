"""Which files of the host's NVIDIA driver a GPU container needs (pure).

A container image has no driver: the runtime must bind-mount the user-space
half of the host's driver (libcuda, libnvidia-ml, nvidia-smi, GSP firmware,
the OpenCL/Vulkan/EGL config files) into it, or CUDA, `nvidia-smi`, OpenCL,
Vulkan and EGL fail. This module decides *which* files, with the rules of
NVIDIA's container toolkit (`pkg/nvcdi` mode `nvml`, `internal/discover`,
`internal/lookup/root`), for the driver version NVML reports:

* library folders: those holding a `lib*.so.<version>`, searched in nvcdi's
  standard 64-bit library directories (`LIBRARY_SEARCH_DIRS`); only where none
  has one, the folders the root's ld.so.conf lists (nvcdi reads the ldcache
  there, keeping its 64-bit entries: 32-bit ELF files are skipped). `/usr/lib`
  and `/lib` are never searched: on RHEL they hold the 32-bit libraries;
* driver libraries: every `*.so.<version>` in those folders and their `vdpau/`,
  and the legacy `libnvidia-nvvm70.so.*`, each with the links nvcdi's
  `create-symlinks` hook recreates: `SONAME -> file` and `.so -> SONAME` where
  that link exists next to the file on the host (the SONAME is read from the
  library's ELF `DT_SONAME`), `libcuda.so -> libcuda.so.1`,
  `libGLX_indirect.so.0 -> libGLX_nvidia.so.<version>` and
  `libnvidia-opticalflow.so -> libnvidia-opticalflow.so.1`;
* graphics libraries not named after the driver version
  (`libnvidia-egl-gbm.so.1.1.x`, `libnvidia-egl-wayland.so.1.1.x`, ...) and
  the X.Org modules (`nvidia_drv.so`, `libglxserver_nvidia.so.<version>`),
  with the `gbm/nvidia-drm_gbm.so`, `libnvidia-vulkan-producer.so` and
  `libglxserver_nvidia.so` links;
* config files, mounted at the standard paths whatever their host path: the
  EGL vendor and external-platform JSON, OptiX's `nvoptix.bin` and the X.Org
  configs under `/usr/share`, the OpenCL ICD and the Vulkan ICD and layer
  JSON under `/etc`;
* binaries `nvidia-smi`, `nvidia-debugdump`, `nvidia-persistenced`,
  `nvidia-cuda-mps-control`, `nvidia-cuda-mps-server`, `nvidia-imex`,
  `nvidia-imex-ctl`, `nvidia-xconfig`: the first executable of each name;
* GSP firmware `nvidia/<version>/gsp*.bin` in the kernel's firmware paths;
* the IPC sockets that exist (persistenced, fabricmanager). nvcdi's locator
  for `/tmp/nvidia-mps` accepts files only, so the host's MPS pipe directory is
  never mounted: a claim reaches an MPS daemon only through its own sharing
  config (`dra_driver.claims.mps`).

Pure: the filesystem comes in through the narrow `FsView` protocol whose
paths are absolute paths *inside the driver root* (`/usr/lib64/...`), so the
same code serves a host driver (`/`), the GPU Operator's root mounted
anywhere in the plugin's container, and the tests' fake roots. The I/O
implementation and the cache live in `dra_driver.container.driver_root`;
turning the result into CDI edits is `dra_driver.container.cdi.driver_edits`.
ELF headers are read with pyelftools.

Written here because no Python library does nvcdi's discovery.
"""

from __future__ import annotations

import fnmatch
import posixpath
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import BinaryIO, Final, Literal, Protocol

from dra_driver.errors import DriverRootError

FileKind = Literal["file", "dir", "socket", "other"]

LIBRARY_SEARCH_DIRS: Final = (
    "/",
    "/usr/lib64",
    "/usr/lib/x86_64-linux-gnu",
    "/usr/lib/aarch64-linux-gnu",
    "/usr/lib/x86_64-linux-gnu/nvidia/current",
    "/usr/lib/aarch64-linux-gnu/nvidia/current",
    "/lib64",
    "/lib/x86_64-linux-gnu",
    "/lib/aarch64-linux-gnu",
    "/lib/x86_64-linux-gnu/nvidia/current",
    "/lib/aarch64-linux-gnu/nvidia/current",
)
"""nvcdi's library directories (`pkg/lookup/library.go`), in its order."""

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
    "nvidia-xconfig",
)
"""nvcdi's driver binaries, in its order, then its graphics binary."""

LEGACY_NVVM: Final = "libnvidia-nvvm70.so.*"
NVML_SONAME: Final = "libnvidia-ml.so.1"
LIBCUDA_SONAME: Final = "libcuda.so.1"

GRAPHICS_LIBRARIES: Final = (
    "libnvidia-egl-gbm.so.*.*",
    "libnvidia-egl-wayland.so.*.*",
    "libnvidia-egl-wayland2.so.*.*",
    "libnvidia-egl-xcb.so.*.*",
    "libnvidia-egl-xlib.so.*.*",
)
"""Graphics libraries without the driver version in their name (nvcdi's graphics table)."""

XORG_MODULE_DIRS: Final = ("drivers", "extensions", "updates/drivers", "updates/extensions")
XORG_ROOTS: Final = ("/usr/lib/xorg", "/usr/lib64/xorg", "/usr/X11R6/lib", "/usr/X11R6/lib64")

SHARE_CONFIGS: Final = (
    "glvnd/egl_vendor.d/10_nvidia.json",
    "egl/egl_external_platform.d/15_nvidia_gbm.json",
    "egl/egl_external_platform.d/10_nvidia_wayland.json",
    "egl/egl_external_platform.d/09_nvidia_wayland2.json",
    "egl/egl_external_platform.d/20_nvidia_xcb.json",
    "egl/egl_external_platform.d/20_nvidia_xlib.json",
    "nvidia/nvoptix.bin",
    "X11/xorg.conf.d/10-nvidia.conf",
    "X11/xorg.conf.d/nvidia-drm-outputclass.conf",
)
"""Config files mounted under /usr/share in the container."""
ETC_CONFIGS: Final = ("OpenCL/vendors/nvidia.icd",)
"""Config files mounted under /etc in the container."""
VULKAN_CONFIGS: Final = (
    "vulkan/icd.d/nvidia_icd.json",
    "vulkan/icd.d/nvidia_layers.json",
    "vulkan/implicit_layer.d/nvidia_layers.json",
)
"""Vulkan files mounted under /etc; also looked for at the root itself (GKE's layout)."""
CONFIG_SEARCH_DIRS: Final = ("/etc", "/usr/local/share", "/usr/share")

IPC_PATHS: Final = (
    ("/run/nvidia-persistenced/socket", "/var/run/nvidia-persistenced/socket"),
    ("/run/nvidia-fabricmanager/socket", "/var/run/nvidia-fabricmanager/socket"),
)

_ELF_CLASS_32: Final = 32


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

    def open_binary(self, path: str) -> BinaryIO | None:
        """File `path` opened for reading bytes (the caller closes it), or None."""
        ...


@dataclass(frozen=True)
class ElfInfo:
    """What the loader cares about in a shared library's ELF header."""

    elf_class: int  # 32 or 64
    soname: str | None  # DT_SONAME; None when the library has none


def read_elf(fs: FsView, path: str) -> ElfInfo | None:
    """The ELF class and SONAME of `path`; None when it is no readable ELF file."""
    # pyelftools is imported here, on the first library read: importing it costs every
    # command that only needs this module's names (simulate, explain) 25 ms.
    from elftools.common.exceptions import ELFError
    from elftools.elf.dynamic import DynamicSection
    from elftools.elf.elffile import ELFFile

    stream = fs.open_binary(path)
    if stream is None:
        return None
    with stream:
        try:
            elf = ELFFile(stream)
            sonames = [
                str(tag.soname)  # type: ignore[attr-defined]  # set per tag by pyelftools
                for section in elf.iter_sections()
                if isinstance(section, DynamicSection)
                for tag in section.iter_tags("DT_SONAME")
            ]
            return ElfInfo(elf_class=int(elf.elfclass), soname=sonames[0] if sonames else None)
        except (ELFError, OSError, ValueError, KeyError, IndexError, UnicodeDecodeError):
            return None


class ElfMemo:
    """`read_elf` once per file for one discovery.

    nvcdi's locators look at a library up to three times (the version glob, the
    folders-and-vdpau glob, the links), and parsing an ELF file with pyelftools is the
    slowest step of a plugin start (90 parses of 30 files took 0.2 s).
    """

    def __init__(self, fs: FsView) -> None:
        self._fs = fs
        self._seen: dict[str, ElfInfo | None] = {}

    def __call__(self, path: str) -> ElfInfo | None:
        if path not in self._seen:
            self._seen[path] = read_elf(self._fs, path)
        return self._seen[path]


@dataclass(frozen=True)
class DriverLibrary:
    """One driver library and the links a container must also find.

    `links` are `(name, target)` pairs in the library's directory, e.g.
    `("libcuda.so.1", "libcuda.so.570.172.08")` and `("libcuda.so",
    "libcuda.so.1")`: nvcdi's `create-symlinks` arguments for it.
    """

    path: str
    links: tuple[tuple[str, str], ...] = ()
    soname: str | None = None

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
    library_dirs: tuple[str, ...]  # the folders holding lib*.so.<version>
    libraries: tuple[DriverLibrary, ...]  # the driver libraries (ldcache folders come from them)
    binaries: tuple[str, ...]
    firmware: tuple[str, ...]
    ipc: tuple[str, ...]
    # Graphics libraries and X.Org modules, mounted at their paths (no ldcache folder).
    graphics: tuple[DriverLibrary, ...] = ()
    # (link path, target as written) the graphics libraries need, e.g.
    # ("/usr/lib64/gbm/nvidia-drm_gbm.so", "../libnvidia-allocator.so.1").
    graphics_links: tuple[tuple[str, str], ...] = ()
    # (path inside the root, path in the container) of each config file.
    configs: tuple[tuple[str, str], ...] = ()
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
        for lib in (*self.libraries, *self.graphics):
            if lib.name == name or any(link == name for link, _ in lib.links):
                return lib
        return None


def library_search_dirs(fs: FsView) -> tuple[str, ...]:
    """nvcdi's standard library directories, then those the root's ld.so.conf lists."""
    return tuple(dict.fromkeys((*LIBRARY_SEARCH_DIRS, *ld_so_conf_dirs(fs))))


def ld_so_conf_dirs(fs: FsView) -> tuple[str, ...]:
    """The folders the root's /etc/ld.so.conf (and its includes) list."""
    dirs: list[str] = []
    for conf in _ld_so_conf_files(fs):
        text = fs.read_text(conf) or ""
        for raw in text.splitlines():
            line = raw.split("#", 1)[0].strip()
            if line.startswith("/") and not line.startswith("include"):
                dirs.append(posixpath.normpath(line))
    return tuple(dict.fromkeys(dirs))


def find_library(fs: FsView, name: str) -> str | None:
    """The resolved path of 64-bit library `name` (e.g. libnvidia-ml.so.1), or None."""
    found = _locate_libraries(fs, name, ElfMemo(fs))
    return found[0] if found else None


def _locate_libraries(fs: FsView, pattern: str, elf_of: ElfMemo) -> list[str]:
    """nvcdi's library locator: `pattern` in the standard directories, else ld.so.conf's.

    Results are the files matches resolve to, each once, 32-bit ELF files left out.
    """
    for dirs in (LIBRARY_SEARCH_DIRS, ld_so_conf_dirs(fs)):
        found = _glob_files(fs, dirs, pattern, elf_of)
        if found:
            return found
    return []


def _glob_files(fs: FsView, dirs: Iterable[str], pattern: str, elf_of: ElfMemo) -> list[str]:
    found: list[str] = []
    for directory in dirs:
        for name in fs.list_dir(directory):
            if not fnmatch.fnmatchcase(name, pattern):
                continue
            path = posixpath.join(directory, name)
            real = fs.resolve(path)
            if real is None or real in found or fs.kind(real) != "file":
                continue
            elf = elf_of(real)
            if elf is not None and elf.elf_class == _ELF_CLASS_32:
                continue  # a 32-bit library: the ldcache's libs32, never mounted
            found.append(real)
    return found


def discover_driver_files(
    fs: FsView,
    version: str,
    *,
    firmware_paths: Sequence[str] = (),
    machine: str = "x86_64",
) -> DriverFiles:
    """The driver files of `version` in the root `fs` shows.

    Raises `DriverRootError` when no `libcuda.so.<version>` exists: the root
    holds no driver, or one of another version than the loaded kernel module.
    Missing binaries, firmware and sockets are only reported in `warnings`
    (a compute container works without nvidia-persistenced). `machine`
    (`uname -m`) picks the arch-named Vulkan ICD.
    """
    if not version or "*" in version or "/" in version:
        raise DriverRootError(f"driver version {version!r} from NVML is not a version")
    suffix = f".so.{version}"
    elf_of = ElfMemo(fs)
    versioned = _locate_libraries(fs, f"lib*{suffix}", elf_of)
    lib_dirs = tuple(dict.fromkeys(posixpath.dirname(p) for p in versioned))
    if not any(posixpath.basename(p) == f"libcuda{suffix}" for p in versioned):
        searched = (*LIBRARY_SEARCH_DIRS, *ld_so_conf_dirs(fs))
        raise DriverRootError(
            f"no libcuda{suffix} in any library directory of the driver root "
            f"({', '.join(searched)}): no NVIDIA driver {version} is installed there "
            "(wrong --nvidia-driver-root, or the user-space libraries do not match the "
            "loaded kernel module)"
        )

    # nvcdi's DriverLibraryLocator("vdpau"): the folders, then their vdpau/ subfolders.
    folders = (*lib_dirs, *(posixpath.join(d, "vdpau") for d in lib_dirs))
    paths = _glob_files(fs, folders, f"*{suffix}", elf_of)
    paths += [p for p in _glob_files(fs, lib_dirs, LEGACY_NVVM, elf_of) if p not in paths]
    libraries = tuple(_with_links(fs, path, elf_of) for path in paths)

    graphics, graphics_links = _graphics_libraries(fs, version, lib_dirs, elf_of)
    configs = _configs(fs, machine)

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

    sources = []
    others = (*binaries, *firmware, *ipc, *(lib.path for lib in graphics))
    for found_path in (*others, *(src for src, _ in configs)):
        resolved = fs.resolve(found_path)
        if resolved is not None and resolved != found_path:
            sources.append((found_path, resolved))
    return DriverFiles(
        version=version,
        library_dirs=lib_dirs,
        libraries=libraries,
        binaries=tuple(binaries),
        firmware=tuple(firmware),
        ipc=tuple(ipc),
        graphics=graphics,
        graphics_links=graphics_links,
        configs=configs,
        sources=tuple(dict.fromkeys(sources)),
        warnings=tuple(warnings),
    )


def so_link_name(name: str) -> str:
    """The `.so` link name of a library or soname: `libcuda.so.1` -> `libcuda.so`.

    "" when the name has no `.so` part (nvcdi's `getSoLink`).
    """
    stem = name
    while True:
        stem_part, ext = posixpath.splitext(stem)
        if not ext:
            return ""
        if ext == ".so":
            return stem
        stem = stem_part


def _with_links(fs: FsView, path: str, elf_of: ElfMemo) -> DriverLibrary:
    """A driver library with nvcdi's links for it (`WithDriverDotSoSymlinks`)."""
    folder, name = posixpath.split(path)
    links: list[tuple[str, str]] = []
    if fnmatch.fnmatchcase(name, "libcuda.so.*.*"):
        # Many applications dlopen("libcuda.so") though only the soname exists.
        links.append(("libcuda.so", LIBCUDA_SONAME))
    elif fnmatch.fnmatchcase(name, "libGLX_nvidia.so.*.*"):
        links.append(("libGLX_indirect.so.0", name))  # GLVND's indirect GLX
    elif fnmatch.fnmatchcase(name, "libnvidia-opticalflow.so.*.*"):
        links.append(("libnvidia-opticalflow.so", "libnvidia-opticalflow.so.1"))
    elf = elf_of(path)
    soname = elf.soname if elf is not None else None
    if fnmatch.fnmatchcase(name, "*.*.*"):
        if elf is None:
            # No readable ELF header: the links next to the file that reach it.
            links += _links_to(fs, folder, path)
        else:
            target = soname or name
            if target != name and _is_link(fs, posixpath.join(folder, target)):
                links.append((target, name))
            dot_so = so_link_name(target)
            if dot_so and dot_so != target and _is_link(fs, posixpath.join(folder, dot_so)):
                links.append((dot_so, target))
    return DriverLibrary(path=path, links=tuple(dict.fromkeys(links)), soname=soname)


def _graphics_libraries(
    fs: FsView, version: str, lib_dirs: Sequence[str], elf_of: ElfMemo
) -> tuple[tuple[DriverLibrary, ...], tuple[tuple[str, str], ...]]:
    """nvcdi's graphics libraries and X.Org modules, and the links they need."""
    allocator = f"libnvidia-allocator.so.{version}"
    producer = f"libnvidia-vulkan-producer.so.{version}"
    glxserver = f"libglxserver_nvidia.so.{version}"
    found: list[str] = []
    for pattern in (*GRAPHICS_LIBRARIES, allocator, producer):
        found += [p for p in _locate_libraries(fs, pattern, elf_of) if p not in found]
    xorg_dirs: list[str] = []
    for lib_dir in lib_dirs or ("",):
        specific = [posixpath.join(lib_dir, "nvidia/xorg")] if lib_dir else []
        specific += [posixpath.join(lib_dir, "xorg/modules", sub) for sub in XORG_MODULE_DIRS]
        fixed = [posixpath.join(r, "modules", sub) for r in XORG_ROOTS for sub in XORG_MODULE_DIRS]
        xorg_dirs += [d for d in (*(specific if lib_dir else ()), *fixed) if d not in xorg_dirs]
    for module in ("nvidia_drv.so", glxserver):
        path = next(
            (p for d in xorg_dirs if fs.kind(p := posixpath.join(d, module)) == "file"), None
        )
        if path is not None and path not in found:
            found.append(path)
    links: list[tuple[str, str]] = []
    mounted: list[DriverLibrary] = []
    for path in found:
        folder, name = posixpath.split(path)
        if name == allocator:
            gbm = posixpath.join(folder, "gbm", "nvidia-drm_gbm.so")
            links.append((gbm, "../libnvidia-allocator.so.1"))
            continue  # mounted as a driver library already
        if name == producer:
            links.append((posixpath.join(folder, "libnvidia-vulkan-producer.so"), name))
        elif name == glxserver:
            links.append((posixpath.join(folder, "libglxserver_nvidia.so"), name))
        elf = elf_of(path)
        mounted.append(DriverLibrary(path=path, soname=elf.soname if elf is not None else None))
    return tuple(mounted), tuple(dict.fromkeys(links))


def _configs(fs: FsView, machine: str) -> tuple[tuple[str, str], ...]:
    """(path in the root, container path) of the config files nvcdi mounts."""
    vulkan = list(VULKAN_CONFIGS)
    if machine in ("x86_64", "amd64"):
        vulkan.append("vulkan/icd.d/nvidia_icd.x86_64.json")
    elif machine in ("aarch64", "arm64"):
        vulkan.append("vulkan/icd.d/nvidia_icd.aarch64.json")
    groups: list[tuple[Sequence[str], tuple[str, ...], str]] = [
        (SHARE_CONFIGS, CONFIG_SEARCH_DIRS, "/usr/share"),
        (ETC_CONFIGS, CONFIG_SEARCH_DIRS, "/etc"),
        (vulkan, (*CONFIG_SEARCH_DIRS, "/"), "/etc"),
    ]
    out: list[tuple[str, str]] = []
    seen: set[str] = set()
    for targets, search, container_root in groups:
        for target in targets:
            path = next(
                (p for d in search if fs.kind(p := posixpath.join(d, target)) == "file"), None
            )
            if path is None or path in seen:
                continue
            seen.add(path)
            out.append((path, posixpath.join(container_root, target)))
    return tuple(out)


def _is_link(fs: FsView, path: str) -> bool:
    return fs.read_link(path) is not None


def _links_to(fs: FsView, folder: str, target: str) -> list[tuple[str, str]]:
    """`(name, what it points at)` for each symlink of `folder` that ends at `target`."""
    links = []
    for name in fs.list_dir(folder):
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
