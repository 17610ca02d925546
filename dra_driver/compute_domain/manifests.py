"""The ComputeDomain CRDs and DeviceClasses, shipped as package data.

`dra_driver/data/computedomains-crd.yaml` (the user's ComputeDomain),
`computedomaincliques-crd.yaml` (NVIDIA's ComputeDomainClique),
`computedomainmembers-crd.yaml` (dra-gpu's ComputeDomainMember) and
`dra_driver/data/compute-domain-deviceclasses.yaml` are the one source of
truth, read through `importlib.resources` like the GPU driver's classes
(`dra_driver.node.device_classes`), but kept apart from them: the GPU
driver's default classes (the demo's, the simulator's) do not include these.
"""

from __future__ import annotations

from importlib import resources
from typing import Any, Final

from dra_driver.errors import ConfigError
from dra_driver.kube import yaml_io

DEVICE_CLASSES: Final = "data/compute-domain-deviceclasses.yaml"
CRD: Final = "data/computedomains-crd.yaml"
CLIQUE_CRD: Final = "data/computedomaincliques-crd.yaml"
MEMBER_CRD: Final = "data/computedomainmembers-crd.yaml"
CRDS: Final = (CRD, CLIQUE_CRD, MEMBER_CRD)
"""Every CRD the ComputeDomain driver needs, the user's first."""


def _documents(resource: str) -> list[dict[str, Any]]:
    try:
        text = resources.files("dra_driver").joinpath(resource).read_text(encoding="utf-8")
        documents = list(yaml_io.load_all(text))
    except (OSError, yaml_io.YAMLError) as exc:
        raise ConfigError(f"dra_driver/{resource}: cannot be read: {exc}") from exc
    return [doc for doc in documents if isinstance(doc, dict)]


def device_classes() -> list[dict[str, Any]]:
    """`compute-domain-daemon.nvidia.com` and `compute-domain-default-channel.nvidia.com`."""
    return [doc for doc in _documents(DEVICE_CLASSES) if doc.get("kind") == "DeviceClass"]


def _single(resource: str) -> dict[str, Any]:
    documents = [
        doc for doc in _documents(resource) if doc.get("kind") == "CustomResourceDefinition"
    ]
    if len(documents) != 1:
        raise ConfigError(
            f"dra_driver/{resource}: expected one CustomResourceDefinition, found {len(documents)}"
        )
    return documents[0]


def custom_resource_definition() -> dict[str, Any]:
    """The `computedomains.resource.nvidia.com` CustomResourceDefinition."""
    return _single(CRD)


def clique_resource_definition() -> dict[str, Any]:
    """The `computedomaincliques.resource.nvidia.com` CustomResourceDefinition (NVIDIA's)."""
    return _single(CLIQUE_CRD)


def member_resource_definition() -> dict[str, Any]:
    """The `computedomainmembers.resource.nvidia.com` CustomResourceDefinition (dra-gpu's)."""
    return _single(MEMBER_CRD)


def custom_resource_definitions() -> list[dict[str, Any]]:
    """Every CRD of the ComputeDomain driver: ComputeDomain, ComputeDomainClique,
    ComputeDomainMember (what deploy manifests and `kubectl apply` need)."""
    return [_single(resource) for resource in CRDS]
