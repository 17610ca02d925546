"""The IMEX host: the node component that runs the IMEX daemon of the ComputeDomain its node is in.

Why a long-lived host, and not NVIDIA's per-domain DaemonSet. NVIDIA's
controller creates a DaemonSet per ComputeDomain and labels nodes into it;
every first pod of a domain on a node waits for a pod to be scheduled, an
image pulled and IMEX's quorum (cold start, §7.7), and the daemon's life is
tied to objects that a controller upgrade or a domain deletion tears down
under running work (§7.9). Here one process per node (a DaemonSet with
`hostNetwork`, like the MPS host, `kubelet_plugin.mps_host`) watches its
node's `ComputeDomainMember`s and runs `nvidia-imex` for the one it serves,
as a child in a session of its own: it outlives the host itself, so an
upgrade of the host adopts the running daemon (pid file, start time and
`/proc/<pid>/cmdline`) instead of killing it.

What a pass does (`ImexHost.reconcile`; event-driven through the object
store's watch, and on a timer: fast until the daemon is Ready and connected,
slow after):

- Members of this node (label `resource.nvidia.com/computeDomain.nodeName`):
  a member without a clique gets `NoFabric`; one domain is served (the one
  whose IMEX already runs, else the oldest member) and any other gets
  `Failed`/`NodeServesAnotherDomain` (one IMEX daemon per node); a host
  `nvidia-imex` service (its command socket, or an `nvidia-imex` process that
  is not ours) fails every member with `HostImexRunning` and a message telling
  the admin what to do, never a silent never-Ready (§7.1).
- The served member's index comes from its `ComputeDomainClique` row, which
  the controller alone writes. The host writes `<state>/domains/<uid>/`:
  `imexd.cfg`, `nodes.cfg`, `hosts` (`dra_driver.compute_domain.imex_config`),
  starts IMEX, sends SIGUSR1 when the peers' addresses change and restarts
  it only when its own index changed (the nodes config is read once: #1418).
  IMEX ignores a SIGUSR1 within 5 s of the last one, and a restarted host
  cannot know when that was, so a signal is never taken on trust: the hosts
  file counts as applied (`hosts.applied`) only once `nvidia-imex-ctl -N -j`
  shows every peer in it resolved (not `I`); until then the signal is sent
  again whenever `sigusr1_min_interval` has passed since the last send (an
  adopted daemon counts as signalled at adoption). A daemon is never
  signalled before it has identified itself: SIGUSR1's default action would
  kill a slow starter without a word.
- A member whose clique already holds `max_nodes` rows without it is told
  so (`CliqueFull`, naming the clique, the domain and the limit), not left
  "waiting for an index".
- Status: `nvidia-imex-ctl -q` (READY), the daemon's own `Identified this
  node as ID n` (must equal the index, else `Failed`/`IndexMismatch`) and
  `nvidia-imex-ctl -N -j` (the peers' connection states) become the
  member's `status`, written on change only. A daemon that exits is restarted
  with back-off and, after `failures_before_failed` exits in a row, reported
  `Failed` with its last log line (e.g. "No matching network interface").
- A domain directory without a member is swept: SIGTERM to IMEX (it tells
  its peers), wait, remove the directory.

Channel isolation (`HostConfig.isolation == "channel"`,
`dra_driver.compute_domain.isolation`): the node runs ONE IMEX daemon, for its
clique's clique-wide IMEX domain (`isolation.shared_domain_uid`), whatever
domains its members belong to; its index and peers come from the clique-wide
ComputeDomainClique the controller writes (every node of the clique that is a
member of any domain). Files, SIGUSR1 and restarts are as above, under
`domains/<shared uid>/`; every member of the node gets that daemon's status.
A member written by a plugin of the other mode is `Failed`,
`IsolationMismatch`, naming both modes.

The process side is behind `ImexRunner` (`kubelet_plugin.imex_host_runner`:
`ProcessImexRunner` runs the real binaries, or on a simulated node the driver
root's stand-ins), so the logic here is tested against a fake runner as well
as against real processes.
"""

from __future__ import annotations

import dataclasses
import datetime
import fcntl
import logging
import os
import shutil
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from dra_driver.backoff import backoff_delay
from dra_driver.compute_domain import imex_config, isolation
from dra_driver.compute_domain.membership import (
    MAX_NODES_PER_IMEX_DOMAIN,
    NODE_LABEL,
    CliqueRow,
    MemberSpec,
    MemberState,
    MemberStatus,
    PeerState,
    clique_name,
    clique_rows,
    imex_node_name,
    member_spec,
    member_status_body,
)
from dra_driver.errors import ClusterError, ConflictError, NotFoundError, PluginError
from dra_driver.files import atomic
from dra_driver.files.flock import file_lock
from dra_driver.kube.object_store import (
    COMPUTE_DOMAIN_CLIQUE,
    COMPUTE_DOMAIN_MEMBER,
    EVENT,
    ObjectStore,
)
from dra_driver.kube.objects import Obj
from kubelet_plugin.imex_host_runner import (
    DOMAINS_DIR,
    IMEX_BINARY,
    IMEX_CTL_BINARY,
    DomainPaths,
    ImexProcess,
    ImexQuery,
    ImexRunner,
    NodesReport,
    detect_host_imex,
    identified_node_id,
    last_log_line,
    read_start,
)

log = logging.getLogger(__name__)

HOST_LOCK_FILE: Final = "imex-host.lock"
EVENT_SOURCE: Final = "compute-domain.nvidia.com/imex-host"

FAST_POLL_S: Final = 0.5
"""Polls of `nvidia-imex-ctl` while a daemon is not Ready or not connected to every peer."""
READY_POLL_S: Final = 10.0
"""Polls once it is Ready and connected."""
SIGUSR1_MIN_INTERVAL_S: Final = 5.0
"""IMEX honours SIGUSR1 at most once per 5 s (NVIDIA's signals doc, §4.4)."""
SIGNAL_AFTER_START_S: Final = 3.0
"""A daemon not READY this long after its start is signalled anyway."""
HOST_CHECK_INTERVAL_S: Final = 30.0
"""How often a host `nvidia-imex` service is looked for (at start, then this often)."""
FAILURES_BEFORE_FAILED: Final = 3


class Reason:
    """`status.reason` of a member, as the IMEX host reports it."""

    WAITING_FOR_INDEX: Final = "WaitingForIndex"
    CLIQUE_FULL: Final = "CliqueFull"
    STARTING: Final = "ImexStarting"
    RESTARTING: Final = "ImexRestarting"
    IMEX_FAILED: Final = "ImexFailed"
    INDEX_MISMATCH: Final = "IndexMismatch"
    HOST_IMEX_RUNNING: Final = "HostImexRunning"
    NODE_SERVES_ANOTHER_DOMAIN: Final = "NodeServesAnotherDomain"
    INVALID_MEMBER: Final = "InvalidMember"
    NO_CLIQUE: Final = "NoClique"
    ISOLATION_MISMATCH: Final = "IsolationMismatch"
    OTHER_CLIQUE: Final = "MemberOfAnotherClique"


# -- the host -----------------------------------------------------------------------------


@dataclass(frozen=True)
class HostConfig:
    """What the IMEX host of one node needs to know (its flags)."""

    node_name: str
    node_ip: str
    namespace: str
    state_dir: Path
    max_nodes: int = MAX_NODES_PER_IMEX_DOMAIN
    hosts_file: Path | None = None  # a shared hosts file (/etc/hosts) kept as well
    host_socket: Path | None = None  # a host IMEX service's command socket
    host_proc_root: Path | None = None  # the host's /proc, scanned for a foreign nvidia-imex
    sigusr1_min_interval: float = SIGUSR1_MIN_INTERVAL_S
    host_check_interval: float = HOST_CHECK_INTERVAL_S
    failures_before_failed: int = FAILURES_BEFORE_FAILED
    restart_backoff_base: float = 1.0
    restart_backoff_cap: float = 30.0
    isolation: str = isolation.DOMAIN  # `channel`: one clique-wide IMEX daemon


@dataclass
class _Domain:
    """What the host remembers of the domain it serves (rebuilt from disk after a restart)."""

    uid: str
    process: ImexProcess | None = None
    failures: int = 0
    next_start_at: float = 0.0
    last_exit: str = ""
    reload_pending: bool = False
    last_reload_at: float = float("-inf")
    started_at: float = float("-inf")
    query: ImexQuery | None = None
    report: NodesReport | None = None
    identified: int | None = None
    settled: bool = False
    polls: int = 0  # `nvidia-imex-ctl` polls so far
    report_poll: int = -1  # the poll `report` comes from
    sent_hosts: str | None = None  # the hosts file of the last start or SIGUSR1
    sent_poll: int = -1  # the polls made before that start or SIGUSR1


@dataclass
class ImexHost:
    """Makes this node's IMEX daemon match its ComputeDomainMembers, one pass at a time."""

    store: ObjectStore
    runner: ImexRunner
    config: HostConfig
    clock: Callable[[], float] = field(default=time.monotonic, repr=False)
    wall_clock: Callable[[], float] = field(default=time.time, repr=False)
    own_pids: Callable[[], set[int]] = field(default=set, repr=False)
    _domains: dict[str, _Domain] = field(default_factory=dict, init=False, repr=False)
    _host_imex: str = field(default="", init=False, repr=False)
    _host_checked_at: float | None = field(default=None, init=False, repr=False)

    @property
    def domains_dir(self) -> Path:
        return self.config.state_dir / DOMAINS_DIR

    def settling(self) -> bool:
        """Whether a served daemon is not yet Ready and connected (poll fast)."""
        return any(not d.settled for d in self._domains.values())

    def reconcile(self, *, poll: bool = True) -> dict[str, MemberStatus]:
        """One pass. `poll`: ask `nvidia-imex-ctl` (else reuse its last answers).

        Returns the status of each member of this node, by member name.
        ClusterError when the members cannot be listed (nothing is touched then).
        """
        cfg = self.config
        members = self.store.list_objects(
            COMPUTE_DOMAIN_MEMBER, cfg.namespace, labels={NODE_LABEL: cfg.node_name}
        )
        self._check_host_imex()
        decided: dict[str, MemberStatus] = {}
        candidates: list[tuple[Obj, MemberSpec]] = []
        for obj in members:
            name = str(obj["metadata"]["name"])
            try:
                spec = member_spec(obj)
            except ClusterError as exc:
                decided[name] = MemberStatus(
                    state=MemberState.FAILED, reason=Reason.INVALID_MEMBER, message=str(exc)
                )
                continue
            if spec.node_name != cfg.node_name:
                continue  # a label that lies; not ours to answer
            written = isolation.isolation_of(obj)
            if written != cfg.isolation:
                decided[name] = MemberStatus(
                    state=MemberState.FAILED,
                    ip_address=cfg.node_ip,
                    reason=Reason.ISOLATION_MISMATCH,
                    message=f"ComputeDomainMember {name} was written by a CD kubelet plugin run "
                    f"with --imex-isolation {written}, but the IMEX host of node "
                    f"{cfg.node_name} runs --imex-isolation {cfg.isolation}: run the "
                    "controller, the plugin and the IMEX host with the same mode "
                    "(resources.computeDomains.imex.isolation)",
                )
                continue
            if not spec.clique_id:
                decided[name] = MemberStatus(
                    state=MemberState.NO_FABRIC,
                    ip_address=cfg.node_ip,
                    reason=Reason.NO_CLIQUE,
                    message=f"node {cfg.node_name} has no multi-node NVLink fabric (no clique): "
                    "no IMEX daemon runs for it",
                )
                continue
            candidates.append((obj, spec))
        if cfg.isolation == isolation.CHANNEL:
            return self._reconcile_shared(members, candidates, decided, poll=poll)
        served = self._choose(candidates)
        for obj, spec in candidates:
            name = str(obj["metadata"]["name"])
            if served is not None and spec.domain_uid != served[1].domain_uid:
                other = served[1]
                decided[name] = MemberStatus(
                    state=MemberState.FAILED,
                    ip_address=cfg.node_ip,
                    reason=Reason.NODE_SERVES_ANOTHER_DOMAIN,
                    message=f"node {cfg.node_name} already runs IMEX for ComputeDomain "
                    f"{other.domain_namespace}/{other.domain_name} (uid {other.domain_uid}); "
                    f"one IMEX daemon per node: ComputeDomain {spec.domain_namespace}/"
                    f"{spec.domain_name} cannot use this node until that domain leaves it",
                )
        self._sweep({served[1].domain_uid} if served is not None else set())
        if served is not None:
            obj, spec = served
            # Beside a host IMEX nothing is started (the status below says why).
            decided[str(obj["metadata"]["name"])] = (
                MemberStatus() if self._host_imex else self._serve(spec, poll=poll)
            )
        return self._finish(members, decided)

    def _reconcile_shared(
        self,
        members: list[Obj],
        candidates: list[tuple[Obj, MemberSpec]],
        decided: dict[str, MemberStatus],
        *,
        poll: bool,
    ) -> dict[str, MemberStatus]:
        """Channel isolation: one daemon for the clique's IMEX domain, serving every member."""
        cfg = self.config
        clique = ""
        if candidates:
            oldest = min(
                candidates,
                key=lambda c: (str(c[0]["metadata"].get("creationTimestamp") or ""),
                               str(c[0]["metadata"]["name"])),
            )  # fmt: skip
            clique = oldest[1].clique_id
        shared = isolation.shared_domain_uid(clique) if clique else ""
        self._sweep({shared} if shared else set())
        if shared:
            spec = MemberSpec(
                domain_uid=shared,
                domain_namespace="",
                domain_name="",
                node_name=cfg.node_name,
                clique_id=clique,
            )
            status = MemberStatus() if self._host_imex else self._serve(spec, poll=poll)
            for obj, member in candidates:
                name = str(obj["metadata"]["name"])
                if member.clique_id == clique:
                    decided[name] = status
                else:
                    decided[name] = MemberStatus(
                        state=MemberState.FAILED,
                        ip_address=cfg.node_ip,
                        reason=Reason.OTHER_CLIQUE,
                        message=f"ComputeDomainMember {name} names clique {member.clique_id}, "
                        f"but node {cfg.node_name} serves clique {clique} (its oldest member's)",
                    )
        return self._finish(members, decided)

    def _finish(
        self, members: list[Obj], decided: dict[str, MemberStatus]
    ) -> dict[str, MemberStatus]:
        """Beside a host IMEX every member fails; then publish each member's status."""
        cfg = self.config
        if self._host_imex:
            decided = {
                name: status
                if status.state == MemberState.NO_FABRIC
                else MemberStatus(
                    state=MemberState.FAILED,
                    ip_address=cfg.node_ip,
                    reason=Reason.HOST_IMEX_RUNNING,
                    message=self._host_imex_message(),
                    imex_node_id=status.imex_node_id,
                )
                for name, status in decided.items()
            }
        for obj in members:
            name = str(obj["metadata"]["name"])
            if name in decided:
                decided[name] = self._publish(obj, decided[name])
        return decided

    # -- one pass, in parts -----------------------------------------------------------

    def _choose(self, candidates: list[tuple[Obj, MemberSpec]]) -> tuple[Obj, MemberSpec] | None:
        """The member served: the domain whose IMEX runs here already, else the oldest."""
        if not candidates:
            return None
        for obj, spec in candidates:
            if spec.domain_uid in self._domains and self._domains[spec.domain_uid].process:
                return obj, spec
        for obj, spec in candidates:
            if self.runner.find(DomainPaths.of(self.config.state_dir, spec.domain_uid)):
                return obj, spec

        def age(item: tuple[Obj, MemberSpec]) -> tuple[str, str]:
            meta = item[0]["metadata"]
            return str(meta.get("creationTimestamp") or ""), str(meta["name"])

        return min(candidates, key=age)

    def _domain_dirs(self) -> list[str]:
        try:
            return sorted(p.name for p in self.domains_dir.iterdir() if p.is_dir())
        except FileNotFoundError:
            return []

    def _sweep(self, keep: set[str]) -> None:
        """Stop the IMEX of every domain this node no longer serves and remove its files."""
        for uid in self._domain_dirs():
            if uid in keep:
                continue
            paths = DomainPaths.of(self.config.state_dir, uid)
            log.info("no member of ComputeDomain %s on node %s: stopping its IMEX", uid,
                     self.config.node_name)  # fmt: skip
            self.runner.stop(paths)
            shutil.rmtree(paths.root, ignore_errors=True)
            self._domains.pop(uid, None)
        for uid in [u for u in self._domains if u not in keep]:
            self._domains.pop(uid, None)
        if self.config.hosts_file is not None and not keep:
            self._write_shared_hosts(())

    def _serve(self, spec: MemberSpec, *, poll: bool) -> MemberStatus:
        cfg = self.config
        dom = self._domains.setdefault(spec.domain_uid, _Domain(spec.domain_uid))
        clique = clique_name(spec.domain_uid, spec.clique_id)
        try:
            rows = clique_rows(self.store.get_object(COMPUTE_DOMAIN_CLIQUE, cfg.namespace, clique))
        except NotFoundError:
            rows = []
        own = next((r for r in rows if r.node_name == cfg.node_name), None)
        paths = DomainPaths.of(cfg.state_dir, spec.domain_uid)
        running = self.runner.find(paths)
        if own is None or not 0 <= own.index < cfg.max_nodes:
            dom.settled = True  # nothing to poll: the controller's row arrives by watch
            if running is not None and dom.process is None:
                dom.last_reload_at = self.clock()  # adopted: it may have just been signalled
            dom.process = running
            placed = {r.index for r in rows if 0 <= r.index < cfg.max_nodes}
            if own is None and len(placed) >= cfg.max_nodes:
                return MemberStatus(
                    state=MemberState.PENDING,
                    ip_address=cfg.node_ip,
                    reason=Reason.CLIQUE_FULL,
                    message=f"clique {spec.clique_id} of {_owner(spec)} "
                    f"already has {len(placed)} nodes, the limit "
                    f"(--max-nodes-per-imex-domain {cfg.max_nodes}): node {cfg.node_name} gets "
                    "no IMEX index until one leaves (ComputeDomainClique "
                    f"{cfg.namespace}/{clique})",
                )
            return MemberStatus(
                state=MemberState.PENDING,
                ip_address=cfg.node_ip,
                reason=Reason.WAITING_FOR_INDEX,
                message=f"waiting for an index in ComputeDomainClique {cfg.namespace}/{clique}",
            )
        hosts_text = self._write_files(paths, spec.domain_uid, rows)
        now = self.clock()
        if running is None and dom.process is not None:
            dom.failures += 1
            # Its last words, if it logged any this run; else how it ended (a signal?).
            logged = _size(paths.log) > dom.process.log_offset
            dom.last_exit = (last_log_line(paths.log) if logged else "") or (
                f"it logged nothing and {self.runner.ended(dom.process.pid)}"
                if self.runner.ended(dom.process.pid)
                else ""
            )
            dom.next_start_at = now + backoff_delay(
                dom.failures, base=cfg.restart_backoff_base, cap=cfg.restart_backoff_cap
            )
            dom.query, dom.report, dom.identified = None, None, None
            log.warning(
                "nvidia-imex pid %d of ComputeDomain %s exited (%d in a row): %s",
                dom.process.pid,
                spec.domain_uid,
                dom.failures,
                dom.last_exit or "no log line",
            )
        elif running is not None and dom.process is None:
            # It may have honoured a SIGUSR1 just before this host started: wait a whole
            # interval before the next, which it would otherwise ignore.
            dom.last_reload_at = now
            log.info("adopted nvidia-imex pid %d of ComputeDomain %s", running.pid,
                     spec.domain_uid)  # fmt: skip
        dom.process = running
        if running is not None and running.index != own.index:
            log.warning(
                "the index of node %s in ComputeDomainClique %s changed from %d to %d: "
                "restarting nvidia-imex (it reads its node ID at start only)",
                cfg.node_name,
                clique,
                running.index,
                own.index,
            )
            self.runner.stop(paths)
            dom.process, dom.query, dom.report, dom.identified = None, None, None, None
            dom.next_start_at = now
        fresh = False
        if dom.process is None and now >= dom.next_start_at:
            try:
                dom.process = self.runner.start(paths, index=own.index)
            except (PluginError, OSError) as exc:
                dom.failures += 1
                dom.last_exit = str(exc)
                dom.next_start_at = now + backoff_delay(
                    dom.failures, base=cfg.restart_backoff_base, cap=cfg.restart_backoff_cap
                )
            else:
                fresh = True
                dom.started_at = now
                dom.reload_pending = False
                dom.sent_hosts, dom.sent_poll = hosts_text, dom.polls
        status = self._status(dom, paths, own, rows, poll=poll or fresh)
        if dom.process is not None:
            self._apply_peers(dom, paths, hosts_text, rows, now=now, fresh=fresh)
        connected = all(state == PeerState.CONNECTED for state in status.peers.values())
        dom.settled = not dom.reload_pending and (
            (status.state == MemberState.READY and connected)
            # a running daemon with the wrong ID stays wrong until its index changes
            or status.reason == Reason.INDEX_MISMATCH
        )
        return status

    def _apply_peers(
        self,
        dom: _Domain,
        paths: DomainPaths,
        hosts_text: str,
        rows: Sequence[CliqueRow],
        *,
        now: float,
        fresh: bool,
    ) -> None:
        """Make the running daemon resolve the current hosts file, and check that it did.

        IMEX ignores a SIGUSR1 within `sigusr1_min_interval` of the previous one, and a
        host restarted in between cannot know when that was; so a signal is never taken
        as applied. The hosts file counts as applied only once `nvidia-imex-ctl -N -j`
        shows every current peer with an address resolved (not `I`); until then the
        daemon is signalled again each time the interval has passed since the last send.
        """
        cfg = self.config
        unresolved = self._unresolved_peers(dom, paths.domain_uid, hosts_text, rows)
        applied = _read_text(paths.applied_hosts)
        verified = (
            dom.sent_hosts == hosts_text
            and dom.report is not None
            and dom.report_poll > dom.sent_poll
            and dom.query is not None
            and dom.query.ready
        )
        if not unresolved and (applied == hosts_text or verified):
            if applied != hosts_text:
                self._applied(paths, hosts_text)
            dom.reload_pending = False
            return
        if fresh:
            return  # it read this hosts file at start: checked at the next poll
        if _read_text(paths.applied_hosts) != hosts_text or unresolved:
            dom.reload_pending = True
        if not dom.reload_pending:
            return
        # SIGUSR1 kills a process that has not set up its handler yet: wait until the
        # daemon answers READY, or has identified itself and had time to set it up
        # (READY may wait for its peers). A slow start is never signalled to death.
        ready = dom.query is not None and dom.query.ready
        up = ready or (
            now - dom.started_at >= SIGNAL_AFTER_START_S
            and dom.process is not None
            and identified_node_id(read_start(paths.log, dom.process.log_offset)) is not None
        )
        # The clock is read again here: `now` predates this pass's `nvidia-imex-ctl` polls,
        # which may take seconds under load, and IMEX measures from when it got the signal.
        sending_at = self.clock()
        if (
            up
            and dom.process is not None
            and sending_at - dom.last_reload_at >= cfg.sigusr1_min_interval
        ):
            log.info(
                "peers of ComputeDomain %s not all resolved by nvidia-imex pid %d%s: SIGUSR1",
                paths.domain_uid,
                dom.process.pid,
                f" (unresolved: {', '.join(sorted(unresolved))})" if unresolved else "",
            )
            self.runner.reload(dom.process)
            dom.last_reload_at = sending_at
            dom.sent_hosts, dom.sent_poll = hosts_text, dom.polls

    def _unresolved_peers(
        self, dom: _Domain, uid: str, hosts_text: str, rows: Sequence[CliqueRow]
    ) -> set[str]:
        """Peers in the hosts file that the daemon's last `-N -j` shows unresolved (`I`)."""
        if dom.report is None:
            return set()
        return {
            row.node_name
            for row in rows
            if row.node_name != self.config.node_name
            and imex_node_name(uid, row.index) in hosts_text.split()
            and dom.report.nodes.get(row.index) == PeerState.INVALID
        }

    def _status(
        self,
        dom: _Domain,
        paths: DomainPaths,
        own: CliqueRow,
        rows: Sequence[CliqueRow],
        *,
        poll: bool,
    ) -> MemberStatus:
        cfg = self.config
        base = MemberStatus(ip_address=cfg.node_ip)
        if dom.process is None:
            if dom.failures >= cfg.failures_before_failed:
                return _with(
                    base,
                    state=MemberState.FAILED,
                    reason=Reason.IMEX_FAILED,
                    message=f"{IMEX_BINARY} exited {dom.failures} times in a row; its last log "
                    f"line: {dom.last_exit or '(none)'} (see {paths.log}; retrying with "
                    "back-off)",
                )
            if dom.failures:
                return _with(
                    base,
                    state=MemberState.STARTING,
                    reason=Reason.RESTARTING,
                    message=f"restarting {IMEX_BINARY}, which exited: "
                    f"{dom.last_exit or '(no log line)'}",
                )
            return _with(
                base, state=MemberState.STARTING, reason=Reason.STARTING, message="starting"
            )
        if poll or dom.query is None:
            dom.polls += 1
            dom.query = self.runner.query(paths)
            if dom.query.ready:
                if dom.identified is None:
                    dom.identified = identified_node_id(
                        read_start(paths.log, dom.process.log_offset)
                    )
                dom.report = self.runner.nodes(paths)
                dom.report_poll = dom.polls
        if not dom.query.ready:
            return _with(
                base,
                state=MemberState.STARTING,
                reason=Reason.STARTING,
                message=f"{IMEX_BINARY} pid {dom.process.pid} is not ready: {dom.query.detail}",
            )
        if dom.identified is None:
            return _with(
                base,
                state=MemberState.STARTING,
                reason=Reason.STARTING,
                message=f"{IMEX_BINARY} pid {dom.process.pid} has not logged "
                f"'Identified this node as ID n' yet",
            )
        if dom.identified != own.index:
            return _with(
                base,
                state=MemberState.FAILED,
                reason=Reason.INDEX_MISMATCH,
                imex_node_id=dom.identified,
                message=f"{IMEX_BINARY} identified node {cfg.node_name} as IMEX node ID "
                f"{dom.identified}, but its index in the ComputeDomainClique is {own.index}: "
                f"check that {paths.hosts} maps "
                f"{imex_node_name(paths.domain_uid, own.index)} to {cfg.node_ip} "
                "and nothing else does",
            )
        dom.failures = 0
        peers: dict[str, str] = {}
        for row in rows:
            if row.node_name == cfg.node_name or not 0 <= row.index < cfg.max_nodes:
                continue
            if dom.report is not None:
                peers[row.node_name] = dom.report.nodes.get(row.index, PeerState.NOT_CONNECTED)
            else:
                peers[row.node_name] = PeerState.INVALID
        return _with(
            base,
            state=MemberState.READY,
            imex_node_id=dom.identified,
            peers=peers,
            message="" if dom.report is not None else f"{IMEX_CTL_BINARY} -N -j gave no answer",
        )

    # -- files ------------------------------------------------------------------------

    def _write_files(self, paths: DomainPaths, uid: str, rows: Sequence[CliqueRow]) -> str:
        cfg = self.config
        paths.root.mkdir(parents=True, exist_ok=True, mode=0o755)
        entries = imex_config.hosts_entries(
            uid, rows, node_name=cfg.node_name, node_ip=cfg.node_ip, max_nodes=cfg.max_nodes
        )
        hosts_text = imex_config.render_hosts(entries)
        _write_if_changed(
            paths.config,
            imex_config.render_imexd_config(
                node_ip=cfg.node_ip, nodes_config_path=str(paths.nodes)
            ),
        )
        _write_if_changed(paths.nodes, imex_config.render_nodes_config(uid, cfg.max_nodes))
        _write_if_changed(paths.hosts, hosts_text)
        if cfg.hosts_file is not None:
            self._write_shared_hosts(entries)
        return hosts_text

    def _write_shared_hosts(self, entries: Sequence[imex_config.HostEntry]) -> None:
        path = self.config.hosts_file
        if path is None:
            return
        try:
            existing = _read_text(path)
            merged = imex_config.merge_hosts(existing, entries)
            if merged != existing:
                # /etc/hosts is often a bind mount (a rename would fail): write in place.
                path.write_text(merged, encoding="utf-8")
        except OSError as exc:
            log.error("cannot update %s: %s", path, exc)

    @staticmethod
    def _applied(paths: DomainPaths, hosts_text: str) -> None:
        """Record which hosts file the running IMEX resolved (after a start or a SIGUSR1)."""
        _write_if_changed(paths.applied_hosts, hosts_text)

    # -- host IMEX --------------------------------------------------------------------

    def _check_host_imex(self) -> None:
        cfg = self.config
        now = self.clock()
        if self._host_checked_at is not None and now - self._host_checked_at < (
            cfg.host_check_interval
        ):
            return
        self._host_checked_at = now
        own = set(self.own_pids())
        for uid in self._domain_dirs():  # ours, adopted ones included
            found = self.runner.find(DomainPaths.of(cfg.state_dir, uid))
            if found is not None:
                own.add(found.pid)
        evidence = detect_host_imex(cfg.host_socket, cfg.host_proc_root, sorted(own))
        if evidence != self._host_imex:
            if evidence:
                log.error("a host nvidia-imex runs on node %s: %s", cfg.node_name, evidence)
            elif self._host_imex:
                log.info("the host nvidia-imex on node %s is gone", cfg.node_name)
        self._host_imex = evidence

    def _host_imex_message(self) -> str:
        return (
            f"a host {IMEX_BINARY} service runs on node {self.config.node_name} "
            f"({self._host_imex}), so the driver-managed IMEX daemon cannot run there. Stop and "
            "mask it (systemctl disable --now nvidia-imex.service; systemctl mask "
            "nvidia-imex.service), or run the driver with --imex-mode hostManaged; checked "
            f"again every {self.config.host_check_interval:g} s"
        )

    # -- status -----------------------------------------------------------------------

    def _publish(self, obj: Obj, status: MemberStatus) -> MemberStatus:
        """Write `status` to the member if it differs from what it shows (on change only)."""
        raw = obj.get("status")
        current: dict[str, Any] = raw if isinstance(raw, dict) else {}
        changed_state = current.get("state") != status.state
        stamp = (
            _rfc3339(self.wall_clock())
            if changed_state
            else str(current.get("lastTransitionTime") or "")
        )
        status = _with(status, last_transition_time=stamp)
        body = member_status_body(status)
        if body == current:
            return status
        name = str(obj["metadata"]["name"])
        try:
            self.store.update_object_status(COMPUTE_DOMAIN_MEMBER, {**obj, "status": body})
        except (ConflictError, NotFoundError) as exc:
            log.debug("member %s changed meanwhile (%s); the next pass writes it", name, exc)
            return status
        except ClusterError as exc:
            log.error("cannot write the status of ComputeDomainMember %s: %s", name, exc)
            return status
        if status.state == MemberState.FAILED and (
            changed_state or current.get("reason") != status.reason
        ):
            self._event(obj, status)
        return status

    def _event(self, obj: Obj, status: MemberStatus) -> None:
        try:
            spec = member_spec(obj)
        except ClusterError:
            return
        now = self.wall_clock()
        cfg = self.config
        event: Obj = {
            "apiVersion": "events.k8s.io/v1",
            "kind": "Event",
            "metadata": {
                "name": f"{spec.domain_name}.{int(now * 1e9):x}",
                "namespace": spec.domain_namespace,
            },
            "eventTime": datetime.datetime.fromtimestamp(now, tz=datetime.UTC).strftime(
                "%Y-%m-%dT%H:%M:%S.%fZ"
            ),
            "type": "Warning",
            "reason": status.reason,
            "action": "RunImex",
            "note": f"node {cfg.node_name}: {status.message}"[:1024],
            "reportingController": EVENT_SOURCE,
            "reportingInstance": cfg.node_name,
            "regarding": {
                "apiVersion": obj.get("apiVersion", ""),
                "kind": "ComputeDomain",
                "namespace": spec.domain_namespace,
                "name": spec.domain_name,
                "uid": spec.domain_uid,
            },
            "related": {
                "apiVersion": obj.get("apiVersion", ""),
                "kind": obj.get("kind", "ComputeDomainMember"),
                "namespace": cfg.namespace,
                "name": obj["metadata"]["name"],
            },
        }
        try:
            self.store.create_object(EVENT, event)
        except ClusterError as exc:
            log.warning("cannot post the %s Event for node %s: %s", status.reason,
                        cfg.node_name, exc)  # fmt: skip


def _owner(spec: MemberSpec) -> str:
    """What an IMEX daemon serves, for messages: a ComputeDomain, or (channel isolation)
    its clique's clique-wide IMEX domain."""
    if spec.domain_name:
        return f"ComputeDomain {spec.domain_namespace}/{spec.domain_name}"
    return "the clique-wide IMEX domain (--imex-isolation channel)"


def _with(status: MemberStatus, **changes: Any) -> MemberStatus:
    return dataclasses.replace(status, **changes)


def _rfc3339(now: float) -> str:
    return datetime.datetime.fromtimestamp(now, tz=datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return ""


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _write_if_changed(path: Path, text: str) -> bool:
    if _read_text(path) == text:
        return False
    atomic.atomic_write(path, text.encode(), mode=0o644, sync=False)
    return True


def host_running(state_dir: Path) -> bool:
    """Whether an IMEX host serves `state_dir` (it holds `imex-host.lock` while it runs)."""
    try:
        fd = os.open(state_dir / HOST_LOCK_FILE, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # also drops the shared lock if we got it
    return False


# -- the daemon loop ----------------------------------------------------------------------


def serve(
    host: ImexHost,
    stop: threading.Event,
    *,
    fast_interval: float = FAST_POLL_S,
    ready_interval: float = READY_POLL_S,
    on_ready: Callable[[], None] | None = None,
) -> None:
    """Run passes until `stop` is set: at once when a member or clique changes, else every
    `fast_interval` while a daemon settles and every `ready_interval` after. Holds
    `<state dir>/imex-host.lock` throughout (a second host waits); IMEX keeps running
    when it returns."""
    state_dir = host.config.state_dir
    try:
        (state_dir / DOMAINS_DIR).mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise PluginError(f"{state_dir}: cannot create the IMEX state directory: {exc}") from exc
    lock = state_dir / HOST_LOCK_FILE
    wake = threading.Event()
    with file_lock(
        lock,
        timeout_s=None,
        error=PluginError,
        stop=stop,
        on_wait=lambda: log.warning("another IMEX host holds %s; waiting for it to exit", lock),
        poll_s=0.2,
    ) as held:
        if not held:
            return
        watch_stop = threading.Event()
        watcher = threading.Thread(
            target=host.store.watch_objects,
            args=((COMPUTE_DOMAIN_MEMBER, COMPUTE_DOMAIN_CLIQUE), wake.set, watch_stop),
            name="imex-host-watch",
            daemon=True,
        )
        watcher.start()
        log.info("IMEX host of node %s serving %s", host.config.node_name, state_dir)
        if on_ready is not None:
            on_ready()
        next_poll = 0.0
        try:
            while not stop.is_set():
                wake.clear()
                now = time.monotonic()
                poll = now >= next_poll
                try:
                    host.reconcile(poll=poll)
                except (ClusterError, OSError) as exc:  # transient: the next pass retries
                    log.error("IMEX host pass failed: %s", exc)
                interval = fast_interval if host.settling() else ready_interval
                after = time.monotonic() + interval
                # A pass woken by a change may have started a daemon: poll it fast from now.
                next_poll = after if poll else min(next_poll, after)
                timeout = max(next_poll - time.monotonic(), 0.0)
                deadline = time.monotonic() + timeout
                while not stop.is_set() and not wake.is_set():
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        break
                    wake.wait(min(remaining, 0.2))
        finally:
            watch_stop.set()
            watcher.join(5)
    log.info("IMEX host of node %s stopped; IMEX daemons keep running", host.config.node_name)
