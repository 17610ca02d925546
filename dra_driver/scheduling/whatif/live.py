"""Reading what `dra-gpu explain --cluster` needs from a cluster: the I/O of explain.

Explaining a Pending pod needs the cluster as the scheduler sees it: every
ResourceSlice and DeviceClass, every ResourceClaim (the allocated ones hold
devices), the nodes with their labels, and the pod with its claims. The
resource.k8s.io objects come through `dra_driver.kube.access` (`kube` or
`local:DIR`); pods, nodes and claim templates, which the `Cluster` protocol
does not cover, are read here with the same kubernetes client (a local store
has no pods: there only `--claim` works, and the nodes are the ones the
slices name).

A pod's claims are the ones `status.resourceClaimStatuses` names; a claim the
ResourceClaim controller has not created yet is made from its template here,
as the controller would.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dra_driver.errors import ClusterError, ConfigError, NotFoundError
from dra_driver.kube.access import open_cluster
from dra_driver.kube.objects import Obj
from dra_driver.scheduling.allocator import Node
from dra_driver.scheduling.whatif.claims import claim_from_template
from dra_driver.scheduling.whatif.nodes import nodes_from_objects


@dataclass
class ClusterObjects:
    """A snapshot of the objects allocation depends on, plus the pod asked about."""

    slices: list[Obj] = field(default_factory=list)
    classes: list[Obj] = field(default_factory=list)
    claims: list[Obj] = field(default_factory=list)
    nodes: list[Node] = field(default_factory=list)
    pod: Obj | None = None
    pod_claims: list[tuple[str, str]] = field(default_factory=list)  # (pod claim name, claim key)
    pod_problem: str = ""


class _CoreReader:
    """Pods, nodes and claim templates through the kubernetes client (raw JSON)."""

    def __init__(self, kubeconfig: str | None) -> None:
        import kubernetes.client

        from dra_driver.kube.api_store import load_api_client

        self.client = load_api_client(kubeconfig)
        self._core = kubernetes.client.CoreV1Api(self.client)
        self._resource = kubernetes.client.ResourceV1Api(self.client)

    def pod(self, namespace: str, name: str) -> Obj:
        return self._get(
            f"Pod {namespace}/{name}",
            lambda: self._core.read_namespaced_pod(name, namespace, _preload_content=False),
        )

    def template(self, namespace: str, name: str) -> Obj:
        return self._get(
            f"ResourceClaimTemplate {namespace}/{name}",
            lambda: self._resource.read_namespaced_resource_claim_template(
                name, namespace, _preload_content=False
            ),
        )

    def nodes(self) -> list[Obj]:
        answer = self._get("Nodes", lambda: self._core.list_node(_preload_content=False))
        return [item for item in answer.get("items") or [] if isinstance(item, dict)]

    @staticmethod
    def _get(what: str, request: Callable[[], Any]) -> Obj:
        import kubernetes.client
        import urllib3

        try:
            response = request()
        except kubernetes.client.ApiException as exc:
            if exc.status == 404:
                raise NotFoundError(f"{what}: not found") from exc
            raise ClusterError(f"{what}: get failed: HTTP {exc.status} {exc.reason}") from exc
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise ClusterError(f"{what}: get failed: cannot reach the apiserver: {exc}") from exc
        try:
            obj = json.loads(response.data)
        except (ValueError, UnicodeDecodeError) as exc:
            raise ClusterError(f"{what}: the apiserver's answer is not JSON: {exc}") from exc
        if not isinstance(obj, dict):
            raise ClusterError(f"{what}: the apiserver's answer is not a JSON object")
        return obj


def read_cluster(
    spec: str, *, kubeconfig: str | None = None, pod: tuple[str, str] | None = None
) -> ClusterObjects:
    """Read the snapshot from `--cluster kube` or `--cluster local:DIR`."""
    core = _CoreReader(kubeconfig) if spec == "kube" else None
    if core is not None:
        from dra_driver.kube.api_store import KubeCluster

        cluster: Any = KubeCluster(core.client)
    else:
        directory = spec.removeprefix("local:")
        if directory != spec and directory and not Path(directory).expanduser().is_dir():
            # LocalCluster would create it: a typo would read as an empty cluster.
            raise ConfigError(f"--cluster {spec}: {directory} is not a directory")
        cluster = open_cluster(spec, kubeconfig=kubeconfig)
    objects = ClusterObjects(
        slices=cluster.list_resource_slices(),
        classes=cluster.list_device_classes(),
        claims=cluster.list_resource_claims(),
    )
    objects.nodes = nodes_from_objects(core.nodes() if core is not None else [], objects.slices)
    if pod is None:
        return objects
    if core is None:
        raise ConfigError(f"--pod needs --cluster kube: {spec} holds no pods (use --claim)")
    namespace, name = pod
    objects.pod = core.pod(namespace, name)
    _resolve_pod_claims(objects, core)
    return objects


def _resolve_pod_claims(objects: ClusterObjects, core: _CoreReader) -> None:
    pod = objects.pod or {}
    meta = pod.get("metadata") or {}
    namespace = str(meta.get("namespace"))
    generated = {
        str(status.get("name")): status.get("resourceClaimName")
        for status in (pod.get("status") or {}).get("resourceClaimStatuses") or []
    }
    known = {
        f"{(c.get('metadata') or {}).get('namespace')}/{(c.get('metadata') or {}).get('name')}"
        for c in objects.claims
    }
    for entry in (pod.get("spec") or {}).get("resourceClaims") or []:
        entry_name = str(entry.get("name"))
        if entry.get("resourceClaimName"):
            key = f"{namespace}/{entry['resourceClaimName']}"
        elif generated.get(entry_name):
            key = f"{namespace}/{generated[entry_name]}"
        elif entry.get("resourceClaimTemplateName"):
            template = core.template(namespace, str(entry["resourceClaimTemplateName"]))
            claim = claim_from_template(pod, entry_name, template, taken=dict.fromkeys(known))
            key = f"{namespace}/{claim['metadata']['name']}"
            objects.claims.append(claim)
            known.add(key)
        else:
            continue
        if key not in known:
            objects.pod_problem = f"ResourceClaim {key} not found"
        objects.pod_claims.append((entry_name, key))
