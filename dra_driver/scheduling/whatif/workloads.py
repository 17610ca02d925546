"""Turning Deployments, ReplicaSets, StatefulSets and Jobs into the pods they run.

The scheduler only ever places pods, so a simulation must see the pods the
controllers would create, as many as would run at the same time:

* Deployment, ReplicaSet: `spec.replicas` (default 1);
* StatefulSet: `spec.replicas` (default 1), named `<name>-<ordinal>` as the
  StatefulSet controller names them;
* Job: `spec.parallelism` (default 1), capped by `spec.completions` when set;
  none while `spec.suspend` is true.

Pods of the other controllers get random suffixes in a cluster; here they are
named `<workload>-<index>` so a simulation is reproducible and its output
readable. Each pod carries the template's labels and spec and its owner.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from dra_driver.errors import ConfigError
from dra_driver.kube.objects import Obj


@dataclass(frozen=True)
class ExpandedPod:
    """A pod to place: the Pod object and the workload it came from ("" for a Pod)."""

    pod: Obj
    owner: str


def expand_workload(obj: Mapping[str, Any], source: str) -> list[ExpandedPod]:
    """The pods a workload object runs concurrently (a Pod is itself).

    Raises ConfigError naming `source` for replica counts that are not
    non-negative integers and for workloads without `spec.template`.
    """
    kind = str(obj.get("kind"))
    meta = obj.get("metadata") or {}
    name = str(meta.get("name"))
    namespace = str(meta.get("namespace"))
    if kind == "Pod":
        return [ExpandedPod(dict(obj), "")]
    spec = obj.get("spec") or {}
    template = spec.get("template")
    if not isinstance(template, dict):
        raise ConfigError(f"{source}: {kind} {namespace}/{name}: spec.template is missing")
    count = _replicas(kind, spec, f"{source}: {kind} {namespace}/{name}")
    owner = f"{kind} {namespace}/{name}"
    return [
        ExpandedPod(_pod(template, namespace, f"{name}-{index}", owner), owner)
        for index in range(count)
    ]


def _replicas(kind: str, spec: Mapping[str, Any], where: str) -> int:
    if kind == "Job":
        if spec.get("suspend"):
            return 0
        parallelism = _count(spec, "parallelism", 1, where)
        completions = spec.get("completions")
        if completions is None:
            return parallelism
        return min(parallelism, _count(spec, "completions", 1, where))
    return _count(spec, "replicas", 1, where)


def _count(spec: Mapping[str, Any], field: str, default: int, where: str) -> int:
    value = spec.get(field, default)
    if value is None:
        value = default
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigError(f"{where}: spec.{field} must be a non-negative integer, got {value!r}")
    return value


def _pod(template: Mapping[str, Any], namespace: str, name: str, owner: str) -> Obj:
    template_meta = template.get("metadata") or {}
    meta: Obj = {"name": name, "namespace": namespace}
    for field in ("labels", "annotations"):
        if template_meta.get(field):
            meta[field] = dict(template_meta[field])
    kind, _, owner_name = owner.partition(" ")
    meta["ownerReferences"] = [{"kind": kind, "name": owner_name.partition("/")[2]}]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": template.get("spec") or {},
    }
