"""The simulated `nvidia-imex` and `nvidia-imex-ctl`: real processes from the fake driver root,
on loopback addresses of simulated nodes, talking to each other as IMEX daemons do.

Each daemon test starts its daemons as the IMEX host would (`<root>/usr/bin/nvidia-imex -c
cfg`) on addresses 127.0.X.n with a random X, so tests running at once do not meet.
"""

from __future__ import annotations

import functools
import io
import json
import os
import random
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import dra_driver
from dra_driver.errors import ConfigError
from dra_driver.hardware.simulated.driver_root import materialize_driver_root
from dra_driver.hardware.simulated.imex import ctl, protocol
from dra_driver.hardware.simulated.imex.daemon import Daemon, _Log

REPO = Path(dra_driver.__file__).resolve().parent.parent
BOUND = 5.0  # seconds any expected state may take to show


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return materialize_driver_root(tmp_path_factory.mktemp("driver-root"), "580.95.05")


class Cluster:
    """Simulated nodes' daemons in one directory; every process is killed at the end."""

    def __init__(self, root: Path, work: Path) -> None:
        self.root = root
        self.work = work
        self.net = f"127.0.{random.randint(10, 250)}"
        self.procs: list[subprocess.Popen[bytes]] = []
        self.env = {
            **os.environ,
            "PYTHONPATH": str(REPO),
            "IMEX_STANDIN_SIGUSR1_MIN_INTERVAL": "2",
        }
        self.env.pop("DRA_GPU_FAILPOINTS", None)
        self.env.pop("DRA_GPU_FAILPOINTS_FILE", None)

    def ip(self, n: int) -> str:
        return f"{self.net}.{n}"

    def files(self, name: str, entries: list[str], hosts: dict[str, int]) -> tuple[Path, Path]:
        nodes = self.work / f"{name}.nodes.cfg"
        nodes.write_text("".join(f"{entry}\n" for entry in entries))
        hosts_file = self.work / f"{name}.hosts"
        self.write_hosts(hosts_file, hosts)
        return nodes, hosts_file

    def write_hosts(self, path: Path, hosts: dict[str, int]) -> None:
        lines = ["127.0.0.1 localhost", *(f"{self.ip(n)}\t{name}" for name, n in hosts.items())]
        path.write_text("\n".join(lines) + "\n")

    def config(self, name: str, n: int, nodes: Path, extra: str = "") -> Path:
        cfg = self.work / f"{name}.cfg"
        cfg.write_text(
            "# NVIDIA's template keys (computedomain.md 4.3)\nLOG_LEVEL=4\n"
            f"LOG_FILE_NAME={self.work / (name + '.log')}\nDAEMONIZE=0\n"
            f"BIND_INTERFACE_IP={self.ip(n)}\nSERVER_PORT=50000\n"
            f"IMEX_NODE_CONFIG_FILE={nodes}\nIMEX_WAIT_FOR_QUORUM=RECOVERY\n"
            "IMEX_ENABLE_AUTH_ENCRYPTION=0\nIMEX_CMD_ENABLED=1\n"
            f"IMEX_CMD_BIND_INTERFACE_IP={self.ip(n)}\nIMEX_CMD_PORT=50005\n"
            "IMEX_NODE_DISCONNECTED_GRACE_TIME=-1\n" + extra
        )
        return cfg

    def start(
        self, cfg: Path, hosts: Path, failpoints: str = "", failpoints_file: Path | None = None
    ) -> subprocess.Popen[bytes]:
        env = {**self.env, "IMEX_STANDIN_HOSTS_FILE": str(hosts)}
        if failpoints:
            env["DRA_GPU_FAILPOINTS"] = failpoints
        if failpoints_file is not None:
            env["DRA_GPU_FAILPOINTS_FILE"] = str(failpoints_file)
        with (self.work / f"{cfg.stem}.stderr").open("wb") as stderr:
            proc = subprocess.Popen(
                [self.root / "usr/bin/nvidia-imex", "-c", cfg], env=env, stderr=stderr
            )
        self.procs.append(proc)
        return proc

    def ctl(self, *args: str, timeout: float = BOUND) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [self.root / "usr/bin/nvidia-imex-ctl", *args],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def nodes(self, n: int) -> dict[str, Any] | None:
        try:
            return ctl.ask("tcp", (self.ip(n), 50005), protocol.NODES)
        except OSError:
            return None

    def states(self, n: int) -> dict[int, str]:
        doc = self.nodes(n) or {"nodes": {}}
        return {int(i): row["status"] for i, row in doc["nodes"].items()}

    def log(self, name: str) -> str:
        path = self.work / f"{name}.log"
        return path.read_text() if path.exists() else ""

    def close(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait(timeout=BOUND)


@pytest.fixture
def cluster(root: Path, tmp_path: Path) -> Iterator[Cluster]:
    c = Cluster(root, tmp_path)
    yield c
    c.close()


def until(what: str, check: Callable[[], bool], bound: float = BOUND) -> None:
    deadline = time.monotonic() + bound
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {bound} s: {what}")
        time.sleep(0.05)


def test_three_nodes_connect_report_ready_and_see_a_peer_leave(cluster: Cluster) -> None:
    names = ["d-0000", "d-0001", "d-0002", "d-0003"]  # the 4th slot is unused: no address
    nodes, hosts = cluster.files("dom", names, {"d-0000": 1, "d-0001": 2, "d-0002": 3})
    procs = [cluster.start(cluster.config(f"n{i}", i + 1, nodes), hosts) for i in range(3)]
    everyone = {0: "C", 1: "C", 2: "C", 3: "I"}
    for i in range(3):
        until(
            f"node {i} connected", functools.partial(lambda n: cluster.states(n) == everyone, i + 1)
        )
        assert f"Identified this node as ID {i}\n" in cluster.log(f"n{i}")
        assert Path(f"/proc/{procs[i].pid}/comm").read_text() == "nvidia-imex\n"
    ready = cluster.ctl("-c", str(cluster.work / "n0.cfg"), "-q")
    assert (ready.stdout, ready.returncode) == ("READY\n", 0)
    listing = cluster.ctl("-c", str(cluster.work / "n1.cfg"), "-N", "-j")
    assert listing.returncode == 0
    assert json.loads(listing.stdout) == {
        "status": "UP",
        "nodes": {
            "0": {"host": "d-0000", "address": cluster.ip(1), "status": "C"},
            "1": {"host": "d-0001", "address": cluster.ip(2), "status": "C"},
            "2": {"host": "d-0002", "address": cluster.ip(3), "status": "C"},
            "3": {"host": "d-0003", "address": "", "status": "I"},
        },
    }
    procs[2].send_signal(signal.SIGTERM)  # graceful: peers are told
    assert procs[2].wait(timeout=BOUND) == 0
    until("node 2 shown D at node 0", lambda: cluster.states(1).get(2) == "D")
    assert (cluster.nodes(1) or {})["status"] == "DOWN"
    assert "Node 2 (d-0002) is shutting down" in cluster.log("n0")
    procs[1].kill()  # no word: the grace time is -1, so node 0 waits for it for ever
    until("node 1 shown R at node 0", lambda: cluster.states(1).get(1) == "R")


def test_a_daemon_of_another_domain_is_refused_unless_the_guard_is_off(
    cluster: Cluster,
) -> None:
    # Domain A's node a-1 and domain B's node b-1 resolve to the other domain's daemon,
    # as a reused pod IP would make them (#1447).
    a_nodes, a_hosts = cluster.files("a", ["a-0", "a-1"], {"a-0": 1, "a-1": 2})
    b_nodes, b_hosts = cluster.files("b", ["b-0", "b-1"], {"b-0": 2, "b-1": 1})
    armed = cluster.work / "failpoints"
    cluster.start(cluster.config("a0", 1, a_nodes), a_hosts, failpoints_file=armed)
    cluster.start(cluster.config("b0", 2, b_nodes), b_hosts, failpoints_file=armed)
    until("a sees b invalid", lambda: cluster.states(1) == {0: "C", 1: "I"})
    until("b sees a invalid", lambda: cluster.states(2) == {0: "C", 1: "I"})
    until("refusal logged", lambda: f"Refused connection from {cluster.ip(2)}" in cluster.log("a0"))
    assert "foreign IMEX domain" in cluster.log("b0")
    assert (cluster.nodes(1) or {})["status"] == "DOWN"
    armed.write_text("imex-accept-foreign\n")  # what the guard prevents: cross-talk
    until("a talks to b", lambda: cluster.states(1) == {0: "C", 1: "C"})
    until("b talks to a", lambda: cluster.states(2) == {0: "C", 1: "C"})


def test_sigusr1_re_resolves_and_reconnects_at_most_once_per_interval(cluster: Cluster) -> None:
    nodes, hosts0 = cluster.files("n0", ["d-0", "d-1"], {"d-0": 1, "d-1": 2})
    n0 = cluster.start(cluster.config("n0", 1, nodes), hosts0)
    old = cluster.start(cluster.config("n1", 2, nodes), hosts0)
    until("connected", lambda: cluster.states(1) == {0: "C", 1: "C"})
    old.send_signal(signal.SIGTERM)  # node 1 comes back elsewhere, as a new pod IP
    old.wait(timeout=BOUND)
    _, hosts1 = cluster.files("n1b", ["d-0", "d-1"], {"d-0": 1, "d-1": 3})
    cluster.start(cluster.config("n1b", 3, nodes), hosts1)
    until("new node 1 connected to node 0", lambda: cluster.states(3) == {0: "C", 1: "C"})
    assert cluster.states(1)[1] == "D"  # node 0 still knows only the old address
    cluster.write_hosts(hosts0, {"d-0": 1, "d-1": 3})
    n0.send_signal(signal.SIGUSR1)
    until(
        "node 0 reconnected",
        lambda: (
            cluster.nodes(1)
            == {
                "status": "UP",
                "nodes": {
                    "0": {"host": "d-0", "address": cluster.ip(1), "status": "C"},
                    "1": {"host": "d-1", "address": cluster.ip(3), "status": "C"},
                },
            }
        ),
    )
    assert f"Node 1 (d-1) now resolves to {cluster.ip(3)}" in cluster.log("n0")
    n0.send_signal(signal.SIGUSR1)  # inside the interval (2 s here, 5 s by default)
    until("ignored", lambda: "SIGUSR1 ignored" in cluster.log("n0"))


def test_start_failures_and_the_node_id(cluster: Cluster) -> None:
    nodes, hosts = cluster.files("d", ["d-0", "d-1"], {"d-0": 1, "d-1": 2})
    refused = cluster.start(cluster.config("r", 1, nodes), hosts, failpoints="imex-refuse-start")
    stranger = cluster.start(cluster.config("s", 9, nodes), hosts)  # 9 is in no entry
    cluster.start(cluster.config("w", 1, nodes), hosts, failpoints="imex-wrong-node-id")
    assert refused.wait(timeout=BOUND) == 1
    assert stranger.wait(timeout=BOUND) == 1
    assert "No matching network interface" in cluster.log("r")
    assert f"No matching network interface found: no entry of {nodes} resolves to " in (
        cluster.log("s")
    )
    until("wrong id", lambda: "Identified this node as ID 1\n" in cluster.log("w"))
    assert "Identified this node as ID 0" not in cluster.log("w")


def test_host_managed_socket_hang_and_crash(cluster: Cluster) -> None:
    nodes, hosts = cluster.files("h", ["h-0"], {"h-0": 1})
    sock = cluster.work / "imex.sock"
    cfg = cluster.config("h", 1, nodes, extra=f"IMEX_CMD_UNIX_DOMAIN_PATH={sock}\n")
    armed = cluster.work / "failpoints"
    daemon = cluster.start(cfg, hosts, failpoints_file=armed)
    until("socket", sock.exists)
    ready = cluster.ctl("-q", f"--u={sock}")
    assert (ready.stdout, ready.returncode) == ("READY\n", 0)
    # A second daemon of the node (other ports) must not take over the live socket.
    extra = f"IMEX_CMD_UNIX_DOMAIN_PATH={sock}\nSERVER_PORT=50001\nIMEX_CMD_PORT=50006\n"
    second = cluster.start(cluster.config("h2", 1, nodes, extra=extra), hosts)
    assert second.wait(timeout=BOUND) == 1
    assert f"{sock}: another IMEX daemon serves this socket" in cluster.log("h2")
    armed.write_text("imex-hang-query\n")
    with pytest.raises(subprocess.TimeoutExpired):
        cluster.ctl("-q", f"--u={sock}", timeout=0.7)
    armed.write_text("imex-crash-after:0\n")
    assert daemon.wait(timeout=BOUND) == -signal.SIGKILL
    gone = cluster.ctl("-q", f"--u={sock}")
    assert (gone.stdout, gone.returncode) == ("NOT READY\n", 1)


def test_config_and_name_files() -> None:
    cfg = protocol.parse_config(
        "# comment\nIMEX_NODE_CONFIG_FILE=/x/nodes.cfg\nSERVER_PORT=51000\nFOO=a=b\n",
        Path("imexd.cfg"),
    )
    assert (cfg.server_port, cfg.cmd_port, cfg.cmd_enabled, cfg.grace_time) == (
        51000,
        50005,
        True,
        -1.0,
    )
    assert cfg.values["FOO"] == "a=b"
    for text, problem in [
        ("SERVER_PORT=1\n", "IMEX_NODE_CONFIG_FILE is not set"),
        ("IMEX_NODE_CONFIG_FILE=n\nSERVER_PORT=x\n", "SERVER_PORT='x' is not a number"),
        ("IMEX_NODE_CONFIG_FILE=n\nSERVER_PORT=70000\n", "not a TCP port"),
        ("IMEX_NODE_CONFIG_FILE=n\nBIND_INTERFACE_IP=node-1\n", "is not an IP address"),
        ("IMEX_NODE_CONFIG_FILE=n\nno equals sign\n", "line 2 is not KEY=VALUE"),
    ]:
        with pytest.raises(ConfigError, match=problem):
            protocol.parse_config(text, Path("imexd.cfg"))
    assert protocol.node_entries("a\n\n# c\n10.0.0.9\n") == ["a", "10.0.0.9"]
    hosts = protocol.parse_hosts("1.1.1.1 a b # c\n2.2.2.2 a\n#3.3.3.3 c\n")
    assert protocol.resolve(["a", "b", "c", "10.0.0.9"], hosts) == [
        "1.1.1.1",
        "1.1.1.1",
        None,
        "10.0.0.9",
    ]
    assert protocol.domain_identity(["x-0", "x-1"]) != protocol.domain_identity(["y-0", "y-1"])


@pytest.mark.parametrize(("grace", "shown"), [("-1", "R"), ("0", "D")])
def test_a_lost_peer_recovers_for_the_grace_time_then_is_disconnected(
    grace: str, shown: str
) -> None:
    cfg = protocol.parse_config(
        f"IMEX_NODE_CONFIG_FILE=n\nIMEX_NODE_DISCONNECTED_GRACE_TIME={grace}\n", Path("c")
    )
    daemon = Daemon(
        cfg,
        entries=["a", "b"],
        addresses=["127.0.1.1", "127.0.1.2"],
        node_id=0,
        hosts_path=Path("/nonexistent"),
        log=_Log(io.StringIO()),
        bind_ip="127.0.1.1",
    )
    daemon.states[1] = "C"
    daemon._lost(1)
    daemon.lost_at[1] -= 0.5
    assert daemon.current_states() == {0: "C", 1: shown}


def test_a_sigusr1_while_the_daemon_starts_is_held_not_fatal(cluster: Cluster) -> None:
    nodes, hosts = cluster.files("n0", ["d-0", "d-1"], {"d-0": 1})  # d-1 unresolved
    # A loaded node: half a second between its first log line and its identification.
    n0 = cluster.start(cluster.config("n0", 1, nodes), hosts, failpoints="imex-slow-start:0.5")
    until("started", lambda: "starting with config" in cluster.log("n0"))
    cluster.write_hosts(hosts, {"d-0": 1, "d-1": 2})
    n0.send_signal(signal.SIGUSR1)  # while it starts: its default action would kill it
    until("node 1 resolved", lambda: cluster.states(1).get(1) == "N")
    assert n0.poll() is None
    assert "SIGUSR1: re-resolving" in cluster.log("n0")
