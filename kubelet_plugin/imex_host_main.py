"""Wiring of the `dra-gpu imex-host` daemon (see `kubelet_plugin.imex_host` for what it does).

Finds `nvidia-imex` and `nvidia-imex-ctl` in the driver root for the driver
version NVML reports (waiting, as the MPS host does, while the GPU Operator
installs the driver; on a simulated node they are the fake root's
stand-ins), opens the object store the members and cliques live in, then
serves the node until SIGTERM/SIGINT, and leaves IMEX running when it exits.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

from dra_driver.errors import DriverRootError
from dra_driver.hardware.machine import Hardware
from dra_driver.kube.object_store import ObjectStore
from kubelet_plugin.driver_wait import wait_for_driver
from kubelet_plugin.imex_host import FAST_POLL_S, READY_POLL_S, HostConfig, ImexHost, serve
from kubelet_plugin.imex_host_runner import IMEX_BINARY, IMEX_CTL_BINARY, ProcessImexRunner
from kubelet_plugin.stop_signals import stop_on_signals

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class HostOptions:
    """The IMEX host's flags, already parsed.

    `open_hardware` opens the node's hardware (real or simulated: the
    composition root decides); only the driver's user space (its IMEX
    binaries) and the host's process table are used. `open_store` opens the
    cluster's object store.
    """

    open_hardware: Callable[[], Hardware]
    open_store: Callable[[], ObjectStore]
    host: HostConfig
    driver_retry_interval: float = 10.0
    fast_interval: float = FAST_POLL_S
    ready_interval: float = READY_POLL_S
    query_timeout: float = 5.0


def imex_runner(
    hardware: Hardware, *, query_timeout: float = 5.0, env: Mapping[str, str] | None = None
) -> ProcessImexRunner:
    """The runner of the driver root's `nvidia-imex` and `nvidia-imex-ctl` (with this
    process's environment and `env`); `DriverRootError` when the root has either missing."""
    version = hardware.driver_version()
    files = hardware.driver.files(version)
    root = hardware.driver.root
    found = {name: files.binary(name) for name in (IMEX_BINARY, IMEX_CTL_BINARY)}
    missing = [name for name, path in found.items() if path is None]
    if missing:
        raise DriverRootError(
            f"the driver root {root.host} (driver {version}) has no {' and no '.join(missing)}: "
            "install the driver's IMEX package (nvidia-imex) on this node"
        )
    library_dirs = os.pathsep.join(str(root.in_container(d)) for d in files.library_dirs)
    return ProcessImexRunner(
        root.in_container(str(found[IMEX_BINARY])),
        root.in_container(str(found[IMEX_CTL_BINARY])),
        env={**os.environ, "LD_LIBRARY_PATH": library_dirs, **(env or {})},
        query_timeout=query_timeout,
    )


def run(
    options: HostOptions,
    stop: threading.Event | None = None,
    on_ready: Callable[[], None] | None = None,
) -> int:
    """Run the IMEX host until `stop` is set or SIGTERM/SIGINT arrives."""
    stop = stop or threading.Event()
    with stop_on_signals(stop, action="exiting, IMEX daemons stay"):
        found = _runner(options, stop)
        if found is None:
            return 0
        hardware, runner = found
        # The host's process table, searched for a host nvidia-imex service: /proc on a
        # real node, the simulated node's own tree on a simulated one.
        host_config = replace(options.host, host_proc_root=hardware.host.proc_root)
        host = ImexHost(options.open_store(), runner, host_config, own_pids=runner.own_pids)
        serve(
            host,
            stop,
            fast_interval=options.fast_interval,
            ready_interval=options.ready_interval,
            on_ready=on_ready,
        )
        return 0


def _runner(
    options: HostOptions, stop: threading.Event
) -> tuple[Hardware, ProcessImexRunner] | None:
    """The hardware and the IMEX runner, once the driver's IMEX binaries are found."""

    def open_() -> tuple[Hardware, ProcessImexRunner]:
        hardware = options.open_hardware()
        return hardware, imex_runner(hardware, query_timeout=options.query_timeout)

    found = wait_for_driver(
        open_, stop, retry_interval=options.driver_retry_interval, what="IMEX daemon", log=log
    )
    if found is not None:
        log.info("IMEX daemons run with %s", found[1].imex)
    return found
