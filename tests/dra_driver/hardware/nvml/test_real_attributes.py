"""The pynvml backend's answers behind NVIDIA's coherent-platform attributes, at the pynvml seam:
`nvmlDeviceGetAddressingMode` on Grace superchips, on other GPUs and on drivers without the
call; a Hopper GPU in MIG mode whose NVML lists no GPU-instance profile; and the NVLink fabric
(`nvmlDeviceGetGpuFabricInfoV` v3/v2, `nvmlDeviceGetGpuFabricInfo` v1, neither)."""

from __future__ import annotations

import ctypes
import logging

import pytest

from dra_driver.errors import NvmlError
from dra_driver.hardware.nvml import codes, fabric
from dra_driver.hardware.nvml.fabric import FabricInfo
from dra_driver.hardware.nvml.real import RealNvml
from dra_driver.hardware.simulated.hardware import SimHardware
from dra_driver.hardware.simulated.shapes import load_shape
from tests.fakes import FakePynvml, fake_pynvml

REAL_LOGGER = "dra_driver.hardware.nvml.real"


def open_node(shape: str) -> tuple[RealNvml, FakePynvml]:
    lib = fake_pynvml(SimHardware(load_shape(shape)))
    return RealNvml(lib, sysfs_root=None), lib


@pytest.mark.parametrize("shape", ["gh200-node", "gb200-node", "gb300-node"])
def test_grace_superchips_report_ats(shape: str) -> None:
    nvml, lib = open_node(shape)
    gpus = nvml.gpus()
    assert [gpu.addressing_mode for gpu in gpus] == ["ATS"] * len(gpus)
    assert lib.calls["nvmlDeviceGetAddressingMode"] == len(gpus)


def test_gpus_off_coherent_platforms_have_no_addressing_mode() -> None:
    nvml, lib = open_node("dgx-h100")
    assert {gpu.addressing_mode for gpu in nvml.gpus()} == {None}
    assert lib.calls["nvmlDeviceGetAddressingMode"] == 8  # asked; NVML answered NOT_SUPPORTED


def test_hmm_and_none_are_named_as_go_nvlib_names_them(monkeypatch: pytest.MonkeyPatch) -> None:
    nvml, lib = open_node("gh200-node")
    for value, name in [(codes.ADDRESSING_MODE_HMM, "HMM"), (codes.ADDRESSING_MODE_NONE, "None")]:
        monkeypatch.setattr(lib, "nvmlDeviceGetAddressingMode", lambda handle, v=value: v)
        assert nvml.gpus()[0].addressing_mode == name


def test_a_driver_without_the_call_is_no_error_and_says_so_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    nvml, lib = open_node("gh200-node")
    lib.missing_functions.add("nvmlDeviceGetAddressingMode")
    with caplog.at_level(logging.INFO, logger=REAL_LOGGER):
        first = nvml.gpus()
        again = nvml.gpus()
    assert [gpu.addressing_mode for gpu in first + again] == [None] * 4
    lines = [r for r in caplog.records if "nvmlDeviceGetAddressingMode" in r.getMessage()]
    assert len(lines) == 1
    assert lines[0].levelno == logging.INFO
    assert "no GPU publishes addressingMode" in lines[0].getMessage()


def test_a_pynvml_without_the_wrapper_is_no_error(monkeypatch: pytest.MonkeyPatch) -> None:
    nvml, lib = open_node("gb200-node")
    monkeypatch.setattr(lib, "nvmlDeviceGetAddressingMode", None)  # nvidia-ml-py before 12.550
    assert {gpu.addressing_mode for gpu in nvml.gpus()} == {None}


def test_an_unknown_mode_is_left_out_with_a_warning(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    nvml, lib = open_node("gh200-node")
    monkeypatch.setattr(lib, "nvmlDeviceGetAddressingMode", lambda handle: 7)
    with caplog.at_level(logging.WARNING, logger=REAL_LOGGER):
        assert nvml.gpus()[0].addressing_mode is None
    assert "unknown mode 7" in caplog.text


def test_a_lost_gpu_is_still_an_error_naming_the_call() -> None:
    nvml, lib = open_node("gh200-node")
    lib.fail_next("nvmlDeviceGetAddressingMode", codes.ERROR_GPU_IS_LOST)
    with pytest.raises(NvmlError, match="read the addressing mode of GPU-") as caught:
        nvml.gpus()
    assert caught.value.code == codes.ERROR_GPU_IS_LOST


@pytest.mark.parametrize("shape", ["gh200-node", "gb200-node", "dgx-h100"])
def test_mig_on_without_listed_profiles_reads_as_no_profiles_and_no_instances(shape: str) -> None:
    nvml, lib = open_node(shape)
    uuid = nvml.gpus()[0].uuid
    assert nvml.set_mig_mode(uuid, True) == codes.SUCCESS
    # Every GPU-instance profile enum answers NOT_SUPPORTED, as on a GPU whose driver lists none.
    lib.fail_next("nvmlDeviceGetGpuInstanceProfileInfo", codes.ERROR_NOT_SUPPORTED, times=10_000)
    gpu = nvml.gpu(uuid)
    assert (gpu.mig_capable, gpu.mig_enabled, gpu.mig_toggle_supported) == (True, True, True)
    assert nvml.gpu_instance_profiles(uuid) == []
    assert nvml.gpu_instances(uuid) == []
    assert nvml.mig_devices(uuid) == []


# --- NVLink fabric ---------------------------------------------------------------------------

RACK = "00000000-0000-0000-0000-000000000001"


def test_gb200_fabric_is_read_with_the_v3_struct() -> None:
    nvml, lib = open_node("gb200-node")
    gpus = nvml.gpus()
    assert {gpu.fabric for gpu in gpus} == {
        FabricInfo(
            cluster_uuid=RACK,
            clique_id=0,
            state=fabric.STATE_COMPLETED,
            status=codes.SUCCESS,
            health_mask=fabric.HEALTHY_MASK,
            health_summary=fabric.HEALTH_HEALTHY,
        )
    }
    assert lib.calls["nvmlDeviceGetGpuFabricInfoV"] == 4
    assert lib.calls["nvmlDeviceGetGpuFabricInfo"] == 0
    assert nvml.fabric_info(gpus[2].uuid) == gpus[2].fabric
    assert gpus[0].fabric is not None
    assert gpus[0].fabric.clique == f"{RACK}.0"


def test_a_driver_without_v3_answers_with_v2() -> None:
    nvml, lib = open_node("gb200-node")
    lib.fabric_versions = {lib.nvmlGpuFabricInfo_v2}
    info = nvml.gpus()[0].fabric
    assert info is not None
    assert (info.health_mask, info.health_summary) == (fabric.HEALTHY_MASK, None)
    assert lib.calls["nvmlDeviceGetGpuFabricInfoV"] == 2 * 4  # per GPU: v3 refused, then v2


def test_a_driver_without_the_v_call_answers_with_v1() -> None:
    nvml, lib = open_node("gb200-node")
    lib.missing_functions.add("nvmlDeviceGetGpuFabricInfoV")
    info = nvml.gpus()[0].fabric
    assert info is not None
    assert (info.cluster_uuid, info.clique_id, info.state) == (RACK, 0, fabric.STATE_COMPLETED)
    assert (info.health_mask, info.health_summary) == (None, None)


def test_a_driver_without_any_fabric_call_is_no_error_and_says_so_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    nvml, lib = open_node("gb200-node")
    lib.missing_functions.update({"nvmlDeviceGetGpuFabricInfoV", "nvmlDeviceGetGpuFabricInfo"})
    with caplog.at_level(logging.INFO, logger=REAL_LOGGER):
        assert {gpu.fabric for gpu in nvml.gpus()} == {None}
        assert nvml.fabric_info(nvml.gpus()[0].uuid) is None
    lines = [r for r in caplog.records if "GetGpuFabricInfo" in r.getMessage()]
    assert len(lines) == 1
    assert lines[0].levelno == logging.INFO


def test_gpus_without_fabric_answer_not_supported_quietly(caplog: pytest.LogCaptureFixture) -> None:
    nvml, lib = open_node("gh200-node")
    with caplog.at_level(logging.INFO, logger=REAL_LOGGER):
        assert {gpu.fabric for gpu in nvml.gpus()} == {None}
    assert "Fabric" not in caplog.text
    assert lib.calls["nvmlDeviceGetGpuFabricInfoV"] == 2  # one NOT_SUPPORTED per GPU


def test_a_lost_gpu_is_an_error_naming_the_fabric_call() -> None:
    nvml, lib = open_node("gb200-node")
    lib.fail_next("nvmlDeviceGetGpuFabricInfoV", codes.ERROR_GPU_IS_LOST)
    with pytest.raises(NvmlError, match="read the NVLink fabric info of GPU-") as caught:
        nvml.gpus()
    assert caught.value.code == codes.ERROR_GPU_IS_LOST


def test_the_fake_checks_the_struct_version_as_nvml_does() -> None:
    _, lib = open_node("gb200-node")
    lib.nvmlInit()
    handle = lib.nvmlDeviceGetHandleByIndex(0)
    wrong = lib.c_nvmlGpuFabricInfo_v2_t()
    wrong.version = 0
    with pytest.raises(lib.NVMLError) as caught:
        lib.nvmlDeviceGetGpuFabricInfoV(handle, ctypes.byref(wrong))
    assert caught.value.value == codes.ERROR_ARGUMENT_VERSION_MISMATCH
    lib.nvmlShutdown()
