"""Turning Deployments, ReplicaSets, StatefulSets, Jobs and MPIJobs into the pods they run.

The scheduler only ever places pods, so a simulation must see the pods the
controllers would create, as many as would run at the same time:

* Deployment, ReplicaSet: `spec.replicas` (default 1);
* StatefulSet: `spec.replicas` (default 1), named `<name>-<ordinal>` as the
  StatefulSet controller names them;
* Job: `spec.parallelism` (default 1), capped by `spec.completions` when set;
  none while `spec.suspend` is true.

* MPIJob (`kubeflow.org/v2beta1`, Kubeflow's MPI operator, which NVIDIA's
  ComputeDomain demos use): `mpiReplicaSpecs.Worker.replicas` worker pods
  (default 0), named `<job>-worker-<i>` as the operator names them, then the
  launcher (`Launcher.replicas`, default 1), named `<job>-launcher`; none while
  `runPolicy.suspend` is true. Workers come first: they are what the launcher
  waits for, and they hold the GPUs and IMEX channels.

Pods of the other controllers get random suffixes in a cluster; here they are
named `<workload>-<index>` so a simulation is reproducible and its output
readable. Each pod carries the template's labels and spec and its owner.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from dra_driver.errors import ConfigError
from dra_driver.kube.objects import Obj

MPI_JOB: Final = "MPIJob"


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
    if kind == MPI_JOB:
        return _mpi_job_pods(spec, namespace, name, f"{source}: {kind} {namespace}/{name}")
    template = spec.get("template")
    if not isinstance(template, dict):
        raise ConfigError(f"{source}: {kind} {namespace}/{name}: spec.template is missing")
    count = _replicas(kind, spec, f"{source}: {kind} {namespace}/{name}")
    owner = f"{kind} {namespace}/{name}"
    return [
        ExpandedPod(_pod(template, namespace, f"{name}-{index}", owner), owner)
        for index in range(count)
    ]


def _mpi_job_pods(
    spec: Mapping[str, Any], namespace: str, name: str, where: str
) -> list[ExpandedPod]:
    """The worker pods, then the launcher, of an MPIJob (see the module docstring)."""
    if (spec.get("runPolicy") or {}).get("suspend"):
        return []
    replica_specs = spec.get("mpiReplicaSpecs")
    if not isinstance(replica_specs, Mapping):
        raise ConfigError(f"{where}: spec.mpiReplicaSpecs is missing")
    owner = f"{MPI_JOB} {namespace}/{name}"
    pods: list[ExpandedPod] = []
    for role, default in (("Worker", 0), ("Launcher", 1)):
        replica_spec = replica_specs.get(role)
        if replica_spec is None:
            continue
        at = f"{where}: spec.mpiReplicaSpecs.{role}"
        if not isinstance(replica_spec, Mapping):
            raise ConfigError(f"{at}: must be an object")
        template = replica_spec.get("template")
        if not isinstance(template, dict):
            raise ConfigError(f"{at}.template is missing")
        count = replica_spec.get("replicas", default)
        if count is None:
            count = default
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            raise ConfigError(f"{at}.replicas must be a non-negative integer, got {count!r}")
        for index in range(count):
            pod_name = f"{name}-worker-{index}" if role == "Worker" else f"{name}-launcher"
            if role == "Launcher" and count > 1:
                pod_name = f"{name}-launcher-{index}"
            pods.append(ExpandedPod(_pod(template, namespace, pod_name, owner), owner))
    return pods


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
