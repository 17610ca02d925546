"""What the simulated `nvidia-imex` and `nvidia-imex-ctl` agree on: files, messages, answers.

Pure: the config file, the nodes file and the hosts file come in as text.

- **Config** (`-c FILE`): NVIDIA's `KEY=VALUE` lines, `#` comments
  (computedomain.md §4.3). Read: `BIND_INTERFACE_IP`, `SERVER_PORT` (50000),
  `IMEX_NODE_CONFIG_FILE` (required), `IMEX_CMD_ENABLED` (1),
  `IMEX_CMD_BIND_INTERFACE_IP`, `IMEX_CMD_PORT` (50005), `IMEX_CMD_UNIX_DOMAIN_PATH`
  (host-managed IMEX, §4.8), `IMEX_NODE_DISCONNECTED_GRACE_TIME` (-1: wait
  forever), `LOG_FILE_NAME` (empty: stderr). Every other key of NVIDIA's
  template (`LOG_LEVEL`, `DAEMONIZE`, `IMEX_WAIT_FOR_QUORUM`,
  `IMEX_ENABLE_AUTH_ENCRYPTION`, ...) is accepted and has no effect here; the
  daemon is READY once it serves, which is what `RECOVERY` (the template's
  quorum value, the only one the reference shows) gives a lone daemon (§6.3).
- **Nodes file**: one IP or host name a line (blank and `#` lines skipped);
  the IMEX node ID of an entry is its position among the entries, from 0.
- **Names** resolve through a hosts file (`<ip> <name> [alias...]`, the first
  line naming a name wins, as in glibc); an IP literal is its own address.
- **Domain identity**: the first 16 hex digits of the SHA-256 of the entries,
  one a line. Two domains with different node names never match; NVIDIA's
  static names, identical in every domain, always did (#1447).
- **Peer protocol** (TCP, `BIND_INTERFACE_IP:SERVER_PORT`), one JSON object a
  line. The dialer sends `{"type": "HELLO", "domain": D, "node": i}`; the
  listener answers `{"type": "WELCOME", "domain": D, "node": j}`, or
  `{"type": "REFUSED", "reason": ...}` and closes. Either side may later send
  `{"type": "SHUTTING_DOWN", "node": i}` (on SIGTERM).
- **Command service** (TCP `IMEX_CMD_BIND_INTERFACE_IP:IMEX_CMD_PORT` and/or
  the Unix socket `IMEX_CMD_UNIX_DOMAIN_PATH`): one request line
  `{"command": "query"}` or `{"command": "nodes"}`, one JSON answer line.
- **Connection states** (`nvidia-imex-ctl -N`, the legend of #722), as this
  stand-in gives them: `C` connected (HELLO answered WELCOME, same domain),
  `N` not connected yet (never reached since the daemon started or the
  address changed), `R` recovering (the connection was lost without a
  SHUTTING_DOWN, still inside the grace time), `D` disconnected (the peer said
  SHUTTING_DOWN, or the grace time ran out), `I` invalid (the name does not
  resolve, or the address answers for another domain). The local node is `C`.
"""

from __future__ import annotations

import hashlib
import ipaddress
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from dra_driver.errors import ConfigError

CONNECTED: Final = "C"
NOT_CONNECTED: Final = "N"
RECOVERING: Final = "R"
DISCONNECTED: Final = "D"
INVALID: Final = "I"

DEFAULT_SERVER_PORT: Final = 50000
DEFAULT_CMD_PORT: Final = 50005

HELLO: Final = "HELLO"
WELCOME: Final = "WELCOME"
REFUSED: Final = "REFUSED"
SHUTTING_DOWN: Final = "SHUTTING_DOWN"

QUERY: Final = "query"
NODES: Final = "nodes"

NO_INTERFACE: Final = "No matching network interface"
"""The start of the error a daemon gives when no nodes-file entry is its own address (#289)."""


class ImexConfigError(ConfigError):
    """An IMEX config, nodes or hosts file the stand-in cannot use (names the file and line)."""


@dataclass(frozen=True)
class ImexConfig:
    """The settings of one `-c` file that the stand-in acts on."""

    path: Path
    bind_ip: str
    server_port: int
    node_config_file: Path
    cmd_enabled: bool
    cmd_bind_ip: str
    cmd_port: int
    cmd_unix_path: str
    grace_time: float  # seconds; negative: wait forever
    log_file: str
    values: Mapping[str, str]  # every key as written


def parse_config(text: str, path: Path) -> ImexConfig:
    """Read NVIDIA's `KEY=VALUE` config; `ImexConfigError` naming the file, line and key."""
    values: dict[str, str] = {}
    for lineno, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        key, sep, value = line.partition("=")
        if not sep or not key.strip():
            raise ImexConfigError(f"{path}: line {lineno} is not KEY=VALUE: {raw[:80]!r}")
        values[key.strip()] = value.strip()

    def number(key: str, default: int) -> int:
        text = values.get(key, "") or str(default)
        try:
            return int(text, 10)
        except ValueError:
            raise ImexConfigError(f"{path}: {key}={text!r} is not a number") from None

    def port(key: str, default: int) -> int:
        value = number(key, default)
        if not 1 <= value <= 65535:
            raise ImexConfigError(f"{path}: {key}={value} is not a TCP port (1-65535)")
        return value

    nodes = values.get("IMEX_NODE_CONFIG_FILE", "")
    if not nodes:
        raise ImexConfigError(f"{path}: IMEX_NODE_CONFIG_FILE is not set")
    for key in ("BIND_INTERFACE_IP", "IMEX_CMD_BIND_INTERFACE_IP"):
        if values.get(key):
            try:
                ipaddress.ip_address(values[key])
            except ValueError:
                raise ImexConfigError(
                    f"{path}: {key}={values[key]!r} is not an IP address"
                ) from None
    return ImexConfig(
        path=path,
        bind_ip=values.get("BIND_INTERFACE_IP", ""),
        server_port=port("SERVER_PORT", DEFAULT_SERVER_PORT),
        node_config_file=Path(nodes),
        cmd_enabled=number("IMEX_CMD_ENABLED", 1) == 1,
        cmd_bind_ip=values.get("IMEX_CMD_BIND_INTERFACE_IP", ""),
        cmd_port=port("IMEX_CMD_PORT", DEFAULT_CMD_PORT),
        cmd_unix_path=values.get("IMEX_CMD_UNIX_DOMAIN_PATH", ""),
        grace_time=float(number("IMEX_NODE_DISCONNECTED_GRACE_TIME", -1)),
        log_file=values.get("LOG_FILE_NAME", ""),
        values=values,
    )


def node_entries(text: str) -> list[str]:
    """The entries of a nodes file, in order: the index of one is its IMEX node ID."""
    entries = []
    for raw in text.splitlines():
        line = raw.strip()
        if line and not line.startswith("#"):
            entries.append(line)
    return entries


def parse_hosts(text: str) -> dict[str, str]:
    """name -> address of a hosts file; the first line naming a name wins."""
    names: dict[str, str] = {}
    for raw in text.splitlines():
        words = raw.split("#", 1)[0].split()
        if len(words) < 2:
            continue
        for name in words[1:]:
            names.setdefault(name, words[0])
    return names


def is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


def resolve(entries: Sequence[str], hosts: Mapping[str, str]) -> list[str | None]:
    """The address of each entry: itself if an IP, else from `hosts`; None if it does not
    resolve."""
    return [entry if is_ip(entry) else hosts.get(entry) for entry in entries]


def domain_identity(entries: Sequence[str]) -> str:
    """The identity a daemon carries to its peers: a hash of its nodes-file entries."""
    return hashlib.sha256("\n".join(entries).encode()).hexdigest()[:16]


def encode(message: Mapping[str, Any]) -> bytes:
    return json.dumps(message, sort_keys=True).encode() + b"\n"


def decode(line: bytes) -> dict[str, Any]:
    """One message; {} for anything that is not a JSON object (a stranger on the port)."""
    try:
        message = json.loads(line)
    except ValueError:
        return {}
    return message if isinstance(message, dict) else {}


def nodes_document(
    entries: Sequence[str], addresses: Sequence[str | None], states: Mapping[int, str]
) -> dict[str, Any]:
    """`nvidia-imex-ctl -N -j`: `{"status": "UP"|"DOWN", "nodes": {"<id>": {"host", "address",
    "status"}}}`. UP when every entry with an address is `C` (the local one included)."""
    nodes = {
        str(i): {
            "host": entry,
            "address": addresses[i] or "",
            "status": states.get(i, INVALID if addresses[i] is None else NOT_CONNECTED),
        }
        for i, entry in enumerate(entries)
    }
    up = all(row["status"] == CONNECTED for row in nodes.values() if row["address"])
    return {"status": "UP" if up else "DOWN", "nodes": nodes}
