"""The simulated `nvidia-imex-ctl`: asks a (simulated) IMEX daemon's command service.

NVIDIA's daemon readiness check runs `nvidia-imex-ctl -c <cfg> -q` and wants
exactly `READY\\n` (computedomain.md §4.6); host-managed mode asks the host's
daemon through its Unix socket (`-q --u=<socket>`, §3.5). Usage:

    nvidia-imex-ctl -c CFG -q          READY (exit 0) or NOT READY (exit 1)
    nvidia-imex-ctl --u=SOCK -q        the same, through a Unix socket
    nvidia-imex-ctl -c CFG -N -j       the nodes document (exit 0), see below
    nvidia-imex-ctl -c CFG -N          the same as a table, for people

With `-c`, the daemon is reached at `IMEX_CMD_BIND_INTERFACE_IP` (else
`BIND_INTERFACE_IP`) `:IMEX_CMD_PORT`, or at `IMEX_CMD_UNIX_DOMAIN_PATH` when the
config sets no address; `--u` wins over `-c`. `-N -j` prints one JSON object:

    {"status": "UP" | "DOWN",
     "nodes": {"<node ID>": {"host": "<nodes-file entry>",
                             "address": "<resolved IP, or empty>",
                             "status": "C" | "N" | "R" | "D" | "I"}}}

(`protocol.nodes_document`; UP when every node with an address is `C`). A
daemon that cannot be reached: `-q` prints NOT READY, `-N` an error on stderr,
both exit 1. A daemon that never answers (failpoint `imex-hang-query`) makes
this program wait for ever, as a hung daemon does: callers need a timeout.
"""

from __future__ import annotations

import argparse
import json
import socket
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from dra_driver.hardware.simulated.imex import protocol
from dra_driver.hardware.simulated.imex.protocol import ImexConfigError

CONNECT_TIMEOUT = 2.0


def _target(args: argparse.Namespace) -> tuple[str, Any]:
    """(family, address) of the command service to ask."""
    if args.u:
        return "unix", args.u
    if args.config is None:
        raise ImexConfigError("nvidia-imex-ctl: give -c <config file> or --u=<socket>")
    path: Path = args.config
    try:
        config = protocol.parse_config(path.read_text(encoding="utf-8"), path)
    except OSError as exc:
        raise ImexConfigError(
            f"{path}: cannot read the config file: {exc.strerror or exc}"
        ) from exc
    host = config.cmd_bind_ip or config.bind_ip
    if not host and config.cmd_unix_path:
        return "unix", config.cmd_unix_path
    return "tcp", (host or "127.0.0.1", config.cmd_port)


def ask(family: str, address: Any, command: str) -> dict[str, Any]:
    """One command's answer; OSError when the daemon cannot be reached."""
    if family == "unix":
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    else:
        conn = socket.socket(socket.AF_INET6 if ":" in address[0] else socket.AF_INET)
    with conn:
        conn.settimeout(CONNECT_TIMEOUT)
        conn.connect(address)
        conn.settimeout(None)  # the answer: wait as long as the daemon takes
        conn.sendall(protocol.encode({"command": command}))
        with conn.makefile("rb") as stream:
            return protocol.decode(stream.readline())


def _table(document: dict[str, Any]) -> str:
    lines = [f"Domain State: {document.get('status')}", "Nodes:"]
    for node, row in sorted(document.get("nodes", {}).items(), key=lambda kv: int(kv[0])):
        lines.append(
            f"Node #{node:<3} {row.get('host', '')}  {row.get('address') or '-'}  "
            f"{row.get('status')}"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="nvidia-imex-ctl", description="simulated IMEX control")
    parser.add_argument("-c", dest="config", type=Path, help="the daemon's config file")
    parser.add_argument("--u", metavar="SOCKET", help="the daemon's command Unix socket")
    what = parser.add_mutually_exclusive_group(required=True)
    what.add_argument("-q", action="store_true", help="is the local daemon ready")
    what.add_argument("-N", action="store_true", help="the state of every node's connection")
    parser.add_argument("-j", action="store_true", help="with -N: JSON")
    args = parser.parse_args(argv)
    try:
        family, address = _target(args)
    except ImexConfigError as exc:
        print(exc, file=sys.stderr)
        return 1
    try:
        answer = ask(family, address, protocol.QUERY if args.q else protocol.NODES)
    except OSError as exc:
        if args.q:
            print("NOT READY")
        else:
            print(f"cannot reach the IMEX daemon at {address}: {exc}", file=sys.stderr)
        return 1
    if args.q:
        ready = answer.get("ready") is True
        print("READY" if ready else "NOT READY")
        return 0 if ready else 1
    if "nodes" not in answer:
        print(f"the IMEX daemon at {address} answered {answer!r}", file=sys.stderr)
        return 1
    print(json.dumps(answer, sort_keys=True) if args.j else _table(answer))
    return 0


if __name__ == "__main__":
    sys.exit(main())
