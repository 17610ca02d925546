"""The IMEX host's decisions, against a fake IMEX runner and an in-memory object store.

What an admin or a workload would notice: a member waits for its index, then
IMEX runs with the right files and the member turns Ready with its peers;
peers come and go with a SIGUSR1 (never lost to IMEX's rate limit) and
without a restart, unless the node's own index changes; a daemon that keeps
dying, or identifies itself as the wrong node, fails the member with the
reason; a host nvidia-imex service or a second domain is reported, never a
silent never-Ready; a restarted host adopts the daemon; a departed member's
IMEX is stopped and its files removed; statuses are written on change only.
"""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

import pytest

from dra_driver.compute_domain.imex_config import render_nodes_config
from dra_driver.compute_domain.membership import (
    CliqueRow,
    MemberSpec,
    build_clique,
    build_member,
    imex_node_name,
    member_name,
    member_status,
)
from dra_driver.kube.object_store import COMPUTE_DOMAIN_CLIQUE, COMPUTE_DOMAIN_MEMBER, EVENT
from kubelet_plugin.imex_host import HostConfig, ImexHost
from kubelet_plugin.imex_host_runner import DomainPaths, detect_host_imex
from tests.fakes.imex_runner import FakeImexRunner
from tests.fakes.object_store import MemoryObjectStore

NS = "dra-gpu"
UID = "3f6e6d2c-6a44-4a59-9c36-4b8d1c1a2b3c"
OTHER_UID = "9b1e4f7a-0c2d-4e5f-8a6b-7c8d9e0f1a2b"
CLIQUE = "00000000-0000-0000-0000-000000000001.0"
NODE, IP = "n1", "127.0.1.1"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Env:
    def __init__(self, tmp_path: Path, **config: Any) -> None:
        self.store = MemoryObjectStore()
        self.runner = FakeImexRunner()
        self.clock = Clock()
        self.state_dir = tmp_path / "state"
        self.config = HostConfig(
            node_name=NODE,
            node_ip=IP,
            namespace=NS,
            state_dir=self.state_dir,
            restart_backoff_base=1.0,
            **config,
        )
        self.host = self.new_host()

    def new_host(self) -> ImexHost:
        return ImexHost(self.store, self.runner, self.config, clock=self.clock)

    def paths(self, uid: str = UID) -> DomainPaths:
        return DomainPaths.of(self.state_dir, uid)

    def add_member(
        self, uid: str = UID, node: str = NODE, clique: str = CLIQUE, name: str = "train"
    ) -> None:
        spec = MemberSpec(uid, "team-a", name, node, clique)
        self.store.create_object(COMPUTE_DOMAIN_MEMBER, build_member(spec, namespace=NS))

    def set_rows(self, rows: dict[str, tuple[str, int]], uid: str = UID) -> None:
        """The controller's clique: node -> (address, index)."""
        obj = build_clique(
            uid,
            CLIQUE,
            [CliqueRow(n, ip, CLIQUE, i, "NotReady") for n, (ip, i) in rows.items()],
            namespace=NS,
        )
        try:
            current = self.store.get_object(COMPUTE_DOMAIN_CLIQUE, NS, obj["metadata"]["name"])
        except Exception:
            self.store.create_object(COMPUTE_DOMAIN_CLIQUE, obj)
        else:
            current["daemons"] = obj["daemons"]
            self.store.update_object(COMPUTE_DOMAIN_CLIQUE, current)

    def status(self, uid: str = UID, node: str = NODE) -> Any:
        return member_status(
            self.store.get_object(COMPUTE_DOMAIN_MEMBER, NS, member_name(uid, node))
        )

    def events(self) -> list[dict[str, Any]]:
        return self.store.list_objects(EVENT)


@pytest.fixture
def env(tmp_path: Path) -> Env:
    return Env(tmp_path)


def test_a_member_without_an_index_waits_and_tells_its_address(env: Env) -> None:
    env.add_member()
    env.host.reconcile()
    status = env.status()
    assert (status.state, status.reason, status.ip_address) == ("Pending", "WaitingForIndex", IP)
    assert "waiting for an index in ComputeDomainClique" in status.message
    assert env.runner.starts == []


def test_with_an_index_imex_runs_on_the_files_and_the_member_turns_ready(env: Env) -> None:
    env.add_member()
    env.set_rows({NODE: ("", 0), "n2": ("127.0.1.2", 1)})
    env.runner.peer_states = {0: "C", 1: "C"}
    env.host.reconcile()
    assert env.runner.starts == [(UID, 0)]
    paths = env.paths()
    assert f"BIND_INTERFACE_IP={IP}\n" in paths.config.read_text()
    assert f"IMEX_NODE_CONFIG_FILE={paths.nodes}\n" in paths.config.read_text()
    assert paths.nodes.read_text() == render_nodes_config(UID)
    assert env.runner.hosts_at_start == [
        paths.hosts.read_text()
    ]  # the daemon saw its peers at start
    assert f"127.0.1.2\t{imex_node_name(UID, 1)}\n" in paths.hosts.read_text()
    status = env.status()
    assert (status.state, status.imex_node_id, dict(status.peers)) == ("Ready", 0, {"n2": "C"})
    assert env.host.settling() is False


def test_not_ready_until_nvidia_imex_ctl_says_so(env: Env) -> None:
    env.add_member()
    env.set_rows({NODE: (IP, 0)})
    env.runner.ready = False
    env.host.reconcile()
    status = env.status()
    assert status.state == "Starting"
    assert "NOT READY" in status.message
    env.runner.ready = True
    env.host.reconcile()
    assert env.status().state == "Ready"


def test_status_is_written_on_change_only(env: Env) -> None:
    env.add_member()
    env.set_rows({NODE: (IP, 0), "n2": ("127.0.1.2", 1)})
    env.runner.peer_states = {1: "N"}
    env.host.reconcile()
    writes = env.store.writes["ComputeDomainMember"]
    for _ in range(5):
        env.host.reconcile()
    assert env.store.writes["ComputeDomainMember"] == writes
    assert env.host.settling() is True  # a peer is not connected: keep polling fast
    env.runner.peer_states = {1: "C"}
    env.host.reconcile()
    assert env.store.writes["ComputeDomainMember"] == writes + 1
    assert dict(env.status().peers) == {"n2": "C"}


def test_a_peer_change_rewrites_hosts_and_signals_without_a_restart(env: Env) -> None:
    env.add_member()
    env.set_rows({NODE: (IP, 0)})
    env.host.reconcile()
    env.set_rows({NODE: (IP, 0), "n2": ("127.0.1.2", 1)})
    env.host.reconcile()
    assert env.runner.starts == [(UID, 0)]
    assert len(env.runner.reloads) == 1
    assert "127.0.1.2" in env.paths().hosts.read_text()
    # n2's pod IP changes and n3 joins, both within IMEX's 5 s SIGUSR1 limit: the second
    # signal waits for the limit rather than being sent and ignored.
    env.clock.now += 1
    env.set_rows({NODE: (IP, 0), "n2": ("127.0.1.22", 1), "n3": ("127.0.1.3", 2)})
    env.host.reconcile()
    assert len(env.runner.reloads) == 1
    assert env.host.settling() is True
    env.clock.now += 4
    env.host.reconcile()
    assert len(env.runner.reloads) == 2
    hosts = env.paths().hosts.read_text()
    assert "127.0.1.22" in hosts
    assert "127.0.1.2\t" not in hosts
    env.host.reconcile()
    assert len(env.runner.reloads) == 2  # nothing changed since


def test_a_departed_peer_leaves_the_hosts_file(env: Env) -> None:
    env.add_member()
    env.set_rows({NODE: (IP, 0), "n2": ("127.0.1.2", 1)})
    env.host.reconcile()
    env.set_rows({NODE: (IP, 0)})
    env.host.reconcile()
    assert "127.0.1.2" not in env.paths().hosts.read_text()
    assert env.status().peers == {}


def test_imex_restarts_only_when_its_own_index_changes(env: Env) -> None:
    env.add_member()
    env.set_rows({NODE: (IP, 0), "n2": ("127.0.1.2", 1)})
    env.host.reconcile()
    env.set_rows({NODE: (IP, 2), "n2": ("127.0.1.2", 1)})
    env.host.reconcile()
    assert env.runner.stops == [UID]
    assert env.runner.starts == [(UID, 0), (UID, 2)]
    status = env.status()
    assert (status.state, status.imex_node_id) == ("Ready", 2)


def test_a_daemon_identified_as_another_node_fails_the_member(env: Env) -> None:
    env.add_member()
    env.set_rows({NODE: (IP, 0), "n2": ("127.0.1.2", 1)})
    env.runner.identify_as = 1
    env.host.reconcile()
    status = env.status()
    assert (status.state, status.reason, status.imex_node_id) == ("Failed", "IndexMismatch", 1)
    assert "identified node n1 as IMEX node ID 1" in status.message
    assert "index in the ComputeDomainClique is 0" in status.message
    [event] = env.events()
    assert (event["reason"], event["type"]) == ("IndexMismatch", "Warning")
    assert event["regarding"]["kind"] == "ComputeDomain"
    assert event["regarding"]["name"] == "train"
    assert event["note"].startswith("node n1: ")


def test_a_daemon_that_keeps_dying_is_restarted_then_reported_with_its_last_words(
    env: Env,
) -> None:
    env.add_member()
    env.set_rows({NODE: (IP, 0)})
    env.runner.refuse_start = True
    env.host.reconcile()  # started; it exits at once
    for _ in range(2):
        env.host.reconcile()  # sees it gone
        assert env.status().reason == "ImexRestarting"
        assert "No matching network interface found" in env.status().message
        env.clock.now += 60  # past the back-off
        env.host.reconcile()  # restarts it
    env.host.reconcile()
    status = env.status()
    assert (status.state, status.reason) == ("Failed", "ImexFailed")
    assert "exited 3 times in a row" in status.message
    assert "last log line: No matching network interface found" in status.message
    assert len(env.runner.starts) == 3
    env.host.reconcile()  # within the back-off: no new start
    assert len(env.runner.starts) == 3
    assert [e["reason"] for e in env.events()] == ["ImexFailed"]
    env.runner.refuse_start = False
    env.clock.now += 60
    env.host.reconcile()
    assert env.status().state == "Ready"


def test_a_crashed_daemon_comes_back(env: Env) -> None:
    env.add_member()
    env.set_rows({NODE: (IP, 0)})
    env.host.reconcile()
    env.runner.exit(env.paths())
    env.host.reconcile()
    assert env.status().state == "Starting"
    env.clock.now += 2
    env.host.reconcile()
    assert len(env.runner.starts) == 2
    assert env.status().state == "Ready"


def test_a_restarted_host_adopts_the_running_daemon(env: Env) -> None:
    env.add_member()
    env.set_rows({NODE: (IP, 0), "n2": ("127.0.1.2", 1)})
    env.host.reconcile()
    writes = env.store.writes["ComputeDomainMember"]
    host = env.new_host()
    host.reconcile()
    assert env.runner.starts == [(UID, 0)]
    assert env.runner.stops == []
    assert env.runner.reloads == []  # the daemon already knew these peers
    assert env.store.writes["ComputeDomainMember"] == writes


def test_a_peer_change_missed_while_the_host_was_down_is_signalled_after_adoption(
    env: Env,
) -> None:
    env.add_member()
    env.set_rows({NODE: (IP, 0)})
    env.host.reconcile()
    env.set_rows({NODE: (IP, 0), "n2": ("127.0.1.2", 1)})
    host = env.new_host()
    host.reconcile()
    # The daemon may have honoured a SIGUSR1 just before: a new host waits one interval.
    assert env.runner.reloads == []
    assert host.settling() is True
    env.clock.now += 5
    host.reconcile()
    assert len(env.runner.reloads) == 1
    assert env.runner.starts == [(UID, 0)]


def test_a_deleted_member_stops_imex_and_removes_its_files(env: Env) -> None:
    env.add_member()
    env.set_rows({NODE: (IP, 0)})
    env.host.reconcile()
    assert env.paths().root.is_dir()
    env.store.delete_object(COMPUTE_DOMAIN_MEMBER, NS, member_name(UID, NODE))
    env.host.reconcile()
    assert env.runner.stops == [UID]
    assert not env.paths().root.exists()


def test_a_second_domain_on_the_node_is_refused_with_both_names(env: Env) -> None:
    env.add_member()
    env.set_rows({NODE: (IP, 0)})
    env.host.reconcile()
    env.add_member(OTHER_UID, name="infer")
    env.host.reconcile()
    other = env.status(OTHER_UID)
    assert (other.state, other.reason) == ("Failed", "NodeServesAnotherDomain")
    assert "team-a/train" in other.message
    assert "team-a/infer" in other.message
    assert env.status().state == "Ready"
    assert env.runner.starts == [(UID, 0)]
    assert [e["reason"] for e in env.events()] == ["NodeServesAnotherDomain"]


def test_a_node_without_a_clique_runs_no_imex(env: Env) -> None:
    env.add_member(clique="")
    env.host.reconcile()
    status = env.status()
    assert (status.state, status.reason) == ("NoFabric", "NoClique")
    assert env.runner.starts == []


def test_a_host_imex_service_fails_every_member_with_what_to_do(tmp_path: Path) -> None:
    sock_path = tmp_path / "imex_ctrl.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener:
        listener.bind(str(sock_path))
        listener.listen()
        env = Env(tmp_path, host_socket=sock_path)
        env.add_member()
        env.set_rows({NODE: (IP, 0)})
        env.host.reconcile()
    status = env.status()
    assert (status.state, status.reason) == ("Failed", "HostImexRunning")
    assert str(sock_path) in status.message
    assert "systemctl disable --now nvidia-imex.service" in status.message
    assert "--imex-mode hostManaged" in status.message
    assert env.runner.starts == []
    assert [e["reason"] for e in env.events()] == ["HostImexRunning"]


def test_host_imex_detection_sees_foreign_processes_and_stale_sockets(tmp_path: Path) -> None:
    proc = tmp_path / "proc"
    (proc / "17").mkdir(parents=True)
    (proc / "17" / "comm").write_text("bash\n")
    assert detect_host_imex(tmp_path / "missing.sock", proc) == ""
    (proc / "4242").mkdir()
    (proc / "4242" / "comm").write_text("nvidia-imex\n")
    assert detect_host_imex(None, proc) == "process 4242 is nvidia-imex"
    assert detect_host_imex(None, proc, own_pids=[4242]) == ""  # our own daemon
    stale = tmp_path / "stale.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.bind(str(stale))  # bound, never listening: nothing accepts
    assert detect_host_imex(stale, None) == ""


def test_the_shared_hosts_file_gets_the_imex_names_and_keeps_the_rest(tmp_path: Path) -> None:
    etc_hosts = tmp_path / "hosts"
    etc_hosts.write_text("127.0.0.1\tlocalhost\n")
    env = Env(tmp_path, hosts_file=etc_hosts)
    env.add_member()
    env.set_rows({NODE: (IP, 0), "n2": ("127.0.1.2", 1)})
    env.host.reconcile()
    text = etc_hosts.read_text()
    assert text.startswith("127.0.0.1\tlocalhost\n")
    assert f"127.0.1.2\t{imex_node_name(UID, 1)}" in text
    env.store.delete_object(COMPUTE_DOMAIN_MEMBER, NS, member_name(UID, NODE))
    env.host.reconcile()
    assert etc_hosts.read_text() == "127.0.0.1\tlocalhost\n"


def test_a_restarted_host_does_not_take_its_own_daemon_for_a_host_service(
    tmp_path: Path,
) -> None:
    proc = tmp_path / "proc"
    env = Env(tmp_path, host_proc_root=proc)
    env.add_member()
    env.set_rows({NODE: (IP, 0)})
    env.host.reconcile()
    [process] = env.runner.running.values()
    (proc / str(process.pid)).mkdir(parents=True)
    (proc / str(process.pid) / "comm").write_text("nvidia-imex\n")  # the real binary's name
    env.new_host().reconcile()
    assert env.status().state == "Ready"
    (proc / "99").mkdir()
    (proc / "99" / "comm").write_text("nvidia-imex\n")  # one we did not start
    env.new_host().reconcile()
    assert (env.status().state, env.status().reason) == ("Failed", "HostImexRunning")
    assert "process 99 is nvidia-imex" in env.status().message


def test_a_pending_member_needs_no_fast_polling(env: Env) -> None:
    env.add_member()
    env.host.reconcile()
    assert env.host.settling() is False
    env.set_rows({NODE: (IP, 0)})
    env.runner.ready = False
    env.host.reconcile()
    assert env.host.settling() is True


def test_a_daemon_is_not_signalled_before_it_can_take_the_signal(env: Env) -> None:
    env.add_member()
    env.set_rows({NODE: (IP, 0)})
    env.runner.ready = False  # started, not READY yet: SIGUSR1 would kill it
    env.host.reconcile()
    env.set_rows({NODE: (IP, 0), "n2": ("127.0.1.2", 1)})
    env.host.reconcile()
    assert env.runner.reloads == []
    env.runner.ready = True
    env.host.reconcile()  # READY now: signalled in the same pass
    assert len(env.runner.reloads) == 1


def test_the_identification_is_found_however_much_the_daemon_logged_since(env: Env) -> None:
    env.add_member()
    env.set_rows({NODE: (IP, 0)})
    env.runner.ready = False
    env.host.reconcile()
    with env.paths().log.open("a") as log:  # LOG_LEVEL=4 chatter before the first READY
        log.write("connection state: peer 1 not connected\n" * 20000)
    env.runner.ready = True
    env.host.reconcile()
    assert (env.status().state, env.status().imex_node_id) == ("Ready", 0)


def test_an_ignored_sigusr1_is_sent_again_until_the_daemon_resolves_every_peer(
    env: Env,
) -> None:
    env.add_member()
    env.set_rows({NODE: (IP, 0), "n2": ("127.0.1.2", 1)})
    env.runner.peer_states = {0: "C", 1: "C"}
    env.host.reconcile()
    # The host restarts (it cannot know when the daemon was last signalled) and n3 joins.
    host = env.new_host()
    host.reconcile()
    env.set_rows({NODE: (IP, 0), "n2": ("127.0.1.2", 1), "n3": ("127.0.1.3", 2)})
    env.runner.peer_states = {0: "C", 1: "C", 2: "I"}
    host.reconcile()
    assert env.runner.reloads == []  # an adopted daemon counts as signalled just now
    env.clock.now += 5
    host.reconcile()
    assert len(env.runner.reloads) == 1
    # IMEX ignored it (n3 still unresolved): the signal is not taken as applied.
    env.clock.now += 1
    host.reconcile()
    assert len(env.runner.reloads) == 1  # within IMEX's interval: it would be ignored again
    assert host.settling() is True
    assert env.status().peers["n3"] == "I"
    env.clock.now += 4
    host.reconcile()
    assert len(env.runner.reloads) == 2
    env.runner.peer_states = {0: "C", 1: "C", 2: "C"}
    env.clock.now += 1
    host.reconcile()
    assert dict(env.status().peers) == {"n2": "C", "n3": "C"}
    assert host.settling() is False
    env.clock.now += 10
    host.reconcile()
    assert len(env.runner.reloads) == 2  # applied: no more signals
    assert env.paths().applied_hosts.read_text() == env.paths().hosts.read_text()


def test_a_peer_the_daemon_never_resolved_is_signalled_even_if_the_file_says_applied(
    env: Env,
) -> None:
    env.add_member()
    env.set_rows({NODE: (IP, 0), "n2": ("127.0.1.2", 1)})
    env.runner.peer_states = {1: "I"}  # e.g. the hosts file changed under it
    env.host.reconcile()
    env.clock.now += 1
    env.host.reconcile()
    assert len(env.runner.reloads) == 1
    env.runner.peer_states = {1: "C"}
    env.clock.now += 1
    env.host.reconcile()
    assert env.host.settling() is False


def test_a_slow_starting_daemon_is_neither_signalled_to_death_nor_counted_as_exited(
    env: Env,
) -> None:
    env.add_member()
    env.set_rows({NODE: (IP, 0)})
    env.runner.slow_start = True  # e.g. a loaded node: nothing logged for seconds
    env.host.reconcile()
    env.set_rows({NODE: (IP, 0), "n2": ("127.0.1.2", 1)})
    for _ in range(4):  # well past the 3 s after which a quiet daemon used to be signalled
        env.clock.now += 2
        env.host.reconcile()
    assert env.runner.reloads == []
    assert env.runner.starts == [(UID, 0)]
    status = env.status()
    assert (status.state, status.reason) == ("Starting", "ImexStarting")
    assert "exited" not in status.message
    env.runner.finish_start(env.paths())
    env.clock.now += 1
    env.host.reconcile()
    assert len(env.runner.reloads) == 1  # it has identified itself and answers READY
    assert env.runner.starts == [(UID, 0)]
    assert env.status().state == "Ready"


def test_a_node_beyond_a_full_clique_is_told_the_clique_is_full(env: Env) -> None:
    env.add_member()
    env.set_rows({f"n{i + 2}": (f"127.0.1.{i + 2}", i) for i in range(18)})  # not n1
    env.host.reconcile()
    status = env.status()
    assert (status.state, status.reason) == ("Pending", "CliqueFull")
    assert f"clique {CLIQUE} of ComputeDomain team-a/train already has 18 nodes" in status.message
    assert "--max-nodes-per-imex-domain 18" in status.message
    assert env.runner.starts == []
    env.set_rows({f"n{i + 2}": (f"127.0.1.{i + 2}", i) for i in range(17)})  # one left
    env.host.reconcile()
    assert env.status().reason == "WaitingForIndex"


def test_the_signal_interval_counts_from_when_the_signal_went_not_from_the_pass_start(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    env.add_member()
    env.set_rows({NODE: (IP, 0)})
    env.host.reconcile()
    env.set_rows({NODE: (IP, 0), "n2": ("127.0.1.2", 1)})
    query = env.runner.query

    def slow_query(paths: DomainPaths) -> Any:  # a loaded node: nvidia-imex-ctl takes 2 s
        env.clock.now += 2
        return query(paths)

    monkeypatch.setattr(env.runner, "query", slow_query)
    env.host.reconcile()  # starts at t, signals at t + 2
    assert len(env.runner.reloads) == 1
    monkeypatch.setattr(env.runner, "query", query)
    env.set_rows({NODE: (IP, 0), "n2": ("127.0.1.2", 1), "n3": ("127.0.1.3", 2)})
    env.clock.now += 3  # t + 5: only 3 s after the signal, which IMEX would ignore
    env.host.reconcile()
    assert len(env.runner.reloads) == 1
    env.clock.now += 2
    env.host.reconcile()
    assert len(env.runner.reloads) == 2


def test_a_daemon_that_ends_without_a_word_is_reported_with_how_it_ended(env: Env) -> None:
    env.add_member()
    env.set_rows({NODE: (IP, 0)})
    env.runner.slow_start = True
    env.host.reconcile()
    env.runner.die_silently(env.paths(), "was killed by SIGKILL")
    env.host.reconcile()
    status = env.status()
    assert (status.state, status.reason) == ("Starting", "ImexRestarting")
    assert "it logged nothing and was killed by SIGKILL" in status.message
