"""The three files an IMEX daemon of one ComputeDomain runs with (pure renderers).

NVIDIA's daemon pod renders `imexd.cfg` from a fixed template with two
values filled in, writes a static `nodes.cfg` of DNS-style names, and keeps
`/etc/hosts` mapping those names to the clique's daemon addresses
(computedomain.md §4.3-§4.4). The node's IMEX host (`kubelet_plugin.imex_host`)
does the same, with the names unique to the domain
(`membership.imex_node_name`), so that:

- `imexd.cfg` carries NVIDIA's template values (the config is read once, at
  start) plus the node's own address, on which IMEX listens and serves its
  command port;
- `nodes.cfg` never changes while the domain exists: line `i` is the name of
  index `i`, so a daemon's IMEX node ID is its index, and peers come and go
  without a restart;
- the hosts block maps the names of the clique's *current* rows to their
  addresses, and nothing else: a name of another domain, or a name pointing
  at an address no current member owns, could connect two domains (#1447).

Everything here is pure text in, text out; the host writes the files.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Final

from dra_driver.compute_domain.membership import (
    MAX_NODES_PER_IMEX_DOMAIN,
    CliqueRow,
    imex_node_name,
)
from dra_driver.errors import ConfigError

__all__ = [
    "IMEX_CMD_PORT",
    "IMEX_NAME_PREFIX",
    "SERVER_PORT",
    "HostEntry",
    "hosts_entries",
    "merge_hosts",
    "render_hosts",
    "render_imexd_config",
    "render_nodes_config",
]

SERVER_PORT: Final = 50000
"""IMEX's peer port (NVIDIA's template)."""
IMEX_CMD_PORT: Final = 50005
"""IMEX's command service port, which `nvidia-imex-ctl` talks to (NVIDIA's template)."""

IMEX_NAME_PREFIX: Final = "compute-domain-daemon-"
"""Every IMEX node name starts so (`membership.imex_node_name`); a shared hosts file's
lines of such names belong to the IMEX host and are rewritten by it."""

_HEADER: Final = "# Written by the dra-gpu IMEX host; rewritten on every change. Do not edit.\n"


@dataclass(frozen=True, slots=True)
class HostEntry:
    """One hosts-file line: `ip<TAB>name`."""

    ip_address: str
    name: str


def _check_ip(ip: str, what: str) -> str:
    try:
        return str(ipaddress.ip_address(ip))
    except ValueError:
        raise ConfigError(f"{what}: {ip!r} is not an IP address") from None


def render_imexd_config(*, node_ip: str, nodes_config_path: str, log_file: str = "") -> str:
    """`imexd.cfg`: NVIDIA's template values, bound to `node_ip` (§4.3).

    NVIDIA leaves `BIND_INTERFACE_IP` empty (IMEX picks the local address
    listed in the nodes config); the host sets it, so the daemon of a node
    with several addresses, or a simulated node on a shared loopback, binds
    the one its peers are told about. `log_file` empty: IMEX logs to stderr.
    """
    ip = _check_ip(node_ip, "imexd.cfg BIND_INTERFACE_IP (--node-ip)")
    if not nodes_config_path or "\n" in nodes_config_path:
        raise ConfigError(f"imexd.cfg IMEX_NODE_CONFIG_FILE: bad path {nodes_config_path!r}")
    if "\n" in log_file:
        raise ConfigError(f"imexd.cfg LOG_FILE_NAME: bad path {log_file!r}")
    values = (
        ("LOG_LEVEL", "4"),
        ("LOG_FILE_NAME", log_file),
        ("DAEMONIZE", "0"),
        ("BIND_INTERFACE_IP", ip),
        ("SERVER_PORT", str(SERVER_PORT)),
        ("IMEX_NODE_CONFIG_FILE", nodes_config_path),
        ("IMEX_WAIT_FOR_QUORUM", "RECOVERY"),
        ("IMEX_ENABLE_AUTH_ENCRYPTION", "0"),
        ("IMEX_CMD_ENABLED", "1"),
        ("IMEX_CMD_BIND_INTERFACE_IP", ip),
        ("IMEX_CMD_PORT", str(IMEX_CMD_PORT)),
        ("IMEX_NODE_DISCONNECTED_GRACE_TIME", "-1"),
    )
    return _HEADER + "".join(f"{key}={value}\n" for key, value in values)


def render_nodes_config(domain_uid: str, max_nodes: int = MAX_NODES_PER_IMEX_DOMAIN) -> str:
    """`nodes.cfg`: the name of every possible index, one per line (line i = IMEX node ID i).

    Static for the life of the domain: IMEX reads it once, at start (#1418).
    """
    if not domain_uid:
        raise ConfigError("nodes.cfg: the domain UID is empty")
    if max_nodes < 1:
        raise ConfigError(f"nodes.cfg: --max-nodes-per-imex-domain {max_nodes} is below 1")
    return "".join(f"{imex_node_name(domain_uid, i)}\n" for i in range(max_nodes))


def hosts_entries(
    domain_uid: str,
    rows: Iterable[CliqueRow],
    *,
    node_name: str,
    node_ip: str,
    max_nodes: int = MAX_NODES_PER_IMEX_DOMAIN,
) -> tuple[HostEntry, ...]:
    """The names of the clique's current rows and their addresses, by index.

    The row of `node_name` maps to `node_ip` (the node knows its own address
    before the controller has copied it into the row). A row without an
    address yet, or with an index outside the nodes config, gets no line: an
    unresolvable name is a peer IMEX waits for, a wrong one is a peer it
    connects to in error.
    """
    own_ip = _check_ip(node_ip, f"hosts entry of node {node_name} (--node-ip)")
    entries: dict[int, HostEntry] = {}
    for row in sorted(rows, key=lambda r: (r.index, r.node_name)):
        if not 0 <= row.index < max_nodes or row.index in entries:
            continue
        if row.node_name == node_name:
            ip = own_ip
        else:
            try:
                ip = str(ipaddress.ip_address(row.ip_address))
            except ValueError:
                continue  # no (usable) address yet
        entries[row.index] = HostEntry(ip, imex_node_name(domain_uid, row.index))
    return tuple(entries[i] for i in sorted(entries))


def render_hosts(entries: Sequence[HostEntry]) -> str:
    """A hosts file of `entries` alone (the file the IMEX stand-in resolves names in)."""
    return _HEADER + "".join(f"{e.ip_address}\t{e.name}\n" for e in entries)


def merge_hosts(existing: str, entries: Sequence[HostEntry]) -> str:
    """`existing` (e.g. `/etc/hosts`) with every IMEX name line replaced by `entries`.

    Lines naming any `compute-domain-daemon-*` host are the IMEX host's and
    are dropped whatever domain they belong to (NVIDIA's rewrite drops them
    the same way, `dmn/dnsnames.go`); every other line is kept as it was.
    """
    kept = [
        line
        for line in existing.splitlines()
        if line != _HEADER.rstrip("\n")
        and not any(name.startswith(IMEX_NAME_PREFIX) for name in line.split("#", 1)[0].split()[1:])
    ]
    while kept and not kept[-1].strip():
        kept.pop()
    body = "".join(f"{line}\n" for line in kept)
    if entries:
        body += _HEADER + "".join(f"{e.ip_address}\t{e.name}\n" for e in entries)
    return body
