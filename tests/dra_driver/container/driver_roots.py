"""Fake driver roots for the tests: the layouts users run, with the traps real nodes have.

The files come from NVIDIA's own lookup tables, not from what our discovery
finds: libnvidia-container's `src/nvc_info.c` (utility, compute, video and
graphics libraries and binaries; the entries a 550 driver no longer ships
are left out) and nvcdi's graphics and IPC tables
(`internal/discover/graphics.go`, `ipc.go`). Each library is a tiny ELF
shared object carrying the SONAME the real 550 library has, with the links
the distribution's packages put next to it.

Layouts (`build_root(tmp, case)`):
* `ubuntu`: Ubuntu's packages, driver root `/`, libraries in
  `/usr/lib/x86_64-linux-gnu`, X.Org modules in its `nvidia/xorg`, 32-bit
  libraries in `/usr/lib/i386-linux-gnu`;
* `rhel`: driver root `/`, `/usr/lib64`, X.Org modules under
  `/usr/lib64/xorg/modules`, the arch-named Vulkan ICD, and the 32-bit
  libraries (with their links) in `/usr/lib`, where a wrong search finds them;
* `gpu-operator`: the Operator's driver container (the `.run` installer's
  layout: Vulkan files in `/etc/vulkan`, X.Org modules in `/usr/lib/xorg`),
  driver root `/run/nvidia/driver`, read by the plugin at `<tmp>/driver-root`;
* `host-mounted`: Ubuntu's layout at `/` on the host, read by the plugin at
  `<tmp>/host` (the host's root mounted into the plugin's container), with
  absolute symlinks that only make sense inside that root.

Traps everywhere: an older driver's files left by an upgrade, unrelated
libraries, `libnvidia-api.so.1` (an opt-in library nvcdi leaves out by
default), a host MPS pipe directory `/tmp/nvidia-mps`, and 32-bit libraries.
The persistenced socket exists; fabricmanager's does not.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path

from dra_driver.hardware.simulated.elf import shared_object

VERSION = "570.172.08"  # what the simulated shapes' NVML reports
DRIVER_550 = "550.163.01"
STALE = "535.183.01"

SELF = "="  # the SONAME is the versioned file name

# (stem, SONAME, links next to the file besides the soname link)
NVC_LIBRARIES: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    # utility_libs
    ("libnvidia-ml", "libnvidia-ml.so.1", ("libnvidia-ml.so",)),
    ("libnvidia-cfg", "libnvidia-cfg.so.1", ()),
    # compute_libs
    ("libcuda", "libcuda.so.1", ("libcuda.so",)),
    ("libcudadebugger", "libcudadebugger.so.1", ()),
    ("libnvidia-opencl", "libnvidia-opencl.so.1", ()),
    ("libnvidia-gpucomp", SELF, ()),
    ("libnvidia-ptxjitcompiler", "libnvidia-ptxjitcompiler.so.1", ()),
    ("libnvidia-allocator", "libnvidia-allocator.so.1", ()),
    ("libnvidia-pkcs11", SELF, ()),
    ("libnvidia-pkcs11-openssl3", SELF, ()),
    ("libnvidia-nvvm", "libnvidia-nvvm.so.4", ("libnvidia-nvvm.so",)),
    # video_libs (libvdpau_nvidia is in vdpau/, below)
    ("libnvidia-encode", "libnvidia-encode.so.1", ()),
    ("libnvidia-opticalflow", "libnvidia-opticalflow.so.1", ()),
    ("libnvcuvid", "libnvcuvid.so.1", ()),
    # graphics_libs
    ("libnvidia-eglcore", SELF, ()),
    ("libnvidia-glcore", SELF, ()),
    ("libnvidia-tls", SELF, ()),
    ("libnvidia-glsi", SELF, ()),
    ("libnvidia-fbc", "libnvidia-fbc.so.1", ()),
    ("libnvidia-rtcore", SELF, ()),
    ("libnvoptix", "libnvoptix.so.1", ()),
    # graphics_libs_glvnd
    ("libGLX_nvidia", "libGLX_nvidia.so.0", ()),
    ("libEGL_nvidia", "libEGL_nvidia.so.0", ()),
    ("libGLESv2_nvidia", "libGLESv2_nvidia.so.2", ()),
    ("libGLESv1_CM_nvidia", "libGLESv1_CM_nvidia.so.1", ()),
    ("libnvidia-glvkspirv", SELF, ()),
    # ngx_libs
    ("libnvidia-ngx", "libnvidia-ngx.so.1", ()),
)
VDPAU = ("libvdpau_nvidia", "libvdpau_nvidia.so.1")
# nvcdi's graphics table: libraries named after their own version.
EGL_PLATFORMS = (
    ("libnvidia-egl-gbm.so.1.1.1", "libnvidia-egl-gbm.so.1"),
    ("libnvidia-egl-wayland.so.1.1.13", "libnvidia-egl-wayland.so.1"),
)
LIB32 = ("libcuda", "libnvidia-ml", "libGLX_nvidia")
BINARIES = (  # nvc_info.c's utility_bins and compute_bins, and nvcdi's nvidia-xconfig
    "nvidia-smi",
    "nvidia-debugdump",
    "nvidia-persistenced",
    "nvidia-cuda-mps-control",
    "nvidia-cuda-mps-server",
    "nvidia-xconfig",
)
FIRMWARE = ("gsp_ga10x.bin", "gsp_tu10x.bin")


@dataclass(frozen=True)
class RootCase:
    name: str
    layout: str
    host_root: str  # --nvidia-driver-root
    container_root: Path  # where this process sees it
    lib_dir: str
    version: str
    stale: str
    xorg_drivers: str  # the folder holding nvidia_drv.so
    xorg_extensions: str  # the folder holding libglxserver_nvidia.so.<version>
    configs: tuple[tuple[str, str], ...]  # (path in the root, container path)

    @property
    def host_prefix(self) -> str:
        """What hostPaths start with ("" for a driver at /)."""
        return "" if self.host_root == "/" else self.host_root


def _write(root: Path, path: str, content: bytes = b"", mode: int = 0o644) -> None:
    target = root / path.lstrip("/")
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(content)
    target.chmod(mode)


def _link(root: Path, path: str, to: str) -> None:
    target = root / path.lstrip("/")
    target.parent.mkdir(parents=True, exist_ok=True)
    os.symlink(to, target)


def _library(
    root: Path,
    folder: str,
    file_name: str,
    soname: str,
    links: tuple[str, ...],
    *,
    bits: int = 64,
) -> None:
    _write(root, f"{folder}/{file_name}", shared_object(soname, bits=bits), 0o755)
    if soname != file_name:
        _link(root, f"{folder}/{soname}", file_name)
    for link in links:
        _link(root, f"{folder}/{link}", soname)


def _install(root: Path, lib_dir: str, version: str, *, bits: int = 64) -> None:
    for stem, soname, links in NVC_LIBRARIES:
        file_name = f"{stem}.so.{version}"
        actual = file_name if soname == SELF else soname
        _library(root, lib_dir, file_name, actual, links, bits=bits)
    stem, soname = VDPAU
    _library(root, f"{lib_dir}/vdpau", f"{stem}.so.{version}", soname, (), bits=bits)


LAYOUTS = {
    "ubuntu": {
        "lib": "/usr/lib/x86_64-linux-gnu",
        "lib32": "/usr/lib/i386-linux-gnu",
        "xorg": ("/usr/lib/x86_64-linux-gnu/nvidia/xorg", "/usr/lib/x86_64-linux-gnu/nvidia/xorg"),
        "configs": (
            "/usr/share/glvnd/egl_vendor.d/10_nvidia.json",
            "/usr/share/egl/egl_external_platform.d/15_nvidia_gbm.json",
            "/usr/share/egl/egl_external_platform.d/10_nvidia_wayland.json",
            "/usr/share/nvidia/nvoptix.bin",
            "/usr/share/X11/xorg.conf.d/10-nvidia.conf",
            "/etc/OpenCL/vendors/nvidia.icd",
            "/usr/share/vulkan/icd.d/nvidia_icd.json",
            "/usr/share/vulkan/implicit_layer.d/nvidia_layers.json",
        ),
    },
    "rhel": {
        "lib": "/usr/lib64",
        "lib32": "/usr/lib",
        "xorg": ("/usr/lib64/xorg/modules/drivers", "/usr/lib64/xorg/modules/extensions"),
        "configs": (
            "/usr/share/glvnd/egl_vendor.d/10_nvidia.json",
            "/usr/share/egl/egl_external_platform.d/15_nvidia_gbm.json",
            "/usr/share/egl/egl_external_platform.d/10_nvidia_wayland.json",
            "/usr/share/nvidia/nvoptix.bin",
            "/usr/share/X11/xorg.conf.d/nvidia-drm-outputclass.conf",
            "/etc/OpenCL/vendors/nvidia.icd",
            "/usr/share/vulkan/icd.d/nvidia_icd.x86_64.json",
            "/usr/share/vulkan/implicit_layer.d/nvidia_layers.json",
        ),
    },
    "runfile": {
        "lib": "/usr/lib/x86_64-linux-gnu",
        "lib32": "/usr/lib32",
        "xorg": ("/usr/lib/xorg/modules/drivers", "/usr/lib/xorg/modules/extensions"),
        "configs": (
            "/usr/share/glvnd/egl_vendor.d/10_nvidia.json",
            "/usr/share/egl/egl_external_platform.d/15_nvidia_gbm.json",
            "/usr/share/egl/egl_external_platform.d/10_nvidia_wayland.json",
            "/usr/share/nvidia/nvoptix.bin",
            "/usr/share/X11/xorg.conf.d/nvidia-drm-outputclass.conf",
            "/etc/OpenCL/vendors/nvidia.icd",
            "/etc/vulkan/icd.d/nvidia_icd.json",
            "/etc/vulkan/implicit_layer.d/nvidia_layers.json",
        ),
    },
}


def container_path_of(config: str) -> str:
    """nvcdi's rule: Vulkan and OpenCL files under /etc, the others under /usr/share."""
    for base in ("/etc/", "/usr/local/share/", "/usr/share/"):
        if config.startswith(base):
            relative = config[len(base) :]
            break
    else:
        raise ValueError(config)
    top = "/etc" if relative.startswith(("vulkan/", "OpenCL/")) else "/usr/share"
    return f"{top}/{relative}"


def build_root(tmp: Path, case: str, version: str = VERSION) -> RootCase:
    """`ubuntu`, `rhel`, `gpu-operator` or `host-mounted` (see the module docstring)."""
    layout = {"gpu-operator": "runfile", "host-mounted": "ubuntu"}.get(case, case)
    spec = LAYOUTS[layout]
    lib_dir, lib32 = str(spec["lib"]), str(spec["lib32"])
    drivers, extensions = spec["xorg"]
    root = tmp / {"gpu-operator": "driver-root", "host-mounted": "host"}.get(case, f"{case}-root")
    stale = STALE if version != STALE else "525.147.05"

    _install(root, lib_dir, version)
    _install(root, lib32, version, bits=32)  # the 32-bit compatibility libraries
    for file_name, soname in EGL_PLATFORMS:
        _library(root, lib_dir, file_name, soname, ())
    _link(root, f"{lib_dir}/gbm/nvidia-drm_gbm.so", "../libnvidia-allocator.so.1")
    _library(root, lib_dir, "libnvidia-api.so.1", "libnvidia-api.so.1", ())  # opt-in only
    _write(root, f"{drivers}/nvidia_drv.so", shared_object(None), 0o644)
    glxserver = f"libglxserver_nvidia.so.{version}"
    _library(root, extensions, glxserver, glxserver, ("libglxserver_nvidia.so",))
    configs = tuple(spec["configs"])
    for config in configs:
        _write(root, config, b"{}\n")
    for name in BINARIES:
        _write(root, f"/usr/bin/{name}", b"#!/bin/sh\n", 0o755)
    for name in FIRMWARE:
        _write(root, f"/lib/firmware/nvidia/{version}/{name}")

    # What an upgrade leaves behind, and what else lives in the same folders.
    for stem in ("libcuda", "libnvidia-ml", "libnvidia-glcore"):
        _write(root, f"{lib_dir}/{stem}.so.{stale}", shared_object(f"{stem}.so.1"))
    _write(root, f"{lib_dir}/vdpau/libvdpau_nvidia.so.{stale}", shared_object(None))
    _write(root, f"/lib/firmware/nvidia/{stale}/gsp_ga10x.bin")
    _write(root, f"{lib_dir}/libz.so.1.3", shared_object("libz.so.1"))
    _link(root, f"{lib_dir}/libz.so.1", "libz.so.1.3")
    _write(root, f"{lib_dir}/libssl.so.3", shared_object("libssl.so.3"))
    (root / "tmp/nvidia-mps").mkdir(parents=True)  # a host-wide MPS daemon's pipes
    (root / "run/nvidia-persistenced").mkdir(parents=True)
    os.mknod(root / "run/nvidia-persistenced/socket", stat.S_IFSOCK | 0o666)
    if case == "host-mounted":
        # Debian's alternatives: absolute links, meaningful only inside the root.
        real = "/usr/lib/x86_64-linux-gnu/nvidia/nvidia_icd.json"
        icd = "/usr/share/vulkan/icd.d/nvidia_icd.json"
        (root / icd.lstrip("/")).rename(root / real.lstrip("/"))
        _link(root, icd, "/etc/alternatives/nvidia_icd.json")
        _link(root, "/etc/alternatives/nvidia_icd.json", real)

    host = {"gpu-operator": "/run/nvidia/driver"}.get(case, "/")
    return RootCase(
        name=case,
        layout=layout,
        host_root=host,
        container_root=root,
        lib_dir=lib_dir,
        version=version,
        stale=stale,
        xorg_drivers=drivers,
        xorg_extensions=extensions,
        configs=tuple((c, container_path_of(c)) for c in configs),
    )
