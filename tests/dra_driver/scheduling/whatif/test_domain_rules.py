"""`DomainRules` on its own: claims already allocated count, the limit is a parameter."""

from __future__ import annotations

from typing import Any

from dra_driver.scheduling.allocator import Node
from dra_driver.scheduling.whatif.compute_domains import DomainRules, channel_domain

DRIVER = "compute-domain.nvidia.com"


def _slice(node: str, clique: str = "c.0") -> dict[str, Any]:
    device = {
        "name": "channel-0",
        "attributes": {
            "type": {"string": "channel"},
            "id": {"int": 0},
            "cliqueID": {"string": clique},
        },
    }
    return {
        "spec": {"driver": DRIVER, "nodeName": node, "pool": {"name": node}, "devices": [device]}
    }


def _claim(name: str, domain: str, node: str = "") -> dict[str, Any]:
    config = {
        "opaque": {
            "driver": DRIVER,
            "parameters": {"kind": "ComputeDomainChannelConfig", "domainID": domain},
        }
    }
    claim: dict[str, Any] = {
        "metadata": {"namespace": "ml", "name": name},
        "spec": {"devices": {"requests": [{"name": "channel"}], "config": [config]}},
    }
    if node:
        result = {"request": "channel", "driver": DRIVER, "pool": node, "device": "channel-0"}
        claim["status"] = {"allocation": {"devices": {"results": [result]}}}
    return claim


def test_a_claim_allocated_before_the_simulation_makes_its_node_serve_that_domain() -> None:
    rules = DomainRules(
        domains=[], slices=[_slice("n0"), _slice("n1")], claims={"ml/a": _claim("a", "uid-a", "n0")}
    )
    refusal = rules.refusal("n0", _claim("b", "uid-b", "n0"))
    assert refusal is not None
    assert refusal.startswith(
        "n0 already serves the ComputeDomain with UID uid-a (channel claim ml/a); a node runs "
        "one IMEX daemon"
    )
    assert rules.refusal("n1", _claim("b", "uid-b", "n1")) is None
    assert rules.why_unfit([_claim("c", "uid-c")], [Node("n0", {}), Node("n1", {})]) == (
        "no node can give the ComputeDomain with UID uid-c's pod an IMEX channel: n0 already "
        "serves the ComputeDomain with UID uid-a (one IMEX daemon per node: one ComputeDomain at "
        "a time); n1 already serves the ComputeDomain with UID uid-b (one IMEX daemon per node: "
        "one ComputeDomain at a time)"
    )


def test_the_clique_limit_counts_nodes_not_pods() -> None:
    rules = DomainRules(
        domains=[], slices=[_slice(f"n{i}") for i in range(3)], claims={}, max_nodes=2
    )
    assert rules.refusal("n0", _claim("a0", "d", "n0")) is None
    assert rules.refusal("n1", _claim("a1", "d", "n1")) is None
    assert rules.refusal("n0", _claim("a2", "d", "n0")) is None  # a node already in the domain
    refusal = rules.refusal("n2", _claim("a3", "d", "n2"))
    assert refusal is not None
    assert refusal.startswith(
        "clique c.0 already has 2 nodes of the ComputeDomain with UID d (n0, n1)"
    )
    assert "(--max-nodes-per-imex-domain 2)" in refusal
    # The refused node is a member without an index: it serves that domain, no other.
    other = rules.refusal("n2", _claim("b0", "e", "n2"))
    assert other is not None
    assert other.startswith("n2 already serves the ComputeDomain with UID d (channel claim ml/a3)")


def test_claims_that_ask_for_no_channel_are_not_its_business() -> None:
    gpu_claim = {
        "spec": {
            "devices": {
                "requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}}]
            }
        }
    }
    assert channel_domain(gpu_claim) is None
    rules = DomainRules(domains=[], slices=[_slice("n0")], claims={})
    assert rules.why_unfit([gpu_claim], [Node("n0", {})]) is None
    assert rules.refusal("n0", gpu_claim) is None
