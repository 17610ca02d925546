"""GPU sharing through the real plugin process: consumable shares and time-slicing.

The plugin runs with `--consumable-shares=2` on a simulated DGX H100; the
kubelet-like client talks to it over its Unix socket. Time-slice intervals
land in the simulated hardware state (what nvidia-smi would change on a real
node), so the tests read them back from there.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from dra_driver.hardware.simulated.hardware import SimHardware
from dra_driver.hardware.simulated.node_files import sim_proc_root
from kubelet_plugin.service import ClaimRef, UnprepareResult
from tests.fakes import PluginProcess, make_allocated_claim, make_opaque_config

pytestmark = pytest.mark.slow

SHARE_A = "aaaaaaaa-0000-4000-8000-000000000001"
SHARE_B = "bbbbbbbb-0000-4000-8000-000000000002"
SHARE_C = "cccccccc-0000-4000-8000-000000000003"


def time_slicing(interval: str) -> dict[str, Any]:
    return make_opaque_config(
        {
            "apiVersion": "resource.nvidia.com/v1beta1",
            "kind": "GpuConfig",
            "sharing": {"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": interval}},
        }
    )


def share(device: str, share_id: str, shares: str = "1") -> dict[str, Any]:
    return {
        "request": "gpu",
        "device": device,
        "shareID": share_id,
        "consumedCapacity": {"memory": "0", "shares": shares},
    }


def store(
    plugin: PluginProcess,
    index: int,
    results: list[Any],
    configs: tuple[dict[str, Any], ...] = (),
) -> ClaimRef:
    ref = ClaimRef("default", f"5a1e0000-0000-4000-8000-00000000000{index}", f"claim-{index}")
    plugin.store_claim(
        make_allocated_claim(ref.name, uid=ref.uid, results=results, configs=configs)
    )
    return ref


def hardware(plugin: PluginProcess) -> SimHardware:
    return SimHardware(state_path=plugin.sim_state, proc_root=sim_proc_root(plugin.sim_state))


def gpu_uuid(plugin: PluginProcess, minor: int) -> str:
    return next(gpu.uuid for gpu in hardware(plugin).gpus() if gpu.minor == minor)


def time_slice(plugin: PluginProcess, minor: int) -> int:
    return hardware(plugin).time_slice(gpu_uuid(plugin, minor))


def prepare_error(plugin: PluginProcess, ref: ClaimRef) -> str:
    return plugin.client.prepare([ref])[ref.uid].error


def unprepare(plugin: PluginProcess, *refs: ClaimRef) -> None:
    assert plugin.client.unprepare(list(refs)) == {ref.uid: UnprepareResult() for ref in refs}


def assert_nothing_left(plugin: PluginProcess) -> None:
    checkpoint = plugin.checkpoint()  # None: never written
    assert checkpoint is None or dict(checkpoint.claims) == {}
    assert plugin.cdi_files() == []


@pytest.fixture
def plugin() -> Iterator[PluginProcess]:
    with PluginProcess(  # shares only: no MPS host
        extra_args=["--consumable-shares=2"], mps_host=False
    ) as process:
        yield process


def test_time_slicing_is_applied_and_restored_to_default(plugin: PluginProcess) -> None:
    ref = store(plugin, 1, [("gpu", "gpu-0")], (time_slicing("Long"),))
    assert time_slice(plugin, 0) == 0
    hardware(plugin).set_compute_mode(gpu_uuid(plugin, 0), "PROHIBITED")

    assert prepare_error(plugin, ref) == ""
    assert time_slice(plugin, 0) == 3  # Long
    assert hardware(plugin).compute_mode(gpu_uuid(plugin, 0)) == "DEFAULT"
    assert time_slice(plugin, 1) == 0  # other GPUs untouched

    unprepare(plugin, ref)
    assert time_slice(plugin, 0) == 0
    assert_nothing_left(plugin)


def test_shares_get_their_own_cdi_device_and_share_id(plugin: PluginProcess) -> None:
    one = store(plugin, 1, [share("gpu-0", SHARE_A)])
    two = store(plugin, 2, [share("gpu-0", SHARE_B)])

    results = plugin.client.prepare([one, two])

    ids = set()
    for ref, share_id in ((one, SHARE_A), (two, SHARE_B)):
        (device,) = results[ref.uid].devices
        assert results[ref.uid].error == ""
        assert device.share_id == share_id
        assert device.cdi_device_ids == (
            plugin.base_cdi_id(),
            f"k8s.gpu.nvidia.com/claim={ref.uid}-gpu-0-{share_id}",
        )
        ids.add(device.cdi_device_ids[1])
    assert len(ids) == 2
    unprepare(plugin, one, two)
    assert_nothing_left(plugin)


def test_node_refuses_a_share_beyond_capacity_even_after_a_restart(plugin: PluginProcess) -> None:
    one = store(plugin, 1, [share("gpu-0", SHARE_A)])
    two = store(plugin, 2, [share("gpu-0", SHARE_B)])
    extra = store(plugin, 3, [share("gpu-0", SHARE_C)])
    assert prepare_error(plugin, one) == ""
    assert prepare_error(plugin, two) == ""
    plugin.restart()  # the accounting comes from the checkpoint

    error = prepare_error(plugin, extra)

    assert "ResourceClaim default/claim-3" in error
    assert f"share {SHARE_C} of device 'gpu-0' consumes 1 shares" in error
    assert "2 of its 2 are already held" in error
    assert plugin.cdi_spec_path(extra.uid).exists() is False
    unprepare(plugin, one)
    assert prepare_error(plugin, extra) == ""  # room again
    unprepare(plugin, two, extra)
    assert_nothing_left(plugin)


def test_node_refuses_mixing_exclusive_and_shared_use(plugin: PluginProcess) -> None:
    shared = store(plugin, 1, [share("gpu-0", SHARE_A)])
    exclusive = store(plugin, 2, [("gpu", "gpu-0")])
    assert prepare_error(plugin, shared) == ""

    assert "allocated exclusively, but it is being shared by claim default/claim-1" in (
        prepare_error(plugin, exclusive)
    )
    unprepare(plugin, shared)
    assert prepare_error(plugin, exclusive) == ""
    assert "claim default/claim-2" in prepare_error(plugin, shared)
    assert "holds the device exclusively" in prepare_error(plugin, shared)
    unprepare(plugin, exclusive, shared)
    assert_nothing_left(plugin)


def test_shared_gpu_keeps_its_interval_until_the_last_claim_goes(plugin: PluginProcess) -> None:
    one = store(plugin, 1, [share("gpu-0", SHARE_A)], (time_slicing("Medium"),))
    two = store(plugin, 2, [share("gpu-0", SHARE_B)], (time_slicing("Medium"),))
    assert prepare_error(plugin, one) == ""
    assert prepare_error(plugin, two) == ""
    assert time_slice(plugin, 0) == 2

    unprepare(plugin, one)
    assert time_slice(plugin, 0) == 2
    unprepare(plugin, two)
    assert time_slice(plugin, 0) == 0
    assert_nothing_left(plugin)


def test_conflicting_interval_on_a_shared_gpu_is_refused(plugin: PluginProcess) -> None:
    one = store(plugin, 1, [share("gpu-0", SHARE_A)], (time_slicing("Long"),))
    two = store(plugin, 2, [share("gpu-0", SHARE_B)], (time_slicing("Short"),))
    assert prepare_error(plugin, one) == ""

    error = prepare_error(plugin, two)

    assert "ResourceClaim default/claim-2" in error
    assert "asks for time-slice interval Short" in error
    assert "claim default/claim-1" in error
    assert "uses Long" in error
    assert time_slice(plugin, 0) == 3
    checkpoint = plugin.checkpoint()
    assert checkpoint is not None
    assert two.uid not in checkpoint.claims
    unprepare(plugin, one, two)
    assert time_slice(plugin, 0) == 0
    assert_nothing_left(plugin)
