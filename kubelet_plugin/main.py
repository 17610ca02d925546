"""Wiring of the `dra-gpu kubelet-plugin` daemon.

Opens the hardware and the cluster, discovers the devices, recovers the
checkpoint, starts the gRPC servers (DRA socket first, then registration),
keeps the node's ResourceSlices published (re-published at once when a
watch sees them changed or deleted, or a device's health changes), watches
device health, serves metrics and the gRPC health probe, and shuts down
cleanly on SIGTERM/SIGINT, removing its sockets. All logic lives in the
modules it wires; this file only decides the order.

On a real node the NVIDIA driver may not be there yet (the GPU Operator
installs it after the plugin starts): until NVML loads from the driver root
and the driver files of its version are found, the plugin logs why and
retries, serving no socket, instead of exiting into a crash loop.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

from controller.publisher import SlicePublisher
from controller.slices import build_resource_slices, choose_layout
from dra_driver.claims.checkpoint_store import CheckpointStore
from dra_driver.claims.mps import MPS_DIR
from dra_driver.container.cdi_store import CdiStore
from dra_driver.errors import (
    DraGpuError,
    DriverRootError,
    NotFoundError,
    NvmlError,
    PluginError,
)
from dra_driver.files.flock import file_lock
from dra_driver.hardware.machine import Hardware
from dra_driver.kube.access import Cluster, open_cluster
from dra_driver.kube.objects import Obj
from dra_driver.node.consumable_shares import ConsumableShares
from dra_driver.node.devices import AllocatableDevice, build_devices, inventory_warnings
from dra_driver.node.health import (
    DEFAULT_IGNORED_XIDS,
    Fault,
    HealthPolicy,
    device_faults,
    device_taints,
)
from dra_driver.node.inventory import discover
from kubelet_plugin.claim_events import EventingService
from kubelet_plugin.driver import GpuDriver
from kubelet_plugin.gpu_locks import GpuLocks
from kubelet_plugin.health_monitor import HealthMonitor
from kubelet_plugin.health_stream import DeviceHealthServicer
from kubelet_plugin.metrics import PluginMetrics
from kubelet_plugin.mig_lifecycle import MigLifecycle
from kubelet_plugin.mps_daemons import MpsDaemons
from kubelet_plugin.probe import HealthCheckServer, PluginHealthServicer
from kubelet_plugin.rebuild import default_sources
from kubelet_plugin.server import PluginServer
from kubelet_plugin.sharing import sharing_strategies

log = logging.getLogger(__name__)

CHECKPOINT_DIR = "checkpoint"
"""One file per prepared claim (`dra_driver.claims.checkpoint_store`)."""
LEGACY_CHECKPOINT_FILE = "checkpoint.json"
"""The single checkpoint file of older dra-gpu versions, migrated at start-up."""
INSTANCE_LOCK_FILE = "plugin.lock"


@dataclass(frozen=True)
class PluginOptions:
    """The daemon's flags, already parsed.

    `open_hardware` opens the node's hardware (real or simulated: the
    composition root decides, from `--nvml` and the driver-root flags); it is
    called again while the driver is not ready.
    """

    node_name: str
    open_hardware: Callable[[], Hardware]
    cluster: str
    kubelet_root: Path
    cdi_root: Path
    driver_name: str
    kubeconfig: str | None = None
    publish_interval: float = 30.0
    dynamic_mig: bool = False
    partitionable_layout: str = "auto"
    mig_reclaim_unknown: bool = False
    keep_mig_enabled: bool = False
    consumable_shares: ConsumableShares | None = None
    driver_retry_interval: float = 10.0
    health_checks: bool = True
    ignored_xids: frozenset[int] = DEFAULT_IGNORED_XIDS
    taint_effect: str = "NoSchedule"
    metrics_address: str | None = None
    healthcheck_port: int | None = None


def plugin_data_dir(kubelet_root: Path, driver_name: str) -> Path:
    """Where the plugin keeps its socket and checkpoint, as the kubelet expects."""
    return kubelet_root / "plugins" / driver_name


def run(options: PluginOptions, stop: threading.Event | None = None) -> int:
    """Run the daemon until `stop` is set or a SIGTERM/SIGINT arrives."""
    stop = stop or threading.Event()

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        log.info("received signal %d: shutting down", signum)
        stop.set()

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, on_signal)
        signal.signal(signal.SIGINT, on_signal)

    hardware = _wait_for_driver(options, stop)
    if hardware is None:
        return 0
    cluster = open_cluster(options.cluster, kubeconfig=options.kubeconfig)
    data_dir = plugin_data_dir(options.kubelet_root, options.driver_name)
    data_dir.mkdir(parents=True, exist_ok=True)
    options.cdi_root.mkdir(parents=True, exist_ok=True)
    # One plugin process of the driver per node: two would roll back each
    # other's half-done claims at start-up, so a new one waits, without a time
    # limit, until the old one is gone (or it is told to stop).
    lock_path = data_dir / INSTANCE_LOCK_FILE
    with file_lock(
        lock_path,
        timeout_s=None,
        error=PluginError,
        stop=stop,
        on_wait=lambda: log.warning(
            "another plugin process holds %s; waiting for it to exit", lock_path
        ),
        poll_s=0.2,
    ) as held:
        if not held:
            return 0
        return _serve(options, stop, hardware, cluster, data_dir)


def _wait_for_driver(options: PluginOptions, stop: threading.Event) -> Hardware | None:
    """Open the hardware once NVML and the driver files are there; None if told to stop.

    A missing or half-installed driver is logged (once per distinct reason)
    and retried every `driver_retry_interval` seconds; any other error (a bad
    flag, an unknown shape) is raised at once.
    """
    last = ""
    while True:
        hardware: Hardware | None = None
        try:
            hardware = options.open_hardware()
            version = hardware.driver_version()
            files = hardware.driver.files(version)
        except (DriverRootError, NvmlError) as exc:
            close = getattr(hardware.nvml, "close", None) if hardware is not None else None
            if close is not None:  # NVML loaded but the driver files are missing
                close()
            if str(exc) != last:
                log.error(
                    "NVIDIA driver not ready, not serving yet (retrying every %gs): %s",
                    options.driver_retry_interval,
                    exc,
                )
                last = str(exc)
            if stop.wait(options.driver_retry_interval):
                return None
            continue
        root = hardware.driver.root
        log.info(
            "NVIDIA driver %s at driver root %s%s: %d libraries in %s, %d graphics files, "
            "%d config files, %d binaries, %d firmware files, %d IPC paths; %s",
            version,
            root.host,
            f" (mounted at {root.container_path})" if root.container_path else "",
            len(files.libraries),
            ", ".join(files.library_dirs),
            len(files.graphics),
            len(files.configs),
            len(files.binaries),
            len(files.firmware),
            len(files.ipc),
            f"CDI hooks {', '.join(root.hooks.active)} from {root.hooks.path}"
            if root.hooks.active
            else "no CDI hooks",
        )
        for warning in files.warnings:
            log.warning("driver root %s: %s", root.host, warning)
        return hardware


def _serve(
    options: PluginOptions,
    stop: threading.Event,
    hardware: Hardware,
    cluster: Cluster,
    data_dir: Path,
) -> int:
    metrics = PluginMetrics()
    cdi_store = CdiStore(options.cdi_root)
    mig = MigLifecycle(
        hardware.nvml, disable_mig_when_empty=not options.keep_mig_enabled, metrics=metrics
    )

    def every_instance_as_dynamic() -> list[AllocatableDevice]:
        # Maps allocated device names back to MIG profiles and placements.
        existing = {(uuid, gi_id) for uuid, gi_id, _profile in mig.instances()}
        inventory = discover(hardware.nvml)
        return build_devices(inventory, dynamic_mig=options.dynamic_mig, owned_instances=existing)

    mps = _mps_daemons(hardware, data_dir)
    gpu_locks = GpuLocks(data_dir / "locks")
    driver = GpuDriver(
        driver_name=options.driver_name,
        pool_name=options.node_name,
        cluster=cluster,
        devices=(),
        host=hardware.host,
        checkpoints=CheckpointStore(
            data_dir / CHECKPOINT_DIR,
            hardware.host.boot_id(),
            legacy_file=data_dir / LEGACY_CHECKPOINT_FILE,
        ),
        cdi_store=cdi_store,
        mig=mig,
        gpu_locks=gpu_locks,
        driver_edits=lambda: hardware.driver.edits(hardware.driver_version()),
        cdi_hooks=hardware.driver.root.hooks,
        rebuild_sources=default_sources(
            cdi_store=cdi_store,
            cluster=cluster,
            mig=mig,
            driver_name=options.driver_name,
            pool_name=options.node_name,
            devices=every_instance_as_dynamic,
        ),
        sharing=sharing_strategies(gpu_locks=gpu_locks, gpu_policy=hardware.gpu_policy, mps=mps),
    )
    metrics.track_prepared(driver.prepared_counts)
    if mps is not None:
        metrics.track_mps_daemons(mps.running)

    # 1. Make checkpoint, hardware and CDI agree; 2. deal with MIG instances
    # nobody owns; 3. only then look at the hardware to decide what to publish.
    report = driver.recover()
    log.info(
        "recovered: %d half-prepared claims rolled back, %d orphan CDI specs removed, "
        "%d claims rebuilt",
        len(report.rolled_back),
        len(report.orphan_cdi_specs_removed),
        len(report.rebuilt),
    )
    if report.mps_adopted or report.mps_restarted or report.mps_orphans_stopped:
        log.info(
            "MPS control daemons: %d adopted, %d restarted, %d without a claim stopped",
            len(report.mps_adopted),
            len(report.mps_restarted),
            len(report.mps_orphans_stopped),
        )
    if options.dynamic_mig:
        driver.reconcile_mig(reclaim_unknown=options.mig_reclaim_unknown)
    owned = driver.owned_instances()
    inventory = discover(hardware.nvml)
    for warning in inventory_warnings(
        inventory, dynamic_mig=options.dynamic_mig, owned_instances=owned
    ):
        log.warning("%s", warning)
    devices = build_devices(
        inventory,
        dynamic_mig=options.dynamic_mig,
        owned_instances=owned,
        consumable_shares=options.consumable_shares,
    )
    driver.set_devices(devices)
    layout = choose_layout(cluster.server_version(), options.partitionable_layout)

    wake = threading.Event()  # set: publish now
    policy = HealthPolicy(ignored_xids=options.ignored_xids, taint_effect=options.taint_effect)

    def health_changed(faults: Mapping[str, Fault]) -> None:
        metrics.unhealthy_devices.set(len(device_faults(devices, faults)))
        wake.set()

    health_checks = options.health_checks and hardware.health is not None
    monitor = HealthMonitor(
        hardware.health,
        sorted({device.gpu.uuid for device in devices}),
        policy,
        on_change=health_changed,
    )
    slices = _SliceBuilder(options, devices, layout, monitor)

    # The server is built (socket paths checked) before anything is published:
    # devices must never be advertised by a plugin that cannot take calls. It
    # starts serving once the slices are out, as the kubelet's first calls may
    # come as soon as the registration socket appears.
    service = EventingService(
        driver, cluster, driver_name=options.driver_name, node_name=options.node_name
    )
    health_servicer = DeviceHealthServicer(
        monitor, pool_name=options.node_name, devices=lambda: devices
    )
    server = PluginServer(
        service,
        driver_name=options.driver_name,
        kubelet_root=options.kubelet_root,
        health=health_servicer if health_checks else None,
        metrics=metrics,
    )
    publisher = SlicePublisher(
        cluster,
        driver=options.driver_name,
        node_name=options.node_name,
        owner_node_uid=_node_uid(cluster, options.node_name),
    )
    try:
        result = publisher.publish(slices())
    except DraGpuError as exc:
        # Serve anyway: Unprepare needs no API server, and the loop below retries.
        metrics.publishes.labels("error").inc()
        log.error("publishing ResourceSlices failed, retrying in the background: %s", exc)
    else:
        metrics.publishes.labels("success").inc()
        log.info(
            "published %d devices, layout %s (created %s, updated %s, deleted %s)",
            len(devices),
            layout,
            result.created,
            result.updated,
            result.deleted,
        )
    stop_metrics = metrics.serve(options.metrics_address) if options.metrics_address else None
    server.start()
    probe: HealthCheckServer | None = None
    if options.healthcheck_port is not None:
        probe = HealthCheckServer(
            PluginHealthServicer(
                options.driver_name, server.registration_socket, server.dra_socket
            ),
            options.healthcheck_port,
        )
        probe.start()

    threads = [
        threading.Thread(  # the first round above is done: wait for a reason
            target=publisher.run_forever,
            args=(slices, stop, options.publish_interval),
            kwargs={
                "immediately": False,
                "wake": wake,
                "on_result": lambda ok: metrics.publishes.labels(
                    "success" if ok else "error"
                ).inc(),
            },
            name="slice-publisher",
            daemon=True,
        ),
        threading.Thread(
            target=cluster.watch_resource_slices,
            kwargs={
                "driver": options.driver_name,
                "node_name": options.node_name,
                "on_change": wake.set,
                "stop": stop,
            },
            name="slice-watch",
            daemon=True,
        ),
    ]
    if health_checks:
        threads.append(
            threading.Thread(target=monitor.run, args=(stop,), name="health-monitor", daemon=True)
        )
    for thread in threads:
        thread.start()
    log.info("serving %s on node %s", options.driver_name, options.node_name)
    try:
        stop.wait()
    finally:
        wake.set()
        server.stop()
        if probe is not None:
            probe.stop()
        service.close()
        if stop_metrics is not None:
            stop_metrics()
        for thread in threads:
            thread.join(timeout=5)
    log.info("stopped")
    return 0


def _mps_daemons(hardware: Hardware, data_dir: Path) -> MpsDaemons | None:
    """The MPS control daemons, run with the driver root's `nvidia-cuda-mps-control` (a
    simulated node's fake root holds one that starts the simulated daemon); None without it."""
    binaries = hardware.driver_binaries()
    if binaries.nvidia_cuda_mps_control is None:
        log.warning("the driver root has no nvidia-cuda-mps-control: MPS claims will be refused")
        return None
    return MpsDaemons(
        data_dir / MPS_DIR,
        (str(binaries.nvidia_cuda_mps_control),),
        shm_tmpfs=hardware.mps_shm_tmpfs,
        env={**os.environ, **binaries.env},
    )


class _SliceBuilder:
    """The node's desired ResourceSlices, with health taints; rebuilt only when health changes."""

    def __init__(
        self,
        options: PluginOptions,
        devices: list[AllocatableDevice],
        layout: str,
        monitor: HealthMonitor,
    ) -> None:
        self._options = options
        self._devices = devices
        self._layout = layout
        self._monitor = monitor
        self._cache: tuple[int, list[Obj]] | None = None

    def __call__(self) -> list[Obj]:
        version, faults, _ = self._monitor.snapshot()
        if self._cache is None or self._cache[0] != version:
            taints = device_taints(self._devices, faults, self._monitor.policy.taint_effect)
            slices = build_resource_slices(
                self._devices,
                driver=self._options.driver_name,
                node_name=self._options.node_name,
                layout=self._layout,  # type: ignore[arg-type]
                taints=taints,
            )
            self._cache = (version, slices)
        return self._cache[1]


def _node_uid(cluster: Cluster, node_name: str) -> str | None:
    """The Node's uid, to own the slices (garbage collection); None if it cannot be read."""
    try:
        uid = cluster.get_node(node_name).get("metadata", {}).get("uid")
    except NotFoundError:
        log.warning(
            "Node %s not found: its ResourceSlices are published without an owner", node_name
        )
        return None
    except DraGpuError as exc:
        log.warning("cannot read Node %s (slices published without an owner): %s", node_name, exc)
        return None
    return str(uid) if uid else None
