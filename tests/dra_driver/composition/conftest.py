"""What the ComputeDomain end-to-end tests share: the clusters' timing and a fixture that
starts simulated clusters and checks each left nothing behind."""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from dra_driver.composition.compute_domain_cluster import (
    ClusterTiming,
    ComputeDomainCluster,
    processes_naming,
)
from tests.fakes import zygote

TIMING = ClusterTiming(
    fabric_check_interval=0.5,
    prepare_wait=10.0,
    lease_duration=3.0,
    renew_deadline=2.0,
    retry_period=0.5,
    imex_poll=0.2,
    imex_ready_poll=0.5,
)
"""Short intervals, so each scenario's wall-clock bound stays a few seconds."""


@pytest.fixture
def make_cluster() -> Iterator[Callable[..., ComputeDomainCluster]]:
    made: list[ComputeDomainCluster] = []

    def make(nodes: int, **kwargs: Any) -> ComputeDomainCluster:
        # A loopback network of its own (127.X.Y.k): tests in other pytest workers run
        # clusters at the same time, and IMEX daemons must not bind each other's addresses.
        kwargs.setdefault("ip_prefix", f"127.{random.randint(2, 254)}.{random.randint(0, 255)}")
        cluster = ComputeDomainCluster(nodes=nodes, spawn=zygote.spawn, timing=TIMING, **kwargs)
        made.append(cluster)
        return cluster

    yield make
    for cluster in made:
        cluster.close()
        # Every scenario leaves nothing running: daemons, IMEX daemons, the work directory.
        assert processes_naming(cluster.work) == []
        assert not cluster.work.exists()
