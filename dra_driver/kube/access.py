"""Cluster access: the `Cluster` protocol, its two stores, and the `--cluster` flag.

`open_cluster("kube")` talks to the apiserver (in-cluster config, else a
kubeconfig); `open_cluster("local:DIR")` uses a directory of YAML objects, so
the plugin runs without a cluster. `KubeCluster` is imported only when asked
for, because loading the kubernetes client costs most of a second.
"""

from __future__ import annotations

from pathlib import Path

from dra_driver.errors import ConfigError
from dra_driver.kube.cluster import (
    API_VERSION,
    AlreadyExistsError,
    Cluster,
    ConflictError,
)
from dra_driver.kube.local_store import LocalCluster

__all__ = [
    "API_VERSION",
    "AlreadyExistsError",
    "Cluster",
    "ConflictError",
    "LocalCluster",
    "open_cluster",
]

_LOCAL_PREFIX = "local:"


def open_cluster(spec: str, *, kubeconfig: str | None = None) -> Cluster:
    """Open the cluster named by a `--cluster` value: `kube` or `local:DIR`.

    `kubeconfig` applies to `kube` only and is ignored otherwise (default:
    in-cluster config when running in a pod, else `$KUBECONFIG` / `~/.kube/config`).
    """
    if spec == "kube":
        from dra_driver.kube.api_store import KubeCluster

        return KubeCluster(kubeconfig=kubeconfig)
    if spec.startswith(_LOCAL_PREFIX):
        directory = spec[len(_LOCAL_PREFIX) :]
        if not directory:
            raise ConfigError("--cluster local:DIR: the directory is missing")
        return LocalCluster(Path(directory).expanduser())
    raise ConfigError(f"--cluster {spec!r}: expected 'kube' or 'local:DIR'")
