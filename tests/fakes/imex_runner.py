"""A fake `ImexRunner` (kubelet_plugin.imex_host_runner) for the IMEX host's unit tests.

It behaves as `nvidia-imex` does, from the files the host wrote: a started
daemon reads `nodes.cfg` once and identifies itself as the line whose name
the hosts file maps to `BIND_INTERFACE_IP` (logged as NVIDIA's daemon logs
it), and it keeps that ID until it is restarted. Knobs make it refuse to
start (the way a daemon with no matching interface exits), identify itself
wrongly, stay NOT READY, or report given peer states; `exit()` makes the
running daemon die. `slow_start` makes a started daemon write nothing until
`finish_start()`, and a SIGUSR1 before then kills it silently (the signal's
default action, as for a process that has not set its handler up yet). Every
call is recorded.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from pathlib import Path

from kubelet_plugin.imex_host_runner import DomainPaths, ImexProcess, ImexQuery, NodesReport

_PIDS = itertools.count(40000)


def _config_value(config: Path, key: str) -> str:
    for line in config.read_text().splitlines():
        if line.startswith(f"{key}="):
            return line.split("=", 1)[1]
    return ""


def _identify(paths: DomainPaths) -> int | None:
    """The nodes-config line whose name the hosts file maps to BIND_INTERFACE_IP."""
    bind = _config_value(paths.config, "BIND_INTERFACE_IP")
    names = Path(_config_value(paths.config, "IMEX_NODE_CONFIG_FILE")).read_text().split()
    resolved: dict[str, str] = {}
    for line in paths.hosts.read_text().splitlines():
        parts = line.split("#", 1)[0].split()
        for name in parts[1:]:
            resolved[name] = parts[0]
    return next((i for i, name in enumerate(names) if resolved.get(name) == bind), None)


@dataclass
class FakeImexRunner:
    ready: bool = True
    refuse_start: bool = False
    identify_as: int | None = None  # None: as the files say
    peer_states: dict[int, str] = field(default_factory=dict)  # IMEX node ID -> state
    running: dict[Path, ImexProcess] = field(default_factory=dict)
    starts: list[tuple[str, int]] = field(default_factory=list)  # (domain UID, index)
    stops: list[str] = field(default_factory=list)
    reloads: list[int] = field(default_factory=list)
    queries: int = 0
    hosts_at_start: list[str] = field(default_factory=list)
    slow_start: bool = False
    ends: dict[int, str] = field(default_factory=dict)  # pid -> how it ended
    starting: dict[Path, int] = field(default_factory=dict)  # still starting: root -> index

    def start(self, paths: DomainPaths, *, index: int) -> ImexProcess:
        self.starts.append((paths.domain_uid, index))
        self.hosts_at_start.append(paths.hosts.read_text())
        offset = paths.log.stat().st_size if paths.log.exists() else 0
        if self.slow_start:
            process = ImexProcess(next(_PIDS), 1, index, offset)
            self.running[paths.root] = process
            self.starting[paths.root] = index
            return process
        with paths.log.open("a") as log:
            log.write("IMEX starting\n")
            if self.refuse_start:
                log.write("No matching network interface found\n")
                return ImexProcess(next(_PIDS), 1, index, offset)
            node_id = self.identify_as if self.identify_as is not None else _identify(paths)
            log.write(f"Identified this node as ID {node_id}\n")
        process = ImexProcess(next(_PIDS), 1, index, offset)
        self.running[paths.root] = process
        return process

    def find(self, paths: DomainPaths) -> ImexProcess | None:
        return self.running.get(paths.root)

    def reload(self, process: ImexProcess) -> None:
        self.reloads.append(process.pid)
        for root, running in list(self.running.items()):
            if running.pid == process.pid and root in self.starting:
                del self.running[root], self.starting[root]  # killed before its handler
                self.ends[process.pid] = "was killed by SIGUSR1"

    def stop(self, paths: DomainPaths) -> None:
        if self.running.pop(paths.root, None) is not None:
            self.stops.append(paths.domain_uid)

    def query(self, paths: DomainPaths) -> ImexQuery:
        self.queries += 1
        if paths.root in self.running and self.ready and paths.root not in self.starting:
            return ImexQuery(True, "READY")
        return ImexQuery(False, "nvidia-imex-ctl -q: NOT READY")

    def ended(self, pid: int) -> str:
        return self.ends.get(pid, "")

    def nodes(self, paths: DomainPaths) -> NodesReport | None:
        if paths.root not in self.running or paths.root in self.starting:
            return None
        return NodesReport(up=True, nodes=dict(self.peer_states))

    # -- test controls -------------------------------------------------------------
    def finish_start(self, paths: DomainPaths) -> None:
        """A slow daemon is up at last: it logs its ID and takes signals from now on."""
        self.starting.pop(paths.root)
        with paths.log.open("a") as log:
            log.write("IMEX starting\n")
            log.write(f"Identified this node as ID {_identify(paths)}\n")

    def die_silently(self, paths: DomainPaths, how: str) -> None:
        """The running daemon ends without a log line (`how`: "was killed by SIGKILL")."""
        self.starting.pop(paths.root, None)
        self.ends[self.running.pop(paths.root).pid] = how

    def exit(self, paths: DomainPaths, line: str = "IMEX exiting: fatal error") -> None:
        """The running daemon dies, logging `line` last."""
        self.running.pop(paths.root)
        with paths.log.open("a") as log:
            log.write(f"{line}\n")
