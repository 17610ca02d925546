"""Turn a ResourceClaim from the API into the few facts Prepare acts on.

The kubelet plugin receives whole ResourceClaim objects (as JSON-ish dicts,
resource.k8s.io/v1; v1beta1/v1beta2 have the same metadata and status shape)
and must act only on the devices allocated to *its* driver. Parsing happens
once, here, into frozen records, so the Prepare code never indexes into raw
dicts and never meets a `KeyError` on a malformed or hostile object: every
problem becomes a `ClaimError` naming the claim and the field, which the
kubelet shows to the user as the claim's prepare error.

Pure: no I/O, no clock, no Kubernetes client.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Final

from dra_driver.errors import ClaimError
from dra_driver.kube.names import is_dns_label

KIND: Final = "ResourceClaim"
SUPPORTED_API_VERSIONS: Final = frozenset(
    {"resource.k8s.io/v1", "resource.k8s.io/v1beta2", "resource.k8s.io/v1beta1"}
)
MAX_PARAMETERS_BYTES: Final = 10 * 1024
"""The API server's limit on one opaque config's parameters (10 KiB of JSON)."""
MAX_PARAMETERS_DEPTH: Final = 32
"""Deepest nesting accepted in opaque parameters (NVIDIA's config kinds need 4)."""
CONFIG_SOURCE_CLASS: Final = "FromClass"
CONFIG_SOURCE_CLAIM: Final = "FromClaim"
_SOURCE_RANK: Final = {CONFIG_SOURCE_CLASS: 0, CONFIG_SOURCE_CLAIM: 1}


def _empty_mapping() -> Mapping[str, str]:
    return MappingProxyType({})


@dataclass(frozen=True)
class DeviceResult:
    """One allocated device of a claim (`status.allocation.devices.results[]`).

    `request` is what the allocator wrote: `"req"` or, for a prioritized-list
    claim, `"req/subreq"`. The kubelet matches containers against the base
    name, so that is what Prepare must report (`base_request`).
    """

    request: str
    driver: str
    pool: str
    device: str
    admin_access: bool = False
    share_id: str | None = None
    consumed_capacity: Mapping[str, str] = field(default_factory=_empty_mapping)

    @property
    def base_request(self) -> str:
        """The request name without its `/subrequest` part."""
        return self.request.partition("/")[0]

    @property
    def subrequest(self) -> str | None:
        """The subrequest name chosen from `firstAvailable`, or None."""
        _, sep, sub = self.request.partition("/")
        return sub if sep else None


@dataclass(frozen=True)
class OpaqueConfig:
    """One opaque config of this driver from `status.allocation.devices.config[]`.

    `source` is "FromClass" or "FromClaim"; `requests` empty means "every
    request of the claim". `parameters` is the raw JSON object for the
    driver's config decoder (deep-copied; do not mutate).
    """

    source: str
    requests: tuple[str, ...]
    driver: str
    parameters: Mapping[str, Any]

    def applies_to(self, result: DeviceResult) -> bool:
        """Whether this config covers the result's request.

        A config naming a main request applies to all of its subrequests.
        """
        return self.applies_to_request(result.request)

    def applies_to_request(self, request: str) -> bool:
        """Whether this config covers `request` ("req" or "req/subreq")."""
        if not self.requests:
            return True
        return request in self.requests or request.partition("/")[0] in self.requests


@dataclass(frozen=True)
class AllocatedClaim:
    """The part of an allocated ResourceClaim this driver has to prepare."""

    namespace: str
    name: str
    uid: str
    results: tuple[DeviceResult, ...]
    configs: tuple[OpaqueConfig, ...]
    node_selector: Mapping[str, Any] | None = None

    @property
    def ref(self) -> str:
        """`ResourceClaim <namespace>/<name>`, the prefix of every message about it."""
        return f"{KIND} {self.namespace}/{self.name}"

    def configs_for(self, result: DeviceResult) -> tuple[OpaqueConfig, ...]:
        """The configs that apply to `result`, lowest precedence first.

        Class configs come before claim configs, and within a source the
        later entry wins, so the *last* element is the one to honour when
        only one config of a kind may apply.
        """
        ordered = sorted(
            (c for c in self.configs if c.applies_to(result)),
            key=lambda c: _SOURCE_RANK[c.source],
        )
        return tuple(ordered)


def parse_allocated_claim(
    obj: Mapping[str, Any],
    *,
    driver: str,
    expected_uid: str,
    expected_namespace: str | None = None,
    expected_name: str | None = None,
) -> AllocatedClaim:
    """Parse an allocated claim, keeping only `driver`'s results and configs.

    Raises `ClaimError` (and nothing else, whatever `obj` holds) when the
    object is not a ResourceClaim, is not the claim the kubelet asked for
    (UID, namespace or name differ), is not allocated, is malformed, or has
    no device of `driver`.
    """
    ref = _fallback_ref(expected_namespace, expected_name, expected_uid)
    if not isinstance(obj, Mapping):
        raise ClaimError(f"{ref}: expected a JSON object, got {_type_name(obj)}")

    metadata = _mapping(obj.get("metadata"), "metadata", ref, required=True)
    namespace = _string(metadata.get("namespace"), "metadata.namespace", ref)
    name = _string(metadata.get("name"), "metadata.name", ref)
    ref = f"{KIND} {namespace}/{name}"

    kind = obj.get("kind")
    if kind is not None and kind != KIND:
        raise ClaimError(f"{ref}: kind is {_short(kind)}, expected {KIND!r}")
    api_version = obj.get("apiVersion")
    if api_version is not None and not (
        isinstance(api_version, str) and api_version in SUPPORTED_API_VERSIONS
    ):
        raise ClaimError(
            f"{ref}: apiVersion is {_short(api_version)}, expected one of "
            f"{', '.join(sorted(SUPPORTED_API_VERSIONS))}"
        )

    uid = _string(metadata.get("uid"), "metadata.uid", ref)
    if uid != expected_uid:
        raise ClaimError(
            f"{ref}: metadata.uid is {uid}, the kubelet asked for {expected_uid}: "
            "the claim was deleted and re-created"
        )
    if expected_namespace is not None and namespace != expected_namespace:
        raise ClaimError(
            f"{ref}: metadata.namespace is {namespace!r}, the kubelet asked for "
            f"{expected_namespace!r}"
        )
    if expected_name is not None and name != expected_name:
        raise ClaimError(
            f"{ref}: metadata.name is {name!r}, the kubelet asked for {expected_name!r}"
        )

    status = _mapping(obj.get("status"), "status", ref, required=False)
    allocation = _mapping(status.get("allocation"), "status.allocation", ref, required=False)
    if not allocation:
        raise ClaimError(f"{ref}: status.allocation is not set (the claim is not allocated)")
    devices = _mapping(allocation.get("devices"), "status.allocation.devices", ref, required=False)

    results = tuple(_parse_results(devices.get("results"), driver, ref))
    if not results:
        raise ClaimError(
            f"{ref}: status.allocation.devices.results has no device for driver {driver}"
        )
    configs = tuple(_parse_configs(devices.get("config"), driver, ref))

    raw_selector = allocation.get("nodeSelector")
    node_selector: Mapping[str, Any] | None = None
    if raw_selector is not None:
        node_selector = MappingProxyType(
            dict(_mapping(raw_selector, "status.allocation.nodeSelector", ref, required=True))
        )

    return AllocatedClaim(
        namespace=namespace,
        name=name,
        uid=uid,
        results=results,
        configs=configs,
        node_selector=node_selector,
    )


def _parse_results(raw: object, driver: str, ref: str) -> list[DeviceResult]:
    path = "status.allocation.devices.results"
    out: list[DeviceResult] = []
    for i, entry in enumerate(_list(raw, path, ref)):
        where = f"{path}[{i}]"
        item = _mapping(entry, where, ref, required=True)
        result_driver = _string(item.get("driver"), f"{where}.driver", ref)
        if result_driver != driver:
            continue
        request = _string(item.get("request"), f"{where}.request", ref)
        if not all(is_dns_label(part) for part in request.split("/", 1)):
            raise ClaimError(
                f"{ref}: {where}.request {_short(request)} is not '<request>' or "
                "'<request>/<subrequest>' made of DNS labels"
            )
        pool = _string(item.get("pool"), f"{where}.pool", ref)
        device = _string(item.get("device"), f"{where}.device", ref)
        if not is_dns_label(device):
            raise ClaimError(f"{ref}: {where}.device {_short(device)} is not a DNS label")
        admin_access = item.get("adminAccess")
        if admin_access is not None and not isinstance(admin_access, bool):
            raise ClaimError(
                f"{ref}: {where}.adminAccess must be true or false, got {_type_name(admin_access)}"
            )
        share_id = item.get("shareID")
        if share_id is not None:
            share_id = _string(share_id, f"{where}.shareID", ref)
        out.append(
            DeviceResult(
                request=request,
                driver=result_driver,
                pool=pool,
                device=device,
                admin_access=bool(admin_access),
                share_id=share_id,
                consumed_capacity=_quantities(
                    item.get("consumedCapacity"), f"{where}.consumedCapacity", ref
                ),
            )
        )
    return out


def _parse_configs(raw: object, driver: str, ref: str) -> list[OpaqueConfig]:
    """This driver's opaque configs, in allocation order.

    Entries without `opaque` are skipped: they cannot be addressed to any
    driver in the API versions this parser knows.
    """
    path = "status.allocation.devices.config"
    return [config for _, config in _config_entries(raw, driver, ref, path, source=None)]


def parse_spec_configs(
    raw: object, *, driver: str, ref: str, path: str
) -> list[tuple[int, OpaqueConfig]]:
    """`driver`'s opaque configs of a claim's spec (`spec.devices.config` at `path`), with
    their index there, parsed and bounded as an allocation's are (source "FromClaim").

    The admission check reads them so before the claim is allocated; raises ClaimError.
    """
    return list(_config_entries(raw, driver, ref, path, source=CONFIG_SOURCE_CLAIM))


def _config_entries(
    raw: object, driver: str, ref: str, path: str, *, source: str | None
) -> Iterator[tuple[int, OpaqueConfig]]:
    """(index, config) of `driver`'s opaque entries of the config list at `path`; `source`
    None reads each entry's own (an allocation's), else every entry has that source."""
    for i, entry in enumerate(_list(raw, path, ref)):
        where = f"{path}[{i}]"
        item = _mapping(entry, where, ref, required=True)
        opaque = _mapping(item.get("opaque"), f"{where}.opaque", ref, required=False)
        if not opaque:
            continue
        config_driver = _string(opaque.get("driver"), f"{where}.opaque.driver", ref)
        if config_driver != driver:
            continue
        entry_source = item.get("source") if source is None else source
        if not isinstance(entry_source, str) or entry_source not in _SOURCE_RANK:
            raise ClaimError(
                f"{ref}: {where}.source is {_short(entry_source)}, expected "
                f"{CONFIG_SOURCE_CLASS!r} or {CONFIG_SOURCE_CLAIM!r}"
            )
        requests = tuple(
            _string(r, f"{where}.requests[{j}]", ref)
            for j, r in enumerate(_list(item.get("requests"), f"{where}.requests", ref))
        )
        parameters = _mapping(
            opaque.get("parameters"), f"{where}.opaque.parameters", ref, required=True
        )
        _check_bounded(parameters, f"{where}.opaque.parameters", ref)
        yield (
            i,
            OpaqueConfig(
                source=entry_source,
                requests=requests,
                driver=config_driver,
                parameters=MappingProxyType(copy.deepcopy(dict(parameters))),
            ),
        )


def _check_bounded(parameters: Mapping[str, Any], where: str, ref: str) -> None:
    """Refuse parameters nested deeper than MAX_PARAMETERS_DEPTH or larger than the API
    allows, before anything recursive (copying, decoding) touches them."""
    stack: list[tuple[object, int]] = [(parameters, 1)]
    while stack:
        value, depth = stack.pop()
        if depth > MAX_PARAMETERS_DEPTH:
            raise ClaimError(
                f"{ref}: {where} is nested more than {MAX_PARAMETERS_DEPTH} levels deep; "
                "no GpuConfig or MigDeviceConfig field is"
            )
        if isinstance(value, Mapping):
            stack.extend((item, depth + 1) for item in value.values())
        elif isinstance(value, list | tuple):
            stack.extend((item, depth + 1) for item in value)
    try:
        size = len(json.dumps(parameters, separators=(",", ":"), default=str))
    except (TypeError, ValueError) as exc:
        raise ClaimError(f"{ref}: {where} is not JSON: {exc}") from exc
    if size > MAX_PARAMETERS_BYTES:
        raise ClaimError(
            f"{ref}: {where} is {size} bytes of JSON, more than the API's limit of "
            f"{MAX_PARAMETERS_BYTES // 1024} KiB"
        )


def _quantities(raw: object, where: str, ref: str) -> Mapping[str, str]:
    items = _mapping(raw, where, ref, required=False)
    out: dict[str, str] = {}
    for key, value in items.items():
        if not isinstance(key, str) or not key:
            raise ClaimError(f"{ref}: {where} has a key that is not a name: {_short(key)}")
        if isinstance(value, str) and value:
            out[key] = value
        elif isinstance(value, int) and not isinstance(value, bool):
            out[key] = str(value)
        else:
            raise ClaimError(
                f"{ref}: {where}[{_short(key)}] must be a quantity string, got {_type_name(value)}"
            )
    return MappingProxyType(out)


def _mapping(value: object, where: str, ref: str, *, required: bool) -> Mapping[str, Any]:
    if value is None:
        if required:
            raise ClaimError(f"{ref}: {where} is not set")
        return {}
    if not isinstance(value, Mapping):
        raise ClaimError(f"{ref}: {where} must be an object, got {_type_name(value)}")
    return value


def _list(value: object, where: str, ref: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list | tuple):
        raise ClaimError(f"{ref}: {where} must be a list, got {_type_name(value)}")
    return list(value)


def _string(value: object, where: str, ref: str) -> str:
    if value is None or value == "":
        raise ClaimError(f"{ref}: {where} is not set")
    if not isinstance(value, str):
        raise ClaimError(f"{ref}: {where} must be a string, got {_type_name(value)}")
    return value


def _type_name(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, Mapping):
        return "an object"
    if isinstance(value, list | tuple):
        return "a list"
    if isinstance(value, int | float | str):
        return f"{type(value).__name__} {_short(value)}"
    return type(value).__name__


def _short(value: object, limit: int = 64) -> str:
    """`repr(value)` cut to `limit` characters, so garbage cannot flood a message."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _fallback_ref(namespace: str | None, name: str | None, uid: str) -> str:
    if namespace is not None and name is not None:
        return f"{KIND} {namespace}/{name}"
    return f"{KIND} with uid {uid}"
