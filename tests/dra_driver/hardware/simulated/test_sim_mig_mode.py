"""MIG mode changes: pending on Ampere until a reset, immediate on Hopper; resets and reboots."""

from __future__ import annotations

import pytest

from dra_driver.errors import NvmlError
from dra_driver.hardware.nvml import codes
from dra_driver.hardware.nvml.interface import Placement
from dra_driver.hardware.simulated.hardware import SimHardware
from dra_driver.hardware.simulated.shapes import load_shape


def test_ampere_enable_stays_pending_until_the_gpu_is_reset():
    hw = SimHardware(load_shape("dgx-a100-80gb"))  # boots with MIG off
    assert hw.mig_mode(0) == (0, 0)
    assert hw.set_mig_mode(0, True) == codes.ERROR_RESET_REQUIRED
    assert hw.mig_mode(0) == (0, 1)
    assert hw.set_mig_mode(0, True) == codes.ERROR_RESET_REQUIRED  # still pending
    with pytest.raises(NvmlError) as err:
        hw.create_gpu_instance(0, 19, Placement(0, 1))
    assert err.value.code == codes.ERROR_NOT_SUPPORTED
    hw.reset_gpu(hw.gpu(0).uuid)
    assert hw.mig_mode(0) == (1, 1)
    assert hw.mig_mode(1) == (0, 0)  # only the reset GPU changed
    hw.create_gpu_instance(0, 19, Placement(0, 1))


def test_ampere_pending_change_can_be_cancelled():
    hw = SimHardware(load_shape("dgx-a100-80gb"))
    hw.set_mig_mode(0, True)
    assert hw.set_mig_mode(0, False) == codes.SUCCESS
    assert hw.mig_mode(0) == (0, 0)


def test_hopper_applies_mig_mode_at_once():
    hw = SimHardware(load_shape("dgx-h100"))
    assert hw.set_mig_mode(2, True) == codes.SUCCESS
    assert hw.mig_mode(2) == (1, 1)
    assert hw.max_mig_devices(2) == 7
    assert hw.set_mig_mode(2, False) == codes.SUCCESS
    assert hw.mig_mode(2) == (0, 0)


def test_mig_mode_cannot_change_while_gpu_instances_exist():
    hw = SimHardware(load_shape("dgx-h100"))
    hw.set_mig_mode(0, True)
    gi = hw.create_gpu_instance(0, 19, Placement(0, 1))
    assert hw.set_mig_mode(0, False) == codes.ERROR_IN_USE
    assert hw.mig_mode(0) == (1, 1)
    assert hw.set_mig_mode(0, True) == codes.SUCCESS  # asking for the current mode is fine
    hw.destroy_gpu_instance(0, gi.id)
    assert hw.set_mig_mode(0, False) == codes.SUCCESS


def test_a_busy_gpu_answers_in_use():
    hw = SimHardware(load_shape("dgx-h100"))
    hw.set_busy(1, True)
    assert hw.set_mig_mode(1, True) == codes.ERROR_IN_USE
    assert hw.mig_mode(1) == (0, 0)
    with pytest.raises(NvmlError) as err:
        hw.reset_gpu(1)
    assert err.value.code == codes.ERROR_IN_USE
    hw.set_busy(1, False)
    assert hw.set_mig_mode(1, True) == codes.SUCCESS


def test_reset_destroys_instances_and_turns_hopper_mig_off():
    hw = SimHardware(load_shape("dgx-h100"))
    hw.set_mig_mode(0, True)
    gi = hw.create_gpu_instance(0, 9, Placement(0, 4))
    hw.create_compute_instance(0, gi.id, 2)
    hw.reset_gpu(0)
    assert hw.mig_mode(0) == (0, 0)
    hw.set_mig_mode(0, True)
    assert hw.gpu_instances(0) == []


def test_reboot_keeps_ampere_mig_mode_but_not_hopper_and_drops_all_instances():
    ampere = SimHardware(load_shape("dgx-a100-40gb"))
    gi = ampere.create_gpu_instance(0, 0, Placement(0, 8))
    ampere.create_compute_instance(0, gi.id, 4)
    ampere.set_busy(0, True)
    boot = ampere.boot_id()
    ampere.reboot()
    assert ampere.boot_id() != boot
    assert ampere.mig_mode(0) == (1, 1)
    assert ampere.gpu_instances(0) == []
    assert ampere.snapshot().compute_instances == ()
    assert ampere.gpu(0).busy is False

    hopper = SimHardware(load_shape("dgx-h200"))
    hopper.set_mig_mode(0, True)
    hopper.create_gpu_instance(0, 19, Placement(0, 1))
    hopper.reboot()
    assert hopper.mig_mode(0) == (0, 0)
    hopper.set_mig_mode(0, True)
    assert hopper.gpu_instances(0) == []


def test_reboot_applies_a_pending_ampere_change():
    hw = SimHardware(load_shape("a30-node"))  # boots with MIG on
    assert hw.set_mig_mode(3, False) == codes.ERROR_RESET_REQUIRED
    hw.reboot()
    assert hw.mig_mode(3) == (0, 0)
    assert hw.mig_mode(0) == (1, 1)
