"""The health monitor and the kubelet health stream's answers, without processes."""

from __future__ import annotations

import importlib
import shutil
import tempfile
import threading
from collections.abc import Mapping
from pathlib import Path

import grpc
import pytest

from dra_driver.hardware.nvml import codes
from dra_driver.hardware.nvml.interface import HealthEvent, HealthEventKind
from dra_driver.hardware.nvml.real import RealNvml
from dra_driver.hardware.simulated.hardware import SimHardware
from dra_driver.hardware.simulated.nvml import SimNvml
from dra_driver.hardware.simulated.shapes import load_shape
from dra_driver.node.devices import build_devices
from dra_driver.node.health import Fault, HealthPolicy
from dra_driver.node.inventory import discover
from kubelet_plugin.gen.dra_health.v1alpha1 import api_pb2
from kubelet_plugin.health_monitor import HealthMonitor
from kubelet_plugin.health_stream import (
    HEALTH_CHECK_TIMEOUT_SECONDS,
    DeviceHealthServicer,
    health_response,
)
from kubelet_plugin.server import PluginServer
from tests.fakes import FakeDraService, a100_static_mig_inventory, fake_pynvml

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


@pytest.mark.parametrize("backend", ["sim", "pynvml"])
def test_a_reset_gpu_is_healthy_again_without_a_restart(backend: str) -> None:
    """NVML sends no event when a GPU recovers: the poll of its recovery action sees it."""
    hw = SimHardware(load_shape("l4-node"))
    uuid = hw.gpus()[0].uuid
    source = SimNvml(hw) if backend == "sim" else RealNvml(fake_pynvml(hw))
    seen: list[Mapping[str, Fault]] = []
    monitor = HealthMonitor(
        source, [uuid], HealthPolicy(), on_change=seen.append, clock=lambda: NOW, poll_interval=0.05
    )
    stop = threading.Event()
    thread = threading.Thread(target=monitor.run, args=(stop,), daemon=True)
    thread.start()
    try:
        version = monitor.snapshot()[0]
        while monitor.snapshot()[2] != {uuid}:
            version = monitor.wait_for_change(version, 5)
        hw.inject_health_event(0, "xid", 79)  # the driver now asks for a GPU reset
        while not monitor.snapshot()[1]:
            version = monitor.wait_for_change(version, 5)
        fault = monitor.snapshot()[1][uuid]
        assert fault.reason == "xid-79"
        assert "gpu-reset" in fault.message
        hw.recover(0)  # the admin reset the GPU
        while monitor.snapshot()[1]:
            version = monitor.wait_for_change(version, 5)
        assert seen[-1] == {}
    finally:
        stop.set()
        thread.join(timeout=10)


def test_the_poll_finds_lost_gpus_and_missed_faults() -> None:
    hw = SimHardware(load_shape("l4-node"))
    uuid = hw.gpus()[0].uuid
    monitor = HealthMonitor(SimNvml(hw), [uuid], HealthPolicy(), clock=lambda: NOW)
    assert not monitor.poll()
    hw.need_recovery(0, codes.RECOVERY_ACTION_NODE_REBOOT)  # a fault no event told of
    assert monitor.poll()
    assert monitor.snapshot()[1][uuid].reason == "recovery-node-reboot"
    hw.recover(0)
    assert monitor.poll()
    hw.need_recovery(0, codes.RECOVERY_ACTION_GPU_RESET, lost=True)
    assert monitor.poll()
    assert monitor.snapshot()[1][uuid].reason == "gpu-lost"
    assert not monitor.poll()
    hw.recover(0)
    assert monitor.poll()
    assert monitor.snapshot()[1] == {}


@pytest.mark.parametrize("version", ["v1", "v1alpha1"])
def test_both_health_services_answer_the_kubelets_protos(version: str) -> None:
    """Kubelet 1.37 calls v1.DRAResourceHealth, older ones v1alpha1: the same answers."""
    hw = SimHardware(load_shape("l4-node"))
    devices = build_devices(discover(SimNvml(hw)))
    uuid = hw.gpus()[0].uuid
    monitor = HealthMonitor(None, [uuid], HealthPolicy(), clock=lambda: NOW)
    monitor.apply([HealthEvent(uuid, HealthEventKind.GPU_LOST)])
    servicer = DeviceHealthServicer(monitor, pool_name="node-1", devices=lambda: devices)
    root = Path(tempfile.mkdtemp(prefix="hs-", dir="/tmp"))
    pb2 = importlib.import_module(f"kubelet_plugin.gen.dra_health.{version}.api_pb2")
    grpc_module = importlib.import_module(f"kubelet_plugin.gen.dra_health.{version}.api_pb2_grpc")
    try:
        with PluginServer(
            FakeDraService(), driver_name="gpu.nvidia.com", kubelet_root=root, health=servicer
        ) as server:
            with grpc.insecure_channel(f"unix:{server.dra_socket}") as channel:
                stub = grpc_module.DRAResourceHealthStub(channel)
                stream = stub.NodeWatchResources(pb2.NodeWatchResourcesRequest(), timeout=10)
                first = next(iter(stream))
                stream.cancel()
            assert isinstance(first, pb2.NodeWatchResourcesResponse)
            health = {d.device.device_name: d for d in first.devices}
            assert set(health) == {d.name for d in devices}
            lost = health[next(d.name for d in devices if d.gpu.uuid == uuid)]
            assert lost.health == pb2.UNHEALTHY
            assert lost.health_check_timeout_seconds == HEALTH_CHECK_TIMEOUT_SECONDS
            assert "is lost" in lost.message
    finally:
        shutil.rmtree(root, ignore_errors=True)
