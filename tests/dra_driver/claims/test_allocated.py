"""Parsing allocated ResourceClaims: this driver's devices, and clear errors for anything else."""

from __future__ import annotations

import contextlib
import copy
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dra_driver.claims.allocated import AllocatedClaim, DeviceResult, parse_allocated_claim
from dra_driver.errors import ClaimError
from tests.fakes import (
    TEST_CLAIM_UID,
    make_allocated_claim,
    make_opaque_config,
)

DRIVER = "gpu.nvidia.com"
REF = "ResourceClaim gpu-test/claim-1"


def claim(**kwargs: Any) -> dict[str, Any]:
    kwargs.setdefault("name", "claim-1")
    kwargs.setdefault("namespace", "gpu-test")
    return make_allocated_claim(**kwargs)


def parse(obj: Any, **kwargs: Any) -> AllocatedClaim:
    kwargs.setdefault("driver", DRIVER)
    kwargs.setdefault("expected_uid", TEST_CLAIM_UID)
    return parse_allocated_claim(obj, **kwargs)


def test_parses_a_simple_claim() -> None:
    parsed = parse(claim(results=[("gpu", "gpu-0"), ("gpu", "gpu-1")]))
    assert parsed.namespace == "gpu-test"
    assert parsed.name == "claim-1"
    assert parsed.uid == TEST_CLAIM_UID
    assert parsed.ref == REF
    assert [r.device for r in parsed.results] == ["gpu-0", "gpu-1"]
    assert parsed.results[0] == DeviceResult(
        request="gpu", driver=DRIVER, pool="sim-node", device="gpu-0"
    )
    assert parsed.configs == ()
    assert parsed.node_selector is not None
    assert "nodeSelectorTerms" in parsed.node_selector


def test_only_this_drivers_results_and_configs_are_kept() -> None:
    obj = claim(
        results=[
            ("gpu", "gpu-0"),
            {"request": "nic", "driver": "net.example.com", "pool": "p", "device": "eth0"},
        ],
        configs=[
            make_opaque_config({"kind": "GpuConfig"}),
            make_opaque_config({"mtu": 9000}, driver="net.example.com"),
        ],
    )
    parsed = parse(obj)
    assert [(r.driver, r.device) for r in parsed.results] == [(DRIVER, "gpu-0")]
    assert [c.parameters["kind"] for c in parsed.configs] == ["GpuConfig"]


def test_other_drivers_results_are_not_validated_beyond_driver() -> None:
    obj = claim(results=[("gpu", "gpu-0"), {"driver": "net.example.com", "device": 7}])
    assert len(parse(obj).results) == 1


def test_admin_access_share_id_and_consumed_capacity() -> None:
    obj = claim(
        results=[
            {
                "request": "gpu",
                "device": "gpu-0",
                "adminAccess": True,
                "shareID": "6f1c3a52-2f2e-4b0c-9c3f-0e5d8f9a1b2c",
                "consumedCapacity": {"memory": "10Gi", "shares": 2},
            }
        ]
    )
    (result,) = parse(obj).results
    assert result.admin_access is True
    assert result.share_id == "6f1c3a52-2f2e-4b0c-9c3f-0e5d8f9a1b2c"
    assert dict(result.consumed_capacity) == {"memory": "10Gi", "shares": "2"}


def test_admin_access_defaults_to_false_and_null_is_false() -> None:
    obj = claim(results=[{"request": "gpu", "device": "gpu-0", "adminAccess": None}])
    assert parse(obj).results[0].admin_access is False


def test_subrequest_base_name() -> None:
    (result,) = parse(claim(results=[("large/mig-3g", "gpu-0-mig-3g40gb-9-4")])).results
    assert result.request == "large/mig-3g"
    assert result.base_request == "large"
    assert result.subrequest == "mig-3g"
    plain = DeviceResult(request="gpu", driver=DRIVER, pool="p", device="gpu-0")
    assert plain.base_request == "gpu"
    assert plain.subrequest is None


def test_configs_for_orders_class_before_claim_and_matches_subrequests() -> None:
    obj = claim(
        results=[("large/mig-3g", "gpu-0-mig-3g40gb-9-4"), ("small", "gpu-1")],
        configs=[
            make_opaque_config({"n": "claim-all"}),
            make_opaque_config({"n": "class"}, source="FromClass"),
            make_opaque_config({"n": "claim-large"}, requests=["large"]),
            make_opaque_config({"n": "claim-sub"}, requests=["large/mig-3g"]),
            make_opaque_config({"n": "claim-other-sub"}, requests=["large/mig-1g"]),
            make_opaque_config({"n": "claim-small"}, requests=["small"]),
        ],
    )
    parsed = parse(obj)
    large, small = parsed.results
    assert [c.parameters["n"] for c in parsed.configs_for(large)] == [
        "class",
        "claim-all",
        "claim-large",
        "claim-sub",
    ]
    assert [c.parameters["n"] for c in parsed.configs_for(small)] == [
        "class",
        "claim-all",
        "claim-small",
    ]


def test_parameters_are_a_copy() -> None:
    obj = claim(configs=[make_opaque_config({"sharing": {"strategy": "TimeSlicing"}})])
    parsed = parse(obj)
    obj["status"]["allocation"]["devices"]["config"][0]["opaque"]["parameters"]["sharing"][
        "strategy"
    ] = "MPS"
    assert parsed.configs[0].parameters["sharing"]["strategy"] == "TimeSlicing"


def test_missing_kind_and_api_version_are_accepted() -> None:
    obj = claim()
    del obj["kind"], obj["apiVersion"]
    assert parse(obj).name == "claim-1"


def test_v1beta1_is_accepted() -> None:
    obj = claim()
    obj["apiVersion"] = "resource.k8s.io/v1beta1"
    assert parse(obj).name == "claim-1"


def test_uid_mismatch_says_claim_was_recreated() -> None:
    with pytest.raises(ClaimError) as info:
        parse(claim(), expected_uid="11111111-2222-3333-4444-555555555555")
    assert str(info.value) == (
        f"{REF}: metadata.uid is {TEST_CLAIM_UID}, the kubelet asked for "
        "11111111-2222-3333-4444-555555555555: the claim was deleted and re-created"
    )


def test_no_result_for_driver() -> None:
    obj = claim(results=[{"request": "nic", "driver": "net.example.com", "device": "eth0"}])
    with pytest.raises(ClaimError) as info:
        parse(obj)
    assert str(info.value) == (
        f"{REF}: status.allocation.devices.results has no device for driver gpu.nvidia.com"
    )


def test_not_allocated() -> None:
    obj = claim()
    del obj["status"]["allocation"]
    with pytest.raises(ClaimError) as info:
        parse(obj)
    assert str(info.value) == f"{REF}: status.allocation is not set (the claim is not allocated)"


def mutate(path: str, value: Any) -> dict[str, Any]:
    """A valid claim with the value at a dotted path replaced (`None` deletes it)."""
    obj = claim()
    node: Any = obj
    keys: list[Any] = [int(k) if k.isdigit() else k for k in path.split(".")]
    for key in keys[:-1]:
        node = node[key]
    if value is None:
        del node[keys[-1]]
    else:
        node[keys[-1]] = value
    return obj


RESULT0 = "status.allocation.devices.results.0"


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        ("kind", "Pod", "kind is 'Pod', expected 'ResourceClaim'"),
        ("apiVersion", "resource.k8s.io/v2", "apiVersion is 'resource.k8s.io/v2'"),
        ("apiVersion", ["x"], "apiVersion is ['x']"),
        ("metadata.uid", None, "metadata.uid is not set"),
        ("status", "allocated", "status must be an object, got str 'allocated'"),
        ("status.allocation", [], "status.allocation must be an object, got a list"),
        ("status.allocation.devices", 3, "status.allocation.devices must be an object"),
        (
            "status.allocation.devices.results",
            {},
            "status.allocation.devices.results must be a list",
        ),
        (RESULT0, "gpu-0", "status.allocation.devices.results[0] must be an object"),
        (f"{RESULT0}.device", None, "status.allocation.devices.results[0].device is not set"),
        (f"{RESULT0}.pool", None, "status.allocation.devices.results[0].pool is not set"),
        (f"{RESULT0}.request", None, "status.allocation.devices.results[0].request is not set"),
        (f"{RESULT0}.driver", None, "status.allocation.devices.results[0].driver is not set"),
        (f"{RESULT0}.device", 0, "results[0].device must be a string, got int 0"),
        (f"{RESULT0}.pool", ["p"], "results[0].pool must be a string, got a list"),
        (f"{RESULT0}.device", "GPU_0", "results[0].device 'GPU_0' is not a DNS label"),
        (f"{RESULT0}.request", "a/b/c", "results[0].request 'a/b/c' is not '<request>'"),
        (f"{RESULT0}.adminAccess", "yes", "results[0].adminAccess must be true or false"),
        (f"{RESULT0}.shareID", 5, "results[0].shareID must be a string"),
        (f"{RESULT0}.consumedCapacity", ["1Gi"], "results[0].consumedCapacity must be an object"),
        (f"{RESULT0}.consumedCapacity", {"m": 1.5}, "consumedCapacity['m'] must be a quantity"),
        ("status.allocation.devices.config", {}, "status.allocation.devices.config must be a list"),
        ("status.allocation.nodeSelector", "node-1", "status.allocation.nodeSelector must be an"),
    ],
)
def test_malformed_claims_name_claim_and_field(path: str, value: Any, message: str) -> None:
    with pytest.raises(ClaimError) as info:
        parse(mutate(path, value))
    assert str(info.value).startswith(f"{REF}: ")
    assert message in str(info.value)


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"source": "FromClaim", "opaque": "x"}, "config[0].opaque must be an object"),
        ({"source": "FromClaim", "opaque": {"parameters": {}}}, "config[0].opaque.driver is not"),
        ({"source": "FromPod", "opaque": {"driver": DRIVER, "parameters": {}}}, "config[0].source"),
        ({"source": "FromClaim", "opaque": {"driver": DRIVER}}, "opaque.parameters is not set"),
        (
            {"source": "FromClaim", "opaque": {"driver": DRIVER, "parameters": [1]}},
            "opaque.parameters must be an object",
        ),
        (
            {
                "source": "FromClaim",
                "requests": "gpu",
                "opaque": {"driver": DRIVER, "parameters": {}},
            },
            "config[0].requests must be a list",
        ),
        (
            {
                "source": "FromClaim",
                "requests": [1],
                "opaque": {"driver": DRIVER, "parameters": {}},
            },
            "config[0].requests[0] must be a string",
        ),
    ],
)
def test_malformed_configs(entry: dict[str, Any], message: str) -> None:
    with pytest.raises(ClaimError) as info:
        parse(claim(configs=[entry]))
    assert str(info.value).startswith(f"{REF}: ")
    assert message in str(info.value)


def test_config_without_opaque_is_skipped() -> None:
    assert parse(claim(configs=[{"source": "FromClaim"}])).configs == ()


def test_namespace_and_name_must_match_the_kubelet_request() -> None:
    with pytest.raises(ClaimError, match=r"metadata\.namespace is 'gpu-test', the kubelet asked"):
        parse(claim(), expected_namespace="other")
    with pytest.raises(ClaimError, match=r"metadata\.name is 'claim-1', the kubelet asked"):
        parse(claim(), expected_name="claim-2")
    assert parse(claim(), expected_namespace="gpu-test", expected_name="claim-1").uid


def test_non_object_claim_uses_the_kubelet_names() -> None:
    with pytest.raises(ClaimError) as info:
        parse(["not", "a", "claim"], expected_namespace="ns", expected_name="c")
    assert str(info.value) == "ResourceClaim ns/c: expected a JSON object, got a list"
    with pytest.raises(ClaimError, match=f"ResourceClaim with uid {TEST_CLAIM_UID}: metadata is"):
        parse({"kind": "ResourceClaim"})


def test_long_garbage_is_truncated_in_messages() -> None:
    with pytest.raises(ClaimError) as info:
        parse(mutate("kind", "x" * 10_000))
    assert len(str(info.value)) < 200


# -- never anything but ClaimError -------------------------------------------

json_scalars = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8)
json_values = st.recursive(
    json_scalars,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=20,
)
# Keys that appear in claims, so random objects often reach deep into the parser.
claim_keys = st.sampled_from(
    [
        "metadata", "name", "namespace", "uid", "status", "allocation", "devices", "results",
        "config", "request", "driver", "pool", "device", "adminAccess", "shareID",
        "consumedCapacity", "source", "requests", "opaque", "parameters", "nodeSelector",
        "kind", "apiVersion",
    ]
)  # fmt: skip
claim_like = st.recursive(
    json_scalars | st.just(DRIVER) | st.just(TEST_CLAIM_UID),
    lambda children: (
        st.lists(children, max_size=3)
        | st.dictionaries(claim_keys | st.text(max_size=4), children, max_size=5)
    ),
    max_leaves=30,
)


@settings(max_examples=150, deadline=None)
@given(obj=json_values | claim_like)
def test_random_structures_only_raise_claim_error(obj: Any) -> None:
    with contextlib.suppress(ClaimError):
        parse(obj)


def all_paths(node: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    paths = [prefix] if prefix else []
    if isinstance(node, dict):
        for key, child in node.items():
            paths += all_paths(child, (*prefix, key))
    elif isinstance(node, list):
        for i, child in enumerate(node):
            paths += all_paths(child, (*prefix, i))
    return paths


VALID = claim(
    results=[("gpu", "gpu-0"), ("mig/sub", "gpu-1-mig-1g10gb-19-0")],
    configs=[make_opaque_config({"kind": "GpuConfig"}, requests=["gpu"])],
)
VALID_PATHS = all_paths(VALID)


@settings(max_examples=150, deadline=None)
@given(path=st.sampled_from(VALID_PATHS), value=json_values)
def test_valid_claim_with_one_field_replaced_by_garbage(path: tuple[Any, ...], value: Any) -> None:
    obj = copy.deepcopy(VALID)
    node: Any = obj
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    try:
        parsed = parse(obj)
    except ClaimError as exc:
        message = str(exc)
    else:
        assert all(r.driver == DRIVER for r in parsed.results)
        return
    assert message.startswith("ResourceClaim ")


def _nested(depth: int) -> dict[str, Any]:
    value: dict[str, Any] = {"leaf": 1}
    for _ in range(depth - 1):
        value = {"x": value}
    return value


@pytest.mark.parametrize("depth", [500, 5000])
def test_deeply_nested_parameters_are_refused_naming_the_config(depth: int) -> None:
    obj = claim(configs=[make_opaque_config({"kind": "GpuConfig", "deep": _nested(depth)})])
    with pytest.raises(ClaimError) as refused:
        parse(obj)
    message = str(refused.value)
    assert "status.allocation.devices.config[0].opaque.parameters" in message
    assert "nested more than 32 levels deep" in message


def test_parameters_larger_than_the_api_allows_are_refused() -> None:
    obj = claim(configs=[make_opaque_config({"kind": "GpuConfig", "pad": "x" * 11_000})])
    with pytest.raises(ClaimError, match=r"config\[0\]\.opaque\.parameters is 1\d{4} bytes"):
        parse(obj)


def test_parameters_at_the_limits_are_accepted() -> None:
    params = {"kind": "GpuConfig", "deep": _nested(30), "pad": "x" * 9_000}
    assert parse(claim(configs=[make_opaque_config(params)])).configs[0].parameters == params
