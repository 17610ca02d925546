"""SimHardware refuses what MIG hardware refuses, with NVML's codes, and hands out real ids."""

from __future__ import annotations

import uuid

import pytest

from dra_driver.errors import NvmlError
from dra_driver.hardware.nvml import codes
from dra_driver.hardware.nvml.interface import Placement
from dra_driver.hardware.simulated.hardware import SimHardware
from dra_driver.hardware.simulated.models import MODELS
from dra_driver.hardware.simulated.shapes import NodeShape, ShapeGpu, load_shape


def hopper(mig: bool = True) -> SimHardware:
    hw = SimHardware(load_shape("dgx-h100"))
    if mig:
        assert hw.set_mig_mode(0, True) == codes.SUCCESS
    return hw


def a100() -> SimHardware:
    return SimHardware(load_shape("dgx-a100-40gb"))  # boots with MIG on


def rtx_pro() -> SimHardware:
    """A one-GPU RTX PRO 6000 Blackwell node in MIG mode (12-unit placement grid)."""
    slot = ShapeGpu(MODELS["RTX-PRO-6000-BW-SERVER"], True, "0000:18:00.0", 0, "pci0000:10")
    return SimHardware(NodeShape("rtx-pro", (slot,), "580.95.05", 13000))


def a30() -> SimHardware:
    return SimHardware(load_shape("a30-node"))  # boots with MIG on


def nvml_code(call, *args) -> int:
    with pytest.raises(NvmlError) as err:
        call(*args)
    return err.value.code


# -- GPU instance creation -------------------------------------------------------------


def test_gi_create_needs_mig_on():
    hw = hopper(mig=False)
    assert nvml_code(hw.create_gpu_instance, 0, 19, Placement(0, 1)) == codes.ERROR_NOT_SUPPORTED


def test_gi_create_needs_a_listed_placement():
    hw = a100()
    assert nvml_code(hw.create_gpu_instance, 0, 9, Placement(2, 4)) == codes.ERROR_INVALID_ARGUMENT
    assert nvml_code(hw.create_gpu_instance, 0, 19, Placement(7, 1)) == codes.ERROR_INVALID_ARGUMENT
    assert hw.gpu_instances(0) == []


def test_gi_create_with_an_unknown_profile_id():
    hw = a100()
    assert nvml_code(hw.create_gpu_instance, 0, 4, Placement(0, 1)) == codes.ERROR_INVALID_ARGUMENT


def test_overlapping_placement_is_insufficient_resources():
    hw = a100()
    hw.create_gpu_instance(0, 5, Placement(0, 4))  # 4g.20gb on slices 0-3
    code = nvml_code(hw.create_gpu_instance, 0, 14, Placement(2, 2))
    assert code == codes.ERROR_INSUFFICIENT_RESOURCES
    hw.create_gpu_instance(0, 9, Placement(4, 4))  # 3g next to the 4g is fine (R510+)


def test_occupied_placement_is_insufficient_resources_not_already_exists():
    hw = a100()
    hw.create_gpu_instance(0, 19, Placement(3, 1))
    code = nvml_code(hw.create_gpu_instance, 0, 19, Placement(3, 1))
    assert code == codes.ERROR_INSUFFICIENT_RESOURCES


def test_profile_instance_count_is_enforced():
    hw = a100()
    hw.create_gpu_instance(0, 20, Placement(0, 1))  # 1g.5gb+me, instanceCount 1
    code = nvml_code(hw.create_gpu_instance, 0, 20, Placement(1, 1))
    assert code == codes.ERROR_INSUFFICIENT_RESOURCES
    hw.create_gpu_instance(0, 19, Placement(1, 1))  # plain 1g still fits


def test_only_one_media_extension_instance_across_profiles():
    hw = a30()
    hw.create_gpu_instance(0, 21, Placement(0, 1))  # 1g.6gb+me
    code = nvml_code(hw.create_gpu_instance, 0, 6, Placement(2, 2))  # 2g.12gb+me
    assert code == codes.ERROR_INSUFFICIENT_RESOURCES
    hw.create_gpu_instance(0, 5, Placement(2, 2))  # plain 2g fits


def test_me_all_instance_blocks_everything_but_no_me_profiles():
    hw = rtx_pro()
    hw.create_gpu_instance(0, 65, Placement(0, 3))  # 1g.24gb+me.all
    assert (
        nvml_code(hw.create_gpu_instance, 0, 14, Placement(3, 3))
        == codes.ERROR_INSUFFICIENT_RESOURCES
    )
    hw.create_gpu_instance(0, 67, Placement(3, 3))  # 1g.24gb-me
    hw2 = rtx_pro()
    hw2.create_gpu_instance(0, 14, Placement(0, 3))
    assert (
        nvml_code(hw2.create_gpu_instance, 0, 65, Placement(3, 3))
        == codes.ERROR_INSUFFICIENT_RESOURCES
    )


def test_remaining_capacity_counts_what_still_fits():
    hw = a100()
    hw.create_gpu_instance(0, 5, Placement(0, 4))
    assert hw.gi_remaining_capacity(0, 9) == 1
    assert hw.gi_remaining_capacity(0, 19) == 3
    assert hw.gi_remaining_capacity(0, 0) == 0


# -- GPU instance ids ------------------------------------------------------------------


def test_h100_seven_1g_instances_get_ids_7_to_13():
    hw = hopper()
    ids = [hw.create_gpu_instance(0, 19, Placement(s, 1)).id for s in range(7)]
    assert ids == [7, 8, 9, 10, 11, 12, 13]


def test_eight_slot_ids_by_placement_size():
    hw = hopper()
    assert hw.create_gpu_instance(0, 0, Placement(0, 8)).id == 0
    hw.destroy_gpu_instance(0, 0)
    assert hw.create_gpu_instance(0, 9, Placement(4, 4)).id == 2
    assert hw.create_gpu_instance(0, 9, Placement(0, 4)).id == 1
    hw.destroy_gpu_instance(0, 1)
    hw.destroy_gpu_instance(0, 2)
    two_slot = [hw.create_gpu_instance(0, 14, Placement(s, 2)).id for s in (0, 2, 4)]
    assert two_slot == [3, 4, 5]
    assert hw.create_gpu_instance(0, 15, Placement(6, 2)).id == 6


def test_a30_ids_match_observed_ones():
    hw = a30()
    assert hw.create_gpu_instance(0, 5, Placement(2, 2)).id == 2
    assert hw.create_gpu_instance(0, 14, Placement(0, 1)).id == 3
    assert hw.create_gpu_instance(0, 14, Placement(1, 1)).id == 4
    assert hw.create_gpu_instance(1, 0, Placement(0, 4)).id == 0


def test_rtx_pro_ids_on_the_twelve_unit_grid():
    hw = rtx_pro()
    assert [hw.create_gpu_instance(0, 14, Placement(s, 3)).id for s in (0, 3, 6, 9)] == [3, 4, 5, 6]
    for gi in (3, 4):
        hw.destroy_gpu_instance(0, gi)
    assert hw.create_gpu_instance(0, 5, Placement(0, 6)).id == 1


def test_a_freed_gi_id_is_reused():
    hw = hopper()
    for s in range(3):
        hw.create_gpu_instance(0, 19, Placement(s, 1))
    hw.destroy_gpu_instance(0, 8)
    assert hw.create_gpu_instance(0, 19, Placement(1, 1)).id == 8


# -- destroy ---------------------------------------------------------------------------


def test_destroying_a_gi_with_compute_instances_is_in_use():
    hw = a100()
    gi = hw.create_gpu_instance(0, 9, Placement(0, 4))
    ci = hw.create_compute_instance(0, gi.id, 2)
    assert nvml_code(hw.destroy_gpu_instance, 0, gi.id) == codes.ERROR_IN_USE
    assert [g.id for g in hw.gpu_instances(0)] == [gi.id]
    hw.destroy_compute_instance(0, gi.id, ci.id)
    hw.destroy_gpu_instance(0, gi.id)
    assert hw.gpu_instances(0) == []


def test_destroying_what_does_not_exist_is_not_found():
    hw = a100()
    assert nvml_code(hw.destroy_gpu_instance, 0, 3) == codes.ERROR_NOT_FOUND
    gi = hw.create_gpu_instance(0, 19, Placement(0, 1))
    assert nvml_code(hw.destroy_compute_instance, 0, gi.id, 0) == codes.ERROR_NOT_FOUND
    assert nvml_code(hw.gpu_instance, 0, 3) == codes.ERROR_NOT_FOUND


def test_instance_queries_need_mig_on():
    hw = hopper(mig=False)
    assert nvml_code(hw.gpu_instances, 0) == codes.ERROR_NOT_SUPPORTED
    assert nvml_code(hw.gpu_instance, 0, 0) == codes.ERROR_NOT_SUPPORTED
    assert nvml_code(hw.gi_remaining_capacity, 0, 19) == codes.ERROR_NOT_SUPPORTED
    assert hw.max_mig_devices(0) == 0


# -- compute instances -----------------------------------------------------------------


def test_ci_profile_must_be_offered_by_the_gi():
    hw = a100()
    gi = hw.create_gpu_instance(0, 5, Placement(0, 4))  # 4g: offers 1c, 2c, 4g (no 3c)
    assert nvml_code(hw.create_compute_instance, 0, gi.id, 2) == codes.ERROR_NOT_SUPPORTED
    assert nvml_code(hw.create_compute_instance, 0, gi.id, 9) == codes.ERROR_INVALID_ARGUMENT
    assert nvml_code(hw.ci_profile_by_enum, 0, gi.id, 2) == codes.ERROR_NOT_SUPPORTED
    assert nvml_code(hw.ci_profile_by_enum, 0, gi.id, 42) == codes.ERROR_INVALID_ARGUMENT
    assert hw.ci_profile_by_enum(0, gi.id, 3).name == "4g.20gb"


def test_ci_counts_and_compute_slices_are_enforced():
    hw = a100()
    gi = hw.create_gpu_instance(0, 14, Placement(0, 2))  # 2g: 1c x2 or 2g x1
    first = hw.create_compute_instance(0, gi.id, 0)
    assert hw.ci_remaining_capacity(0, gi.id, 0) == 1
    assert hw.ci_remaining_capacity(0, gi.id, 1) == 0
    code = nvml_code(hw.create_compute_instance, 0, gi.id, 1)
    assert code == codes.ERROR_INSUFFICIENT_RESOURCES
    second = hw.create_compute_instance(0, gi.id, 0)
    assert (first.placement, second.placement) == (Placement(0, 1), Placement(1, 1))
    code = nvml_code(hw.create_compute_instance, 0, gi.id, 0)
    assert code == codes.ERROR_INSUFFICIENT_RESOURCES


def test_ci_ids_are_the_lowest_free_in_the_gi():
    hw = hopper()
    gi = hw.create_gpu_instance(0, 0, Placement(0, 8))
    assert [hw.create_compute_instance(0, gi.id, 0).id for _ in range(3)] == [0, 1, 2]
    hw.destroy_compute_instance(0, gi.id, 1)
    assert hw.create_compute_instance(0, gi.id, 0).id == 1
    assert [c.id for c in hw.compute_instances(0, gi.id)] == [0, 1, 2]


def test_hopper_1g_20gb_gi_takes_ci_profile_7_with_26_sms_or_profile_0_with_16():
    hw = hopper()
    gi = hw.create_gpu_instance(0, 15, Placement(0, 2))
    ci = hw.create_compute_instance(0, gi.id, 7)
    assert (ci.id, ci.profile.multiprocessors, ci.profile.name) == (0, 26, "1g.20gb")
    code = nvml_code(hw.create_compute_instance, 0, gi.id, 0)
    assert code == codes.ERROR_INSUFFICIENT_RESOURCES  # the single compute slice is taken
    hw.destroy_compute_instance(0, gi.id, ci.id)
    assert hw.create_compute_instance(0, gi.id, 0).profile.multiprocessors == 16


def test_ci_view_carries_everything_a_mig_device_needs():
    hw = a100()
    gi = hw.create_gpu_instance(3, 9, Placement(4, 4))
    ci = hw.create_compute_instance(3, gi.id, 1)  # 2c.3g.20gb
    assert (ci.gpu_index, ci.gpu_minor, ci.gpu_uuid) == (3, 3, hw.gpu(3).uuid)
    assert ci.gi_profile.name == "3g.20gb"
    assert ci.profile.name == "2c.3g.20gb"
    assert ci.gi_placement == Placement(4, 4)
    assert ci.gi_cap_minor == 3 + 135 * 3 + 9 * gi.id
    assert ci.cap_minor == ci.gi_cap_minor + 1 + ci.id
    assert hw.compute_instance(3, gi.id, ci.id) == ci


# -- MIG devices and UUIDs -------------------------------------------------------------


def test_mig_uuid_is_a_version_5_uuid_that_changes_when_recreated():
    hw = a100()
    gi = hw.create_gpu_instance(0, 19, Placement(0, 1))
    first = hw.create_compute_instance(0, gi.id, 0).uuid
    assert first.startswith("MIG-")
    assert uuid.UUID(first.removeprefix("MIG-")).version == 5
    assert hw.mig_device_uuid(0, gi.id, 0) == first
    hw.destroy_compute_instance(0, gi.id, 0)
    hw.destroy_gpu_instance(0, gi.id)
    gi = hw.create_gpu_instance(0, 19, Placement(0, 1))
    second = hw.create_compute_instance(0, gi.id, 0).uuid
    assert second != first
    assert hw.find_mig_device(second).gpu_instance_id == gi.id
    assert nvml_code(hw.find_mig_device, first) == codes.ERROR_NOT_FOUND


def test_mig_device_slots_are_sparse_and_bounded():
    hw = a100()
    assert hw.max_mig_devices(0) == 7
    cis = []
    for s in range(3):
        gi = hw.create_gpu_instance(0, 19, Placement(s, 1))
        cis.append(hw.create_compute_instance(0, gi.id, 0))
    assert [c.mig_index for c in cis] == [0, 1, 2]
    hw.destroy_compute_instance(0, cis[1].gpu_instance_id, cis[1].id)
    assert hw.mig_device_by_index(0, 2) == cis[2]
    assert nvml_code(hw.mig_device_by_index, 0, 1) == codes.ERROR_NOT_FOUND
    assert nvml_code(hw.mig_device_by_index, 0, 7) == codes.ERROR_INVALID_ARGUMENT


# -- profiles and GPUs without MIG ------------------------------------------------------


def test_profiles_answer_by_enum_and_by_id_even_with_mig_off():
    hw = hopper(mig=False)
    assert hw.gi_profile_by_enum(0, 0x0).id == 19
    assert hw.gi_profile_by_id(0, 15).name == "1g.20gb"
    assert hw.possible_placements(0, 14) == (Placement(0, 2), Placement(2, 2), Placement(4, 2))
    assert nvml_code(hw.gi_profile_by_enum, 0, 0x5) == codes.ERROR_NOT_SUPPORTED  # 8_SLICE
    assert nvml_code(hw.gi_profile_by_enum, 0, 0x12) == codes.ERROR_INVALID_ARGUMENT
    assert nvml_code(hw.gi_profile_by_id, 0, 1) == codes.ERROR_INVALID_ARGUMENT
    assert [p.id for p in hw.ci_profiles(0, 15)] == [0, 7]


def test_gpu_without_mig_answers_not_supported():
    hw = SimHardware(load_shape("l4-node"))
    assert nvml_code(hw.mig_mode, 0) == codes.ERROR_NOT_SUPPORTED
    assert nvml_code(hw.set_mig_mode, 0, True) == codes.ERROR_NOT_SUPPORTED
    assert nvml_code(hw.gi_profile_by_enum, 0, 0) == codes.ERROR_NOT_SUPPORTED
    assert nvml_code(hw.create_gpu_instance, 0, 19, Placement(0, 1)) == codes.ERROR_NOT_SUPPORTED
    assert hw.gi_profiles(0) == ()
    assert hw.max_mig_devices(0) == 0


def test_gpus_are_named_by_index_or_uuid():
    hw = a100()
    uuid_3 = hw.gpu(3).uuid
    assert hw.index_of(uuid_3) == 3
    gi = hw.create_gpu_instance(uuid_3, 19, Placement(0, 1))
    assert gi.gpu_index == 3
    assert nvml_code(hw.gpu, 8) == codes.ERROR_INVALID_ARGUMENT
    assert nvml_code(hw.gpu, "GPU-00000000-0000-0000-0000-000000000000") == codes.ERROR_NOT_FOUND


def test_a_failed_operation_changes_nothing():
    hw = a100()
    gi = hw.create_gpu_instance(0, 14, Placement(0, 2))
    hw.create_compute_instance(0, gi.id, 1)
    before = hw.snapshot()
    nvml_code(hw.create_compute_instance, 0, gi.id, 0)
    nvml_code(hw.create_gpu_instance, 0, 14, Placement(0, 2))
    assert hw.snapshot() == before
