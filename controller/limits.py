"""The resource.k8s.io/v1 ResourceSlice limits, checked before anything is sent.

The apiserver rejects a ResourceSlice that breaks one of its limits, and a
rejected slice means a node whose GPUs the scheduler cannot see. The OpenAPI
schema only knows field types, so the limits that matter (devices per slice,
attributes per device, name formats, value lengths, semver, counters, taints)
are checked here, with the numbers of `k8s.io/api/resource/v1` and the rules
of `pkg/apis/resource/validation` for Kubernetes 1.34 and 1.35. 1.36 and 1.37
keep every 1.35 number checked here (k8s.io/api `resource/v1/types.go` on
release-1.36 and master at v0.37.0-beta.0, docs/kubernetes-versions.md); they
rename ResourceSliceMaxDevicesWithTaintsOrConsumesCounters to
...WithAdvancedFeatures (list-type attributes count too) and add the
list-typed attribute values (`ints`, `bools`, `strings`, `versions`,
DRAListTypeAttributes: non-empty lists) with
ResourceSliceMaxAttributeValuesPerDevice = 48 values per device. 1.34 and
1.35 know no list values.

Every message names the slice, the field path and, for device fields, the
device, e.g. `ResourceSlice node-a-gpu.nvidia.com-0: spec.devices[3].attributes
["productName"] (device gpu-3): string longer than 64 characters`.

`validate_schema` adds the OpenAPI check (kubernetes-validate, strict), which
catches unknown fields and wrong types; it is a test/CI tool, imported lazily.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from fractions import Fraction
from typing import Any, Final, TypeGuard

from dra_driver.errors import ConfigError, SliceError
from dra_driver.kube.names import (
    driver_name_errors,
    is_dns_label,
    is_dns_subdomain,
    label_key_errors,
    label_value_errors,
    pool_name_errors,
    qualified_name_errors,
)
from dra_driver.kube.quantity import INT64_MAX, parse_quantity
from dra_driver.node.devices import SEMVER_RE

SUPPORTED_VERSIONS: Final = ("1.34", "1.35", "1.36", "1.37")
DEFAULT_VERSION: Final = "1.35"

API_VERSION: Final = "resource.k8s.io/v1"
KIND: Final = "ResourceSlice"

RESOURCE_SLICE_MAX_DEVICES: Final = 128
# [1.35] ResourceSliceMaxDevicesWithTaintsOrConsumesCounters
RESOURCE_SLICE_MAX_DEVICES_WITH_TAINTS_OR_CONSUMES_COUNTERS: Final = 64
RESOURCE_SLICE_MAX_ATTRIBUTES_AND_CAPACITIES_PER_DEVICE: Final = 32
DEVICE_ATTRIBUTE_MAX_VALUE_LENGTH: Final = 64
# [1.36] DRAListTypeAttributes
RESOURCE_SLICE_MAX_ATTRIBUTE_VALUES_PER_DEVICE: Final = 48
_SCALAR_KINDS: Final = ("int", "bool", "string", "version")
_LIST_KINDS: Final = {"ints": "int", "bools": "bool", "strings": "string", "versions": "version"}
DEVICE_TAINTS_MAX_LENGTH: Final[dict[str, int]] = {"1.34": 4, "1.35": 16, "1.36": 16, "1.37": 16}
BINDING_CONDITIONS_MAX_SIZE: Final = 4
BINDING_FAILURE_CONDITIONS_MAX_SIZE: Final = 4
CAPACITY_REQUEST_POLICY_DISCRETE_MAX_OPTIONS: Final = 10
# [1.34] per-slice counter model
RESOURCE_SLICE_MAX_SHARED_COUNTERS: Final = 32
RESOURCE_SLICE_MAX_COUNTERS_PER_DEVICE: Final = 32
RESOURCE_SLICE_MAX_DEVICE_COUNTERS_PER_SLICE: Final = 1024
# [1.35] pool-wide counter model
RESOURCE_SLICE_MAX_COUNTER_SETS: Final = 8
RESOURCE_SLICE_MAX_COUNTERS_PER_COUNTER_SET: Final = 32
RESOURCE_SLICE_MAX_DEVICE_COUNTER_CONSUMPTIONS_PER_DEVICE: Final = 2
RESOURCE_SLICE_MAX_COUNTERS_PER_DEVICE_COUNTER_CONSUMPTION: Final = 32

TAINT_EFFECTS: Final[dict[str, frozenset[str]]] = {
    "1.34": frozenset({"NoSchedule", "NoExecute"}),
    "1.35": frozenset({"NoSchedule", "NoExecute", "None"}),
    "1.36": frozenset({"NoSchedule", "NoExecute", "None"}),
    "1.37": frozenset({"NoSchedule", "NoExecute", "None"}),
}


# --- the checks ----------------------------------------------------------------------


class _Errors:
    """Collects messages for one slice."""

    def __init__(self, slice_label: str) -> None:
        self.slice_label = slice_label
        self.messages: list[str] = []

    def add(self, path: str, message: str, device: str | None = None) -> None:
        where = f"{path} (device {device})" if device else path
        self.messages.append(f"{self.slice_label}: {where}: {message}")

    def extend(self, path: str, messages: Sequence[str], device: str | None = None) -> None:
        for message in messages:
            self.add(path, message, device)


def check_version(version: str) -> str:
    """The Kubernetes minor version ("1.34" ... "1.37") for "1.35", "1.35.0", "v1.35"."""
    short = ".".join(version.lstrip("v").split(".")[:2])
    if short not in SUPPORTED_VERSIONS:
        raise SliceError(
            f"Kubernetes version {version!r}: limits are known for {', '.join(SUPPORTED_VERSIONS)}"
        )
    return short


def slice_label(obj: Mapping[str, Any]) -> str:
    metadata = obj.get("metadata")
    name = metadata.get("name") if isinstance(metadata, Mapping) else None
    return f"ResourceSlice {name if isinstance(name, str) and name else '<unnamed>'}"


def validate_resource_slice(obj: Mapping[str, Any], *, version: str = DEFAULT_VERSION) -> list[str]:
    """Every apiserver limit `obj` breaks, one message each; [] when it would be accepted.

    `version` selects the 1.34 or the 1.35 rules (they differ in counters,
    taints and the 64-device limit; 1.36 and 1.37 keep the 1.35 rules).
    Raises SliceError only for an unsupported version.
    """
    k8s = check_version(version)
    errors = _Errors(slice_label(obj))
    if obj.get("apiVersion") != API_VERSION:
        errors.add("apiVersion", f"must be {API_VERSION!r}, not {obj.get('apiVersion')!r}")
    if obj.get("kind") != KIND:
        errors.add("kind", f"must be {KIND!r}, not {obj.get('kind')!r}")
    _check_metadata(errors, obj.get("metadata"))
    spec = obj.get("spec")
    if not isinstance(spec, Mapping):
        errors.add("spec", "required")
        return errors.messages
    _check_spec(errors, spec, k8s)
    return errors.messages


def validate_pool(
    slices: Sequence[Mapping[str, Any]], *, version: str = DEFAULT_VERSION
) -> list[str]:
    """Rules that span the slices of one pool, as consumers and the publishing helper check them.

    All slices name the same driver, pool and generation; `resourceSliceCount`
    equals the number of slices; device names are unique in the pool; with
    1.35, counter-set names are unique in the pool and every `consumesCounters`
    entry names a set and counters that exist.
    """
    k8s = check_version(version)
    messages: list[str] = []
    if not slices:
        return messages
    specs = [_spec(s) for s in slices]
    labels = [slice_label(s) for s in slices]
    keys = {(spec.get("driver"), _pool_field(spec, "name")) for spec in specs}
    if len(keys) > 1:
        messages.append(f"pool: slices disagree on driver/pool name: {sorted(map(str, keys))}")
    generations = {_pool_field(spec, "generation") for spec in specs}
    if len(generations) > 1:
        messages.append(f"pool: slices carry different generations {sorted(map(str, generations))}")
    for label, spec in zip(labels, specs, strict=True):
        count = _pool_field(spec, "resourceSliceCount")
        if count != len(slices):
            messages.append(
                f"{label}: spec.pool.resourceSliceCount: is {count!r} but the pool "
                f"has {len(slices)} slices"
            )
    device_owner: dict[str, str] = {}
    counter_sets: dict[str, tuple[str, set[str]]] = {}
    for label, spec in zip(labels, specs, strict=True):
        for i, device in enumerate(_list(spec.get("devices"))):
            name = device.get("name") if isinstance(device, Mapping) else None
            if not isinstance(name, str):
                continue
            if name in device_owner and device_owner[name] != label:
                messages.append(
                    f"{label}: spec.devices[{i}].name: device {name!r} is also "
                    f"listed in {device_owner[name]}"
                )
            device_owner.setdefault(name, label)
        for i, counter_set in enumerate(_list(spec.get("sharedCounters"))):
            if not isinstance(counter_set, Mapping) or not isinstance(counter_set.get("name"), str):
                continue
            set_name = counter_set["name"]
            if set_name in counter_sets and counter_sets[set_name][0] != label:
                messages.append(
                    f"{label}: spec.sharedCounters[{i}].name: counter set "
                    f"{set_name!r} is also defined in {counter_sets[set_name][0]}"
                )
            counters = counter_set.get("counters")
            names = set(counters) if isinstance(counters, Mapping) else set()
            counter_sets.setdefault(set_name, (label, names))
    if k8s != "1.34":
        for label, spec in zip(labels, specs, strict=True):
            for i, device in enumerate(_list(spec.get("devices"))):
                if not isinstance(device, Mapping):
                    continue
                for j, use in enumerate(_list(device.get("consumesCounters"))):
                    if not isinstance(use, Mapping):
                        continue
                    path = f"{label}: spec.devices[{i}].consumesCounters[{j}]"
                    set_name = use.get("counterSet")
                    if set_name not in counter_sets:
                        messages.append(
                            f"{path}.counterSet: {set_name!r} is not defined in the pool"
                        )
                        continue
                    counters = use.get("counters")
                    defined = counter_sets[str(set_name)][1]
                    for counter in sorted(counters) if isinstance(counters, Mapping) else []:
                        if counter not in defined:
                            messages.append(
                                f"{path}.counters[{counter!r}]: not defined in "
                                f"counter set {set_name!r}"
                            )
    return messages


def check_resource_slices(
    slices: Sequence[Mapping[str, Any]], *, version: str = DEFAULT_VERSION
) -> None:
    """Raise SliceError listing every problem of a pool's slices (per slice and pool-wide)."""
    messages = [m for s in slices for m in validate_resource_slice(s, version=version)]
    messages.extend(validate_pool(slices, version=version))
    if messages:
        raise SliceError("; ".join(messages))


def validate_schema(obj: Mapping[str, Any], version: str = DEFAULT_VERSION) -> None:
    """Check `obj` against the strict OpenAPI schema of Kubernetes `version`.

    Uses kubernetes-validate (a test dependency, imported here only). Raises
    SliceError naming the slice, the path and the schema's complaint.
    """
    k8s = check_version(version)
    label = slice_label(obj)
    try:
        import kubernetes_validate
    except ImportError as exc:
        raise SliceError(f"{label}: schema check needs the kubernetes-validate package") from exc
    try:
        kubernetes_validate.validate(dict(obj), f"{k8s}.0", strict=True)
    except kubernetes_validate.ValidationError as exc:
        path = ".".join(str(part) for part in exc.path) or "<root>"
        raise SliceError(f"{label}: {path}: {exc.message} (schema {k8s}, strict)") from exc
    except (kubernetes_validate.SchemaNotFoundError, kubernetes_validate.InvalidSchemaError) as exc:
        raise SliceError(f"{label}: no usable schema for Kubernetes {k8s}: {exc}") from exc


# --- internals -----------------------------------------------------------------------


def _spec(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    spec = obj.get("spec")
    return spec if isinstance(spec, Mapping) else {}


def _list(value: Any) -> list[Any]:
    return list(value) if isinstance(value, list | tuple) else []


def _pool_field(spec: Mapping[str, Any], key: str) -> Any:
    pool = spec.get("pool")
    return pool.get(key) if isinstance(pool, Mapping) else None


def _is_int(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _quantity(value: Any) -> Fraction | None:
    """A capacity/counter value as a number; None when it is not a quantity."""
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        return None
    try:
        return parse_quantity(str(value)).value
    except ConfigError:
        return None


def _check_metadata(errors: _Errors, metadata: Any) -> None:
    if not isinstance(metadata, Mapping):
        errors.add("metadata", "required")
        return
    name = metadata.get("name")
    generate_name = metadata.get("generateName")
    if name is None or name == "":
        if not generate_name:
            errors.add("metadata.name", "name or generateName is required")
        elif not isinstance(generate_name, str) or not is_dns_subdomain(
            generate_name.rstrip("-") + "-x"
        ):
            errors.add("metadata.generateName", f"{generate_name!r} is not a valid name prefix")
    elif not isinstance(name, str) or not is_dns_subdomain(name):
        errors.add(
            "metadata.name",
            f"{name!r} is not a DNS subdomain (lowercase alphanumeric, "
            "'-' or '.', at most 253 characters)",
        )


def _check_spec(errors: _Errors, spec: Mapping[str, Any], k8s: str) -> None:
    driver = spec.get("driver")
    if not isinstance(driver, str):
        errors.add("spec.driver", "required")
    else:
        errors.extend("spec.driver", driver_name_errors(driver))
    _check_pool(errors, spec.get("pool"))
    _check_node_selection(errors, spec)

    devices = spec.get("devices")
    shared = spec.get("sharedCounters")
    if k8s != "1.34" and devices is not None and shared is not None:
        errors.add("spec", "only one of `sharedCounters` or `devices` is allowed")
    if devices is not None and not isinstance(devices, list):
        errors.add("spec.devices", "must be a list")
        devices = None
    if shared is not None and not isinstance(shared, list):
        errors.add("spec.sharedCounters", "must be a list")
        shared = None
    defined_counters = _check_shared_counters(errors, shared or [], k8s)
    if devices is not None:
        _check_devices(errors, spec, devices, k8s, defined_counters)


def _check_pool(errors: _Errors, pool: Any) -> None:
    if not isinstance(pool, Mapping):
        errors.add("spec.pool", "required")
        return
    name = pool.get("name")
    if not isinstance(name, str):
        errors.add("spec.pool.name", "required")
    else:
        errors.extend("spec.pool.name", pool_name_errors(name))
    generation = pool.get("generation")
    if not _is_int(generation):
        errors.add("spec.pool.generation", "must be an integer")
    elif generation < 0:
        errors.add("spec.pool.generation", f"{generation}: must be greater than or equal to zero")
    count = pool.get("resourceSliceCount")
    if not _is_int(count):
        errors.add("spec.pool.resourceSliceCount", "must be an integer")
    elif count <= 0:
        errors.add("spec.pool.resourceSliceCount", f"{count}: must be greater than zero")


def _check_node_selection(errors: _Errors, spec: Mapping[str, Any]) -> None:
    chosen = []
    node_name = spec.get("nodeName")
    if node_name is not None:
        if node_name == "":
            errors.add("spec.nodeName", "must be either unset or set to a non-empty string")
        elif not isinstance(node_name, str) or not is_dns_subdomain(node_name):
            errors.add("spec.nodeName", f"{node_name!r} is not a valid node name (DNS subdomain)")
            chosen.append("nodeName")
        else:
            chosen.append("nodeName")
    selector = spec.get("nodeSelector")
    if selector is not None:
        chosen.append("nodeSelector")
        terms = selector.get("nodeSelectorTerms") if isinstance(selector, Mapping) else None
        if not isinstance(terms, list) or len(terms) != 1:
            errors.add(
                "spec.nodeSelector.nodeSelectorTerms", "must have exactly one node selector term"
            )
    for flag in ("allNodes", "perDeviceNodeSelection"):
        value = spec.get(flag)
        if value is None:
            continue
        if value is True:
            chosen.append(flag)
        else:
            errors.add(f"spec.{flag}", "must be either unset or set to true")
    if not chosen:
        errors.add(
            "spec",
            "exactly one of `nodeName`, `nodeSelector`, `allNodes`, "
            "`perDeviceNodeSelection` is required",
        )
    elif len(chosen) > 1:
        errors.add(
            "spec",
            f"exactly one of `nodeName`, `nodeSelector`, `allNodes`, "
            f"`perDeviceNodeSelection` is required, but {chosen} are set",
        )


def _check_shared_counters(errors: _Errors, shared: list[Any], k8s: str) -> dict[str, set[str]]:
    """Check `spec.sharedCounters`; return set name -> counter names (for 1.34 references)."""
    defined: dict[str, set[str]] = {}
    if k8s != "1.34" and len(shared) > RESOURCE_SLICE_MAX_COUNTER_SETS:
        errors.add(
            "spec.sharedCounters",
            f"{len(shared)} counter sets: must have at most {RESOURCE_SLICE_MAX_COUNTER_SETS}",
        )
        return defined
    total = 0
    for i, counter_set in enumerate(shared):
        path = f"spec.sharedCounters[{i}]"
        if not isinstance(counter_set, Mapping):
            errors.add(path, "must be an object")
            continue
        name = counter_set.get("name")
        if not isinstance(name, str) or not name:
            errors.add(f"{path}.name", "required")
        elif not is_dns_label(name):
            errors.add(f"{path}.name", f"{name!r} is not a DNS label")
        if isinstance(name, str) and name in defined:
            errors.add(f"{path}.name", f"duplicate counter set {name!r}")
        counters = counter_set.get("counters")
        if not isinstance(counters, Mapping) or not counters:
            errors.add(f"{path}.counters", "required")
            counters = {}
        if k8s != "1.34" and len(counters) > RESOURCE_SLICE_MAX_COUNTERS_PER_COUNTER_SET:
            errors.add(
                f"{path}.counters",
                f"{len(counters)} counters: must have at most "
                f"{RESOURCE_SLICE_MAX_COUNTERS_PER_COUNTER_SET}",
            )
        else:
            _check_counters(errors, f"{path}.counters", counters, None)
        total += len(counters)
        if isinstance(name, str):
            defined.setdefault(name, set(counters))
    if k8s == "1.34" and total > RESOURCE_SLICE_MAX_SHARED_COUNTERS:
        errors.add(
            "spec.sharedCounters",
            f"{total} counters in all sets: the total number of "
            f"shared counters must not exceed "
            f"{RESOURCE_SLICE_MAX_SHARED_COUNTERS}",
        )
    return defined


def _check_counters(
    errors: _Errors, path: str, counters: Mapping[str, Any], device: str | None
) -> None:
    for key in sorted(counters, key=str):
        key_path = f'{path}["{key}"]'
        if not isinstance(key, str) or not is_dns_label(key):
            errors.add(key_path, f"counter name {key!r} is not a DNS label", device)
        counter = counters[key]
        value = counter.get("value") if isinstance(counter, Mapping) else None
        if value is None:
            errors.add(f"{key_path}.value", "required", device)
        elif _quantity(value) is None:
            errors.add(f"{key_path}.value", f"{value!r} is not a quantity", device)


def _check_devices(
    errors: _Errors,
    spec: Mapping[str, Any],
    devices: list[Any],
    k8s: str,
    defined_counters: dict[str, set[str]],
) -> None:
    advanced = any(
        isinstance(d, Mapping)
        and (d.get("taints") or d.get("consumesCounters") or _has_list_attribute(d))
        for d in devices
    )
    limit = RESOURCE_SLICE_MAX_DEVICES
    if k8s != "1.34" and advanced:
        limit = RESOURCE_SLICE_MAX_DEVICES_WITH_TAINTS_OR_CONSUMES_COUNTERS
    if len(devices) > limit:
        features = (
            "taints or consumesCounters"
            if k8s in ("1.34", "1.35")
            else "taints, consumesCounters or list-typed attributes"
        )
        why = f" (some device has {features})" if limit < RESOURCE_SLICE_MAX_DEVICES else ""
        errors.add("spec.devices", f"{len(devices)} devices: must have at most {limit}{why}")
        return
    seen: set[str] = set()
    slice_counters = 0
    per_device_selection = spec.get("perDeviceNodeSelection") is True
    for i, device in enumerate(devices):
        path = f"spec.devices[{i}]"
        if not isinstance(device, Mapping):
            errors.add(path, "must be an object")
            continue
        name = device.get("name")
        label = name if isinstance(name, str) and name else None
        if label is None:
            errors.add(f"{path}.name", "required")
        elif not is_dns_label(label):
            errors.add(
                f"{path}.name",
                f"{label!r} is not a DNS label (lowercase alphanumeric or "
                "'-', at most 63 characters)",
                label,
            )
        elif label in seen:
            errors.add(f"{path}.name", f"duplicate device name {label!r}", label)
        if label:
            seen.add(label)
        slice_counters += _check_device(
            errors,
            path=path,
            name=label,
            device=device,
            k8s=k8s,
            defined_counters=defined_counters,
            per_device_selection=per_device_selection,
        )
    if k8s == "1.34" and slice_counters > RESOURCE_SLICE_MAX_DEVICE_COUNTERS_PER_SLICE:
        errors.add(
            "spec.devices",
            f"{slice_counters} consumed counters: the total number of "
            f"counters in devices must not exceed "
            f"{RESOURCE_SLICE_MAX_DEVICE_COUNTERS_PER_SLICE}",
        )


def _check_device(
    errors: _Errors,
    *,
    path: str,
    name: str | None,
    device: Mapping[str, Any],
    k8s: str,
    defined_counters: dict[str, set[str]],
    per_device_selection: bool,
) -> int:
    """Check one device; return how many counters it consumes (for the 1.34 slice total)."""
    attributes = device.get("attributes")
    capacity = device.get("capacity")
    attributes = attributes if isinstance(attributes, Mapping) else {}
    capacity = capacity if isinstance(capacity, Mapping) else {}
    for field_name in ("attributes", "capacity"):
        if device.get(field_name) is not None and not isinstance(device.get(field_name), Mapping):
            errors.add(f"{path}.{field_name}", "must be an object", name)
    total = len(attributes) + len(capacity)
    if total > RESOURCE_SLICE_MAX_ATTRIBUTES_AND_CAPACITIES_PER_DEVICE:
        errors.add(
            path,
            f"{total} attributes and capacities: the total must not exceed "
            f"{RESOURCE_SLICE_MAX_ATTRIBUTES_AND_CAPACITIES_PER_DEVICE}",
            name,
        )
    values = 0
    for key in sorted(attributes, key=str):
        key_path = f'{path}.attributes["{key}"]'
        errors.extend(key_path, qualified_name_errors(str(key)), name)
        values += _check_attribute(errors, key_path, attributes[key], name, k8s)
    if values > RESOURCE_SLICE_MAX_ATTRIBUTE_VALUES_PER_DEVICE and k8s not in ("1.34", "1.35"):
        errors.add(
            f"{path}.attributes",
            f"{values} attribute values: must have at most "
            f"{RESOURCE_SLICE_MAX_ATTRIBUTE_VALUES_PER_DEVICE}",
            name,
        )

    multi = device.get("allowMultipleAllocations")
    if multi is not None and not isinstance(multi, bool):
        errors.add(f"{path}.allowMultipleAllocations", "must be a boolean", name)
    for key in sorted(capacity, key=str):
        key_path = f'{path}.capacity["{key}"]'
        errors.extend(key_path, qualified_name_errors(str(key)), name)
        _check_capacity(errors, key_path, capacity[key], multi is True, name)

    _check_taints(errors, path, device.get("taints"), k8s, name)
    consumed = _check_consumes_counters(
        errors,
        path=path,
        uses=device.get("consumesCounters"),
        k8s=k8s,
        defined_counters=defined_counters,
        device=name,
    )
    _check_device_node_selection(errors, path, device, per_device_selection, name)
    _check_binding(errors, path, device, name)
    return consumed


def _has_list_attribute(device: Mapping[str, Any]) -> bool:
    attributes = device.get("attributes")
    if not isinstance(attributes, Mapping):
        return False
    return any(
        isinstance(a, Mapping) and any(a.get(kind) is not None for kind in _LIST_KINDS)
        for a in attributes.values()
    )


def _check_attribute(
    errors: _Errors, path: str, attribute: Any, device: str | None, k8s: str
) -> int:
    """Check one attribute; return how many values it holds (a list counts each)."""
    kinds = (*_SCALAR_KINDS, *_LIST_KINDS) if k8s not in ("1.34", "1.35") else _SCALAR_KINDS
    if not isinstance(attribute, Mapping):
        errors.add(path, f"must be an object with exactly one of {', '.join(kinds)}", device)
        return 0
    present = [key for key in kinds if attribute.get(key) is not None]
    unknown = sorted(set(attribute) - set(kinds))
    if unknown:
        errors.add(path, f"unknown value fields {unknown}", device)
    if len(present) != 1:
        errors.add(path, f"exactly one value must be specified, found {present or 'none'}", device)
    count = 0
    for key in present:
        value = attribute[key]
        if key in _LIST_KINDS:
            if not isinstance(value, list | tuple) or not value:
                errors.add(path, f"{key} must be a non-empty list", device)
                continue
            for i, item in enumerate(value):
                _check_scalar(errors, f"{path}.{key}[{i}]", _LIST_KINDS[key], item, device)
            count += len(value)
        else:
            _check_scalar(errors, path, key, value, device)
            count += 1
    return count


def _check_scalar(errors: _Errors, path: str, key: str, value: Any, device: str | None) -> None:
    if key == "int" and (not _is_int(value) or not -INT64_MAX - 1 <= value <= INT64_MAX):
        errors.add(path, f"int {value!r} is not a 64-bit integer", device)
    elif key == "bool" and not isinstance(value, bool):
        errors.add(path, f"bool {value!r} is not a boolean", device)
    elif key in ("string", "version"):
        if not isinstance(value, str):
            errors.add(path, f"{key} {value!r} is not a string", device)
            return
        if len(value) > DEVICE_ATTRIBUTE_MAX_VALUE_LENGTH:
            errors.add(
                path,
                f"{key} longer than {DEVICE_ATTRIBUTE_MAX_VALUE_LENGTH} characters",
                device,
            )
        if key == "version" and not SEMVER_RE.match(value):
            errors.add(path, f"version {value!r} is not a semver 2.0.0 version", device)


def _check_capacity(
    errors: _Errors, path: str, capacity: Any, multi: bool, device: str | None
) -> None:
    if not isinstance(capacity, Mapping):
        errors.add(path, "must be an object with a value", device)
        return
    value = _quantity(capacity.get("value"))
    if capacity.get("value") is None:
        errors.add(f"{path}.value", "required", device)
    elif value is None:
        errors.add(f"{path}.value", f"{capacity.get('value')!r} is not a quantity", device)
    policy = capacity.get("requestPolicy")
    if policy is None:
        return
    if not multi:
        errors.add(f"{path}.requestPolicy", "allowMultipleAllocations must be true", device)
        return
    if value is not None and isinstance(policy, Mapping):
        _check_request_policy(errors, f"{path}.requestPolicy", value, policy, device)


def _check_request_policy(
    errors: _Errors, path: str, capacity: Fraction, policy: Mapping[str, Any], device: str | None
) -> None:
    valid_values = policy.get("validValues")
    valid_range = policy.get("validRange")
    if valid_values and valid_range is not None:
        errors.add(
            path,
            'exactly one policy can be specified, cannot specify "validValues" and '
            '"validRange" at the same time',
            device,
        )
        return
    raw_default = policy.get("default")
    default = _quantity(raw_default)
    if raw_default is not None and default is None:
        errors.add(f"{path}.default", f"{raw_default!r} is not a quantity", device)
        return
    if valid_values:
        if default is None:
            errors.add(f"{path}.default", "required when validValues is defined", device)
            return
        if len(valid_values) > CAPACITY_REQUEST_POLICY_DISCRETE_MAX_OPTIONS:
            errors.add(
                f"{path}.validValues",
                f"{len(valid_values)} values: must have at most "
                f"{CAPACITY_REQUEST_POLICY_DISCRETE_MAX_OPTIONS}",
                device,
            )
            return
        options = [_quantity(v) for v in valid_values]
        for i, (raw, option) in enumerate(zip(valid_values, options, strict=True)):
            if option is None:
                errors.add(f"{path}.validValues[{i}]", f"{raw!r} is not a quantity", device)
            elif option > capacity:
                errors.add(
                    f"{path}.validValues[{i}]", "option is larger than capacity value", device
                )
            if i and option is not None and options[i - 1] is not None:
                previous = options[i - 1]
                if previous is not None and previous > option:
                    errors.add(
                        f"{path}.validValues[{i}]",
                        "values must be sorted in ascending order",
                        device,
                    )
                elif previous == option:
                    errors.add(f"{path}.validValues[{i}]", "duplicate value", device)
        if default not in options:
            errors.add(
                f"{path}.validValues",
                "default value is not valid according to the requestPolicy",
                device,
            )
        return
    if valid_range is None:
        return
    if default is None:
        errors.add(f"{path}.default", "required when validRange is defined", device)
        return
    low = _quantity(valid_range.get("min")) if isinstance(valid_range, Mapping) else None
    if low is None:
        errors.add(f"{path}.validRange.min", "required when validRange is defined", device)
        return
    high = _quantity(valid_range.get("max"))
    step = _quantity(valid_range.get("step"))
    rpath = f"{path}.validRange"
    if low > capacity:
        errors.add(f"{rpath}.min", "min is larger than capacity value", device)
    if default < low:
        errors.add(f"{rpath}.default", "default is less than min", device)
    if high is not None:
        if low > high:
            errors.add(f"{rpath}.max", "min is larger than max", device)
        if high > capacity:
            errors.add(f"{rpath}.max", "max is larger than capacity value", device)
        if default > high:
            errors.add(f"{rpath}.default", "default is more than max", device)
    if step is not None:
        if step <= 0:
            errors.add(f"{rpath}.step", "must be greater than zero", device)
            return
        if low + step > capacity:
            errors.add(f"{rpath}.step", "one step is larger than capacity value", device)
        for label, value in (("default", default), ("max", high)):
            if value is not None and (value - low) % step != 0:
                errors.add(f"{rpath}.step", f"{label} is not a multiple of step from min", device)


def _check_taints(errors: _Errors, path: str, taints: Any, k8s: str, device: str | None) -> None:
    if taints is None:
        return
    if not isinstance(taints, list):
        errors.add(f"{path}.taints", "must be a list", device)
        return
    limit = DEVICE_TAINTS_MAX_LENGTH[k8s]
    if len(taints) > limit:
        errors.add(f"{path}.taints", f"{len(taints)} taints: must have at most {limit}", device)
        return
    for i, taint in enumerate(taints):
        tpath = f"{path}.taints[{i}]"
        if not isinstance(taint, Mapping):
            errors.add(tpath, "must be an object", device)
            continue
        errors.extend(f"{tpath}.key", label_key_errors(str(taint.get("key") or "")), device)
        value = taint.get("value")
        if value:
            errors.extend(f"{tpath}.value", label_value_errors(str(value)), device)
        effect = taint.get("effect")
        if not effect:
            errors.add(f"{tpath}.effect", "required", device)
        elif effect not in TAINT_EFFECTS[k8s]:
            errors.add(
                f"{tpath}.effect", f"{effect!r} is not one of {sorted(TAINT_EFFECTS[k8s])}", device
            )


def _check_consumes_counters(
    errors: _Errors,
    *,
    path: str,
    uses: Any,
    k8s: str,
    defined_counters: dict[str, set[str]],
    device: str | None,
) -> int:
    if uses is None:
        return 0
    cpath = f"{path}.consumesCounters"
    if not isinstance(uses, list):
        errors.add(cpath, "must be a list", device)
        return 0
    if k8s != "1.34" and len(uses) > RESOURCE_SLICE_MAX_DEVICE_COUNTER_CONSUMPTIONS_PER_DEVICE:
        errors.add(
            cpath,
            f"{len(uses)} entries: must have at most "
            f"{RESOURCE_SLICE_MAX_DEVICE_COUNTER_CONSUMPTIONS_PER_DEVICE}",
            device,
        )
        return 0
    total = 0
    seen: set[str] = set()
    for i, use in enumerate(uses):
        upath = f"{cpath}[{i}]"
        if not isinstance(use, Mapping):
            errors.add(upath, "must be an object", device)
            continue
        set_name = use.get("counterSet")
        if not isinstance(set_name, str) or not set_name:
            errors.add(f"{upath}.counterSet", "required", device)
            set_name = ""
        elif not is_dns_label(set_name):
            errors.add(f"{upath}.counterSet", f"{set_name!r} is not a DNS label", device)
        if k8s != "1.34" and set_name:
            if set_name in seen:
                errors.add(f"{upath}.counterSet", f"duplicate counter set {set_name!r}", device)
            seen.add(set_name)
        counters = use.get("counters")
        if not isinstance(counters, Mapping) or not counters:
            errors.add(f"{upath}.counters", "required", device)
            counters = {}
        if (
            k8s != "1.34"
            and len(counters) > RESOURCE_SLICE_MAX_COUNTERS_PER_DEVICE_COUNTER_CONSUMPTION
        ):
            errors.add(
                f"{upath}.counters",
                f"{len(counters)} counters: must have at most "
                f"{RESOURCE_SLICE_MAX_COUNTERS_PER_DEVICE_COUNTER_CONSUMPTION}",
                device,
            )
        else:
            _check_counters(errors, f"{upath}.counters", counters, device)
        if k8s == "1.34":
            if set_name not in defined_counters:
                errors.add(
                    f"{upath}.counterSet",
                    f"{set_name!r}: must reference a counterSet "
                    "defined in the ResourceSlice sharedCounters",
                    device,
                )
            else:
                for counter in sorted(counters, key=str):
                    if counter not in defined_counters[set_name]:
                        errors.add(
                            f"{upath}.counters",
                            f"{counter!r}: must reference a counter "
                            "defined in the ResourceSlice sharedCounters",
                            device,
                        )
        total += len(counters)
    if k8s == "1.34" and total > RESOURCE_SLICE_MAX_COUNTERS_PER_DEVICE:
        errors.add(
            path,
            f"{total} counters: the total number of counters must not exceed "
            f"{RESOURCE_SLICE_MAX_COUNTERS_PER_DEVICE}",
            device,
        )
    return total


def _check_device_node_selection(
    errors: _Errors, path: str, device: Mapping[str, Any], per_device: bool, name: str | None
) -> None:
    fields = {key: device.get(key) for key in ("nodeName", "nodeSelector", "allNodes")}
    if not per_device:
        if any(value is not None for value in fields.values()):
            errors.add(
                path,
                "`nodeName`, `nodeSelector` and `allNodes` can only be set if "
                "`perDeviceNodeSelection` is set to true in the ResourceSlice spec",
                name,
            )
        return
    chosen = []
    node_name = fields["nodeName"]
    if node_name is not None:
        if not node_name:
            errors.add(f"{path}.nodeName", "must not be empty", name)
        elif not isinstance(node_name, str) or not is_dns_subdomain(node_name):
            errors.add(f"{path}.nodeName", f"{node_name!r} is not a valid node name", name)
            chosen.append("nodeName")
        else:
            chosen.append("nodeName")
    if fields["nodeSelector"] is not None:
        chosen.append("nodeSelector")
    all_nodes = fields["allNodes"]
    if all_nodes is not None:
        if all_nodes is True:
            chosen.append("allNodes")
        else:
            errors.add(f"{path}.allNodes", "must be either unset or set to true", name)
    if len(chosen) != 1:
        errors.add(
            path,
            "exactly one of `nodeName`, `nodeSelector`, or `allNodes` is required "
            "when `perDeviceNodeSelection` is set to true",
            name,
        )


def _check_binding(errors: _Errors, path: str, device: Mapping[str, Any], name: str | None) -> None:
    binds = device.get("bindsToNode")
    if binds is not None and not isinstance(binds, bool):
        errors.add(f"{path}.bindsToNode", "must be a boolean", name)
    conditions = _list(device.get("bindingConditions"))
    failures = _list(device.get("bindingFailureConditions"))
    for key, items, limit in (
        ("bindingConditions", conditions, BINDING_CONDITIONS_MAX_SIZE),
        ("bindingFailureConditions", failures, BINDING_FAILURE_CONDITIONS_MAX_SIZE),
    ):
        if len(items) > limit:
            errors.add(f"{path}.{key}", f"{len(items)} conditions: must have at most {limit}", name)
            continue
        seen: set[str] = set()
        for i, condition in enumerate(items):
            errors.extend(f"{path}.{key}[{i}]", label_key_errors(str(condition)), name)
            if condition in seen:
                errors.add(f"{path}.{key}[{i}]", f"duplicate condition {condition!r}", name)
            seen.add(str(condition))
    for i, condition in enumerate(failures):
        if condition in conditions:
            errors.add(
                f"{path}.bindingFailureConditions[{i}]",
                "bindingFailureConditions must not overlap with bindingConditions",
                name,
            )
    if failures and not conditions:
        errors.add(
            f"{path}.bindingConditions",
            "bindingConditions are required to use bindingFailureConditions",
            name,
        )
    if conditions and not failures:
        errors.add(
            f"{path}.bindingFailureConditions",
            "bindingFailureConditions are required to use bindingConditions",
            name,
        )
