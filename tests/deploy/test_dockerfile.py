"""deploy/Dockerfile's assumptions, checked without a container engine.

The image installs the wheel `make wheel` builds; the DaemonSet runs the
console script the wheel declares, as the user the install guide documents,
with host paths mounted where the image expects them.
"""

from __future__ import annotations

import fnmatch
import re
import shlex
import tomllib
from pathlib import Path
from typing import Any

import yaml

from dra_driver.cli import main as cli_main
from tests.wheel_contents import problems

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = (ROOT / "deploy/Dockerfile").read_text()
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def _instructions(keyword: str) -> list[str]:
    return [
        line.split(None, 1)[1]
        for line in DOCKERFILE.splitlines()
        if line.split(None, 1)[:1] == [keyword]
    ]


def _daemonset() -> dict[str, Any]:
    docs = yaml.safe_load_all((ROOT / "deploy/base/kubelet-plugin.yaml").read_text())
    (daemonset,) = [d for d in docs if d and d["kind"] == "DaemonSet"]
    assert isinstance(daemonset, dict)
    return daemonset


def test_the_image_copies_the_wheel_make_builds() -> None:
    makefile = (ROOT / "Makefile").read_text()
    match = re.search(r"^WHEEL_GLOB := (\S+)$", makefile, re.M)
    assert match, "Makefile defines WHEEL_GLOB"
    (copy,) = _instructions("COPY")
    source, _ = copy.split()
    assert source == match.group(1)
    # setuptools names the wheel after the normalized project name and version.
    built = f"{PROJECT['name'].replace('-', '_')}-{PROJECT['version']}-py3-none-any.whl"
    assert fnmatch.fnmatch(f"dist/{built}", source)
    (run,) = _instructions("RUN")
    assert "pip install" in run
    assert source.split("/")[-1] in run


def test_the_image_has_no_source_tree_or_tests() -> None:
    copied = [c.split()[0] for c in _instructions("COPY")]
    assert all(c.startswith("dist/") for c in copied)
    assert "tests" not in DOCKERFILE.replace("no tests", "")


def test_the_entry_point_is_the_wheels_console_script() -> None:
    (entrypoint,) = _instructions("ENTRYPOINT")
    (program,) = yaml.safe_load(entrypoint)
    assert PROJECT["scripts"][program] == "dra_driver.cli:main"
    assert cli_main.__module__ == "dra_driver.cli"
    container = _daemonset()["spec"]["template"]["spec"]["containers"][0]
    assert container["command"][0] == program
    assert container["image"].endswith(f":{PROJECT['version']}")


def test_the_image_runs_as_the_documented_root_user_in_a_privileged_pod() -> None:
    (user,) = _instructions("USER")
    assert user == "0:0"
    assert "runs as root (UID 0)" in " ".join((ROOT / "docs/install.md").read_text().split())
    container = _daemonset()["spec"]["template"]["spec"]["containers"][0]
    assert container["securityContext"]["privileged"] is True


def test_no_mount_hides_what_the_image_installs() -> None:
    container = _daemonset()["spec"]["template"]["spec"]["containers"][0]
    mounts = [m["mountPath"] for m in container["volumeMounts"]]
    assert "/driver-root" in mounts  # where the comment says NVML is found
    installed = [
        "/usr/local",
        "/tmp/wheels",
        *(shlex.split(w)[0] for w in _instructions("WORKDIR")),
    ]
    for mount in mounts:
        for path in installed:
            assert path != mount
            assert not path.startswith(mount.rstrip("/") + "/")


def test_wheel_contents_rejects_test_code_and_missing_package_data() -> None:
    good = [
        "dra_driver/__init__.py",
        "dra_driver/data/deviceclasses.yaml",
        "dra_driver/scheduling/cel/cel.lark",
        "dra_driver/py.typed",
        "dra_gpu-0.1.0.dist-info/entry_points.txt",
    ]
    assert problems(good) == []
    assert problems([*good, "tests/fakes/kubelet.py"]) == [
        "test code in the wheel: tests/fakes/kubelet.py",
        "not in a package: tests/fakes/kubelet.py",
    ]
    assert problems([n for n in good if "deviceclasses" not in n]) == [
        "missing from the wheel: dra_driver/data/deviceclasses.yaml"
    ]
