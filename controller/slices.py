"""Devices to resource.k8s.io/v1 ResourceSlice objects, pure and deterministic.

A node publishes one pool, named after the node, holding all its devices. The
apiserver allows at most 128 devices per slice, so a large pool is split over
several slices and every slice says how many there are (`resourceSliceCount`),
which is how consumers know they have seen the whole pool.

Slice names are deterministic, `<node>-<driver>-<i>`, instead of the helper
library's `generateName`: the same devices always give the same objects, so
the publisher can update slices in place by name (no create/delete churn, no
duplicate left behind when a create succeeds but its reply is lost), and the
local cluster store names its files after them. Device order is stable too:
GPUs in PCI bus id order, then device name (dynamic MIG devices in placement
order), so a republish is a no-op diff.

Partitionable devices (dynamic MIG) also need their GPUs' counter sets, and
the two Kubernetes releases disagree on where those live (`layout`):

* `v1.34`: counters are per slice. A GPU's counter set sits in the same
  slice as all of its devices. GPUs are packed several to a slice as long as
  the 1.34 limits allow (at most 32 counters summed over the slice's sets,
  128 devices, 1024 consumed counters): two 8-slot GPUs (15 counters each)
  per slice. A GPU is never split.
* `v1.35`: counter sets are pool-wide and live in counter-only slices (at
  most 8 sets each), placed first; devices go in device slices of at most 64
  devices once any of them consumes counters. Device slices are
  profile-major: all devices of one MIG profile (every GPU) share a slice,
  whole profiles per slice where they fit (an 8-GPU H100 node: 1g.10gb;
  1g.10gb+me; 1g.20gb + 2g.20gb; 3g, 4g, 7g and the full GPUs).

Both matter for placement: the scheduler tries devices in slice order, but
the order of the slices themselves is unspecified, so only devices in the
same slice are tried in our order (`dra_driver.node.placement_order`).
Pools without counters are split exactly as before (128 devices per slice, in
order), whatever the layout.

Every slice built here has passed `controller.limits` (per slice and
pool-wide) before it is returned; an invalid slice raises SliceError instead.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal, cast

from controller.limits import (
    API_VERSION,
    DEFAULT_VERSION,
    KIND,
    RESOURCE_SLICE_MAX_COUNTER_SETS,
    RESOURCE_SLICE_MAX_DEVICE_COUNTERS_PER_SLICE,
    RESOURCE_SLICE_MAX_DEVICES,
    RESOURCE_SLICE_MAX_DEVICES_WITH_TAINTS_OR_CONSUMES_COUNTERS,
    RESOURCE_SLICE_MAX_SHARED_COUNTERS,
    check_resource_slices,
    check_version,
)
from dra_driver.errors import ConfigError, SliceError
from dra_driver.kube.names import DNS_SUBDOMAIN_MAX_LENGTH, driver_name_errors, is_dns_subdomain
from dra_driver.node.devices import AllocatableDevice
from dra_driver.node.dynamic_mig import CounterSet
from dra_driver.node.placement_order import order_devices, profile_groups

Layout = Literal["v1.34", "v1.35"]
LAYOUTS: Final[tuple[Layout, ...]] = ("v1.34", "v1.35")

_INVALID_NAME_CHARS: Final = re.compile(r"[^a-z0-9.-]+")
_HASH_LENGTH: Final = 10


def resource_slice_name(node_name: str, driver: str, index: int) -> str:
    """`<node>-<driver>-<index>` as a valid, stable DNS subdomain of at most 253 characters.

    Characters a subdomain cannot hold become '-', and every dot-separated
    label starts and ends alphanumeric. A prefix too long to fit is cut and
    given a short hash of the full prefix, so distinct nodes keep distinct names.
    """
    prefix = _sanitize(f"{node_name}-{driver}")
    suffix = f"-{index}"
    if len(prefix) + len(suffix) > DNS_SUBDOMAIN_MAX_LENGTH:
        digest = hashlib.sha256(prefix.encode()).hexdigest()[:_HASH_LENGTH]
        room = DNS_SUBDOMAIN_MAX_LENGTH - len(suffix) - len(digest) - 1
        prefix = f"{_sanitize(prefix[:room])}-{digest}"
    return f"{prefix}{suffix}"


def choose_layout(server_version: tuple[int, int] | None, requested: str = "auto") -> Layout:
    """The slice layout for `--partitionable-layout auto|v1.34|v1.35`.

    An explicit layout wins. `auto` follows the server: 1.35 and later (the
    pool-wide counter model stays from 1.35 on) -> v1.35; 1.34 and older ->
    v1.34. An unknown server version gives v1.35, the model every release from
    1.35 on uses: if the server is really 1.34 it rejects the device slices
    loudly (their counter sets are not in the same slice) instead of
    double-booking anything. Raises ConfigError for any other `requested`.
    """
    if requested in LAYOUTS:
        return requested
    if requested != "auto":
        raise ConfigError(
            f"partitionable layout {requested!r}: must be one of auto, {', '.join(LAYOUTS)}"
        )
    if server_version is None or server_version >= (1, 35):
        return "v1.35"
    return "v1.34"


def build_resource_slices(
    devices: Sequence[AllocatableDevice],
    *,
    driver: str,
    node_name: str,
    pool_name: str | None = None,
    generation: int = 0,
    max_devices_per_slice: int = RESOURCE_SLICE_MAX_DEVICES,
    version: str | None = None,
    layout: Layout | None = None,
    taints: Mapping[str, Sequence[Mapping[str, Any]]] | None = None,
) -> list[dict[str, Any]]:
    """The complete ResourceSlice objects publishing `devices` for one node.

    One pool (default name: the node name) at `generation`. Without counters
    the devices are split into slices of at most `max_devices_per_slice`; a
    node with no devices still gets one empty slice, so consumers see the pool
    and know it is empty. Devices that consume counters are laid out per
    `layout` (see the module docstring) with the counter sets their
    `counter_sets` define; a counter set no device defines makes the pool fail
    the checks. Devices are published in `dra_driver.node.placement_order` order.

    `version` is the Kubernetes release whose limits apply ("1.34"/"1.35");
    `layout` defaults to the one of `version`, `version` to the one of
    `layout`, both to 1.35, or to 1.36 where a device has a list-typed
    attribute (DRAListTypeAttributes): such slices also hold at most 64
    devices, the apiserver's limit for slices with advanced features.

    `taints` maps device names to the `taints` their entries carry (device
    health); with any taint, slices hold at most 64 devices, the apiserver's
    limit for slices with taints.

    Raises SliceError for bad arguments, a layout that does not match the
    version, or if any slice would break an apiserver limit of that version.
    """
    lists = any(device.has_list_attributes for device in devices)
    if version is None and lists:
        version = "1.36"  # the first release with list-typed attributes
    k8s, chosen_layout = _resolve_version(version, layout)
    if errors := driver_name_errors(driver):
        raise SliceError(f"driver name {driver!r}: {'; '.join(errors)}")
    if not node_name or not is_dns_subdomain(node_name):
        raise SliceError(f"node name {node_name!r}: not a valid node name (DNS subdomain)")
    if isinstance(generation, bool) or not isinstance(generation, int) or generation < 0:
        raise SliceError(f"pool generation {generation!r}: must be an integer >= 0")
    if not 1 <= max_devices_per_slice <= RESOURCE_SLICE_MAX_DEVICES:
        raise SliceError(
            f"max devices per slice {max_devices_per_slice}: "
            f"must be 1..{RESOURCE_SLICE_MAX_DEVICES}"
        )

    device_taints: dict[str, list[Mapping[str, Any]]] = {
        name: list(entries) for name, entries in (taints or {}).items() if entries
    }
    if device_taints or lists:
        max_devices_per_slice = min(
            max_devices_per_slice, RESOURCE_SLICE_MAX_DEVICES_WITH_TAINTS_OR_CONSUMES_COUNTERS
        )
    ordered = order_devices(devices)
    specs: list[_SliceContent]
    if not any(device.consumes_counters for device in ordered):
        specs = [
            _SliceContent(devices=ordered[i : i + max_devices_per_slice])
            for i in range(0, len(ordered), max_devices_per_slice)
        ] or [_SliceContent()]
    elif chosen_layout == "v1.34":
        specs = _layout_134(_gpu_groups(ordered), max_devices_per_slice)
    else:
        specs = _layout_135(_gpu_groups(ordered), ordered, max_devices_per_slice)

    pool = pool_name if pool_name is not None else node_name
    slices = [
        {
            "apiVersion": API_VERSION,
            "kind": KIND,
            "metadata": {"name": resource_slice_name(node_name, driver, index)},
            "spec": _spec(
                content,
                driver=driver,
                node_name=node_name,
                pool=pool,
                generation=generation,
                count=len(specs),
                taints=device_taints,
            ),
        }
        for index, content in enumerate(specs)
    ]
    check_resource_slices(slices, version=k8s)
    return slices


@dataclass
class _SliceContent:
    """What one slice holds before it is rendered."""

    devices: list[AllocatableDevice] = field(default_factory=list)
    counter_sets: list[CounterSet] = field(default_factory=list)
    counter_slice: bool = False


@dataclass
class _GpuGroup:
    """One GPU's devices (in publish order) and the counter sets they consume."""

    devices: list[AllocatableDevice]
    counter_sets: list[CounterSet]

    @property
    def consumed_counters(self) -> int:
        return sum(len(counters) for d in self.devices for counters in d.consumes_counters.values())

    @property
    def shared_counters(self) -> int:
        return sum(len(s.counters) for s in self.counter_sets)

    @property
    def consumes(self) -> bool:
        return any(d.consumes_counters for d in self.devices)


def _resolve_version(version: str | None, layout: str | None) -> tuple[str, Layout]:
    if layout is not None and layout not in LAYOUTS:
        raise SliceError(f"slice layout {layout!r}: must be one of {', '.join(LAYOUTS)}")
    if version is None:
        k8s = layout[1:] if layout is not None else DEFAULT_VERSION
    else:
        k8s = check_version(version)
    natural = "v1.34" if k8s == "1.34" else "v1.35"  # 1.36 and 1.37 keep the 1.35 model
    chosen = cast(Layout, layout if layout is not None else natural)
    if chosen != natural:
        raise SliceError(
            f"slice layout {chosen} is for Kubernetes {chosen[1:]}; a {k8s} apiserver rejects it"
        )
    return k8s, chosen


def _gpu_groups(ordered: Sequence[AllocatableDevice]) -> list[_GpuGroup]:
    """Consecutive devices of one GPU, with the definitions of the sets they consume."""
    definitions: dict[str, CounterSet] = {}
    for device in ordered:
        for counter_set in device.counter_sets:
            known = definitions.setdefault(counter_set.name, counter_set)
            if known != counter_set:
                raise SliceError(
                    f"device {device.name}: counter set {counter_set.name!r} is defined "
                    "differently by another device"
                )
    groups: list[_GpuGroup] = []
    current_gpu: str | None = None
    for device in ordered:
        if device.gpu.uuid != current_gpu:
            groups.append(_GpuGroup(devices=[], counter_sets=[]))
            current_gpu = device.gpu.uuid
        group = groups[-1]
        group.devices.append(device)
        for set_name in device.consumes_counters:
            defined = definitions.get(set_name)
            if defined is not None and defined not in group.counter_sets:
                group.counter_sets.append(defined)
    return groups


def _layout_134(groups: list[_GpuGroup], max_devices: int) -> list[_SliceContent]:
    """Per-slice counters: each GPU's set shares a slice with all its devices."""
    slices: list[_SliceContent] = []
    shared = consumed = 0
    pieces: list[_GpuGroup] = []
    for group in groups:
        if group.consumes:
            pieces.append(group)
        else:  # devices without counters may be split like any plain device list
            pieces.extend(
                _GpuGroup(devices=group.devices[i : i + max_devices], counter_sets=[])
                for i in range(0, len(group.devices), max_devices)
            )
    for group in pieces:
        if (
            group.shared_counters > RESOURCE_SLICE_MAX_SHARED_COUNTERS
            or group.consumed_counters > RESOURCE_SLICE_MAX_DEVICE_COUNTERS_PER_SLICE
            or len(group.devices) > max_devices
        ):
            raise SliceError(
                f"GPU {group.devices[0].gpu.uuid}: its {len(group.devices)} devices "
                f"({group.shared_counters} shared counters, {group.consumed_counters} "
                "consumed) do not fit in one v1.34 ResourceSlice"
            )
        current = slices[-1] if slices else None
        fits = current is not None and (
            len(current.devices) + len(group.devices) <= max_devices
            and shared + group.shared_counters <= RESOURCE_SLICE_MAX_SHARED_COUNTERS
            and consumed + group.consumed_counters <= RESOURCE_SLICE_MAX_DEVICE_COUNTERS_PER_SLICE
        )
        if current is None or not fits:
            current = _SliceContent()
            slices.append(current)
            shared = consumed = 0
        current.devices.extend(group.devices)
        current.counter_sets.extend(group.counter_sets)
        shared += group.shared_counters
        consumed += group.consumed_counters
    return slices


def _layout_135(
    groups: list[_GpuGroup], devices: Sequence[AllocatableDevice], max_devices: int
) -> list[_SliceContent]:
    """Pool-wide counters: counter-only slices first, then profile-major device slices.

    Devices go by `profile_groups` (all GPUs' devices of one profile together),
    whole groups per slice where they fit.
    """
    sets = [counter_set for group in groups for counter_set in group.counter_sets]
    slices = [
        _SliceContent(
            counter_sets=sets[i : i + RESOURCE_SLICE_MAX_COUNTER_SETS], counter_slice=True
        )
        for i in range(0, len(sets), RESOURCE_SLICE_MAX_COUNTER_SETS)
    ]
    device_slices: list[_SliceContent] = []
    counting = False  # whether the current device slice holds counter-consuming devices
    for group in profile_groups(devices):
        consumes = any(device.consumes_counters for device in group)
        current = device_slices[-1] if device_slices else None
        if current is not None:
            joint = min(max_devices, _device_limit_135(counting or consumes))
            if len(current.devices) + len(group) <= joint:
                current.devices.extend(group)
                counting = counting or consumes
                continue
        limit = min(max_devices, _device_limit_135(consumes))
        for i in range(0, len(group), limit):
            device_slices.append(_SliceContent(devices=group[i : i + limit]))
        counting = consumes
    return slices + device_slices


def _device_limit_135(consumes: bool) -> int:
    if consumes:
        return RESOURCE_SLICE_MAX_DEVICES_WITH_TAINTS_OR_CONSUMES_COUNTERS
    return RESOURCE_SLICE_MAX_DEVICES


def _spec(
    content: _SliceContent,
    *,
    driver: str,
    node_name: str,
    pool: str,
    generation: int,
    count: int,
    taints: Mapping[str, list[Mapping[str, Any]]],
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "driver": driver,
        "nodeName": node_name,
        "pool": {"name": pool, "generation": generation, "resourceSliceCount": count},
    }
    if content.counter_sets:
        spec["sharedCounters"] = [counter_set.to_api() for counter_set in content.counter_sets]
    if not content.counter_slice:
        spec["devices"] = [_device_api(device, taints) for device in content.devices]
    return spec


def _device_api(
    device: AllocatableDevice, taints: Mapping[str, list[Mapping[str, Any]]]
) -> dict[str, Any]:
    entry = device.to_api()
    if device.name in taints:
        entry["taints"] = [dict(taint) for taint in taints[device.name]]
    return entry


def _sanitize(text: str) -> str:
    """Lower-case `text` and make every dot-separated label a valid DNS label shape."""
    lowered = _INVALID_NAME_CHARS.sub("-", text.lower())
    labels = [label.strip("-") for label in lowered.split(".")]
    joined = ".".join(label for label in labels if label)
    return joined or "node"
