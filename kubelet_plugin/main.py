"""Wiring of the `dra-gpu kubelet-plugin` daemon.

Checks every flag and path first (`kubelet_plugin.preflight`: a bad one is
one line and exit 2, before anything starts), then listens on the health and
metrics ports, opens the hardware and the cluster, discovers the devices,
recovers the checkpoint, starts the gRPC servers (DRA socket first, then
registration), and only then publishes the node's ResourceSlices, keeping
them published (re-published at once when a watch sees them changed or
deleted, or a device's health changes). It watches device health, reports
each claim's status.devices, samples GPU use per claim, writes device
metadata files, and shuts down cleanly on SIGTERM/SIGINT, removing its own
sockets and no one else's.
All logic lives in the modules it wires; this file only decides the order.

Start-up is all or nothing: devices are advertised only by a plugin whose
ports, roots and sockets are ready, and a start that fails after the first
publish withdraws the slices it published before it exits.

With a pod UID (`--pod-uid`, `POD_UID`) the sockets are named per instance
(`kubelet_plugin.socket_names`), so that a DaemonSet rolling with
`maxSurge: 1` runs the new pod beside the old one; the readiness probe says
SERVING only once the kubelet has registered this instance.

On a real node the NVIDIA driver may not be there yet (the GPU Operator
installs it after the plugin starts): until NVML loads from the driver root
and the driver files of its version are found, the plugin logs why and
retries, serving no socket, instead of exiting into a crash loop. The health
and metrics ports answer meanwhile (alive, not ready).
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from controller.publisher import SlicePublisher
from controller.slices import build_resource_slices, choose_layout
from dra_driver.claims.checkpoint_store import CheckpointStore
from dra_driver.claims.mps import MPS_DIR
from dra_driver.claims.usage import ClaimDeviceUsage
from dra_driver.container.cdi_store import CdiStore, owner_of_data_dir
from dra_driver.errors import (
    ClusterError,
    DraGpuError,
    DriverRootError,
    NotFoundError,
    NvmlError,
    PluginError,
)
from dra_driver.hardware.machine import Hardware
from dra_driver.hardware.pci_sysfs import VFIO_DRIVER, PciSysfs
from dra_driver.kube.access import Cluster, open_cluster
from dra_driver.kube.objects import Obj
from dra_driver.node.consumable_shares import ConsumableShares
from dra_driver.node.devices import AllocatableDevice, build_devices, inventory_warnings
from dra_driver.node.health import (
    Fault,
    HealthPolicy,
    device_faults,
    device_taints,
)
from dra_driver.node.inventory import discover
from dra_driver.node.vfio_devices import build_vfio_devices, hidden_siblings
from kubelet_plugin.claim_events import EventingService
from kubelet_plugin.claim_locks import ClaimLocks
from kubelet_plugin.claim_status import ClaimStatusService, ClaimStatusWriter
from kubelet_plugin.device_metadata import DeviceMetadataService
from kubelet_plugin.driver import GpuDriver
from kubelet_plugin.gpu_locks import GpuLocks
from kubelet_plugin.health_monitor import DEFAULT_POLL_SECONDS, HealthMonitor
from kubelet_plugin.health_stream import DeviceHealthServicer
from kubelet_plugin.kernel_status import start_kernel_setup
from kubelet_plugin.malloc_tuning import tune_malloc
from kubelet_plugin.metrics import PluginMetrics
from kubelet_plugin.mig_lifecycle import MigLifecycle
from kubelet_plugin.mps_intents import MpsHostClient
from kubelet_plugin.node_ownership import own_node
from kubelet_plugin.preflight import PluginPaths, check_options
from kubelet_plugin.probe import HealthCheckServer, Phase, PluginHealthServicer, PluginProbe
from kubelet_plugin.publish_lease import PublishLease
from kubelet_plugin.rebuild import default_sources
from kubelet_plugin.server import PluginServer
from kubelet_plugin.service import ClaimRef
from kubelet_plugin.sharing import sharing_strategies
from kubelet_plugin.socket_names import plugin_data_dir
from kubelet_plugin.stop_signals import stop_on_signals
from kubelet_plugin.usage_metrics import UsageCollector
from kubelet_plugin.usage_sampler import (
    DEFAULT_INTERVAL_SECONDS,
    REPORT_FILE,
    ClaimPods,
    UsageLoop,
    UsageSampler,
)
from kubelet_plugin.vfio import with_passthrough

log = logging.getLogger(__name__)

CHECKPOINT_DIR = "checkpoint"
"""One file per prepared claim (`dra_driver.claims.checkpoint_store`)."""
LEGACY_CHECKPOINT_FILE = "checkpoint.json"
"""The single checkpoint file of older dra-gpu versions, migrated at start-up."""
ROLLING_DRAIN_S = 1.0
"""With a rolling-upgrade peer, the DRA socket serves this long after deregistering."""
STOP_GRACE_S = 5.0
"""On SIGTERM, how long DRA calls in flight may take to finish before the sockets go."""
THREAD_JOIN_S = 5.0
"""On SIGTERM, how long each background thread (publisher, slice watch, health) may take."""
CLEAN_STOP_S = 25.0
"""The longest clean stop, every step together: the DaemonSet's terminationGracePeriodSeconds
(30) must cover it. The sockets go first (at most 2 x STOP_GRACE_S + ROLLING_DRAIN_S); the
Events, status writes and threads share what is left, so an API server that hangs cannot
make the kubelet SIGKILL the plugin before its lease and files are released."""


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
    list_attributes: bool = False  # --feature-gates DRAListTypeAttributes=true
    driver_retry_interval: float = 10.0
    health_checks: bool = True
    ignored_xids: frozenset[int] = frozenset()
    health_poll_interval: float = DEFAULT_POLL_SECONDS
    taint_effect: str = "NoSchedule"
    metrics_address: str | None = None
    healthcheck_port: int | None = None
    pod_uid: str | None = None  # per-instance socket names for rolling upgrades
    instance_wait: float = 60.0  # how long to wait for another instance before refusing
    usage_interval: float = DEFAULT_INTERVAL_SECONDS  # 0: off
    idle_claim_after: float | None = None  # seconds; None: no GPUIdle Events
    device_metadata: bool = False
    passthrough: bool = False  # VFIO passthrough devices (NVIDIA's PassthroughSupport)


__all__ = ["PluginOptions", "plugin_data_dir", "run"]


def run(options: PluginOptions, stop: threading.Event | None = None) -> int:
    """Run the daemon until `stop` is set or a SIGTERM/SIGINT arrives.

    Raises `DraGpuError` (`ConfigError` for a bad flag) when it cannot start;
    nothing is then left published, listening or bound.
    """
    stop = stop or threading.Event()
    tune_malloc()  # before any thread starts: memory stays flat under load
    paths = check_options(options)  # flags first: nothing has started yet
    cluster = open_cluster(options.cluster, kubeconfig=options.kubeconfig)

    metrics = PluginMetrics()
    probe = PluginProbe(options.driver_name)
    with (
        stop_on_signals(stop, action="shutting down"),
        _probe_and_metrics_endpoints(options, metrics, probe),
    ):
        hardware = _wait_for_driver(options, stop, probe)
        if hardware is None:
            return 0
        return _run_locked(options, stop, hardware, cluster, paths, metrics=metrics, probe=probe)


@contextlib.contextmanager
def _probe_and_metrics_endpoints(
    options: PluginOptions, metrics: PluginMetrics, probe: PluginProbe
) -> Iterator[None]:
    """The health port and /metrics listen from the first second to the last.

    A port that is taken is a `ConfigError` here, before anything is published.
    """
    with contextlib.ExitStack() as stack:
        health: HealthCheckServer | None = None
        if options.healthcheck_port is not None:  # bound here, started below
            health = HealthCheckServer(PluginHealthServicer(probe), options.healthcheck_port)
            stack.callback(health.stop)
        if options.metrics_address:
            stack.callback(metrics.serve(options.metrics_address))
        if health is not None:
            health.start()
        yield


def _run_locked(
    options: PluginOptions,
    stop: threading.Event,
    hardware: Hardware,
    cluster: Cluster,
    paths: PluginPaths,
    *,
    metrics: PluginMetrics,
    probe: PluginProbe,
) -> int:
    data_dir = paths.data_dir
    # One owner per node (`node_ownership`): rolling-upgrade peers (a pod UID
    # each) share it; any other instance waits for the one there, then refuses.
    probe.set_phase(Phase.WAITING_FOR_INSTANCE, str(data_dir))
    with own_node(
        data_dir=data_dir,
        cdi_root=options.cdi_root,
        driver_name=options.driver_name,
        owner=owner_of_data_dir(options.driver_name, data_dir),
        rolling_peer=bool(options.pod_uid),
        stop=stop,
        wait_s=options.instance_wait,
    ) as held:
        if not held:
            return 0
        return _serve(options, stop, hardware, cluster, data_dir, metrics=metrics, probe=probe)


def _wait_for_driver(
    options: PluginOptions, stop: threading.Event, probe: PluginProbe
) -> Hardware | None:
    """Open the hardware once NVML and the driver files are there; None if told to stop.

    A missing or half-installed driver is logged (once per distinct reason)
    and retried every `driver_retry_interval` seconds; any other error (a bad
    flag, an unknown shape) is raised at once.
    """
    last = ""
    attempt = 0
    while True:
        attempt += 1
        hardware: Hardware | None = None
        try:
            hardware = options.open_hardware()
            version = hardware.driver_version()
            files = hardware.driver.files(version)
        except (DriverRootError, NvmlError) as exc:
            close = getattr(hardware.nvml, "close", None) if hardware is not None else None
            if close is not None:  # NVML loaded but the driver files are missing
                close()
            probe.set_phase(Phase.WAITING_FOR_DRIVER, str(exc))
            if str(exc) != last:
                log.error(
                    "NVIDIA driver not ready, not serving yet (retrying every %gs): %s",
                    options.driver_retry_interval,
                    exc,
                )
                last = str(exc)
            log.debug("NVIDIA driver still not ready after attempt %d: %s", attempt, exc)
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
    *,
    metrics: PluginMetrics,
    probe: PluginProbe,
) -> int:
    probe.set_phase(Phase.RECOVERING)
    # nvidia-uvm before anything builds a CDI spec (recovery rebuilds some).
    start_kernel_setup(
        hardware, cluster, metrics, driver_name=options.driver_name, node_name=options.node_name
    )
    cdi_store = CdiStore(options.cdi_root, owner=owner_of_data_dir(options.driver_name, data_dir))
    mig = MigLifecycle(
        hardware.nvml, disable_mig_when_empty=not options.keep_mig_enabled, metrics=metrics
    )

    def every_instance_as_dynamic() -> list[AllocatableDevice]:
        # Maps allocated device names back to MIG profiles and placements.
        existing = {(uuid, gi_id) for uuid, gi_id, _profile in mig.instances()}
        inventory = discover(hardware.nvml)
        return build_devices(inventory, dynamic_mig=options.dynamic_mig, owned_instances=existing)

    mps = MpsHostClient(data_dir / MPS_DIR)  # the daemons run in the node's MPS host
    gpu_locks = GpuLocks(data_dir / "locks")
    wake = threading.Event()  # set: publish now
    pci = _passthrough_pci(options, hardware)
    sharing = sharing_strategies(gpu_locks=gpu_locks, gpu_policy=hardware.gpu_policy, mps=mps)
    if pci is not None:
        sharing = with_passthrough(
            sharing,
            pci,
            hardware.nvml,
            gpu_locks,
            on_change=wake.set,
            release_nvml=hardware.release_nvml,
        )
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
        sharing=sharing,
        claim_locks=ClaimLocks(data_dir / "locks"),
        on_claims_changed=wake.set if pci is not None else None,
    )
    metrics.track_prepared(driver.prepared_counts)
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
        list_attributes=options.list_attributes,
    )
    if pci is not None:
        devices += build_vfio_devices(inventory, pci.gpus(), iommufd_enabled=pci.iommufd_enabled())
    driver.set_devices(devices)
    layout = choose_layout(_server_version(cluster), options.partitionable_layout)

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
        poll_interval=options.health_poll_interval,
    )

    def hidden() -> frozenset[str]:
        """Devices withdrawn while their GPU's other form is prepared (passthrough)."""
        if pci is None:
            return frozenset()
        held = {prepared.device for _uid, prepared in driver.snapshot().held_devices()}
        return frozenset(hidden_siblings(devices, held))

    slices = _SliceBuilder(options, devices, layout, monitor, hidden)
    dynamic_mig = options.dynamic_mig

    def desired_slices() -> list[Obj]:
        """The slices to publish; static MIG from the moment the API server is seen dropping
        the counters that keep dynamic MIG devices apart (DRAPartitionableDevices off)."""
        nonlocal devices, slices, dynamic_mig
        if dynamic_mig and PARTITIONABLE_GATE in publisher.dropped_gates:
            log.error(DYNAMIC_MIG_REFUSED)
            dynamic_mig = False
            devices = build_devices(
                inventory,
                owned_instances=owned,
                consumable_shares=options.consumable_shares,
                list_attributes=options.list_attributes,
            )
            driver.set_devices(devices)
            slices = _SliceBuilder(options, devices, layout, monitor, hidden)
        return slices()

    # All or nothing: both sockets serve before any device is advertised (a
    # plugin that cannot take calls must never publish), and a start that
    # fails after the first publish withdraws what it published.
    claim_pods = ClaimPods()
    metadata = DeviceMetadataService(
        driver,
        cluster,
        driver_name=options.driver_name,
        pool_name=options.node_name,
        plugin_data_dir=data_dir,
        cdi_root=options.cdi_root,
        prepared=driver.snapshot,
        devices=lambda: devices,
        enabled=options.device_metadata,
    )
    metadata.remove_orphans(driver.snapshot())
    status_writer = ClaimStatusWriter(
        cluster,
        driver_name=options.driver_name,
        pool_name=options.node_name,
        claim_pods=claim_pods,
        metrics=metrics,
    )
    service = EventingService(
        ClaimStatusService(
            metadata,
            status_writer,
            prepared=driver.snapshot,
            devices=lambda: devices,
            driver_name=options.driver_name,
            node_name=options.node_name,
        ),
        cluster,
        driver_name=options.driver_name,
        node_name=options.node_name,
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
        pod_uid=options.pod_uid,
        drain=ROLLING_DRAIN_S if options.pod_uid else 0.0,
    )
    lease = PublishLease(data_dir)  # one publisher per node (rolling-upgrade peers take turns)
    publisher = SlicePublisher(
        cluster,
        driver=options.driver_name,
        node_name=options.node_name,
        owner_node_uid=_node_uid(cluster, options.node_name),
    )
    threads = [
        threading.Thread(  # the first round is done before they start: wait for a reason
            target=publisher.run_forever,
            args=(desired_slices, stop, options.publish_interval),
            kwargs={
                "immediately": False,
                "wake": wake,
                "on_result": lambda ok: metrics.publishes.labels(
                    "success" if ok else "error"
                ).inc(),
                "may_publish": lease.held,
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
    if options.usage_interval > 0:
        usage = _usage_loop(
            options,
            hardware=hardware,
            driver=driver,
            devices=lambda: devices,
            claim_pods=claim_pods,
            cluster=cluster,
            service=service,
        )
        metrics.track_usage(UsageCollector(usage.latest))
        threads.append(
            threading.Thread(target=usage.run, args=(stop,), name="usage-sampler", daemon=True)
        )
    try:
        # Both servers run under hidden names; the kubelet sees the sockets
        # once the slices are out. PluginError here: nothing was published.
        server.start(expose=False)
    except BaseException:
        service.close(timeout=THREAD_JOIN_S)
        status_writer.close(timeout=THREAD_JOIN_S)
        raise
    try:
        if lease.held():  # else a peer publishes; this instance takes over when it exits
            _publish_first(publisher, desired_slices, metrics, layout, lambda: len(devices))
        server.expose()
        for thread in threads:
            thread.start()
    except BaseException:
        stop.set()
        wake.set()
        server.stop(grace=0)
        service.close(timeout=THREAD_JOIN_S)
        status_writer.close(timeout=THREAD_JOIN_S)
        if lease.held():  # never a peer's slices
            _withdraw(publisher)  # the first publish may have written some slices
        lease.release()
        raise
    probe.serving(
        registration_socket=server.registration_socket,
        dra_socket=server.dra_socket,
        registration=lambda: server.registration_status,
    )
    log.info(
        "serving %s on node %s (DRA socket %s, registration socket %s)",
        options.driver_name,
        options.node_name,
        server.dra_socket,
        server.registration_socket,
    )
    try:
        stop.wait()
    finally:
        stop_by = time.monotonic() + CLEAN_STOP_S

        def left(most: float) -> float:
            return max(min(most, stop_by - time.monotonic()), 0.0)

        probe.set_phase(Phase.STOPPING)
        wake.set()
        server.stop(grace=STOP_GRACE_S)
        for thread in threads:
            if thread.name == "usage-sampler":
                thread.join(timeout=left(THREAD_JOIN_S))  # it posts Events through the service
        service.close(timeout=left(THREAD_JOIN_S))
        status_writer.close(timeout=left(THREAD_JOIN_S))
        for thread in threads:
            thread.join(timeout=left(THREAD_JOIN_S))
        lease.release()
    log.info("stopped")
    return 0


def _server_version(cluster: Cluster) -> tuple[int, int] | None:
    """The API server's version, or None when it cannot be asked now: a plugin restarted
    during a control-plane outage still serves Unprepare (and Prepare of claims whose
    objects it can read later), so an unreachable API server must not stop its start."""
    try:
        return cluster.server_version()
    except ClusterError as exc:
        log.warning(
            "cannot ask the API server for its version (%s); the ResourceSlice layout "
            "follows --partitionable-layout, or v1.35 for auto",
            exc,
        )
        return None


def _publish_first(
    publisher: SlicePublisher,
    slices: Callable[[], list[Obj]],
    metrics: PluginMetrics,
    layout: str,
    device_count: Callable[[], int],
) -> None:
    """The first publish; a failure is logged and left to the background loop.

    When the API server drops a feature gate's fields from what was written,
    `slices` may change its answer (dynamic MIG falls back to static MIG): the
    second publish withdraws the devices it cannot protect (a no-op otherwise).
    """
    try:
        result = publisher.publish(slices())
        if PARTITIONABLE_GATE in publisher.dropped_gates:
            result = publisher.publish(slices())
    except DraGpuError as exc:
        # Serve anyway: Unprepare needs no API server, and the loop retries.
        metrics.publishes.labels("error").inc()
        log.error("publishing ResourceSlices failed, retrying in the background: %s", exc)
        return
    metrics.publishes.labels("success").inc()
    log.info(
        "published %d devices, layout %s (created %s, updated %s, deleted %s)",
        device_count(),
        layout,
        result.created,
        result.updated,
        result.deleted,
    )


def _withdraw(publisher: SlicePublisher) -> None:
    """Delete the slices a failed start published (a rolling-upgrade peer's slice
    watch sees the deletion and publishes its own again at once)."""
    try:
        result = publisher.publish([])
    except DraGpuError as exc:
        log.error("the start failed; withdrawing its ResourceSlices failed too: %s", exc)
        return
    log.warning("the start failed: withdrew ResourceSlices %s", ", ".join(result.deleted) or "-")


def _usage_loop(
    options: PluginOptions,
    *,
    hardware: Hardware,
    driver: GpuDriver,
    devices: Callable[[], Sequence[AllocatableDevice]],
    claim_pods: ClaimPods,
    cluster: Cluster,
    service: EventingService,
) -> UsageLoop:
    """The usage sampler's loop (`--usage-interval`), reporting idle claims through `service`."""
    log.info(
        "sampling GPU use per claim every %g s%s",
        options.usage_interval,
        f"; claims idle for {options.idle_claim_after:g} s get a GPUIdle Event"
        if options.idle_claim_after
        else "",
    )
    sampler = UsageSampler(
        hardware.nvml,
        hardware.host.proc_root,
        prepared=driver.snapshot,
        devices=devices,
        claim_pods=claim_pods,
    )
    return UsageLoop(
        sampler,
        interval=options.usage_interval,
        claim_pods=claim_pods,
        cluster=cluster,
        report_file=plugin_data_dir(options.kubelet_root, options.driver_name) / REPORT_FILE,
        idle_after=options.idle_claim_after,
        on_idle=lambda usages, idle: _report_idle(service, usages, idle),
    )


def _report_idle(
    service: EventingService, usages: Sequence[ClaimDeviceUsage], idle_seconds: float
) -> None:
    target = usages[0].target
    devices = ", ".join(sorted(u.target.device for u in usages))
    message = (
        f"its GPUs ({devices}) have been idle for {_duration_text(idle_seconds)} "
        "(no SM use; on a MIG device, no process)"
    )
    log.warning("ResourceClaim %s/%s: %s", target.namespace, target.claim, message)
    service.claim_idle(ClaimRef(target.namespace, target.claim_uid, target.claim), message)


def _duration_text(seconds: float) -> str:
    whole = int(seconds)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m"
    if minutes:
        return f"{minutes}m{secs:02d}s"
    return f"{secs}s"


class _SliceBuilder:
    """The node's desired ResourceSlices, with health taints; rebuilt only when health changes."""

    def __init__(
        self,
        options: PluginOptions,
        devices: list[AllocatableDevice],
        layout: str,
        monitor: HealthMonitor,
        hidden: Callable[[], frozenset[str]] = frozenset,
    ) -> None:
        self._options = options
        self._devices = devices
        self._layout = layout
        self._monitor = monitor
        self._hidden = hidden
        self._cache: tuple[tuple[int, frozenset[str]], list[Obj]] | None = None

    def __call__(self) -> list[Obj]:
        version, faults, _ = self._monitor.snapshot()
        key = (version, self._hidden())
        if self._cache is None or self._cache[0] != key:
            shown = [device for device in self._devices if device.name not in key[1]]
            taints = device_taints(shown, faults, self._monitor.policy.taint_effect)
            slices = build_resource_slices(
                shown,
                driver=self._options.driver_name,
                node_name=self._options.node_name,
                layout=self._layout,  # type: ignore[arg-type]
                taints=taints,
            )
            self._cache = (key, slices)
        return self._cache[1]


def _passthrough_pci(options: PluginOptions, hardware: Hardware) -> PciSysfs | None:
    """The PCI layer VFIO passthrough works through; None without `--passthrough`.

    PluginError when the node cannot pass GPUs through: no IOMMU (NVIDIA's
    plugin refuses to start then too).
    """
    if not options.passthrough:
        return None
    pci = hardware.pci
    if pci is None or not pci.iommu_enabled():
        where = "this hardware" if pci is None else str(pci.sys_root / "kernel/iommu_groups")
        raise PluginError(
            f"--passthrough: the kernel has no IOMMU ({where} lists no IOMMU group); turn it "
            "on (intel_iommu=on or amd_iommu=on, and VT-d/AMD-Vi in the firmware) or run "
            "without --passthrough"
        )
    if not (pci.sys_root / "bus/pci/drivers" / VFIO_DRIVER).is_dir():
        raise PluginError(
            f"--passthrough: the {VFIO_DRIVER} driver is not loaded "
            f"({pci.sys_root / 'bus/pci/drivers' / VFIO_DRIVER} is missing); run "
            "`modprobe vfio-pci` on the node (or list it in /etc/modules-load.d)"
        )
    return pci


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


PARTITIONABLE_GATE = "DRAPartitionableDevices"
DYNAMIC_MIG_REFUSED = (
    "the API server dropped the shared counters of the dynamic MIG devices (feature gate "
    f"{PARTITIONABLE_GATE} is off; it is alpha and off by default on Kubernetes 1.34 and "
    "1.35): refusing --dynamic-mig, since without counters the scheduler could hand out "
    "overlapping MIG devices; publishing the existing MIG devices only (static MIG). Turn the "
    "gate on in kube-apiserver, kube-scheduler and kube-controller-manager, or run without "
    "--dynamic-mig"
)
