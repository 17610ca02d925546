"""Pieces of the CD plugin's wiring that matter to a user: the Warning Event of a claim
prepared without channels, and a cluster backend that cannot serve ComputeDomains."""

from __future__ import annotations

from pathlib import Path

import pytest

from dra_driver.errors import ConfigError
from dra_driver.kube.local_store import LocalCluster
from dra_driver.kube.object_store import EVENT
from kubelet_plugin.compute_domain.main import NO_CLIQUE_REASON, object_store, post_warning
from kubelet_plugin.service import ClaimRef


def test_a_warning_event_names_the_claim_and_the_node(tmp_path: Path) -> None:
    cluster = LocalCluster(tmp_path)
    ref = ClaimRef("default", "0b7cf0d2-5d1e-4c61-9a0e-3f5a1c2b7d90", "claim-0")
    post_warning(cluster, "gb-0", ref, "no multi-node NVLink clique")
    (event,) = cluster.list_objects(EVENT, "default")
    assert (event["type"], event["reason"]) == ("Warning", NO_CLIQUE_REASON)
    assert event["regarding"]["name"] == "claim-0"
    assert event["note"] == (
        "ResourceClaim default/claim-0 on node gb-0: no multi-node NVLink clique"
    )


def test_a_cluster_without_object_store_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="cannot read ComputeDomain objects"):
        object_store(object(), "kube")  # type: ignore[arg-type]
