"""E9 with real processes: two `dra-gpu compute-domain-controller --leader-elect` on one
local cluster directory; the leader is SIGKILLed and the other takes over within about a
lease duration, with one workload template and one clique; SIGTERM ends it with status 0
and releases the Lease. Wall-clock bound: 30 s."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from controller.compute_domain.leader import DEFAULT_LEASE_NAME
from dra_driver.compute_domain.membership import member_name
from dra_driver.errors import NotFoundError
from dra_driver.kube.local_store import LocalCluster
from dra_driver.kube.object_store import (
    COMPUTE_DOMAIN,
    COMPUTE_DOMAIN_CLIQUE,
    COMPUTE_DOMAIN_MEMBER,
    LEASE,
    RESOURCE_CLAIM_TEMPLATE,
)
from tests.controller.compute_domain.objects import DRIVER_NS, compute_domain, member
from tests.fakes.waiting import wait_until

LEASE_S = 1.0


def _start(root: Path, pod: str) -> subprocess.Popen[str]:
    log = (root.parent / f"{pod}.log").open("w")
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "dra_driver.cli",
            "compute-domain-controller",
            f"--cluster=local:{root}",
            f"--namespace={DRIVER_NS}",
            "--leader-elect",
            f"--leader-elect-lease-duration={LEASE_S}",
            "--leader-elect-renew-deadline=0.6",
            "--leader-elect-retry-period=0.1",
        ],
        env={**os.environ, "POD_NAME": pod},
        stdout=subprocess.DEVNULL,
        stderr=log,
        text=True,
    )
    log.close()  # the child has its own copy
    return process


def _logs(root: Path) -> str:
    return "\n".join(p.read_text()[-2000:] for p in sorted(root.parent.glob("*.log")))


def _holder(cluster: LocalCluster) -> str:
    try:
        spec: dict[str, Any] = cluster.get_object(LEASE, DRIVER_NS, DEFAULT_LEASE_NAME)["spec"]
    except NotFoundError:
        return ""
    return str(spec.get("holderIdentity") or "")


@pytest.mark.slow
def test_two_controller_processes_one_leads_and_the_other_takes_over_after_sigkill(
    tmp_path: Path,
) -> None:
    started = time.monotonic()
    root = tmp_path / "cluster"
    cluster = LocalCluster(root)
    processes = {pod: _start(root, pod) for pod in ("replica-a", "replica-b")}
    try:
        domain = cluster.create_object(COMPUTE_DOMAIN, compute_domain())
        wait_until(
            lambda: bool(cluster.list_objects(RESOURCE_CLAIM_TEMPLATE)),
            "the workload template",
            timeout=20,
            details=lambda: _logs(root),
        )
        leader = _holder(cluster).rsplit("-", 5)[0]
        assert leader in processes
        survivor = next(pod for pod in processes if pod != leader)
        processes[leader].kill()
        processes[leader].wait(timeout=10)
        killed_at = time.monotonic()
        wait_until(
            lambda: _holder(cluster).startswith(survivor),
            "the takeover",
            timeout=10,
            details=lambda: _logs(root),
        )
        assert time.monotonic() - killed_at <= LEASE_S + 1.5
        # The new leader serves: a member joins and gets its clique row.
        cluster.create_object(COMPUTE_DOMAIN_MEMBER, member(domain, "n1"))
        wait_until(
            lambda: bool(cluster.list_objects(COMPUTE_DOMAIN_CLIQUE)), "the clique", timeout=10
        )
        [clique] = cluster.list_objects(COMPUTE_DOMAIN_CLIQUE, DRIVER_NS)
        assert [r["nodeName"] for r in clique["daemons"]] == ["n1"]
        assert len(cluster.list_objects(RESOURCE_CLAIM_TEMPLATE)) == 1
        assert cluster.get_object(COMPUTE_DOMAIN_MEMBER, DRIVER_NS, member_name(
            domain["metadata"]["uid"], "n1"
        ))  # fmt: skip
        processes[survivor].send_signal(signal.SIGTERM)
        assert processes[survivor].wait(timeout=10) == 0
        assert _holder(cluster) == ""  # released on the way out
    finally:
        for process in processes.values():
            if process.poll() is None:
                process.kill()
            process.wait()
    assert time.monotonic() - started < 30
