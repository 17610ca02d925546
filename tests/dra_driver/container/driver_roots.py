"""Fake driver roots for the tests: the three layouts users run, with traps.

Each root is the simulator's fake driver root (production code) plus what a
real node accumulates: the libraries of an older driver left behind by an
upgrade, and unrelated libraries in the same folder.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from dra_driver.hardware.simulated.driver_root import LIBRARY_DIRS, Layout, materialize_driver_root

VERSION = "570.172.08"
STALE = "550.54.15"


@dataclass(frozen=True)
class RootCase:
    name: str
    layout: Layout
    host_root: str  # --nvidia-driver-root
    container_root: Path  # where this process sees it
    lib_dir: str
    version: str
    stale: str


def build_root(tmp: Path, case: str, version: str = VERSION) -> RootCase:
    """`ubuntu` (host driver at /), `rhel` (host driver at /), or `gpu-operator`
    (Ubuntu-based driver container at /run/nvidia/driver, mounted at <tmp>/driver-root)."""
    layout: Layout = "rhel" if case == "rhel" else "debian"
    root = tmp / ("driver-root" if case == "gpu-operator" else f"{case}-root")
    stale = STALE if version != STALE else "535.183.01"
    materialize_driver_root(root, version, layout)
    lib_dir = LIBRARY_DIRS[layout]
    libs = root / lib_dir.lstrip("/")
    # An older driver's files, as an upgrade leaves them.
    (libs / f"libcuda.so.{stale}").write_bytes(b"")
    (libs / f"libnvidia-ml.so.{stale}").write_bytes(b"")
    (libs / "vdpau" / f"libvdpau_nvidia.so.{stale}").write_bytes(b"")
    fw = root / "lib/firmware/nvidia" / stale
    fw.mkdir(parents=True)
    (fw / "gsp_ga10x.bin").write_bytes(b"")
    # Unrelated libraries, one of them with a driver-like link next to it.
    (libs / "libz.so.1.3").write_bytes(b"")
    os.symlink("libz.so.1.3", libs / "libz.so.1")
    (libs / "libssl.so.3").write_bytes(b"")
    host = "/run/nvidia/driver" if case == "gpu-operator" else "/"
    return RootCase(case, layout, host, root, lib_dir, version, stale)
