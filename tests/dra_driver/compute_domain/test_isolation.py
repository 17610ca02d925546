"""Channel isolation's identifiers: the channel annotation read strictly, the mode's one
rule for all three programs, the clique-wide IMEX domain's identity."""

from __future__ import annotations

from typing import Any

import pytest

from dra_driver.compute_domain import isolation
from dra_driver.errors import ClusterError, ConfigError


def _domain(annotation: str | None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "x", "namespace": "ns"}
    if annotation is not None:
        meta["annotations"] = {isolation.CHANNEL_ANNOTATION: annotation}
    return {"metadata": meta}


def test_the_channel_annotation_is_read_and_an_edited_one_is_named() -> None:
    assert isolation.domain_channel(_domain(None)) is None
    assert isolation.domain_channel(_domain("7")) == 7
    for bad in ("0", "2048", "seven", "-1"):
        with pytest.raises(ClusterError, match=r"ComputeDomain ns/x: metadata\.annotations"):
            isolation.domain_channel(_domain(bad))


def test_the_mode_must_be_known_and_channel_needs_driver_managed_imex() -> None:
    isolation.check_isolation("domain", host_managed=True)
    isolation.check_isolation("channel")
    with pytest.raises(ConfigError, match="--imex-isolation 'cluster'"):
        isolation.check_isolation("cluster")
    with pytest.raises(ConfigError, match="needs --imex-mode driverManaged"):
        isolation.check_isolation("channel", host_managed=True)


def test_a_cliques_imex_domain_has_one_identity_everywhere_and_never_a_uid() -> None:
    a = isolation.shared_domain_uid("uuid.0")
    assert a == isolation.shared_domain_uid("uuid.0")
    assert a != isolation.shared_domain_uid("uuid.1")
    assert a.startswith("clique-")
    with pytest.raises(ValueError, match="needs a clique ID"):
        isolation.shared_domain_uid("")
