"""A rolling upgrade under load: two plugin instances on one node, 0 failed calls, 0 leaks.

The old and the new plugin pod of a surge upgrade (each with its POD_UID,
so each with its own sockets) share the node's kubelet root, CDI directory
and MPS host. The kubelet may prepare a claim on one instance and unprepare
it on the other, so every call must see the other instance's changes. Here
claims of every kind (whole GPUs, dynamic MIG devices, MPS shares of one
GPU) are prepared and unprepared in a loop by several workers, each call
going to an instance picked at random among those whose registration
socket is there (the kubelet picks the newest connected one per call; the
random pick exercises every cross-instance order), and the old instance is
SIGTERMed in the middle. Every call must succeed; afterwards nothing may
be left; and only one instance published the node's slices at a time.
"""

from __future__ import annotations

import random
import signal
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import grpc
import pytest

from kubelet_plugin.service import ClaimRef
from tests.fakes import (
    PluginProcess,
    make_allocated_claim,
    make_opaque_config,
    plugin_sim,
    wait_until,
)
from tests.fakes.mig import live_mig_instances

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

OLD_UID = "0dd00000-0000-4000-8000-0000000000a1"
NEW_UID = "0e700000-0000-4000-8000-0000000000b2"
CYCLES_BEFORE_SIGTERM = 4
CYCLES_AFTER_SIGTERM = 6


def _uid(n: int) -> str:
    return f"a0110000-0000-4000-8000-{n:012d}"


def _claims(plugin: PluginProcess) -> list[ClaimRef]:
    refs = []

    def store(name: str, **kwargs: Any) -> None:
        ref = ClaimRef("default", _uid(len(refs)), name)
        plugin.store_claim(make_allocated_claim(name, uid=ref.uid, **kwargs))
        refs.append(ref)

    for gpu in range(3):
        store(f"whole-{gpu}", results=[("gpu", f"gpu-{gpu}")])
    for start in (0, 1):
        store(
            f"mig-{start}",
            results=[("mig", f"gpu-4-mig-1g10gb-19-{start}")],
            device_class="mig.nvidia.com",
        )
    mps = make_opaque_config(
        {
            "apiVersion": "resource.nvidia.com/v1beta1",
            "kind": "GpuConfig",
            "sharing": {"strategy": "MPS", "mpsConfig": {"defaultActiveThreadPercentage": 40}},
        }
    )
    for share in (1, 2):
        result = {
            "request": "gpu",
            "device": "gpu-5",
            "shareID": f"5fa1e000-0000-4000-8000-{share:012d}",
        }
        store(f"mps-{share}", results=[result], configs=[mps])
    return refs


@dataclass
class Load:
    """The kubelet side: each worker cycles its claim through Prepare and Unprepare."""

    instances: list[PluginProcess]
    seed: int = 16
    calls: int = 0
    failures: list[str] = field(default_factory=list)
    cross_instance: int = 0
    cycles_done: dict[str, int] = field(default_factory=dict)
    _guard: threading.Lock = field(default_factory=threading.Lock)

    def pick(self, rng: random.Random) -> PluginProcess:
        while True:
            serving = [p for p in self.instances if p.registration_socket.exists()]
            if serving:
                return rng.choice(serving)
            time.sleep(0.01)

    def call(self, rng: random.Random, operation: str, ref: ClaimRef) -> PluginProcess:
        instance = self.pick(rng)
        rpc = instance.client.prepare if operation == "prepare" else instance.client.unprepare
        try:
            answer = rpc([ref])[ref.uid]
        except grpc.RpcError as exc:
            error = f"{exc.code().name}: {exc.details()}"
        else:
            error = answer.error
        with self._guard:
            self.calls += 1
            if error:
                self.failures.append(f"{operation} {ref.name} on {instance.pod_uid}: {error}")
        return instance

    def worker(self, ref: ClaimRef, cycles: int, index: int) -> None:
        rng = random.Random(self.seed + index)
        for _ in range(cycles):
            prepared_on = self.call(rng, "prepare", ref)
            unprepared_on = self.call(rng, "unprepare", ref)
            with self._guard:
                self.cycles_done[ref.uid] = self.cycles_done.get(ref.uid, 0) + 1
                self.cross_instance += prepared_on is not unprepared_on


@pytest.fixture
def instances() -> Iterator[tuple[PluginProcess, PluginProcess]]:
    args = ["--dynamic-mig"]
    old = PluginProcess(pod_uid=OLD_UID, extra_args=args, prefix="dra-rl-", publish_interval=1)
    new = PluginProcess(pod_uid=NEW_UID, extra_args=args, share_work_with=old, publish_interval=1)
    try:
        old.start()
        new.start()
        yield old, new
    finally:
        new.close()
        old.close()


def test_two_instances_share_the_claims_and_a_sigterm_mid_load_fails_no_call(
    instances: tuple[PluginProcess, PluginProcess],
) -> None:
    old, new = instances
    claims = _claims(old)

    # Prepared on one instance, unprepared on the other, both ways round.
    for first, second in ((old, new), (new, old)):
        answers = first.client.prepare(claims)
        assert {uid: a.error for uid, a in answers.items()} == {c.uid: "" for c in claims}
        assert second.client.prepare(claims) == answers  # the other sees them prepared
        answers = second.client.unprepare(claims)
        assert {uid: a.error for uid, a in answers.items()} == {c.uid: "" for c in claims}
        assert old.cdi_files() == []

    load = Load([old, new])
    total = CYCLES_BEFORE_SIGTERM + CYCLES_AFTER_SIGTERM
    workers = [
        threading.Thread(target=load.worker, args=(ref, total, index), daemon=True)
        for index, ref in enumerate(claims)
    ]
    for worker in workers:
        worker.start()
    deadline = time.monotonic() + 300
    while min(load.cycles_done.get(c.uid, 0) for c in claims) < CYCLES_BEFORE_SIGTERM:
        assert time.monotonic() < deadline, load.failures
        time.sleep(0.05)
    assert old.process is not None
    old.process.send_signal(signal.SIGTERM)  # mid-load: the DaemonSet replaces the old pod
    for worker in workers:
        worker.join(300)
    assert old.wait_exit() == 0

    assert load.failures == [], "\n".join(load.failures[:10]) + "\n" + new.log_tail()
    assert load.calls == 2 * total * len(claims)
    assert load.cross_instance > 0
    assert not old.registration_socket.exists()
    assert not old.dra_socket.exists()

    # Nothing left by either instance.
    checkpoint = new.checkpoint()
    assert checkpoint is None or dict(checkpoint.claims) == {}
    assert new.cdi_files() == []
    assert new.mps_daemons() == {}
    assert new.mps_files() == []
    assert live_mig_instances(plugin_sim(new)) == {}

    # One publisher at a time: the new instance took over only once the old one was gone
    # (its publisher notices the freed lease on its next pass, shortly after the old exits).
    assert "another plugin instance publishes this node's ResourceSlices" in (
        new.log_path.read_text()
    )
    wait_until(
        lambda: (
            "this plugin instance publishes the node's ResourceSlices now"
            in new.log_path.read_text()
        ),
        "the new instance taking over the publishing",
        details=new.log_tail,
    )
    wait_until(
        lambda: bool(new.cluster.list_resource_slices(node_name=new.node_name)),
        "the new instance's ResourceSlices",
        details=new.log_tail,
    )
