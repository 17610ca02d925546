"""The scheduler keeps a domain's pods off a node that serves another domain.

A node serving ComputeDomain A publishes `channel-0` with `domain=<A's UID>`;
the workload template of domain B selects only channels without that
attribute or with B's UID, so our allocator (real CEL) rejects the node for
B with the reason `explain` prints, and still places A's pods there.
"""

from __future__ import annotations

import copy
from typing import Any

from controller.compute_domain_inventory import compute_domain_resource_slices
from dra_driver.compute_domain.api import decode_compute_domain
from dra_driver.compute_domain.devices import with_domain
from dra_driver.compute_domain.names import CHANNEL_DEVICE_CLASS, DRIVER_NAME
from dra_driver.compute_domain.templates import channel_selector, workload_claim_template
from dra_driver.scheduling.allocator import Allocator, ExplainRecorder, Node, render_explanation
from dra_driver.scheduling.allocator.trace import RequestSelectorFalse
from tests.dra_driver.compute_domain.test_templates import DOMAIN
from tests.fakes import make_device_class

UID_A = "aaaaaaaa-0000-0000-0000-000000000001"
UID_B = "bbbbbbbb-0000-0000-0000-000000000002"
CLIQUE = "00000000-0000-0000-0000-000000000001.0"
CHANNEL_CLASS = make_device_class(CHANNEL_DEVICE_CLASS, f'device.driver == "{DRIVER_NAME}"')
CHANNEL = {
    "name": "channel-0",
    "attributes": {"type": {"string": "channel"}, "id": {"int": 0}, "cliqueID": {"string": CLIQUE}},
    "allowMultipleAllocations": True,
}


def _claim(uid: str, name: str) -> dict[str, Any]:
    obj = copy.deepcopy(DOMAIN)
    obj["metadata"]["uid"] = uid
    template = workload_claim_template(decode_compute_domain(obj))
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"namespace": "team-a", "name": name},
        "spec": template["spec"]["spec"],
    }


def _allocator(serving: str | None) -> Allocator:
    slices = compute_domain_resource_slices(with_domain((CHANNEL,), serving), node_name="gb-0")
    return Allocator(slices, [CHANNEL_CLASS])


def test_a_node_serving_domain_a_is_not_chosen_for_domain_b() -> None:
    recorder = ExplainRecorder()
    results = _allocator(UID_A).allocate(Node("gb-0"), [_claim(UID_B, "b-0")], tracer=recorder)
    assert results is None
    (entry,) = recorder.explanation.requests
    (verdict,) = [v for ref, v in entry.devices.items() if ref.device == "channel-0"]
    assert verdict.reasons == [RequestSelectorFalse(0, channel_selector(UID_B))]
    assert f"request selector #0 is false: {channel_selector(UID_B)}" in render_explanation(
        recorder.explanation
    )


def test_a_node_serving_domain_a_takes_more_of_a_and_a_free_node_takes_any() -> None:
    for serving, uid in ((UID_A, UID_A), (None, UID_A), (None, UID_B)):
        results = _allocator(serving).allocate(Node("gb-0"), [_claim(uid, "c-0")])
        assert results is not None, (serving, uid)
        assert [r["device"] for r in results[0]["devices"]["results"]] == ["channel-0"]
