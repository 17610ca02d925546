"""The MPS host runs the daemons the plugin's intents ask for, and only those.

A host serves a directory in a thread, with the simulated control daemon
(real processes); the plugin side is `MpsHostClient`, as the kubelet plugin
uses it. What a user of MPS would notice: a daemon starts with the claims'
ceiling, changes limits without a restart, stops exactly when its last
claim goes, survives a host restart (adopted, same process), comes back if
it dies, and a plugin gets a clear error when no host runs.
"""

from __future__ import annotations

import os
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from dra_driver.claims.mps import MpsLimits
from dra_driver.claims.mps_intent import DaemonState, intent_file_name, status_file_name
from dra_driver.errors import MpsError
from dra_driver.hardware.simulated.mps_control import read_state
from kubelet_plugin.gpu_locks import GpuLocks
from kubelet_plugin.mps_daemons import MpsDaemons, process_start_ticks
from kubelet_plugin.mps_host import MpsHost, serve
from kubelet_plugin.mps_intents import MpsHostClient
from tests.fakes import wait_until

SIM_CONTROL = (sys.executable, "-m", "dra_driver.hardware.simulated.mps_control")
GPU = "GPU-a2b56268-9156-5930-a747-ffec552f8b3a"
OTHER_GPU = "GPU-0d6ea5c1-29a4-4c3e-8f7e-3b1c2d4e5f60"


class HostThread:
    """An MPS host serving `root` in a thread; `stop()` ends it (the daemons stay)."""

    def __init__(self, root: Path, command: tuple[str, ...] = SIM_CONTROL) -> None:
        self.host = MpsHost(MpsDaemons(root, command))
        self._stop = threading.Event()
        ready = threading.Event()
        self._thread = threading.Thread(
            target=serve,
            args=(self.host, self._stop),
            kwargs={"interval": 0.2, "on_ready": ready.set},
            daemon=True,
        )
        self._thread.start()
        assert ready.wait(10), "the MPS host did not start"

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)


@pytest.fixture
def root() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="mpsh-", dir="/tmp") as work:
        yield Path(work) / "mps"
        _kill_daemons(Path(work) / "mps")


@pytest.fixture
def host(root: Path) -> Iterator[HostThread]:
    running = HostThread(root)
    yield running
    running.stop()


def _kill_daemons(root: Path) -> None:
    daemons = MpsDaemons(root, ())
    for paths in daemons.daemon_dirs():
        found = daemons.find(paths)
        if found is not None:
            os.kill(found.pid, signal.SIGKILL)


def _pid(client: MpsHostClient, uuid: str = GPU) -> int | None:
    found = MpsDaemons(client.root, ()).find(client.paths(uuid))
    return None if found is None else found.pid


def test_a_daemon_starts_with_the_ceiling_changes_limits_in_place_and_stops_with_its_last_claim(
    root: Path, host: HostThread
) -> None:
    client = MpsHostClient(root)
    first = client.request(GPU, claims={"a"}, limits=MpsLimits(30, 1024))
    assert first is not None
    assert first.state is DaemonState.RUNNING
    assert first.pid == _pid(client)
    state = read_state(client.paths(GPU).log)
    assert state is not None
    assert state["visibleDevices"] == GPU
    assert state["defaultActiveThreadPercentage"] == 30
    assert state["defaultDevicePinnedMemLimits"] == {GPU: "1024M"}

    second = client.request(GPU, claims={"a", "b"}, limits=MpsLimits(60, 2048))
    assert second is not None
    assert second.pid == first.pid  # re-limited, not restarted
    state = read_state(client.paths(GPU).log)
    assert state is not None
    assert state["defaultActiveThreadPercentage"] == 60
    assert client.claims_of(GPU) == {"a", "b"}

    client.request(GPU, claims={"b"}, limits=MpsLimits(60, 2048))
    assert _pid(client) == first.pid
    assert client.request(GPU, claims=set()) is not None
    assert first.pid is not None
    assert process_start_ticks(first.pid) is None
    assert not client.paths(GPU).root.exists()
    assert sorted(p.name for p in root.iterdir() if not p.name.startswith("host.")) == []


def test_concurrent_releases_under_the_gpu_lock_stop_the_daemon_exactly_once(
    root: Path, host: HostThread
) -> None:
    client = MpsHostClient(root)
    claims = {f"claim-{i}" for i in range(6)}
    client.request(GPU, claims=claims, limits=MpsLimits(50, None))
    pid = _pid(client)
    locks = GpuLocks(root.parent / "locks")
    stops: list[str] = []

    def release(uid: str) -> None:
        with locks.hold([GPU]):
            remaining = client.claims_of(GPU) - {uid}
            status = client.request(GPU, claims=remaining, limits=MpsLimits(50, None))
            if status is not None and status.state is DaemonState.STOPPED:
                stops.append(uid)

    with ThreadPoolExecutor(max_workers=len(claims)) as pool:
        list(pool.map(release, sorted(claims)))
    assert len(stops) == 1
    assert pid is not None
    assert process_start_ticks(pid) is None
    log = (host.host.root / GPU / "log").exists()
    assert not log


def test_a_restarted_host_adopts_the_running_daemon(root: Path) -> None:
    first_host = HostThread(root)
    client = MpsHostClient(root)
    status = client.request(GPU, claims={"a"}, limits=MpsLimits(40, None))
    assert status is not None
    first_host.stop()
    assert not client.host_running()
    assert _pid(client) == status.pid  # the host left it running
    second_host = HostThread(root)
    try:
        again = client.request(GPU, claims={"a"}, limits=MpsLimits(40, None))
        assert again is not None
        assert again.pid == status.pid
        state = read_state(client.paths(GPU).log)
        assert state is not None
        assert state["commands"].count("set_default_active_thread_percentage 40") == 1
    finally:
        second_host.stop()


def test_a_daemon_that_dies_comes_back_while_claims_use_it(root: Path, host: HostThread) -> None:
    client = MpsHostClient(root)
    status = client.request(GPU, claims={"a"}, limits=MpsLimits(40, None))
    assert status is not None
    assert status.pid is not None
    os.kill(status.pid, signal.SIGKILL)

    def restarted() -> bool:
        back = client.status(GPU)
        return back is not None and back.pid not in (None, status.pid)

    wait_until(restarted)
    back = client.status(GPU)
    assert back is not None
    assert back.state is DaemonState.RUNNING
    assert back.pid == _pid(client)
    state = read_state(client.paths(GPU).log)
    assert state is not None
    assert state["defaultActiveThreadPercentage"] == 40  # its limits were sent again


def test_without_a_host_a_start_fails_clearly_and_a_stop_waits_for_the_next_host(
    root: Path,
) -> None:
    client = MpsHostClient(root)
    with pytest.raises(MpsError, match=r"no MPS host runs on this node.*mps-host\.yaml"):
        client.request(GPU, claims={"a"})
    assert not (root / intent_file_name(GPU)).exists()

    started = HostThread(root)
    status = client.request(GPU, claims={"a"})
    assert status is not None
    started.stop()
    assert client.request(GPU, claims=set()) is None  # left as an intent
    assert _pid(client) == status.pid
    later = HostThread(root)
    try:
        assert status.pid is not None
        pid = status.pid
        wait_until(lambda: process_start_ticks(pid) is None)
        wait_until(lambda: not client.paths(GPU).root.exists())
    finally:
        later.stop()


def test_a_corrupt_intent_fails_its_device_only(root: Path, host: HostThread) -> None:
    client = MpsHostClient(root)
    root.mkdir(parents=True, exist_ok=True)
    (root / intent_file_name(OTHER_GPU)).write_text('{"claims": {"deep": [[[')
    status = client.request(GPU, claims={"a"})
    assert status is not None
    assert status.state is DaemonState.RUNNING
    wait_until((root / status_file_name(OTHER_GPU)).exists)
    other = client.status(OTHER_GPU)
    assert other is not None
    assert other.state is DaemonState.FAILED
    assert intent_file_name(OTHER_GPU) in other.error


def test_a_failing_control_binary_is_reported_and_not_retried_in_a_loop(root: Path) -> None:
    calls = root.parent / "calls"
    failing = (
        sys.executable,
        "-c",
        f"import sys; open({str(calls)!r}, 'a').write('x'); print('no CUDA-capable device'); "
        "sys.exit(3)",
    )
    started = HostThread(root, failing)
    try:
        client = MpsHostClient(root)
        with pytest.raises(MpsError, match="no CUDA-capable device"):
            client.request(GPU, claims={"a"})
        time.sleep(1.0)  # five passes of the host
        assert calls.read_text() == "x"
        client.request(GPU, claims=set())  # the claim's rollback
        assert not client.paths(GPU).root.exists()
    finally:
        started.stop()


def test_a_second_host_waits_for_the_first(root: Path, host: HostThread) -> None:
    second = MpsHost(MpsDaemons(root, SIM_CONTROL))
    stop = threading.Event()
    ready = threading.Event()
    thread = threading.Thread(
        target=serve, args=(second, stop), kwargs={"on_ready": ready.set}, daemon=True
    )
    thread.start()
    assert not ready.wait(0.5)
    host.stop()
    assert ready.wait(5)
    stop.set()
    thread.join(5)
