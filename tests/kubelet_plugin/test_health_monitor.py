"""The health monitor and the kubelet health stream's answers, without processes."""

from __future__ import annotations

import threading
from collections.abc import Mapping

from dra_driver.hardware.nvml.interface import HealthEvent, HealthEventKind
from dra_driver.hardware.simulated.hardware import SimHardware
from dra_driver.hardware.simulated.nvml import SimNvml
from dra_driver.hardware.simulated.shapes import load_shape
from dra_driver.node.devices import build_devices
from dra_driver.node.health import Fault, HealthPolicy
from kubelet_plugin.gen.dra_health.v1alpha1 import api_pb2
from kubelet_plugin.health_monitor import HealthMonitor
from kubelet_plugin.health_stream import HEALTH_CHECK_TIMEOUT_SECONDS, health_response
from tests.fakes import a100_static_mig_inventory

NOW = 1_764_000_000


def test_the_response_lists_every_device_with_its_gpus_health() -> None:
    inventory = a100_static_mig_inventory()
    devices = build_devices(inventory)
    gpu0, gpu1, gpu2 = (g.info.uuid for g in inventory.gpus)
    faults = {gpu0: Fault("xid-79", "Xid 79 (GPU has fallen off the bus) on GPU x", NOW)}
    response = health_response("node-1", devices, faults, frozenset({gpu0, gpu1}), NOW + 5)
    by_name = {d.device.device_name: d for d in response.devices}
    assert set(by_name) == {d.name for d in devices}
    for device in devices:
        entry = by_name[device.name]
        assert entry.device.pool_name == "node-1"
        assert entry.last_updated_time == NOW + 5
        assert entry.health_check_timeout_seconds == HEALTH_CHECK_TIMEOUT_SECONDS
        expected = {
            gpu0: api_pb2.UNHEALTHY,
            gpu1: api_pb2.HEALTHY,
            gpu2: api_pb2.UNKNOWN,
        }[device.gpu.uuid]
        assert entry.health == expected
        if expected == api_pb2.UNHEALTHY:
            assert entry.message.startswith("Xid 79")


def test_the_monitor_reports_changes_and_wakes_waiters() -> None:
    hw = SimHardware(load_shape("l4-node"))
    uuid = hw.gpus()[0].uuid
    seen: list[Mapping[str, Fault]] = []
    monitor = HealthMonitor(
        SimNvml(hw), [uuid], HealthPolicy(), on_change=seen.append, clock=lambda: NOW
    )
    stop = threading.Event()
    thread = threading.Thread(target=monitor.run, args=(stop,), daemon=True)
    thread.start()
    try:
        version = monitor.snapshot()[0]
        while monitor.snapshot()[2] != {uuid}:  # registered
            version = monitor.wait_for_change(version, 5)
        hw.inject_health_event(0, "xid", 43)  # application error: no change
        hw.inject_health_event(0, "xid", 94)
        while not monitor.snapshot()[1]:
            version = monitor.wait_for_change(version, 5)
        assert monitor.snapshot()[1][uuid].reason == "xid-94"
        assert [set(faults) for faults in seen] == [{uuid}]
        assert not monitor.apply([HealthEvent(uuid, HealthEventKind.XID, xid=94)])
        assert monitor.apply([HealthEvent(uuid, HealthEventKind.RECOVERED)])
        assert seen[-1] == {}
    finally:
        stop.set()
        thread.join(timeout=10)
    assert not thread.is_alive()
