"""The workload ResourceClaimTemplate the controller creates for a ComputeDomain.

Exactly NVIDIA's object (`templates/compute-domain-workload-claim-template.tmpl.yaml`,
`cmd/compute-domain-controller/resourceclaimtemplate.go`; computedomain.md
§1.4): in the domain's namespace, named `spec.channel.resourceClaimTemplate.name`,
with the finalizer `resource.nvidia.com/computeDomain`, the labels
`resource.nvidia.com/computeDomain=<UID>` and
`resource.nvidia.com/computeDomainTarget=Workload`, one request `channel` for
the class `compute-domain-default-channel.nvidia.com`, and an opaque
`ComputeDomainChannelConfig` carrying the domain's UID and allocation mode
(`Single` in host-managed IMEX mode, whatever the domain asks: the host's
IMEX has only channel 0 to give). Pure: the controller and the simulator
create what this returns.

One addition of ours: the request selects a channel that serves no domain or
this one (`channel_selector`; the `domain` attribute, `devices.py`), so the
scheduler never sends a pod to a node whose IMEX daemon serves another
domain. Not in host-managed IMEX mode: there every domain shares the host's
channel 0 with no isolation (computedomain.md §4.8) and no attribute is
published. Nor in channel isolation (`pin_domain=False`;
`dra_driver.compute_domain.isolation`): there a node serves every domain,
each on its own channel, and publishes `channel-0` without the attribute.
"""

from __future__ import annotations

from typing import Any

from dra_driver.compute_domain.api import ComputeDomain
from dra_driver.compute_domain.names import (
    API_VERSION,
    CHANNEL_DEVICE_CLASS,
    CHANNEL_REQUEST,
    DOMAIN_ATTRIBUTE,
    DOMAIN_LABEL,
    DRIVER_NAME,
    FINALIZER,
    TARGET_LABEL,
    TARGET_WORKLOAD,
)
from dra_driver.errors import ConfigError
from dra_driver.kube.names import is_label_value, is_uid


def channel_selector(uid: str) -> str:
    """CEL: a channel whose node serves no ComputeDomain, or the one with `uid`."""
    attrs = f"device.attributes['{DRIVER_NAME}']"
    return f"!('{DOMAIN_ATTRIBUTE}' in {attrs}) || {attrs}.{DOMAIN_ATTRIBUTE} == '{uid}'"


def workload_claim_template(
    domain: ComputeDomain, *, host_managed: bool = False, pin_domain: bool = True
) -> dict[str, Any]:
    """The resource.k8s.io/v1 ResourceClaimTemplate for `domain`'s workload pods.

    `domain` must have been stored (it needs its `metadata.uid`, which the API
    server assigns); ConfigError names the domain otherwise.
    """
    uid = domain.uid
    if not uid:
        raise ConfigError(
            f"{domain.ref}: metadata.uid: required (the API server assigns it when the "
            "ComputeDomain is created; the template carries it as domainID)"
        )
    if not (is_uid(uid) and is_label_value(uid)):
        raise ConfigError(
            f"{domain.ref}: metadata.uid: {uid!r} cannot be a label value (at most 63 "
            "alphanumerics, '-', '_' and '.')"
        )
    mode = "Single" if host_managed else domain.spec.channel.allocation_mode
    exactly: dict[str, Any] = {"deviceClassName": CHANNEL_DEVICE_CLASS}
    if not host_managed and pin_domain:
        exactly["selectors"] = [{"cel": {"expression": channel_selector(uid)}}]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {
            "namespace": domain.namespace,
            "name": domain.spec.channel.resource_claim_template.name,
            "finalizers": [FINALIZER],
            "labels": {DOMAIN_LABEL: uid, TARGET_LABEL: TARGET_WORKLOAD},
        },
        "spec": {
            "spec": {
                "devices": {
                    "requests": [
                        {
                            "name": CHANNEL_REQUEST,
                            "exactly": exactly,
                        }
                    ],
                    "config": [
                        {
                            "requests": [CHANNEL_REQUEST],
                            "opaque": {
                                "driver": DRIVER_NAME,
                                "parameters": {
                                    "apiVersion": API_VERSION,
                                    "kind": "ComputeDomainChannelConfig",
                                    "domainID": uid,
                                    "allocationMode": mode,
                                },
                            },
                        }
                    ],
                }
            }
        },
    }
