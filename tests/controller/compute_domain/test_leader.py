"""Leader election on a Lease (as client-go does it) and two controller replicas (E9):
one holder, takeover after a crash within about a lease duration, no duplicate writes."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from controller.compute_domain.leader import DEFAULT_LEASE_NAME, LeaderConfig, LeaderElector
from controller.compute_domain.loop import ComputeDomainController, LoopOptions
from controller.compute_domain.reconcile import Options
from dra_driver.compute_domain.membership import member_name
from dra_driver.errors import ConfigError
from dra_driver.kube.object_store import (
    COMPUTE_DOMAIN,
    COMPUTE_DOMAIN_CLIQUE,
    LEASE,
    RESOURCE_CLAIM_TEMPLATE,
)
from tests.controller.compute_domain.objects import DRIVER_NS, add_domain, join, report
from tests.fakes.object_store import MemoryObjectStore
from tests.fakes.waiting import wait_until

LEASE_S, RENEW_S, RETRY_S = 1.0, 0.6, 0.1


def _config(identity: str, *, release: bool = True) -> LeaderConfig:
    return LeaderConfig(
        namespace=DRIVER_NS,
        identity=identity,
        lease_duration=LEASE_S,
        renew_deadline=RENEW_S,
        retry_period=RETRY_S,
        release_on_cancel=release,
    )


class Replica:
    """One controller replica: an elector and a controller loop, in threads."""

    def __init__(self, store: MemoryObjectStore, identity: str, *, release: bool = True) -> None:
        self.elector = LeaderElector(store, _config(identity, release=release))
        self.controller = ComputeDomainController(
            store,
            LoopOptions(Options(namespace=DRIVER_NS), debounce=0.01, identity=identity),
            is_leader=self.elector.is_leader,
        )
        self.stop = threading.Event()
        self.result: list[bool] = []
        self._threads = [
            threading.Thread(
                target=lambda: self.result.append(
                    self.elector.run(self.stop, on_started=self.controller.poke)
                )
            ),
            threading.Thread(target=self.controller.run, args=(self.stop,)),
        ]
        for thread in self._threads:
            thread.start()

    def kill(self) -> None:
        self.stop.set()
        for thread in self._threads:
            thread.join(timeout=5)
            assert not thread.is_alive()


@contextmanager
def _replicas(
    store: MemoryObjectStore, *names: str, release: bool = True
) -> Iterator[list[Replica]]:
    replicas = []
    try:
        for name in names:
            replicas.append(Replica(store, name, release=release))
        yield replicas
    finally:
        for replica in replicas:
            replica.kill()


def _lease(store: MemoryObjectStore) -> dict[str, Any]:
    spec: dict[str, Any] = store.get_object(LEASE, DRIVER_NS, DEFAULT_LEASE_NAME)["spec"]
    return spec


def test_the_first_replica_takes_the_lease_with_the_fields_kubernetes_writes() -> None:
    store = MemoryObjectStore()
    with _replicas(store, "a") as [a]:
        wait_until(a.elector.is_leader, "a to lead", timeout=5)
        first = _lease(store)
        assert first["holderIdentity"] == "a"
        assert first["leaseDurationSeconds"] == 1
        assert first["leaseTransitions"] == 0
        assert first["acquireTime"].endswith("Z")
        assert first["acquireTime"][19] == "."  # MicroTime: microseconds
        wait_until(lambda: _lease(store)["renewTime"] != first["renewTime"], "a renewal")
        assert _lease(store)["acquireTime"] == first["acquireTime"]
    # A clean stop releases it (ReleaseOnCancel): no holder, one second.
    released = _lease(store)
    assert (released["holderIdentity"], released["leaseDurationSeconds"]) == ("", 1)


def test_only_one_of_two_replicas_leads_and_the_other_takes_over_after_a_crash() -> None:
    store = MemoryObjectStore()
    with _replicas(store, "a", "b", release=False) as [a, b]:
        wait_until(lambda: a.elector.is_leader() or b.elector.is_leader(), "a leader", timeout=5)
        leader, other = (a, b) if a.elector.is_leader() else (b, a)
        time.sleep(3 * RETRY_S)
        assert not other.elector.is_leader()
        assert _lease(store)["holderIdentity"] == leader.elector.config.identity
        killed_at = time.monotonic()
        leader.kill()  # no release: the Lease must expire
        assert not leader.elector.is_leader()
        wait_until(other.elector.is_leader, "the takeover", timeout=5, interval=0.01)
        took = time.monotonic() - killed_at
        # The Lease is honoured (no takeover before it could have expired) and taken soon
        # after it did (the last renewal was at most a retry period before the kill).
        assert LEASE_S - RETRY_S <= took <= LEASE_S + 3 * RETRY_S + 0.3, took
        lease = _lease(store)
        assert lease["holderIdentity"] == other.elector.config.identity
        assert lease["leaseTransitions"] == 1


def test_a_released_lease_is_taken_over_at_once() -> None:
    store = MemoryObjectStore()
    with _replicas(store, "a", "b") as [a, b]:
        wait_until(lambda: a.elector.is_leader() or b.elector.is_leader(), "a leader", timeout=5)
        leader, other = (a, b) if a.elector.is_leader() else (b, a)
        stopped_at = time.monotonic()
        leader.kill()
        wait_until(other.elector.is_leader, "the takeover", timeout=5, interval=0.01)
        assert time.monotonic() - stopped_at < LEASE_S


def test_a_leader_that_cannot_renew_stops_leading_within_the_renew_deadline() -> None:
    store = MemoryObjectStore()
    with _replicas(store, "a") as [a]:
        wait_until(a.elector.is_leader, "a to lead", timeout=5)
        lease = store.get_object(LEASE, DRIVER_NS, DEFAULT_LEASE_NAME)
        lease["spec"]["holderIdentity"] = "thief"  # someone else holds it now
        lease["spec"]["leaseDurationSeconds"] = 30
        store.update_object(LEASE, lease)
        stolen_at = time.monotonic()
        wait_until(lambda: not a.elector.is_leader(), "a to stop leading", timeout=5)
        assert time.monotonic() - stolen_at <= RENEW_S + 0.3
        wait_until(lambda: a.result == [False], "the elector to report the loss", timeout=5)
        assert _lease(store)["holderIdentity"] == "thief"  # not released: not ours


def test_e9_two_controllers_a_leader_killed_mid_reconcile_no_duplicate_template() -> None:
    store = MemoryObjectStore()
    with _replicas(store, "a", "b", release=False) as [a, b]:
        wait_until(lambda: a.elector.is_leader() or b.elector.is_leader(), "a leader", timeout=5)
        leader, other = (a, b) if a.elector.is_leader() else (b, a)
        domain = add_domain(store)
        uid = domain["metadata"]["uid"]
        for i in range(8):
            join(store, domain, f"n{i}")
        leader.kill()  # mid-reconcile, as far as anyone can tell
        wait_until(other.elector.is_leader, "the takeover", timeout=5)
        nodes = [f"n{i}" for i in range(8)]
        wait_until(
            lambda: len(store.list_objects(COMPUTE_DOMAIN_CLIQUE)) == 1, "the clique", timeout=5
        )
        for i, node in enumerate(nodes):
            report(
                store,
                member_name(uid, node),
                state="Ready",
                ip_address=f"10.0.1.{i + 1}",
                imex_node_id=next(
                    r["index"]
                    for r in store.list_objects(COMPUTE_DOMAIN_CLIQUE)[0]["daemons"]
                    if r["nodeName"] == node
                ),
                peers={p: "C" for p in nodes if p != node},
            )
        wait_until(
            lambda: (
                store.get_object(COMPUTE_DOMAIN, "ns", "x").get("status", {}).get("status")
                == "Ready"
            ),
            "Ready under the new leader",
            timeout=5,
        )
    assert len(store.list_objects(RESOURCE_CLAIM_TEMPLATE)) == 1
    assert store.writes["ResourceClaimTemplate"] == 1  # created once, by one of them
    assert store.conflicts["ResourceClaimTemplate"] == 0
    assert store.conflicts["ComputeDomainClique"] == 0


@pytest.mark.parametrize(
    ("lease", "renew", "retry", "flag"),
    [
        (10, 10, 2, "--leader-elect-lease-duration 10 must be greater than"),
        (15, 2, 2, "--leader-elect-renew-deadline 2 must be greater than 1.2 x"),
    ],
)
def test_inconsistent_durations_are_refused_naming_the_flags(
    lease: float, renew: float, retry: float, flag: str
) -> None:
    config = LeaderConfig(
        namespace=DRIVER_NS,
        identity="a",
        lease_duration=lease,
        renew_deadline=renew,
        retry_period=retry,
    )
    with pytest.raises(ConfigError, match=flag):
        LeaderElector(MemoryObjectStore(), config)
