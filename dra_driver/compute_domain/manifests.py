"""The ComputeDomain CRD and DeviceClasses, shipped as package data.

`dra_driver/data/computedomains-crd.yaml` and
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


def custom_resource_definition() -> dict[str, Any]:
    """The `computedomains.resource.nvidia.com` CustomResourceDefinition."""
    (crd,) = _documents(CRD)
    return crd
