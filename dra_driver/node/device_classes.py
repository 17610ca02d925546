"""The default DeviceClasses: NVIDIA's names and selectors, shipped as package data.

Claims name DeviceClasses, so the demo and a simulation without classes
could place nothing without them. `dra_driver/data/deviceclasses.yaml` is the
one source of truth: it is read here through `importlib.resources` (so an
installed package needs no source tree), and `deploy/base/deviceclasses.yaml`
is a copy that a test keeps byte-identical (kustomize cannot load files from
outside its directory).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from importlib import resources
from typing import Any, Final

from dra_driver.errors import ConfigError
from dra_driver.kube import yaml_io

RESOURCE: Final = "data/deviceclasses.yaml"
VFIO_RESOURCE: Final = "data/deviceclass-vfio.yaml"
_TYPE_SELECTOR: Final = re.compile(r"device\.attributes\['gpu\.nvidia\.com'\]\.type == '(\w+)'")


def device_classes_text() -> str:
    """The packaged `deviceclasses.yaml`, as shipped."""
    return _text(RESOURCE)


def vfio_device_class_text() -> str:
    """The packaged `vfio.gpu.nvidia.com` DeviceClass (deployed by the passthrough component,
    `deploy/components/passthrough`, which keeps a byte-identical copy)."""
    return _text(VFIO_RESOURCE)


def default_device_classes() -> list[dict[str, Any]]:
    """Every DeviceClass NVIDIA's chart installs: `gpu.nvidia.com`, `mig.nvidia.com` and
    `vfio.gpu.nvidia.com` (the last matches only devices of a plugin run with
    `--passthrough`)."""
    documents: list[Any] = []
    for resource in (RESOURCE, VFIO_RESOURCE):
        try:
            documents += yaml_io.load_all(_text(resource))
        except (OSError, yaml_io.YAMLError) as exc:
            raise ConfigError(
                f"dra_driver/{resource}: cannot read the default DeviceClasses: {exc}"
            ) from exc
    return [doc for doc in documents if isinstance(doc, dict) and doc.get("kind") == "DeviceClass"]


@functools.cache
def device_types_of_classes() -> Mapping[str, str]:
    """The device type ("gpu" or "mig") each default DeviceClass selects, by class name.

    Read from the classes' own `type == '...'` selectors, so a claim's request
    can be told its devices' type before it is allocated (the admission check
    needs it to refuse a MigDeviceConfig named for a `gpu.nvidia.com` request).
    """
    types: dict[str, str] = {}
    for device_class in default_device_classes():
        for selector in device_class.get("spec", {}).get("selectors", []):
            found = _TYPE_SELECTOR.search(str(selector.get("cel", {}).get("expression", "")))
            if found:
                types[device_class["metadata"]["name"]] = found.group(1)
    return types


def _text(resource: str) -> str:
    return resources.files("dra_driver").joinpath(resource).read_text(encoding="utf-8")
