"""The admission check refuses exactly the claims whose own configs the node would refuse.

Driven by the simulate/plugin differential test's corpus (imported, not
copied): every distinct claim in it is checked alone on an empty node of its
case's kind by the node's check at Prepare (`simulate`'s node check is
`dra_driver.planning.plan_claim`, the function the kubelet plugin's Prepare
calls, and the differential test holds the two to the same answers on this
corpus). A claim the node refuses alone has a bad config: the admission check
must refuse it with the same message. A claim the node prepares alone must be
admitted (what the node refuses only beside another claim, a second
time-slice interval on a shared GPU, is no admission matter).

The messages differ only where the two sides stand: the plugin names the
config in `status.allocation` and the allocated devices, the admission check
names it in the spec and describes the devices by the request's DeviceClass.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

import pytest

from dra_driver.admission.review import review
from tests.dra_driver.scheduling.whatif.test_differential_plugin import Case, corpus, simulate

REFUSED: Final = "but the node's kubelet plugin refuses to prepare it: "
DEVICE: Final = "<device>"


def _admission_review(claim: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "u",
            "operation": "CREATE",
            "resource": {"group": "resource.k8s.io", "version": "v1", "resource": "resourceclaims"},
            "namespace": "default",
            "object": claim,
        },
    }


def _plugin_words(message: str, allocation: Mapping[str, Any]) -> str:
    """The plugin's message with the allocation-only details put as the spec says them."""
    message = re.sub(
        r"status\.allocation\.devices\.config\[(\d+)\] \(FromClaim\)",
        r"spec.devices.config[\1]",
        message,
    )
    for result in allocation["devices"]["results"]:
        message = re.sub(rf"\b{re.escape(result['device'])}\b", DEVICE, message)
    return message


def _admission_words(message: str) -> str:
    message = re.sub(r"\(DeviceClass [a-z.-]+\)", DEVICE, message)
    return re.sub(r"(?<![.\w-])[a-z0-9-]+(/[a-z0-9-]+)?\[\d+\]", DEVICE, message)  # "dev[1]"


@pytest.mark.timeout(600)
def test_admission_refuses_every_bad_config_of_the_corpus_with_the_plugins_message(
    tmp_path: Path,
) -> None:
    distinct: dict[tuple[str, str], tuple[Case, dict[str, Any]]] = {}
    for case in corpus():
        for claim in case.claims:
            key = (case.node.name, json.dumps(claim["spec"], sort_keys=True))
            distinct.setdefault(key, (case, claim))
    disagreements: list[str] = []
    refused = allowed = 0
    for case, claim in distinct.values():
        (verdict,) = simulate(Case(case.number, case.node, (claim,), "alone"), tmp_path)
        if verdict.allocation is None:
            continue  # nothing on the node fits it: no config of it is ever checked
        answer = review(_admission_review(claim), driver="gpu.nvidia.com")
        what = f"{case.node.name} {claim['metadata']['name']} {claim['spec']['devices']}"
        if verdict.placed:
            allowed += 1
            if not answer.allowed:
                disagreements.append(f"{what}: prepared, but refused: {answer.message}")
            continue
        refused += 1
        assert REFUSED in verdict.reason, verdict.reason  # no capacity problem, alone
        plugin = _plugin_words(verdict.reason.split(REFUSED, 1)[1].strip(), verdict.allocation)
        if answer.allowed:
            disagreements.append(f"{what}: the plugin refuses ({plugin}), admission allows")
        elif _admission_words(answer.message) != plugin:
            disagreements.append(f"{what}:\n  plugin:    {plugin}\n  admission: {answer.message}")
        else:
            assert (answer.reason, answer.code) == ("Invalid", 422)
    assert refused >= 100, refused
    assert allowed >= 60, allowed
    assert disagreements == [], f"{len(disagreements)} disagreements:\n" + "\n".join(
        disagreements[:20]
    )
