"""The simulated `nvidia-imex`: one real process per simulated node, talking TCP to its peers.

The IMEX host starts `<driver-root>/usr/bin/nvidia-imex -c <cfg>` on a real
and on a simulated node alike; on a simulated node that file runs `main`
here. What it copies from the real daemon (computedomain.md §4.3, §4.4, §8.1;
formats in `protocol`):

- The config is read at start; so is the nodes file, **once** (#1418: a
  daemon whose own index changes keeps its old node ID until restarted).
- Names resolve through the hosts file `IMEX_STANDIN_HOSTS_FILE` names (the
  real daemon uses `/etc/hosts`, the default here too). The node ID is the
  index of the first entry whose address is `BIND_INTERFACE_IP` (empty: the
  first address this host can bind; on a loopback every 127.x address can, so
  simulated nodes set it). None: "No matching network interface ...", exit 1.
  Then it logs `Identified this node as ID <n>` (to `LOG_FILE_NAME`, else stderr).
- It listens on `BIND_INTERFACE_IP:SERVER_PORT`, dials every other entry
  that resolves (from its bind address, retrying every 0.2 s), and refuses and
  logs a daemon of another domain (the #1447 guard), in both directions.
- The command service (`IMEX_CMD_ENABLED=1`) serves `nvidia-imex-ctl` on
  `IMEX_CMD_BIND_INTERFACE_IP` (or the bind IP) `:IMEX_CMD_PORT`, and on
  `IMEX_CMD_UNIX_DOMAIN_PATH` when set (a live socket there: exit 1).
- SIGUSR1: re-read the hosts file, re-resolve every entry and restart every
  outgoing connection; honoured at most once every 5 s (NVIDIA's signals
  page), a later one inside the interval is ignored and logged, so the sender
  must signal again (`IMEX_STANDIN_SIGUSR1_MIN_INTERVAL` lowers the interval
  for tests). SIGTERM (or SIGINT): SHUTTING_DOWN to every peer, exit 0.
  A SIGUSR1 that arrives while the daemon still starts (before `Identified
  this node as ID n`, which the IMEX host waits for) is held and honoured once
  the daemon runs, never the default action that would kill it silently.
- A lost peer is `R` for `IMEX_NODE_DISCONNECTED_GRACE_TIME` seconds (-1:
  for ever, NVIDIA's template), then `D`.

Failpoints (`dra_driver.failpoints.IMEX_STANDIN_POINTS`, `DRA_GPU_FAILPOINTS` or
the file `DRA_GPU_FAILPOINTS_FILE` names): `imex-refuse-start`,
`imex-crash-after:<s>` (SIGKILL itself <s> seconds after start, checked
every 0.1 s so the file may arm it later), `imex-hang-query` (every command
gets no answer), `imex-wrong-node-id` (identifies as the next ID, with 2+ entries),
`imex-accept-foreign` (no domain guard), `imex-slow-start:<s>` (sleeps <s>
seconds after its first log line, as on a loaded node, before it reads its
files and identifies itself).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import math
import os
import signal
import socket
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final, TextIO

from dra_driver import failpoints
from dra_driver.hardware.simulated.imex import protocol
from dra_driver.hardware.simulated.imex.protocol import (
    CONNECTED,
    DISCONNECTED,
    INVALID,
    NOT_CONNECTED,
    RECOVERING,
    ImexConfig,
    ImexConfigError,
)

HOSTS_ENV: Final = "IMEX_STANDIN_HOSTS_FILE"
SIGUSR1_INTERVAL_ENV: Final = "IMEX_STANDIN_SIGUSR1_MIN_INTERVAL"
SIGUSR1_MIN_INTERVAL: Final = 5.0
RETRY_INTERVAL: Final = 0.2
REFUSED_RETRY_INTERVAL: Final = 1.0
HANDSHAKE_TIMEOUT: Final = 2.0


class _Log:
    """IMEX's log: `[time] [LEVEL] [pid n] text` lines, flushed one by one."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream

    def __call__(self, level: str, text: str) -> None:
        stamp = time.strftime("%Y-%m-%d %H:%M:%S")
        self.stream.write(f"[{stamp}] [{level}] [pid {os.getpid()}] {text}\n")
        self.stream.flush()


def _hosts(path: Path, log: _Log) -> dict[str, str]:
    try:
        return protocol.parse_hosts(path.read_text(encoding="utf-8"))
    except OSError as exc:
        log("WARNING", f"cannot read hosts file {path}: {exc.strerror or exc}; no name resolves")
        return {}


def _bindable(address: str) -> bool:
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        try:
            probe.bind((address, 0))
        except OSError:
            return False
    return True


def own_node_id(bind_ip: str, addresses: Sequence[str | None]) -> int | None:
    """The ID of this node: the first entry whose address is `bind_ip` (empty: bindable)."""
    for index, address in enumerate(addresses):
        if address is not None and (address == bind_ip if bind_ip else _bindable(address)):
            return index
    return None


class Daemon:
    """One running IMEX daemon (see the module docstring)."""

    def __init__(
        self,
        config: ImexConfig,
        *,
        entries: list[str],
        addresses: list[str | None],
        node_id: int,
        hosts_path: Path,
        log: _Log,
        bind_ip: str,
    ) -> None:
        self.config = config
        self.entries = entries
        self.addresses = addresses
        self.node_id = node_id
        self.bind_ip = bind_ip
        self.hosts_path = hosts_path
        self.log = log
        self.domain = protocol.domain_identity(entries)
        self.states: dict[int, str] = {
            i: INVALID if address is None else NOT_CONNECTED for i, address in enumerate(addresses)
        }
        self.states[node_id] = CONNECTED
        self.lost_at: dict[int, float] = {}
        self.refusals: set[tuple[str, str]] = set()  # (address, domain) refused and logged
        self.writers: set[asyncio.StreamWriter] = set()
        self.dialers: dict[int, asyncio.Task[None]] = {}
        self.tasks: set[asyncio.Task[Any]] = set()
        self.servers: list[asyncio.Server] = []
        self.started = time.monotonic()
        self.last_sigusr1 = -math.inf
        self.min_interval = float(os.environ.get(SIGUSR1_INTERVAL_ENV) or SIGUSR1_MIN_INTERVAL)
        self.stopped = asyncio.Event()

    # -- states ----------------------------------------------------------------

    def current_states(self) -> dict[int, str]:
        """Each node's state now: a lost peer turns `D` once the grace time is over."""
        now = time.monotonic()
        grace = self.config.grace_time
        states = dict(self.states)
        for index, since in self.lost_at.items():
            if states[index] == RECOVERING and grace >= 0 and now - since > grace:
                states[index] = DISCONNECTED
        return states

    def _connected(self, index: int, address: str) -> None:
        if self.states[index] != CONNECTED:
            self.log("INFO", f"Connected to node {index} ({self.entries[index]}, {address})")
        self.states[index] = CONNECTED
        self.lost_at.pop(index, None)

    def _lost(self, index: int) -> None:
        if self.states[index] == CONNECTED:
            self.log("WARNING", f"Connection to node {index} ({self.entries[index]}) lost")
            self.states[index] = RECOVERING
            self.lost_at[index] = time.monotonic()

    def _shutting_down(self, index: int) -> None:
        if self.states[index] != DISCONNECTED:
            self.log("INFO", f"Node {index} ({self.entries[index]}) is shutting down")
        self.states[index] = DISCONNECTED
        self.lost_at.pop(index, None)

    def _invalid(self, index: int, why: str) -> None:
        if self.states[index] != INVALID:
            self.log("WARNING", why)
        self.states[index] = INVALID
        self.lost_at.pop(index, None)

    # -- outgoing connections ----------------------------------------------------

    def _start_dialer(self, index: int) -> None:
        address = self.addresses[index]
        if index != self.node_id and address is not None:
            self.dialers[index] = asyncio.create_task(self._dial(index, address))

    async def _dial(self, index: int, address: str) -> None:
        port = self.config.server_port
        while True:
            try:
                reader, writer = await asyncio.wait_for(
                    asyncio.open_connection(address, port, local_addr=(self.bind_ip, 0)),
                    HANDSHAKE_TIMEOUT,
                )
            except (OSError, TimeoutError):
                self._lost(index)
                await asyncio.sleep(RETRY_INTERVAL)
                continue
            self.writers.add(writer)
            try:
                hello = {"type": protocol.HELLO, "domain": self.domain, "node": self.node_id}
                writer.write(protocol.encode(hello))
                await writer.drain()
                answer = protocol.decode(
                    await asyncio.wait_for(reader.readline(), HANDSHAKE_TIMEOUT)
                )
                if not self._welcomed(index, address, answer):
                    await asyncio.sleep(REFUSED_RETRY_INTERVAL)
                    continue
                self._connected(index, address)
                while line := await reader.readline():
                    if protocol.decode(line).get("type") == protocol.SHUTTING_DOWN:
                        self._shutting_down(index)
                self._lost(index)
            except (OSError, TimeoutError, ValueError):  # ValueError: a line over 64 KiB
                self._lost(index)
            finally:
                self.writers.discard(writer)
                writer.close()
            await asyncio.sleep(RETRY_INTERVAL)

    def _welcomed(self, index: int, address: str, answer: dict[str, Any]) -> bool:
        where = f"node {index} ({self.entries[index]}, {address})"
        kind = answer.get("type")
        if kind == protocol.REFUSED:
            self._invalid(index, f"Connection to {where} refused: {answer.get('reason')}")
            return False
        if kind != protocol.WELCOME:
            self._lost(index)
            return False
        if answer.get("domain") != self.domain:
            if failpoints.armed_value("imex-accept-foreign") is None:
                self._invalid(
                    index,
                    f"Refused {where}: it answers for IMEX domain {answer.get('domain')}, "
                    f"this node's domain is {self.domain}",
                )
                return False
            self.log("WARNING", f"{where} of domain {answer.get('domain')} accepted (failpoint)")
        return True

    # -- incoming connections ------------------------------------------------------

    async def _serve_peer(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = (writer.get_extra_info("peername") or ("?",))[0]
        try:
            hello = protocol.decode(await asyncio.wait_for(reader.readline(), HANDSHAKE_TIMEOUT))
            if hello.get("type") != protocol.HELLO:
                return
            node = hello.get("node")
            foreign = hello.get("domain") != self.domain
            if foreign and failpoints.armed_value("imex-accept-foreign") is None:
                if (peer, str(hello.get("domain"))) not in self.refusals:  # once, not per retry
                    self.refusals.add((peer, str(hello.get("domain"))))
                    self.log(
                        "WARNING",
                        f"Refused connection from {peer} (node {node}): IMEX domain "
                        f"{hello.get('domain')} is not this node's domain {self.domain}",
                    )
                reason = f"foreign IMEX domain (this domain is {self.domain})"
                writer.write(protocol.encode({"type": protocol.REFUSED, "reason": reason}))
                await writer.drain()
                return
            if foreign:
                self.log("WARNING", f"Accepted {peer} of domain {hello.get('domain')} (failpoint)")
            welcome = {"type": protocol.WELCOME, "domain": self.domain, "node": self.node_id}
            writer.write(protocol.encode(welcome))
            await writer.drain()
            self.writers.add(writer)
            ours = not foreign and isinstance(node, int) and node in self.states
            peer_id = node if ours and node != self.node_id else None
            while line := await reader.readline():
                message = protocol.decode(line)
                if peer_id is not None and message.get("type") == protocol.SHUTTING_DOWN:
                    self._shutting_down(peer_id)
        except (OSError, TimeoutError, ValueError):
            pass
        finally:
            self.writers.discard(writer)
            writer.close()

    # -- command service -----------------------------------------------------------

    async def _serve_command(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        try:
            request = protocol.decode(await reader.readline())
            if failpoints.armed_value("imex-hang-query") is not None:
                await self.stopped.wait()  # never answers (nvidia-imex-ctl hangs)
                return
            command = request.get("command")
            answer: dict[str, Any]
            if command == protocol.QUERY:
                answer = {"ready": True, "nodeId": self.node_id}
            elif command == protocol.NODES:
                answer = protocol.nodes_document(
                    self.entries, self.addresses, self.current_states()
                )
            else:
                answer = {"error": f"unknown command {command!r}"}
            writer.write(protocol.encode(answer))
            await writer.drain()
        except (OSError, ValueError):
            pass
        finally:
            writer.close()

    async def _start_command_service(self) -> None:
        if not self.config.cmd_enabled:
            return
        host = self.config.cmd_bind_ip or self.bind_ip
        self.servers.append(
            await asyncio.start_server(self._serve_command, host, self.config.cmd_port)
        )
        path = self.config.cmd_unix_path
        if path:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
                try:
                    probe.connect(path)
                except OSError:
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(path)  # a dead daemon's socket
                else:
                    raise OSError(f"{path}: another IMEX daemon serves this socket")
            self.servers.append(await asyncio.start_unix_server(self._serve_command, path))

    # -- signals ---------------------------------------------------------------------

    def _on_sigusr1(self) -> None:
        now = time.monotonic()
        if now - self.last_sigusr1 < self.min_interval:
            self.log(
                "WARNING",
                f"SIGUSR1 ignored: the last one was {now - self.last_sigusr1:.1f} s ago "
                f"(at most one every {self.min_interval:g} s)",
            )
            return
        self.last_sigusr1 = now
        self.log("INFO", "SIGUSR1: re-resolving node addresses and reconnecting")
        fresh = protocol.resolve(self.entries, _hosts(self.hosts_path, self.log))
        for index, address in enumerate(fresh):
            if index == self.node_id:
                continue
            if address != self.addresses[index]:
                self.log(
                    "INFO",
                    f"Node {index} ({self.entries[index]}) now resolves to {address or 'nothing'}",
                )
                self.states[index] = INVALID if address is None else NOT_CONNECTED
                self.lost_at.pop(index, None)
            self.addresses[index] = address
            old = self.dialers.pop(index, None)
            if old is not None:
                old.cancel()
            self._start_dialer(index)

    async def _shutdown(self) -> None:
        self.log("INFO", "SIGTERM: telling peers this node is shutting down")
        for dialer in self.dialers.values():
            dialer.cancel()
        message = protocol.encode({"type": protocol.SHUTTING_DOWN, "node": self.node_id})
        writers = list(self.writers)
        for writer in writers:
            with contextlib.suppress(OSError):
                writer.write(message)
        drains = [writer.drain() for writer in writers]
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.gather(*drains, return_exceptions=True), 1.0)
        for writer in writers:
            writer.close()
        for server in self.servers:
            server.close()
        if self.config.cmd_unix_path:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.config.cmd_unix_path)
        self.log("INFO", "Shut down")
        self.stopped.set()

    async def _crash_watch(self) -> None:
        while True:
            value = failpoints.armed_value("imex-crash-after")
            if value is not None:
                try:
                    after = float(value or 0)
                except ValueError:
                    after = 0.0
                if time.monotonic() - self.started >= after:
                    self.log("ERROR", "failpoint imex-crash-after: dying without a word")
                    os.kill(os.getpid(), signal.SIGKILL)
            await asyncio.sleep(0.1)

    # -- main --------------------------------------------------------------------------

    async def run(self) -> int:
        try:
            self.servers.append(
                await asyncio.start_server(self._serve_peer, self.bind_ip, self.config.server_port)
            )
            await self._start_command_service()
        except OSError as exc:
            self.log("ERROR", f"cannot listen: {exc.strerror or exc}")
            return 1
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, lambda: self._keep(self._shutdown()))
        loop.add_signal_handler(signal.SIGUSR1, self._on_sigusr1)
        if _EARLY_SIGUSR1:  # it came while the daemon started: honour it now
            _EARLY_SIGUSR1.clear()
            self._on_sigusr1()
        self._keep(self._crash_watch())
        for index in range(len(self.entries)):
            self._start_dialer(index)
        self.log(
            "INFO",
            f"Serving peers on {self.bind_ip}:{self.config.server_port}, IMEX domain {self.domain}",
        )
        await self.stopped.wait()
        return 0

    def _keep(self, coroutine: Any) -> None:
        task = asyncio.ensure_future(coroutine)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)


_EARLY_SIGUSR1: list[float] = []
"""SIGUSR1s that arrived before the event loop took the signal over."""


def main(argv: Sequence[str] | None = None) -> int:
    # First of all: a SIGUSR1's default action would kill the daemon while it starts.
    signal.signal(signal.SIGUSR1, lambda _signum, _frame: _EARLY_SIGUSR1.append(time.monotonic()))
    parser = argparse.ArgumentParser(prog="nvidia-imex", description="simulated IMEX daemon")
    parser.add_argument("-c", dest="config", type=Path, required=True, help="config file")
    args = parser.parse_args(argv)
    path: Path = args.config
    try:
        config = protocol.parse_config(path.read_text(encoding="utf-8"), path)
    except OSError as exc:
        print(f"{path}: cannot read the config file: {exc.strerror or exc}", file=sys.stderr)
        return 1
    except ImexConfigError as exc:
        print(exc, file=sys.stderr)
        return 1
    try:
        stream: TextIO = (
            open(config.log_file, "a", encoding="utf-8")  # noqa: SIM115 - the daemon's lifetime
            if config.log_file
            else sys.stderr
        )
    except OSError as exc:
        print(f"LOG_FILE_NAME {config.log_file}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    log = _Log(stream)
    log("INFO", f"IMEX daemon (simulated) starting with config {path}")
    slow = failpoints.armed_value("imex-slow-start")
    if slow is not None:
        time.sleep(float(slow or 1))
    if failpoints.armed_value("imex-refuse-start") is not None:
        log("ERROR", f"{protocol.NO_INTERFACE} found (failpoint imex-refuse-start)")
        return 1
    try:
        nodes_text = config.node_config_file.read_text(encoding="utf-8")
    except OSError as exc:
        log("ERROR", f"cannot read {config.node_config_file}: {exc.strerror or exc}")
        return 1
    entries = protocol.node_entries(nodes_text)
    hosts_path = Path(os.environ.get(HOSTS_ENV) or "/etc/hosts")
    addresses = protocol.resolve(entries, _hosts(hosts_path, log))
    node_id = own_node_id(config.bind_ip, addresses)
    if node_id is None:
        log(
            "ERROR",
            f"{protocol.NO_INTERFACE} found: no entry of {config.node_config_file} resolves to "
            f"{config.bind_ip or 'an address of this host'}",
        )
        return 1
    bind_ip = config.bind_ip or addresses[node_id] or ""
    if failpoints.armed_value("imex-wrong-node-id") is not None and len(entries) > 1:
        node_id = (node_id + 1) % len(entries)
    log("INFO", f"Identified this node as ID {node_id}")
    daemon = Daemon(
        config,
        entries=entries,
        addresses=addresses,
        node_id=node_id,
        hosts_path=hosts_path,
        log=log,
        bind_ip=bind_ip,
    )
    return asyncio.run(daemon.run())


if __name__ == "__main__":
    sys.exit(main())
