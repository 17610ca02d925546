"""`--consumable-shares` publishes devices exactly as NVIDIA's driver does, within API limits."""

from __future__ import annotations

import dataclasses

import pytest

from controller.slices import build_resource_slices
from dra_driver.errors import ConfigError
from dra_driver.node.consumable_shares import (
    ConsumableShares,
    apply_consumable_shares,
    parse_consumable_shares,
)
from dra_driver.node.devices import build_devices
from tests.fakes import a100_static_mig_inventory, dgx_h100_inventory

H100_MEMORY = {"value": "81559Mi"}


def _gpu0(shares: ConsumableShares | None) -> dict[str, object]:
    devices = build_devices(dgx_h100_inventory(), consumable_shares=shares)
    return next(d.to_api() for d in devices if d.name == "gpu-0")


def test_flag_values() -> None:
    assert parse_consumable_shares("") is None
    assert parse_consumable_shares("disabled") is None
    assert parse_consumable_shares("unlimited") == ConsumableShares("unlimited")
    assert parse_consumable_shares(" memory ") == ConsumableShares("memory")
    assert parse_consumable_shares("4") == ConsumableShares("shares", 4)
    for bad in ("0", "-1", "four", "1.5"):
        with pytest.raises(ConfigError, match="expected 'unlimited', 'memory' or a positive"):
            parse_consumable_shares(bad)


def test_without_the_flag_nothing_changes() -> None:
    device = _gpu0(None)
    assert "allowMultipleAllocations" not in device
    assert device["capacity"] == {"memory": H100_MEMORY}


def test_unlimited_memory_defaults_to_zero() -> None:
    device = _gpu0(ConsumableShares("unlimited"))
    assert device["allowMultipleAllocations"] is True
    assert device["capacity"] == {
        "memory": {
            **H100_MEMORY,
            "requestPolicy": {
                "default": "0",
                "validRange": {"min": "0", "max": "81559Mi", "step": "1Mi"},
            },
        }
    }


def test_memory_mode_defaults_to_all_of_it() -> None:
    device = _gpu0(ConsumableShares("memory"))
    assert device["capacity"] == {
        "memory": {
            **H100_MEMORY,
            "requestPolicy": {
                "default": "81559Mi",
                "validRange": {"min": "1Mi", "max": "81559Mi", "step": "1Mi"},
            },
        }
    }


def test_n_shares_adds_a_shares_capacity() -> None:
    capacity = _gpu0(ConsumableShares("shares", 4))["capacity"]
    assert capacity == {
        "memory": {
            **H100_MEMORY,
            "requestPolicy": {
                "default": "0",
                "validRange": {"min": "0", "max": "81559Mi", "step": "1Mi"},
            },
        },
        "shares": {
            "value": "4",
            "requestPolicy": {"default": "1", "validRange": {"min": "1", "max": "4", "step": "1"}},
        },
    }


def test_memory_is_rounded_down_to_whole_mebibytes() -> None:
    (device,) = [d for d in build_devices(dgx_h100_inventory()) if d.name == "gpu-0"]
    odd = dataclasses.replace(device, capacity={"memory": 5 * 2**20 + 123})
    (shared,) = apply_consumable_shares([odd], ConsumableShares("unlimited"))
    assert shared.capacity["memory"] == 5 * 2**20


def test_mig_devices_are_shared_too_and_keep_their_engine_counts() -> None:
    devices = build_devices(
        a100_static_mig_inventory(), consumable_shares=ConsumableShares("shares", 2)
    )
    mig = next(d.to_api() for d in devices if d.kind == "mig")
    assert mig["allowMultipleAllocations"] is True
    assert "requestPolicy" not in mig["capacity"]["multiprocessors"]
    assert "requestPolicy" in mig["capacity"]["memory"]
    assert mig["capacity"]["shares"]["value"] == "2"


@pytest.mark.parametrize("dynamic_mig", [False, True])
@pytest.mark.parametrize("mode", ["unlimited", "memory", "8"])
def test_slices_pass_the_apiserver_checks(dynamic_mig: bool, mode: str) -> None:
    shares = parse_consumable_shares(mode)
    for inventory in (dgx_h100_inventory(), a100_static_mig_inventory()):
        devices = build_devices(inventory, dynamic_mig=dynamic_mig, consumable_shares=shares)
        slices = build_resource_slices(devices, driver="gpu.nvidia.com", node_name="n")
        assert all(
            device.get("allowMultipleAllocations") is True
            for s in slices
            for device in s["spec"].get("devices", [])
        )
