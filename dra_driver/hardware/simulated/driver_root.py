"""A fake NVIDIA driver root for simulated nodes.

A simulated node must hand claims the same CDI mounts a real node does, so
the plugin in simulation runs the production discovery
(`dra_driver.container.driver_files`) over a directory laid out like a real
driver install of the shape's driver version. Its contents follow NVIDIA's
own lookup tables: the compute, utility, video and graphics libraries of
libnvidia-container's `nvc_info.c` that a 550-series driver still ships, the
EGL platform libraries and config files of nvcdi's graphics tables, the X.Org
modules, the driver binaries and GSP firmware. Each library is a tiny ELF
shared object (`dra_driver.hardware.simulated.elf`) carrying the SONAME the
real library has, next to the soname and `.so` links the distribution's
packages install. Config files hold what the driver's own files say;
binaries are executable, `nvidia-cuda-mps-control` runs the simulated MPS
control daemon (`dra_driver.hardware.simulated.mps_control`), and
`nvidia-imex`/`nvidia-imex-ctl` (NVIDIA's IMEX package, which nvcdi mounts
where it is installed, as on GB200 nodes) run the IMEX stand-ins
(`dra_driver.hardware.simulated.imex`).

Two layouts: `debian` (Ubuntu's packages, `/usr/lib/x86_64-linux-gnu`, the
X.Org modules in its `nvidia/xorg`) and `rhel` (`/usr/lib64`, the X.Org
modules under `/usr/lib64/xorg/modules`, the arch-named Vulkan ICD, and the
32-bit compatibility libraries in `/usr/lib`, which must never be mounted).
Also present, as on real installs, and never mounted by default:
`libnvidia-api.so.1` (nvcdi's opt-in "explicit" libraries).

`fake_driver_files` is the one list of what the fake root holds.
"""

from __future__ import annotations

import contextlib
import os
import posixpath
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Literal

from dra_driver.hardware.simulated import imex, mps_control
from dra_driver.hardware.simulated.elf import shared_object

Layout = Literal["debian", "rhel"]

LIBRARY_DIRS: Final[dict[str, str]] = {
    "debian": "/usr/lib/x86_64-linux-gnu",
    "rhel": "/usr/lib64",
}
LIB32_DIRS: Final[dict[str, str | None]] = {"debian": None, "rhel": "/usr/lib"}
XORG_DIRS: Final[dict[str, tuple[str, str]]] = {  # (drivers, extensions)
    "debian": ("/usr/lib/x86_64-linux-gnu/nvidia/xorg", "/usr/lib/x86_64-linux-gnu/nvidia/xorg"),
    "rhel": ("/usr/lib64/xorg/modules/drivers", "/usr/lib64/xorg/modules/extensions"),
}

VERSIONED: Final = "="  # the SONAME is the versioned file name itself


@dataclass(frozen=True)
class LibrarySpec:
    """A driver library `<stem>.so.<version>`: its SONAME and the links next to it."""

    stem: str
    soname: str  # VERSIONED: `<stem>.so.<version>`
    dev_link: bool = False  # `<stem>.so -> soname` exists
    folder: str = ""  # a subfolder of the library directory ("vdpau")


# nvc_info.c's utility, compute, video and graphics tables, as a 550 driver ships them.
DRIVER_LIBRARIES: Final = (
    LibrarySpec("libnvidia-ml", "libnvidia-ml.so.1", dev_link=True),
    LibrarySpec("libnvidia-cfg", "libnvidia-cfg.so.1"),
    LibrarySpec("libcuda", "libcuda.so.1", dev_link=True),
    LibrarySpec("libcudadebugger", "libcudadebugger.so.1"),
    LibrarySpec("libnvidia-opencl", "libnvidia-opencl.so.1"),
    LibrarySpec("libnvidia-gpucomp", VERSIONED),
    LibrarySpec("libnvidia-ptxjitcompiler", "libnvidia-ptxjitcompiler.so.1"),
    LibrarySpec("libnvidia-allocator", "libnvidia-allocator.so.1"),
    LibrarySpec("libnvidia-pkcs11", VERSIONED),
    LibrarySpec("libnvidia-pkcs11-openssl3", VERSIONED),
    LibrarySpec("libnvidia-nvvm", "libnvidia-nvvm.so.4"),
    LibrarySpec("libvdpau_nvidia", "libvdpau_nvidia.so.1", folder="vdpau"),
    LibrarySpec("libnvidia-encode", "libnvidia-encode.so.1"),
    LibrarySpec("libnvidia-opticalflow", "libnvidia-opticalflow.so.1"),
    LibrarySpec("libnvcuvid", "libnvcuvid.so.1"),
    LibrarySpec("libnvidia-eglcore", VERSIONED),
    LibrarySpec("libnvidia-glcore", VERSIONED),
    LibrarySpec("libnvidia-tls", VERSIONED),
    LibrarySpec("libnvidia-glsi", VERSIONED),
    LibrarySpec("libnvidia-fbc", "libnvidia-fbc.so.1"),
    LibrarySpec("libnvidia-rtcore", VERSIONED),
    LibrarySpec("libnvoptix", "libnvoptix.so.1"),
    LibrarySpec("libGLX_nvidia", "libGLX_nvidia.so.0"),
    LibrarySpec("libEGL_nvidia", "libEGL_nvidia.so.0"),
    LibrarySpec("libGLESv2_nvidia", "libGLESv2_nvidia.so.2"),
    LibrarySpec("libGLESv1_CM_nvidia", "libGLESv1_CM_nvidia.so.1"),
    LibrarySpec("libnvidia-glvkspirv", VERSIONED),
    LibrarySpec("libnvidia-ngx", "libnvidia-ngx.so.1"),
)
LIB32_LIBRARIES: Final = ("libcuda", "libnvidia-ml", "libGLX_nvidia", "libnvidia-glcore")
"""Libraries of the 32-bit compatibility package (RHEL layout only)."""

# nvcdi's graphics table: EGL platform libraries named after their own version.
EGL_PLATFORM_LIBRARIES: Final = (
    ("libnvidia-egl-gbm.so.1.1.1", "libnvidia-egl-gbm.so.1"),
    ("libnvidia-egl-wayland.so.1.1.13", "libnvidia-egl-wayland.so.1"),
)
EXPLICIT_LIBRARIES: Final = (("libnvidia-api.so.1", "libnvidia-api.so.1"),)

BINARIES: Final = (
    "nvidia-smi",
    "nvidia-debugdump",
    "nvidia-persistenced",
    "nvidia-cuda-mps-control",
    "nvidia-cuda-mps-server",
    "nvidia-imex",
    "nvidia-imex-ctl",
    "nvidia-xconfig",
)
_FIRMWARE: Final = ("gsp_ga10x.bin", "gsp_tu10x.bin")
_RUNNABLE: Final = {  # what simulated binaries run
    "nvidia-cuda-mps-control": mps_control.launcher(),
    **imex.launchers(),
}

_VULKAN_ICD: Final = (
    b'{\n    "file_format_version" : "1.0.1",\n    "ICD": {\n'
    b'        "library_path": "libGLX_nvidia.so.0",\n        "api_version" : "1.3.277"\n    }\n}\n'
)
_VULKAN_LAYERS: Final = (
    b'{\n    "file_format_version" : "1.0.1",\n    "layer": {\n'
    b'        "name": "VK_LAYER_NV_optimus",\n        "type": "INSTANCE",\n'
    b'        "library_path": "libGLX_nvidia.so.0",\n        "api_version" : "1.3.277",\n'
    b'        "implementation_version" : "1",\n'
    b'        "description" : "NVIDIA Optimus layer"\n    }\n}\n'
)
_EGL_VENDOR: Final = (
    b'{\n    "file_format_version" : "1.0.0",\n    "ICD" : {\n'
    b'        "library_path" : "libEGL_nvidia.so.0"\n    }\n}\n'
)


def _egl_platform(library: str) -> bytes:
    return (
        b'{\n    "file_format_version" : "1.0.0",\n    "ICD" : {\n'
        b'        "library_path" : "' + library.encode() + b'"\n    }\n}\n'
    )


def _configs(layout: Layout) -> list[tuple[str, bytes]]:
    icd = "nvidia_icd.x86_64.json" if layout == "rhel" else "nvidia_icd.json"
    xorg = "nvidia-drm-outputclass.conf" if layout == "rhel" else "10-nvidia.conf"
    return [
        ("/etc/OpenCL/vendors/nvidia.icd", b"libnvidia-opencl.so.1\n"),
        (f"/usr/share/vulkan/icd.d/{icd}", _VULKAN_ICD),
        ("/usr/share/vulkan/implicit_layer.d/nvidia_layers.json", _VULKAN_LAYERS),
        ("/usr/share/glvnd/egl_vendor.d/10_nvidia.json", _EGL_VENDOR),
        (
            "/usr/share/egl/egl_external_platform.d/15_nvidia_gbm.json",
            _egl_platform("libnvidia-egl-gbm.so.1"),
        ),
        (
            "/usr/share/egl/egl_external_platform.d/10_nvidia_wayland.json",
            _egl_platform("libnvidia-egl-wayland.so.1"),
        ),
        ("/usr/share/nvidia/nvoptix.bin", b"NVOPTIX\0"),
        (
            f"/usr/share/X11/xorg.conf.d/{xorg}",
            b'Section "OutputClass"\n    Identifier "nvidia"\n    MatchDriver "nvidia-drm"\n'
            b'    Driver "nvidia"\nEndSection\n',
        ),
    ]


@dataclass(frozen=True)
class FakeFile:
    """One entry of the fake root: a file (with mode and content) or a symlink."""

    path: str
    mode: int = 0o644
    content: bytes = b""
    link_to: str | None = None  # a relative symlink target instead of a file


def _library(
    folder: str, file_name: str, soname: str | None, dev_link: bool, bits: int = 64
) -> list[FakeFile]:
    entries = [
        FakeFile(
            posixpath.join(folder, file_name), mode=0o755, content=shared_object(soname, bits=bits)
        )
    ]
    if soname is not None and soname != file_name:
        entries.append(FakeFile(posixpath.join(folder, soname), link_to=file_name))
    if dev_link:
        stem = file_name.split(".so", 1)[0]
        entries.append(FakeFile(posixpath.join(folder, f"{stem}.so"), link_to=soname or file_name))
    return entries


def fake_driver_files(version: str, layout: Layout = "debian") -> list[FakeFile]:
    """Every entry of a fake root of driver `version` in `layout`."""
    lib_dir = LIBRARY_DIRS[layout]
    entries: list[FakeFile] = []
    for spec in DRIVER_LIBRARIES:
        versioned = f"{spec.stem}.so.{version}"
        soname = versioned if spec.soname == VERSIONED else spec.soname
        folder = posixpath.join(lib_dir, spec.folder) if spec.folder else lib_dir
        entries += _library(folder, versioned, soname, spec.dev_link)
    lib32 = LIB32_DIRS[layout]
    if lib32 is not None:
        for spec in DRIVER_LIBRARIES:
            if spec.stem in LIB32_LIBRARIES:
                versioned = f"{spec.stem}.so.{version}"
                entries += _library(lib32, versioned, spec.soname, spec.dev_link, bits=32)
    for file_name, soname in (*EGL_PLATFORM_LIBRARIES, *EXPLICIT_LIBRARIES):
        entries += _library(lib_dir, file_name, soname, dev_link=False)
    # The allocator's GBM backend, as the driver installs it.
    entries.append(
        FakeFile(
            posixpath.join(lib_dir, "gbm", "nvidia-drm_gbm.so"),
            link_to="../libnvidia-allocator.so.1",
        )
    )
    drivers, extensions = XORG_DIRS[layout]
    entries.append(FakeFile(posixpath.join(drivers, "nvidia_drv.so"), content=shared_object(None)))
    entries += _library(
        extensions, f"libglxserver_nvidia.so.{version}", None, dev_link=layout == "debian"
    )
    entries += [FakeFile(path, content=content) for path, content in _configs(layout)]
    entries += [
        FakeFile(f"/usr/bin/{name}", mode=0o755, content=_RUNNABLE.get(name, b""))
        for name in BINARIES
    ]
    entries += [FakeFile(f"/lib/firmware/nvidia/{version}/{name}") for name in _FIRMWARE]
    return entries


def materialize_driver_root(root: Path, version: str, layout: Layout = "debian") -> Path:
    """Create (or complete) the fake driver root of `version` under `root`; returns `root`."""
    root = Path(root)
    # Several processes of one simulated node (the plugin, the MPS host) may do this at
    # once: links another made are fine, and files are replaced whole, never seen half
    # written (a truncated nvidia-cuda-mps-control script would not run).
    for entry in fake_driver_files(version, layout):
        path = root / entry.path.lstrip("/")
        path.parent.mkdir(parents=True, exist_ok=True)
        if entry.link_to is not None:
            if not path.is_symlink():
                with contextlib.suppress(FileExistsError):
                    os.symlink(entry.link_to, path)
            continue
        if not path.exists() or path.read_bytes() != entry.content:
            temp = path.with_name(f".{path.name}.{os.getpid()}")
            temp.write_bytes(entry.content)
            temp.chmod(entry.mode)
            os.replace(temp, path)
        path.chmod(entry.mode)
    return root
