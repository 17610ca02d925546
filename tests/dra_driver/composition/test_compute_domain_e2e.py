"""ComputeDomains end to end on simulated multi-node clusters (computedomain.md §8.2).

Each test starts a small cluster (`ComputeDomainCluster`: per simulated
gb200-node the real CD kubelet plugin and IMEX host processes, the real
controller, the nvidia-imex stand-ins) and drives it the way users and
failures do: pods with channel claims (claims from the controller's
template, the scheduler's allocator, Prepare over each node's socket), a
lost node, a reused IP address, a fabric that settles late, a deletion under
running work, a controller failover. Every scenario asserts its wall-clock
bound with `time.monotonic()`; intervals are short through the daemons' flags.
Scenarios: E1 (a 2-node domain on 4 nodes), E2 (allocationMode All), E3 (a node lost),
E4 (a second domain in the clique, a reused IP), E5 (an IMEX host and a plugin restarted,
a node joining, a pod re-created), E6 (a fabric that settles late), E7 (a
node without multi-node NVLink), E8 (deletion under running work, and a domain forced
away), E9 (leader failover), E10 (a plugin killed mid-Prepare, a stale Prepare, a node
reboot), E12 (host-managed IMEX), E13 (an upgrade over objects and a checkpoint an older
release wrote); and `dra-gpu demo compute-domain`.
The daemons are started through the suite's fork server (`tests.fakes.zygote`).
"""

from __future__ import annotations

import copy
import hashlib
import io
import json
import os
import re
import shutil
import subprocess
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from dra_driver.claims.checkpoint import ClaimState
from dra_driver.claims.checkpoint import decode as decode_checkpoint
from dra_driver.claims.checkpoint_store import CLAIM_FILE_SUFFIX
from dra_driver.composition.compute_domain_cluster import (
    DRIVER_NAMESPACE,
    ComputeDomainCluster,
    SimNode,
    channel_pod,
)
from dra_driver.composition.compute_domain_demo import run_compute_domain_demo
from dra_driver.composition.compute_domain_kubelet import PodPlacementError
from dra_driver.compute_domain import channel_cdi, membership
from dra_driver.compute_domain.names import DOMAIN_LABEL, DRIVER_NAME, FINALIZER, TARGET_LABEL
from dra_driver.container.cdi_store import CdiStore
from dra_driver.errors import NotFoundError
from dra_driver.kube.apiserver_rules import EVENT, RESOURCE_CLAIM
from dra_driver.kube.object_store import (
    COMPUTE_DOMAIN,
    COMPUTE_DOMAIN_CLIQUE,
    COMPUTE_DOMAIN_MEMBER,
    RESOURCE_CLAIM_TEMPLATE,
)
from kubelet_plugin.compute_domain.main import CHECKPOINT_DIR
from kubelet_plugin.service import ClaimRef, PrepareResult
from kubelet_plugin.socket_names import plugin_data_dir
from tests.dra_driver.composition.conftest import TIMING
from tests.fakes import zygote
from tests.fakes.waiting import wait_until

pytestmark = pytest.mark.slow

NS = "team-a"
CLIQUE = "00000000-0000-0000-0000-000000000001.0"  # every gb200-node's, unless changed
CHANNEL = "/dev/nvidia-caps-imex-channels/channel0"
# -- reading what the cluster did --------------------------------------------------------


def _get(cluster: ComputeDomainCluster, kind: Any, namespace: str, name: str) -> Any:
    try:
        return cluster.store.get_object(kind, namespace, name)
    except NotFoundError:
        return None


def _condition(cluster: ComputeDomainCluster, name: str, kind: str) -> dict[str, Any] | None:
    domain = _get(cluster, COMPUTE_DOMAIN, NS, name) or {}
    for condition in (domain.get("status") or {}).get("conditions") or []:
        if condition.get("type") == kind:
            return dict(condition)
    return None


def _is(cluster: ComputeDomainCluster, name: str, kind: str) -> bool:
    condition = _condition(cluster, name, kind)
    return condition is not None and condition.get("status") == "True"


def _members(cluster: ComputeDomainCluster, uid: str) -> dict[str, dict[str, Any]]:
    return {
        m["spec"]["nodeName"]: m
        for m in cluster.store.list_objects(
            COMPUTE_DOMAIN_MEMBER, DRIVER_NAMESPACE, labels={DOMAIN_LABEL: uid}
        )
    }


def _cliques(cluster: ComputeDomainCluster, uid: str) -> list[dict[str, Any]]:
    return cluster.store.list_objects(
        COMPUTE_DOMAIN_CLIQUE, DRIVER_NAMESPACE, labels={DOMAIN_LABEL: uid}
    )


def _templates(cluster: ComputeDomainCluster, uid: str) -> list[dict[str, Any]]:
    return cluster.store.list_objects(RESOURCE_CLAIM_TEMPLATE, labels={DOMAIN_LABEL: uid})


def _imex_major(node: SimNode) -> int:
    """The `nvidia-caps-imex-channels` major of the node's simulated /proc/devices."""
    text = (node.sim_state.with_name(node.sim_state.name + ".proc") / "devices").read_text()
    found = re.search(r"^\s*(\d+)\s+nvidia-caps-imex-channels\s*$", text, re.MULTILINE)
    assert found, text
    return int(found.group(1))


def _imex_hosts(node: SimNode) -> dict[str, str]:
    """name -> IP of the hosts file the node's (one) IMEX daemon resolves names with (the
    `IMEX_STANDIN_HOSTS_FILE` of its environment)."""
    (pid,) = node.imex_daemon_pids()
    environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    path = next(e.split(b"=", 1)[1] for e in environ if e.startswith(b"IMEX_STANDIN_HOSTS_FILE="))
    out = {}
    for line in Path(path.decode()).read_text().splitlines():
        fields = line.split("#", 1)[0].split()
        for name in fields[1:]:
            out[name] = fields[0]
    return out


def _ready_domain(
    cluster: ComputeDomainCluster, name: str, nodes: list[str], *, template: str | None = None
) -> tuple[str, list[Any]]:
    """Apply a domain and one channel pod on each of `nodes`; wait until it is Ready."""
    template = template or f"{name}-channel"
    uid = cluster.apply_compute_domain(NS, name, template)["metadata"]["uid"]
    pods = [cluster.run_pod(channel_pod(NS, f"{name}-{n}", template, node=n)) for n in nodes]
    cluster.wait_for(lambda: _is(cluster, name, "Ready"), f"{name} Ready", 20.0)
    return uid, pods


# -- scenarios ----------------------------------------------------------------------------


def test_e1_two_node_domain_on_four_nodes_gets_channels_and_connected_imex(
    make_cluster: Any,
) -> None:
    began = time.monotonic()
    cluster = make_cluster(4).start()
    started = time.monotonic() - began

    domain = cluster.apply_compute_domain(NS, "imex", "imex-channel")  # numNodes absent
    uid = domain["metadata"]["uid"]
    template = cluster.wait_for(
        lambda: _get(cluster, RESOURCE_CLAIM_TEMPLATE, NS, "imex-channel"), "template", 10.0
    )
    assert template["metadata"]["labels"] == {DOMAIN_LABEL: uid, TARGET_LABEL: "Workload"}
    assert FINALIZER in template["metadata"]["finalizers"]

    pods = [
        cluster.run_pod(channel_pod(NS, f"worker-{i}", "imex-channel", node=f"node-{i}"))
        for i in (1, 2)
    ]
    for pod in pods:
        node = cluster.nodes[pod.node]
        # Prepare returned only once the local IMEX was Ready: the member says so now, and
        # the daemon itself answers READY.
        member = _members(cluster, uid)[pod.node]
        assert membership.member_status(member).state == membership.MemberState.READY
        assert node.imex_ctl(uid, "-q").stdout == "READY\n"
        # Exactly channel0, a character device with the node's /proc/devices major.
        assert pod.device_nodes == [
            {
                "path": CHANNEL,
                "type": "c",
                "major": _imex_major(node),
                "minor": 0,
                "fileMode": 0o666,
            }
        ]
        assert pod.cdi_device_ids == [
            f"k8s.compute-domain.nvidia.com/claim={pod.claims[0].ref.uid}-channel-0"
        ]

    cluster.wait_for(lambda: _is(cluster, "imex", "Ready"), "domain Ready", 20.0)
    (clique,) = _cliques(cluster, uid)
    rows = membership.clique_rows(clique)
    assert sorted(r.index for r in rows) == [0, 1]
    assert {r.node_name for r in rows} == {"node-1", "node-2"}
    assert set(_members(cluster, uid)) == {"node-1", "node-2"}  # nothing on node-3, node-4
    assert not cluster.nodes["node-3"].imex_daemon_pids()
    # Identical name -> IP maps, naming exactly the two members' addresses.
    maps = [_imex_hosts(cluster.nodes[n]) for n in ("node-1", "node-2")]
    assert maps[0] == maps[1]
    assert sorted(maps[0].values()) == sorted(cluster.nodes[n].ip for n in ("node-1", "node-2"))
    # Both stand-ins connected to each other.
    for n in ("node-1", "node-2"):
        assert set(cluster.nodes[n].imex_peers(uid).values()) == {"C"}
        other = "node-2" if n == "node-1" else "node-1"
        peers = membership.member_status(_members(cluster, uid)[n]).peers
        assert peers.get(other) == membership.PeerState.CONNECTED
    elapsed = time.monotonic() - began
    assert elapsed < 40.0, f"E1 took {elapsed:.1f} s (cluster start {started:.1f} s)"


def test_e3_lost_node_degrades_the_domain_and_the_other_node_stays_usable(
    make_cluster: Any,
) -> None:
    cluster = make_cluster(2).start()
    uid, _pods = _ready_domain(cluster, "lossy", ["node-1", "node-2"])

    began = time.monotonic()
    cluster.kill_node("node-2")
    cluster.wait_for(lambda: _is(cluster, "lossy", "Degraded"), "Degraded condition", 10.0)
    degraded_after = time.monotonic() - began
    condition = _condition(cluster, "lossy", "Degraded")
    assert condition is not None
    assert "node-2" in condition["message"]
    assert not _is(cluster, "lossy", "Ready")

    # node-1's IMEX keeps running and a new pod there still gets its channel.
    node1 = cluster.nodes["node-1"]
    assert node1.imex_ctl(uid, "-q").stdout == "READY\n"
    again = cluster.run_pod(channel_pod(NS, "lossy-again", "lossy-channel", node="node-1"))
    assert [n["path"] for n in again.device_nodes] == [CHANNEL]
    # and node-1's daemon sees node-2 go away.
    cluster.wait_for(
        lambda: (
            membership.member_status(_members(cluster, uid)["node-1"]).peers.get("node-2")
            not in (None, membership.PeerState.CONNECTED)
        ),
        "node-1 reporting node-2 disconnected",
        10.0,
    )
    total = time.monotonic() - began
    assert degraded_after < 8.0, f"Degraded after {degraded_after:.1f} s"
    assert total < 20.0, f"E3 took {total:.1f} s after the loss"


def test_e4_second_domain_in_the_clique_with_a_reused_ip_stays_apart(make_cluster: Any) -> None:
    cluster = make_cluster(3).start()
    uid_a, _ = _ready_domain(cluster, "alpha", ["node-1", "node-2"])
    began = time.monotonic()

    # node-2 leaves domain alpha (its pod deleted: member gone, its IMEX stopped), then the
    # node is lost for good and a new node comes up on its IP address.
    assert set(cluster.delete_pod(NS, "alpha-node-2").values()) == {""}
    cluster.wait_for(lambda: "node-2" not in _members(cluster, uid_a), "member of node-2 gone")
    reused_ip = cluster.nodes["node-2"].ip
    cluster.remove_node("node-2")
    newcomer = cluster.add_node("node-5", ip=reused_ip)

    uid_b, _ = _ready_domain(cluster, "beta", ["node-3", "node-5"])
    # Separate cliques, each with its own indices from 0.
    (clique_a,) = _cliques(cluster, uid_a)
    (clique_b,) = _cliques(cluster, uid_b)
    assert clique_a["metadata"]["name"] != clique_b["metadata"]["name"]
    assert [r.node_name for r in membership.clique_rows(clique_a)] == ["node-1"]
    assert sorted(r.index for r in membership.clique_rows(clique_b)) == [0, 1]
    # Different IMEX name sets; no daemon knows a name of the other domain, and alpha's map
    # no longer points at the reused address.
    hosts_a = _imex_hosts(cluster.nodes["node-1"])
    hosts_b = _imex_hosts(newcomer)
    assert not set(hosts_a) & set(hosts_b)
    assert reused_ip not in hosts_a.values()
    peers_a = cluster.nodes["node-1"].imex_peers(uid_a)
    peers_b = newcomer.imex_peers(uid_b)
    assert not set(peers_a) & set(peers_b)
    assert set(peers_b.values()) == {"C"}
    # No cross-domain connection: alpha's node-1 is connected to nobody but itself.
    assert [h for h, s in peers_a.items() if s == "C" and h in hosts_a] == [
        h for h, ip in hosts_a.items() if ip == cluster.nodes["node-1"].ip
    ]
    peers_of = {n: membership.member_status(m).peers for n, m in _members(cluster, uid_b).items()}
    assert set(peers_of) == {"node-3", "node-5"}
    assert all(set(p) <= {"node-3", "node-5"} for p in peers_of.values())
    elapsed = time.monotonic() - began
    assert elapsed < 30.0, f"E4 took {elapsed:.1f} s"


def test_e6_unsettled_fabric_publishes_nothing_then_settles_without_restart(
    make_cluster: Any,
) -> None:
    cluster = make_cluster(0).start()
    node = cluster.add_node("node-1", launch=False)
    node.ensure_state()
    cluster.set_fabric("node-1", "in_progress")
    node.launch()
    node.wait_serving()
    pid = node.plugin.pid
    began = time.monotonic()

    def devices() -> list[str]:
        return [
            d["name"]
            for s in cluster.store.list_resource_slices(driver=DRIVER_NAME, node_name="node-1")
            for d in s["spec"].get("devices") or []
        ]

    time.sleep(4 * (TIMING.fabric_check_interval or 0))  # several fabric checks pass
    assert devices() == []
    assert node.plugin.running()
    assert node.plugin.pid == pid

    cluster.set_fabric("node-1", "completed")
    settled = time.monotonic()
    cluster.wait_for(
        lambda: sorted(devices()) == ["channel-0", "daemon-0"], "published channel", 10.0
    )
    published_after = time.monotonic() - settled
    assert node.plugin.running()
    assert node.plugin.pid == pid
    elapsed = time.monotonic() - began
    assert published_after < 5.0, f"published {published_after:.1f} s after the fabric settled"
    assert elapsed < 15.0, f"E6 took {elapsed:.1f} s"


def test_e8_deleting_a_domain_under_running_work_is_ordered_and_visible(
    make_cluster: Any,
) -> None:
    cluster = make_cluster(2).start()
    uid, pods = _ready_domain(cluster, "doomed", ["node-1", "node-2"])
    imex = {n: cluster.nodes[n].imex_daemon_pids() for n in ("node-1", "node-2")}
    assert all(imex.values())
    began = time.monotonic()

    cluster.delete_compute_domain(NS, "doomed")
    cluster.wait_for(lambda: _is(cluster, "doomed", "Terminating"), "Terminating condition", 10.0)
    condition = _condition(cluster, "doomed", "Terminating")
    assert condition is not None
    assert "node-1" in condition["message"]
    domain = _get(cluster, COMPUTE_DOMAIN, NS, "doomed")
    assert domain["metadata"]["deletionTimestamp"]
    assert FINALIZER in domain["metadata"]["finalizers"]
    cluster.wait_for(lambda: not _templates(cluster, uid), "workload template deleted", 10.0)
    # IMEX keeps running under the running work.
    for n, pids in imex.items():
        assert cluster.nodes[n].imex_daemon_pids() == pids
        assert cluster.nodes[n].imex_ctl(uid, "-q").stdout == "READY\n"

    # The workloads end: their claims unprepare, the members go, then the domain.
    for pod in pods:
        assert set(cluster.delete_pod(NS, pod.name).values()) == {""}
    cluster.wait_for(
        lambda: _get(cluster, COMPUTE_DOMAIN, NS, "doomed") is None, "domain gone", 15.0
    )
    assert not _members(cluster, uid)
    assert not _cliques(cluster, uid)
    cluster.wait_for(
        lambda: not any(cluster.nodes[n].imex_daemon_pids() for n in imex), "IMEX stopped", 10.0
    )

    # A domain forced away (its finalizer removed by hand, #380) leaves claims that unprepare.
    uid2, (pod,) = _ready_domain(cluster, "forced", ["node-1"])
    cluster.delete_compute_domain(NS, "forced")
    forced = cluster.compute_domain(NS, "forced")
    forced["metadata"]["finalizers"] = []
    cluster.store.update_object(COMPUTE_DOMAIN, forced)
    assert _get(cluster, COMPUTE_DOMAIN, NS, "forced") is None
    assert set(cluster.delete_pod(NS, pod.name).values()) == {""}
    cluster.wait_for(lambda: not _members(cluster, uid2), "member of the forced domain gone", 10.0)
    elapsed = time.monotonic() - began
    assert elapsed < 40.0, f"E8 took {elapsed:.1f} s"


def test_e9_leader_failover_within_the_lease_and_no_duplicate_template(
    make_cluster: Any,
) -> None:
    cluster = make_cluster(1)
    first = cluster.start_controller(leader_elect=True)
    second = cluster.start_controller(leader_elect=True)
    cluster.start(controllers=0)
    holder = cluster.wait_for(cluster.lease_holder, "a Lease holder", 15.0)
    uid = cluster.apply_compute_domain(NS, "elect", "elect-channel")["metadata"]["uid"]
    cluster.wait_for(lambda: _templates(cluster, uid), "template", 10.0)

    leader = first if holder in first.log_tail(100_000) else second
    follower = second if leader is first else first
    assert holder not in follower.log_tail(100_000)
    began = time.monotonic()
    leader.kill()
    new_holder = cluster.wait_for(
        lambda: (h := cluster.lease_holder()) != holder and h, "a new Lease holder", 15.0
    )
    takeover = time.monotonic() - began
    assert new_holder in follower.log_tail(100_000)
    uid2 = cluster.apply_compute_domain(NS, "elect-2", "elect-2-channel")["metadata"]["uid"]
    cluster.wait_for(lambda: _templates(cluster, uid2), "template from the new leader", 10.0)
    time.sleep(1.0)  # the new leader's first full reconcile has passed
    assert len(_templates(cluster, uid)) == 1
    assert len(_templates(cluster, uid2)) == 1
    assert takeover <= (TIMING.lease_duration or 0) + 2 * (TIMING.retry_period or 0) + 1.0, (
        f"takeover after {takeover:.1f} s"
    )


def test_e2_allocation_mode_all_injects_every_channel(make_cluster: Any) -> None:
    cluster = make_cluster(1).start()
    began = time.monotonic()
    cluster.apply_compute_domain(NS, "wide", "wide-channel", allocation_mode="All")
    pod = cluster.run_pod(channel_pod(NS, "wide-0", "wide-channel", node="node-1"))
    major = _imex_major(cluster.nodes["node-1"])
    assert [n["path"] for n in pod.device_nodes] == [
        f"/dev/nvidia-caps-imex-channels/channel{k}" for k in range(2048)
    ]
    assert {(n["type"], n["major"], n["fileMode"]) for n in pod.device_nodes} == {
        ("c", major, 0o666)
    }
    assert [n["minor"] for n in pod.device_nodes] == list(range(2048))
    elapsed = time.monotonic() - began
    assert elapsed < 15.0, f"E2 took {elapsed:.1f} s"


def test_e7_a_node_without_multi_node_nvlink_offers_no_channel(make_cluster: Any) -> None:
    cluster = make_cluster(1).start()
    plain = cluster.add_node("node-2", launch=False)
    plain.ensure_state()
    cluster.set_fabric("node-2", "not_supported")
    plain.launch()
    plain.wait_serving()
    began = time.monotonic()
    cluster.apply_compute_domain(NS, "mixed", "mixed-channel")
    ok = cluster.run_pod(channel_pod(NS, "mixed-1", "mixed-channel", node="node-1"))
    assert [n["path"] for n in ok.device_nodes] == [CHANNEL]
    # The pod pinned to the node without a fabric is not placed, and says why.
    with pytest.raises(PodPlacementError, match=r"node-2: none"):
        cluster.run_pod(channel_pod(NS, "mixed-2", "mixed-channel", node="node-2"), timeout=3.0)
    assert not _members(cluster, cluster.compute_domain(NS, "mixed")["metadata"]["uid"]).get(
        "node-2"
    )
    elapsed = time.monotonic() - began
    assert elapsed < 15.0, f"E7 took {elapsed:.1f} s"


def test_e12_host_managed_imex_forces_single_and_waits_for_the_host_daemon(
    make_cluster: Any, tmp_path: Path
) -> None:
    sock = Path(tempfile.mkdtemp(prefix="dra-gpu-host-imex-", dir="/tmp")) / "imex_ctrl.sock"
    cluster = make_cluster(
        1,
        plugin_args=["--imex-mode=hostManaged", f"--imex-host-socket-path={sock}"],
        controller_args=["--imex-mode=hostManaged"],
    ).start()
    node = cluster.nodes["node-1"]
    began = time.monotonic()
    uid = cluster.apply_compute_domain(NS, "hosted", "hosted-channel", allocation_mode="All")[
        "metadata"
    ]["uid"]
    template = cluster.wait_for(lambda: _templates(cluster, uid), "template", 10.0)[0]
    config = template["spec"]["spec"]["devices"]["config"][0]["opaque"]["parameters"]
    assert config["allocationMode"] == "Single"  # the host's IMEX has channel 0 only
    published = [
        d["name"]
        for s in cluster.store.list_resource_slices(driver=DRIVER_NAME, node_name="node-1")
        for d in s["spec"].get("devices") or []
    ]
    assert published == ["channel-0"]  # no daemon device in host-managed mode

    # No host IMEX yet: Prepare keeps failing, saying what it waits for.
    with pytest.raises(PodPlacementError, match=r"(?i)ready"):
        cluster.run_pod(channel_pod(NS, "hosted-0", "hosted-channel", node="node-1"), timeout=3.0)
    host_imex = _start_host_imex(node, sock, tmp_path)
    try:
        pod = cluster.kubelet.run_pod(
            channel_pod(NS, "hosted-0", "hosted-channel", node="node-1"), timeout=15.0
        )
        assert [n["path"] for n in pod.device_nodes] == [CHANNEL]
        assert not _members(cluster, uid)  # the host runs IMEX: no member, no IMEX host work
    finally:
        host_imex.kill()
        host_imex.wait(timeout=10)
        shutil.rmtree(sock.parent, ignore_errors=True)
    elapsed = time.monotonic() - began
    assert elapsed < 25.0, f"E12 took {elapsed:.1f} s"


def _start_host_imex(node: SimNode, sock: Path, work: Path) -> subprocess.Popen[bytes]:
    """The host's own nvidia-imex service (the stand-in), answering on `sock`."""
    nodes = work / "nodes.cfg"
    nodes.write_text("host-imex-0\n")
    hosts = work / "hosts"
    hosts.write_text(f"{node.ip} host-imex-0\n")
    cfg = work / "imexd.cfg"
    cfg.write_text(
        f"LOG_FILE_NAME=\nBIND_INTERFACE_IP={node.ip}\nSERVER_PORT=50000\n"
        f"IMEX_NODE_CONFIG_FILE={nodes}\nIMEX_CMD_ENABLED=1\nIMEX_CMD_PORT=50005\n"
        f"IMEX_CMD_BIND_INTERFACE_IP={node.ip}\nIMEX_CMD_UNIX_DOMAIN_PATH={sock}\n"
    )
    env = {**os.environ, "IMEX_STANDIN_HOSTS_FILE": str(hosts)}
    with (work / "host-imex.log").open("wb") as log:
        return subprocess.Popen(
            [str(node.driver_root / "usr" / "bin" / "nvidia-imex"), "-c", str(cfg)],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def test_e5_restarts_and_a_joining_node_keep_indices_and_imex(make_cluster: Any) -> None:
    cluster = make_cluster(3).start()
    uid, _ = _ready_domain(cluster, "steady", ["node-1", "node-2"])
    began = time.monotonic()

    def indices() -> dict[str, int]:
        rows = [r for c in _cliques(cluster, uid) for r in membership.clique_rows(c)]
        return {r.node_name: r.index for r in rows}

    def ready(n: str) -> bool:
        member = _members(cluster, uid).get(n)
        return member is not None and membership.member_status(member).state == "Ready"

    before = indices()
    imex = {n: cluster.nodes[n].imex_daemon_pids() for n in ("node-1", "node-2")}
    # The CD plugin of node-2 dies and comes back (a crash, an upgrade): IMEX runs on.
    cluster.nodes["node-2"].restart_plugin()
    assert {n: cluster.nodes[n].imex_daemon_pids() for n in imex} == imex
    # The IMEX host of node-1 dies and comes back: it adopts the running IMEX, and cannot
    # know when it last signalled it (IMEX ignores a SIGUSR1 within 5 s of the last one).
    cluster.nodes["node-1"].restart_imex_host()
    cluster.wait_for(lambda: ready("node-1"), "node-1 Ready after its IMEX host restarted", 10.0)
    # A third node joins at once: the others' IMEX re-resolve (SIGUSR1); none is restarted,
    # and no peer update is lost to IMEX's rate limit.
    cluster.run_pod(channel_pod(NS, "steady-node-3", "steady-channel", node="node-3"))
    cluster.wait_for(
        lambda: len(indices()) == 3 and _is(cluster, "steady", "Ready"), "3 nodes Ready", 15.0
    )
    assert indices() == {**before, "node-3": 2}
    assert {n: cluster.nodes[n].imex_daemon_pids() for n in imex} == imex
    for n in imex:
        assert "SIGUSR1: re-resolving" in cluster.nodes[n].imex_log(uid)
        assert cluster.nodes["node-3"].ip in _imex_hosts(cluster.nodes[n]).values()
    # A workload pod deleted and created again prepares again, on its old index.
    assert set(cluster.delete_pod(NS, "steady-node-2").values()) == {""}
    again = cluster.run_pod(channel_pod(NS, "steady-node-2", "steady-channel", node="node-2"))
    assert [n["path"] for n in again.device_nodes] == [CHANNEL]
    assert indices() == {**before, "node-3": 2}
    cluster.wait_for(lambda: _is(cluster, "steady", "Ready"), "Ready after the re-join", 20.0)
    elapsed = time.monotonic() - began
    assert elapsed < 40.0, f"E5 took {elapsed:.1f} s"


def test_demo_compute_domain_reports_a_ready_domain_and_channels_as_json() -> None:
    began = time.monotonic()
    out = io.StringIO()
    assert run_compute_domain_demo(nodes=2, output="json", out=out, spawn=zygote.spawn) == 0
    report = json.loads(out.getvalue())
    assert (report["ready"], report["channels"], report["deleted"]) == (True, True, True)
    assert sorted(p["node"] for p in report["pods"]) == ["node-1", "node-2"]
    for pod in report["pods"]:
        assert pod["deviceNodes"][0]["path"] == CHANNEL
        assert any(n["path"] == "/dev/nvidia0" for n in pod["deviceNodes"])  # and its GPUs
    conditions = {c["type"]: c["status"] for c in report["domain"]["status"]["conditions"]}
    assert conditions["Ready"] == "True"
    assert {node: peer["state"] for node, peer in report["imexPeers"].items()} == {
        "node-1": "Ready",
        "node-2": "Ready",
    }
    assert all(set(p["imexCtl"].values()) == {"C"} for p in report["imexPeers"].values())
    elapsed = time.monotonic() - began
    assert elapsed < 45.0, f"the demo took {elapsed:.1f} s"


# -- E10: a plugin restart mid-Prepare, a stale Prepare, a reboot ---------------------------


def _checkpoint(node: SimNode) -> dict[str, tuple[ClaimState, str]]:
    """claim UID -> (state, boot id) of every claim file in the node's CD plugin checkpoint."""
    directory = plugin_data_dir(node.kubelet_root, DRIVER_NAME) / CHECKPOINT_DIR
    out = {}
    for path in directory.glob(f"*{CLAIM_FILE_SUFFIX}"):
        stored = decode_checkpoint(path.read_bytes(), source=str(path))
        for uid, entry in stored.claims.items():
            out[uid] = (entry.state, stored.boot_id)
    return out


def _cdi_claims(node: SimNode) -> set[str]:
    """The claims the node's CDI directory has a channel spec for."""
    return CdiStore(node.cdi_root, kind=channel_cdi.CLAIMS).claim_uids()


def _prepare(node: SimNode, ref: ClaimRef) -> PrepareResult | str:
    """The kubelet's NodePrepareResources for one claim: its answer, or the RPC's failure."""
    try:
        return node.access.client(DRIVER_NAME).prepare([ref])[ref.uid]
    except Exception as exc:  # grpc.RpcError: the plugin died under the call
        return f"{type(exc).__name__}: {exc}"


def _allocated_claim(cluster: ComputeDomainCluster, pod: dict[str, Any]) -> ClaimRef:
    """The pod's channel claim, made from its template and allocated (the scheduler's part of
    `run_pod`, without the kubelet's Prepare)."""
    claims = cluster.kubelet.claims_for(pod, timeout=10.0)
    _node, (claim,) = cluster.kubelet.allocate(pod, claims)
    return ClaimRef(NS, claim["metadata"]["uid"], claim["metadata"]["name"])


def test_e10_plugin_killed_mid_prepare_stale_prepare_refused_reboot_voids_checkpoint(
    make_cluster: Any,
) -> None:
    cluster = make_cluster(1).start()
    node = cluster.nodes["node-1"]
    uid = cluster.apply_compute_domain(NS, "phoenix", "phoenix-channel")["metadata"]["uid"]
    cluster.wait_for(lambda: _templates(cluster, uid), "template", 10.0)
    began = time.monotonic()

    # node-1's IMEX host is down, so a channel claim's Prepare waits for IMEX there ...
    node.imex_host.kill()
    pod = channel_pod(NS, "phoenix-0", "phoenix-channel", node="node-1")
    pod["metadata"]["uid"] = str(uuid.uuid4())
    ref = _allocated_claim(cluster, pod)
    answers: list[PrepareResult | str] = []
    preparing = threading.Thread(target=lambda: answers.append(_prepare(node, ref)))
    preparing.start()
    wait_until(  # not cluster.wait_for: that one fails on the IMEX host killed on purpose
        lambda: (
            _checkpoint(node).get(ref.uid, (None,))[0] is ClaimState.PrepareStarted
            and "node-1" in _members(cluster, uid)
        ),
        "a Prepare waiting for IMEX (PrepareStarted, member created)",
        timeout=10.0,
    )
    # ... when the plugin is SIGKILLed under it: the kubelet's call fails, half done.
    node.plugin.kill()
    preparing.join(timeout=10.0)
    (answer,) = answers
    assert isinstance(answer, str), answer
    assert "UNAVAILABLE" in answer, answer
    assert ref.uid in _checkpoint(node)
    # The pod gives up: its claim is deleted; a finalizer keeps it Terminating for now.
    claim = cluster.store.get_resource_claim(NS, ref.name)
    claim["metadata"]["finalizers"] = ["resource.kubernetes.io/delete-protection"]
    cluster.store.update_object(RESOURCE_CLAIM, claim)
    cluster.store.delete_object(RESOURCE_CLAIM, NS, ref.name)

    # The restarted plugin sweeps the half-done Prepare: no entry, no CDI spec, no member.
    node.restart_plugin()
    assert ref.uid not in _checkpoint(node)
    assert ref.uid not in _cdi_claims(node)
    assert _members(cluster, uid) == {}
    log = node.plugin.log_tail(100_000)
    assert f"rolled back the half-done Prepare of ResourceClaim {NS}/{ref.name}" in log

    # The kubelet's stale retry is refused at once, naming the claim, and leaves nothing:
    # while the claim is Terminating, and once it is gone.
    refused_began = time.monotonic()
    stale = _prepare(node, ref)
    assert isinstance(stale, PrepareResult), stale
    assert f"ResourceClaim {NS}/{ref.name} (UID {ref.uid})" in stale.error
    assert "being deleted; a Prepare of it is stale and refused" in stale.error, stale.error
    claim = cluster.store.get_resource_claim(NS, ref.name)
    claim["metadata"]["finalizers"] = []
    cluster.store.update_object(RESOURCE_CLAIM, claim)
    assert _get(cluster, RESOURCE_CLAIM, NS, ref.name) is None
    stale = _prepare(node, ref)
    assert isinstance(stale, PrepareResult), stale
    assert "not found: it was deleted; a Prepare of it is stale and refused" in stale.error
    refused_after = time.monotonic() - refused_began
    assert ref.uid not in _checkpoint(node)
    assert ref.uid not in _cdi_claims(node)
    assert _members(cluster, uid) == {}

    # Nothing holds node-1 back: with its IMEX host back, a new pod gets its channel.
    node.imex_host.start()
    running = cluster.run_pod(channel_pod(NS, "phoenix-1", "phoenix-channel", node="node-1"))
    assert [n["path"] for n in running.device_nodes] == [CHANNEL]
    (claim_ref,) = [pc.ref for pc in running.claims]
    ((_, boot_before),) = _checkpoint(node).values()

    # A reboot: the checkpoint of the earlier boot is void. The restarted plugin discards the
    # entry, removes the claim's CDI spec and the member nobody holds any more ...
    boot_after = node.reboot()
    assert boot_after != boot_before
    log = node.plugin.log_tail(100_000)
    assert f"discarded ResourceClaim {NS}/{claim_ref.name} (uid {claim_ref.uid}) of an " in log
    assert _checkpoint(node) == {}
    assert _cdi_claims(node) == set()
    cluster.wait_for(lambda: not _members(cluster, uid), "member gone after the reboot", 5.0)
    # ... and the kubelet, re-running the pod after the reboot, prepares it from scratch.
    again = _prepare(node, claim_ref)
    assert isinstance(again, PrepareResult), again
    assert again.error == ""
    assert _checkpoint(node) == {claim_ref.uid: (ClaimState.PrepareCompleted, boot_after)}
    assert _cdi_claims(node) == {claim_ref.uid}
    member = _members(cluster, uid)["node-1"]
    assert membership.member_status(member).state == membership.MemberState.READY
    elapsed = time.monotonic() - began
    assert refused_after < 2.0, f"the stale Prepares took {refused_after:.1f} s to refuse"
    assert elapsed < 20.0, f"E10 took {elapsed:.1f} s"


# -- E13: an upgrade over what an older release wrote ---------------------------------------


def _with_unknown_fields(path: Path) -> None:
    """Rewrite a claim file of the CD plugin's checkpoint as a release with more fields would
    have: unknown fields at every level (payload, claim, device, channel record), the
    checksum over the new payload bytes, as that release computes it."""
    _header, _, payload = path.read_bytes().partition(b"\n")
    data = json.loads(payload)
    data["legacyNote"] = "written by an older dra-gpu"
    for entry in data["claims"].values():
        entry["legacyHint"] = {"attempts": 3}
        for device in entry["devices"]:
            device["legacyField"] = True
            if device.get("channel"):
                device["channel"]["legacyImexVersion"] = "570.86"
    body = (json.dumps(data, sort_keys=True, indent=2) + "\n").encode()
    digest = hashlib.sha256(body).hexdigest()
    header = json.dumps({"checksum": f"sha256:{digest}", "format": "dra-gpu/checkpoint"})
    path.write_bytes(header.encode() + b"\n" + body)


def _events(cluster: ComputeDomainCluster, namespace: str, reason: str) -> list[dict[str, Any]]:
    return [e for e in cluster.store.list_objects(EVENT, namespace) if e.get("reason") == reason]


def test_e13_upgrade_over_old_objects_and_checkpoint_deletes_cleanly_and_stays_strict_on_config(
    make_cluster: Any,
) -> None:
    cluster = make_cluster(1).start()
    node = cluster.nodes["node-1"]
    # numNodes set, no allocationMode: a ComputeDomain as v25.3 users wrote them.
    uid = cluster.apply_compute_domain(NS, "legacy", "legacy-channel", num_nodes=1)["metadata"][
        "uid"
    ]
    old_pod = cluster.run_pod(channel_pod(NS, "legacy-0", "legacy-channel", node="node-1"))
    cluster.wait_for(lambda: _is(cluster, "legacy", "Ready"), "legacy Ready", 20.0)
    (old_ref,) = [pc.ref for pc in old_pod.claims]
    began = time.monotonic()

    # The old release's controller and plugin stop (the upgrade's rollout) ...
    (controller,) = cluster.controllers
    controller.terminate()
    node.plugin.kill()
    # ... leaving what they wrote: the domain's status in NVIDIA v25.3's shape (rows of name,
    # IP and clique only, no conditions) with a field this release does not know; clique rows
    # without `status` and with unknown fields; a member with unknown fields; the claim's
    # checkpoint file with unknown fields at every level.
    domain = cluster.compute_domain(NS, "legacy")
    domain["status"] = {
        "status": "Ready",
        "nodes": [{"name": "node-1", "ipAddress": node.ip, "cliqueID": CLIQUE, "imexPort": 50000}],
        "legacyPhase": "Running",
    }
    cluster.store.update_object_status(COMPUTE_DOMAIN, domain)
    (clique,) = _cliques(cluster, uid)
    for row in clique["daemons"]:
        del row["status"]
        row["legacyDNSName"] = "compute-domain-daemon-0000"
    clique["legacyGeneration"] = 7
    cluster.store.update_object(COMPUTE_DOMAIN_CLIQUE, clique)
    member = _members(cluster, uid)["node-1"]
    member["spec"]["legacyHint"] = "older"
    cluster.store.update_object(COMPUTE_DOMAIN_MEMBER, member)
    checkpoint_file = (
        plugin_data_dir(node.kubelet_root, DRIVER_NAME)
        / CHECKPOINT_DIR
        / f"{old_ref.uid}{CLAIM_FILE_SUFFIX}"
    )
    _with_unknown_fields(checkpoint_file)

    # The new plugin loads the old checkpoint as it is (nothing quarantined or rolled back),
    # and prepares a new pod's claim in the old domain, whose status it does not all know.
    node.restart_plugin()
    log = node.plugin.log_tail(100_000)
    assert "quarantined" not in log
    assert _checkpoint(node)[old_ref.uid][0] is ClaimState.PrepareCompleted
    new_pod = cluster.run_pod(
        channel_pod(NS, "legacy-1", "legacy-channel", node="node-1"), timeout=10.0
    )
    assert [n["path"] for n in new_pod.device_nodes] == [CHANNEL]

    # The new controller takes the old objects over: the domain is Ready again with this
    # release's status (conditions, indices; the unknown fields dropped), never InvalidSpec.
    controller.start({"POD_NAME": controller.pod_name, "HOSTNAME": "controller-host-0"})
    cluster.wait_for(
        lambda: (
            (_get(cluster, COMPUTE_DOMAIN, NS, "legacy").get("status") or {}).get("conditions")
            and _is(cluster, "legacy", "Ready")
        ),
        "legacy Ready under the new controller",
        10.0,
    )
    status = cluster.compute_domain(NS, "legacy")["status"]
    assert "legacyPhase" not in status
    assert [(n["name"], n["index"]) for n in status["nodes"]] == [("node-1", 0)]
    assert not _events(cluster, NS, "InvalidSpec")
    assert [r.index for r in membership.clique_rows(_cliques(cluster, uid)[0])] == [0]

    # A user's config with an unknown field is refused strictly, naming the field, with an
    # Event the user sees on the claim and the pod.
    template = copy.deepcopy(_templates(cluster, uid)[0])
    template["metadata"] = {"namespace": NS, "name": "legacy-strict"}
    config = template["spec"]["spec"]["devices"]["config"][0]["opaque"]["parameters"]
    config["unexpectedField"] = 1
    cluster.store.create_object(RESOURCE_CLAIM_TEMPLATE, template)
    with pytest.raises(PodPlacementError, match=r"unexpectedField"):
        cluster.run_pod(channel_pod(NS, "strict-0", "legacy-strict", node="node-1"), timeout=3.0)
    event = cluster.wait_for(
        lambda: [
            e
            for e in _events(cluster, NS, "PrepareFailed")
            if "unexpectedField" in e.get("note", "")
        ],
        "a PrepareFailed Event naming the field",
        5.0,
    )[0]
    assert event["type"] == "Warning"
    assert {e["regarding"]["kind"] for e in _events(cluster, NS, "PrepareFailed")} >= {
        "ResourceClaim",
        "Pod",
    }

    # Deleting the old workloads works: the claim the old plugin prepared unprepares from the
    # old checkpoint, then the domain goes, with no finalizer left anywhere.
    assert cluster.delete_pod(NS, "legacy-0") == {old_ref.name: ""}
    assert set(cluster.delete_pod(NS, "legacy-1").values()) == {""}
    assert _checkpoint(node) == {}
    assert _cdi_claims(node) == set()
    assert not checkpoint_file.exists()
    cluster.delete_compute_domain(NS, "legacy")
    cluster.wait_for(
        lambda: _get(cluster, COMPUTE_DOMAIN, NS, "legacy") is None, "the domain gone", 15.0
    )
    assert not _members(cluster, uid)
    assert not _cliques(cluster, uid)
    assert not _templates(cluster, uid)
    elapsed = time.monotonic() - began
    assert elapsed < 20.0, f"E13 took {elapsed:.1f} s"
