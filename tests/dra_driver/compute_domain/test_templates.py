"""The workload ResourceClaimTemplate: NVIDIA's object, valid for the API server."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from dra_driver.compute_domain.api import decode_compute_domain
from dra_driver.compute_domain.templates import workload_claim_template
from dra_driver.errors import ConfigError
from dra_driver.kube.strict_schema import describe, strict_errors
from dra_driver.kube.validation import Context, validate_claim_spec

DOMAIN: dict[str, Any] = {
    "apiVersion": "resource.nvidia.com/v1beta1",
    "kind": "ComputeDomain",
    "metadata": {
        "name": "imex-channel-injection-all",
        "namespace": "team-a",
        "uid": "3f6e6d2c-6a44-4a59-9c36-4b8d1c1a2b3c",
    },
    "spec": {
        "numNodes": 1,
        "channel": {"resourceClaimTemplate": {"name": "imex-channel-0"}, "allocationMode": "All"},
    },
}
UID = DOMAIN["metadata"]["uid"]


def test_the_template_is_nvidias_plus_our_domain_selector() -> None:
    template = workload_claim_template(decode_compute_domain(DOMAIN))
    assert template == {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {
            "namespace": "team-a",
            "name": "imex-channel-0",
            "finalizers": ["resource.nvidia.com/computeDomain"],
            "labels": {
                "resource.nvidia.com/computeDomain": UID,
                "resource.nvidia.com/computeDomainTarget": "Workload",
            },
        },
        "spec": {
            "spec": {
                "devices": {
                    "requests": [
                        {
                            "name": "channel",
                            "exactly": {
                                "deviceClassName": "compute-domain-default-channel.nvidia.com",
                                "selectors": [
                                    {
                                        "cel": {
                                            "expression": (
                                                "!('domain' in device.attributes"
                                                "['compute-domain.nvidia.com']) || "
                                                "device.attributes['compute-domain.nvidia.com']"
                                                f".domain == '{UID}'"
                                            )
                                        }
                                    }
                                ],
                            },
                        }
                    ],
                    "config": [
                        {
                            "requests": ["channel"],
                            "opaque": {
                                "driver": "compute-domain.nvidia.com",
                                "parameters": {
                                    "apiVersion": "resource.nvidia.com/v1beta1",
                                    "kind": "ComputeDomainChannelConfig",
                                    "domainID": UID,
                                    "allocationMode": "All",
                                },
                            },
                        }
                    ],
                }
            }
        },
    }


@pytest.mark.parametrize("release", ["1.35.0", "1.37.0"])
def test_the_template_is_valid_for_the_api_server(release: str) -> None:
    template = workload_claim_template(decode_compute_domain(DOMAIN))
    errors = strict_errors(template, release)
    assert errors == [], [describe(error) for error in errors or []]
    assert validate_claim_spec(template["spec"]["spec"], "spec.spec", Context()) == []


def test_host_managed_imex_forces_a_single_channel() -> None:
    template = workload_claim_template(decode_compute_domain(DOMAIN), host_managed=True)
    parameters = template["spec"]["spec"]["devices"]["config"][0]["opaque"]["parameters"]
    assert parameters["allocationMode"] == "Single"


def test_a_domain_without_a_uid_has_no_template() -> None:
    obj = copy.deepcopy(DOMAIN)
    del obj["metadata"]["uid"]
    with pytest.raises(
        ConfigError,
        match=r"ComputeDomain team-a/imex-channel-injection-all: metadata.uid: required",
    ):
        workload_claim_template(decode_compute_domain(obj))
    obj["metadata"]["uid"] = "x" * 64
    with pytest.raises(ConfigError, match="cannot be a label value"):
        workload_claim_template(decode_compute_domain(obj))
