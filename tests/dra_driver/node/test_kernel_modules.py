"""nvidia-uvm loaded from the driver root and its device nodes made, as NVIDIA's stack does."""

from __future__ import annotations

import errno
import subprocess
from pathlib import Path
from typing import Any

import pytest

from dra_driver.composition.hardware import SimulatedNode, open_simulated
from dra_driver.errors import CdiError, KernelModuleError
from dra_driver.node.kernel_modules import (
    RETRY_AFTER_S,
    KernelSetup,
    Modprobe,
    NodeSpec,
    create_nodes,
)

REFUSAL = "FATAL: Module nvidia-uvm not found in directory /lib/modules/6.8.0-49-generic"


@pytest.fixture
def node(tmp_path: Path) -> SimulatedNode:
    """An L4 node whose driver was installed after boot: no nvidia-uvm yet."""
    made = open_simulated("l4-node", sim_state=tmp_path / "hw.json")
    made.sim.set_modules(unloaded=["nvidia-uvm"])
    return made


class _Loads:
    """A ModuleLoader that counts its calls and passes them to the simulated node."""

    def __init__(self, node: SimulatedNode) -> None:
        self.node = node
        self.calls: list[str] = []

    def load(self, module: str) -> None:
        self.calls.append(module)
        self.node.sim.load_module(module)


class _Mknod:
    def __init__(self) -> None:
        self.made: list[tuple[str, int, int, int]] = []

    def __call__(self, path: Path, major: int, minor: int, mode: int) -> None:
        path.write_text("")  # stands for the node (mknod of a char device needs CAP_MKNOD)
        self.made.append((str(path), major, minor, mode))


def test_modprobe_runs_in_a_chroot_of_the_driver_root_as_the_toolkit_does() -> None:
    seen: list[list[str]] = []

    def run(argv: list[str], **_: Any) -> subprocess.CompletedProcess[str]:
        seen.append(argv)
        return subprocess.CompletedProcess(argv, 1, "", f"modprobe: {REFUSAL}\n")

    with pytest.raises(KernelModuleError) as failed:
        Modprobe(Path("/driver-root"), run=run).load("nvidia-uvm")
    assert seen == [["chroot", "/driver-root", "/sbin/modprobe", "nvidia-uvm"]]
    assert str(failed.value) == (
        f"`chroot /driver-root /sbin/modprobe nvidia-uvm` failed (exit status 1): "
        f"modprobe: {REFUSAL}"
    )
    assert Modprobe(Path("/")).argv("nvidia-uvm") == ["/sbin/modprobe", "nvidia-uvm"]
    with pytest.raises(KernelModuleError, match="not an NVIDIA kernel module"):
        Modprobe(Path("/")).load("ext4")


def test_a_missing_uvm_is_loaded_and_its_nodes_made_at_start(
    node: SimulatedNode, tmp_path: Path
) -> None:
    host = node.hardware.host
    assert "nvidia-uvm" not in host.char_majors()
    loads, mknod = _Loads(node), _Mknod()
    (tmp_path / "dev").mkdir()
    (tmp_path / "dev" / "nvidia-uvm-tools").write_text("")  # there already: left alone
    report = KernelSetup(host, loads, tmp_path / "dev", mknod=mknod).ensure()
    assert report.uvm_ready
    assert report.loaded == ("nvidia-uvm",)
    assert report.problems == ()
    uvm = host.char_major("nvidia-uvm")
    caps = host.char_major("nvidia-caps")
    assert mknod.made == [
        (str(tmp_path / "dev/nvidia-uvm"), uvm, 0, 0o666),
        # minors from mig-minors, modes from the capability files (mig/config is 0400)
        (str(tmp_path / "dev/nvidia-caps/nvidia-cap1"), caps, 1, 0o400),
        (str(tmp_path / "dev/nvidia-caps/nvidia-cap2"), caps, 2, 0o444),
    ]
    assert report.created == tuple(made[0] for made in mknod.made)
    assert "loaded nvidia-uvm; created" in report.summary()


def test_a_node_that_cannot_load_it_says_why_and_what_to_run(node: SimulatedNode) -> None:
    node.sim.set_modules(unloaded=["nvidia-uvm"], modprobe_error=REFUSAL)
    now = [1000.0]
    loads = _Loads(node)
    setup = KernelSetup(node.hardware.host, loads, None, clock=lambda: now[0])
    report = setup.ensure()
    assert not report.uvm_ready
    assert report.problem == f"`modprobe nvidia-uvm` failed: {REFUSAL}"

    host = node.hardware.host
    host.on_missing = setup.missing
    with pytest.raises(CdiError) as failed:  # what a Prepare gets
        host.char_major("nvidia-uvm")
    assert REFUSAL in str(failed.value)
    assert "run `nvidia-modprobe -u -c0` on the node" in str(failed.value)
    assert loads.calls == ["nvidia-uvm"]  # the first need within a minute of start: no retry

    now[0] += RETRY_AFTER_S
    node.sim.set_modules(unloaded=["nvidia-uvm"])  # the admin fixed what stopped modprobe
    assert host.char_major("nvidia-uvm") > 0  # on first need after that: loaded
    assert loads.calls == ["nvidia-uvm", "nvidia-uvm"]


def test_a_module_loaded_by_the_admin_is_seen_without_loading(node: SimulatedNode) -> None:
    node.sim.set_modules(unloaded=["nvidia-uvm"], modprobe_error=REFUSAL)
    loads = _Loads(node)
    setup = KernelSetup(node.hardware.host, loads, None)
    assert not setup.ensure().uvm_ready
    node.sim.set_modules(unloaded=[])  # `nvidia-modprobe -u -c0` on the host
    assert setup.ensure().uvm_ready
    assert loads.calls == ["nvidia-uvm"]


def test_a_read_only_dev_root_is_a_problem_reported_not_raised(tmp_path: Path) -> None:
    def refuse(path: Path, major: int, minor: int, mode: int) -> None:
        raise OSError(errno.EROFS, "Read-only file system")

    created, problems = create_nodes(tmp_path, [NodeSpec("nvidia-uvm", 511, 0, 0o666)], refuse)
    assert created == []
    assert problems == [f"mknod {tmp_path}/nvidia-uvm c 511 0: Read-only file system EROFS"]
