"""The fake /proc tree: real formats, read back with the plugin's own HostInfo."""

from __future__ import annotations

from pathlib import Path

import pytest

from dra_driver.errors import ConfigError
from dra_driver.hardware.nvml.interface import Placement
from dra_driver.hardware.simulated.hardware import SimHardware
from dra_driver.hardware.simulated.shapes import load_shape
from dra_driver.node.host import HostInfo


def node(tmp_path: Path, shape: str = "dgx-a100-40gb") -> tuple[SimHardware, HostInfo]:
    proc = tmp_path / "proc"
    return SimHardware(load_shape(shape), proc_root=proc), HostInfo(proc)


def test_proc_devices_has_the_nvidia_majors(tmp_path: Path):
    _, host = node(tmp_path)
    assert host.char_major("nvidia") == 195
    assert host.char_major("nvidiactl") == 195
    assert host.char_major("nvidia-caps") == 236
    assert host.char_major("nvidia-uvm") == 511
    assert host.char_major("nvidia-caps-imex-channels") == 510  # IMEX channels (ComputeDomains)
    text = (tmp_path / "proc" / "devices").read_text()
    assert text.startswith("Character devices:\n  1 mem\n")
    assert "\n\nBlock devices:\n" in text


def test_global_mig_capabilities(tmp_path: Path):
    node(tmp_path)
    caps = tmp_path / "proc" / "driver" / "nvidia" / "capabilities" / "mig"
    assert (caps / "config").read_text() == (
        "DeviceFileMinor: 1\nDeviceFileMode: 256\nDeviceFileModify: 1\n"
    )
    assert (caps / "monitor").read_text() == (
        "DeviceFileMinor: 2\nDeviceFileMode: 292\nDeviceFileModify: 1\n"
    )


def test_user_guide_example_gpu0_gi1_ci0_to_2_are_caps_12_to_15(tmp_path: Path):
    hw, host = node(tmp_path)
    gi = hw.create_gpu_instance(0, 9, Placement(0, 4))  # 3g -> GI 1
    assert gi.id == 1
    cis = [hw.create_compute_instance(0, gi.id, 0) for _ in range(3)]
    assert host.mig_cap(0, 1) == (12, 292)
    assert [host.mig_cap(0, 1, ci.id) for ci in cis] == [(13, 292), (14, 292), (15, 292)]
    assert [ci.cap_minor for ci in cis] == [13, 14, 15]


def test_cap_files_follow_the_gpu_minor(tmp_path: Path):
    hw, host = node(tmp_path)
    gi = hw.create_gpu_instance(6, 19, Placement(4, 1))  # GI 11
    ci = hw.create_compute_instance(6, gi.id, 0)
    assert gi.id == 11
    assert host.mig_cap(6, 11) == (3 + 135 * 6 + 9 * 11, 292)
    assert host.mig_cap(6, 11, ci.id) == (3 + 135 * 6 + 9 * 11 + 1 + ci.id, 292)


def test_cap_files_disappear_with_their_instances(tmp_path: Path):
    hw, host = node(tmp_path)
    gi = hw.create_gpu_instance(2, 14, Placement(2, 2))
    ci = hw.create_compute_instance(2, gi.id, 1)
    gi_access = host.mig_cap_path(2, gi.id)
    ci_access = host.mig_cap_path(2, gi.id, ci.id)
    assert gi_access.exists()
    assert ci_access.exists()
    hw.destroy_compute_instance(2, gi.id, ci.id)
    assert not ci_access.exists()
    assert not ci_access.parent.exists()
    assert gi_access.exists()
    hw.destroy_gpu_instance(2, gi.id)
    assert not gi_access.exists()
    assert not gi_access.parent.exists()


def test_reboot_changes_boot_id_and_clears_cap_files(tmp_path: Path):
    hw, host = node(tmp_path)
    gi = hw.create_gpu_instance(0, 19, Placement(0, 1))
    hw.create_compute_instance(0, gi.id, 0)
    before = host.boot_id()
    assert before == hw.boot_id()
    hw.reboot()
    assert host.boot_id() == hw.boot_id() != before
    caps = tmp_path / "proc" / "driver" / "nvidia" / "capabilities"
    assert list(caps.glob("gpu*/mig/gi*/access")) == []
    assert (caps / "mig" / "config").exists()


def test_no_proc_root_writes_nothing(tmp_path: Path):
    hw = SimHardware(load_shape("dgx-a100-40gb"))
    hw.create_gpu_instance(0, 19, Placement(0, 1))
    assert hw.proc_root is None
    assert list(tmp_path.iterdir()) == []


def test_an_unwritable_proc_root_is_a_config_error(tmp_path: Path):
    blocker = tmp_path / "proc"
    blocker.write_text("not a directory")
    with pytest.raises(ConfigError) as err:
        SimHardware(load_shape("l4-node"), proc_root=blocker)
    assert str(blocker) in str(err.value)


def test_mig_minors_lists_every_possible_capability_as_the_driver_does(tmp_path: Path):
    node(tmp_path)
    minors = HostInfo(tmp_path / "proc").mig_minors()
    assert (minors["config"], minors["monitor"]) == (1, 2)
    # The MIG user guide's last line, and the DRA driver's comment examples.
    assert minors["gpu31/gi14/ci7/access"] == 4322
    assert minors["gpu3/gi3/ci3/access"] == 439
    assert minors["gpu6/gi11/ci5/access"] == 918
    assert len(minors) == 2 + 32 * 15 * 9
