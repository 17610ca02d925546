"""Driver file discovery and the CDI edits built from it, against nvcdi's rules.

Each fake root (`driver_roots`) is built from NVIDIA's lookup tables, with
traps. The expected edits are derived here from nvcdi's rules as its source
documents them (pkg/nvcdi/driver-nvml.go, common-nvml.go; internal/discover/
graphics.go, symlinks.go, ldconfig.go, ipc.go, hooks.go; internal/lookup/
root/root.go; pkg/lookup/library.go, file.go), applied to the fixture's
tables, never from what our discovery returns.
"""

from __future__ import annotations

import os
import posixpath
from pathlib import Path

import pytest

from dra_driver.container import cdi
from dra_driver.container.driver_files import discover_driver_files, firmware_search_paths
from dra_driver.container.driver_root import DriverBinaries, DriverRoot, DriverUserSpace, RootFs
from dra_driver.errors import ConfigError, DriverRootError
from tests.dra_driver.container.driver_roots import (
    BINARIES,
    DRIVER_550,
    EGL_PLATFORMS,
    FIRMWARE,
    NVC_LIBRARIES,
    SELF,
    STALE,
    VDPAU,
    VERSION,
    RootCase,
    build_root,
)

CASES = ("ubuntu", "rhel", "gpu-operator", "host-mounted")
SEARCH = firmware_search_paths("6.8.0-45-generic")
HOOK = "/usr/local/nvidia/toolkit/nvidia-cdi-hook"


def discover(root: RootCase) -> cdi.ContainerEdits:
    files = discover_driver_files(RootFs(root.container_root), root.version, firmware_paths=SEARCH)
    return cdi.driver_edits(files, host_root=root.host_root, hooks=cdi.CdiHooks(path=HOOK))


# -- what nvcdi emits, derived from its rules --------------------------------


def nvcdi_library_paths(root: RootCase) -> list[str]:
    """Every *.so.<version> in the folder holding lib*.so.<version>, then in its vdpau/."""
    lib, v = root.lib_dir, root.version
    return [f"{lib}/{stem}.so.{v}" for stem, _, _ in NVC_LIBRARIES] + [
        f"{lib}/vdpau/{VDPAU[0]}.so.{v}"
    ]


def nvcdi_library_links(root: RootCase) -> set[str]:
    """create-symlinks of WithDriverDotSoSymlinks: special links, SONAME and .so links
    that exist next to the library on the host."""
    lib, v = root.lib_dir, root.version
    links = {
        f"libcuda.so.1::{lib}/libcuda.so",
        f"libGLX_nvidia.so.{v}::{lib}/libGLX_indirect.so.0",
        f"libnvidia-opticalflow.so.1::{lib}/libnvidia-opticalflow.so",
        f"{VDPAU[0]}.so.{v}::{lib}/vdpau/{VDPAU[1]}",
    }
    for stem, soname, extra in NVC_LIBRARIES:
        if soname == SELF:
            continue
        links.add(f"{stem}.so.{v}::{lib}/{soname}")
        links |= {f"{soname}::{lib}/{link}" for link in extra}
    return links


def nvcdi_graphics_links(root: RootCase) -> list[str]:
    return [
        f"../libnvidia-allocator.so.1::{root.lib_dir}/gbm/nvidia-drm_gbm.so",
        f"libglxserver_nvidia.so.{root.version}::{root.xorg_extensions}/libglxserver_nvidia.so",
    ]


def nvcdi_mounts(root: RootCase) -> set[str]:
    """The container paths of nvcdi's common mounts for the root."""
    v = root.version
    return {
        *nvcdi_library_paths(root),
        *(f"{root.lib_dir}/{name}" for name, _ in EGL_PLATFORMS),
        f"{root.xorg_drivers}/nvidia_drv.so",
        f"{root.xorg_extensions}/libglxserver_nvidia.so.{v}",
        *(at for _, at in root.configs),
        *(f"/usr/bin/{name}" for name in BINARIES),
        *(f"/lib/firmware/nvidia/{v}/{name}" for name in FIRMWARE),
        "/run/nvidia-persistenced/socket",
    }


@pytest.mark.parametrize("case", CASES)
def test_common_edits_hold_what_nvcdi_emits_for_the_root(tmp_path: Path, case: str) -> None:
    root = build_root(tmp_path, case, DRIVER_550)
    edits = discover(root)

    mounts = {m.container_path: m.host_path for m in edits.mounts}
    assert set(mounts) == nvcdi_mounts(root)
    graphics_links, library_links, compat, ldcache, no_mknod, profile = edits.hooks
    assert all((h.hook_name, h.path) == ("createContainer", HOOK) for h in edits.hooks)
    assert graphics_links.args == (
        "nvidia-cdi-hook",
        "create-symlinks",
        *(arg for link in nvcdi_graphics_links(root) for arg in ("--link", link)),
    )
    assert library_links.args[:2] == ("nvidia-cdi-hook", "create-symlinks")
    assert set(library_links.args[2::2]) == {"--link"}
    assert set(library_links.args[3::2]) == nvcdi_library_links(root)
    assert compat.args == (
        "nvidia-cdi-hook",
        "enable-cuda-compat",
        f"--host-driver-version={DRIVER_550}",
    )
    assert ldcache.args == (
        "nvidia-cdi-hook",
        "update-ldcache",
        "--folder",
        root.lib_dir,
        "--folder",
        f"{root.lib_dir}/vdpau",
    )
    assert no_mknod.args == ("nvidia-cdi-hook", "disable-device-node-modification")
    assert profile.args == ("nvidia-cdi-hook", "update-application-profile")
    assert all(h.env == ("NVIDIA_CTK_DEBUG=false",) for h in edits.hooks)
    assert edits.env == (f"NVIDIA_CTK_LIBCUDA_DIR={root.lib_dir}",)


@pytest.mark.parametrize("case", CASES)
def test_host_paths_name_the_file_on_the_host(tmp_path: Path, case: str) -> None:
    root = build_root(tmp_path, case, DRIVER_550)
    mounts = {m.container_path: m for m in discover(root).mounts}
    host = root.host_prefix
    cuda = f"{root.lib_dir}/libcuda.so.{DRIVER_550}"
    assert mounts[cuda].host_path == host + cuda
    for source, at in root.configs:
        expected = source
        if case == "host-mounted" and at == "/etc/vulkan/icd.d/nvidia_icd.json":
            # /usr/share/vulkan/icd.d/nvidia_icd.json -> /etc/alternatives/... -> the file
            expected = "/usr/lib/x86_64-linux-gnu/nvidia/nvidia_icd.json"
        assert mounts[at].host_path == host + expected
        assert mounts[at].options == ("ro", "nosuid", "nodev", "bind")
    socket = mounts["/run/nvidia-persistenced/socket"]
    assert socket.options == ("nosuid", "nodev", "rbind", "rprivate", "noexec")
    assert not [m for m in mounts.values() if str(tmp_path) in m.host_path]


@pytest.mark.parametrize("case", CASES)
def test_traps_stay_out(tmp_path: Path, case: str) -> None:
    root = build_root(tmp_path, case, DRIVER_550)
    edits = discover(root)
    paths = [m.container_path for m in edits.mounts] + [m.host_path for m in edits.mounts]
    args = " ".join(arg for hook in edits.hooks for arg in hook.args)
    assert not [p for p in paths if STALE in p]  # an older driver's leftovers
    assert not [p for p in paths if "libz" in p or "libssl" in p]  # other packages' libraries
    assert not [p for p in paths if "libnvidia-api" in p]  # nvcdi's opt-in explicit libraries
    assert not [p for p in paths if "nvidia-mps" in p]  # the host's MPS pipe directory
    lib32 = {
        "ubuntu": "/usr/lib/i386-linux-gnu/",
        "rhel": "/usr/lib/",
        "gpu-operator": "/usr/lib32/",
    }
    if case in lib32:
        # No 32-bit library, no link to one and no ldcache folder of them.
        assert not [p for p in paths if posixpath.dirname(p) + "/" == lib32[case]]
        assert f"{lib32[case]}libcuda.so" not in args
        assert "--folder /usr/lib " not in args + " "


def test_rhel_32_bit_libraries_are_skipped_even_where_ld_so_conf_lists_them(
    tmp_path: Path,
) -> None:
    root = build_root(tmp_path, "rhel", DRIVER_550)
    conf = root.container_root / "etc/ld.so.conf.d"
    conf.mkdir(parents=True)
    (conf / "nvidia-32.conf").write_text("/usr/lib\n")
    (root.container_root / "etc/ld.so.conf").write_text("include ld.so.conf.d/*.conf\n")
    # Move the 64-bit libraries to a folder only ld.so.conf names.
    (root.container_root / "opt").mkdir()
    (root.container_root / "usr/lib64").rename(root.container_root / "opt/lib64")
    (conf / "nvidia-64.conf").write_text("/opt/lib64\n")
    files = discover_driver_files(RootFs(root.container_root), DRIVER_550)
    assert files.library_dirs == ("/opt/lib64",)
    assert not [lib for lib in files.libraries if lib.path.startswith("/usr/lib/")]


def test_without_create_symlinks_each_library_is_mounted_at_its_link_paths(
    tmp_path: Path,
) -> None:
    root = build_root(tmp_path, "gpu-operator", DRIVER_550)
    files = discover_driver_files(RootFs(root.container_root), DRIVER_550)
    edits = cdi.driver_edits(files, host_root=root.host_root, hooks=cdi.NO_HOOKS)
    mounts = {m.container_path: m.host_path for m in edits.mounts}
    lib, host = root.lib_dir, root.host_root
    cuda = f"{host}{lib}/libcuda.so.{DRIVER_550}"
    assert mounts[f"{lib}/libcuda.so.1"] == cuda
    assert mounts[f"{lib}/libcuda.so"] == cuda
    assert mounts[f"{lib}/libGLX_indirect.so.0"] == f"{host}{lib}/libGLX_nvidia.so.{DRIVER_550}"
    allocator = f"{host}{lib}/libnvidia-allocator.so.{DRIVER_550}"
    assert mounts[f"{lib}/gbm/nvidia-drm_gbm.so"] == allocator
    # ldconfig would have made the EGL platform libraries' soname links.
    assert mounts[f"{lib}/libnvidia-egl-gbm.so.1"] == f"{host}{lib}/libnvidia-egl-gbm.so.1.1.1"
    assert edits.hooks == ()


def test_each_hook_can_be_disabled_by_its_nvidia_name(tmp_path: Path) -> None:
    root = build_root(tmp_path, "ubuntu", DRIVER_550)
    files = discover_driver_files(RootFs(root.container_root), DRIVER_550)
    old_toolkit = cdi.CdiHooks(
        disabled=frozenset({"update-application-profile", "disable-device-node-modification"})
    )
    edits = cdi.driver_edits(files, host_root="/", hooks=old_toolkit)
    assert [h.args[1] for h in edits.hooks] == [
        "create-symlinks",
        "create-symlinks",
        "enable-cuda-compat",
        "update-ldcache",
    ]
    assert edits.hooks[0].path == "/usr/bin/nvidia-cdi-hook"  # nvcdi's default path
    with pytest.raises(ConfigError, match=r"--disable-cdi-hook 'chmod'.*update-ldcache"):
        cdi.CdiHooks(disabled=frozenset({"chmod"}))


def test_nvidia_ctk_as_hook_gets_its_hook_subcommand(tmp_path: Path) -> None:
    root = build_root(tmp_path, "ubuntu")
    files = discover_driver_files(RootFs(root.container_root), VERSION)
    edits = cdi.driver_edits(files, host_root="/", hooks=cdi.CdiHooks(path="/usr/bin/nvidia-ctk"))
    assert {h.args[:2] for h in edits.hooks} == {("nvidia-ctk", "hook")}


def test_a_root_of_another_version_is_refused_with_the_reason(tmp_path: Path) -> None:
    root = build_root(tmp_path, "ubuntu")
    with pytest.raises(DriverRootError, match=r"no libcuda\.so\.580\.65\.06 .*kernel module"):
        discover_driver_files(RootFs(root.container_root), "580.65.06")


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


def test_symlinked_files_are_mounted_from_the_file_inside_the_root(tmp_path: Path) -> None:
    root = build_root(tmp_path, "gpu-operator")
    smi = root.container_root / "usr/bin/nvidia-smi"
    (root.container_root / "opt/nvidia/bin").mkdir(parents=True)
    smi.rename(root.container_root / "opt/nvidia/bin/nvidia-smi")
    os.symlink("/opt/nvidia/bin/nvidia-smi", smi)  # absolute: means the root's /opt
    files = discover_driver_files(RootFs(root.container_root), VERSION)
    edits = cdi.driver_edits(files, host_root=root.host_root, hooks=cdi.NO_HOOKS)
    mounts = {m.container_path: m.host_path for m in edits.mounts}
    assert mounts["/usr/bin/nvidia-smi"] == "/run/nvidia/driver/opt/nvidia/bin/nvidia-smi"


def test_user_space_discovers_once_per_driver_version(tmp_path: Path) -> None:
    root = build_root(tmp_path, "ubuntu")
    build_root(tmp_path / "second", "ubuntu", STALE)
    for path in (tmp_path / "second/ubuntu-root").rglob("*"):  # both versions installed
        target = root.container_root / path.relative_to(tmp_path / "second/ubuntu-root")
        if path.is_dir() or target.exists() or target.is_symlink():
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        os.rename(path, target)
    space = DriverUserSpace(DriverRoot(host_path=str(root.container_root)), firmware_paths=SEARCH)
    first = space.edits(VERSION)
    for _ in range(5):
        assert space.edits(VERSION) is first
    assert space.discoveries == 1
    upgraded = space.edits(STALE)  # NVML now reports the other driver
    assert space.discoveries == 2
    cuda = [m for m in upgraded.mounts if m.container_path.endswith(f"libcuda.so.{STALE}")]
    assert cuda
    assert not [m for m in upgraded.mounts if f"libcuda.so.{VERSION}" in m.container_path]


def test_binaries_are_handed_out_as_the_plugin_runs_them(tmp_path: Path) -> None:
    root = build_root(tmp_path, "gpu-operator")
    space = DriverUserSpace(
        DriverRoot(host_path=root.host_root, container_path=str(root.container_root)),
        firmware_paths=SEARCH,
    )
    binaries = space.binaries(VERSION)
    assert isinstance(binaries, DriverBinaries)
    assert binaries.nvidia_smi == root.container_root / "usr/bin/nvidia-smi"
    assert (
        binaries.nvidia_cuda_mps_control == root.container_root / "usr/bin/nvidia-cuda-mps-control"
    )
    assert binaries.env == {"LD_LIBRARY_PATH": str(root.container_root / root.lib_dir.lstrip("/"))}


def test_a_missing_hook_binary_inside_the_root_is_reported(tmp_path: Path) -> None:
    root = build_root(tmp_path, "host-mounted")
    space = DriverUserSpace(
        DriverRoot(host_path="/", container_path=str(root.container_root)), firmware_paths=()
    )
    (warning,) = [w for w in space.files(VERSION).warnings if "CDI hook" in w]
    assert "/usr/bin/nvidia-cdi-hook is not installed" in warning
    assert ">= 1.20.0" in warning
    assert "--disable-cdi-hook all" in warning
    hook = root.container_root / "usr/bin/nvidia-cdi-hook"
    hook.write_bytes(b"#!/bin/sh\n")
    hook.chmod(0o755)
    fresh = DriverUserSpace(
        DriverRoot(host_path="/", container_path=str(root.container_root)), firmware_paths=()
    )
    assert not [w for w in fresh.files(VERSION).warnings if "CDI hook" in w]


def test_relative_driver_root_flags_are_refused() -> None:
    with pytest.raises(DriverRootError, match="--container-driver-root 'driver' must be absolute"):
        DriverRoot(container_path="driver")
