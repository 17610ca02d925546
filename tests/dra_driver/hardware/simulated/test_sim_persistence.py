"""The state file: several SimHardware objects (and processes) share one simulated node."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from dra_driver.errors import ConfigError, NvmlError
from dra_driver.hardware.nvml.interface import Placement
from dra_driver.hardware.simulated.hardware import SimHardware
from dra_driver.hardware.simulated.shapes import load_shape


def test_a_second_object_sees_the_first_ones_instances(tmp_path: Path):
    state = tmp_path / "node.json"
    first = SimHardware(load_shape("dgx-h100"), node_name="n1", state_path=state)
    first.set_mig_mode(0, True)
    gi = first.create_gpu_instance(0, 9, Placement(4, 4))
    ci = first.create_compute_instance(0, gi.id, 2)

    second = SimHardware(load_shape("dgx-h100"), node_name="n1", state_path=state)
    assert second.mig_mode(0) == (1, 1)
    assert second.gpu_instances(0) == first.gpu_instances(0)
    assert second.mig_device_uuid(0, gi.id, ci.id) == ci.uuid
    assert second.boot_id() == first.boot_id()

    second.destroy_compute_instance(0, gi.id, ci.id)
    second.destroy_gpu_instance(0, gi.id)
    assert first.gpu_instances(0) == []  # the first object re-reads the changed file


def test_state_file_wins_over_node_name_and_needs_no_shape(tmp_path: Path):
    state = tmp_path / "node.json"
    first = SimHardware(load_shape("a30-node"), node_name="real-name", state_path=state)
    reopened = SimHardware(None, node_name="other-name", state_path=state)
    assert [g.uuid for g in reopened.gpus()] == [g.uuid for g in first.gpus()]
    assert reopened.gpu_count() == 4


def test_state_file_is_versioned_json(tmp_path: Path):
    state = tmp_path / "node.json"
    SimHardware(load_shape("l4-node"), state_path=state)
    doc = json.loads(state.read_text())
    assert doc["version"] == 1
    assert [g["model_key"] for g in doc["gpus"]] == ["L4"] * 4


def test_the_state_directory_is_created(tmp_path: Path):
    state = tmp_path / "deep" / "er" / "node.json"
    SimHardware(load_shape("l4-node"), state_path=state)
    assert state.exists()


def test_a_shape_that_does_not_match_the_state_file_is_refused(tmp_path: Path):
    state = tmp_path / "node.json"
    SimHardware(load_shape("dgx-h100"), state_path=state)
    with pytest.raises(ConfigError) as err:
        SimHardware(load_shape("dgx-a100-40gb"), state_path=state)
    assert str(state) in str(err.value)
    assert "dgx-a100-40gb" in str(err.value)


def test_no_shape_and_no_state_file_is_a_config_error(tmp_path: Path):
    with pytest.raises(ConfigError, match="no node shape"):
        SimHardware(None, state_path=tmp_path / "missing.json")


@pytest.mark.parametrize(
    "content",
    [
        b"{not json",
        b"\xff\xfe",
        b"[]",
        b'{"version": 99}',
        b'{"version": 1, "node_name": "x"}',
    ],
)
def test_a_corrupt_state_file_is_a_config_error_naming_the_file(tmp_path: Path, content: bytes):
    state = tmp_path / "node.json"
    state.write_bytes(content)
    with pytest.raises(ConfigError) as err:
        SimHardware(load_shape("dgx-h100"), state_path=state)
    assert str(state) in str(err.value)


def test_a_state_file_with_an_impossible_instance_is_corrupt(tmp_path: Path):
    state = tmp_path / "node.json"
    hw = SimHardware(load_shape("dgx-a100-40gb"), state_path=state)
    hw.create_gpu_instance(0, 19, Placement(0, 1))
    doc = json.loads(state.read_text())
    doc["gpus"][0]["gis"][0]["profile_id"] = 4  # no such profile on A100
    state.write_text(json.dumps(doc))
    with pytest.raises(ConfigError, match="unknown profile 4"):
        SimHardware(load_shape("dgx-a100-40gb"), state_path=state)


def test_a_failed_operation_leaves_the_state_file_alone(tmp_path: Path):
    state = tmp_path / "node.json"
    hw = SimHardware(load_shape("dgx-a100-40gb"), state_path=state)
    hw.create_gpu_instance(0, 0, Placement(0, 8))
    before = state.read_bytes()
    with pytest.raises(NvmlError, match="overlaps"):
        hw.create_gpu_instance(0, 19, Placement(0, 1))
    assert state.read_bytes() == before


def test_two_objects_on_one_file_lose_no_updates(tmp_path: Path):
    state = tmp_path / "node.json"
    objects = [SimHardware(load_shape("dgx-a100-40gb"), state_path=state) for _ in range(2)]
    errors: list[BaseException] = []

    def fill(hw: SimHardware, gpu: int) -> None:
        try:
            for start in range(7):
                hw.create_gpu_instance(gpu, 19, Placement(start, 1))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=fill, args=(hw, i)) for i, hw in enumerate(objects)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert errors == []
    fresh = SimHardware(None, state_path=state)
    assert len(fresh.gpu_instances(0)) == 7
    assert len(fresh.gpu_instances(1)) == 7


def test_another_process_sees_and_changes_the_same_node(tmp_path: Path):
    state = tmp_path / "node.json"
    hw = SimHardware(load_shape("dgx-h100"), state_path=state)
    hw.set_mig_mode(1, True)
    gi = hw.create_gpu_instance(1, 19, Placement(0, 1))
    script = (
        "import sys\n"
        "from pathlib import Path\n"
        "from dra_driver.hardware.nvml.interface import Placement\n"
        "from dra_driver.hardware.simulated.hardware import SimHardware\n"
        "hw = SimHardware(None, state_path=Path(sys.argv[1]))\n"
        "print(','.join(str(g.id) for g in hw.gpu_instances(1)))\n"
        "hw.create_gpu_instance(1, 19, Placement(1, 1))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script, str(state)],
        check=True,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.stdout.strip() == str(gi.id)
    assert [g.id for g in hw.gpu_instances(1)] == [7, 8]
