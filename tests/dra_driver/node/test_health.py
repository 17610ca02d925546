"""Device health rules: which events make a GPU unhealthy, and which devices carry the taint."""

from __future__ import annotations

import random

import pytest

from controller.slices import build_resource_slices
from dra_driver.backoff import backoff_delay
from dra_driver.errors import ConfigError
from dra_driver.hardware.nvml import codes
from dra_driver.hardware.nvml.interface import HealthEvent, HealthEventKind
from dra_driver.node.devices import build_devices
from dra_driver.node.health import (
    DEFAULT_IGNORED_XIDS,
    TAINT_KEY,
    HealthPolicy,
    NodeHealth,
    device_taints,
    parse_xid_list,
)
from tests.fakes import a100_static_mig_inventory, dgx_h100_inventory

NOW = 1_764_000_000  # 2025-11-24T16:00:00Z


def xid(uuid: str, number: int) -> HealthEvent:
    return HealthEvent(gpu_uuid=uuid, kind=HealthEventKind.XID, xid=number)


def test_critical_xids_make_the_gpu_unhealthy_and_application_xids_do_not() -> None:
    health = NodeHealth(HealthPolicy())
    assert {13, 31, 43, 45, 68, 109} == DEFAULT_IGNORED_XIDS
    for number in sorted(DEFAULT_IGNORED_XIDS):
        assert not health.apply(xid("GPU-a", number), NOW)
    assert health.faults == {}
    assert health.apply(xid("GPU-a", 79), NOW)
    fault = health.faults["GPU-a"]
    assert fault.reason == "xid-79"
    assert "GPU has fallen off the bus" in fault.message
    assert fault.time_added == "2025-11-24T16:00:00Z"


def test_the_same_fault_again_keeps_its_first_time_and_a_new_one_replaces_it() -> None:
    health = NodeHealth(HealthPolicy())
    assert health.apply(xid("GPU-a", 79), NOW)
    assert not health.apply(xid("GPU-a", 79), NOW + 60)
    assert health.faults["GPU-a"].since == NOW
    assert health.apply(HealthEvent("GPU-a", HealthEventKind.DOUBLE_BIT_ECC), NOW + 120)
    assert health.faults["GPU-a"].reason == "double-bit-ecc"


def test_recovery_clears_only_that_gpu() -> None:
    health = NodeHealth(HealthPolicy())
    health.apply(HealthEvent("GPU-a", HealthEventKind.GPU_LOST), NOW)
    health.apply(xid("GPU-b", 48), NOW)
    assert health.apply(HealthEvent("GPU-a", HealthEventKind.RECOVERED), NOW)
    assert set(health.faults) == {"GPU-b"}
    assert not health.apply(HealthEvent("GPU-a", HealthEventKind.RECOVERED), NOW)


def test_the_admin_can_ignore_more_xids_and_choose_noexecute() -> None:
    policy = HealthPolicy(ignored_xids=parse_xid_list("79, 94"), taint_effect="NoExecute")
    health = NodeHealth(policy)
    assert not health.apply(xid("GPU-a", 79), NOW)
    assert health.apply(xid("GPU-a", 48), NOW)
    with pytest.raises(ConfigError, match="'x' is not an Xid number"):
        parse_xid_list("13,x")
    with pytest.raises(ConfigError, match="taint effect 'Evict'"):
        HealthPolicy(taint_effect="Evict")


def test_static_mig_devices_are_tainted_with_their_parent_gpu() -> None:
    inventory = a100_static_mig_inventory()
    devices = build_devices(inventory)
    gpu0 = inventory.gpus[0].info.uuid
    health = NodeHealth(HealthPolicy())
    health.apply(xid(gpu0, 95), NOW)
    taints = device_taints(devices, health.faults, "NoSchedule")
    on_gpu0 = {d.name for d in devices if d.gpu.uuid == gpu0}
    assert set(taints) == on_gpu0
    assert len(on_gpu0) == 4  # the four MIG devices of GPU 0 (MIG on: no whole-GPU device)
    assert taints[next(iter(on_gpu0))] == [
        {
            "key": TAINT_KEY,
            "value": "xid-95",
            "effect": "NoSchedule",
            "timeAdded": "2025-11-24T16:00:00Z",
        }
    ]


def test_tainted_partitionable_devices_validate_in_their_slices() -> None:
    inventory = dgx_h100_inventory()
    devices = build_devices(inventory, dynamic_mig=True)
    gpu2 = inventory.gpus[2].info.uuid
    health = NodeHealth(HealthPolicy(taint_effect="NoExecute"))
    health.apply(xid(gpu2, 48), NOW)
    taints = device_taints(devices, health.faults, "NoExecute")
    slices = build_resource_slices(  # checks every apiserver limit, taints included
        devices, driver="gpu.nvidia.com", node_name="node-1", taints=taints
    )
    tainted = {
        d["name"]
        for s in slices
        for d in s["spec"].get("devices") or []
        if d.get("taints") == taints.get(d["name"]) and d.get("taints")
    }
    assert tainted == {d.name for d in devices if d.gpu.uuid == gpu2}
    assert "gpu-2" in tainted
    assert len(tainted) > 1
    assert all(len(s["spec"].get("devices") or []) <= 64 for s in slices)


def test_backoff_grows_exponentially_to_a_cap_with_jitter() -> None:
    rand = random.Random(7)
    delays = [backoff_delay(n, base=1.0, cap=8.0, rand=rand) for n in range(1, 7)]
    for n, delay in enumerate(delays, start=1):
        ceiling = min(8.0, 2.0 ** (n - 1))
        assert ceiling / 2 <= delay <= ceiling
    assert len({round(d, 6) for d in delays}) == len(delays)  # jittered, not lock-step


# -- the GPU recovery action (NVIDIA PR #1441; upstream-facts 5.3) ---------------------


@pytest.mark.parametrize(
    ("action", "fatal"),
    [
        (codes.RECOVERY_ACTION_NONE, False),
        (codes.RECOVERY_ACTION_RECOVER_IMEX_DOMAIN, False),
        (codes.RECOVERY_ACTION_GPU_RESET, True),
        (codes.RECOVERY_ACTION_NODE_REBOOT, True),
        (codes.RECOVERY_ACTION_DRAIN_P2P, True),
        (codes.RECOVERY_ACTION_DRAIN_AND_RESET, True),
        (codes.RECOVERY_ACTION_BUS_RESET, True),  # pynvml 13.615 only
        (codes.RECOVERY_ACTION_SYSTEM_REBOOT, True),
        (42, True),  # an action this dra-gpu does not know yet
    ],
)
def test_an_xid_is_fatal_when_the_driver_asks_for_a_recovery(action: int, fatal: bool) -> None:
    policy = HealthPolicy()
    for number in (13, 79):  # the recovery action decides, not the Xid
        fault = policy.fault_of(xid("GPU-a", number), NOW, action)
        assert (fault is not None) == fatal
        if fault is not None:
            assert fault.reason == f"xid-{number}"
            assert "the driver asks for" in fault.message


def test_the_admins_ignore_list_wins_over_the_recovery_action() -> None:
    policy = HealthPolicy(ignored_xids=frozenset({79}))
    assert policy.fault_of(xid("GPU-a", 79), NOW, codes.RECOVERY_ACTION_NODE_REBOOT) is None
    assert policy.fault_of(xid("GPU-a", 48), NOW, codes.RECOVERY_ACTION_GPU_RESET) is not None


def test_without_a_recovery_action_the_application_xids_stay_ignored() -> None:
    """Drivers before R565 cannot report the action: NVIDIA's old default list applies."""
    policy = HealthPolicy()
    assert policy.fault_of(xid("GPU-a", 43), NOW, None) is None
    assert policy.fault_of(xid("GPU-a", 79), NOW, None) is not None


def test_a_polled_recovery_action_clears_and_raises_faults() -> None:
    health = NodeHealth(HealthPolicy())
    assert health.apply(xid("GPU-a", 79), NOW, codes.RECOVERY_ACTION_GPU_RESET)
    # Still waiting for the reset: nothing changes, the first fault stays.
    assert not health.recovery_action_seen("GPU-a", codes.RECOVERY_ACTION_GPU_RESET, NOW + 10)
    assert health.faults["GPU-a"].reason == "xid-79"
    # Reset: the driver asks for nothing any more.
    assert health.recovery_action_seen("GPU-a", codes.RECOVERY_ACTION_NONE, NOW + 20)
    assert health.faults == {}
    assert not health.recovery_action_seen("GPU-a", codes.RECOVERY_ACTION_NONE, NOW + 30)
    # A GPU that needs a recovery no event told of (missed while the plugin was down).
    assert health.recovery_action_seen("GPU-b", codes.RECOVERY_ACTION_NODE_REBOOT, NOW)
    assert health.faults["GPU-b"].reason == "recovery-node-reboot"
    assert "node-reboot" in health.faults["GPU-b"].message
