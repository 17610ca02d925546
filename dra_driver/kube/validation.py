"""The API server's validation of the objects `simulate` and `explain` read, as pure functions.

A simulation that places an object the API server would refuse promises a
fit that `kubectl apply` never delivers. This module applies kube-apiserver's
rules for ResourceClaims, ResourceClaimTemplates, DeviceClasses and the
DRA-related part of Pods (and of the pod templates of workloads), after the
API server's defaulting (kubernetes `pkg/apis/resource/validation`,
`pkg/apis/resource/v1/defaults.go`, `pkg/registry/resource/*/strategy.go`):

* request and subrequest names are DNS labels, unique within their list;
* a request has exactly one of `exactly` and `firstAvailable` (1 to 8
  subrequests);
* `allocationMode` is ExactCount (the default) or All; with ExactCount a
  `count` of 0 or none is defaulted to 1 and a negative one is refused, with
  All a count is refused;
* list limits: 32 requests, constraints, configs and selectors, 16
  tolerations; a selector has a `cel` expression of at most 10 KiB that
  compiles (the caller passes the compiler); opaque configs name a valid
  driver and carry a JSON object of at most 10 KiB; constraints and configs
  name requests that exist;
* `adminAccess` needs the namespace label
  `resource.kubernetes.io/admin-access: "true"` (checked when the caller
  knows the Namespace);
* a Pod's `resourceClaims` have DNS-label names, unique, each with exactly
  one of `resourceClaimName` and `resourceClaimTemplateName`, and a
  container's `resources.claims` name one of them.

Errors are `FieldError`s worded like apimachinery's `field.Error`
("spec.devices.requests[0].exactly.count: Invalid value: -1: must be greater
than zero"), so a report reads like `kubectl apply`'s. Unknown fields and
wrong types are not checked here: that is strict decoding
(`dra_driver.kube.strict_schema`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from dra_driver.kube.names import (
    DNS_LABEL_MAX_LENGTH,
    DNS_SUBDOMAIN_MAX_LENGTH,
    is_c_identifier,
    is_dns_label,
    is_dns_subdomain,
    is_label_value,
    label_key_errors,
)

# k8s.io/api/resource/v1 limits
DEVICE_REQUESTS_MAX_SIZE: Final = 32
FIRST_AVAILABLE_MAX_SIZE: Final = 8
DEVICE_SELECTORS_MAX_SIZE: Final = 32
DEVICE_CONSTRAINTS_MAX_SIZE: Final = 32
DEVICE_CONFIG_MAX_SIZE: Final = 32
DEVICE_TOLERATIONS_MAX_LENGTH: Final = 16
CEL_SELECTOR_EXPRESSION_MAX_LENGTH: Final = 10 * 1024
OPAQUE_PARAMETERS_MAX_LENGTH: Final = 10 * 1024
DRIVER_NAME_MAX_LENGTH: Final = 63
DEVICE_MAX_DOMAIN_LENGTH: Final = 63
DEVICE_MAX_ID_LENGTH: Final = 32
ADMIN_NAMESPACE_LABEL: Final = "resource.kubernetes.io/admin-access"

EXACT_COUNT: Final = "ExactCount"
ALL: Final = "All"

# apimachinery pkg/util/validation messages
_DNS_LABEL_MESSAGE: Final = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', "
    "and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', "
    "regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
)
_DNS_SUBDOMAIN_MESSAGE: Final = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' "
    "or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex "
    "used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
)
_REQUEST_REF_MESSAGE: Final = (
    "must be the name of a request in the claim or the name of a request and a subrequest "
    "separated by '/'"
)
_ADMIN_ACCESS_MESSAGE: Final = (
    f"admin access to devices requires the `{ADMIN_NAMESPACE_LABEL}: true` label on the "
    "containing namespace"
)

SelectorCheck = Callable[[str], str | None]
"""Compiles a CEL selector; returns why it does not compile, or None."""


@dataclass(frozen=True)
class FieldError:
    """One refusal, as apimachinery's `field.Error` prints it: `field: type[: value]: detail`."""

    field: str
    type: str  # "Invalid value", "Required value", "Forbidden", ...
    detail: str = ""
    value: Any = None
    has_value: bool = False

    def __str__(self) -> str:
        parts = [self.field, self.type]
        if self.has_value:
            parts.append(_value_text(self.value))
        text = ": ".join(parts)
        return f"{text}: {self.detail}" if self.detail else text


def invalid(field: str, value: Any, detail: str) -> FieldError:
    return FieldError(field, "Invalid value", detail, value, has_value=True)


def required(field: str, detail: str = "") -> FieldError:
    return FieldError(field, "Required value", detail)


def forbidden(field: str, detail: str) -> FieldError:
    return FieldError(field, "Forbidden", detail)


def duplicate(field: str, value: Any) -> FieldError:
    return FieldError(field, "Duplicate value", value=value, has_value=True)


def not_supported(field: str, value: Any, supported: Sequence[str]) -> FieldError:
    values = ", ".join(json.dumps(s) for s in supported)
    return FieldError(
        field, "Unsupported value", f"supported values: {values}", value, has_value=True
    )


def too_many(field: str, actual: int, limit: int) -> FieldError:
    return FieldError(field, "Too many", f"must have at most {limit} items", actual, has_value=True)


def too_long(field: str, limit: int, unit: str = "bytes") -> FieldError:
    return FieldError(field, "Too long", f"may not be more than {limit} {unit}")


def _value_text(value: Any) -> str:
    if isinstance(value, str):
        return json.dumps(value)
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)


# ---------------------------------------------------------------- names


def dns_label(field: str, value: Any) -> list[FieldError]:
    return _dns_name(field, value, DNS_LABEL_MAX_LENGTH, is_dns_label, _DNS_LABEL_MESSAGE)


def dns_subdomain(field: str, value: Any) -> list[FieldError]:
    return _dns_name(
        field, value, DNS_SUBDOMAIN_MAX_LENGTH, is_dns_subdomain, _DNS_SUBDOMAIN_MESSAGE
    )


def _dns_name(
    field: str, value: Any, limit: int, valid: Callable[[str], bool], message: str
) -> list[FieldError]:
    """A required DNS label or subdomain: present, at most `limit` bytes, well formed."""
    if not isinstance(value, str) or not value:
        return [required(field)]
    if len(value) > limit:
        return [invalid(field, value, f"must be no more than {limit} bytes")]
    if not valid(value):
        return [invalid(field, value, message)]
    return []


def driver_name(field: str, value: Any) -> list[FieldError]:
    """`ValidateCSIDriverName`: at most 63 characters, a DNS subdomain once lower-cased."""
    if not isinstance(value, str) or not value:
        return [required(field)]
    if len(value) > DRIVER_NAME_MAX_LENGTH:
        return [too_long(field, DRIVER_NAME_MAX_LENGTH)]
    if not is_dns_subdomain(value.lower()):
        return [invalid(field, value, _DNS_SUBDOMAIN_MESSAGE)]
    return []


def qualified_name(field: str, value: Any) -> list[FieldError]:
    """A fully qualified attribute name `<domain>/<C identifier>` (constraints)."""
    if not isinstance(value, str) or not value:
        return [required(field)]
    domain, slash, ident = value.partition("/")
    if not slash:
        return [invalid(field, value, "must include a domain")]
    errors = []
    if len(domain) > DEVICE_MAX_DOMAIN_LENGTH or not is_dns_subdomain(domain.lower()):
        errors.append(invalid(field, value, f"domain: {_DNS_SUBDOMAIN_MESSAGE}"))
    if len(ident) > DEVICE_MAX_ID_LENGTH or not is_c_identifier(ident):
        errors.append(
            invalid(
                field,
                value,
                f"name: a valid C identifier of at most {DEVICE_MAX_ID_LENGTH} characters "
                "must start with a letter or '_' and contain only letters, digits and '_'",
            )
        )
    return errors


# ---------------------------------------------------------------- claims


@dataclass(frozen=True)
class Context:
    """What the checks need besides the object: the CEL compiler and the namespace labels.

    `namespace_labels` is None when the Namespace is not known (admin access
    then cannot be checked, as it needs the label).
    """

    check_selector: SelectorCheck | None = None
    namespace_labels: Mapping[str, str] | None = None
    # DRADeviceTaints: off, the API server drops tolerations before validating.
    device_taints: bool = True
    # The release whose rules apply (None: the newest): the `None` taint effect is 1.35+.
    release: str | None = None


def validate_claim_spec(spec: Any, field: str, context: Context) -> list[FieldError]:
    """A ResourceClaimSpec (`spec` of a claim, `spec.spec` of a template)."""
    if not isinstance(spec, Mapping):
        return []
    devices = spec.get("devices")
    if not isinstance(devices, Mapping):
        return []
    path = f"{field}.devices"
    errors: list[FieldError] = []
    requests = _list(devices.get("requests"))
    names = _request_names(requests)
    errors += _limit(f"{path}.requests", requests, DEVICE_REQUESTS_MAX_SIZE)
    seen: set[str] = set()
    for index, request in enumerate(requests):
        where = f"{path}.requests[{index}]"
        if not isinstance(request, Mapping):
            continue
        name = request.get("name")
        errors += dns_label(f"{where}.name", name)
        if isinstance(name, str) and name:
            if name in seen:
                errors.append(duplicate(f"{where}.name", name))
            seen.add(name)
        errors += _request(request, where, context)
    constraints = _list(devices.get("constraints"))
    errors += _limit(f"{path}.constraints", constraints, DEVICE_CONSTRAINTS_MAX_SIZE)
    for index, constraint in enumerate(constraints):
        errors += _constraint(constraint, f"{path}.constraints[{index}]", names)
    configs = _list(devices.get("config"))
    errors += _limit(f"{path}.config", configs, DEVICE_CONFIG_MAX_SIZE)
    for index, config in enumerate(configs):
        where = f"{path}.config[{index}]"
        if isinstance(config, Mapping):
            errors += _request_refs(config.get("requests"), f"{where}.requests", names)
            errors += _opaque(config, where)
    return errors


def _request(request: Mapping[str, Any], where: str, context: Context) -> list[FieldError]:
    exactly = request.get("exactly")
    first = _list(request.get("firstAvailable"))
    if exactly is None and not first:
        return [required(where, "exactly one of `exactly` or `firstAvailable` is required")]
    if exactly is not None and first:
        return [
            invalid(
                where,
                None,
                "exactly one of `exactly` or `firstAvailable` is required, but multiple fields "
                "are set",
            )
        ]
    if exactly is not None:
        return _exact(exactly, f"{where}.exactly", context)
    errors = _limit(f"{where}.firstAvailable", first, FIRST_AVAILABLE_MAX_SIZE)
    seen: set[str] = set()
    for index, sub in enumerate(first):
        at = f"{where}.firstAvailable[{index}]"
        if not isinstance(sub, Mapping):
            continue
        name = sub.get("name")
        errors += dns_label(f"{at}.name", name)
        if isinstance(name, str) and name:
            if name in seen:
                errors.append(duplicate(f"{at}.name", name))
            seen.add(name)
        errors += _device_request(sub, at, context)
    return errors


def _exact(exactly: Any, where: str, context: Context) -> list[FieldError]:
    if not isinstance(exactly, Mapping):
        return []
    errors = _device_request(exactly, where, context)
    if exactly.get("adminAccess") is True:
        labels = context.namespace_labels
        if labels is not None and labels.get(ADMIN_NAMESPACE_LABEL) != "true":
            errors.append(forbidden(f"{where}.adminAccess", _ADMIN_ACCESS_MESSAGE))
    return errors


def _device_request(request: Mapping[str, Any], where: str, context: Context) -> list[FieldError]:
    """What `exactly` and a `firstAvailable` subrequest share: class, selectors, count."""
    errors = dns_subdomain(f"{where}.deviceClassName", request.get("deviceClassName"))
    selectors = _list(request.get("selectors"))
    errors += _selectors(selectors, f"{where}.selectors", context)
    mode = request.get("allocationMode") or EXACT_COUNT
    count = request.get("count")
    if mode == EXACT_COUNT:
        # Defaulting (pkg/apis/resource/v1/defaults.go): a count of 0 or none becomes 1.
        if isinstance(count, int) and not isinstance(count, bool) and count < 0:
            errors.append(invalid(f"{where}.count", count, "must be greater than zero"))
    elif mode == ALL:
        if count not in (None, 0):
            errors.append(
                invalid(
                    f"{where}.count", count, "must not be specified when allocationMode is 'All'"
                )
            )
    else:
        errors.append(not_supported(f"{where}.allocationMode", mode, (ALL, EXACT_COUNT)))
    tolerations = _list(request.get("tolerations"))
    errors += _limit(f"{where}.tolerations", tolerations, DEVICE_TOLERATIONS_MAX_LENGTH)
    if context.device_taints:
        for index, toleration in enumerate(tolerations):
            errors += _toleration(toleration, f"{where}.tolerations[{index}]", context.release)
    return errors


_TOLERATION_OPERATORS: Final = ("Equal", "Exists")
_LABEL_VALUE_MESSAGE: Final = (
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' "
    "or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or "
    "'my_value',  or '12345', regex used for validation is "
    "'(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"
)


def _toleration(toleration: Any, where: str, release: str | None) -> list[FieldError]:
    """resource validation's `validateDeviceToleration` (the operator defaults to Equal)."""
    if not isinstance(toleration, Mapping):
        return []
    errors: list[FieldError] = []
    key = toleration.get("key")
    if isinstance(key, str) and key:
        errors += [invalid(f"{where}.key", key, text) for text in label_key_errors(key)]
    operator = toleration.get("operator") or "Equal"
    value = toleration.get("value") or ""
    if operator == "Exists":
        if value:
            errors.append(invalid(f"{where}.value", value, "must be empty for operator `Exists`"))
    elif operator == "Equal":
        if isinstance(value, str) and not is_label_value(value):
            errors.append(invalid(f"{where}.value", value, _LABEL_VALUE_MESSAGE))
    else:
        errors.append(not_supported(f"{where}.operator", operator, _TOLERATION_OPERATORS))
    effect = toleration.get("effect") or ""
    effects = ["NoExecute", "NoSchedule"]
    if release is None or tuple(int(n) for n in release.split(".")) >= (1, 35):
        effects.append("None")  # added in 1.35
    if effect and effect not in effects:
        errors.append(not_supported(f"{where}.effect", effect, sorted(effects)))
    return errors


def _selectors(selectors: list[Any], where: str, context: Context) -> list[FieldError]:
    errors = _limit(where, selectors, DEVICE_SELECTORS_MAX_SIZE)
    for index, selector in enumerate(selectors):
        at = f"{where}[{index}]"
        cel = selector.get("cel") if isinstance(selector, Mapping) else None
        if not isinstance(cel, Mapping):
            errors.append(required(f"{at}.cel"))
            continue
        expression = cel.get("expression")
        if not isinstance(expression, str) or not expression:
            errors.append(required(f"{at}.cel.expression"))
            continue
        if (
            len(expression.encode("utf-8", errors="surrogatepass"))
            > CEL_SELECTOR_EXPRESSION_MAX_LENGTH
        ):
            errors.append(too_long(f"{at}.cel.expression", CEL_SELECTOR_EXPRESSION_MAX_LENGTH))
            continue
        problem = context.check_selector(expression) if context.check_selector else None
        if problem is not None:
            errors.append(invalid(f"{at}.cel.expression", expression, problem))
    return errors


def _constraint(constraint: Any, where: str, names: Mapping[str, set[str]]) -> list[FieldError]:
    if not isinstance(constraint, Mapping):
        return []
    errors = _request_refs(constraint.get("requests"), f"{where}.requests", names)
    if constraint.get("matchAttribute") is not None:
        errors += qualified_name(f"{where}.matchAttribute", constraint["matchAttribute"])
    elif constraint.get("distinctAttribute") is not None:
        errors += qualified_name(f"{where}.distinctAttribute", constraint["distinctAttribute"])
    else:
        errors.append(required(f"{where}.matchAttribute"))
    return errors


def _request_refs(refs: Any, where: str, names: Mapping[str, set[str]]) -> list[FieldError]:
    refs = _list(refs)
    errors = _limit(where, refs, DEVICE_REQUESTS_MAX_SIZE)
    seen: set[str] = set()
    for index, ref in enumerate(refs):
        at = f"{where}[{index}]"
        if not isinstance(ref, str):
            continue
        if ref in seen:
            errors.append(duplicate(at, ref))
        seen.add(ref)
        segments = ref.split("/")
        if len(segments) > 2:
            errors.append(invalid(at, ref, _REQUEST_REF_MESSAGE))
            continue
        for segment in segments:
            errors += [e for e in dns_label(at, segment) if e.type != "Required value"]
        base, _, sub = ref.partition("/")
        if base not in names or (sub and sub not in names[base]):
            errors.append(invalid(at, ref, _REQUEST_REF_MESSAGE))
    return errors


def _opaque(config: Mapping[str, Any], where: str) -> list[FieldError]:
    opaque = config.get("opaque")
    if not isinstance(opaque, Mapping):
        return [required(f"{where}.opaque")]
    errors = driver_name(f"{where}.opaque.driver", opaque.get("driver"))
    parameters = opaque.get("parameters")
    at = f"{where}.opaque.parameters"
    if parameters is None:
        errors.append(required(at))
    elif not isinstance(parameters, Mapping):
        errors.append(invalid(at, "<value omitted>", "parameters must be a valid JSON object"))
    else:
        size = len(json.dumps(parameters, separators=(",", ":"), default=str).encode())
        if size > OPAQUE_PARAMETERS_MAX_LENGTH:
            errors.append(too_long(at, OPAQUE_PARAMETERS_MAX_LENGTH))
    return errors


def _request_names(requests: Iterable[Any]) -> dict[str, set[str]]:
    names: dict[str, set[str]] = {}
    for request in requests:
        if isinstance(request, Mapping) and isinstance(request.get("name"), str):
            subs = {
                str(sub.get("name"))
                for sub in _list(request.get("firstAvailable"))
                if isinstance(sub, Mapping)
            }
            names[request["name"]] = subs
    return names


# ---------------------------------------------------------------- device classes


def validate_device_class_spec(spec: Any, context: Context) -> list[FieldError]:
    if not isinstance(spec, Mapping):
        return []
    selectors = _list(spec.get("selectors"))
    errors = _selectors(selectors, "spec.selectors", context)
    configs = _list(spec.get("config"))
    errors += _limit("spec.config", configs, DEVICE_CONFIG_MAX_SIZE)
    for index, config in enumerate(configs):
        if isinstance(config, Mapping):
            errors += _opaque(config, f"spec.config[{index}]")
    return errors


# ---------------------------------------------------------------- pods


def validate_pod_spec(spec: Any, field: str) -> list[FieldError]:
    """The DRA part of a PodSpec: `resourceClaims` and the containers' `resources.claims`."""
    if not isinstance(spec, Mapping):
        return []
    errors: list[FieldError] = []
    claims = _list(spec.get("resourceClaims"))
    names: set[str] = set()
    for index, entry in enumerate(claims):
        where = f"{field}.resourceClaims[{index}]"
        if not isinstance(entry, Mapping):
            continue
        name = entry.get("name")
        errors += dns_label(f"{where}.name", name)
        if isinstance(name, str) and name:
            if name in names:
                errors.append(duplicate(f"{where}.name", name))
            names.add(name)
        claim, template = entry.get("resourceClaimName"), entry.get("resourceClaimTemplateName")
        if bool(claim) == bool(template):
            errors.append(
                invalid(
                    where,
                    None,
                    "must specify one of: `resourceClaimName`, `resourceClaimTemplateName`",
                )
            )
        for key, value in (("resourceClaimName", claim), ("resourceClaimTemplateName", template)):
            if value:
                errors += dns_subdomain(f"{where}.{key}", value)
    for kind in ("initContainers", "containers"):
        for index, container in enumerate(_list(spec.get(kind))):
            if not isinstance(container, Mapping):
                continue
            resources = container.get("resources")
            used = _list(resources.get("claims")) if isinstance(resources, Mapping) else []
            errors += _container_claims(used, f"{field}.{kind}[{index}].resources.claims", names)
    return errors


def _container_claims(used: list[Any], where: str, names: set[str]) -> list[FieldError]:
    """core validation's `validateResourceClaimNames`: each `name[/request]` once, each
    name one of the pod's `resourceClaims`."""
    errors: list[FieldError] = []
    seen: set[str] = set()
    for position, claim_ref in enumerate(used):
        at = f"{where}[{position}]"
        if not isinstance(claim_ref, Mapping):
            continue
        name = claim_ref.get("name")
        if not isinstance(name, str) or not name:
            errors.append(required(at))
            continue
        request = claim_ref.get("request")
        key = f"{name}/{request}" if isinstance(request, str) and request else name
        if key in seen:
            errors.append(duplicate(at, key))
        seen.add(key)
        if name not in names:
            listed = ": " + ", ".join(sorted(names)) if names else " which is empty"
            errors.append(
                FieldError(
                    at,
                    "Not found",
                    f"must be one of the names in pod.spec.resourceClaims{listed}",
                    name,
                    has_value=True,
                )
            )
    return errors


# ---------------------------------------------------------------- helpers


def _list(value: Any) -> list[Any]:
    return list(value) if isinstance(value, list) else []


def _limit(field: str, items: Sequence[Any], limit: int) -> list[FieldError]:
    return [too_many(field, len(items), limit)] if len(items) > limit else []
