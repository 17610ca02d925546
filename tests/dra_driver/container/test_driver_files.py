"""Driver file discovery and the CDI edits built from it, on the layouts users run.

Each fake root (`driver_roots`) is a whole driver install of VERSION plus an
older driver's leftovers and unrelated libraries: only VERSION's driver
files may come out, with hostPaths under the host's driver root.
"""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from dra_driver.container import cdi
from dra_driver.container.driver_files import discover_driver_files, firmware_search_paths
from dra_driver.container.driver_root import DriverBinaries, DriverRoot, DriverUserSpace, RootFs
from dra_driver.errors import DriverRootError
from tests.dra_driver.container.driver_roots import STALE, VERSION, build_root

CASES = ("ubuntu", "rhel", "gpu-operator")
FIRMWARE = firmware_search_paths("6.8.0-45-generic")
HOOK = "/usr/local/nvidia/toolkit/nvidia-cdi-hook"

DRIVER_LIBS = (
    "libcuda",
    "libcudadebugger",
    "libnvidia-allocator",
    "libnvidia-cfg",
    "libnvidia-gpucomp",
    "libnvidia-ml",
    "libnvidia-nvvm",
    "libnvidia-opencl",
    "libnvidia-ptxjitcompiler",
)


@pytest.mark.parametrize("case", CASES)
def test_finds_exactly_the_driver_files_of_the_version(tmp_path: Path, case: str) -> None:
    root = build_root(tmp_path, case)
    files = discover_driver_files(RootFs(root.container_root), VERSION, firmware_paths=FIRMWARE)

    lib_dir = root.lib_dir
    assert files.library_dirs == (lib_dir,)
    assert sorted(lib.path for lib in files.libraries) == sorted(
        [f"{lib_dir}/{name}.so.{VERSION}" for name in DRIVER_LIBS]
        + [f"{lib_dir}/vdpau/libvdpau_nvidia.so.{VERSION}"]
    )
    everything = [lib.path for lib in files.libraries] + list(files.firmware)
    assert not [p for p in everything if STALE in p]  # the old driver's files stay out
    assert not [p for p in everything if "libz" in p or "libssl" in p]  # so do others'
    cuda = files.library("libcuda.so.1")
    assert cuda is not None
    assert dict(cuda.links) == {
        "libcuda.so.1": f"libcuda.so.{VERSION}",
        "libcuda.so": "libcuda.so.1",
    }
    assert files.binaries == (
        "/usr/bin/nvidia-smi",
        "/usr/bin/nvidia-debugdump",
        "/usr/bin/nvidia-persistenced",
        "/usr/bin/nvidia-cuda-mps-control",
        "/usr/bin/nvidia-cuda-mps-server",
    )
    assert files.firmware == (
        f"/lib/firmware/nvidia/{VERSION}/gsp_ga10x.bin",
        f"/lib/firmware/nvidia/{VERSION}/gsp_tu10x.bin",
    )
    assert files.ipc == ()


def test_a_root_of_another_version_is_refused_with_the_reason(tmp_path: Path) -> None:
    root = build_root(tmp_path, "ubuntu")
    with pytest.raises(DriverRootError, match=r"no libcuda\.so\.580\.65\.06 .*kernel module"):
        discover_driver_files(RootFs(root.container_root), "580.65.06")


@pytest.fixture
def short_tmp_path() -> Iterator[Path]:
    """A temporary directory with a short path: a Unix socket path may hold 107 bytes, and
    pytest's tmp_path (longer under pytest-xdist) does not leave room for the root's."""
    path = Path(tempfile.mkdtemp(prefix="dra-gpu-root-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_sockets_that_exist_are_mounted_once_and_missing_ones_never(short_tmp_path: Path) -> None:
    root = build_root(short_tmp_path, "ubuntu").container_root
    (root / "run/nvidia-persistenced").mkdir(parents=True)
    (root / "var").mkdir()
    os.symlink("/run", root / "var/run")  # absolute: resolved inside the root
    (root / "tmp/nvidia-mps").mkdir(parents=True)
    listener = socket.socket(socket.AF_UNIX)
    try:
        listener.bind(str(root / "run/nvidia-persistenced/socket"))
        files = discover_driver_files(RootFs(root), VERSION)
    finally:
        listener.close()
    assert files.ipc == ("/run/nvidia-persistenced/socket", "/tmp/nvidia-mps")


def test_libraries_are_found_through_the_roots_ld_so_conf(tmp_path: Path) -> None:
    root = tmp_path / "root"
    libs = root / "opt/nvidia/lib"
    libs.mkdir(parents=True)
    (libs / f"libcuda.so.{VERSION}").write_bytes(b"")
    (libs / "libnvidia-nvvm70.so.4").write_bytes(b"")  # nvcdi's legacy NVVM probe
    (root / "etc/ld.so.conf.d").mkdir(parents=True)
    (root / "etc/ld.so.conf").write_text("include /etc/ld.so.conf.d/*.conf\n")
    (root / "etc/ld.so.conf.d/nvidia.conf").write_text("# driver\n/opt/nvidia/lib\n")
    files = discover_driver_files(RootFs(root), VERSION)
    assert files.library_dirs == ("/opt/nvidia/lib",)
    assert [lib.path for lib in files.libraries] == [
        f"/opt/nvidia/lib/libcuda.so.{VERSION}",
        "/opt/nvidia/lib/libnvidia-nvvm70.so.4",
    ]
    assert "driver binary nvidia-smi not found" in files.warnings[0]


def _mounts(edits: cdi.ContainerEdits) -> dict[str, str]:
    return {m.container_path: m.host_path for m in edits.mounts}


@pytest.mark.parametrize("case", CASES)
def test_edits_without_hook_path_mount_sonames_and_rewrite_host_paths(
    tmp_path: Path, case: str
) -> None:
    root = build_root(tmp_path, case)
    files = discover_driver_files(RootFs(root.container_root), VERSION, firmware_paths=FIRMWARE)
    edits = cdi.driver_edits(files, host_root=root.host_root, hook_path=None)

    lib_dir = root.lib_dir
    host = "" if root.host_root == "/" else root.host_root
    versioned = f"{host}{lib_dir}/libcuda.so.{VERSION}"
    mounts = _mounts(edits)
    assert mounts[f"{lib_dir}/libcuda.so.{VERSION}"] == versioned
    assert mounts[f"{lib_dir}/libcuda.so.1"] == versioned  # the soname resolves
    assert mounts[f"{lib_dir}/libcuda.so"] == versioned
    assert mounts[f"{lib_dir}/libnvidia-ml.so.1"] == f"{host}{lib_dir}/libnvidia-ml.so.{VERSION}"
    assert (
        mounts[f"{lib_dir}/libnvidia-nvvm.so.4"] == f"{host}{lib_dir}/libnvidia-nvvm.so.{VERSION}"
    )
    assert mounts["/usr/bin/nvidia-smi"] == f"{host}/usr/bin/nvidia-smi"
    gsp = f"/lib/firmware/nvidia/{VERSION}/gsp_ga10x.bin"
    assert mounts[gsp] == f"{host}{gsp}"
    assert all(m.options == ("ro", "nosuid", "nodev", "bind") for m in edits.mounts)
    assert not [p for p in mounts.values() if STALE in p or "libz" in p or "libssl" in p]
    # Nothing of the plugin's view of the root leaks into the spec.
    assert not [p for p in mounts.values() if str(tmp_path) in p]
    assert edits.hooks == ()
    assert edits.env == (f"NVIDIA_CTK_LIBCUDA_DIR={lib_dir}",)


def test_edits_with_hook_path_add_nvcdis_hooks_and_no_soname_mounts(tmp_path: Path) -> None:
    root = build_root(tmp_path, "gpu-operator")
    files = discover_driver_files(RootFs(root.container_root), VERSION, firmware_paths=FIRMWARE)
    edits = cdi.driver_edits(files, host_root=root.host_root, hook_path=HOOK)

    lib = root.lib_dir
    assert f"{lib}/libcuda.so.1" not in _mounts(edits)
    symlinks, ldcache = edits.hooks
    assert (symlinks.hook_name, symlinks.path) == ("createContainer", HOOK)
    assert symlinks.args[:2] == ("nvidia-cdi-hook", "create-symlinks")
    links = [symlinks.args[i + 1] for i in range(2, len(symlinks.args), 2)]
    assert symlinks.args[2::2] == ("--link",) * len(links)
    assert f"libcuda.so.1::{lib}/libcuda.so" in links
    assert f"libcuda.so.{VERSION}::{lib}/libcuda.so.1" in links
    assert f"libnvidia-ml.so.{VERSION}::{lib}/libnvidia-ml.so.1" in links
    assert f"libvdpau_nvidia.so.{VERSION}::{lib}/vdpau/libvdpau_nvidia.so.1" in links
    assert not [link for link in links if "libz" in link]
    assert ldcache.args == (
        "nvidia-cdi-hook",
        "update-ldcache",
        "--folder",
        lib,
        "--folder",
        f"{lib}/vdpau",
    )
    assert symlinks.env == ldcache.env == ("NVIDIA_CTK_DEBUG=false",)


def test_symlinked_files_are_mounted_from_the_file_inside_the_root(tmp_path: Path) -> None:
    root = build_root(tmp_path, "gpu-operator")
    smi = root.container_root / "usr/bin/nvidia-smi"
    (root.container_root / "opt/nvidia/bin").mkdir(parents=True)
    smi.rename(root.container_root / "opt/nvidia/bin/nvidia-smi")
    os.symlink("/opt/nvidia/bin/nvidia-smi", smi)  # absolute: means the root's /opt
    files = discover_driver_files(RootFs(root.container_root), VERSION)
    mounts = _mounts(cdi.driver_edits(files, host_root=root.host_root, hook_path=None))
    assert mounts["/usr/bin/nvidia-smi"] == "/run/nvidia/driver/opt/nvidia/bin/nvidia-smi"


def test_nvidia_ctk_as_hook_gets_its_hook_subcommand(tmp_path: Path) -> None:
    root = build_root(tmp_path, "ubuntu")
    files = discover_driver_files(RootFs(root.container_root), VERSION)
    edits = cdi.driver_edits(files, host_root="/", hook_path="/usr/bin/nvidia-ctk")
    assert [h.args[:3] for h in edits.hooks] == [
        ("nvidia-ctk", "hook", "create-symlinks"),
        ("nvidia-ctk", "hook", "update-ldcache"),
    ]


def test_user_space_discovers_once_per_driver_version(tmp_path: Path) -> None:
    build_root(tmp_path, "ubuntu")
    from dra_driver.hardware.simulated.driver_root import materialize_driver_root

    materialize_driver_root(tmp_path / "ubuntu-root", STALE)  # both versions installed
    space = DriverUserSpace(
        DriverRoot(host_path=str(tmp_path / "ubuntu-root")), firmware_paths=FIRMWARE
    )
    first = space.edits(VERSION)
    for _ in range(5):
        assert space.edits(VERSION) is first
    assert space.discoveries == 1
    upgraded = space.edits(STALE)  # NVML now reports the other driver
    assert space.discoveries == 2
    assert all(STALE in m.host_path for m in upgraded.mounts if "/lib" in m.container_path)


def test_binaries_are_handed_out_as_the_plugin_runs_them(tmp_path: Path) -> None:
    root = build_root(tmp_path, "gpu-operator")
    space = DriverUserSpace(
        DriverRoot(host_path=root.host_root, container_path=str(root.container_root)),
        firmware_paths=FIRMWARE,
    )
    binaries = space.binaries(VERSION)
    assert isinstance(binaries, DriverBinaries)
    assert binaries.nvidia_smi == root.container_root / "usr/bin/nvidia-smi"
    assert (
        binaries.nvidia_cuda_mps_control == root.container_root / "usr/bin/nvidia-cuda-mps-control"
    )
    assert binaries.env == {"LD_LIBRARY_PATH": str(root.container_root / root.lib_dir.lstrip("/"))}


def test_relative_driver_root_flags_are_refused() -> None:
    with pytest.raises(DriverRootError, match="--container-driver-root 'driver' must be absolute"):
        DriverRoot(container_path="driver")
