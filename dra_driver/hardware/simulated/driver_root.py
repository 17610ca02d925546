"""A fake NVIDIA driver root for simulated nodes.

A simulated node must hand claims the same CDI mounts a real node does, so
the plugin in simulation runs the production discovery
(`dra_driver.container.driver_files`) over a directory laid out like a real driver
install: the versioned libraries of the shape's driver version with their
soname and `.so` links, `vdpau/`, the driver binaries, and GSP firmware. The
files are empty (no binary content); binaries are executable, and
`nvidia-cuda-mps-control` runs the simulated MPS control daemon
(`dra_driver.hardware.simulated.mps_control`).

`fake_driver_files` is the one list of what the fake root holds; a binary
a simulated node runs gets a script as its content (`_RUNNABLE`).
"""

from __future__ import annotations

import contextlib
import os
import posixpath
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Literal

from dra_driver.hardware.simulated import mps_control

Layout = Literal["debian", "rhel"]

LIBRARY_DIRS: Final[dict[str, str]] = {
    "debian": "/usr/lib/x86_64-linux-gnu",
    "rhel": "/usr/lib64",
}

# (library stem, soname or None when the soname is the versioned name, has a .so link)
_LIBRARIES: Final = (
    ("libcuda", "libcuda.so.1", True),
    ("libnvidia-ml", "libnvidia-ml.so.1", True),
    ("libnvidia-ptxjitcompiler", "libnvidia-ptxjitcompiler.so.1", False),
    ("libnvidia-nvvm", "libnvidia-nvvm.so.4", False),
    ("libcudadebugger", "libcudadebugger.so.1", False),
    ("libnvidia-cfg", "libnvidia-cfg.so.1", False),
    ("libnvidia-opencl", "libnvidia-opencl.so.1", False),
    ("libnvidia-allocator", "libnvidia-allocator.so.1", False),
    ("libnvidia-gpucomp", None, False),
)
_VDPAU: Final = ("libvdpau_nvidia", "libvdpau_nvidia.so.1")
BINARIES: Final = (
    "nvidia-smi",
    "nvidia-debugdump",
    "nvidia-persistenced",
    "nvidia-cuda-mps-control",
    "nvidia-cuda-mps-server",
)
_FIRMWARE: Final = ("gsp_ga10x.bin", "gsp_tu10x.bin")
_RUNNABLE: Final = {
    "nvidia-cuda-mps-control": mps_control.launcher()
}  # what simulated binaries run


@dataclass(frozen=True)
class FakeFile:
    """One entry of the fake root: a file (with mode and content) or a symlink."""

    path: str
    mode: int = 0o644
    content: bytes = b""
    link_to: str | None = None  # a relative symlink target instead of a file


def fake_driver_files(version: str, layout: Layout = "debian") -> list[FakeFile]:
    """Every entry of a fake root of driver `version` in `layout`."""
    lib_dir = LIBRARY_DIRS[layout]
    entries: list[FakeFile] = []
    for stem, soname, dev_link in _LIBRARIES:
        versioned = f"{stem}.so.{version}"
        entries.append(FakeFile(posixpath.join(lib_dir, versioned)))
        if soname is not None:
            entries.append(FakeFile(posixpath.join(lib_dir, soname), link_to=versioned))
            if dev_link:
                entries.append(FakeFile(posixpath.join(lib_dir, f"{stem}.so"), link_to=soname))
    vdpau_dir = posixpath.join(lib_dir, "vdpau")
    stem, soname = _VDPAU
    entries.append(FakeFile(posixpath.join(vdpau_dir, f"{stem}.so.{version}")))
    entries.append(FakeFile(posixpath.join(vdpau_dir, soname), link_to=f"{stem}.so.{version}"))
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
