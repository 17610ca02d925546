"""The admission check of a ResourceClaim or ResourceClaimTemplate (pure: no I/O).

`review` answers one AdmissionReview (admission.k8s.io/v1) as NVIDIA's
webhook does: ResourceClaims and ResourceClaimTemplates of resource.k8s.io
v1, v1beta1 and v1beta2; the opaque configs of this driver in the claim's
`spec.devices.config` (a template's `spec.spec.devices.config`) are checked,
everything else is allowed untouched. A refusal's message is the one the
kubelet plugin gives at Prepare, because it comes from the same functions
(`dra_driver.claims.device_config`, `dra_driver.claims.mps`); only the place
it names differs: the spec's `config[i]` instead of the allocation's, and the
request's DeviceClass instead of an allocated device.

What can be known before allocation is checked (`check_claim_spec`):

1. every config of this driver decodes strictly (`decode`: kind, apiVersion,
   unknown fields, strategies, intervals, limits);
2. a config naming a request fits the type of device that request's
   DeviceClass gives (`select_config`), for the default classes
   `gpu.nvidia.com` and `mig.nvidia.com`; one naming a `firstAvailable`
   request by its main name only when no alternative fits, since the
   scheduler picks one (a subrequest named on its own must fit);
3. MPS: an `mpsConfig` no device can apply (`check_mps_config`), and MPS on
   more than one device (`one_mps_device_per_claim`) when one request asks
   for an exact count of two or more devices and every alternative of it
   gets an MPS config.

Left to Prepare, because they depend on the node or on other claims: a
class's own configs, MPS on devices of several requests (consumable shares
may put them on one device), limits beyond a device's memory, one
time-slice interval and one MPS mode per shared GPU.

An UPDATE that leaves the spec as it was is allowed: the spec of both kinds
is immutable, and refusing one whose config predates the webhook would keep
the claim controller from removing its finalizer.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from dra_driver.claims.allocated import OpaqueConfig, parse_spec_configs
from dra_driver.claims.device_config import (
    DeviceConfig,
    SharingStrategy,
    decode,
    select_config,
)
from dra_driver.claims.mps import check_mps_config, one_mps_device_per_claim
from dra_driver.errors import AdmissionError, ClaimError
from dra_driver.node.device_classes import device_types_of_classes

ADMISSION_API_VERSION: Final = "admission.k8s.io/v1"
GROUP: Final = "resource.k8s.io"
VERSIONS: Final = ("v1", "v1beta1", "v1beta2")
KINDS: Final = {
    "resourceclaims": "ResourceClaim",
    "resourceclaimtemplates": "ResourceClaimTemplate",
}
"""The resources reviewed and their kinds; the spec path of a template is one `spec` deeper."""
MAX_MESSAGE_CHARS: Final = 8192
"""A refusal's message is cut here (32 configs of 10 KiB each cannot flood the API server)."""


@dataclass(frozen=True)
class Verdict:
    """The answer to one AdmissionReview; `response()` is the body to send back."""

    uid: str
    allowed: bool
    subject: str = ""
    """`ResourceClaim ns/name` (or the resource asked about), for the log line."""
    message: str = ""
    reason: str = ""
    """"Invalid" (a config the plugin would refuse) or "BadRequest" (an object not understood)."""
    code: int = 200

    def response(self) -> dict[str, Any]:
        """The AdmissionReview the API server expects back."""
        answer: dict[str, Any] = {"uid": self.uid, "allowed": self.allowed}
        if not self.allowed:
            answer["status"] = {
                "status": "Failure",
                "message": self.message,
                "reason": self.reason,
                "code": self.code,
            }
        return {"apiVersion": ADMISSION_API_VERSION, "kind": "AdmissionReview", "response": answer}


def review(body: object, *, driver: str) -> Verdict:
    """Check the object of an AdmissionReview request for `driver`'s configs.

    Raises AdmissionError when `body` is not an admission.k8s.io/v1
    AdmissionReview with a request and its uid (the server answers 400).
    """
    request = _request_of(body)
    uid = request["uid"]
    resource = request.get("resource")
    group, version, name = (
        (resource.get("group"), resource.get("version"), resource.get("resource"))
        if isinstance(resource, Mapping)
        else (None, None, None)
    )
    if group != GROUP or version not in VERSIONS or name not in KINDS:
        return _bad_request(
            uid,
            f"{_short(group)}/{_short(version)}/{_short(name)}",
            "expected resource to be one of the supported versions for resourceclaims or "
            f"resourceclaimtemplates ({GROUP} {', '.join(VERSIONS)}), got "
            f"{_short(group)}/{_short(version)}/{_short(name)}",
        )
    kind = KINDS[str(name)]
    if request.get("subResource") or request.get("operation") not in ("CREATE", "UPDATE"):
        return Verdict(uid, allowed=True, subject=kind)  # status updates, deletes: no spec
    obj = request.get("object")
    subject = f"{kind} {_object_name(request, obj)}"
    if not isinstance(obj, Mapping):
        return _bad_request(uid, subject, f"{subject}: request.object is not an object")
    spec_path = "spec" if kind == "ResourceClaim" else "spec.spec"
    spec = _at(obj, spec_path)
    old = request.get("oldObject")
    if (
        request["operation"] == "UPDATE"
        and isinstance(old, Mapping)
        and _at(old, spec_path) == spec
    ):
        return Verdict(uid, allowed=True, subject=subject)
    if not isinstance(spec, Mapping):
        return _bad_request(uid, subject, f"{subject}: {spec_path} is not an object")
    problems = check_claim_spec(spec, ref=subject, path=spec_path, driver=driver)
    if not problems:
        return Verdict(uid, allowed=True, subject=subject)
    message = "; ".join(problems)
    if len(message) > MAX_MESSAGE_CHARS:
        message = message[: MAX_MESSAGE_CHARS - 3] + "..."
    return Verdict(uid, False, subject, message, reason="Invalid", code=422)


def check_claim_spec(spec: Mapping[str, Any], *, ref: str, path: str, driver: str) -> list[str]:
    """What the kubelet plugin would refuse in this claim spec whatever the node, one
    message per problem (empty: allowed). `path` is where `spec` sits in the object."""
    devices = spec.get("devices")
    if devices is None:
        return []
    if not isinstance(devices, Mapping):
        return [f"{ref}: {path}.devices must be an object"]
    try:
        entries = parse_spec_configs(
            devices.get("config"), driver=driver, ref=ref, path=f"{path}.devices.config"
        )
        requests = _requests(devices.get("requests"), ref, f"{path}.devices.requests")
    except ClaimError as exc:
        return [str(exc)]
    problems: list[str] = []
    decoded: list[tuple[OpaqueConfig, DeviceConfig]] = []
    for index, config in entries:
        try:
            value = decode(config, f"{ref}: {path}.devices.config[{index}]")
        except ClaimError as exc:
            problems.append(str(exc))
            continue
        decoded.append((config, value))
    for request in requests:
        problem = _request_problem(ref, request, decoded)
        if problem is not None:
            problems.append(problem)
    return problems


@dataclass(frozen=True)
class _Alternative:
    """One way a request can be allocated: "req", or "req/sub" of a `firstAvailable` list."""

    request: str
    device_class: str | None
    count: int | None
    """The exact device count, None for allocationMode All."""


def _request_problem(
    ref: str,
    alternatives: Sequence[_Alternative],
    decoded: Sequence[tuple[OpaqueConfig, DeviceConfig]],
) -> str | None:
    """The plugin's refusal of one request, or None: a config naming one of its
    subrequests that does not fit it, or a refusal every alternative would get."""
    for alternative in alternatives:
        if "/" in alternative.request:
            named = [(c, v) for c, v in decoded if alternative.request in c.requests]
            problem = _alternative_problem(ref, alternative, named)
            if problem is not None:
                return problem
    refusals = []
    for alternative in alternatives:
        refusal = _alternative_problem(ref, alternative, decoded)
        if refusal is None:
            return None
        refusals.append(refusal)
    return refusals[0] if refusals else None


def _alternative_problem(
    ref: str, alternative: _Alternative, decoded: Sequence[tuple[OpaqueConfig, DeviceConfig]]
) -> str | None:
    kind = device_types_of_classes().get(alternative.device_class or "")
    if kind is None:
        return None  # a class of another driver, or one whose devices we cannot know
    applicable = [(c, v) for c, v in decoded if c.applies_to_request(alternative.request)]
    device = f"(DeviceClass {alternative.device_class})"
    try:
        config = select_config(
            ref,
            applicable,
            request=alternative.request,
            device=device,
            device_kind=kind,
        )
        sharing = config.sharing if config is not None else None
        if sharing is not None and sharing.strategy is SharingStrategy.MPS:
            if sharing.mps_config is not None:
                check_mps_config(
                    sharing.mps_config, f"{ref}: request {alternative.request!r} on {device}"
                )
            devices = (f"{alternative.request}[{i}]" for i in range(alternative.count or 1))
            one_mps_device_per_claim(ref, devices)
    except ClaimError as exc:
        return str(exc)
    return None


def _requests(raw: object, ref: str, path: str) -> list[list[_Alternative]]:
    """Each request's alternatives, from the v1/v1beta2 shape (`exactly`, `firstAvailable`)
    or the v1beta1 one (the class and count on the request itself)."""
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise ClaimError(f"{ref}: {path} must be a list")
    out: list[list[_Alternative]] = []
    for index, request in enumerate(raw):
        where = f"{path}[{index}]"
        if not isinstance(request, Mapping) or not isinstance(request.get("name"), str):
            raise ClaimError(f"{ref}: {where} must be an object with a name")
        name = request["name"]
        subrequests = request.get("firstAvailable")
        if subrequests:
            if not isinstance(subrequests, list):
                raise ClaimError(f"{ref}: {where}.firstAvailable must be a list")
            out.append(
                [
                    _alternative(f"{name}/{sub.get('name')}", sub, ref, f"{where}.firstAvailable")
                    for sub in subrequests
                ]
            )
            continue
        exactly = request.get("exactly")
        out.append([_alternative(name, exactly if exactly is not None else request, ref, where)])
    return out


def _alternative(name: str, raw: object, ref: str, where: str) -> _Alternative:
    if not isinstance(raw, Mapping):
        raise ClaimError(f"{ref}: {where}: a device request must be an object")
    device_class = raw.get("deviceClassName")
    count: int | None = None
    if raw.get("allocationMode", "ExactCount") == "ExactCount":
        value = raw.get("count", 1)
        count = value if isinstance(value, int) and not isinstance(value, bool) else None
    return _Alternative(name, device_class if isinstance(device_class, str) else None, count)


def _request_of(body: object) -> Mapping[str, Any]:
    if not isinstance(body, Mapping):
        raise AdmissionError(f"expected an AdmissionReview object, got {_type_name(body)}")
    api_version, kind = body.get("apiVersion"), body.get("kind")
    if api_version != ADMISSION_API_VERSION or kind != "AdmissionReview":
        raise AdmissionError(
            f"expected apiVersion {ADMISSION_API_VERSION}, kind AdmissionReview; got "
            f"apiVersion {_short(api_version)}, kind {_short(kind)}"
        )
    request = body.get("request")
    if not isinstance(request, Mapping):
        raise AdmissionError("AdmissionReview.request is not set")
    if not isinstance(request.get("uid"), str) or not request["uid"]:
        raise AdmissionError("AdmissionReview.request.uid is not set")
    return request


def _object_name(request: Mapping[str, Any], obj: object) -> str:
    """`namespace/name` of the object; `namespace/prefix*` for one created by generateName."""
    metadata = obj.get("metadata") if isinstance(obj, Mapping) else None
    metadata = metadata if isinstance(metadata, Mapping) else {}
    namespace = metadata.get("namespace") or request.get("namespace") or ""
    name = metadata.get("name") or request.get("name")
    if not name and metadata.get("generateName"):
        name = f"{metadata['generateName']}*"
    return f"{_plain(namespace)}/{_plain(name or '(no name)')}"


def _at(obj: Mapping[str, Any], path: str) -> object:
    value: object = obj
    for key in path.split("."):
        value = value.get(key) if isinstance(value, Mapping) else None
    return value


def _bad_request(uid: str, subject: str, message: str) -> Verdict:
    return Verdict(uid, False, subject, message, reason="BadRequest", code=400)


def _plain(value: object) -> str:
    text = value if isinstance(value, str) else repr(value)
    return text[:253]


def _short(value: object, limit: int = 64) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _type_name(value: object) -> str:
    if isinstance(value, list):
        return "a JSON list"
    if value is None:
        return "null"
    return f"a JSON {type(value).__name__}"


__all__ = ["GROUP", "KINDS", "VERSIONS", "Verdict", "check_claim_spec", "review"]
