"""The DeviceClasses a simulation uses when the user gives none: the ones we deploy.

Claims name DeviceClasses, so a simulation without classes could place
nothing. Users who simulate our driver get the classes `deploy/deviceclasses.yaml`
installs (NVIDIA's names and selectors). In a source checkout that file is
read; an installed package has no `deploy/` directory, so a copy is kept
here, and a test makes sure the two never drift apart.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Final

from dra_driver import yaml_io
from dra_driver.errors import ConfigError

DEPLOY_FILE: Final = Path(__file__).resolve().parents[2] / "deploy" / "deviceclasses.yaml"

_SELECTOR: Final = (
    "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == '{type}'"
)


def _device_class(name: str, device_type: str) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": name},
        "spec": {"selectors": [{"cel": {"expression": _SELECTOR.format(type=device_type)}}]},
    }


def builtin_device_classes() -> list[dict[str, Any]]:
    """The packaged copy of `deploy/deviceclasses.yaml`."""
    return [_device_class("gpu.nvidia.com", "gpu"), _device_class("mig.nvidia.com", "mig")]


def default_device_classes(deploy_file: Path = DEPLOY_FILE) -> list[dict[str, Any]]:
    """The deployed DeviceClasses: `deploy_file` when it exists, else the packaged copy."""
    if not deploy_file.is_file():
        return builtin_device_classes()
    try:
        documents = list(yaml_io.load_all(deploy_file.read_text(encoding="utf-8")))
    except (OSError, yaml_io.YAMLError) as exc:
        raise ConfigError(f"{deploy_file}: cannot read the default DeviceClasses: {exc}") from exc
    return [doc for doc in documents if isinstance(doc, dict) and doc.get("kind") == "DeviceClass"]
