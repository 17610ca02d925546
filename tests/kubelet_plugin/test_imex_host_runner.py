"""The IMEX host's process runner and serving loop, with real processes (small shell stand-ins).

What an admin would notice: IMEX runs in a session of its own (a host restart
does not take it down), a restarted host finds the same daemon again and never
a process that merely reused its pid, SIGUSR1 reaches it, SIGTERM stops it,
a hanging `nvidia-imex-ctl` costs a bounded wait and reads as not ready, and
the serving loop turns a member Ready soon after its clique row appears.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from dra_driver.compute_domain.membership import (
    CliqueRow,
    MemberSpec,
    build_clique,
    build_member,
    member_name,
    member_status,
)
from dra_driver.kube.object_store import COMPUTE_DOMAIN_CLIQUE, COMPUTE_DOMAIN_MEMBER
from kubelet_plugin.imex_host import HostConfig, ImexHost, serve
from kubelet_plugin.imex_host_runner import DomainPaths, ProcessImexRunner, parse_nodes_report
from kubelet_plugin.mps_daemons import process_start_ticks
from tests.fakes import imex_binaries, wait_until
from tests.fakes.object_store import MemoryObjectStore

UID = "3f6e6d2c-6a44-4a59-9c36-4b8d1c1a2b3c"
CLIQUE = "00000000-0000-0000-0000-000000000001.0"
NS = "dra-gpu"


@pytest.fixture
def binaries(tmp_path: Path) -> tuple[Path, Path]:
    return imex_binaries.install(tmp_path / "bin")


_RUNNERS: list[ProcessImexRunner] = []


@pytest.fixture
def paths(tmp_path: Path) -> Iterator[DomainPaths]:
    paths = DomainPaths.of(tmp_path / "state", UID)
    paths.root.mkdir(parents=True)
    paths.config.write_text("BIND_INTERFACE_IP=127.0.1.1\n")
    paths.hosts.write_text("")
    yield paths
    while _RUNNERS:  # stop what a test left running; its starter reaps it
        _RUNNERS.pop().stop(paths)


def runner(binaries: tuple[Path, Path], **env: str) -> ProcessImexRunner:
    made = ProcessImexRunner(*binaries, env={**os.environ, **env}, query_timeout=0.5)
    _RUNNERS.insert(0, made)
    return made


def test_imex_runs_in_its_own_session_and_a_new_host_adopts_it(
    binaries: tuple[Path, Path], paths: DomainPaths
) -> None:
    first = runner(binaries)
    process = first.start(paths, index=3)
    assert os.getsid(process.pid) == process.pid
    assert first.find(paths) == process
    wait_until(lambda: b"Identified this node as ID 0" in paths.log.read_bytes(), "IMEX's log")
    assert runner(binaries).find(paths) == process  # a restarted host finds it (index kept)
    assert first.query(paths).ready is True
    report = first.nodes(paths)
    assert report is not None
    assert (report.up, dict(report.nodes)) == (True, {0: "C", 1: "N"})


def test_a_pid_file_naming_another_process_is_not_ours(
    binaries: tuple[Path, Path], paths: DomainPaths
) -> None:
    me = os.getpid()
    record = {"pid": me, "startTicks": process_start_ticks(me), "index": 0}
    paths.pid_file.write_text(json.dumps(record))  # the pid runs, but not our config
    assert runner(binaries).find(paths) is None


def test_sigusr1_reaches_imex_and_sigterm_stops_it(
    binaries: tuple[Path, Path], paths: DomainPaths
) -> None:
    run = runner(binaries)
    process = run.start(paths, index=0)
    wait_until(lambda: b"Identified" in paths.log.read_bytes(), "IMEX's start")
    run.reload(process)
    wait_until(lambda: b"SIGUSR1: re-resolving peers" in paths.log.read_bytes(), "the SIGUSR1")
    assert str(paths.hosts).encode() in paths.log.read_bytes()  # it got the hosts file env
    run.stop(paths)
    assert process_start_ticks(process.pid) is None
    assert not paths.pid_file.exists()
    assert b"SIGTERM: shutting down" in paths.log.read_bytes()


def test_a_daemon_that_exits_is_no_longer_found(
    binaries: tuple[Path, Path], paths: DomainPaths
) -> None:
    run = runner(binaries, FAKE_IMEX_EXIT="1")
    run.start(paths, index=0)
    wait_until(lambda: run.find(paths) is None, "the daemon's exit")


def test_a_hanging_ctl_reads_as_not_ready_within_its_timeout(
    binaries: tuple[Path, Path], paths: DomainPaths
) -> None:
    answer = runner(binaries, FAKE_CTL_HANG="1").query(paths)
    assert answer.ready is False
    assert "did not answer in 0.5 s" in answer.detail
    answer = runner(binaries, FAKE_CTL_NOT_READY="1").query(paths)
    assert (answer.ready, answer.detail) == (False, "nvidia-imex-ctl -q: NOT READY")


def test_the_nodes_report_is_read_strictly() -> None:
    report = parse_nodes_report('{"status": "DOWN", "nodes": {"2": {"host": "x", "status": "R"}}}')
    assert (report.up, dict(report.nodes)) == (False, {2: "R"})
    with pytest.raises(ValueError, match="nodes"):
        parse_nodes_report('{"status": "UP"}')


def test_the_serving_loop_turns_a_member_ready_when_its_row_appears(
    binaries: tuple[Path, Path], tmp_path: Path
) -> None:
    store = MemoryObjectStore()
    spec = MemberSpec(UID, "team-a", "train", "n1", CLIQUE)
    store.create_object(COMPUTE_DOMAIN_MEMBER, build_member(spec, namespace=NS))
    config = HostConfig(node_name="n1", node_ip="127.0.1.1", namespace=NS, state_dir=tmp_path)
    ready_file = tmp_path / "imex-ready"
    run = runner(binaries, FAKE_CTL_READY_FILE=str(ready_file))
    host = ImexHost(store, run, config, own_pids=run.own_pids)
    stop, ready = threading.Event(), threading.Event()
    thread = threading.Thread(
        target=serve,
        args=(host, stop),
        kwargs={"fast_interval": 0.05, "ready_interval": 30, "on_ready": ready.set},
        daemon=True,
    )
    paths = DomainPaths.of(tmp_path, UID)
    thread.start()
    try:
        assert ready.wait(5)

        def state() -> str:
            obj = store.get_object(COMPUTE_DOMAIN_MEMBER, NS, member_name(UID, "n1"))
            return f"{member_status(obj).state} {member_status(obj).ip_address}"

        wait_until(lambda: state() == "Pending 127.0.1.1", "the member Pending", timeout=5)
        rows = [CliqueRow("n1", "", CLIQUE, 0, "NotReady")]
        store.create_object(COMPUTE_DOMAIN_CLIQUE, build_clique(UID, CLIQUE, rows, namespace=NS))
        wait_until(lambda: state() == "Starting 127.0.1.1", "IMEX started", timeout=5)
        ready_file.touch()
        # Polled fast once IMEX runs, though the member was idle (Pending) before.
        wait_until(lambda: state() == "Ready 127.0.1.1", "the member Ready", timeout=2)
        stop.set()
        thread.join(10)
        assert run.find(paths) is not None  # IMEX outlives the host
    finally:
        stop.set()
        thread.join(10)
        run.stop(paths)


_ENDED_SCRIPT = """
import os, signal, sys, time
from pathlib import Path
from kubelet_plugin.imex_host_runner import DomainPaths, ProcessImexRunner
daemon, ctl, root = sys.argv[1:4]
paths = DomainPaths(Path(root))
paths.root.mkdir(parents=True, exist_ok=True)
paths.config.write_text("")
run = ProcessImexRunner(Path(daemon), Path(ctl), env=dict(os.environ), query_timeout=0.5)
process = run.start(paths, index=0)
os.kill(process.pid, signal.SIGKILL)
deadline = time.monotonic() + 10
while run.find(paths) is not None and time.monotonic() < deadline:
    time.sleep(0.02)
print(run.ended(process.pid))
"""


def test_how_a_daemon_ended_is_told_when_it_logged_nothing(
    binaries: tuple[Path, Path], paths: DomainPaths
) -> None:
    # In a fresh interpreter: the host is the daemon's parent and collects its exit status,
    # which a test process shared with hundreds of other tests' children cannot promise.
    done = subprocess.run(
        [sys.executable, "-c", _ENDED_SCRIPT, *map(str, binaries), str(paths.root)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert done.stdout.strip() == "was killed by SIGKILL", done.stderr
