"""`status.reservedFor` read the same way everywhere: Pods and 1.37's PodGroups."""

from __future__ import annotations

from typing import Any

from dra_driver.claims.consumers import Consumer, claim_consumers, is_reserved

POD = {"resource": "pods", "name": "trainer-0", "uid": "p0"}
POD_GROUP = {"apiGroup": "scheduling.k8s.io", "resource": "podgroups", "name": "gang", "uid": "g"}


def _claim(*entries: Any) -> dict[str, Any]:
    return {"metadata": {"name": "c"}, "status": {"reservedFor": list(entries)}}


def test_pods_and_podgroups_are_both_consumers() -> None:
    consumers = claim_consumers(_claim(POD, POD_GROUP))
    assert consumers == [
        Consumer(api_group="", resource="pods", name="trainer-0", uid="p0"),
        Consumer(api_group="scheduling.k8s.io", resource="podgroups", name="gang", uid="g"),
    ]
    assert [c.is_pod for c in consumers] == [True, False]
    assert [str(c) for c in consumers] == ["pod trainer-0", "podgroups.scheduling.k8s.io gang"]


def test_a_claim_held_only_by_a_podgroup_is_reserved() -> None:
    assert is_reserved(_claim(POD_GROUP))
    assert is_reserved(_claim(POD))
    assert not is_reserved(_claim())
    assert not is_reserved({"metadata": {"name": "c"}})
    assert not is_reserved({"status": {"reservedFor": None}})


def test_an_entry_that_cannot_be_named_still_keeps_the_claim_in_use() -> None:
    odd = {"uid": "x"}  # no resource or name: not a consumer we can name ...
    assert claim_consumers(_claim(odd, "garbage")) == []
    assert is_reserved(_claim(odd))  # ... but something holds the claim
