"""`dra-gpu mig status` shows what an admin needs: mode, occupied slices, ids, UUIDs."""

from __future__ import annotations

import json

import pytest
import yaml

from dra_driver.cli import main
from dra_driver.composition.hardware import open_hardware
from dra_driver.hardware.nvml.interface import Placement
from dra_driver.node.mig_status import collect, render


def test_layout_shows_instances_free_slices_and_uuids() -> None:
    hw = open_hardware("sim:dgx-a100-40gb")
    uuid = hw.nvml.gpus()[0].uuid
    big = hw.nvml.create_gpu_instance(uuid, 9, Placement(0, 4))  # 3g.20gb
    mig = hw.nvml.create_compute_instance(uuid, big.id, 2)
    empty_gi = hw.nvml.create_gpu_instance(uuid, 15, Placement(6, 2))  # 1g.10gb, no CI

    text = render(collect(hw.nvml))
    first = text.split("\n\n")[0]
    assert "gpu-0  NVIDIA A100-SXM4-40GB" in first
    assert "MIG on" in first
    assert f"3g.20gb GI{big.id}" in first
    assert f"1g.10gb GI{empty_gi.id}" in first
    assert mig.uuid in first
    assert "42 SMs" in first
    assert "no compute instance" in first
    assert first.count("|.......") == 2  # slices 4 and 5 are free
    assert "no GPU instances" in text.split("\n\n")[1]


def test_modes_of_other_gpus() -> None:
    hopper = render(collect(open_hardware("sim:dgx-h100").nvml))
    assert "MIG off" in hopper
    assert "whole GPU" in hopper
    assert "no MIG" in render(collect(open_hardware("sim:l4-node").nvml))


def test_pending_ampere_mode_is_called_out() -> None:
    hw = open_hardware("sim:dgx-a100-80gb")  # boots with MIG off
    uuid = hw.nvml.gpus()[0].uuid
    hw.nvml.set_mig_mode(uuid, True)
    assert "pending on until a GPU reset" in render(collect(hw.nvml))


def test_cli_reads_a_shared_state_file(tmp_path, capsys) -> None:
    state = tmp_path / "hw.json"
    hw = open_hardware("sim:dgx-h100", sim_state=state)
    uuid = hw.nvml.gpus()[3].uuid
    hw.nvml.set_mig_mode(uuid, True)
    hw.nvml.create_gpu_instance(uuid, 19, Placement(2, 1))

    assert main(["mig", "status", "--nvml", "sim:dgx-h100", "--sim-state", str(state)]) == 0
    out = capsys.readouterr().out
    block = next(b for b in out.split("\n\n") if b.startswith("gpu-3"))
    assert "MIG on" in block
    assert "1g.10gb" in block


def test_sim_latency_is_refused_where_it_would_do_nothing(capsys) -> None:
    # mig status and inventory only read the hardware: a latency flag there was silently ignored.
    with pytest.raises(SystemExit) as exited:
        main(["mig", "status", "--nvml", "sim:dgx-h100", "--sim-latency", "gi-create=1"])
    assert exited.value.code == 2
    assert "unrecognized arguments: --sim-latency" in capsys.readouterr().err


@pytest.mark.parametrize("output", ["yaml", "json"])
def test_output_for_tools_names_each_instance_its_placement_and_mig_uuid(
    tmp_path, capsys, output: str
) -> None:
    state = tmp_path / "hw.json"
    hw = open_hardware("sim:dgx-h100", sim_state=state)
    uuid = hw.nvml.gpus()[3].uuid
    hw.nvml.set_mig_mode(uuid, True)
    gi = hw.nvml.create_gpu_instance(uuid, 19, Placement(2, 1))
    mig = hw.nvml.create_compute_instance(uuid, gi.id, 0)

    args = ["mig", "status", "--nvml", "sim:dgx-h100", "--sim-state", str(state), "-o", output]
    assert main(args) == 0
    out = capsys.readouterr().out
    data = json.loads(out) if output == "json" else yaml.safe_load(out)
    gpus = {g["name"]: g for g in data["gpus"]}
    assert gpus["gpu-0"]["migEnabled"] is False
    assert "gpuInstances" not in gpus["gpu-0"]
    gpu3 = gpus["gpu-3"]
    assert (gpu3["uuid"], gpu3["migEnabled"], gpu3["memorySlices"]) == (uuid, True, 8)
    [instance] = gpu3["gpuInstances"]
    assert instance["profile"] == "1g.10gb"
    assert instance["placement"] == {"start": 2, "size": 1}
    [compute] = instance["computeInstances"]
    assert compute["uuid"] == mig.uuid
    assert compute["uuid"].startswith("MIG-")
    assert compute["multiprocessors"] == 16
