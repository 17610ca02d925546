"""The plugin waits for a driver that is not installed yet, then serves.

The GPU Operator installs the driver after the plugin's pod starts. The
plugin (`--nvml real`, GPU Operator root read at another path) must log why
it is not ready, keep running without any socket (no crash loop, nothing
advertised), and start serving once `libnvidia-ml.so.1` and the driver files
appear, in the same process. Meanwhile the probes' port and /metrics answer
from the first second: alive (liveness SERVING, so the kubelet does not
restart it), not ready. The library is a real shared object compiled by the
test.
"""

from __future__ import annotations

import re
import shutil
import signal
import subprocess
import sys
import tempfile
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from dra_driver import DEFAULT_DRIVER_NAME
from dra_driver.hardware.simulated.driver_root import LIBRARY_DIRS, materialize_driver_root
from dra_driver.kube.local_store import LocalCluster
from kubelet_plugin.socket_names import dra_socket_path, registration_socket_path
from tests.dra_driver.hardware.nvml.fake_libnvml import install_libnvml
from tests.fakes import KubeletClient, wait_until

VERSION = "570.172.08"
POD_UID = "3e1b7f7a-9d2c-4b0e-a1f4-00000000c0de"
SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


@pytest.fixture
def work() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="dra-gpu-nodrv-", dir="/tmp"))  # short socket paths
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _wait(check: Callable[[], bool], what: str, log: Path, timeout: float = 30.0) -> None:
    wait_until(check, what, timeout=timeout, details=lambda: f"log:\n{log.read_text()[-3000:]}")


def _health(port: int, service: str) -> int:
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        request = health_pb2.HealthCheckRequest(service=service)
        return int(health_pb2_grpc.HealthStub(channel).Check(request, timeout=20).status)


def test_plugin_waits_for_the_driver_then_serves(work: Path) -> None:
    root = work / "driver-root"
    root.mkdir()
    kubelet = work / "kubelet"
    log = work / "plugin.log"
    args = [
        sys.executable,
        "-m",
        "dra_driver.cli",
        "-v",  # a debug line per attempt
        "kubelet-plugin",
        "--node-name=gpu-node-1",
        "--nvml=real",
        "--nvidia-driver-root=/run/nvidia/driver",
        f"--container-driver-root={root}",
        f"--cluster=local:{work / 'cluster'}",
        f"--kubelet-root={kubelet}",
        f"--cdi-root={work / 'cdi'}",
        "--driver-retry-interval=0.2",
        "--healthcheck-port=0",
        "--metrics-address=127.0.0.1:0",
        f"--pod-uid={POD_UID}",
    ]
    with log.open("wb") as out:
        process = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT)
    try:
        _wait(lambda: "NVIDIA driver not ready" in log.read_text(), "the not-ready line", log)
        _wait(lambda: "after attempt 3:" in log.read_text(), "several retries", log)
        text = log.read_text()
        assert process.poll() is None, text
        assert "no libnvidia-ml.so.1 in the library directories of driver root " in text
        assert f"/run/nvidia/driver (mounted at {root})" in text
        assert text.count("NVIDIA driver not ready") == 1  # logged once per reason
        registration = registration_socket_path(kubelet, DEFAULT_DRIVER_NAME, POD_UID)
        assert not registration.exists()
        assert not dra_socket_path(kubelet, DEFAULT_DRIVER_NAME, POD_UID).exists()
        assert LocalCluster(work / "cluster").list_resource_slices() == []

        # The probes' port and /metrics answer while the plugin waits: alive, not ready.
        port = int(re.findall(r"serving the gRPC health service on port (\d+)", text)[0])
        metrics = re.findall(r"serving metrics on http://127\.0\.0\.1:(\d+)/metrics", text)[0]
        assert _health(port, "liveness") == SERVING
        assert _health(port, "") == NOT_SERVING
        with urllib.request.urlopen(f"http://127.0.0.1:{metrics}/metrics", timeout=20) as answer:
            assert b"dra_gpu_requests_total" in answer.read()

        # The driver container finishes installing.
        staging = work / "staging"
        materialize_driver_root(staging, VERSION)
        install_libnvml(staging, LIBRARY_DIRS["debian"], version=VERSION, gpu_count=0)
        for item in staging.iterdir():
            shutil.move(str(item), root / item.name)

        _wait(registration.exists, "the registration socket", log)
        assert process.poll() is None  # the same process: no restart
        text = log.read_text()
        assert f"NVIDIA driver {VERSION} at driver root /run/nvidia/driver" in text
        assert "CDI hooks create-symlinks, enable-cuda-compat, update-ldcache" in text
        assert text.count("serving the gRPC health service") == 1  # one port, all along
        assert _health(port, "liveness") == SERVING
        assert _health(port, "") == NOT_SERVING  # until the kubelet registers it
        with KubeletClient(kubelet, DEFAULT_DRIVER_NAME, timeout=20, pod_uid=POD_UID) as client:
            client.register()
        assert _health(port, "") == SERVING
    finally:
        process.send_signal(signal.SIGTERM)
        code = process.wait(timeout=15)
    assert code == 0, log.read_text()[-3000:]
