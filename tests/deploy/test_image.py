"""`make image` (deploy/build-image.sh): its assumptions, checked without building.

The build needs root, the Debian mirror and the package index, and takes
minutes, so it runs in CI and in the release workflow, not here. These tests
check what the image promises: it installs the wheel `make wheel` builds and
nothing else from the source tree, its entry point is the wheel's console
script and the DaemonSet's command, it runs as the user the install guide
documents, the DaemonSet's mounts do not hide what it installs, its Python
satisfies the project's, and a machine without the tools gets one clear line
instead of a half-built image.
"""

from __future__ import annotations

import os
import re
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import yaml

from dra_driver.cli import main as cli_main
from tests.image_contents import SITE, problems_in_config, problems_in_paths
from tests.wheel_contents import problems

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "deploy/build-image.sh"
SCRIPT_TEXT = SCRIPT.read_text()
MAKEFILE = (ROOT / "Makefile").read_text()
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def _daemonset() -> dict[str, Any]:
    docs = yaml.safe_load_all((ROOT / "deploy/base/kubelet-plugin.yaml").read_text())
    (daemonset,) = [d for d in docs if d and d["kind"] == "DaemonSet"]
    assert isinstance(daemonset, dict)
    return daemonset


def _make_image_recipe() -> str:
    match = re.search(r"^image: (.*)\n((?:\t.*\n)+)", MAKEFILE, re.M)
    assert match, "the Makefile has an image target"
    assert match.group(1).split() == ["wheel"]  # it builds the wheel first
    return match.group(2)


def test_make_image_installs_the_wheel_make_builds() -> None:
    match = re.search(r"^WHEEL_GLOB := (\S+)$", MAKEFILE, re.M)
    assert match, "Makefile defines WHEEL_GLOB"
    recipe = _make_image_recipe()
    assert "$(WHEEL_GLOB)" in recipe
    assert "deploy/build-image.sh" in recipe
    # The image gets the wheel and its dependencies, never the source tree.
    assert "--target" in SCRIPT_TEXT
    assert "'$WHEEL'" in SCRIPT_TEXT
    assert "COPY" not in SCRIPT_TEXT
    assert "buildah copy" not in SCRIPT_TEXT
    assert "tests" not in SCRIPT_TEXT.replace("no tests", "").replace("-name tests", "")


def test_the_default_image_is_the_one_the_manifests_name() -> None:
    assert "IMAGE ?= ghcr.io/dra-gpu/dra-gpu:$(VERSION)" in MAKEFILE
    kustomization = yaml.safe_load((ROOT / "deploy/base/kustomization.yaml").read_text())
    assert kustomization["images"] == [
        {"name": "ghcr.io/dra-gpu/dra-gpu", "newTag": PROJECT["version"]}
    ]
    (container,) = _daemonset()["spec"]["template"]["spec"]["containers"]
    assert container["image"].split()[0] == "ghcr.io/dra-gpu/dra-gpu"


def test_the_entry_point_is_the_wheels_console_script() -> None:
    assert PROJECT["scripts"]["dra-gpu"] == "dra_driver.cli:main"
    assert cli_main.__module__ == "dra_driver.cli"
    assert "'from dra_driver.cli import main'" in SCRIPT_TEXT
    assert "/usr/local/bin/dra-gpu" in SCRIPT_TEXT
    assert "--entrypoint '[\"dra-gpu\"]'" in SCRIPT_TEXT
    container = _daemonset()["spec"]["template"]["spec"]["containers"][0]
    assert container["command"][0] == "dra-gpu"


def test_the_images_python_satisfies_the_project() -> None:
    match = re.search(r"^PY_VERSION=(\d+)\.(\d+)", SCRIPT_TEXT, re.M)
    assert match
    required = re.fullmatch(r">=(\d+)\.(\d+)", PROJECT["requires-python"])
    assert required
    assert (int(match[1]), int(match[2])) >= (int(required[1]), int(required[2]))
    assert 'SUITE="${SUITE:-bookworm}"' in SCRIPT_TEXT  # bookworm's python3 is 3.11


def test_the_image_runs_as_the_documented_root_user_in_a_privileged_pod() -> None:
    assert "--user 0:0" in SCRIPT_TEXT
    assert "runs as root (UID 0)" in " ".join((ROOT / "docs/install.md").read_text().split())
    container = _daemonset()["spec"]["template"]["spec"]["containers"][0]
    assert container["securityContext"]["privileged"] is True


def test_no_mount_hides_what_the_image_installs() -> None:
    container = _daemonset()["spec"]["template"]["spec"]["containers"][0]
    mounts = [m["mountPath"] for m in container["volumeMounts"]]
    assert "/driver-root" in mounts  # where NVML is found
    installed = ["/usr/local", "/usr/lib/python3", "/usr/bin"]
    for mount in mounts:
        for path in installed:
            assert path != mount
            assert not path.startswith(mount.rstrip("/") + "/")


def test_without_the_builders_it_says_what_to_install_in_one_line(tmp_path: Path) -> None:
    """No buildah or mmdebstrap on the machine: a clear line and exit 2, nothing half-built."""
    env = {
        "PATH": str(tmp_path),  # neither tool is found
        "PYTHON": "python3",
        "IMAGE": "example.com/dra-gpu:test",
        "WHEEL": str(tmp_path / "missing.whl"),
        "OUT": str(tmp_path / "image.tar"),
    }
    done = subprocess.run(
        ["/bin/bash", str(SCRIPT)], env=env, capture_output=True, text=True, check=False
    )
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        "make image: needs mmdebstrap (Debian/Ubuntu: apt-get install mmdebstrap buildah)"
    ]
    assert os.listdir(tmp_path) == []


def test_wheel_contents_rejects_test_code_and_missing_package_data() -> None:
    good = [
        "dra_driver/__init__.py",
        "dra_driver/data/deviceclasses.yaml",
        "dra_driver/data/deviceclass-vfio.yaml",
        "dra_driver/data/compute-domain-deviceclasses.yaml",
        "dra_driver/data/computedomains-crd.yaml",
        "dra_driver/data/computedomaincliques-crd.yaml",
        "dra_driver/data/computedomainmembers-crd.yaml",
        "dra_driver/scheduling/cel/cel.lark",
        "dra_driver/py.typed",
        "dra_gpu-0.1.0.dist-info/entry_points.txt",
    ]
    assert problems(good) == []
    assert problems([*good, "tests/fakes/kubelet.py"]) == [
        "test code in the wheel: tests/fakes/kubelet.py",
        "not in a package: tests/fakes/kubelet.py",
    ]
    assert problems([n for n in good if not n.endswith("/deviceclasses.yaml")]) == [
        "missing from the wheel: dra_driver/data/deviceclasses.yaml"
    ]


def test_a_release_tag_builds_and_pushes_the_image_the_manifests_name_and_the_wheel() -> None:
    workflow = yaml.safe_load((ROOT / ".github/workflows/release.yml").read_text())
    # PyYAML reads the key `on` as True.
    assert workflow[True] == {"push": {"tags": ["v*"]}}
    (job,) = workflow["jobs"].values()
    assert job["env"]["IMAGE_REPOSITORY"] == "ghcr.io/dra-gpu/dra-gpu"
    script = "\n".join(step.get("run", "") for step in job["steps"])
    assert "make test" in script
    assert 'make image IMAGE="$IMAGE_REPOSITORY:$VERSION"' in script
    assert 'buildah push "$IMAGE_REPOSITORY:$VERSION"' in script
    assert "gh release create" in script
    assert "dist/dra_gpu-" in script
    assert "mmdebstrap buildah" in script  # Debian's builders, no container daemon
    assert "docker" not in script
    # The image is checked before it is pushed.
    built = script.index("make image IMAGE=")
    checked = script.index("make image-test")
    assert built < checked < script.index("buildah push")


def test_ci_runs_the_tests_and_builds_the_image() -> None:
    workflow = yaml.safe_load((ROOT / ".github/workflows/ci.yml").read_text())
    runs = {
        name: "\n".join(step.get("run", "") for step in job["steps"])
        for name, job in workflow["jobs"].items()
    }
    assert "make test" in runs["test"]
    assert "make image" in runs["image"]
    assert "make image-test" in runs["image"]


def test_no_byte_code_of_the_build_machine_lands_in_the_image() -> None:
    """The Makefile exports PYTHONPYCACHEPREFIX; every Python the build runs in the new
    root would write its byte-code there (`make image-test` found 73 MB of it)."""
    assert "export PYTHONPYCACHEPREFIX" in MAKEFILE
    unset = SCRIPT_TEXT.index("\nunset PYTHONPYCACHEPREFIX\n")
    assert unset < SCRIPT_TEXT.index("\nmmdebstrap ")


def test_make_image_test_checks_the_archive_make_image_writes() -> None:
    match = re.search(r"^image-test: (.*)\n((?:\t.*\n)+)", MAKEFILE, re.M)
    assert match, "the Makefile has an image-test target"
    assert "tests.image_contents $(IMAGE_ARCHIVE) $(VERSION)" in match.group(2)
    assert "OUT=$(IMAGE_ARCHIVE)" in _make_image_recipe()
    unit = re.search(r"^test: (.*)$", MAKEFILE, re.M)
    assert unit
    assert "image-test" not in unit.group(1)  # make test builds no image


CONFIG = {
    "User": "0:0",
    "Entrypoint": ["dra-gpu"],
    "Cmd": ["kubelet-plugin", "--help"],
    "WorkingDir": "/",
    "Env": ["PYTHONUNBUFFERED=1"],
    "Labels": {"org.opencontainers.image.version": "0.1.0"},
}
ROOT_PATHS = [
    "usr/local/bin/dra-gpu",
    f"{SITE}/dra_driver/cli.py",
    f"{SITE}/dra_driver/__pycache__/cli.cpython-311.pyc",
    f"{SITE}/dra_driver/data/deviceclasses.yaml",
    f"{SITE}/dra_driver/scheduling/cel/cel.lark",
    f"{SITE}/kubelet_plugin/main.py",
    f"{SITE}/controller/publisher.py",
    "usr/lib/python3.11/test/",  # Debian's stdlib `test` package stays
    "usr/lib/python3.11/test/support/__init__.py",
    "var/lib/apt/lists/",
    "var/lib/apt/lists/lock",
    "var/lib/apt/lists/partial/",
]


def test_image_test_passes_the_image_make_image_means_to_build() -> None:
    assert problems_in_config(CONFIG, "0.1.0") == []
    assert problems_in_paths(ROOT_PATHS) == []


def test_image_test_finds_a_wrong_entry_point_user_or_version() -> None:
    wrong = {**CONFIG, "User": "65532", "Entrypoint": ["python3"], "Env": ["PYTHONPATH=/src"]}
    assert problems_in_config(wrong, "0.2.0") == [
        "config Entrypoint is ['python3'], expected ['dra-gpu']",
        "config User is '65532', expected '0:0'",
        "label org.opencontainers.image.version is '0.1.0', expected '0.2.0'",
        "config Env sets PYTHONPATH=/src",
    ]


def test_image_test_finds_test_code_caches_and_stray_byte_code() -> None:
    """What the first image built held: the build machine's PYTHONPYCACHEPREFIX tree
    (73 MB of byte-code where the image never reads it) and dependencies' test suites."""
    stray = "work/wt/x/build/pycache/usr/local/lib/python3.11/dist-packages"
    bad = [
        *ROOT_PATHS,
        f"{SITE}/jsonschema/tests/",
        f"{SITE}/jsonschema/tests/test_validators.py",
        f"{SITE}/tests/",
        f"{SITE}/tests/fakes/kubelet.py",
        f"{SITE}/dra_driver/conftest.py",
        f"{SITE}/pytest/",
        "root/.cache/pip/http/0/1",
        "var/cache/apt/pkgcache.bin",
        "var/lib/apt/lists/deb.debian.org_debian_dists_bookworm_InRelease",
        "work/.mypy_cache/",
        f"{SITE}/yaml/__pycache__/cyaml.cpython-312.pyc",
        f"{stray}/dra_driver/cli.cpython-311.pyc",
        f"{stray}/yaml/__init__.cpython-311.pyc",
        "pyproject.toml",
    ]
    bad.remove(f"{SITE}/dra_driver/data/deviceclasses.yaml")
    assert problems_in_paths(bad) == [
        f"missing: /{SITE}/dra_driver/data/deviceclasses.yaml",
        "source tree: /pyproject.toml",
        "cache: /root/.cache/pip/http/0/1",
        f"test code: /{SITE}/dra_driver/conftest.py",
        f"test code: /{SITE}/jsonschema/tests/",
        f"test code: /{SITE}/pytest/",
        f"test code: /{SITE}/tests/",
        f"byte-code for another Python: /{SITE}/yaml/__pycache__/cyaml.cpython-312.pyc",
        "cache: /var/cache/apt/pkgcache.bin",
        "cache: /var/lib/apt/lists/deb.debian.org_debian_dists_bookworm_InRelease",
        "cache: /work/.mypy_cache/",
        "byte-code outside __pycache__: 2 files (a PYTHONPYCACHEPREFIX of the build?), "
        f"e.g. /{stray}/dra_driver/cli.cpython-311.pyc",
    ]
