"""The real plugin process: device health, fast re-publishing, metrics, probes, Events.

Each test drives `dra-gpu kubelet-plugin` on a simulated dgx-h100 over its
sockets and its local cluster directory, as a kubelet, an admin and a
Prometheus server would. Waits poll with deadlines; nothing asserts on time.
"""

from __future__ import annotations

import re
import subprocess
import sys
import urllib.request
from collections.abc import Callable, Iterator
from typing import Any

import grpc
import pytest
import yaml
from grpc_health.v1 import health_pb2, health_pb2_grpc

from dra_driver.node.health import TAINT_KEY
from kubelet_plugin.gen.dra_health.v1alpha1 import api_pb2 as dra_health_pb2
from kubelet_plugin.gen.dra_health.v1alpha1 import api_pb2_grpc as dra_health_grpc
from kubelet_plugin.service import ClaimRef
from tests.fakes import PluginProcess, make_allocated_claim

pytestmark = pytest.mark.slow

DEADLINE = 30.0  # generous: a loaded 2-core machine runs several plugins at once


def _wait(condition: Callable[[], bool], what: str, plugin: PluginProcess) -> None:
    plugin.wait_for(condition, what, timeout=DEADLINE)


def _devices(plugin: PluginProcess) -> dict[str, dict[str, Any]]:
    return {
        device["name"]: device
        for obj in plugin.cluster.list_resource_slices(node_name=plugin.node_name)
        for device in obj["spec"].get("devices") or []
    }


def _tainted(plugin: PluginProcess) -> dict[str, list[dict[str, Any]]]:
    return {name: d["taints"] for name, d in _devices(plugin).items() if d.get("taints")}


def _of_gpu(names: Iterator[str] | list[str], minor: int) -> set[str]:
    return {n for n in names if n == f"gpu-{minor}" or n.startswith(f"gpu-{minor}-")}


def _sim_health(plugin: PluginProcess, *args: str) -> None:
    subprocess.run(
        [
            sys.executable,
            "-m",
            "dra_driver.cli",
            "sim",
            "health",
            f"--sim-state={plugin.sim_state}",
            *args,
        ],
        check=True,
        capture_output=True,
    )


def _log_value(plugin: PluginProcess, pattern: str) -> str:
    found: list[str] = []

    def logged() -> bool:
        match = re.search(pattern, plugin.log_path.read_text(errors="replace"))
        if match:
            found.append(match.group(1))
        return bool(match)

    _wait(logged, f"log line {pattern!r}", plugin)
    return found[0]


class _HealthStream:
    """The kubelet's side of NodeWatchResources: the latest health per device."""

    def __init__(self, plugin: PluginProcess) -> None:
        self._channel = grpc.insecure_channel(f"unix:{plugin.dra_socket}")
        stub = dra_health_grpc.DRAResourceHealthStub(self._channel)
        self._responses = stub.NodeWatchResources(
            dra_health_pb2.NodeWatchResourcesRequest(), timeout=DEADLINE * 3
        )

    def until(self, condition: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
        for response in self._responses:
            latest = {d.device.device_name: d for d in response.devices}
            if condition(latest):
                return latest
        raise AssertionError("the health stream ended")

    def close(self) -> None:
        self._responses.cancel()
        self._channel.close()


def test_an_injected_xid_taints_exactly_its_gpus_devices_until_it_is_healthy_again() -> None:
    """Until the GPU is reset: NVML sends no event then, the recovery-action poll notices it,
    and the taint goes without a plugin restart."""
    args = ["--dynamic-mig", "--health-poll-interval=0.5"]
    with PluginProcess(extra_args=args, publish_interval=300) as plugin:
        _wait(lambda: bool(_devices(plugin)), "ResourceSlices", plugin)
        all_names = list(_devices(plugin))
        gpu3 = _of_gpu(all_names, 3)
        assert "gpu-3" in gpu3
        assert len(gpu3) > 1  # the GPU and its partitionable MIG devices
        stream = _HealthStream(plugin)
        try:
            first = stream.until(lambda h: True)
            assert set(first) == set(all_names)
            assert {d.health for d in first.values()} == {dra_health_pb2.HEALTHY}

            _sim_health(plugin, "--gpu=3", "--xid=13")  # an application error: no recovery
            _sim_health(plugin, "--gpu=3", "--xid=79")
            _wait(lambda: set(_tainted(plugin)) == gpu3, "taints on GPU 3's devices", plugin)
            taint = _tainted(plugin)["gpu-3"]
            assert [(t["key"], t["value"], t["effect"]) for t in taint] == [
                (TAINT_KEY, "xid-79", "NoSchedule")
            ]
            assert taint[0]["timeAdded"].endswith("Z")
            health = stream.until(lambda h: h["gpu-3"].health == dra_health_pb2.UNHEALTHY)
            assert "Xid 79" in health["gpu-3"].message
            unhealthy = {n for n, d in health.items() if d.health == dra_health_pb2.UNHEALTHY}
            assert unhealthy == gpu3

            _sim_health(plugin, "--gpu=3", "--healthy")  # reset: no event, the poll sees it
            _wait(lambda: not _tainted(plugin), "taints removed", plugin)
            stream.until(lambda h: {d.health for d in h.values()} == {dra_health_pb2.HEALTHY})
        finally:
            stream.close()


def test_slices_deleted_behind_the_plugins_back_come_back_owned_by_the_node() -> None:
    plugin = PluginProcess(publish_interval=300)  # only the watch can bring them back quickly
    nodes = plugin.cluster_root / "nodes"
    nodes.mkdir()
    (nodes / f"{plugin.node_name}.yaml").write_text(
        f"apiVersion: v1\nkind: Node\nmetadata:\n  name: {plugin.node_name}\n"
        "  uid: 5d0f3c52-7c55-4a43-9e0e-0d3a1f6b2c11\n"
    )
    with plugin:
        _wait(lambda: bool(_devices(plugin)), "ResourceSlices", plugin)
        slices = plugin.cluster.list_resource_slices(node_name=plugin.node_name)
        for obj in slices:
            assert obj["metadata"]["ownerReferences"] == [
                {
                    "apiVersion": "v1",
                    "kind": "Node",
                    "name": plugin.node_name,
                    "uid": "5d0f3c52-7c55-4a43-9e0e-0d3a1f6b2c11",
                    "controller": True,
                }
            ]
        names = sorted(obj["metadata"]["name"] for obj in slices)
        for name in names:
            plugin.cluster.delete_resource_slice(name)
        assert not plugin.cluster.list_resource_slices(node_name=plugin.node_name)
        _wait(
            lambda: (
                sorted(
                    obj["metadata"]["name"]
                    for obj in plugin.cluster.list_resource_slices(node_name=plugin.node_name)
                )
                == names
            ),
            "the deleted slices",
            plugin,
        )


def test_metrics_count_prepares_and_the_grpc_probe_follows_the_sockets() -> None:
    args = ["--metrics-address=127.0.0.1:0", "--healthcheck-port=0"]
    with PluginProcess(extra_args=args) as plugin:
        metrics_port = _log_value(plugin, r"serving metrics on http://127\.0\.0\.1:(\d+)/metrics")
        probe_port = _log_value(plugin, r"serving the gRPC health service on port (\d+)")

        uid = "4a1d7c3e-0000-4000-8000-000000000001"
        plugin.store_claim(make_allocated_claim("ok", "default", uid, [("gpu", "gpu-1")]))
        bad = "4a1d7c3e-0000-4000-8000-000000000002"
        plugin.store_claim(make_allocated_claim("bad", "default", bad, [("gpu", "gpu-99")]))
        ok_ref = ClaimRef("default", uid, "ok")
        bad_ref = ClaimRef("default", bad, "bad")
        results = plugin.client.prepare([ok_ref, bad_ref])
        assert not results[uid].error
        assert "gpu-99" in results[bad].error

        with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics") as answer:
            text = answer.read().decode()
        assert 'dra_gpu_requests_total{operation="prepare",result="error"} 1.0' in text
        assert 'dra_gpu_claims_total{operation="prepare",result="success"} 1.0' in text
        assert 'dra_gpu_request_duration_seconds_count{operation="prepare"} 1.0' in text
        assert 'dra_gpu_request_duration_seconds_bucket{le="0.5",operation="prepare"}' in text
        assert "dra_gpu_prepared_claims 1.0" in text
        assert "dra_gpu_prepared_devices 1.0" in text
        assert re.search(r'dra_gpu_slice_publish_total\{result="success"\} [1-9]', text)

        # The failed claim got a Warning Event with the driver's reason.
        events_dir = plugin.cluster_root / "events" / "default"
        _wait(lambda: any(events_dir.glob("bad.*.yaml")), "an Event on claim bad", plugin)
        event = yaml.safe_load(next(events_dir.glob("bad.*.yaml")).read_text())
        assert event["reason"] == "PrepareFailed"
        assert event["type"] == "Warning"
        assert event["regarding"]["kind"] == "ResourceClaim"
        assert "gpu-99" in event["note"]

        plugin.client.unprepare([ok_ref, bad_ref])

        with grpc.insecure_channel(f"127.0.0.1:{probe_port}") as channel:
            probe = health_pb2_grpc.HealthStub(channel)

            def status() -> int:
                answer = probe.Check(health_pb2.HealthCheckRequest(service=""), timeout=20)
                return int(answer.status)

            assert status() == health_pb2.HealthCheckResponse.NOT_SERVING  # not registered
            plugin.client.register()
            assert status() == health_pb2.HealthCheckResponse.SERVING
            plugin.dra_socket.unlink()  # the kubelet can no longer reach the plugin
            assert status() == health_pb2.HealthCheckResponse.NOT_SERVING
