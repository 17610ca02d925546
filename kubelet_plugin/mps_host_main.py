"""Wiring of the `dra-gpu mps-host` daemon (see `kubelet_plugin.mps_host` for what it does).

Finds `nvidia-cuda-mps-control` in the driver root for the driver version
NVML reports (waiting, as the kubelet plugin does, while the GPU Operator
installs the driver), then serves the MPS directory of the plugin's data
directory until SIGTERM/SIGINT, and leaves the daemons running when it exits.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from dra_driver.claims.mps import MPS_DIR
from dra_driver.errors import DriverRootError
from dra_driver.hardware.machine import Hardware
from kubelet_plugin.driver_wait import wait_for_driver
from kubelet_plugin.mps_daemons import MpsDaemons
from kubelet_plugin.mps_host import PASS_INTERVAL_S, MpsHost, serve
from kubelet_plugin.stop_signals import stop_on_signals

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class HostOptions:
    """The MPS host's flags, already parsed.

    `open_hardware` opens the node's hardware (real or simulated: the
    composition root decides); it is called again while the driver is not
    ready. Only the driver's user space (its `nvidia-cuda-mps-control`) and
    the MPS shm choice are used.
    """

    open_hardware: Callable[[], Hardware]
    kubelet_root: Path
    driver_name: str
    driver_retry_interval: float = 10.0
    interval: float = PASS_INTERVAL_S


def mps_root(kubelet_root: Path, driver_name: str) -> Path:
    """`<kubelet root>/plugins/<driver>/mps`: the directory the plugin writes intents to."""
    return kubelet_root / "plugins" / driver_name / MPS_DIR


def run(
    options: HostOptions,
    stop: threading.Event | None = None,
    on_ready: Callable[[], None] | None = None,
) -> int:
    """Run the MPS host until `stop` is set or SIGTERM/SIGINT arrives."""
    stop = stop or threading.Event()

    with stop_on_signals(stop, action="exiting, MPS control daemons stay"):
        daemons = _daemons(options, stop)
        if daemons is None:
            return 0
        serve(MpsHost(daemons), stop, interval=options.interval, on_ready=on_ready)
        return 0


def host_daemons(hardware: Hardware, root: Path) -> MpsDaemons:
    """The daemons under `root`, run with the driver root's `nvidia-cuda-mps-control` (a
    simulated node's fake root holds one that starts the simulated daemon);
    `DriverRootError` when the driver root has none."""
    binaries = hardware.driver_binaries()
    if binaries.nvidia_cuda_mps_control is None:
        raise DriverRootError(
            f"the driver root {hardware.driver.root.host} has no nvidia-cuda-mps-control"
        )
    return MpsDaemons(
        root,
        (str(binaries.nvidia_cuda_mps_control),),
        shm_tmpfs=hardware.mps_shm_tmpfs,
        env={**os.environ, **binaries.env},
    )


def _daemons(options: HostOptions, stop: threading.Event) -> MpsDaemons | None:
    """The daemons under the plugin's MPS directory, once the driver's MPS binary is found."""
    root = mps_root(options.kubelet_root, options.driver_name)
    daemons = wait_for_driver(
        lambda: host_daemons(options.open_hardware(), root),
        stop,
        retry_interval=options.driver_retry_interval,
        what="MPS daemons",
        log=log,
    )
    if daemons is not None:
        log.info("MPS control daemons run with %s", daemons.command[0])
    return daemons
