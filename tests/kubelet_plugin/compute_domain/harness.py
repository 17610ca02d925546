"""A ComputeDomain plugin driver on in-memory stores, and a test playing the node's IMEX host.

Claims live in a `LocalCluster` directory (the `Cluster` seam the GPU driver
uses); ComputeDomains and members in a `MemoryObjectStore`. The `/proc/devices`
the driver reads the channel major from is a file of the test's.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dra_driver.claims.checkpoint import Checkpoint
from dra_driver.claims.checkpoint_store import CheckpointStore
from dra_driver.compute_domain import channel_cdi
from dra_driver.compute_domain.membership import (
    MemberState,
    MemberStatus,
    member_name,
    member_status_body,
)
from dra_driver.compute_domain.names import CHANNEL_DEVICE_CLASS, DRIVER_NAME
from dra_driver.container.cdi_store import CdiStore
from dra_driver.errors import NotFoundError
from dra_driver.kube.local_store import LocalCluster
from dra_driver.kube.object_store import COMPUTE_DOMAIN, COMPUTE_DOMAIN_MEMBER
from kubelet_plugin.compute_domain.driver import ComputeDomainDriver, read_channels_major
from kubelet_plugin.compute_domain.host_imex import HostImex
from kubelet_plugin.compute_domain.member_watch import MemberWatch
from kubelet_plugin.service import ClaimRef
from tests.fakes import make_allocated_claim, make_opaque_config
from tests.fakes.object_store import MemoryObjectStore

NODE = "gb-0"
NAMESPACE = "nvidia-dra-driver-gpu"
CLIQUE = "00000000-0000-0000-0000-000000000001.0"
CHANNELS_MAJOR = 234  # the test's /proc/devices line; real nodes get theirs from the kernel
DOMAIN_UID = "5a3b6f1e-1c2d-4e5f-8a9b-0c1d2e3f4a5b"
OTHER_DOMAIN_UID = "7e8f9a0b-1c2d-4e5f-8a9b-0c1d2e3f4a5b"
CLAIM_UIDS = (
    "0b7cf0d2-5d1e-4c61-9a0e-3f5a1c2b7d90",
    "1c8d01e3-6e2f-4d72-8b1f-4a6b2c3d8ea1",
    "2d9e12f4-7f30-4e83-9c20-5b7c3d4e9fb2",
)


def channel_config(domain_uid: str = DOMAIN_UID, **extra: Any) -> dict[str, Any]:
    return {
        "apiVersion": "resource.nvidia.com/v1beta1",
        "kind": "ComputeDomainChannelConfig",
        "domainID": domain_uid,
        **extra,
    }


def compute_domain(
    name: str = "x", namespace: str = "default", uid: str = DOMAIN_UID
) -> dict[str, Any]:
    return {
        "apiVersion": "resource.nvidia.com/v1beta1",
        "kind": "ComputeDomain",
        "metadata": {"name": name, "namespace": namespace, "uid": uid},
        "spec": {"numNodes": 0, "channel": {"resourceClaimTemplate": {"name": f"{name}-ch"}}},
    }


@dataclass
class Node:
    """One simulated node's CD plugin driver and the stores around it."""

    root: Path
    cluster: LocalCluster
    objects: MemoryObjectStore
    stop: threading.Event
    clique: str | None = CLIQUE
    prepare_wait: float = 5.0
    host_imex: HostImex | None = None
    isolation: str = "domain"  # the plugin's --imex-isolation
    warnings: list[tuple[str, str]] = field(default_factory=list)
    threads: list[threading.Thread] = field(default_factory=list)
    driver: ComputeDomainDriver | None = None

    @property
    def cdi(self) -> CdiStore:
        return CdiStore(self.root / "cdi", kind=channel_cdi.CLAIMS)

    def new_driver(self) -> ComputeDomainDriver:
        """A driver on this node's stores, recovered (as a plugin restart makes one)."""
        proc = self.root / "proc"
        proc.mkdir(exist_ok=True)
        (proc / "devices").write_text(
            "Character devices:\n195 nvidia\n236 nvidia-caps\n"
            f"{CHANNELS_MAJOR} nvidia-caps-imex-channels\n\nBlock devices:\n  8 sd\n"
        )
        members = MemberWatch(self.objects, NAMESPACE)
        watch = threading.Thread(target=members.run, args=(self.stop,), daemon=True)
        watch.start()
        self.threads.append(watch)
        self.driver = ComputeDomainDriver(
            node_name=NODE,
            namespace=NAMESPACE,
            cluster=self.cluster,
            objects=self.objects,
            checkpoints=CheckpointStore(self.root / "checkpoint", "boot-1"),
            cdi_store=self.cdi,
            channels_major=lambda: read_channels_major(proc),
            members=members,
            clique=lambda: self.clique,
            prepare_wait=self.prepare_wait,
            host_imex=self.host_imex,
            warn=lambda ref, text: self.warnings.append((ref.uid, text)),
            isolation_mode=self.isolation,
        )
        self.driver.recover()
        return self.driver

    # -- claims ----------------------------------------------------------------------

    def claim(
        self,
        index: int = 0,
        *,
        config: dict[str, Any] | None = None,
        device: str = "channel-0",
        namespace: str = "default",
        pool: str = NODE,
    ) -> ClaimRef:
        """Store an allocated channel claim and return what the kubelet sends for it."""
        uid = CLAIM_UIDS[index]
        parameters = dict(config or channel_config())
        requests = parameters.pop("requests", ())  # the config entry's, not the parameters'
        obj = make_allocated_claim(
            name=f"claim-{index}",
            namespace=namespace,
            uid=uid,
            results=(("channel", device),),
            driver=DRIVER_NAME,
            pool=pool,
            configs=[make_opaque_config(parameters, requests=requests, driver=DRIVER_NAME)],
            device_class=CHANNEL_DEVICE_CLASS,
        )
        status = obj.pop("status")
        obj["metadata"].pop("resourceVersion", None)
        stored = self.cluster.put_resource_claim(obj)  # as an API server gets it: then status
        stored["status"] = status
        self.cluster.update_resource_claim_status(stored)
        return ClaimRef(namespace, uid, f"claim-{index}")

    def prepare(self, ref: ClaimRef) -> Any:
        assert self.driver is not None
        return self.driver.prepare([ref])[ref.uid]

    def unprepare(self, ref: ClaimRef) -> str:
        assert self.driver is not None
        return self.driver.unprepare([ref])[ref.uid].error

    # -- what is there ---------------------------------------------------------------

    def members(self) -> list[str]:
        return [obj["metadata"]["name"] for obj in self.objects.list_objects(COMPUTE_DOMAIN_MEMBER)]

    def checkpoint(self) -> Checkpoint:
        return CheckpointStore(self.root / "checkpoint", "boot-1").load()

    def spec(self, ref: ClaimRef) -> dict[str, Any] | None:
        return self.cdi.read(ref.uid)

    # -- the IMEX host, played by the test ---------------------------------------------

    def set_member(
        self, domain_uid: str = DOMAIN_UID, state: str = MemberState.READY, **status: Any
    ) -> None:
        name = member_name(domain_uid, NODE)
        obj = self.objects.get_object(COMPUTE_DOMAIN_MEMBER, NAMESPACE, name)
        obj["status"] = member_status_body(MemberStatus(state=state, **status))
        self.objects.update_object_status(COMPUTE_DOMAIN_MEMBER, obj)

    def auto_ready(self, state: str = MemberState.READY) -> None:
        """From now on, every member without a status is made `state` at once (a fast IMEX)."""

        def loop() -> None:
            while not self.stop.is_set():
                for obj in self.objects.list_objects(COMPUTE_DOMAIN_MEMBER):
                    if "status" not in obj:
                        obj["status"] = member_status_body(MemberStatus(state=state))
                        with contextlib.suppress(NotFoundError):
                            self.objects.update_object_status(COMPUTE_DOMAIN_MEMBER, obj)
                self.stop.wait(0.005)

        thread = threading.Thread(target=loop, daemon=True)
        thread.start()
        self.threads.append(thread)


def make_node(tmp_path: Path, **kwargs: Any) -> Iterator[Node]:
    node = Node(
        root=tmp_path,
        cluster=LocalCluster(tmp_path / "cluster"),
        objects=MemoryObjectStore(),
        stop=threading.Event(),
        **kwargs,
    )
    node.objects.create_object(COMPUTE_DOMAIN, compute_domain())
    try:
        yield node
    finally:
        node.stop.set()
        for thread in node.threads:
            thread.join(timeout=5)
