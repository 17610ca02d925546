"""nvidia-uvm at start and on first need: loaded where it can be, reported where not.

`start_kernel_setup` makes the node's `KernelSetup` (`dra_driver.node.kernel_modules`)
and runs it once before the plugin recovers or serves anything (a claim
rebuilt at start needs the nvidia-uvm major as much as a new one). It hooks
the setup into `HostInfo.on_missing`, so the first Prepare that finds no
`nvidia-uvm` line in /proc/devices tries again (at most once a minute), and
a Prepare that still cannot have it fails with an error saying what to run.

Each attempt is reported: what was loaded and created is logged; a failure
is logged, shows in `dra_gpu_kernel_module_loaded{module="nvidia-uvm"}` (0;
read from /proc/devices at each scrape) and posts a Warning Event
`KernelModuleNotLoaded` about the Node (namespace `default`, as the
kubelet's node events), and the plugin serves on: claims
that need no new CDI spec (Unprepare, repeated Prepares) still work, and
the admin sees why the others fail.
"""

from __future__ import annotations

import datetime
import logging
import time
from collections.abc import Callable
from typing import Any, Final

from dra_driver.errors import DraGpuError
from dra_driver.hardware.machine import Hardware
from dra_driver.kube.cluster import Cluster
from dra_driver.kube.objects import Obj
from dra_driver.node.kernel_modules import UVM, WHAT_TO_RUN, KernelSetup, SetupReport
from kubelet_plugin.metrics import PluginMetrics

log = logging.getLogger(__name__)

REASON: Final = "KernelModuleNotLoaded"
ACTION: Final = "LoadKernelModules"
EVENT_NAMESPACE: Final = "default"  # where the kubelet puts the events of its Node
MAX_NOTE_BYTES: Final = 1024


def node_warning_event(
    node: Obj, note: str, *, driver_name: str, node_name: str, now: float
) -> Obj:
    """A Warning Event `KernelModuleNotLoaded` about the Node `node` (its uid where known)."""
    moment = datetime.datetime.fromtimestamp(now, tz=datetime.UTC)
    regarding: dict[str, Any] = {"apiVersion": "v1", "kind": "Node", "name": node_name}
    uid = (node.get("metadata") or {}).get("uid")
    regarding["uid"] = str(uid) if uid else node_name  # the kubelet's own node reference
    return {
        "apiVersion": "events.k8s.io/v1",
        "kind": "Event",
        "metadata": {"name": f"{node_name}.{int(now * 1e9):x}", "namespace": EVENT_NAMESPACE},
        "eventTime": moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
        "reportingController": f"{driver_name}/kubelet-plugin",
        "reportingInstance": f"{driver_name}/kubelet-plugin-{node_name}"[:128],
        "action": ACTION,
        "reason": REASON,
        "type": "Warning",
        "note": note.encode()[:MAX_NOTE_BYTES].decode(errors="ignore"),
        "regarding": regarding,
    }


def start_kernel_setup(
    hardware: Hardware,
    cluster: Cluster,
    metrics: PluginMetrics,
    *,
    driver_name: str,
    node_name: str,
    clock: Callable[[], float] = time.time,
) -> KernelSetup:
    """Make the node's `KernelSetup`, hook it into `hardware.host`, and run it once."""

    def on_report(report: SetupReport) -> None:
        if report.loaded or report.created:
            log.info("NVIDIA kernel modules and device nodes: %s", report.summary())
        if report.uvm_ready:
            for problem in report.problems:
                log.warning("NVIDIA device nodes: %s", problem)
            return
        note = (
            f"{UVM} is not loaded on node {node_name}, and the plugin could not load it: "
            f"{report.problem}. Every Prepare fails until it is; {WHAT_TO_RUN}."
        )
        log.error("%s", note)
        _post(cluster, note, driver_name=driver_name, node_name=node_name, now=clock())

    setup = KernelSetup(hardware.host, hardware.modules, hardware.dev_root, on_report=on_report)
    hardware.host.on_missing = setup.missing
    # Read at each scrape: a module the admin loads by hand counts at once.
    metrics.kernel_module_loaded.labels(UVM).set_function(lambda: float(setup.uvm_listed()))
    setup.ensure()
    return setup


def _post(cluster: Cluster, note: str, *, driver_name: str, node_name: str, now: float) -> None:
    try:
        try:
            node = cluster.get_node(node_name)
        except DraGpuError:
            node = {}
        cluster.create_event(
            node_warning_event(node, note, driver_name=driver_name, node_name=node_name, now=now)
        )
    except DraGpuError as exc:
        log.warning("could not post the %s Event of node %s: %s", REASON, node_name, exc)
