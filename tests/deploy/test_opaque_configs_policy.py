"""The ValidatingAdmissionPolicy dra-gpu-opaque-configs, evaluated on the claims it guards.

The policy (deploy/base/opaque-configs-policy.yaml; the chart renders the same
object, test_combinations checks) refuses, at `kubectl apply`, a claim whose
opaque config for gpu.nvidia.com is not resource.nvidia.com/v1beta1 GpuConfig
or MigDeviceConfig. Its CEL is run here as the API server runs a policy:
matchConstraints first, then each variable in order (`variables.<name>`), then
each validation, the messageExpression on a refusal. The expressions are
compiled and evaluated by dra-gpu's Kubernetes CEL environment
(dra_driver.scheduling.cel: the apiserver's libraries, optional types
included), with `object` and `request` typed dyn as a policy's are.

The cases are the plugin's own: each is also decoded by the decoder Prepare
uses (dra_driver.claims.device_config.decode). What the policy refuses, the
plugin refuses too, with the same words after "kind is"; what the plugin
accepts, the policy lets through. Configs with a known kind but a bad field
inside pass the policy: the webhook and Prepare refuse those.

The webhook's matchConditions (deploy/components/webhook; the chart's is the
same) are run the same way: the API server calls the webhook for exactly the
claims and templates that carry a gpu.nvidia.com config.
"""

from __future__ import annotations

import copy
from functools import cache
from typing import Any

import pytest
import yaml

from dra_driver.claims.allocated import OpaqueConfig
from dra_driver.claims.device_config import decode
from dra_driver.errors import ClaimError
from dra_driver.scheduling.cel import DeviceView
from dra_driver.scheduling.cel.selector import CompiledExpression, compile_expression
from dra_driver.scheduling.cel.types import DYN
from tests.deploy.renders import BASE, ROOT

GPU = {"apiVersion": "resource.nvidia.com/v1beta1", "kind": "GpuConfig"}
MIG = {"apiVersion": "resource.nvidia.com/v1beta1", "kind": "MigDeviceConfig"}
# The plugin's cases (tests/dra_driver/claims/test_device_config.py) and NVIDIA's config shapes.
VALID = [
    GPU,
    MIG,
    {**GPU, "sharing": {"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Long"}}},
    {**GPU, "sharing": {"strategy": "MPS", "mpsConfig": {"defaultActiveThreadPercentage": 50}}},
    {**MIG, "sharing": {"strategy": "MPS"}},
]
UNKNOWN_KIND = [
    {"apiVersion": "resource.nvidia.com/v1beta1", "kind": "VfioConfig"},
    {"apiVersion": "resource.nvidia.com/v1beta1", "kind": "GpuConfg"},
    {"apiVersion": "resource.nvidia.com/v1beta1", "kind": "gpuconfig"},
    {"apiVersion": "resource.nvidia.com/v1beta1"},
    {"apiVersion": "resource.nvidia.com/v1beta1", "kind": 7},
    {},
]
WRONG_VERSION = [
    {**GPU, "apiVersion": "resource.nvidia.com/v1"},
    {**MIG, "apiVersion": "nvidia.com/v1beta1"},
    {"kind": "GpuConfig"},
]
BAD_FIELDS = [  # a known kind and version: left to the webhook and Prepare
    {**GPU, "sharing": {"strategy": "Magic"}},
    {**GPU, "shareing": {}},
    {**GPU, "sharing": {"strategy": "MPS", "mpsConfig": {"defaultActiveThreadPercentage": 150}}},
]
_DEVICE = DeviceView(driver="", attributes={}, capacity={})  # the environment's own variable
_DECLARED = {"object": DYN, "oldObject": DYN, "request": DYN, "variables": DYN}


@cache
def _policy() -> dict[str, Any]:
    docs = [d for d in yaml.safe_load_all((BASE / "opaque-configs-policy.yaml").read_text()) if d]
    (policy,) = [d for d in docs if d["kind"] == "ValidatingAdmissionPolicy"]
    spec: dict[str, Any] = policy["spec"]
    return spec


@cache
def _compiled(expression: str) -> CompiledExpression:
    return compile_expression(expression, variables=_DECLARED)


def _admit(obj: dict[str, Any], resource: str, operation: str = "CREATE") -> str | None:
    """None when the policy lets `obj` through, else its message."""
    spec = _policy()
    if not any(
        resource in rule["resources"] and operation in rule["operations"]
        for rule in spec["matchConstraints"]["resourceRules"]
    ):
        return None
    request = {
        "operation": operation,
        "resource": {"group": "resource.k8s.io", "version": "v1", "resource": resource},
    }
    bound: dict[str, Any] = {"object": obj, "oldObject": None, "request": request, "variables": {}}
    for variable in spec["variables"]:
        value, _ = _compiled(variable["expression"]).evaluate(_DEVICE, bound)
        bound["variables"][variable["name"]] = value
    for check in spec["validations"]:
        allowed, _ = _compiled(check["expression"]).evaluate(_DEVICE, bound)
        if allowed is not True:
            message, _ = _compiled(check["messageExpression"]).evaluate(_DEVICE, bound)
            return str(message)
    return None


def _configs(*parameters: dict[str, Any], driver: str = "gpu.nvidia.com") -> list[dict[str, Any]]:
    return [{"opaque": {"driver": driver, "parameters": copy.deepcopy(p)}} for p in parameters]


def _claim(configs: list[dict[str, Any]]) -> dict[str, Any]:
    requests = [{"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}}]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "c", "namespace": "ml"},
        "spec": {"devices": {"requests": requests, "config": configs}},
    }


def _plugin_error(parameters: dict[str, Any]) -> str | None:
    config = OpaqueConfig(
        source="FromClaim", requests=(), driver="gpu.nvidia.com", parameters=parameters
    )
    try:
        decode(config, "ResourceClaim ml/c: spec.devices.config[0]")
    except ClaimError as exc:
        return str(exc)
    return None


@pytest.mark.parametrize("parameters", VALID + BAD_FIELDS, ids=repr)
def test_a_known_kind_passes_the_policy(parameters: dict[str, Any]) -> None:
    assert _admit(_claim(_configs(parameters)), "resourceclaims") is None
    if parameters in VALID:
        assert _plugin_error(parameters) is None
    else:
        assert _plugin_error(parameters) is not None  # the webhook's and Prepare's to refuse


@pytest.mark.parametrize("parameters", UNKNOWN_KIND, ids=repr)
def test_an_unknown_kind_is_refused_with_the_plugins_words(parameters: dict[str, Any]) -> None:
    message = _admit(_claim(_configs(GPU, parameters)), "resourceclaims")
    plugin = _plugin_error(parameters)
    assert message is not None
    assert plugin is not None
    assert message.startswith("opaque config for driver gpu.nvidia.com: kind is ")
    words = message.partition(": kind is ")[2]
    if isinstance(parameters.get("kind"), str):  # the plugin prints a missing kind as None
        assert plugin.endswith(f"kind is {words}")
    assert words.endswith(
        "; dra-gpu understands resource.nvidia.com/v1beta1 GpuConfig, MigDeviceConfig and "
        "VfioDeviceConfig"
    )


@pytest.mark.parametrize("parameters", WRONG_VERSION, ids=repr)
def test_a_wrong_api_version_is_refused(parameters: dict[str, Any]) -> None:
    message = _admit(_claim(_configs(parameters)), "resourceclaims")
    assert _plugin_error(parameters) is not None
    assert message is not None
    assert "apiVersion" in message or "kind is" in message
    assert "resource.nvidia.com/v1beta1" in message


def test_templates_and_device_classes_are_checked_where_their_configs_are() -> None:
    bad = _configs({**GPU, "kind": "GpuConfg"})
    template = {"spec": {"spec": {"devices": {"requests": [], "config": bad}}}}
    device_class = {"spec": {"selectors": [], "config": bad}}
    assert _admit(template, "resourceclaimtemplates") is not None
    assert _admit(device_class, "deviceclasses") is not None
    assert _admit(device_class, "deviceclasses", "UPDATE") is not None
    good = _configs(GPU)
    assert (
        _admit({"spec": {"spec": {"devices": {"config": good}}}}, "resourceclaimtemplates") is None
    )
    assert _admit({"spec": {"config": good}}, "deviceclasses") is None


def test_other_drivers_claims_without_configs_and_updates_pass() -> None:
    assert (
        _admit(_claim(_configs({"kind": "Anything"}, driver="example.com")), "resourceclaims")
        is None
    )
    assert _admit(_claim([]), "resourceclaims") is None
    assert _admit({"spec": {"devices": {"requests": []}}}, "resourceclaims") is None
    assert _admit({"spec": {}}, "resourceclaims") is None
    assert _admit({"spec": {"spec": {}}}, "resourceclaimtemplates") is None
    assert _admit({"spec": {"selectors": []}}, "deviceclasses") is None
    assert _admit(_claim([{"requests": ["gpu"]}]), "resourceclaims") is None  # no opaque
    # A claim that predates the policy can still lose its finalizer: UPDATEs are not checked.
    bad = _claim(_configs({**GPU, "kind": "GpuConfg"}))
    assert _admit(bad, "resourceclaims", "UPDATE") is None
    assert _admit(bad, "resourceclaimtemplates", "UPDATE") is None


def _webhook_condition() -> str:
    docs = yaml.safe_load_all((ROOT / "deploy/components/webhook/webhook.yaml").read_text())
    (config,) = [d for d in docs if d and d["kind"] == "ValidatingWebhookConfiguration"]
    (webhook,) = config["webhooks"]
    (condition,) = webhook["matchConditions"]
    expression: str = condition["expression"]
    return expression


@pytest.mark.parametrize(
    ("resource", "obj", "sent"),
    [
        ("resourceclaims", _claim(_configs(GPU)), True),
        (
            "resourceclaims",
            _claim(_configs({"kind": "x"}, driver="example.com") + _configs(MIG)),
            True,
        ),
        ("resourceclaims", _claim(_configs(GPU, driver="example.com")), False),
        ("resourceclaims", _claim([]), False),
        ("resourceclaims", {"spec": {"devices": {"requests": []}}}, False),
        ("resourceclaims", _claim([{"requests": ["gpu"]}]), False),
        (
            "resourceclaimtemplates",
            {"spec": {"spec": {"devices": {"config": _configs(GPU)}}}},
            True,
        ),
        ("resourceclaimtemplates", {"spec": {"spec": {}}}, False),
    ],
)
def test_the_webhook_is_called_only_for_objects_with_a_gpu_config(
    resource: str, obj: dict[str, Any], sent: bool
) -> None:
    request = {"operation": "CREATE", "resource": {"resource": resource}}
    bound = {"object": obj, "oldObject": None, "request": request, "variables": {}}
    value, _ = _compiled(_webhook_condition()).evaluate(_DEVICE, bound)
    assert value is sent
