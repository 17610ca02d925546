"""Device metadata files for containers (KEP-5304, beta in Kubernetes 1.37), as pure functions.

A container that uses a claim can read what it got (the GPU or live MIG
UUID, PCI bus id, profile, MPS pipe directory) from a JSON file the driver
writes per claim and request and mounts read-only through CDI. The layout
is upstream's (`k8s.io/dynamic-resource-allocation`, `api/metadata` and
`kubeletplugin/metadata.go`; upstream-facts §3), so consumers written for
the Go helper read ours:

- the file holds a `metadata.resource.k8s.io/v1alpha1` `DeviceMetadata`
  (claim name, namespace, uid, `generation`; `podClaimName` when the claim
  has the `resource.kubernetes.io/pod-claim-name` annotation; one request,
  named as in the allocation result, `request/subrequest` included; its
  devices with their ResourceSlice attributes) as a JSON stream: one
  pretty-printed object per supported version, newest first, each followed
  by a newline;
- host file `<plugin data dir>/dra-device-metadata/<ns>_<claim>/<request>/metadata.json`;
- container path `/var/run/kubernetes.io/dra-device-attributes/` +
  `resourceclaims/<claim>/<request>/gpu.nvidia.com-metadata.json`, or
  `resourceclaimtemplates/<pod claim name>/...` for a claim made from a
  template (`<request>` is the base request name);
- CDI spec `<cdi dir>/gpu.nvidia.com_metadata_<claim uid>_<request>.json`,
  cdiVersion 0.5.0, kind `gpu.nvidia.com/metadata`, one device
  `<claim uid>_<request>` bind-mounting the file read-only; its id goes to the
  first device of the request in the Prepare answer.

Upstream writes `generation` 1 at every Prepare; dra-gpu raises it whenever
the content changes and keeps it when a repeated Prepare finds the same.
No Python library exists for this format, hence this module.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, Final

API_VERSION: Final = "metadata.resource.k8s.io/v1alpha1"
KIND: Final = "DeviceMetadata"
CONTAINER_DIR: Final = PurePosixPath("/var/run/kubernetes.io/dra-device-attributes")
RESOURCE_CLAIMS_SUBDIR: Final = "resourceclaims"
RESOURCE_CLAIM_TEMPLATES_SUBDIR: Final = "resourceclaimtemplates"
METADATA_FILE_SUFFIX: Final = "-metadata.json"
HOST_SUBDIR: Final = "dra-device-metadata"
HOST_FILE: Final = "metadata.json"
POD_CLAIM_NAME_ANNOTATION: Final = "resource.kubernetes.io/pod-claim-name"
CDI_VERSION: Final = "0.5.0"


def base_request(request: str) -> str:
    """`gpu/large` -> `gpu` (the file path uses the base request name)."""
    return request.split("/", 1)[0]


@dataclass(frozen=True)
class MetadataDevice:
    """One allocated device as the metadata file lists it."""

    driver: str
    pool: str
    name: str
    attributes: Mapping[str, Mapping[str, Any]]  # QualifiedName -> DeviceAttribute JSON

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"driver": self.driver, "pool": self.pool, "name": self.name}
        if self.attributes:
            out["attributes"] = {k: dict(self.attributes[k]) for k in sorted(self.attributes)}
        return out


@dataclass(frozen=True)
class ClaimIdentity:
    """The claim a metadata file describes."""

    namespace: str
    name: str
    uid: str
    pod_claim_name: str | None  # the annotation's value, when the claim has it

    @classmethod
    def of(cls, claim: Mapping[str, Any]) -> ClaimIdentity:
        meta = claim.get("metadata") or {}
        annotations = meta.get("annotations") or {}
        pod_claim = annotations.get(POD_CLAIM_NAME_ANNOTATION)
        return cls(
            namespace=str(meta.get("namespace") or ""),
            name=str(meta.get("name") or ""),
            uid=str(meta.get("uid") or ""),
            pod_claim_name=None if pod_claim is None else str(pod_claim),
        )


def device_metadata(
    claim: ClaimIdentity, request: str, devices: Sequence[MetadataDevice], generation: int
) -> dict[str, Any]:
    """The `DeviceMetadata` object of one request of a claim."""
    obj: dict[str, Any] = {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {
            "name": claim.name,
            "namespace": claim.namespace,
            "uid": claim.uid,
            "generation": generation,
        },
    }
    if claim.pod_claim_name is not None:
        obj["podClaimName"] = claim.pod_claim_name
    obj["requests"] = [{"name": request, "devices": [d.to_dict() for d in devices]}]
    return obj


def encode_stream(versions: Sequence[Mapping[str, Any]]) -> bytes:
    """The file content: each version's object, pretty-printed, newline-terminated."""
    return b"".join(json.dumps(obj, indent=2).encode() + b"\n" for obj in versions)


def decode_stream(data: bytes) -> list[dict[str, Any]]:
    """The objects of a metadata stream, in order; ValueError if it is not one."""
    text = data.decode()
    decoder = json.JSONDecoder()
    objects: list[dict[str, Any]] = []
    index = 0
    while True:
        while index < len(text) and text[index].isspace():
            index += 1
        if index == len(text):
            return objects
        obj, index = decoder.raw_decode(text, index)
        if not isinstance(obj, dict):
            raise ValueError("a metadata stream holds JSON objects only")
        objects.append(obj)


def next_generation(previous: bytes | None, wanted: Mapping[str, Any]) -> int | None:
    """The generation to write `wanted` with, or None when the file already says it.

    `wanted` carries any generation; a file that holds the same object apart
    from the generation is left alone, a different one gets the next.
    """
    if previous is None:
        return 1
    try:
        objects = decode_stream(previous)
    except (ValueError, UnicodeDecodeError):
        return 1
    current = next((o for o in objects if o.get("apiVersion") == API_VERSION), None)
    if current is None:
        return 1
    meta = current.get("metadata") or {}
    generation = meta.get("generation")
    if not isinstance(generation, int) or isinstance(generation, bool):
        return 1
    if _without_generation(current) == _without_generation(wanted):
        return None
    return generation + 1


def _without_generation(obj: Mapping[str, Any]) -> dict[str, Any]:
    copied = json.loads(json.dumps(obj))
    (copied.get("metadata") or {}).pop("generation", None)
    return dict(copied)


# -- paths and the CDI spec -----------------------------------------------------------


def host_claim_dir(plugin_data_dir: Path, namespace: str, name: str) -> Path:
    return plugin_data_dir / HOST_SUBDIR / f"{namespace}_{name}"


def host_file(plugin_data_dir: Path, namespace: str, name: str, request: str) -> Path:
    return host_claim_dir(plugin_data_dir, namespace, name) / base_request(request) / HOST_FILE


def container_file(driver: str, claim: ClaimIdentity, request: str) -> str:
    """Where the container sees the file of `request` (template claims by pod claim name)."""
    file_name = driver + METADATA_FILE_SUFFIX
    if claim.pod_claim_name:
        parent = CONTAINER_DIR / RESOURCE_CLAIM_TEMPLATES_SUBDIR / claim.pod_claim_name
    else:
        parent = CONTAINER_DIR / RESOURCE_CLAIMS_SUBDIR / claim.name
    return str(parent / base_request(request) / file_name)


def cdi_kind(driver: str) -> str:
    return f"{driver}/metadata"


def cdi_device_name(claim_uid: str, request: str) -> str:
    return f"{claim_uid}_{base_request(request)}"


def cdi_device_id(driver: str, claim_uid: str, request: str) -> str:
    """`gpu.nvidia.com/metadata=<claim uid>_<request>`: what the kubelet passes to the runtime."""
    return f"{cdi_kind(driver)}={cdi_device_name(claim_uid, request)}"


def cdi_spec_file_name(driver: str, claim_uid: str, request: str) -> str:
    return f"{driver}_metadata_{claim_uid}_{base_request(request)}.json"


def cdi_spec_prefix(driver: str, claim_uid: str | None = None) -> str:
    """The start of every metadata spec file name (of one claim, when `claim_uid` is given)."""
    return f"{driver}_metadata_" + (f"{claim_uid}_" if claim_uid is not None else "")


def cdi_spec(driver: str, claim: ClaimIdentity, request: str, host_path: Path) -> dict[str, Any]:
    """The CDI spec that bind-mounts one request's file read-only."""
    return {
        "cdiVersion": CDI_VERSION,
        "kind": cdi_kind(driver),
        "devices": [
            {
                "name": cdi_device_name(claim.uid, request),
                "containerEdits": {
                    "mounts": [
                        {
                            "hostPath": str(host_path),
                            "containerPath": container_file(driver, claim, request),
                            "options": ["ro", "bind"],
                        }
                    ]
                },
            }
        ],
    }


__all__ = [
    "API_VERSION",
    "CDI_VERSION",
    "KIND",
    "POD_CLAIM_NAME_ANNOTATION",
    "ClaimIdentity",
    "MetadataDevice",
    "base_request",
    "cdi_device_id",
    "cdi_spec",
    "cdi_spec_file_name",
    "cdi_spec_prefix",
    "container_file",
    "decode_stream",
    "device_metadata",
    "encode_stream",
    "host_claim_dir",
    "host_file",
    "next_generation",
]
