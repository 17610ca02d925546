"""The pods' ResourceClaims, as kube-controller-manager's ResourceClaim controller makes them.

A pod names its claims in `spec.resourceClaims`: either an existing claim
(`resourceClaimName`, shared by every pod that names it) or a template
(`resourceClaimTemplateName`), from which the controller creates one claim per
pod. The controller names it with `generateName = <pod>-<podClaim>-` (both
parts shortened in proportion when longer than 57 characters), copies the
template's labels, annotations and spec, adds the annotation
`resource.kubernetes.io/pod-claim-name` and makes the pod its owner; the
apiserver appends five random characters. Here those characters and the UIDs
are derived from the pod and claim names, so every run gives the same names.

A claim or template that does not exist leaves the pod pending in a cluster;
here it is the reason the pod is not placed.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from dra_driver.kube.objects import Obj, deep_copy

POD_CLAIM_NAME_ANNOTATION: Final = "resource.kubernetes.io/pod-claim-name"
_MAX_BASE_LENGTH: Final = 57  # controller: room for a hyphen and 5 random characters in 63
_MAX_GENERATED_BASE: Final = 58  # apiserver: 63 minus the 5 random characters
_RANDOM_ALPHABET: Final = "bcdfghjklmnpqrstvwxz2456789"  # k8s.io/apimachinery util/rand
_UID_NAMESPACE: Final = uuid.UUID("6f1c9a52-9d47-4d0e-8a3b-2f5e7c1d0b94")


@dataclass(frozen=True)
class PodClaim:
    """One `spec.resourceClaims` entry of a pod, resolved to a claim key ("ns/name")."""

    name: str
    claim: str
    from_template: bool


def claim_uid(namespace: str, name: str) -> str:
    """A deterministic UID for a claim that has none."""
    return str(uuid.uuid5(_UID_NAMESPACE, f"ResourceClaim/{namespace}/{name}"))


def generate_name(pod_name: str, pod_claim_name: str) -> str:
    """The controller's `generateName` for a claim from a template."""
    base = f"{pod_name}-{pod_claim_name}-"
    if len(base) > _MAX_BASE_LENGTH:
        length = len(base)
        base = (
            pod_name[: len(pod_name) * _MAX_BASE_LENGTH // length]
            + "-"
            + pod_claim_name[: len(pod_claim_name) * _MAX_BASE_LENGTH // length]
        )
    return base


def random_suffix(seed: str, attempt: int = 0) -> str:
    """Five characters from the apiserver's name alphabet, derived from `seed`."""
    digest = hashlib.sha256(f"{seed}#{attempt}".encode()).digest()
    return "".join(_RANDOM_ALPHABET[byte % len(_RANDOM_ALPHABET)] for byte in digest[:5])


def unique_generated_name(
    generate_name_base: str, namespace: str, seed: str, taken: Mapping[str, object]
) -> tuple[str, str]:
    """(`generateName`, name): the base cut as the apiserver cuts it, plus a
    suffix derived from `seed` that no "ns/name" key in `taken` has (the
    apiserver would retry a taken generated name)."""
    base = generate_name_base[:_MAX_GENERATED_BASE]
    attempt = 0
    name = base + random_suffix(seed)
    while f"{namespace}/{name}" in taken:
        attempt += 1
        name = base + random_suffix(seed, attempt)
    return base, name


def claim_from_template(
    pod: Mapping[str, Any],
    pod_claim_name: str,
    template: Mapping[str, Any],
    *,
    taken: Mapping[str, object],
) -> Obj:
    """The ResourceClaim the controller creates for one pod claim entry.

    `taken` holds the "ns/name" keys already in use; the name is chosen so it
    is not one of them (the apiserver would retry a taken generated name).
    """
    meta = pod.get("metadata") or {}
    namespace = str(meta.get("namespace"))
    pod_name = str(meta.get("name"))
    base, name = unique_generated_name(
        generate_name(pod_name, pod_claim_name),
        namespace,
        f"{namespace}/{pod_name}/{pod_claim_name}",
        taken,
    )
    template_meta = (template.get("spec") or {}).get("metadata") or {}
    annotations = dict(template_meta.get("annotations") or {})
    annotations[POD_CLAIM_NAME_ANNOTATION] = pod_claim_name
    claim_meta: Obj = {
        "name": name,
        "namespace": namespace,
        "generateName": base,
        "uid": claim_uid(namespace, name),
        "annotations": annotations,
        "ownerReferences": [
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "name": pod_name,
                "uid": str(meta.get("uid") or ""),
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ],
    }
    if template_meta.get("labels"):
        claim_meta["labels"] = dict(template_meta["labels"])
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": claim_meta,
        "spec": deep_copy((template.get("spec") or {}).get("spec") or {}),
    }


def resolve_pod_claims(
    pod: Mapping[str, Any],
    claims: dict[str, Obj],
    templates: Mapping[tuple[str, str], Mapping[str, Any]],
) -> tuple[list[PodClaim], str]:
    """The claims of a pod, creating claims from templates into `claims`.

    `claims` maps "ns/name" to every known claim and receives the new ones.
    Returns the pod's claims and "" or, when a claim or template is missing
    or an entry is malformed, what is wrong (the pod cannot be scheduled).
    Claims created for earlier entries of a failing pod stay (as in a cluster).
    """
    meta = pod.get("metadata") or {}
    namespace = str(meta.get("namespace"))
    resolved: list[PodClaim] = []
    for index, entry in enumerate((pod.get("spec") or {}).get("resourceClaims") or []):
        entry_name = str((entry or {}).get("name") or "")
        where = f"spec.resourceClaims[{index}]"
        claim_name = entry.get("resourceClaimName") if isinstance(entry, dict) else None
        template_name = entry.get("resourceClaimTemplateName") if isinstance(entry, dict) else None
        if not entry_name or bool(claim_name) == bool(template_name):
            return resolved, (
                f"{where}: needs a name and exactly one of resourceClaimName and "
                "resourceClaimTemplateName"
            )
        if claim_name:
            key = f"{namespace}/{claim_name}"
            if key not in claims:
                return resolved, f"ResourceClaim {key} not found ({where})"
            resolved.append(PodClaim(entry_name, key, from_template=False))
            continue
        template = templates.get((namespace, str(template_name)))
        if template is None:
            return (
                resolved,
                f"ResourceClaimTemplate {namespace}/{template_name} not found ({where})",
            )
        claim = claim_from_template(pod, entry_name, template, taken=claims)
        key = f"{namespace}/{claim['metadata']['name']}"
        claims[key] = claim
        resolved.append(PodClaim(entry_name, key, from_template=True))
    return resolved, ""
