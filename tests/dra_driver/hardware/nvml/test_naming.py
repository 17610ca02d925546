"""go-nvlib's MIG profile names: checked against the names `nvidia-smi` prints."""

from __future__ import annotations

import pytest

from dra_driver.errors import NvmlError
from dra_driver.hardware.nvml import codes
from dra_driver.hardware.nvml.naming import ci_profile_offered, mig_memory_gb, mig_profile_name
from dra_driver.hardware.simulated.models import MODELS

MIB = 2**20


@pytest.mark.parametrize(
    ("gi_enum", "memory_mib", "total_mib", "name"),
    [
        (0x0, 4864, 40960, "1g.5gb"),  # A100-40GB
        (0x9, 9856, 40960, "1g.10gb"),  # A100-40GB 1_SLICE_REV2: no suffix
        (0x4, 40192, 40960, "7g.40gb"),
        (0x7, 9984, 81559, "1g.10gb+me"),  # H100: total rounds up to 80 GiB
        (0x4, 81152, 81559, "7g.80gb"),
        (0x2, 47488, 95830, "3g.47gb"),  # H100 NVL
        (0x4, 143104, 143771, "7g.141gb"),  # H200
        (0x8, 11968, 24576, "2g.12gb+me"),  # A30
        (0xD, 24192, 97887, "1g.24gb-me"),  # RTX PRO 6000
        (0xF, 24192, 97887, "1g.24gb+me.all"),
        (0xC, 97408, 97887, "4g.96gb+gfx"),
    ],
)
def test_gi_names_match_nvidia_smi(
    gi_enum: int, memory_mib: int, total_mib: int, name: str
) -> None:
    assert mig_profile_name(gi_enum, memory_mib, total_mib * MIB) == name


def test_every_reference_profile_name_is_reproduced() -> None:
    for model in MODELS.values():
        for profile in model.gi_profiles:
            assert (
                mig_profile_name(profile.enum, profile.memory_mib, model.memory_bytes)
                == profile.name
            ), (model.key, profile.id)


def test_compute_instance_names_carry_both_slice_counts_and_the_suffix() -> None:
    total = 40960 * MIB
    assert mig_profile_name(0x2, 19968, total, ci_slices=1) == "1c.3g.20gb"
    assert mig_profile_name(0x2, 19968, total, ci_slices=3) == "3g.20gb"
    assert mig_profile_name(0x8, 11968, 24576 * MIB, ci_slices=1) == "1c.2g.12gb+me"


def test_memory_rounds_to_eighths_then_half_away_from_zero() -> None:
    # 1/16 of a 40 GiB device: ceil to 1/8 -> 5 GB, not 2.5
    assert mig_memory_gb(2560, 40960 * MIB) == 5
    # exactly half a GiB step rounds up: 1/8 of 4 GiB = 0.5 -> 1
    assert mig_memory_gb(512, 4096 * MIB) == 1


def test_bad_inputs_are_nvml_errors() -> None:
    with pytest.raises(NvmlError) as excinfo:
        mig_profile_name(0x42, 4864, 40960 * MIB)
    assert excinfo.value.code == codes.ERROR_INVALID_ARGUMENT
    with pytest.raises(NvmlError, match="not positive"):
        mig_memory_gb(4864, 0)


@pytest.mark.parametrize(
    ("gi_slices", "offered"),
    [(7, [1, 2, 3, 4, 7]), (4, [1, 2, 4]), (3, [1, 2, 3]), (2, [1, 2]), (1, [1])],
)
def test_ci_sizes_follow_go_nvlib(gi_slices: int, offered: list[int]) -> None:
    assert [c for c in range(1, 9) if ci_profile_offered(gi_slices, c)] == offered
