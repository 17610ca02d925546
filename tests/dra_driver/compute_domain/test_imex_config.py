"""The IMEX daemon's files, byte for byte: NVIDIA's config values, static names, current hosts."""

from __future__ import annotations

import pytest

from dra_driver.compute_domain.imex_config import (
    hosts_entries,
    merge_hosts,
    render_hosts,
    render_imexd_config,
    render_nodes_config,
)
from dra_driver.compute_domain.membership import CliqueRow, imex_node_name
from dra_driver.errors import ConfigError

UID = "3f6e6d2c-6a44-4a59-9c36-4b8d1c1a2b3c"
OTHER_UID = "9b1e4f7a-0c2d-4e5f-8a6b-7c8d9e0f1a2b"
CLIQUE = "00000000-0000-0000-0000-000000000001.0"
HEADER = "# Written by the dra-gpu IMEX host; rewritten on every change. Do not edit.\n"


def row(node: str, ip: str, index: int, status: str = "Ready") -> CliqueRow:
    return CliqueRow(node_name=node, ip_address=ip, clique_id=CLIQUE, index=index, status=status)


def test_imexd_config_is_nvidias_template_bound_to_the_node_address() -> None:
    text = render_imexd_config(node_ip="10.0.0.7", nodes_config_path="/var/lib/d/nodes.cfg")
    assert text == (
        HEADER + "LOG_LEVEL=4\n"
        "LOG_FILE_NAME=\n"
        "DAEMONIZE=0\n"
        "BIND_INTERFACE_IP=10.0.0.7\n"
        "SERVER_PORT=50000\n"
        "IMEX_NODE_CONFIG_FILE=/var/lib/d/nodes.cfg\n"
        "IMEX_WAIT_FOR_QUORUM=RECOVERY\n"
        "IMEX_ENABLE_AUTH_ENCRYPTION=0\n"
        "IMEX_CMD_ENABLED=1\n"
        "IMEX_CMD_BIND_INTERFACE_IP=10.0.0.7\n"
        "IMEX_CMD_PORT=50005\n"
        "IMEX_NODE_DISCONNECTED_GRACE_TIME=-1\n"
    )


def test_imexd_config_refuses_a_node_address_that_is_not_one() -> None:
    with pytest.raises(ConfigError, match=r"--node-ip.*'node-1' is not an IP address"):
        render_imexd_config(node_ip="node-1", nodes_config_path="/x/nodes.cfg")


def test_nodes_config_lists_every_index_of_the_domain_in_order() -> None:
    text = render_nodes_config(UID, 3)
    assert text == (
        "compute-domain-daemon-f3986761-0000\n"
        "compute-domain-daemon-f3986761-0001\n"
        "compute-domain-daemon-f3986761-0002\n"
    )
    assert render_nodes_config(UID).count("\n") == 18  # NVIDIA's default limit


def test_two_domains_never_share_a_name() -> None:
    ours = set(render_nodes_config(UID).split())
    theirs = set(render_nodes_config(OTHER_UID).split())
    assert not ours & theirs


def test_hosts_map_current_rows_by_index_and_the_node_to_its_own_address() -> None:
    rows = [
        row("n3", "127.0.1.3", 2),
        row("n1", "", 0),  # our own row, before the controller copied our address
        row("n2", "127.0.1.2", 1, status="NotReady"),
    ]
    entries = hosts_entries(UID, rows, node_name="n1", node_ip="127.0.1.1", max_nodes=18)
    assert render_hosts(entries) == (
        HEADER + "127.0.1.1\tcompute-domain-daemon-f3986761-0000\n"
        "127.0.1.2\tcompute-domain-daemon-f3986761-0001\n"
        "127.0.1.3\tcompute-domain-daemon-f3986761-0002\n"
    )


def test_hosts_leave_out_peers_without_an_address_and_indices_past_the_limit() -> None:
    rows = [row("n1", "127.0.1.1", 0), row("n2", "", 1), row("n9", "127.0.1.9", 18)]
    entries = hosts_entries(UID, rows, node_name="n1", node_ip="127.0.1.1", max_nodes=18)
    assert [(e.ip_address, e.name) for e in entries] == [("127.0.1.1", imex_node_name(UID, 0))]


def test_a_departed_peer_leaves_no_stale_address() -> None:
    before = hosts_entries(
        UID,
        [row("n1", "127.0.1.1", 0), row("n2", "127.0.1.2", 1)],
        node_name="n1",
        node_ip="127.0.1.1",
    )
    after = hosts_entries(UID, [row("n1", "127.0.1.1", 0)], node_name="n1", node_ip="127.0.1.1")
    assert "127.0.1.2" in render_hosts(before)
    assert "127.0.1.2" not in render_hosts(after)


def test_merge_keeps_the_admins_lines_and_replaces_every_imex_line() -> None:
    existing = (
        "127.0.0.1\tlocalhost\n"
        "10.0.0.5\tstorage  # the NAS\n"
        f"{HEADER}"
        f"10.9.9.9\t{imex_node_name(OTHER_UID, 0)}\n"  # a previous domain's name
        f"10.0.0.8\t{imex_node_name(UID, 1)}\n"  # our own stale address
    )
    entries = hosts_entries(
        UID, [row("n1", "", 0), row("n2", "10.0.0.2", 1)], node_name="n1", node_ip="10.0.0.1"
    )
    assert merge_hosts(existing, entries) == (
        "127.0.0.1\tlocalhost\n"
        "10.0.0.5\tstorage  # the NAS\n" + HEADER + f"10.0.0.1\t{imex_node_name(UID, 0)}\n"
        f"10.0.0.2\t{imex_node_name(UID, 1)}\n"
    )
    assert merge_hosts(merge_hosts(existing, entries), entries) == merge_hosts(existing, entries)
    assert merge_hosts(existing, ()) == "127.0.0.1\tlocalhost\n10.0.0.5\tstorage  # the NAS\n"
