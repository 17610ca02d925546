"""Every ResourceSlice limit the apiserver enforces is caught before we send the slice.

Each case breaks one rule of a valid slice and checks the message names the
slice, the field and (for device fields) the device. Cases marked with a
version only apply to that Kubernetes minor.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from controller.limits import (
    check_resource_slices,
    check_version,
    validate_pool,
    validate_resource_slice,
    validate_schema,
)
from dra_driver.errors import SliceError

Slice = dict[str, Any]
NAME = "node-a-gpu.nvidia.com-0"


def make_slice(devices: int = 1, name: str = NAME) -> Slice:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": name},
        "spec": {
            "driver": "gpu.nvidia.com",
            "nodeName": "node-a",
            "pool": {"name": "node-a", "generation": 0, "resourceSliceCount": 1},
            "devices": [
                {
                    "name": f"gpu-{i}",
                    "attributes": {
                        "type": {"string": "gpu"},
                        "driverVersion": {"version": "550.54.15"},
                    },
                    "capacity": {"memory": {"value": "80Gi"}},
                }
                for i in range(devices)
            ],
        },
    }


def spec(obj: Slice) -> dict[str, Any]:
    return obj["spec"]  # type: ignore[no-any-return]


def dev(obj: Slice, i: int = 0) -> dict[str, Any]:
    return obj["spec"]["devices"][i]  # type: ignore[no-any-return]


def counter_set(name: str, counters: int = 1) -> dict[str, Any]:
    return {"name": name, "counters": {f"c{i}": {"value": "1"} for i in range(counters)}}


def consumption(name: str, counters: int = 1) -> dict[str, Any]:
    return {"counterSet": name, "counters": {f"c{i}": {"value": "1"} for i in range(counters)}}


def taint(key: str = "example.com/unhealthy", effect: str = "NoSchedule") -> dict[str, Any]:
    return {"key": key, "value": "xid-79", "effect": effect}


def set_(path: Callable[[Slice], dict[str, Any]], key: str, value: Any) -> Callable[[Slice], None]:
    def mutate(obj: Slice) -> None:
        path(obj)[key] = value

    return mutate


def drop(path: Callable[[Slice], dict[str, Any]], key: str) -> Callable[[Slice], None]:
    def mutate(obj: Slice) -> None:
        del path(obj)[key]

    return mutate


def attr(key: str, value: Any) -> Callable[[Slice], None]:
    def mutate(obj: Slice) -> None:
        dev(obj)["attributes"][key] = value

    return mutate


def cap(key: str, value: Any) -> Callable[[Slice], None]:
    def mutate(obj: Slice) -> None:
        dev(obj)["capacity"][key] = value

    return mutate


def policy(value: str, request_policy: dict[str, Any]) -> Callable[[Slice], None]:
    def mutate(obj: Slice) -> None:
        dev(obj)["allowMultipleAllocations"] = True
        dev(obj)["capacity"]["memory"] = {"value": value, "requestPolicy": request_policy}

    return mutate


def devices(count: int, **extra: Any) -> Callable[[Slice], None]:
    def mutate(obj: Slice) -> None:
        spec(obj)["devices"] = make_slice(count)["spec"]["devices"]
        for device in spec(obj)["devices"]:
            device.update(extra)

    return mutate


def chain(*steps: Callable[[Slice], None]) -> Callable[[Slice], None]:
    def mutate(obj: Slice) -> None:
        for step in steps:
            step(obj)

    return mutate


def shared_in_counter_slice(*sets: dict[str, Any]) -> Callable[[Slice], None]:
    def mutate(obj: Slice) -> None:
        del spec(obj)["devices"]
        spec(obj)["sharedCounters"] = list(sets)

    return mutate


# (case id, versions it applies to, mutation, expected text in one message)
BOTH = ("1.34", "1.35")
CASES: list[tuple[str, tuple[str, ...], Callable[[Slice], None], str]] = [
    # object
    ("api-version", BOTH, set_(lambda o: o, "apiVersion", "resource.k8s.io/v1beta1"), "apiVersion"),
    ("kind", BOTH, set_(lambda o: o, "kind", "ResourceClaim"), "kind"),
    ("no-spec", BOTH, drop(lambda o: o, "spec"), "spec: required"),
    ("name", BOTH, set_(lambda o: o["metadata"], "name", "Node_A-0"), "metadata.name"),
    ("name-long", BOTH, set_(lambda o: o["metadata"], "name", "a" * 254), "metadata.name"),
    ("no-name", BOTH, drop(lambda o: o["metadata"], "name"), "name or generateName is required"),
    # driver
    ("driver-empty", BOTH, set_(spec, "driver", ""), "spec.driver: required"),
    ("driver-long", BOTH, set_(spec, "driver", "a" * 60 + ".com"), "longer than 63"),
    ("driver-format", BOTH, set_(spec, "driver", "gpu_nvidia.com"), "not a DNS subdomain"),
    # pool
    ("pool-empty", BOTH, set_(lambda o: spec(o)["pool"], "name", ""), "spec.pool.name: required"),
    ("pool-long", BOTH, set_(lambda o: spec(o)["pool"], "name", "a/" * 127), "longer than 253"),
    ("pool-part", BOTH, set_(lambda o: spec(o)["pool"], "name", "rack//a"), "spec.pool.name"),
    ("pool-upper", BOTH, set_(lambda o: spec(o)["pool"], "name", "Node-A"), "spec.pool.name"),
    (
        "generation",
        BOTH,
        set_(lambda o: spec(o)["pool"], "generation", -1),
        "greater than or equal",
    ),
    ("generation-type", BOTH, set_(lambda o: spec(o)["pool"], "generation", "1"), "integer"),
    ("count-zero", BOTH, set_(lambda o: spec(o)["pool"], "resourceSliceCount", 0), "greater than"),
    ("count-missing", BOTH, drop(lambda o: spec(o)["pool"], "resourceSliceCount"), "integer"),
    ("no-pool", BOTH, drop(spec, "pool"), "spec.pool: required"),
    # node selection
    ("no-node", BOTH, drop(spec, "nodeName"), "exactly one of `nodeName`"),
    ("node-and-all", BOTH, set_(spec, "allNodes", True), "but ['nodeName', 'allNodes'] are set"),
    ("node-empty", BOTH, set_(spec, "nodeName", ""), "non-empty string"),
    ("node-format", BOTH, set_(spec, "nodeName", "Node_A"), "not a valid node name"),
    ("all-false", BOTH, set_(spec, "allNodes", False), "spec.allNodes: must be either unset"),
    (
        "per-device-false",
        BOTH,
        set_(spec, "perDeviceNodeSelection", False),
        "spec.perDeviceNodeSelection: must be either unset",
    ),
    (
        "selector-terms",
        BOTH,
        chain(drop(spec, "nodeName"), set_(spec, "nodeSelector", {"nodeSelectorTerms": [{}, {}]})),
        "exactly one node selector term",
    ),
    # devices per slice
    ("129-devices", BOTH, devices(129), "129 devices: must have at most 128"),
    ("65-tainted", ("1.35",), devices(65, taints=[taint()]), "must have at most 64"),
    (
        "65-consuming",
        ("1.35",),
        devices(65, consumesCounters=[consumption("gpu-set")]),
        "must have at most 64 (some device has taints or consumesCounters)",
    ),
    # device names
    (
        "device-dup",
        BOTH,
        chain(devices(2), set_(lambda o: dev(o, 1), "name", "gpu-0")),
        "duplicate",
    ),
    ("device-upper", BOTH, set_(dev, "name", "GPU-0"), "not a DNS label"),
    ("device-dot", BOTH, set_(dev, "name", "gpu.0"), "not a DNS label"),
    ("device-long", BOTH, set_(dev, "name", "g" * 64), "not a DNS label"),
    ("device-missing", BOTH, drop(dev, "name"), "spec.devices[0].name: required"),
    # attributes + capacity per device
    (
        "33-entries",
        BOTH,
        chain(*(attr(f"a{i}", {"int": i}) for i in range(30))),
        "33 attributes and capacities: the total must not exceed 32",
    ),
    # qualified names
    ("id-long", BOTH, attr("a" * 33, {"int": 1}), "identifier longer than 32"),
    ("id-format", BOTH, attr("1abc", {"int": 1}), "not a C identifier"),
    ("id-dash", BOTH, attr("pcie-root", {"int": 1}), "not a C identifier"),
    ("domain-long", BOTH, attr("a" * 60 + ".com/x", {"int": 1}), "domain longer than 63"),
    ("domain-format", BOTH, attr("Bad_Domain/x", {"int": 1}), "not a DNS subdomain"),
    ("domain-empty", BOTH, attr("/x", {"int": 1}), "the domain must not be empty"),
    ("name-empty", BOTH, attr("example.com/", {"int": 1}), "the name must not be empty"),
    ("two-slashes", BOTH, attr("a.com/b/c", {"int": 1}), "more than one slash"),
    ("capacity-key", BOTH, cap("memory-total", {"value": "1"}), "not a C identifier"),
    # attribute values
    ("string-65", BOTH, attr("productName", {"string": "x" * 65}), "string longer than 64"),
    (
        "version-65",
        BOTH,
        attr("v", {"version": "1.0.0-" + "a" * 59}),
        "version longer than 64",
    ),
    ("version-zero", BOTH, attr("v", {"version": "570.172.08"}), "not a semver 2.0.0"),
    ("version-short", BOTH, attr("v", {"version": "8.0"}), "not a semver 2.0.0"),
    ("two-members", BOTH, attr("v", {"int": 1, "string": "x"}), "exactly one value"),
    ("no-member", BOTH, attr("v", {}), "exactly one value"),
    ("int-type", BOTH, attr("v", {"int": "1"}), "not a 64-bit integer"),
    ("int-range", BOTH, attr("v", {"int": 2**63}), "not a 64-bit integer"),
    ("bool-type", BOTH, attr("v", {"bool": 1}), "not a boolean"),
    ("unknown-member", BOTH, attr("v", {"float": 1.5}), "unknown value fields"),
    # capacity values and request policies
    ("cap-missing", BOTH, cap("memory", {}), "value (device gpu-0): required"),
    ("cap-format", BOTH, cap("memory", {"value": "80GB"}), "is not a quantity"),
    (
        "policy-single",
        BOTH,
        cap("memory", {"value": "80Gi", "requestPolicy": {"default": "1Gi"}}),
        "allowMultipleAllocations must be true",
    ),
    (
        "policy-both",
        BOTH,
        policy("8", {"default": "1", "validValues": ["1"], "validRange": {"min": "1"}}),
        "exactly one policy",
    ),
    (
        "values-no-default",
        BOTH,
        policy("8", {"validValues": ["1", "2"]}),
        "required when validValues",
    ),
    ("values-default", BOTH, policy("8", {"default": "3", "validValues": ["1", "2"]}), "not valid"),
    ("values-order", BOTH, policy("8", {"default": "1", "validValues": ["2", "1"]}), "ascending"),
    ("values-large", BOTH, policy("8", {"default": "1", "validValues": ["1", "9"]}), "larger than"),
    (
        "values-11",
        BOTH,
        policy("100", {"default": "1", "validValues": [str(i) for i in range(1, 12)]}),
        "11 values: must have at most 10",
    ),
    (
        "range-no-default",
        BOTH,
        policy("8", {"validRange": {"min": "1"}}),
        "required when validRange",
    ),
    (
        "range-no-min",
        BOTH,
        policy("8", {"default": "1", "validRange": {}}),
        "min (device gpu-0): required",
    ),
    ("range-min", BOTH, policy("8", {"default": "9", "validRange": {"min": "9"}}), "min is larger"),
    ("range-default-low", BOTH, policy("8", {"default": "1", "validRange": {"min": "2"}}), "less"),
    (
        "range-max",
        BOTH,
        policy("8", {"default": "1", "validRange": {"min": "1", "max": "9"}}),
        "max is larger than capacity",
    ),
    (
        "range-min-max",
        BOTH,
        policy("8", {"default": "4", "validRange": {"min": "4", "max": "2"}}),
        "min is larger than max",
    ),
    (
        "range-default-high",
        BOTH,
        policy("8", {"default": "4", "validRange": {"min": "1", "max": "2"}}),
        "default is more than max",
    ),
    (
        "range-step-zero",
        BOTH,
        policy("8", {"default": "1", "validRange": {"min": "1", "step": "0"}}),
        "step (device gpu-0): must be greater than zero",
    ),
    (
        "range-step-big",
        BOTH,
        policy("8", {"default": "1", "validRange": {"min": "1", "step": "8"}}),
        "one step is larger",
    ),
    (
        "range-step-default",
        BOTH,
        policy("8Gi", {"default": "1536Mi", "validRange": {"min": "1Gi", "step": "1Gi"}}),
        "default is not a multiple of step",
    ),
    (
        "range-step-max",
        BOTH,
        policy(
            "8Gi", {"default": "1Gi", "validRange": {"min": "1Gi", "max": "7.5Gi", "step": "1Gi"}}
        ),
        "max is not a multiple of step",
    ),
    # taints
    ("taints-5", ("1.34",), set_(dev, "taints", [taint()] * 5), "5 taints: must have at most 4"),
    (
        "taints-17",
        ("1.35",),
        set_(dev, "taints", [taint()] * 17),
        "17 taints: must have at most 16",
    ),
    ("taint-none-1.34", ("1.34",), set_(dev, "taints", [taint(effect="None")]), "'None' is not"),
    ("taint-effect", BOTH, set_(dev, "taints", [taint(effect="Evict")]), "'Evict' is not one of"),
    (
        "taint-no-effect",
        BOTH,
        set_(dev, "taints", [taint(effect="")]),
        "effect (device gpu-0): required",
    ),
    ("taint-key", BOTH, set_(dev, "taints", [taint(key="bad key")]), "taints[0].key"),
    ("taint-no-key", BOTH, set_(dev, "taints", [taint(key="")]), "taints[0].key"),
    (
        "taint-value",
        BOTH,
        set_(dev, "taints", [{"key": "k", "value": "-bad-", "effect": "NoSchedule"}]),
        "not a label value",
    ),
    # consumesCounters, 1.35 model
    (
        "consumes-3",
        ("1.35",),
        set_(dev, "consumesCounters", [consumption(f"s{i}") for i in range(3)]),
        "3 entries: must have at most 2",
    ),
    (
        "consumes-dup",
        ("1.35",),
        set_(dev, "consumesCounters", [consumption("s"), consumption("s")]),
        "duplicate counter set 's'",
    ),
    (
        "consumes-33",
        ("1.35",),
        set_(dev, "consumesCounters", [consumption("s", 33)]),
        "33 counters: must have at most 32",
    ),
    (
        "consumes-no-set",
        BOTH,
        set_(dev, "consumesCounters", [{"counters": {"c": {"value": "1"}}}]),
        "counterSet (device gpu-0): required",
    ),
    (
        "consumes-no-counters",
        BOTH,
        set_(dev, "consumesCounters", [{"counterSet": "s"}]),
        "counters (device gpu-0): required",
    ),
    (
        "consumes-set-name",
        BOTH,
        set_(dev, "consumesCounters", [consumption("Bad_Set")]),
        "'Bad_Set' is not a DNS label",
    ),
    (
        "consumes-counter-name",
        BOTH,
        set_(
            dev,
            "consumesCounters",
            [{"counterSet": "s", "counters": {"copyEngines": {"value": "1"}}}],
        ),
        "counter name 'copyEngines' is not a DNS label",
    ),
    (
        "consumes-value",
        BOTH,
        set_(dev, "consumesCounters", [{"counterSet": "s", "counters": {"c": {"value": "x"}}}]),
        "'x' is not a quantity",
    ),
    # consumesCounters, 1.34 model (per slice)
    (
        "consumes-undefined-set",
        ("1.34",),
        set_(dev, "consumesCounters", [consumption("s")]),
        "must reference a counterSet defined in the ResourceSlice",
    ),
    (
        "consumes-undefined-counter",
        ("1.34",),
        chain(
            set_(spec, "sharedCounters", [counter_set("s", 1)]),
            set_(dev, "consumesCounters", [consumption("s", 2)]),
        ),
        "'c1': must reference a counter defined",
    ),
    (
        "consumes-33-per-device",
        ("1.34",),
        chain(
            set_(spec, "sharedCounters", [counter_set(f"s{i}", 1) for i in range(32)]),
            set_(
                dev,
                "consumesCounters",
                [consumption(f"s{i}", 1) for i in range(32)] + [consumption("s0", 1)],
            ),
        ),
        "33 counters: the total number of counters must not exceed 32",
    ),
    (
        "consumes-1025-per-slice",
        ("1.34",),
        chain(
            devices(65, consumesCounters=[consumption("s", 16)]),
            set_(spec, "sharedCounters", [counter_set("s", 16)]),
        ),
        "1040 consumed counters",
    ),
    # sharedCounters
    (
        "shared-with-devices",
        ("1.35",),
        set_(spec, "sharedCounters", [counter_set("s")]),
        "only one of `sharedCounters` or `devices`",
    ),
    (
        "shared-9-sets",
        ("1.35",),
        shared_in_counter_slice(*(counter_set(f"s{i}") for i in range(9))),
        "9 counter sets: must have at most 8",
    ),
    (
        "shared-33-counters",
        ("1.35",),
        shared_in_counter_slice(counter_set("s", 33)),
        "33 counters: must have at most 32",
    ),
    (
        "shared-33-total",
        ("1.34",),
        set_(spec, "sharedCounters", [counter_set(f"s{i}", 11) for i in range(3)]),
        "33 counters in all sets",
    ),
    ("shared-dup", BOTH, shared_in_counter_slice(counter_set("s"), counter_set("s")), "duplicate"),
    ("shared-name", BOTH, shared_in_counter_slice(counter_set("S")), "'S' is not a DNS label"),
    ("shared-empty", BOTH, shared_in_counter_slice({"name": "s", "counters": {}}), "required"),
    # per-device node selection
    (
        "per-device-missing",
        BOTH,
        chain(drop(spec, "nodeName"), set_(spec, "perDeviceNodeSelection", True)),
        "exactly one of `nodeName`, `nodeSelector`, or `allNodes` is required",
    ),
    (
        "per-device-two",
        BOTH,
        chain(
            drop(spec, "nodeName"),
            set_(spec, "perDeviceNodeSelection", True),
            set_(dev, "nodeName", "node-a"),
            set_(dev, "allNodes", True),
        ),
        "exactly one of `nodeName`, `nodeSelector`, or `allNodes` is required",
    ),
    (
        "device-node-without-per-device",
        BOTH,
        set_(dev, "nodeName", "node-a"),
        "can only be set if `perDeviceNodeSelection`",
    ),
    # binding conditions
    (
        "binding-5",
        BOTH,
        chain(
            set_(dev, "bindingConditions", [f"c{i}" for i in range(5)]),
            set_(dev, "bindingFailureConditions", ["f"]),
        ),
        "5 conditions: must have at most 4",
    ),
    (
        "failure-5",
        BOTH,
        chain(
            set_(dev, "bindingConditions", ["c"]),
            set_(dev, "bindingFailureConditions", [f"f{i}" for i in range(5)]),
        ),
        "5 conditions: must have at most 4",
    ),
    ("binding-alone", BOTH, set_(dev, "bindingConditions", ["c"]), "bindingFailureConditions are"),
    ("failure-alone", BOTH, set_(dev, "bindingFailureConditions", ["f"]), "bindingConditions are"),
    (
        "binding-overlap",
        BOTH,
        chain(set_(dev, "bindingConditions", ["c"]), set_(dev, "bindingFailureConditions", ["c"])),
        "must not overlap",
    ),
    (
        "binding-dup",
        BOTH,
        chain(
            set_(dev, "bindingConditions", ["c", "c"]), set_(dev, "bindingFailureConditions", ["f"])
        ),
        "duplicate condition 'c'",
    ),
    (
        "binding-name",
        BOTH,
        chain(
            set_(dev, "bindingConditions", ["bad name"]),
            set_(dev, "bindingFailureConditions", ["f"]),
        ),
        "bindingConditions[0]",
    ),
    ("binds-type", BOTH, set_(dev, "bindsToNode", "yes"), "must be a boolean"),
    ("multi-type", BOTH, set_(dev, "allowMultipleAllocations", "yes"), "must be a boolean"),
]


@pytest.mark.parametrize(
    ("case", "version", "mutate", "expected"),
    [
        pytest.param(case, version, mutate, expected, id=f"{case}@{version}")
        for case, versions, mutate, expected in CASES
        for version in versions
    ],
)
def test_each_limit_is_reported(
    case: str, version: str, mutate: Callable[[Slice], None], expected: str
) -> None:
    obj = make_slice()
    assert validate_resource_slice(obj, version=version) == []
    mutate(obj)
    messages = validate_resource_slice(obj, version=version)
    assert any(expected in message for message in messages), messages
    label = obj.get("metadata", {}).get("name") or "<unnamed>"
    assert all(message.startswith(f"ResourceSlice {label}: ") for message in messages)


@pytest.mark.parametrize(
    ("mutate", "version"),
    [
        (devices(65, taints=[taint()]), "1.34"),
        (devices(128), "1.35"),
        (set_(dev, "taints", [taint(effect="None")] * 16), "1.35"),
        (set_(spec, "driver", "GPU.nvidia.com"), "1.35"),
        (set_(lambda o: spec(o)["pool"], "name", "rack-1/node-a"), "1.35"),
        (
            chain(
                drop(lambda o: o["metadata"], "name"),
                set_(lambda o: o["metadata"], "generateName", "node-a-"),
            ),
            "1.35",
        ),
        (chain(drop(spec, "nodeName"), set_(spec, "allNodes", True)), "1.35"),
        (set_(dev, "consumesCounters", [consumption("s0", 32), consumption("s1", 32)]), "1.35"),
        (
            chain(
                set_(spec, "sharedCounters", [counter_set("s", 2)]),
                set_(dev, "consumesCounters", [consumption("s", 2)]),
            ),
            "1.34",
        ),
        (shared_in_counter_slice(*(counter_set(f"s{i}", 32) for i in range(8))), "1.35"),
        (attr("resource.kubernetes.io/pcieRoot", {"string": "pci0000:00"}), "1.35"),
        (attr("v", {"version": "1.2.3-rc.1+build.5"}), "1.35"),
        (
            policy(
                "8Gi", {"default": "2Gi", "validRange": {"min": "1Gi", "max": "8Gi", "step": "1Gi"}}
            ),
            "1.35",
        ),
        (policy("8", {"default": "2", "validValues": ["1", "2", "4", "8"]}), "1.35"),
        (
            chain(
                set_(dev, "bindingConditions", ["ready"]),
                set_(dev, "bindingFailureConditions", ["failed"]),
            ),
            "1.35",
        ),
        (
            chain(
                drop(spec, "nodeName"),
                set_(spec, "perDeviceNodeSelection", True),
                set_(dev, "nodeName", "node-a"),
            ),
            "1.35",
        ),
    ],
)
def test_edges_of_the_limits_are_accepted(mutate: Callable[[Slice], None], version: str) -> None:
    obj = make_slice()
    mutate(obj)
    assert validate_resource_slice(obj, version=version) == []


def test_messages_name_slice_field_and_device() -> None:
    obj = make_slice(4)
    dev(obj, 3)["attributes"]["productName"] = {"string": "x" * 65}
    assert validate_resource_slice(obj) == [
        f'ResourceSlice {NAME}: spec.devices[3].attributes["productName"] (device gpu-3): '
        "string longer than 64 characters"
    ]


def test_too_many_devices_is_reported_once_not_per_device() -> None:
    obj = make_slice(200)
    for device in spec(obj)["devices"]:
        device["name"] = "BAD"
    assert validate_resource_slice(obj) == [
        f"ResourceSlice {NAME}: spec.devices: 200 devices: must have at most 128"
    ]


def test_check_resource_slices_raises_with_every_message() -> None:
    obj = make_slice(2)
    dev(obj, 0)["name"] = "Bad"
    dev(obj, 1)["attributes"]["v"] = {"version": "1.0"}
    with pytest.raises(SliceError) as info:
        check_resource_slices([obj])
    assert "spec.devices[0].name" in str(info.value)
    assert 'spec.devices[1].attributes["v"] (device gpu-1)' in str(info.value)


# --- pool-wide checks ----------------------------------------------------------------


def pool(*slices: Slice) -> list[Slice]:
    for obj in slices:
        spec(obj)["pool"]["resourceSliceCount"] = len(slices)
    return list(slices)


def test_pool_of_consistent_slices_is_accepted() -> None:
    first = make_slice(2, "n-0")
    second = make_slice(0, "n-1")
    spec(second)["devices"] = [{"name": "gpu-7"}]
    assert validate_pool(pool(first, second)) == []


def test_pool_device_names_are_unique_across_slices() -> None:
    messages = validate_pool(pool(make_slice(2, "n-0"), make_slice(1, "n-1")))
    assert messages == [
        "ResourceSlice n-1: spec.devices[0].name: device 'gpu-0' is also listed in "
        "ResourceSlice n-0"
    ]


def test_pool_slice_count_must_match() -> None:
    slices = [make_slice(1, "n-0")]
    spec(slices[0])["pool"]["resourceSliceCount"] = 2
    assert validate_pool(slices) == [
        "ResourceSlice n-0: spec.pool.resourceSliceCount: is 2 but the pool has 1 slices"
    ]


def test_pool_generations_and_names_must_agree() -> None:
    first, second = pool(make_slice(1, "n-0"), make_slice(0, "n-1"))
    spec(second)["pool"]["generation"] = 1
    spec(second)["driver"] = "other.example.com"
    messages = validate_pool([first, second])
    assert any("different generations" in m for m in messages)
    assert any("disagree on driver/pool name" in m for m in messages)


def test_pool_counter_references_must_resolve_in_1_35() -> None:
    counters = make_slice(0, "n-0")
    shared_in_counter_slice(counter_set("gpu-0-counter-set", 1))(counters)
    devs = make_slice(1, "n-1")
    dev(devs)["consumesCounters"] = [consumption("gpu-0-counter-set", 2), consumption("nope")]
    messages = validate_pool(pool(counters, devs), version="1.35")
    assert messages == [
        "ResourceSlice n-1: spec.devices[0].consumesCounters[0].counters['c1']: "
        "not defined in counter set 'gpu-0-counter-set'",
        "ResourceSlice n-1: spec.devices[0].consumesCounters[1].counterSet: "
        "'nope' is not defined in the pool",
    ]
    assert all(validate_resource_slice(s) == [] for s in (counters, devs))


def test_pool_counter_set_names_are_unique() -> None:
    first, second = make_slice(0, "n-0"), make_slice(0, "n-1")
    shared_in_counter_slice(counter_set("s"))(first)
    shared_in_counter_slice(counter_set("s"))(second)
    assert validate_pool(pool(first, second)) == [
        "ResourceSlice n-1: spec.sharedCounters[0].name: counter set 's' is also defined in "
        "ResourceSlice n-0"
    ]


# --- schema, versions, name helpers --------------------------------------------------


def test_schema_accepts_a_valid_slice_for_every_supported_version() -> None:
    for version in ("1.34", "1.35", "v1.35.2", "1.36", "1.37"):
        validate_schema(make_slice(3), version)


def test_schema_rejects_unknown_fields_strictly() -> None:
    obj = make_slice()
    dev(obj)["basic"] = {}  # the v1beta1 shape
    with pytest.raises(SliceError, match=rf"ResourceSlice {NAME}: spec.devices.0: .*'basic'"):
        validate_schema(obj)


def test_schema_rejects_wrong_types() -> None:
    obj = make_slice()
    spec(obj)["pool"]["generation"] = "zero"
    with pytest.raises(SliceError, match=r"spec.pool.generation: 'zero' is not of type 'integer'"):
        validate_schema(obj)


@pytest.mark.parametrize(
    ("given", "short"),
    [("1.35", "1.35"), ("v1.34.3", "1.34"), ("1.35.0", "1.35"), ("v1.37.1", "1.37")],
)
def test_versions_are_normalized(given: str, short: str) -> None:
    assert check_version(given) == short


@pytest.mark.parametrize("version", ["1.33", "1.38", "2"])
def test_unknown_versions_are_refused(version: str) -> None:
    with pytest.raises(SliceError, match=r"limits are known for 1\.34, 1\.35, 1\.36, 1\.37"):
        validate_resource_slice(make_slice(), version=version)


# --- list-typed attribute values (DRAListTypeAttributes, 1.36+) ------------------------------

NUMA = "resource.kubernetes.io/numaNode"


def _with_lists(devices: int, **values: Any) -> Slice:
    obj = make_slice(devices)
    for i in range(devices):
        dev(obj, i)["attributes"].update(values)
    return obj


@pytest.mark.parametrize("version", ["1.36", "1.37"])
def test_list_values_are_accepted_from_136(version: str) -> None:
    obj = _with_lists(2, **{NUMA: {"ints": [0]}, "pcieRoots": {"strings": ["pci0000:00"]}})
    assert validate_resource_slice(obj, version=version) == []
    validate_schema(obj, version)


@pytest.mark.parametrize("version", ["1.34", "1.35"])
def test_list_values_are_unknown_before_136(version: str) -> None:
    messages = validate_resource_slice(_with_lists(1, **{NUMA: {"ints": [0]}}), version=version)
    assert messages == [
        f'ResourceSlice {NAME}: spec.devices[0].attributes["{NUMA}"] (device gpu-0): unknown value '
        "fields ['ints']",
        f'ResourceSlice {NAME}: spec.devices[0].attributes["{NUMA}"] (device gpu-0): exactly one '
        "value must be specified, found none",
    ]


@pytest.mark.parametrize(
    ("value", "words"),
    [
        ({"ints": []}, "ints must be a non-empty list"),
        ({"ints": 3}, "ints must be a non-empty list"),
        ({"ints": [1, "2"]}, f"attributes[\"{NUMA}\"].ints[1] (device gpu-0): int '2' is not"),
        ({"versions": ["1.2"]}, "version '1.2' is not a semver 2.0.0 version"),
        ({"ints": [0], "int": 0}, "exactly one value must be specified, found ['int', 'ints']"),
        ({"ints": list(range(47))}, "49 attribute values: must have at most 48"),  # + 2 scalars
    ],
)
def test_bad_list_values_are_refused(value: dict[str, Any], words: str) -> None:
    messages = validate_resource_slice(_with_lists(1, **{NUMA: value}), version="1.36")
    assert any(words in message for message in messages), messages


def test_a_slice_with_list_values_holds_at_most_64_devices() -> None:
    messages = validate_resource_slice(_with_lists(65, **{NUMA: {"ints": [0]}}), version="1.36")
    assert messages == [
        f"ResourceSlice {NAME}: spec.devices: 65 devices: must have at most 64 (some device has "
        "taints, consumesCounters or list-typed attributes)"
    ]
    assert validate_resource_slice(_with_lists(64, **{NUMA: {"ints": [0]}}), version="1.36") == []
