"""The node's base CDI spec: the edits every claim's containers get, written once per node.

The driver's user space (libraries, binaries, firmware, config files, IPC
sockets, nvcdi's hooks), the control device nodes and the environment do not
change from one claim to the next, only when the driver root does. Rendering
them into every claim's spec made each Prepare dump and write some 17 KB of
YAML (a quarter of the plugin's CPU in a Prepare loop). So, as NVIDIA's
standard spec (`nvidia-ctk cdi generate`) carries its common edits at spec
level, they live in one spec per node and driver, and a claim's spec carries
only its devices' own edits:

- kind `k8s.gpu.nvidia.com/driver`, file `k8s.gpu.nvidia.com-driver_<name>.yaml`;
- the spec-level `containerEdits` are exactly what a claim's spec carried at
  spec level before (`dra_driver.container.claim_spec.common_edits`);
- one device, `common-<digest>`, whose edits are the same environment again
  (CDI rejects a device without edits; a variable set twice keeps one value
  and its place, so repeating the device changes nothing);
- the digest covers the owner (`CdiStore`'s installation) and the content,
  so another driver version or hook setting gives another name and file,
  and two installations sharing a CDI directory never write the same file.

Prepare returns `k8s.gpu.nvidia.com/driver=common-<digest>` first in every
device's CDI ids, before the claim's own device id. A container runtime
injects a spec's spec-level edits once per container however many of its
devices are asked for, then each device's edits, in the order of the ids
(the CDI library's `Cache.InjectDevices`), so a container gets the same
edits in the same order as from the old self-contained claim spec
(`dra_driver.container.injection` computes it; the tests compare both).
A container holding several claims now gets the driver's mounts and hooks
once instead of once per claim.

A claim records the ids it was given (checkpoint and spec record), so the
plugin keeps every base spec a prepared claim names and removes the others
(`kubelet_plugin.driver`).

Pure: names and documents only; `CdiStore` writes the files.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, Final

from dra_driver.container import cdi
from dra_driver.errors import CdiError

CLASS: Final = "driver"
KIND: Final = f"{cdi.VENDOR}/{CLASS}"
FILE_PREFIX: Final = f"{cdi.VENDOR}-{CLASS}_"
DEVICE_PREFIX: Final = "common-"
_DIGEST_CHARS: Final = 16


def device_name(common: cdi.ContainerEdits, *, owner: str | None) -> str:
    """`common-<digest>`: the name of the base device for these edits and this owner."""
    payload = json.dumps([owner or "", common.to_dict()], sort_keys=True, separators=(",", ":"))
    return DEVICE_PREFIX + hashlib.sha256(payload.encode()).hexdigest()[:_DIGEST_CHARS]


def qualified_id(name: str) -> str:
    """`k8s.gpu.nvidia.com/driver=<name>`: the id Prepare hands the kubelet."""
    return f"{KIND}={name}"


def name_of_id(cdi_id: str) -> str | None:
    """The base device name in a qualified CDI id; None for any other id."""
    kind, sep, name = cdi_id.partition("=")
    return name if sep and kind == KIND and is_name(name) else None


def is_name(name: str) -> bool:
    """Whether `name` can be a base device name (and so part of a file name of ours)."""
    digest = name[len(DEVICE_PREFIX) :]
    return (
        name.startswith(DEVICE_PREFIX)
        and len(digest) == _DIGEST_CHARS
        and all(c in "0123456789abcdef" for c in digest)
    )


def file_name(name: str) -> str:
    """`k8s.gpu.nvidia.com-driver_<name>.yaml`."""
    if not is_name(name):
        raise CdiError(f"{name!r} is not a base CDI device name ({DEVICE_PREFIX}<hex digest>)")
    return f"{FILE_PREFIX}{name}{cdi.SPEC_FILE_SUFFIX}"


def name_from_file_name(file_name: str) -> str | None:
    """The base device name in one of our base spec file names; None for any other file."""
    if not (file_name.startswith(FILE_PREFIX) and file_name.endswith(cdi.SPEC_FILE_SUFFIX)):
        return None
    name = file_name[len(FILE_PREFIX) : -len(cdi.SPEC_FILE_SUFFIX)]
    return name if is_name(name) else None


def base_spec(common: cdi.ContainerEdits, *, owner: str | None) -> tuple[str, dict[str, Any]]:
    """The device name and the validated spec document that carry `common`."""
    if not common.env:
        raise CdiError("the base CDI spec needs at least one environment variable")
    name = device_name(common, owner=owner)
    spec: dict[str, Any] = {
        "cdiVersion": cdi.BASELINE_VERSION,
        "kind": KIND,
        "devices": [{"name": name, "containerEdits": {"env": list(common.env)}}],
        "containerEdits": common.to_dict(),
    }
    spec["cdiVersion"] = cdi.minimum_cdi_version(spec)
    cdi.validate_spec(spec)
    return name, spec


__all__ = [
    "CLASS",
    "DEVICE_PREFIX",
    "FILE_PREFIX",
    "KIND",
    "base_spec",
    "device_name",
    "file_name",
    "is_name",
    "name_from_file_name",
    "name_of_id",
    "qualified_id",
]
