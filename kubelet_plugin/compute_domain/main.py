"""Wiring of `dra-gpu compute-domain-kubelet-plugin`.

The GPU plugin's machinery, in a smaller order: open the cluster (claims
through `Cluster`, everything else through `ObjectStore`) and the hardware
(waiting, never exiting, while the NVIDIA driver is not there yet), read the
fabric once, recover the checkpoint (`ComputeDomainDriver.recover`), serve
the DRA and registration sockets (`kubelet_plugin.server`, with the GPU
plugin's Events for failed Prepares, `kubelet_plugin.claim_events`), publish
the node's one slice (`controller.publisher`) and then keep it right:
republished when the fabric changes (`NodeFabric`, every
`fabric_check_interval`), when someone changes the slices, and every
`publish_interval`. The members are watched so Prepare wakes when IMEX on the
node is Ready, and so `channel-0` is republished with the `domain` attribute
while the node serves a ComputeDomain and without it after (re-read at every
fabric check too, in case the watch missed an event); in channel isolation
(`--imex-isolation channel`) never, since the node serves every domain, each
on its own channel. SIGTERM/SIGINT stop it
cleanly; the slices stay (the kubelet removes them when the plugin is gone for
good), the clique label goes.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Final, cast

from controller.publisher import SlicePublisher
from dra_driver.claims.checkpoint_store import CheckpointStore
from dra_driver.compute_domain import channel_cdi, isolation
from dra_driver.compute_domain.names import DRIVER_NAME
from dra_driver.container.cdi_store import CdiStore, owner_of_data_dir
from dra_driver.errors import ConfigError, DraGpuError, DriverRootError, NvmlError
from dra_driver.hardware.machine import Hardware
from dra_driver.kube.access import open_cluster
from dra_driver.kube.cluster import Cluster
from dra_driver.kube.object_store import ObjectStore
from dra_driver.node.inventory import discover
from kubelet_plugin.claim_events import EventingService, claim_warning_events
from kubelet_plugin.claim_locks import ClaimLocks
from kubelet_plugin.compute_domain.driver import (
    DEFAULT_PREPARE_WAIT_S,
    ComputeDomainDriver,
    read_channels_major,
)
from kubelet_plugin.compute_domain.fabric import NodeFabric
from kubelet_plugin.compute_domain.host_imex import DEFAULT_SOCKET, IMEX_CTL, HostImex
from kubelet_plugin.compute_domain.member_watch import MemberWatch
from kubelet_plugin.probe import HealthCheckServer, Phase, PluginHealthServicer, PluginProbe
from kubelet_plugin.server import PluginServer
from kubelet_plugin.service import ClaimRef
from kubelet_plugin.socket_names import plugin_data_dir
from kubelet_plugin.stop_signals import stop_on_signals

log = logging.getLogger(__name__)

CHECKPOINT_DIR: Final = "checkpoint"
IMEX_MODES: Final = ("driverManaged", "hostManaged")
STOP_GRACE_S: Final = 5.0
THREAD_JOIN_S: Final = 5.0
NO_CLIQUE_REASON: Final = "NoNVLinkClique"


@dataclass(frozen=True)
class CdPluginOptions:
    """The daemon's flags, already parsed (CD-DESIGN.md, CLI contracts)."""

    node_name: str
    namespace: str
    open_hardware: Callable[[], Hardware]
    cluster: str
    kubelet_root: Path
    cdi_root: Path
    kubeconfig: str | None = None
    imex_mode: str = "driverManaged"
    imex_isolation: str = isolation.DOMAIN
    imex_host_socket_path: str = DEFAULT_SOCKET
    gpu_clique_label: bool = False
    fabric_check_interval: float = 10.0
    prepare_wait: float = DEFAULT_PREPARE_WAIT_S
    publish_interval: float = 30.0
    healthcheck_port: int | None = None
    driver_retry_interval: float = 10.0


def run(options: CdPluginOptions, stop: threading.Event | None = None) -> int:
    """Run the daemon until `stop` is set or SIGTERM/SIGINT; `DraGpuError` if it cannot start."""
    stop = stop or threading.Event()
    if options.imex_mode not in IMEX_MODES:
        raise ConfigError(
            f"--imex-mode {options.imex_mode!r}: expected one of {', '.join(IMEX_MODES)}"
        )
    isolation.check_isolation(
        options.imex_isolation, host_managed=options.imex_mode == "hostManaged"
    )
    cluster = open_cluster(options.cluster, kubeconfig=options.kubeconfig)
    objects = object_store(cluster, options.cluster)
    probe = PluginProbe(DRIVER_NAME)
    with stop_on_signals(stop, action="shutting down"), _health_port(options, probe):
        hardware = _wait_for_driver(options, stop, probe)
        if hardware is None:
            return 0
        return _serve(options, stop, hardware, cluster=cluster, objects=objects, probe=probe)


def object_store(cluster: Cluster, spec: str) -> ObjectStore:
    """The cluster as an `ObjectStore`; ConfigError if its backend does not serve one."""
    needed = ("get_object", "list_objects", "create_object", "update_object", "watch_objects")
    if all(callable(getattr(cluster, name, None)) for name in needed):
        return cast(ObjectStore, cluster)
    raise ConfigError(
        f"--cluster {spec}: this cluster backend cannot read ComputeDomain objects "
        "(it does not implement dra_driver.kube.object_store.ObjectStore)"
    )


@contextlib.contextmanager
def _health_port(options: CdPluginOptions, probe: PluginProbe) -> Iterator[None]:
    if options.healthcheck_port is None:
        yield
        return
    health = HealthCheckServer(PluginHealthServicer(probe), options.healthcheck_port)
    health.start()
    try:
        yield
    finally:
        health.stop()


def _wait_for_driver(
    options: CdPluginOptions, stop: threading.Event, probe: PluginProbe
) -> Hardware | None:
    """The hardware once NVML loads; retried (logged once per reason) while it does not."""
    last = ""
    while True:
        try:
            return options.open_hardware()
        except (DriverRootError, NvmlError) as exc:
            probe.set_phase(Phase.WAITING_FOR_DRIVER, str(exc))
            if str(exc) != last:
                log.error("NVIDIA driver not ready, not serving yet (retrying): %s", exc)
                last = str(exc)
            if stop.wait(options.driver_retry_interval):
                return None


def _serve(
    options: CdPluginOptions,
    stop: threading.Event,
    hardware: Hardware,
    *,
    cluster: Cluster,
    objects: ObjectStore,
    probe: PluginProbe,
) -> int:
    probe.set_phase(Phase.RECOVERING)
    host_managed = options.imex_mode == "hostManaged"
    data_dir = plugin_data_dir(options.kubelet_root, DRIVER_NAME)
    wake = threading.Event()
    fabric = NodeFabric(
        lambda: discover(hardware.nvml),
        node_name=options.node_name,
        host_managed=host_managed,
        on_change=wake.set,
        objects=objects,
        clique_label=options.gpu_clique_label,
    )
    fabric.evaluate()

    def serve_domain() -> None:  # republish channel-0 with the domain the node serves
        if options.imex_isolation == isolation.CHANNEL:
            return  # every domain is served, each on its own channel: no `domain` pin
        try:
            fabric.set_domain(members.serving(options.node_name))
        except DraGpuError as exc:
            log.warning("cannot list this node's ComputeDomainMembers: %s", exc)

    members = MemberWatch(objects, options.namespace, on_change=serve_domain)
    serve_domain()
    host_imex = (
        HostImex(
            ctl=hardware.driver.root.in_container(IMEX_CTL),
            socket=options.imex_host_socket_path,
            node_name=options.node_name,
        )
        if host_managed
        else None
    )
    driver = ComputeDomainDriver(
        node_name=options.node_name,
        namespace=options.namespace,
        cluster=cluster,
        objects=objects,
        checkpoints=CheckpointStore(data_dir / CHECKPOINT_DIR, hardware.host.boot_id()),
        cdi_store=CdiStore(
            options.cdi_root,
            owner=owner_of_data_dir(DRIVER_NAME, data_dir),
            kind=channel_cdi.CLAIMS,
        ),
        channels_major=lambda: read_channels_major(hardware.host.proc_root),
        members=members,
        clique=fabric.clique,
        prepare_wait=options.prepare_wait,
        host_imex=host_imex,
        claim_locks=ClaimLocks(data_dir / "locks", timeout_s=options.prepare_wait + 15.0),
        warn=lambda ref, text: post_warning(cluster, options.node_name, ref, text),
        isolation_mode=options.imex_isolation,
    )
    for line in driver.recover():
        log.warning("recovery: %s", line)
    service = EventingService(driver, cluster, driver_name=DRIVER_NAME, node_name=options.node_name)
    server = PluginServer(service, driver_name=DRIVER_NAME, kubelet_root=options.kubelet_root)
    publisher = SlicePublisher(
        cluster,
        driver=DRIVER_NAME,
        node_name=options.node_name,
        owner_node_uid=_node_uid(cluster, options.node_name),
    )
    threads = [
        threading.Thread(
            target=publisher.run_forever,
            args=(fabric.slices, stop, options.publish_interval),
            kwargs={"immediately": False, "wake": wake},
            name="slice-publisher",
            daemon=True,
        ),
        threading.Thread(
            target=cluster.watch_resource_slices,
            kwargs={
                "driver": DRIVER_NAME,
                "node_name": options.node_name,
                "on_change": wake.set,
                "stop": stop,
            },
            name="slice-watch",
            daemon=True,
        ),
        threading.Thread(
            target=_check,
            args=(fabric, serve_domain, stop, options.fabric_check_interval),
            name="fabric-check",
            daemon=True,
        ),
        threading.Thread(target=members.run, args=(stop,), name="member-watch", daemon=True),
    ]
    try:
        server.start(expose=False)
    except BaseException:
        service.close(timeout=THREAD_JOIN_S)
        raise
    try:
        try:
            publisher.publish(fabric.slices())
        except DraGpuError as exc:  # serve anyway: Unprepare needs no API, the loop retries
            log.error("publishing the ResourceSlice failed, retrying in the background: %s", exc)
        server.expose()
        for thread in threads:
            thread.start()
    except BaseException:
        stop.set()
        wake.set()
        server.stop(grace=0)
        service.close(timeout=THREAD_JOIN_S)
        raise
    probe.serving(
        registration_socket=server.registration_socket,
        dra_socket=server.dra_socket,
        registration=lambda: server.registration_status,
    )
    log.info(
        "serving %s on node %s (%s IMEX, isolation %s; DRA socket %s)",
        DRIVER_NAME,
        options.node_name,
        options.imex_mode,
        options.imex_isolation,
        server.dra_socket,
    )
    try:
        stop.wait()
    finally:
        probe.set_phase(Phase.STOPPING)
        wake.set()
        server.stop(grace=STOP_GRACE_S)
        service.close(timeout=THREAD_JOIN_S)
        fabric.clear_label()
        for thread in threads:
            if thread.is_alive():
                thread.join(timeout=THREAD_JOIN_S)
    log.info("stopped")
    return 0


def _check(
    fabric: NodeFabric, serve_domain: Callable[[], None], stop: threading.Event, interval: float
) -> None:
    """Re-read the fabric and the domain the node serves every `interval` seconds."""
    while not stop.wait(interval):
        fabric.evaluate()
        serve_domain()


def _node_uid(cluster: Cluster, node_name: str) -> str | None:
    """The Node's uid, to own the slice (garbage collection); None when it cannot be read."""
    try:
        uid = cluster.get_node(node_name).get("metadata", {}).get("uid")
    except DraGpuError as exc:
        log.warning(
            "cannot read Node %s (its slice is published without an owner): %s", node_name, exc
        )
        return None
    return str(uid) if uid else None


def post_warning(cluster: Cluster, node_name: str, ref: ClaimRef, text: str) -> None:
    """A Warning Event on the claim and its pods (best effort: logged when it fails)."""
    try:
        try:
            claim = cluster.get_resource_claim(ref.namespace, ref.name)
        except DraGpuError:
            claim = {"metadata": {"namespace": ref.namespace, "name": ref.name, "uid": ref.uid}}
        for event in claim_warning_events(
            claim,
            text,
            reason=NO_CLIQUE_REASON,
            action="PrepareResources",
            driver_name=DRIVER_NAME,
            node_name=node_name,
            now=time.time(),
        ):
            cluster.create_event(event)
    except DraGpuError as exc:
        log.warning("cannot record a %s Event for %s: %s", NO_CLIQUE_REASON, ref, exc)


__all__ = ["CdPluginOptions", "object_store", "post_warning", "run"]
