"""A worker of `bench compute-domain-scale`: several simulated nodes' daemons in one process.

`python -m bench.compute_domain_nodes --root DIR --work DIR --first K --count N --clique C`
makes nodes `node-K` .. `node-(K+N-1)` (IP `127.0.1.<k>`, every GPU in NVLink clique C of
the simulated rack's cluster, a Ready Node object in the store) and runs, per node, the
ComputeDomain kubelet plugin (`kubelet_plugin.compute_domain.main.run`) and the IMEX host
(`ImexHost` served by `kubelet_plugin.imex_host.serve`) in threads of this process, until
SIGTERM. The IMEX daemons are the real `nvidia-imex` stand-in processes of each node's
driver root, started by the node's IMEX host.

One departure from a node, for the sake of two CPU cores: the IMEX host asks its daemon
`nvidia-imex-ctl -q` / `-N -j` every fraction of a second, and 64 nodes starting a Python
interpreter for each question would measure interpreter start-ups. Here the question goes
to the same daemon, over the same TCP command port and protocol, from inside this process
(`dra_driver.hardware.simulated.imex.ctl.ask`), and the answer is what the program prints.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import logging
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from dra_driver.composition.compute_domain_cluster import (
    DRIVER_NAMESPACE,
    SHAPE,
    create_node_object,
    set_clique,
)
from dra_driver.composition.hardware import open_simulated
from dra_driver.errors import AlreadyExistsError, ConflictError
from dra_driver.hardware.simulated.imex import ctl, protocol
from dra_driver.hardware.simulated.imex.protocol import ImexConfigError
from dra_driver.kube.local_store import LocalCluster
from kubelet_plugin.compute_domain.main import CdPluginOptions
from kubelet_plugin.compute_domain.main import run as run_cd_plugin
from kubelet_plugin.imex_host import HostConfig, ImexHost, serve
from kubelet_plugin.imex_host_main import imex_runner
from kubelet_plugin.imex_host_runner import DomainPaths, ProcessImexRunner
from kubelet_plugin.stop_signals import stop_on_signals

log = logging.getLogger("bench.compute_domain_nodes")


class InProcessCtlRunner(ProcessImexRunner):
    """The IMEX host's runner with `nvidia-imex-ctl`'s questions asked from this process
    (module docstring); starting, signalling and stopping IMEX are the real runner's."""

    def _ctl(self, paths: DomainPaths, *args: str) -> subprocess.CompletedProcess[bytes] | str:
        argv = [str(self.ctl), "-c", str(paths.config), *args]
        query = "-q" in args
        try:
            family, address = ctl._target(argparse.Namespace(u=None, config=paths.config))
            answer = ctl.ask(family, address, protocol.QUERY if query else protocol.NODES)
        except (ImexConfigError, OSError) as exc:
            out = b"NOT READY\n" if query else b""
            return subprocess.CompletedProcess(argv, 1, out, str(exc).encode())
        if query:
            ready = answer.get("ready") is True
            return subprocess.CompletedProcess(
                argv, 0 if ready else 1, b"READY\n" if ready else b"NOT READY\n", b""
            )
        return subprocess.CompletedProcess(
            argv, 0, (json.dumps(answer, sort_keys=True) + "\n").encode(), b""
        )


class ConflictCounter:
    """Counts the 409s LocalCluster writes in this process answer: a stale resourceVersion
    (ConflictError) and a create of a name that exists (AlreadyExistsError), by method and
    kind."""

    def __init__(self) -> None:
        self.by_cause: dict[str, int] = {}
        self._lock = threading.Lock()

    @property
    def count(self) -> int:
        return sum(self.by_cause.values())

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return dict(self.by_cause)

    @contextlib.contextmanager
    def installed(self) -> Iterator[None]:
        names = (
            "create_object",
            "update_object",
            "update_object_status",
            "put_resource_claim",
            "update_resource_claim_status",
            "create_resource_slice",
            "update_resource_slice",
        )
        originals = {name: getattr(LocalCluster, name) for name in names}

        def wrap(method: Callable[..., Any]) -> Callable[..., Any]:
            @functools.wraps(method)
            def counted(*args: Any, **kwargs: Any) -> Any:
                try:
                    return method(*args, **kwargs)
                except ConflictError as exc:
                    kind = next(
                        (a.kind for a in args if hasattr(a, "kind") and hasattr(a, "plural")),
                        method.__name__.split("_", 1)[-1],
                    )
                    cause = "exists" if isinstance(exc, AlreadyExistsError) else "stale"
                    key = f"{method.__name__} {kind} ({cause})"
                    with self._lock:
                        self.by_cause[key] = self.by_cause.get(key, 0) + 1
                    raise

            return counted

        for name, method in originals.items():
            setattr(LocalCluster, name, wrap(method))
        try:
            yield
        finally:
            for name, method in originals.items():
                setattr(LocalCluster, name, method)


def run_node(
    *,
    name: str,
    ip: str,
    clique: int,
    root: Path,
    node_dir: Path,
    stop: threading.Event,
    fabric_check_interval: float,
    prepare_wait: float,
    imex_poll: float,
    imex_ready_poll: float,
) -> list[threading.Thread]:
    """Make the node and start its two daemon threads."""
    sim_state = node_dir / "sim-state.json"
    for sub in ("kubelet", "cdi", "imex"):
        (node_dir / sub).mkdir(parents=True, exist_ok=True)
    set_clique(sim_state, name, clique)
    create_node_object(LocalCluster(root), name, ip)

    def hardware() -> Any:
        return open_simulated(SHAPE, sim_state=sim_state, node_name=name).hardware

    plugin = CdPluginOptions(
        node_name=name,
        namespace=DRIVER_NAMESPACE,
        open_hardware=hardware,
        cluster=f"local:{root}",
        kubelet_root=node_dir / "kubelet",
        cdi_root=node_dir / "cdi",
        fabric_check_interval=fabric_check_interval,
        prepare_wait=prepare_wait,
        publish_interval=3600.0,
    )

    def imex_host() -> None:
        machine = hardware()
        real = imex_runner(machine)
        runner = InProcessCtlRunner(real.imex, real.ctl, env=real._env)
        config = HostConfig(
            node_name=name,
            node_ip=ip,
            namespace=DRIVER_NAMESPACE,
            state_dir=node_dir / "imex",
            host_proc_root=machine.host.proc_root,
        )
        host = ImexHost(LocalCluster(root), runner, config, own_pids=runner.own_pids)
        serve(host, stop, fast_interval=imex_poll, ready_interval=imex_ready_poll)

    threads = [
        threading.Thread(target=run_cd_plugin, args=(plugin, stop), name=f"cd-plugin-{name}"),
        threading.Thread(target=imex_host, name=f"imex-host-{name}"),
    ]
    for thread in threads:
        thread.daemon = True
        thread.start()
    return threads


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.compute_domain_nodes")
    parser.add_argument("--root", type=Path, required=True, help="the LocalCluster directory")
    parser.add_argument("--work", type=Path, required=True, help="where nodes/<name>/ go")
    parser.add_argument("--first", type=int, required=True)
    parser.add_argument("--count", type=int, required=True)
    parser.add_argument("--clique", type=int, required=True)
    parser.add_argument("--fabric-check-interval", type=float, default=30.0)
    parser.add_argument("--prepare-wait", type=float, default=20.0)
    parser.add_argument("--imex-poll", type=float, default=0.5)
    parser.add_argument("--imex-ready-poll", type=float, default=2.0)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(message)s")
    stop = threading.Event()
    conflicts = ConflictCounter()
    with conflicts.installed(), stop_on_signals(stop, action="stopping the nodes"):
        threads = []
        for index in range(args.first, args.first + args.count):
            name = f"node-{index}"
            threads += run_node(
                name=name,
                ip=f"127.0.1.{index}",
                clique=args.clique,
                root=args.root,
                node_dir=args.work / "nodes" / name,
                stop=stop,
                fabric_check_interval=args.fabric_check_interval,
                prepare_wait=args.prepare_wait,
                imex_poll=args.imex_poll,
                imex_ready_poll=args.imex_ready_poll,
            )
        print("started", flush=True)
        stop.wait()
        for thread in threads:
            thread.join(timeout=10.0)
    report = args.work / f"conflicts-{args.first}.json"
    report.write_text(json.dumps(conflicts.snapshot(), sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
