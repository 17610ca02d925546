"""`dra-gpu demo compute-domain`: a 2-node ComputeDomain on simulated GB200 nodes, end to end.

The single-node demo (`demo`) shows one plugin; a ComputeDomain needs a
cluster. This one starts N simulated `gb200-node`s on one local cluster
directory (`compute_domain_cluster`): per node the GPU driver's kubelet
plugin, the ComputeDomain kubelet plugin and the IMEX host, each a process
of its own, and the ComputeDomain controller beside them. It then applies
NVIDIA's manifest shapes (`demo/specs/imex/nvbandwidth-test-job-1.yaml`: a
ComputeDomain with `numNodes: 2` and two workers, each asking for the
domain's channel through the ResourceClaimTemplate the controller creates,
and here for the four GPUs of a node through a claim of the GPU driver), and
shows what a cluster operator would look at: where the workers landed, what
each container got (device nodes: the GPUs and the IMEX channel with the
node's `/proc/devices` major), the domain's conditions and per-node rows,
and which IMEX peers each daemon is connected to. Then it deletes the
workers and the domain and shows the finalizer let go.

Exit status 0 only when the domain became Ready and every worker got its
channel. Everything it started is stopped and its directory removed (unless
`--keep`).
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TextIO

from dra_driver import DEFAULT_DRIVER_NAME
from dra_driver.composition.child_process import Spawn, popen
from dra_driver.composition.compute_domain_cluster import (
    DRIVER_NAMESPACE,
    ClusterTiming,
    ComputeDomainCluster,
)
from dra_driver.composition.compute_domain_kubelet import RunningPod
from dra_driver.compute_domain import membership
from dra_driver.compute_domain.names import DOMAIN_LABEL, DRIVER_NAME
from dra_driver.errors import ConfigError, DraGpuError, NotFoundError
from dra_driver.kube.object_store import (
    COMPUTE_DOMAIN,
    COMPUTE_DOMAIN_MEMBER,
    RESOURCE_CLAIM_TEMPLATE,
)
from dra_driver.node.device_classes import default_device_classes

__all__ = ["CHANNEL_PATH", "demo_manifests", "run_compute_domain_demo"]

NAMESPACE = "default"
DOMAIN = "nvbandwidth-test-compute-domain"
CHANNEL_TEMPLATE = "nvbandwidth-test-compute-domain-channel"
GPU_TEMPLATE = "four-gpus"
CHANNEL_PATH = "/dev/nvidia-caps-imex-channels/channel0"
READY_TIMEOUT_S = 90.0
TIMING = ClusterTiming(
    fabric_check_interval=1.0, prepare_wait=20.0, imex_poll=0.2, imex_ready_poll=1.0
)


def demo_manifests() -> tuple[dict[str, Any], dict[str, Any], list[dict[str, Any]]]:
    """The ComputeDomain, the GPU claim template and the two workers (NVIDIA's shapes)."""
    domain = {
        "apiVersion": "resource.nvidia.com/v1beta1",
        "kind": "ComputeDomain",
        "metadata": {"namespace": NAMESPACE, "name": DOMAIN},
        "spec": {"numNodes": 2, "channel": {"resourceClaimTemplate": {"name": CHANNEL_TEMPLATE}}},
    }
    gpus = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"namespace": NAMESPACE, "name": GPU_TEMPLATE},
        "spec": {
            "spec": {
                "devices": {
                    "requests": [
                        {
                            "name": "gpus",
                            "exactly": {
                                "deviceClassName": "gpu.nvidia.com",
                                "allocationMode": "ExactCount",
                                "count": 4,
                            },
                        }
                    ]
                }
            }
        },
    }
    workers = [
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"namespace": NAMESPACE, "name": f"nvbandwidth-test-worker-{i}"},
            "spec": {
                "containers": [
                    {
                        "name": "mpi-worker",
                        "image": "ghcr.io/nvidia/k8s-samples:nvbandwidth-v0.7-8d103163",
                        "command": ["/usr/sbin/sshd"],
                        "args": ["-De"],
                        "resources": {
                            "claims": [{"name": "compute-domain-channel"}, {"name": "gpus"}]
                        },
                    }
                ],
                "resourceClaims": [
                    {
                        "name": "compute-domain-channel",
                        "resourceClaimTemplateName": CHANNEL_TEMPLATE,
                    },
                    {"name": "gpus", "resourceClaimTemplateName": GPU_TEMPLATE},
                ],
            },
        }
        for i in range(2)
    ]
    return domain, gpus, workers


class _Out:
    def __init__(self, out: TextIO, quiet: bool) -> None:
        self._out = out
        self._quiet = quiet
        self._step = 0

    def step(self, title: str) -> None:
        self._step += 1
        self.line(f"\n== {self._step}. {title}", indent=0)

    def line(self, text: str = "", indent: int = 3) -> None:
        if self._quiet:
            return
        for part in text.splitlines() or [""]:
            self._out.write(" " * indent + part + "\n")
        self._out.flush()


def run_compute_domain_demo(
    *,
    nodes: int = 4,
    output: str = "text",
    keep: bool = False,
    out: TextIO = sys.stdout,
    spawn: Spawn = popen,
) -> int:
    """Run the demo (module docstring); the exit status."""
    if nodes < 2:
        raise ConfigError(
            f"--nodes {nodes}: the demo's ComputeDomain spans 2 nodes; give 2 or more"
        )
    started = time.monotonic()
    p = _Out(out, quiet=output == "json")
    report: dict[str, Any] = {"nodes": [], "pods": [], "ready": False, "channels": False}
    with ComputeDomainCluster(
        nodes=nodes,
        spawn=spawn,
        timing=TIMING,
        gpu_plugins=True,
        keep=keep,
        prefix="dra-gpu-cd-demo-",
    ) as cluster:
        for device_class in default_device_classes():
            cluster.store.put_device_class(device_class)
        p.step(f"Start {nodes} simulated gb200-node nodes and the ComputeDomain controller")
        cluster.start()
        for node in cluster.nodes.values():
            p.line(
                f"{node.name} ({node.ip}): GPU plugin pid {node.gpu_plugin.pid}, CD plugin pid "
                f"{node.plugin.pid}, IMEX host pid {node.imex_host.pid}"
            )
            report["nodes"].append({"name": node.name, "ip": node.ip})
        p.line(f"controller pid {cluster.controllers[0].pid}; cluster store {cluster.cluster_root}")

        p.step("What each node publishes (ResourceSlices)")
        cluster.wait_for(lambda: _published_everywhere(cluster), "slices of every node", 60.0)
        for node in cluster.nodes.values():
            p.line(f"{node.name}: {_published(cluster, node.name)}")

        domain_doc, gpus_doc, workers = demo_manifests()
        p.step(f"Apply ComputeDomain {NAMESPACE}/{DOMAIN} (numNodes: 2) and its two workers")
        domain = cluster.apply(domain_doc)
        uid = domain["metadata"]["uid"]
        cluster.store.create_object(RESOURCE_CLAIM_TEMPLATE, gpus_doc)
        template = cluster.wait_for(
            lambda: _get(cluster, RESOURCE_CLAIM_TEMPLATE, NAMESPACE, CHANNEL_TEMPLATE),
            f"ResourceClaimTemplate {CHANNEL_TEMPLATE}",
            30.0,
        )
        config = template["spec"]["spec"]["devices"]["config"][0]["opaque"]["parameters"]
        p.line(
            f"the controller created ResourceClaimTemplate {NAMESPACE}/{CHANNEL_TEMPLATE}: "
            f"{config['kind']} domainID {config['domainID']}, {config['allocationMode']}"
        )
        # Both workers start together, as their kubelets would start them.
        with ThreadPoolExecutor(max_workers=len(workers)) as pool:
            running: list[RunningPod] = list(
                pool.map(lambda w: cluster.run_pod(w, timeout=READY_TIMEOUT_S), workers)
            )
        for pod in running:
            p.line(
                f"{pod.key} -> {pod.node}: Prepare answered after {pod.prepare_attempts} "
                f"call(s), {pod.prepare_seconds:.1f} s"
                + (f" (waited: {pod.errors[0]})" if pod.errors else "")
            )

        p.step("What each worker's container got (CDI device nodes)")
        channels_ok = True
        for pod in running:
            nodes_got = pod.device_nodes
            has_channel = any(n["path"] == CHANNEL_PATH for n in nodes_got)
            channels_ok &= has_channel
            p.line(f"{pod.key} on {pod.node}:")
            for dev in nodes_got:
                if dev["path"] == CHANNEL_PATH:
                    p.line(
                        f"{dev['path']} (IMEX channel) {dev.get('type', '')} "
                        f"{dev.get('major')}:{dev.get('minor')} mode {dev.get('fileMode', 0):o}",
                        indent=5,
                    )
            others = [dev["path"] for dev in nodes_got if dev["path"] != CHANNEL_PATH]
            p.line(f"and {len(others)} GPU device nodes: {', '.join(others)}", indent=5)
            report["pods"].append(
                {
                    "pod": pod.key,
                    "node": pod.node,
                    "cdiDevices": pod.cdi_device_ids,
                    "deviceNodes": nodes_got,
                    "channel": has_channel,
                }
            )
        report["channels"] = channels_ok

        p.step("The ComputeDomain's status")
        try:
            cluster.wait_for(
                lambda: _condition(cluster, "Ready") == "True", "Ready domain", READY_TIMEOUT_S
            )
            report["ready"] = True
        except DraGpuError as exc:
            p.line(f"not Ready: {exc}")
        domain = cluster.compute_domain(NAMESPACE, DOMAIN)
        status = domain.get("status") or {}
        report["domain"] = {"uid": uid, "status": status}
        p.line(f"status.status: {status.get('status')}")
        for condition in status.get("conditions") or []:
            p.line(
                f"{condition.get('type')}={condition.get('status')} "
                f"({condition.get('reason', '')})"
                + (f": {condition['message']}" if condition.get("message") else "")
            )
        for row in status.get("nodes") or []:
            p.line(
                f"node {row.get('name')}: {row.get('ipAddress')} clique {row.get('cliqueID')} "
                f"index {row.get('index')} {row.get('status')}"
            )

        p.step("IMEX peers connected (members' status, and nvidia-imex-ctl -N -j on each node)")
        peers: dict[str, Any] = {}
        for member in cluster.store.list_objects(
            COMPUTE_DOMAIN_MEMBER, DRIVER_NAMESPACE, labels={DOMAIN_LABEL: uid}
        ):
            spec = membership.member_spec(member)
            state = membership.member_status(member)
            node = cluster.nodes[spec.node_name]
            try:
                ctl = node.imex_peers(uid)
            except DraGpuError as exc:
                ctl = {"error": str(exc)}
            peers[spec.node_name] = {
                "state": state.state,
                "imexNodeID": state.imex_node_id,
                "peers": dict(state.peers),
                "imexCtl": ctl,
            }
            p.line(
                f"{spec.node_name}: IMEX {state.state}, node ID {state.imex_node_id}, peers "
                + (", ".join(f"{n} {s}" for n, s in sorted(state.peers.items())) or "none")
            )
            p.line(
                f"nvidia-imex-ctl -N -j (names with an address): {json.dumps(ctl, sort_keys=True)}",
                indent=5,
            )
        report["imexPeers"] = peers

        p.step("Delete the workers, then the ComputeDomain")
        for pod in running:
            outcome = cluster.delete_pod(pod.namespace, pod.name)
            p.line(
                f"{pod.key}: unprepare "
                + ", ".join(f"{claim} {error or 'ok'}" for claim, error in outcome.items())
            )
        cluster.delete_compute_domain(NAMESPACE, DOMAIN)
        try:
            cluster.wait_for(
                lambda: _get(cluster, COMPUTE_DOMAIN, NAMESPACE, DOMAIN) is None,
                "deleted ComputeDomain",
                30.0,
            )
            p.line("the controller released its finalizer: the ComputeDomain is gone")
            report["deleted"] = True
        except DraGpuError as exc:
            p.line(f"the ComputeDomain is still there: {exc}")
            report["deleted"] = False
        report["seconds"] = round(time.monotonic() - started, 1)
        ok = report["ready"] and report["channels"]
        if output == "json":
            out.write(json.dumps(report, indent=2, sort_keys=True) + "\n")
        else:
            p.line("")
            p.line(
                f"compute-domain demo {'finished' if ok else 'FAILED'} in "
                f"{report['seconds']:.1f} s: domain Ready {report['ready']}, every worker has "
                f"its channel {report['channels']}",
                indent=0,
            )
            if keep:
                p.line(f"kept {cluster.work}", indent=0)
        return 0 if ok else 1


def _get(cluster: ComputeDomainCluster, kind: Any, namespace: str, name: str) -> Any:
    try:
        return cluster.store.get_object(kind, namespace, name)
    except NotFoundError:
        return None


def _condition(cluster: ComputeDomainCluster, kind: str) -> str | None:
    domain = _get(cluster, COMPUTE_DOMAIN, NAMESPACE, DOMAIN)
    for condition in ((domain or {}).get("status") or {}).get("conditions") or []:
        if condition.get("type") == kind:
            return str(condition.get("status"))
    return None


def _devices(cluster: ComputeDomainCluster, driver: str, node: str) -> list[Mapping[str, Any]]:
    return [
        d
        for s in cluster.store.list_resource_slices(driver=driver, node_name=node)
        for d in s["spec"].get("devices") or []
    ]


def _published_everywhere(cluster: ComputeDomainCluster) -> bool:
    return all(
        _devices(cluster, DRIVER_NAME, n) and _devices(cluster, DEFAULT_DRIVER_NAME, n)
        for n in cluster.nodes
    )


def _published(cluster: ComputeDomainCluster, node: str) -> str:
    cd = _devices(cluster, DRIVER_NAME, node)
    gpus = [d for d in _devices(cluster, DEFAULT_DRIVER_NAME, node) if _type(d) == "gpu"]
    clique = next(
        (_string(d, "cliqueID") for d in cd if _string(d, "cliqueID")), "no clique attribute"
    )
    return (
        f"{DRIVER_NAME}: {', '.join(d['name'] for d in cd)} (clique {clique}); "
        f"{DEFAULT_DRIVER_NAME}: {len(gpus)} GPUs"
    )


def _type(device: Mapping[str, Any]) -> str:
    return _string(device, "type")


def _string(device: Mapping[str, Any], attribute: str) -> str:
    value = (device.get("attributes") or {}).get(attribute) or {}
    return str(value.get("string", ""))
