"""The device model: what a node's GPUs look like to Kubernetes.

Turns a discovered `NodeInventory` into the devices a ResourceSlice lists,
with NVIDIA's driver's names, attributes and capacities, so DeviceClasses and
CEL selectors written for `gpu.nvidia.com` keep working unchanged:

* a GPU with MIG off (or not MIG-capable) is one device, `gpu-<minor>`;
* a GPU with MIG on is advertised only through its existing MIG devices,
  `gpu-<minor>-mig-<profile>-<giProfileId>-<placementStart>` (static MIG);
* a GPU with MIG on and no MIG devices advertises nothing (see
  `inventory_warnings`).

With `dynamic_mig=True`, GPUs that can be partitioned on demand (see
`dra_driver.node.dynamic_mig`) instead publish one device per MIG placement, named
like static MIG devices (`gpu-<minor>-mig-<profile>-<giProfileId>-<start>`),
plus the full GPU on Hopper and newer; these devices consume the GPU's shared
counters so that overlapping ones exclude each other.

Everything here is pure: the same inventory always gives the same devices.
`AllocatableDevice.to_api()` renders one resource.k8s.io/v1 `Device`.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Final, Literal

from dra_driver.errors import InventoryError
from dra_driver.hardware.nvml import codes
from dra_driver.hardware.nvml.fabric import FabricCondition, classify, describe, usable_clique
from dra_driver.hardware.nvml.interface import GpuInfo, MigDeviceInfo
from dra_driver.kube.names import is_dns_label
from dra_driver.kube.quantity import format_quantity
from dra_driver.node.consumable_shares import (
    ConsumableShares,
    RequestPolicy,
    apply_consumable_shares,
)
from dra_driver.node.dynamic_mig import (
    CounterSet,
    DynamicMigMode,
    DynamicMigSpec,
    GpuPartitioning,
    consumption,
    dynamic_mig_mode,
    partition_gpu,
    profile_capacity,
)
from dra_driver.node.inventory import GpuInventory, NodeInventory

DeviceKind = Literal["gpu", "mig", "vfio"]
AttributeKind = Literal["int", "bool", "string", "version", "ints"]
_ATTRIBUTE_KINDS: Final[tuple[AttributeKind, ...]] = ("int", "bool", "string", "version", "ints")

# Attribute names shared with Kubernetes (KEP-5491 standard attributes).
PCI_BUS_ID_ATTRIBUTE: Final = "resource.kubernetes.io/pciBusID"
PCIE_ROOT_ATTRIBUTE: Final = "resource.kubernetes.io/pcieRoot"
NUMA_NODE_ATTRIBUTE: Final = "resource.kubernetes.io/numaNode"
# Ours (NVIDIA has none on GPUs): the GPU's NVLink clique, `<clusterUUID>.<cliqueId>`, the value
# of NVIDIA's node label `nvidia.com/gpu.clique`, on whole GPUs whose fabric is usable.
CLIQUE_ATTRIBUTE: Final = "cliqueID"
_UNSETTLED_FABRIC: Final = (
    FabricCondition.REGISTERING,
    FabricCondition.FAILED,
    FabricCondition.UNHEALTHY,
)

# The semver 2.0.0 regex the apiserver checks version attributes against
# (kubernetes pkg/apis/resource/validation).
_NUMERIC_ID: Final = r"(0|[1-9]\d*)"
_PRERELEASE_ID: Final = r"(0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)"
_BUILD_ID: Final = r"[0-9a-zA-Z-]+"
SEMVER_RE: Final = re.compile(
    rf"^{_NUMERIC_ID}\.{_NUMERIC_ID}\.{_NUMERIC_ID}"
    rf"(-{_PRERELEASE_ID}(\.{_PRERELEASE_ID})*)?"
    rf"(\+{_BUILD_ID}(\.{_BUILD_ID})*)?$"
)

# What NVIDIA's driver accepts as a version before printing it as semver
# (Masterminds/semver NewVersion: lenient, numeric parts read as integers).
_LENIENT_VERSION_RE: Final = re.compile(
    r"v?(?P<major>[0-9]+)(?:\.(?P<minor>[0-9]+))?(?:\.(?P<patch>[0-9]+))?"
    r"(?:-(?P<pre>[0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*))?"
    r"(?:\+(?P<build>[0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*))?"
)


def normalize_version(text: str) -> str:
    """A driver-reported version as a semver 2.0.0 string, the way NVIDIA prints it.

    NVIDIA's driver parses versions with Masterminds/semver and prints them
    back, so missing parts become 0 and numeric parts lose leading zeros:
    "8.0" -> "8.0.0", "12.4" -> "12.4.0", "570.172.08" -> "570.172.8". The
    last one matters: "08" is not a valid semver number, and the apiserver
    would reject the slice. Comparisons stay correct because every NVIDIA
    driver prints its patch level with two digits.

    Raises InventoryError when the text is not a version at all.
    """
    match = _LENIENT_VERSION_RE.fullmatch(text.strip())
    if match is None:
        raise InventoryError(f"version {text!r}: not a version number")
    parts = [int(match[name] or "0") for name in ("major", "minor", "patch")]
    version = ".".join(str(part) for part in parts)
    if match["pre"]:
        version += f"-{match['pre']}"
    if match["build"]:
        version += f"+{match['build']}"
    return version


@dataclass(frozen=True)
class AttributeValue:
    """One device attribute: exactly one of int, bool, string or version, or (Kubernetes
    1.36+, DRAListTypeAttributes) a non-empty list of ints.

    Serializes to the API union: `{"int": 1}`, `{"bool": true}`,
    `{"string": "x"}`, `{"version": "8.0.0"}`, `{"ints": [0]}`.
    """

    kind: AttributeKind
    value: int | bool | str | tuple[int, ...]

    def __post_init__(self) -> None:
        value = self.value
        ok = {
            "int": _is_int(value),
            "bool": isinstance(value, bool),
            "string": isinstance(value, str),
            "version": isinstance(value, str) and SEMVER_RE.match(value),
            "ints": isinstance(value, tuple) and bool(value) and all(map(_is_int, value)),
        }.get(self.kind)
        if not ok:
            raise InventoryError(f"attribute value {value!r}: not a valid {self.kind}")

    @classmethod
    def of_int(cls, value: int) -> AttributeValue:
        return cls("int", value)

    @classmethod
    def of_bool(cls, value: bool) -> AttributeValue:
        return cls("bool", value)

    @classmethod
    def of_string(cls, value: str) -> AttributeValue:
        return cls("string", value)

    @classmethod
    def of_version(cls, value: str) -> AttributeValue:
        """A semver attribute; raises InventoryError if `value` is not semver 2.0.0."""
        return cls("version", value)

    @classmethod
    def of_ints(cls, values: Sequence[int]) -> AttributeValue:
        """A list-typed int attribute (`ints`, DRAListTypeAttributes); never empty."""
        return cls("ints", tuple(values))

    @classmethod
    def from_api(cls, obj: Mapping[str, Any]) -> AttributeValue:
        """Read the API union back; raises InventoryError unless exactly one member is set."""
        present = [kind for kind in _ATTRIBUTE_KINDS if obj.get(kind) is not None]
        unknown = set(obj) - set(_ATTRIBUTE_KINDS)
        if len(present) != 1 or unknown:
            raise InventoryError(
                f"attribute {dict(obj)!r}: exactly one of int, bool, string, version, ints "
                "must be set"
            )
        value = obj[present[0]]
        return cls(present[0], tuple(value) if isinstance(value, list) else value)

    def to_api(self) -> dict[str, Any]:
        value = self.value
        return {self.kind: list(value) if isinstance(value, tuple) else value}


@dataclass(frozen=True)
class AllocatableDevice:
    """One device as a ResourceSlice lists it.

    `gpu` is the physical GPU (the parent, for a MIG device); `mig` is set for
    MIG devices that exist (static MIG). `dynamic` is set for dynamic MIG
    devices: what the kubelet plugin must create at Prepare (`mig` stays None
    for them, even when the plugin's own instance already exists).
    `capacity` values are integers (bytes for `memory`, counts otherwise).
    `consumes_counters` maps a counter-set name to the counters the device uses
    from it, and `counter_sets` carries those sets' definitions, so slices can
    be built from devices alone; both empty for static devices.
    """

    name: str
    kind: DeviceKind
    gpu: GpuInfo
    mig: MigDeviceInfo | None
    attributes: Mapping[str, AttributeValue]
    capacity: Mapping[str, int]
    consumes_counters: Mapping[str, Mapping[str, int]] = field(
        default_factory=lambda: MappingProxyType({})
    )
    dynamic: DynamicMigSpec | None = None
    counter_sets: tuple[CounterSet, ...] = ()
    allow_multiple_allocations: bool = False
    request_policies: Mapping[str, RequestPolicy] = field(
        default_factory=lambda: MappingProxyType({})
    )

    @property
    def has_list_attributes(self) -> bool:
        """Whether an attribute is list-typed (needs DRAListTypeAttributes, Kubernetes 1.36+)."""
        return any(value.kind == "ints" for value in self.attributes.values())

    def __hash__(self) -> int:
        # Names are unique per node; equal devices always share name and GPU.
        return hash((self.name, self.gpu.uuid))

    def __copy__(self) -> AllocatableDevice:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> AllocatableDevice:
        return self  # immutable all the way down: a copy would be identical

    def to_api(self) -> dict[str, Any]:
        """The resource.k8s.io/v1 `Device` object, with keys in sorted order."""
        capacity: dict[str, Any] = {}
        for key in sorted(self.capacity):
            capacity[key] = {"value": format_quantity(self.capacity[key])}
            policy = self.request_policies.get(key)
            if policy is not None:
                capacity[key]["requestPolicy"] = policy.to_api()
        device: dict[str, Any] = {
            "name": self.name,
            "attributes": {key: self.attributes[key].to_api() for key in sorted(self.attributes)},
            "capacity": capacity,
        }
        if self.allow_multiple_allocations:
            device["allowMultipleAllocations"] = True
        if self.consumes_counters:
            device["consumesCounters"] = [
                {
                    "counterSet": counter_set,
                    "counters": {
                        name: {"value": format_quantity(counters[name])}
                        for name in sorted(counters)
                    },
                }
                for counter_set, counters in sorted(self.consumes_counters.items())
            ]
        return device


def gpu_device_name(gpu: GpuInfo) -> str:
    """NVIDIA's name for a full GPU: the minor number, stable while indices shift."""
    return f"gpu-{gpu.minor}"


def mig_profile_name(mig: MigDeviceInfo) -> str:
    """The go-nvlib profile string of a MIG device: "1g.5gb", or "1c.3g.40gb" for a CI
    smaller than its GPU instance."""
    ci_slices = codes.CI_ENUM_SLICES.get(mig.ci_profile_id, mig.gi_profile.slice_count)
    if ci_slices < mig.gi_profile.slice_count:
        return f"{ci_slices}c.{mig.gi_profile.name}"
    return mig.gi_profile.name


def mig_device_name(mig: MigDeviceInfo) -> str:
    """NVIDIA's canonical static-MIG name: `gpu-%d-mig-%s-%d-%d`.

    Parent minor, the profile with dots removed and made RFC 1123 ('+' and any
    other odd character become '-'), the GI *profile id* and the placement
    start: "1g.10gb+me" on GPU 3 at slot 2 -> `gpu-3-mig-1g10gb-me-20-2`.

    A compute instance smaller than its GPU instance (several CIs sharing one
    GI, which NVIDIA's driver does not tell apart) gets `-ci<id>` appended, so
    every MIG device keeps a unique name.
    """
    name = mig_placement_name(
        mig.parent_minor, mig_profile_name(mig), mig.gi_profile.id, mig.placement.start
    )
    if _shares_gpu_instance(mig):
        name += f"-ci{mig.compute_instance_id}"
    return name


def mig_placement_name(
    parent_minor: int, profile_name: str, gi_profile_id: int, placement_start: int
) -> str:
    """`gpu-<minor>-mig-<profile>-<giProfileId>-<start>`, shared by static and dynamic MIG.

    The profile loses its dots and is made RFC 1123 (see `mig_device_name`).
    """
    profile = _rfc1123(profile_name.replace(".", ""))
    return f"gpu-{parent_minor}-mig-{profile}-{gi_profile_id}-{placement_start}"


def build_devices(
    inventory: NodeInventory,
    *,
    dynamic_mig: bool = False,
    owned_instances: Collection[tuple[str, int]] = (),
    consumable_shares: ConsumableShares | None = None,
    list_attributes: bool = False,
) -> list[AllocatableDevice]:
    """Every device the node publishes, GPUs in PCI bus order.

    Static GPUs: the full GPU, or its MIG devices by name. With `dynamic_mig`,
    each eligible GPU (`dra_driver.node.dynamic_mig.dynamic_mig_mode`) gives its
    foreign MIG devices (static, by name), its dynamic MIG devices in profile
    and placement order, then the full GPU where offered; the slice builder
    publishes them in `dra_driver.node.placement_order` order. `owned_instances`
    holds (parent GPU UUID, GPU-instance id) of the MIG instances the plugin
    created itself (its checkpoint); they stay published as dynamic devices.
    `consumable_shares` publishes every device for sharing between claims
    (`dra_driver.node.consumable_shares`). `list_attributes` (the
    DRAListTypeAttributes gate, Kubernetes 1.36+) publishes
    `resource.kubernetes.io/numaNode` as a one-element list, as NVIDIA's
    driver does under that gate (KEP-6072 prefers the list form).

    A Hopper-or-newer GPU with MIG mode on whose NVML lists no GPU-instance
    profile gets no dynamic MIG devices; with `dynamic_mig` it is offered as
    the full GPU, as NVIDIA's driver offers it (Prepare switches MIG off).

    Raises InventoryError if two devices would share a name (for example two
    GPUs reporting the same minor number) or a name is not a DNS label.
    """
    devices: list[AllocatableDevice] = []
    for gpu in inventory.gpus:
        partitioning = partition_gpu(gpu, owned_instances) if dynamic_mig else None
        if partitioning is not None:
            devices.extend(_partitioned_devices(inventory, gpu, partitioning))
        elif dynamic_mig and _mig_on_without_profiles(gpu):
            devices.append(_gpu_device(inventory, gpu))
        elif gpu.info.mig_enabled:
            migs = [_mig_device(inventory, gpu, mig) for mig in gpu.mig_devices]
            devices.extend(sorted(migs, key=lambda device: device.name))
        else:
            devices.append(_gpu_device(inventory, gpu))
    seen: dict[str, AllocatableDevice] = {}
    for device in devices:
        if not is_dns_label(device.name):
            raise InventoryError(
                f"device {device.name!r} of GPU {device.gpu.uuid}: name is not a DNS label"
            )
        other = seen.get(device.name)
        if other is not None:
            raise InventoryError(
                f"device name {device.name!r} is used by GPU {other.gpu.uuid} and GPU "
                f"{device.gpu.uuid}: minor numbers must be unique"
            )
        seen[device.name] = device
    if list_attributes:
        devices = [_with_list_attributes(device) for device in devices]
    return apply_consumable_shares(devices, consumable_shares)


def _with_list_attributes(device: AllocatableDevice) -> AllocatableDevice:
    """`numaNode` as a one-element list (NVIDIA's form under DRAListTypeAttributes: the
    GPU's own node, until same-socket nodes are known)."""
    numa = device.attributes.get(NUMA_NODE_ATTRIBUTE)
    if numa is None or numa.kind != "int" or not isinstance(numa.value, int):
        return device
    attributes = {**device.attributes, NUMA_NODE_ATTRIBUTE: AttributeValue.of_ints([numa.value])}
    return dataclasses.replace(device, attributes=MappingProxyType(attributes))


def _mig_on_without_profiles(gpu: GpuInventory) -> bool:
    """MIG mode on, but NVML lists no GPU-instance profile and no MIG device exists (Hopper+:
    the mode can be switched off again without a reset, so the full GPU can be offered)."""
    info = gpu.info
    return (
        info.mig_enabled
        and info.mig_toggle_supported
        and not gpu.gi_profiles
        and not gpu.mig_devices
    )


def inventory_warnings(
    inventory: NodeInventory,
    *,
    dynamic_mig: bool = False,
    owned_instances: Collection[tuple[str, int]] = (),
) -> list[str]:
    """Things an admin should know about the node, one sentence each.

    Nothing here stops publishing; each line says what is (not) published and
    why. Pass the same `dynamic_mig` and `owned_instances` as to `build_devices`.
    """
    warnings: list[str] = []
    for gpu in inventory.gpus:
        info = gpu.info
        label = f"GPU {gpu_device_name(info)} ({info.uuid})"
        mode = dynamic_mig_mode(gpu) if dynamic_mig else DynamicMigMode.STATIC
        if mode is not DynamicMigMode.STATIC:
            warnings.extend(_dynamic_warnings(label, gpu, mode, owned_instances))
        elif (
            dynamic_mig
            and info.mig_capable
            and not info.mig_toggle_supported
            and not info.mig_enabled
        ):
            warnings.append(
                f"{label} is {info.architecture}: dynamic MIG needs MIG mode on before "
                "the plugin starts (changing it needs a GPU reset), so it is published "
                "as a full GPU"
            )
        if dynamic_mig and _mig_on_without_profiles(gpu):
            warnings.append(
                f"{label} has MIG enabled but NVML lists no GPU-instance profiles: it is "
                "published as a full GPU, and MIG mode is switched off when a claim gets it"
            )
        elif mode is DynamicMigMode.STATIC and info.mig_enabled and not gpu.mig_devices:
            warnings.append(
                f"{label} has MIG enabled but no MIG devices: nothing is published for it"
            )
        if info.mig_capable and info.mig_enabled != info.mig_pending:
            current = "enabled" if info.mig_enabled else "disabled"
            pending = "enabled" if info.mig_pending else "disabled"
            warnings.append(
                f"{label} has MIG mode {current} with {pending} pending until a GPU reset: "
                f"it is published as MIG {current}"
            )
        if classify(info.fabric) in _UNSETTLED_FABRIC:
            warnings.append(
                f"{label} has an NVLink {describe(info.fabric)}: its {CLIQUE_ATTRIBUTE} "
                "attribute is left out"
            )
        shared = sorted(
            mig_device_name(mig) for mig in gpu.mig_devices if _shares_gpu_instance(mig)
        )
        if info.mig_enabled and shared:
            warnings.append(
                f"{label} has compute instances sharing a GPU instance ({', '.join(shared)}): "
                "they share that instance's memory and engines"
            )
    return warnings


def _dynamic_warnings(
    label: str,
    gpu: GpuInventory,
    mode: DynamicMigMode,
    owned_instances: Collection[tuple[str, int]],
) -> list[str]:
    owned = {gi for parent, gi in owned_instances if parent == gpu.info.uuid}
    foreign = sorted(
        mig_device_name(mig) for mig in gpu.mig_devices if mig.gpu_instance_id not in owned
    )
    if not foreign:
        return []
    what = "MIG placements overlapping them are withdrawn"
    if mode is DynamicMigMode.GPU_AND_MIG:
        what += " and the full GPU is not offered while they exist"
    return [
        f"{label} has MIG devices dra-gpu did not create ({', '.join(foreign)}): they are "
        f"published as static MIG devices and never destroyed; {what}"
    ]


def _partitioned_devices(
    inventory: NodeInventory, gpu: GpuInventory, partitioning: GpuPartitioning
) -> list[AllocatableDevice]:
    """A dynamic-MIG GPU's devices: foreign MIG devices, dynamic MIG devices, full GPU."""
    counter_set = partitioning.counter_set
    foreign = sorted(
        (_mig_device(inventory, gpu, mig) for mig in partitioning.foreign),
        key=lambda device: device.name,
    )
    devices = list(foreign)
    for spec in partitioning.dynamic:
        devices.append(_dynamic_mig_device(inventory, gpu, spec, counter_set))
    if partitioning.full_gpu_counters is not None:
        full = _gpu_device(inventory, gpu)
        devices.append(
            dataclasses.replace(
                full,
                consumes_counters=MappingProxyType(
                    {counter_set.name: partitioning.full_gpu_counters}
                ),
                counter_sets=(counter_set,),
            )
        )
    return devices


def _dynamic_mig_device(
    inventory: NodeInventory, gpu: GpuInventory, spec: DynamicMigSpec, counter_set: CounterSet
) -> AllocatableDevice:
    info = gpu.info
    attributes = {
        "type": AttributeValue.of_string("mig"),
        "parentUUID": AttributeValue.of_string(info.uuid),
        "profile": AttributeValue.of_string(spec.profile_name),
        **_common_attributes(inventory, info),
    }
    used = consumption(spec.gi_profile, spec.placement)
    return AllocatableDevice(
        name=mig_placement_name(
            info.minor, spec.profile_name, spec.gi_profile.id, spec.placement.start
        ),
        kind="mig",
        gpu=info,
        mig=None,
        attributes=MappingProxyType(attributes),
        capacity=MappingProxyType(profile_capacity(spec.gi_profile)),
        consumes_counters=MappingProxyType({counter_set.name: MappingProxyType(used)}),
        dynamic=spec,
        counter_sets=(counter_set,),
    )


def _gpu_device(inventory: NodeInventory, gpu: GpuInventory) -> AllocatableDevice:
    info = gpu.info
    attributes = {
        "type": AttributeValue.of_string("gpu"),
        "uuid": AttributeValue.of_string(info.uuid),
        **_common_attributes(inventory, info),
        "migCapable": AttributeValue.of_bool(info.mig_capable),
    }
    clique = usable_clique(info.fabric)
    if clique is not None:  # whole GPUs only: MIG devices have no NVLink peer access
        attributes[CLIQUE_ATTRIBUTE] = AttributeValue.of_string(clique)
    return AllocatableDevice(
        name=gpu_device_name(info),
        kind="gpu",
        gpu=info,
        mig=None,
        attributes=MappingProxyType(attributes),
        # NVIDIA leaves memory out where NVML cannot report it (some unified-memory parts).
        capacity=MappingProxyType({"memory": info.memory_bytes} if info.memory_bytes > 0 else {}),
    )


def _mig_device(
    inventory: NodeInventory, gpu: GpuInventory, mig: MigDeviceInfo
) -> AllocatableDevice:
    info = gpu.info
    profile = mig.gi_profile
    attributes = {
        "type": AttributeValue.of_string("mig"),
        "uuid": AttributeValue.of_string(mig.uuid),
        "parentUUID": AttributeValue.of_string(info.uuid),
        "profile": AttributeValue.of_string(mig_profile_name(mig)),
        **_common_attributes(inventory, info),
    }
    # A CI smaller than its GI has fewer SMs; engines and memory stay the GI's (shared).
    multiprocessors = mig.multiprocessors if _shares_gpu_instance(mig) else profile.multiprocessors
    capacity = {
        "multiprocessors": multiprocessors,
        "copyEngines": profile.copy_engines,
        "decoders": profile.decoders,
        "encoders": profile.encoders,
        "jpegEngines": profile.jpeg_engines,
        "ofaEngines": profile.ofa_engines,
        "memory": profile.memory_bytes,
    }
    # NVIDIA also lists the memory slices a static MIG device occupies.
    for memory_slice in mig.placement.slices:
        capacity[f"memorySlice{memory_slice}"] = 1
    return AllocatableDevice(
        name=mig_device_name(mig),
        kind="mig",
        gpu=info,
        mig=mig,
        attributes=MappingProxyType(attributes),
        capacity=MappingProxyType(capacity),
    )


def _common_attributes(inventory: NodeInventory, info: GpuInfo) -> dict[str, AttributeValue]:
    """Attributes a GPU and its MIG devices share."""
    major, minor = info.cuda_compute_capability
    attributes = {
        "productName": AttributeValue.of_string(info.product_name),
        "brand": AttributeValue.of_string(info.brand),
        "architecture": AttributeValue.of_string(info.architecture),
        "cudaComputeCapability": AttributeValue.of_version(f"{major}.{minor}.0"),
        "driverVersion": AttributeValue.of_version(
            normalize_version(inventory.system.driver_version)
        ),
        "cudaDriverVersion": AttributeValue.of_version(
            normalize_version(inventory.system.cuda_version)
        ),
        PCI_BUS_ID_ATTRIBUTE: AttributeValue.of_string(info.pci_bus_id),
    }
    if info.pcie_root:
        attributes[PCIE_ROOT_ATTRIBUTE] = AttributeValue.of_string(info.pcie_root)
    if info.numa_node is not None and info.numa_node >= 0:
        attributes[NUMA_NODE_ATTRIBUTE] = AttributeValue.of_int(info.numa_node)
    if info.addressing_mode is not None:
        attributes["addressingMode"] = AttributeValue.of_string(info.addressing_mode)
    return attributes


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _shares_gpu_instance(mig: MigDeviceInfo) -> bool:
    ci_slices = codes.CI_ENUM_SLICES.get(mig.ci_profile_id, mig.gi_profile.slice_count)
    return ci_slices < mig.gi_profile.slice_count


def _rfc1123(text: str) -> str:
    """go's toRFC1123Compliant as NVIDIA applies it to a dot-less profile name."""
    return re.sub(r"[^a-z0-9-]", "-", text.lower()).strip("-")
