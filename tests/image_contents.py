"""`make image-test`: the OCI archive `make image` wrote, checked without a container runtime.

Usage (as root, for chroot): python -m tests.image_contents dist/dra-gpu-VERSION.oci.tar VERSION

It reads the archive as the OCI image layout it is (`index.json`, the
manifest, the config and the layer blobs, each checked against its sha256
digest), then checks:

- the config: entry point `dra-gpu`, user `0:0` (the plugin runs as root in a
  privileged pod, docs/install.md), working directory `/`, the version label;
- the content, unpacked with tar into a temporary root: the daemon and its
  package data are there, and no test code (no `tests` or `test` package in
  the installed packages, no `conftest.py`, no pytest; the standard
  library's own `test` package of Debian's python3.11 is allowed), no
  source tree, and no caches (pip's and apt's, tool caches, byte-code
  outside `__pycache__`, which a `PYTHONPYCACHEPREFIX` of the build machine
  would leave at its own path, or byte-code for another Python);
- `dra-gpu --version` in a chroot of that root prints VERSION, and the
  daemon's modules import;
- the size: the archive and the unpacked root stay under `MAX_ARCHIVE_MB`
  and `MAX_ROOT_MB` (docs/install.md gives the numbers).

`problems_in_config` and `problems_in_paths` are pure, so the tests
(tests/deploy/test_image.py) check the rules without building an image.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, Final

SITE: Final = "usr/local/lib/python3.11/dist-packages"
PYC_TAG: Final = ".cpython-311"
MAX_ARCHIVE_MB: Final = 110
MAX_ROOT_MB: Final = 520
REQUIRED: Final = (
    "usr/local/bin/dra-gpu",
    f"{SITE}/dra_driver/cli.py",
    f"{SITE}/dra_driver/data/deviceclasses.yaml",
    f"{SITE}/dra_driver/scheduling/cel/cel.lark",
    f"{SITE}/kubelet_plugin/main.py",
    f"{SITE}/controller/publisher.py",
)
TEST_PACKAGES: Final = frozenset({"tests", "test", "pytest", "_pytest", "hypothesis"})
TEST_DIRS: Final = frozenset({"tests", "test"})  # at any depth
ALLOWED_TEST_DIRS: Final = ("usr/lib/python3.11/test/",)  # Debian's stdlib `test` package
CACHE_DIRS: Final = ("root/.cache/", "var/cache/apt/", "var/lib/apt/lists/")
CACHE_KEEP: Final = frozenset({"var/lib/apt/lists/lock", "var/lib/apt/lists/partial/"})
TOOL_CACHES: Final = frozenset({".pytest_cache", ".mypy_cache", ".ruff_cache", ".cache"})
SOURCE_TREE: Final = frozenset({"pyproject.toml", "Makefile", ".git/", "tests/", "dra_driver/"})
IMPORTS: Final = "import kubelet_plugin.main, controller.publisher, dra_driver.scheduling.cel"


def problems_in_config(config: dict[str, Any], version: str) -> list[str]:
    """What is wrong with an image config (the `config` object of the OCI config blob)."""
    found = []
    expected = {
        "Entrypoint": ["dra-gpu"],
        "User": "0:0",
        "WorkingDir": "/",
    }
    for key, want in expected.items():
        if config.get(key) != want:
            found.append(f"config {key} is {config.get(key)!r}, expected {want!r}")
    label = (config.get("Labels") or {}).get("org.opencontainers.image.version")
    if label != version:
        found.append(f"label org.opencontainers.image.version is {label!r}, expected {version!r}")
    for entry in config.get("Env") or []:
        if entry.split("=", 1)[0] in ("PYTHONPYCACHEPREFIX", "PYTHONPATH"):
            found.append(f"config Env sets {entry}")
    return found


def problems_in_paths(paths: Iterable[str]) -> list[str]:
    """What is wrong with a root holding `paths` (relative, directories ending in "/")."""
    names = sorted(paths)
    held = set(names)
    found = [f"missing: /{path}" for path in REQUIRED if path not in held]
    for path in names:
        parts = path.rstrip("/").split("/")
        name, is_dir = parts[-1], path.endswith("/")
        top_level_package = path.startswith(SITE + "/") and path.count("/") == SITE.count("/") + 2
        if path in SOURCE_TREE:
            found.append(f"source tree: /{path}")
        elif name == "conftest.py" or (
            is_dir
            and (name in TEST_DIRS or (top_level_package and name in TEST_PACKAGES))
            and not path.startswith(ALLOWED_TEST_DIRS)
        ):
            found.append(f"test code: /{path}")
        elif (is_dir and name in TOOL_CACHES) or (
            path.startswith(CACHE_DIRS) and path not in CACHE_DIRS and path not in CACHE_KEEP
        ):
            found.append(f"cache: /{path}")
        elif name.endswith(".pyc") and parts[-2:-1] != ["__pycache__"]:
            found.append(f"byte-code outside __pycache__: /{path}")
        elif name.endswith(".pyc") and PYC_TAG not in name:
            found.append(f"byte-code for another Python: /{path}")
    return _first_per_directory(found)


def _first_per_directory(found: list[str]) -> list[str]:
    """One problem per directory subtree, and stray byte-code in one line (a
    `PYTHONPYCACHEPREFIX` tree is one finding, not 10,000)."""
    kept: list[str] = []
    roots: list[str] = []
    stray = [p.split(": ", 1)[1] for p in found if p.startswith("byte-code outside")]
    for problem in found:
        path = problem.split(": ", 1)[1]
        if problem.startswith("byte-code outside") or any(path.startswith(r) for r in roots):
            continue
        kept.append(problem)
        if path.endswith("/"):
            roots.append(path)
    if stray:
        kept.append(
            f"byte-code outside __pycache__: {len(stray)} files (a PYTHONPYCACHEPREFIX of the "
            f"build?), e.g. {stray[0]}"
        )
    return kept


def _blob(layout: Path, digest: str) -> Path:
    algorithm, _, value = digest.partition(":")
    path = layout / "blobs" / algorithm / value
    sha = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            sha.update(chunk)
    if algorithm != "sha256" or sha.hexdigest() != value:
        raise SystemExit(f"image-test: blob {digest} does not match its digest")
    return path


def _unpack(layout: Path, layers: Sequence[dict[str, Any]], root: Path) -> None:
    """Apply the layers in order with tar (absolute links and device nodes as they are),
    then the OCI whiteouts (`.wh.<name>` removes <name>)."""
    for layer in layers:
        blob = _blob(layout, layer["digest"])
        # GNU tar sees the compression itself; as root it keeps owners and device nodes.
        subprocess.run(["tar", "-x", "--numeric-owner", "-f", str(blob)], cwd=root, check=True)
        for directory, dirs, files in os.walk(root):
            for name in [*files, *dirs]:
                if name.startswith(".wh."):
                    target = Path(directory) / name[len(".wh.") :]
                    if target.is_dir() and not target.is_symlink():
                        shutil.rmtree(target)
                    elif name != ".wh..wh..opq":
                        target.unlink(missing_ok=True)
                    (Path(directory) / name).unlink()


def _paths(root: Path) -> tuple[list[str], int]:
    """Every path under `root` (directories with a trailing "/") and their total size."""
    paths: list[str] = []
    size = 0
    for directory, dirs, files in os.walk(root):
        rel = os.path.relpath(directory, root)
        prefix = "" if rel == "." else rel + "/"
        paths += [f"{prefix}{d}/" for d in dirs if not os.path.islink(os.path.join(directory, d))]
        paths += [f"{prefix}{d}" for d in dirs if os.path.islink(os.path.join(directory, d))]
        for name in files:
            paths.append(prefix + name)
            size += os.lstat(os.path.join(directory, name)).st_size
    return paths, size


def check(archive: Path, version: str) -> list[str]:
    """Every problem of the image in `archive` (empty when it passes); prints what it saw."""
    found: list[str] = []
    work = Path(tempfile.mkdtemp(prefix="dra-gpu-image-test."))
    try:
        layout, root = work / "layout", work / "root"
        layout.mkdir()
        root.mkdir()
        with tarfile.open(archive) as outer:
            outer.extractall(layout, filter="data")
        (entry,) = json.loads((layout / "index.json").read_text())["manifests"]
        manifest = json.loads(_blob(layout, entry["digest"]).read_text())
        config = json.loads(_blob(layout, manifest["config"]["digest"]).read_text())
        found += problems_in_config(config.get("config") or {}, version)
        _unpack(layout, manifest["layers"], root)
        paths, size = _paths(root)
        found += problems_in_paths(paths)
        archive_mb = archive.stat().st_size / 2**20
        root_mb = size / 2**20
        print(
            f"image-test: {archive}: {archive_mb:.0f} MiB archive, {len(manifest['layers'])} "
            f"layer(s), {root_mb:.0f} MiB unpacked, {len(paths)} paths",
            flush=True,
        )
        if archive_mb > MAX_ARCHIVE_MB:
            found.append(f"the archive is {archive_mb:.0f} MiB, more than {MAX_ARCHIVE_MB}")
        if root_mb > MAX_ROOT_MB:
            found.append(f"the root file system is {root_mb:.0f} MiB, more than {MAX_ROOT_MB}")
        found += _run_in_chroot(root, config.get("config") or {}, version)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return found


def _run_in_chroot(root: Path, config: dict[str, Any], version: str) -> list[str]:
    env = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME": "/root"}
    env.update(e.split("=", 1) for e in config.get("Env") or [] if "=" in e)
    found = []
    for argv, want in (
        ([*(config.get("Entrypoint") or []), "--version"], f"dra-gpu {version}"),
        (["python3", "-c", IMPORTS], ""),
    ):
        done = subprocess.run(
            ["chroot", str(root), *argv],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        if done.returncode != 0 or done.stdout.strip() != want:
            said = (done.stdout + done.stderr).strip().splitlines()[-1:] or [""]
            found.append(f"`{' '.join(argv)}` in a chroot: exit {done.returncode}: {said[0]}")
    return found


def main(argv: Sequence[str]) -> int:
    if len(argv) != 2:
        print("usage: python -m tests.image_contents ARCHIVE VERSION", file=sys.stderr)
        return 2
    if os.geteuid() != 0:
        print("make image-test: needs root for chroot (sudo make image-test)", file=sys.stderr)
        return 2
    archive = Path(argv[0])
    if not archive.is_file():
        print(f"make image-test: no image archive at {archive} (make image)", file=sys.stderr)
        return 2
    found = check(archive, argv[1])
    for problem in found:
        print(f"{archive}: {problem}", file=sys.stderr)
    if not found:
        print(f"image-test: {archive} passes")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
