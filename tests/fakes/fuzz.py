"""Hostile NodePrepareResources / NodeUnprepareResources calls against the real plugin process.

`Fuzzer` stores a pool of claims in the plugin's cluster (good ones and
every kind of bad one a user or a broken controller could produce) and then
makes `calls` random kubelet calls over the real socket: prepares and
unprepares of 1 to 8 claims, mixing stored claims with unknown ones whose
UIDs, names and namespaces are hostile (path traversal, newlines and escape
sequences, 300-character and 3 MiB strings, empty fields, repeated UIDs).
A per-claim error is an expected answer; what must never happen is a
crash (the process exits), a hang (no answer within the kubelet's deadline)
or an RPC that fails as a whole. The plugin's RSS is sampled as it goes. At
the end everything is unprepared, and nothing may be left: no checkpoint
entry, CDI spec, MIG instance or MPS daemon. The benchmark `fuzz` runs
100,000 calls; the slow test a few thousand.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc

from kubelet_plugin.service import ClaimRef
from tests.fakes.claims import make_allocated_claim, make_opaque_config
from tests.fakes.plugin_process import PluginProcess

NAMESPACE = "fuzz"
_HOSTILE = (
    "../../etc/passwd",
    "a" * 300,
    "name\nI1127 10:00:00.000000 1 driver.go:1] prepared everything",
    "\x1b[2J\x1b[H",
    "\u202e\u2028unicode",
    "-leading-dash",
    "UPPER",
    "x",
    "0" * 64,
)
_HUGE = "h" * (3 << 20)
DEFAULT_DEADLINE_S = 45.0


@dataclass
class FuzzReport:
    """What a fuzz run saw; `ok` is the verdict."""

    calls: int = 0
    claims_answered: int = 0
    claim_errors: int = 0
    crashes: int = 0
    hangs: int = 0
    rpc_failures: dict[str, int] = field(default_factory=dict)
    rss_kib: list[tuple[int, int]] = field(default_factory=list)
    leftovers: list[str] = field(default_factory=list)
    elapsed_s: float = 0.0

    def rss_ratio(self, after: int = 1000) -> float:
        """Final RSS over the RSS after `after` calls (1.0 without samples)."""
        base = next((kib for calls, kib in self.rss_kib if calls >= after), None)
        if base is None or not self.rss_kib:
            return 1.0
        return self.rss_kib[-1][1] / base

    @property
    def ok(self) -> bool:
        return (
            self.crashes == 0 and self.hangs == 0 and not self.rpc_failures and not self.leftovers
        )


class Fuzzer:
    """Random hostile kubelet calls against `plugin` (see the module docstring)."""

    def __init__(self, plugin: PluginProcess, *, seed: int = 20) -> None:
        self.plugin = plugin
        self.random = random.Random(seed)
        self.stored = self._store_claims()

    def _store_claims(self) -> list[ClaimRef]:
        refs: list[ClaimRef] = []

        def store(name: str, **kwargs: Any) -> None:
            uid = f"f0220000-0000-4000-8000-{len(refs):012d}"
            self.plugin.store_claim(
                make_allocated_claim(name, NAMESPACE, uid, pool=self.plugin.node_name, **kwargs)
            )
            refs.append(ClaimRef(NAMESPACE, uid, name))

        for gpu in range(4):  # two claims per whole GPU: one of each pair is refused
            store(f"gpu-{gpu}-a", results=[("gpu", f"gpu-{gpu}")])
            store(f"gpu-{gpu}-b", results=[("gpu", f"gpu-{gpu}")])
        store("two-gpus", results=[("a", "gpu-4"), ("b", "gpu-5")])
        store("unknown-device", results=[("gpu", "gpu-99")])
        store("other-pool", results=[{"request": "gpu", "device": "gpu-6", "pool": "elsewhere"}])
        mps = {"apiVersion": "resource.nvidia.com/v1beta1", "kind": "GpuConfig"}
        for i, mps_config in enumerate(
            [
                {"defaultActiveThreadPercentage": 30},
                {"defaultActiveThreadPercentage": 0},
                {"defaultActiveThreadPercentage": 101},
                {"defaultPinnedDeviceMemoryLimit": "-1Gi"},
                {"defaultPinnedDeviceMemoryLimit": "9" * 40},
                {"defaultPerDevicePinnedMemoryLimit": {"7": "1Ki"}},
            ]
        ):
            store(
                f"mps-{i}",
                results=[{"request": "gpu", "device": "gpu-7", "shareID": _share(i)}],
                configs=[
                    make_opaque_config(
                        {**mps, "sharing": {"strategy": "MPS", "mpsConfig": mps_config}}
                    )
                ],
            )
        configs: list[dict[str, Any]] = [
            {
                **mps,
                "sharing": {
                    "strategy": "TimeSlicing",
                    "timeSlicingConfig": {"interval": "Forever"},
                },
            },
            {**mps, "sharing": {"strategy": "TimeSlicing"}},
            {**mps, "deep": _nested(200)},  # the local store copies recursively
            {**mps, "pad": "p" * 20_000},
            {"kind": "UnknownConfig", "apiVersion": "example.com/v1"},
            {**mps, "unknownField": True},
        ]
        for i, params in enumerate(configs):
            store(
                f"config-{i}",
                results=[("gpu", f"gpu-{4 + i % 2}")],
                configs=[make_opaque_config(params)],
            )
        return refs

    def run(
        self,
        calls: int,
        *,
        deadline_s: float = DEFAULT_DEADLINE_S,
        rss_every: int = 500,
        progress: Callable[[FuzzReport], None] | None = None,
    ) -> FuzzReport:
        report = FuzzReport()
        started = time.monotonic()
        self.plugin.client.timeout = deadline_s
        for index in range(calls):
            if self.plugin.process is None or self.plugin.process.poll() is not None:
                report.crashes += 1
                break
            self._one_call(report)
            if (index + 1) % rss_every == 0:
                report.rss_kib.append((index + 1, self._rss_kib()))
                if progress is not None:
                    progress(report)
        report.elapsed_s = time.monotonic() - started
        if report.crashes == 0:
            self._clean_up(report)
        return report

    def _one_call(self, report: FuzzReport) -> None:
        refs = [self._pick() for _ in range(self.random.choice((1, 1, 1, 2, 3, 8)))]
        if self.random.random() < 0.002:  # one 3 MiB name (a request stays under gRPC's 4 MiB)
            refs[0] = ClaimRef(NAMESPACE, f"huge-{self.random.randrange(10**6)}", _HUGE)
        prepare = self.random.random() < 0.55
        call = self.plugin.client.prepare if prepare else self.plugin.client.unprepare
        version = "v1" if self.random.random() < 0.8 else "v1beta1"
        report.calls += 1
        try:
            results = call(refs, version=version)
        except grpc.RpcError as exc:
            code = exc.code()
            if code == grpc.StatusCode.DEADLINE_EXCEEDED:
                report.hangs += 1
            else:
                report.rpc_failures[code.name] = report.rpc_failures.get(code.name, 0) + 1
            return
        report.claims_answered += len(results)
        report.claim_errors += sum(1 for r in results.values() if r.error)

    def _pick(self) -> ClaimRef:
        roll = self.random.random()
        if roll < 0.6:
            return self.random.choice(self.stored)
        hostile = self.random.choice(_HOSTILE)
        uid = self.random.choice((hostile, f"{hostile}-{self.random.randrange(10**6)}", ""))
        return ClaimRef(
            self.random.choice((NAMESPACE, hostile, "")),
            uid,
            self.random.choice(("claim", hostile, "")),
        )

    def _rss_kib(self) -> int:
        status = Path(f"/proc/{self.plugin.pid}/status").read_text(encoding="ascii")
        for line in status.splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
        return 0

    def _clean_up(self, report: FuzzReport) -> None:
        for start in range(0, len(self.stored), 8):
            results = self.plugin.client.unprepare(self.stored[start : start + 8])
            for uid, result in results.items():
                if result.error:
                    report.leftovers.append(f"unprepare {uid}: {result.error}")
        checkpoint = self.plugin.checkpoint()
        if checkpoint is not None and checkpoint.claims:
            report.leftovers.append(f"checkpoint entries {sorted(checkpoint.claims)}")
        if self.plugin.cdi_files():
            report.leftovers.append(f"CDI files {self.plugin.cdi_files()}")
        if self.plugin.mps_daemons():
            report.leftovers.append(f"MPS daemons {self.plugin.mps_daemons()}")
        nvml = self.plugin.hardware().nvml
        for gpu in nvml.gpus():
            found = nvml.gpu_instances(gpu.uuid)
            if found:
                report.leftovers.append(f"MIG instances on {gpu.uuid}: {found}")


def _share(i: int) -> str:
    return f"5fa1e000-0000-4000-8000-{i:012d}"


def _nested(depth: int) -> dict[str, Any]:
    value: dict[str, Any] = {"leaf": 1}
    for _ in range(depth - 1):
        value = {"x": value}
    return value
