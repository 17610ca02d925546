"""`dra_driver.admission.review`: which claims the admission check refuses, and what it answers."""

from __future__ import annotations

from typing import Any, Final

import pytest

from dra_driver.admission.review import Verdict, check_claim_spec, review
from dra_driver.errors import AdmissionError

API: Final = "resource.nvidia.com/v1beta1"
DRIVER: Final = "gpu.nvidia.com"
GPU_MPS: Final = {"apiVersion": API, "kind": "GpuConfig", "sharing": {"strategy": "MPS"}}
MIG: Final = {"apiVersion": API, "kind": "MigDeviceConfig"}


def _review(obj: Any, *, operation: str = "CREATE", **request: Any) -> dict[str, Any]:
    body = {
        "uid": "u",
        "operation": operation,
        "resource": {"group": "resource.k8s.io", "version": "v1", "resource": "resourceclaims"},
        "object": obj,
        **request,
    }
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": body}


def _spec(*requests: dict[str, Any], config: list[dict[str, Any]]) -> dict[str, Any]:
    return {"devices": {"requests": list(requests), "config": config}}


def _exactly(name: str, device_class: str, **more: Any) -> dict[str, Any]:
    return {"name": name, "exactly": {"deviceClassName": device_class, **more}}


def _config(parameters: dict[str, Any], *requests: str) -> dict[str, Any]:
    entry: dict[str, Any] = {"opaque": {"driver": DRIVER, "parameters": parameters}}
    if requests:
        entry["requests"] = list(requests)
    return entry


def _check(spec: dict[str, Any]) -> list[str]:
    return check_claim_spec(spec, ref="ResourceClaim ns/c", path="spec", driver=DRIVER)


def test_a_first_available_request_is_refused_only_when_every_alternative_is() -> None:
    either = {
        "name": "r",
        "firstAvailable": [
            {"name": "mig", "deviceClassName": "mig.nvidia.com"},
            {"name": "gpu", "deviceClassName": "gpu.nvidia.com"},
        ],
    }
    assert _check(_spec(either, config=[_config(MIG, "r")])) == []  # fits the MIG one
    assert _check(_spec(either, config=[_config(MIG, "r/gpu")])) == [
        "ResourceClaim ns/c: a MigDeviceConfig names request 'r/gpu', but its device "
        "(DeviceClass gpu.nvidia.com) is a gpu device; use GpuConfig"
    ]
    only_gpus = {"name": "r", "firstAvailable": [either["firstAvailable"][1]] * 2}
    assert len(_check(_spec(only_gpus, config=[_config(MIG, "r")]))) == 1


def test_a_class_whose_devices_are_unknown_is_not_judged() -> None:
    spec = _spec(_exactly("r", "my-own-gpus"), config=[_config(MIG, "r")])
    assert _check(spec) == []


def test_an_unnamed_config_of_the_other_kind_is_ignored_as_at_prepare() -> None:
    assert _check(_spec(_exactly("r", "gpu.nvidia.com"), config=[_config(MIG)])) == []


def test_mps_counts_devices_of_one_request_with_an_exact_count() -> None:
    def spec(**more: Any) -> dict[str, Any]:
        return _spec(_exactly("r", "gpu.nvidia.com", **more), config=[_config(GPU_MPS)])

    assert _check(spec(count=1)) == []
    assert _check(spec(allocationMode="All")) == []  # a node with one GPU is fine
    assert _check(spec(count=3)) == [
        "ResourceClaim ns/c: asks for MPS on 3 devices (r[0], r[1], r[2]); a container "
        "reaches one MPS control daemon, so request each MPS device in its own claim"
    ]
    zero = {
        **GPU_MPS,
        "sharing": {"strategy": "MPS", "mpsConfig": {"defaultActiveThreadPercentage": 0}},
    }
    assert _check(_spec(_exactly("r", "mig.nvidia.com"), config=[_config(zero)])) == []  # not MIG's
    zero_mig = {**zero, "kind": "MigDeviceConfig"}
    assert _check(_spec(_exactly("r", "mig.nvidia.com"), config=[_config(zero_mig)])) == [
        "ResourceClaim ns/c: request 'r' on (DeviceClass mig.nvidia.com): "
        "defaultActiveThreadPercentage must be 1..100, not 0"
    ]
    # two requests may share one device (consumable shares): left to the node
    two = _spec(
        _exactly("a", "gpu.nvidia.com"), _exactly("b", "gpu.nvidia.com"), config=[_config(GPU_MPS)]
    )
    assert _check(two) == []


def test_every_bad_config_is_named_in_one_message() -> None:
    spec = _spec(
        _exactly("r", "gpu.nvidia.com"),
        config=[
            _config({"apiVersion": API, "kind": "GpuConfigg"}),
            {"opaque": {"driver": "other.example.com", "parameters": {"kind": "GpuConfigg"}}},
            _config({"apiVersion": API, "kind": "GpuConfig", "x": 1}),
        ],
    )
    verdict = review(
        _review({"metadata": {"name": "c", "namespace": "ns"}, "spec": spec}), driver=DRIVER
    )
    assert verdict.message == (
        "ResourceClaim ns/c: spec.devices.config[0]: kind is 'GpuConfigg'; dra-gpu understands "
        "resource.nvidia.com/v1beta1 GpuConfig, MigDeviceConfig and VfioDeviceConfig; "
        "ResourceClaim ns/c: "
        "spec.devices.config[2]: invalid GpuConfig: x: Extra inputs are not permitted"
    )


def test_malformed_config_entries_and_oversized_parameters_are_named() -> None:
    assert _check({"devices": {"config": "nope"}}) == [
        "ResourceClaim ns/c: spec.devices.config must be a list, got str 'nope'"
    ]
    big = {"apiVersion": API, "kind": "GpuConfig", "pad": "x" * 11000}
    (problem,) = _check(_spec(config=[_config(big)]))
    assert problem.startswith("ResourceClaim ns/c: spec.devices.config[0].opaque.parameters is ")
    assert problem.endswith("more than the API's limit of 10 KiB")


def test_a_claim_made_from_generate_name_is_named_by_its_prefix() -> None:
    obj = {
        "metadata": {"generateName": "job-gpu-", "namespace": "ml"},
        "spec": _spec(config=[_config({"kind": "Nope"})]),
    }
    verdict = review(_review(obj), driver=DRIVER)
    assert verdict.subject == "ResourceClaim ml/job-gpu-*"
    assert verdict.message.startswith("ResourceClaim ml/job-gpu-*: spec.devices.config[0]: ")


@pytest.mark.parametrize(
    "request_fields",
    [{"operation": "DELETE"}, {"operation": "UPDATE", "subResource": "status"}],
)
def test_deletes_and_status_updates_are_allowed(request_fields: dict[str, Any]) -> None:
    bad = {"metadata": {"name": "c"}, "spec": _spec(config=[_config({"kind": "Nope"})])}
    assert review(_review(bad, **request_fields), driver=DRIVER).allowed


def test_the_response_is_an_admission_review() -> None:
    refused = Verdict("u", False, "ResourceClaim ns/c", "bad", reason="Invalid", code=422)
    assert refused.response() == {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "response": {
            "uid": "u",
            "allowed": False,
            "status": {"status": "Failure", "message": "bad", "reason": "Invalid", "code": 422},
        },
    }
    assert Verdict("u", True).response()["response"] == {"uid": "u", "allowed": True}


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ([], "expected an AdmissionReview object, got a JSON list"),
        ({"apiVersion": "admission.k8s.io/v1beta1", "kind": "AdmissionReview"},
         "expected apiVersion admission.k8s.io/v1, kind AdmissionReview; got apiVersion "
         "'admission.k8s.io/v1beta1', kind 'AdmissionReview'"),
        ({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"},
         "AdmissionReview.request is not set"),
    ],
)  # fmt: skip
def test_a_body_that_is_no_admission_review_is_an_admission_error(body: Any, message: str) -> None:
    with pytest.raises(AdmissionError) as caught:
        review(body, driver=DRIVER)
    assert str(caught.value) == message
