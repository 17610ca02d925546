"""The `resource.nvidia.com/v1beta1` ComputeDomain object, decoded strictly.

The same fields, defaults and rules as NVIDIA's CRD (computedomain.md §1.1;
`api/nvidia.com/resource/v1beta1/computedomain.go`): `spec.channel` and its
`resourceClaimTemplate.name` are required, `allocationMode` is Single or All
(default Single), `numNodes` is accepted, deprecated, at least 0 (default 0).
The status has NVIDIA's global `status` (Ready/NotReady) and per-node rows,
plus `conditions` (standard `metav1.Condition`s), the one addition issue #24
asks for. Spec immutability is the API server's rule (the CRD's
`self == oldSelf`); `spec_changes` says which fields an update would change.

Decoding is strict where the API server with strict field validation is: an
unknown field, a wrong type (no "2" for 2, no true for 1) and a malformed name
are errors naming the object and the field, as `ConfigError`. pydantic does
the field work, as for the opaque configs (`dra_driver.claims.device_config`).
The exception is `status`: no user writes it, controllers do, and one of
another release may have written a field this one does not know (a downgrade
leaves the newer CRD in place; Helm never changes CRDs). Its unknown fields are
ignored (and dropped when the controller next writes the status), so a domain
never turns invalid, nor refuses claims, over a field of its own status; wrong
types in the fields it knows are still errors.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    ValidationError,
    field_validator,
)

from dra_driver.compute_domain.names import API_VERSION, KIND
from dra_driver.errors import ConfigError
from dra_driver.kube.names import is_dns_label, is_dns_subdomain

# metav1.Condition's `type` (a qualified name) and `reason` patterns, as in every CRD.
_CONDITION_TYPE = (
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$"
)
_CONDITION_REASON = r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$"

AllocationMode = Literal["Single", "All"]
Readiness = Literal["Ready", "NotReady"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True, strict=True)


class _StatusPart(BaseModel):
    """Written by controllers of any release: unknown fields ignored (module docstring)."""

    model_config = ConfigDict(extra="ignore", frozen=True, populate_by_name=True, strict=True)


def _subdomain(value: str) -> str:
    if not is_dns_subdomain(value):
        raise ValueError(
            f"{value!r} is not a DNS subdomain (lower-case alphanumerics, '-' and '.', "
            "starting and ending alphanumeric, at most 253 characters)"
        )
    return value


class ObjectMeta(_Strict):
    """`metav1.ObjectMeta`: every field it has, so a misspelt one is an error."""

    name: str | None = None
    generate_name: str | None = Field(default=None, alias="generateName")
    namespace: str | None = None
    self_link: str | None = Field(default=None, alias="selfLink")
    uid: str | None = None
    resource_version: str | None = Field(default=None, alias="resourceVersion")
    generation: int | None = None
    creation_timestamp: Any = Field(default=None, alias="creationTimestamp")
    deletion_timestamp: Any = Field(default=None, alias="deletionTimestamp")
    deletion_grace_period_seconds: int | None = Field(
        default=None, alias="deletionGracePeriodSeconds"
    )
    labels: dict[str, str] | None = None
    annotations: dict[str, str] | None = None
    owner_references: list[dict[str, Any]] | None = Field(default=None, alias="ownerReferences")
    finalizers: list[str] | None = None
    managed_fields: list[dict[str, Any]] | None = Field(default=None, alias="managedFields")

    @field_validator("name")
    @classmethod
    def _name(cls, value: str | None) -> str | None:
        return None if value is None else _subdomain(value)

    @field_validator("namespace")
    @classmethod
    def _namespace(cls, value: str | None) -> str | None:
        if value is not None and not is_dns_label(value):
            raise ValueError(f"{value!r} is not a DNS label (a namespace name)")
        return value


class ResourceClaimTemplateRef(_Strict):
    name: str

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        return _subdomain(value)


class ChannelSpec(_Strict):
    resource_claim_template: ResourceClaimTemplateRef = Field(alias="resourceClaimTemplate")
    allocation_mode: AllocationMode = Field(default="Single", alias="allocationMode")


class ComputeDomainSpec(_Strict):
    # Deprecated (NVIDIA: "will be removed in the next API version"); accepted, never required.
    num_nodes: Annotated[int, Field(ge=0)] = Field(default=0, alias="numNodes")
    channel: ChannelSpec


class NodeStatus(_StatusPart):
    """One node with an IMEX daemon (`status.nodes[]`, keyed by `name`)."""

    name: str
    ip_address: str = Field(alias="ipAddress")
    clique_id: str = Field(alias="cliqueID")  # `<clusterUUID>.<cliqueId>`, or "" off-fabric
    index: int = 0  # IMEX node index in its clique; -1 for a node without a clique
    status: Readiness = "NotReady"


class Condition(_StatusPart):
    """`metav1.Condition` (our addition to NVIDIA's status), with its API rules."""

    type: Annotated[str, StringConstraints(max_length=316, pattern=_CONDITION_TYPE)]
    status: Literal["True", "False", "Unknown"]
    reason: Annotated[
        str, StringConstraints(min_length=1, max_length=1024, pattern=_CONDITION_REASON)
    ]
    message: Annotated[str, StringConstraints(max_length=32768)]
    last_transition_time: Any = Field(alias="lastTransitionTime")
    observed_generation: Annotated[int, Field(ge=0)] | None = Field(
        default=None, alias="observedGeneration"
    )


class ComputeDomainStatus(_StatusPart):
    status: Readiness = "NotReady"
    nodes: list[NodeStatus] = Field(default_factory=list)
    conditions: list[Condition] = Field(default_factory=list)

    @field_validator("nodes")
    @classmethod
    def _unique_nodes(cls, value: list[NodeStatus]) -> list[NodeStatus]:
        _unique([node.name for node in value], "node", "name")
        return value

    @field_validator("conditions")
    @classmethod
    def _unique_conditions(cls, value: list[Condition]) -> list[Condition]:
        _unique([condition.type for condition in value], "condition", "type")
        return value


def _unique(keys: list[str], what: str, key: str) -> None:
    twice = sorted({k for k in keys if keys.count(k) > 1})
    if twice:
        raise ValueError(f"{what} {twice[0]!r} is listed twice (a list-map keyed by {key})")


class ComputeDomain(_Strict):
    api_version: Literal["resource.nvidia.com/v1beta1"] = Field(alias="apiVersion")
    kind: Literal["ComputeDomain"]
    metadata: ObjectMeta
    spec: ComputeDomainSpec
    status: ComputeDomainStatus | None = None

    @property
    def name(self) -> str:
        return self.metadata.name or ""

    @property
    def namespace(self) -> str:
        return self.metadata.namespace or "default"

    @property
    def uid(self) -> str:
        return self.metadata.uid or ""

    @property
    def ref(self) -> str:
        """`ComputeDomain <namespace>/<name>`, as messages name it."""
        return f"{KIND} {self.namespace}/{self.name}"

    def to_api(self) -> dict[str, Any]:
        """The object as the API server would store it (defaults filled in)."""
        return self.model_dump(by_alias=True, exclude_none=True, mode="json")


def is_compute_domain(obj: Mapping[str, Any]) -> bool:
    """Whether `obj` claims to be a ComputeDomain (apiVersion and kind), valid or not."""
    return obj.get("apiVersion") == API_VERSION and obj.get("kind") == KIND


def decode_compute_domain(obj: Any, where: str = "") -> ComputeDomain:
    """`obj` (a parsed manifest or API object) as a ComputeDomain.

    Raises ConfigError naming the object (`where`, then its namespace/name as
    far as they can be read) and every field at fault. A ComputeDomain needs a
    name: `generateName` alone is not enough for the template it names.
    """
    label = _label(obj, where)
    if not isinstance(obj, Mapping):
        raise ConfigError(f"{label}: must be an object, got {type(obj).__name__}")
    try:
        domain = ComputeDomain.model_validate(dict(obj))
    except ValidationError as exc:
        raise ConfigError(f"{label}: {_problems(exc)}") from exc
    if not domain.metadata.name:
        raise ConfigError(f"{label}: metadata.name: required")
    return domain


def spec_changes(old: ComputeDomain, new: ComputeDomain) -> list[str]:
    """The spec fields `new` changes from `old` (NVIDIA's CRD refuses any: "A
    computeDomain.spec is immutable"); empty when the spec is the same."""
    before = old.spec.model_dump(by_alias=True)
    after = new.spec.model_dump(by_alias=True)
    return sorted(_diff(before, after, "spec"))


def _diff(before: Any, after: Any, path: str) -> list[str]:
    if isinstance(before, dict) and isinstance(after, dict):
        changed: list[str] = []
        for key in sorted(set(before) | set(after)):
            changed.extend(_diff(before.get(key), after.get(key), f"{path}.{key}"))
        return changed
    return [] if before == after else [path]


def _label(obj: Any, where: str) -> str:
    parts = [where] if where else []
    metadata = obj.get("metadata") if isinstance(obj, Mapping) else None
    name = metadata.get("name") if isinstance(metadata, Mapping) else None
    namespace = metadata.get("namespace") if isinstance(metadata, Mapping) else None
    if isinstance(name, str):
        ns = namespace if isinstance(namespace, str) else "default"
        parts.append(f"{KIND} {ns}/{name}")
    else:
        parts.append(f"{KIND} (no metadata.name)")
    return " ".join(parts)


def _problems(exc: ValidationError) -> str:
    """pydantic's errors as `field: message` with the API's field names."""
    problems = []
    for error in exc.errors():
        field = ".".join(str(part) for part in error["loc"]) or "(root)"
        message = "unknown field" if error["type"] == "extra_forbidden" else error["msg"]
        if error["type"] == "missing":
            message = "required"
        problems.append(f"{field}: {message.removeprefix('Value error, ')}")
    return "; ".join(problems)


__all__ = [
    "AllocationMode",
    "ComputeDomain",
    "ComputeDomainSpec",
    "ComputeDomainStatus",
    "Condition",
    "NodeStatus",
    "decode_compute_domain",
    "is_compute_domain",
    "spec_changes",
]
