"""What the API server would refuse among a simulation's objects, found before anything runs.

`kubectl apply -f` of the same files would fail for an object with a
misspelt field, a request named `GPU_1` or `adminAccess` in a namespace
without the admin label; a simulation that placed it anyway would promise a
fit no cluster gives. `check_objects` runs the API server's strict decoding
(`dra_driver.kube.strict_schema`, for the chosen Kubernetes release) and its
validation (`dra_driver.kube.validation`) over every object read, compiles
every CEL selector, and raises `InvalidObjectsError` listing each refusal the
way kubectl prints it:

    claims.yaml:12: ResourceClaim/gpu: spec.devices.requests[0].exactly.count:
        Invalid value: -1: must be greater than zero

(on one line). The simulate and explain commands exit with status 2.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from dra_driver.errors import CelError, ConfigError
from dra_driver.kube import strict_schema, validation
from dra_driver.kube.validation import Context, FieldError
from dra_driver.scheduling.allocator import Features, Release
from dra_driver.scheduling.cel import compile_selector
from dra_driver.scheduling.cel.diagnostics import quote_expression
from dra_driver.scheduling.whatif.documents import SourcedObject
from dra_driver.scheduling.whatif.inputs import RESOURCE_GROUP, api_group, from_v1beta1

_POD_TEMPLATE_KINDS: Final = {
    ("apps", "Deployment"),
    ("apps", "ReplicaSet"),
    ("apps", "StatefulSet"),
    ("batch", "Job"),
}
_NAMESPACED_DRA: Final = {"ResourceClaim", "ResourceClaimTemplate"}


class InvalidObjectsError(ConfigError):
    """Objects the API server would refuse; `problems` holds one line per refusal."""

    def __init__(self, problems: Sequence[str]) -> None:
        self.problems = list(problems)
        count = len({line.split(": ", 2)[1] for line in self.problems})
        header = (
            f"{count} object{'s' if count != 1 else ''} the API server would refuse "
            "(as kubectl apply reports them); nothing was simulated:"
        )
        super().__init__("\n".join([header, *self.problems]))


def check_objects(
    objects: Sequence[SourcedObject],
    *,
    release: Release,
    features: Features,
    default_namespace: str = "default",
) -> None:
    """Raise InvalidObjectsError if the API server of `release` would refuse any object."""
    labels = _namespace_labels(objects)
    problems: list[str] = []
    for item in objects:
        obj = item.obj
        namespace = str((obj.get("metadata") or {}).get("namespace") or default_namespace)
        context = Context(
            check_selector=lambda text: _selector_problem(text, features),
            namespace_labels=labels.get(namespace),
            device_taints=features.device_taints,
            release=release,
        )
        errors = strict_schema.strict_errors(obj, release) or []
        errors += _rule_errors(obj, context)
        if errors:
            name = _name(obj)
            problems.extend(
                f"{item.location}: {name}: {strict_schema.describe(error)}"
                for error in _unique(errors)
            )
    if problems:
        raise InvalidObjectsError(problems)


def _rule_errors(obj: Mapping[str, Any], context: Context) -> list[FieldError]:
    kind = str(obj.get("kind") or "")
    group, version = api_group(obj)
    if group == RESOURCE_GROUP:
        if version == "v1beta1":
            obj = from_v1beta1(kind, obj)
        spec = obj.get("spec")
        if kind == "ResourceClaim":
            return validation.validate_claim_spec(spec, "spec", context)
        if kind == "ResourceClaimTemplate":
            inner = spec.get("spec") if isinstance(spec, Mapping) else None
            return validation.validate_claim_spec(inner, "spec.spec", context)
        if kind == "DeviceClass":
            return validation.validate_device_class_spec(spec, context)
        return []
    if group == "" and kind == "Pod":
        return validation.validate_pod_spec(obj.get("spec"), "spec")
    if (group, kind) in _POD_TEMPLATE_KINDS:
        template = (
            (obj.get("spec") or {}).get("template")
            if isinstance(obj.get("spec"), Mapping)
            else None
        )
        spec = template.get("spec") if isinstance(template, Mapping) else None
        return validation.validate_pod_spec(spec, "spec.template.spec")
    return []


def _selector_problem(expression: str, features: Features) -> str | None:
    try:
        compile_selector(expression, consumable_capacity=features.consumable_capacity)
    except CelError as exc:
        # The field error shows the expression already: keep what follows it.
        return str(exc).removeprefix(f"selector {quote_expression(expression)}: ")
    return None


def _namespace_labels(objects: Sequence[SourcedObject]) -> dict[str, Mapping[str, str]]:
    labels: dict[str, Mapping[str, str]] = {}
    for item in objects:
        obj = item.obj
        if obj.get("kind") == "Namespace" and api_group(obj) == ("", "v1"):
            meta = obj.get("metadata") or {}
            name = str(meta.get("name") or "")
            found = meta.get("labels")
            labels[name] = (
                {str(k): str(v) for k, v in (found or {}).items()}
                if isinstance(found, Mapping)
                else {}
            )
    return labels


def _name(obj: Mapping[str, Any]) -> str:
    """`ResourceClaim/gpu`, as kubectl names an object (the namespace is in the file)."""
    meta = obj.get("metadata") or {}
    return f"{obj.get('kind') or '?'}/{meta.get('name') or meta.get('generateName') or '?'}"


def _unique(errors: Sequence[FieldError]) -> list[FieldError]:
    """Each error once, as printed (a value may be a list or a map: not hashable)."""
    first: dict[str, FieldError] = {}
    for error in errors:
        first.setdefault(str(error), error)
    return list(first.values())
