"""GPU use per claim, end to end: simulated workloads, the plugin's sampler, /metrics, status.

One plugin on a simulated dgx-h100 (dynamic MIG, 4 consumable shares per GPU,
sampling every 0.3 s) holds a whole GPU, two MPS claims on one GPU, four
shares of one GPU and a dynamic MIG device, each reserved by its own pod.
`dra-gpu sim workload` starts the pods' CUDA processes; what an admin sees
on `/metrics`, in `dra-gpu status --claims` and in the claims' status.devices
must say who uses what, who is idle and who is over its share, and say
"not measured" where NVML cannot measure (SM % on MIG), never 0.
"""

from __future__ import annotations

import json
import re
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from dra_driver.cli import main
from kubelet_plugin.service import ClaimRef
from tests.fakes import PluginProcess, make_allocated_claim, make_opaque_config

pytestmark = pytest.mark.slow

GI = 2**30
NS = "ml"
MIG_DEVICE = "gpu-3-mig-1g10gb-19-0"


def _uid(n: int) -> str:
    return f"6c1f0a2e-0000-4000-8000-{n:012d}"


def _pod(n: int) -> str:
    return f"9e2d4b6a-0000-4000-8000-{n:012d}"


def _share_id(n: int) -> str:
    return f"0d5c7e9a-1b3f-4d6e-8a0c-{n:012d}"


def _mps(percentage: int) -> dict[str, Any]:
    return make_opaque_config(
        {
            "apiVersion": "resource.nvidia.com/v1beta1",
            "kind": "GpuConfig",
            "sharing": {
                "strategy": "MPS",
                "mpsConfig": {"defaultActiveThreadPercentage": percentage},
            },
        }
    )


# name -> (claim number, allocation result, configs)
CLAIMS: dict[str, tuple[int, dict[str, Any], list[dict[str, Any]]]] = {
    "whole": (1, {"request": "gpu", "device": "gpu-0"}, []),
    "mps-a": (
        2,
        {
            "request": "gpu",
            "device": "gpu-1",
            "shareID": _share_id(2),
            "consumedCapacity": {"memory": "20Gi"},
        },
        [_mps(25)],
    ),
    "mps-b": (
        3,
        {
            "request": "gpu",
            "device": "gpu-1",
            "shareID": _share_id(3),
            "consumedCapacity": {"memory": "40Gi"},
        },
        [_mps(50)],
    ),
    **{
        f"share-{i}": (
            10 + i,
            {
                "request": "gpu",
                "device": "gpu-2",
                "shareID": _share_id(10 + i),
                "consumedCapacity": {"shares": "1"},
            },
            [],
        )
        for i in range(4)
    },
    "mig": (20, {"request": "mig", "device": MIG_DEVICE}, []),
}


def _claim(name: str) -> dict[str, Any]:
    n, result, configs = CLAIMS[name]
    claim = make_allocated_claim(name, NS, _uid(n), [result], configs=configs)
    claim["status"]["reservedFor"] = [{"resource": "pods", "name": f"{name}-pod", "uid": _pod(n)}]
    return claim


@pytest.fixture(scope="module")
def plugin() -> Iterator[PluginProcess]:
    args = [
        "--dynamic-mig",
        "--consumable-shares=4",
        "--usage-interval=0.3",
        "--idle-claim-after=2s",
        "--metrics-address=127.0.0.1:0",
    ]
    with PluginProcess(extra_args=args, publish_interval=300) as running:
        for name in CLAIMS:
            running.store_claim(_claim(name))
        refs = [ClaimRef(NS, _uid(n), name) for name, (n, _, _) in CLAIMS.items()]
        results = running.client.prepare(refs)
        assert {ref.name: results[ref.uid].error for ref in refs} == dict.fromkeys(CLAIMS, "")
        for name, device, sm, memory in (
            ("whole", "gpu-0", 70, "10Gi"),
            ("mps-a", "gpu-1", 40, "30Gi"),  # more than its 20Gi
            ("mps-b", "gpu-1", 20, "10Gi"),
            ("share-0", "gpu-2", 60, "1Gi"),  # more than its quarter of the time
            ("share-1", "gpu-2", 10, "1Gi"),
            ("share-3", "gpu-2", 0, "2Gi"),  # holds memory, computes nothing
            ("mig", MIG_DEVICE, 0, "2Gi"),
        ):
            n = CLAIMS[name][0]
            code = main(
                [
                    "sim",
                    "workload",
                    f"--sim-state={running.sim_state}",
                    f"--device={device}",
                    f"--pod-uid={_pod(n)}",
                    f"--sm={sm}",
                    f"--memory={memory}",
                ]
            )
            assert code == 0
        yield running


def _scrape(plugin: PluginProcess) -> dict[str, dict[tuple[str, ...], float]]:
    """metric -> (claim, pod, device[, extra labels]) -> value."""
    log = plugin.log_path.read_text()
    port = re.search(r"serving metrics on http://127\.0\.0\.1:(\d+)/metrics", log)
    assert port, log[-2000:]
    with urllib.request.urlopen(f"http://127.0.0.1:{port.group(1)}/metrics") as answer:
        text = answer.read().decode()
    out: dict[str, dict[tuple[str, ...], float]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if not sample.name.startswith("dra_gpu_claim_") or "claim" not in sample.labels:
                continue
            labels = sample.labels
            key = (labels["claim"], labels["pod"], labels["device"])
            key += tuple(labels[k] for k in ("metric", "reason", "source") if k in labels)
            out.setdefault(sample.name, {})[key] = sample.value
    return out


def _settled(plugin: PluginProcess) -> dict[str, dict[tuple[str, ...], float]]:
    """The metrics once every workload has been sampled (and share-2 has idled 2 s)."""
    found: list[dict[str, dict[tuple[str, ...], float]]] = []

    def ready() -> bool:
        metrics = _scrape(plugin)
        used = metrics.get("dra_gpu_claim_memory_used_bytes", {})
        idle = metrics.get("dra_gpu_claim_idle_seconds", {})
        if used.get(("mig", "mig-pod", MIG_DEVICE)) != 2 * GI:
            return False
        if (
            metrics.get("dra_gpu_claim_sm_utilization_percent", {}).get(
                ("share-0", "share-0-pod", "gpu-2")
            )
            != 60
        ):
            return False
        if idle.get(("share-2", "share-2-pod", "gpu-2"), 0) < 2:
            return False
        found.append(metrics)
        return True

    plugin.wait_for(ready, "sampled usage", timeout=60)
    return found[0]


def test_metrics_say_what_each_claim_and_pod_uses(plugin: PluginProcess) -> None:
    m = _settled(plugin)
    sm = m["dra_gpu_claim_sm_utilization_percent"]
    used = m["dra_gpu_claim_memory_used_bytes"]
    limit = m["dra_gpu_claim_memory_limit_bytes"]
    idle = m["dra_gpu_claim_idle_seconds"]
    over = m["dra_gpu_claim_over_share"]
    unavailable = m["dra_gpu_claim_usage_unavailable"]

    # A whole GPU: its pod's use, the device's memory as the limit, never over a share.
    assert sm[("whole", "whole-pod", "gpu-0")] == 70
    assert used[("whole", "whole-pod", "gpu-0")] == 10 * GI
    assert limit[("whole", "whole-pod", "gpu-0", "device")] == 81559 * 2**20
    assert idle[("whole", "whole-pod", "gpu-0")] == 0
    assert over[("whole", "whole-pod", "gpu-0")] == 0

    # Two MPS claims on one GPU: each pod counted for its own claim, against its own limit.
    assert sm[("mps-a", "mps-a-pod", "gpu-1")] == 40
    assert sm[("mps-b", "mps-b-pod", "gpu-1")] == 20
    assert used[("mps-a", "mps-a-pod", "gpu-1")] == 30 * GI
    assert used[("mps-b", "mps-b-pod", "gpu-1")] == 10 * GI
    assert limit[("mps-a", "mps-a-pod", "gpu-1", "mps")] == 20 * GI
    assert limit[("mps-b", "mps-b-pod", "gpu-1", "mps")] == 40 * GI
    assert over[("mps-a", "mps-a-pod", "gpu-1")] == 1
    assert over[("mps-b", "mps-b-pod", "gpu-1")] == 0

    # 4-way shares: a quarter of the time each; an unused share is idle, at 0 % (NVML sampled).
    assert sm[("share-0", "share-0-pod", "gpu-2")] == 60
    assert over[("share-0", "share-0-pod", "gpu-2")] == 1
    assert over[("share-1", "share-1-pod", "gpu-2")] == 0
    assert sm[("share-2", "share-2-pod", "gpu-2")] == 0
    assert used[("share-2", "share-2-pod", "gpu-2")] == 0
    assert idle[("share-2", "share-2-pod", "gpu-2")] >= 2
    assert sm[("share-3", "share-3-pod", "gpu-2")] == 0
    assert used[("share-3", "share-3-pod", "gpu-2")] == 2 * GI

    # A dynamic MIG device: memory from its MIG handle; SM % is not measured there, and says so.
    assert used[("mig", "mig-pod", MIG_DEVICE)] == 2 * GI
    assert ("mig", "mig-pod", MIG_DEVICE) not in sm
    assert unavailable[("mig", "mig-pod", MIG_DEVICE, "sm_utilization", "mig")] == 1
    assert limit[("mig", "mig-pod", MIG_DEVICE, "device")] == 9984 * 2**20
    assert idle[("mig", "mig-pod", MIG_DEVICE)] == 0  # a running process is use on MIG


def test_status_shows_the_per_claim_view(
    plugin: PluginProcess, capsys: pytest.CaptureFixture[str]
) -> None:
    _settled(plugin)
    common = [
        f"--nvml=sim:{plugin.shape}",
        f"--sim-state={plugin.sim_state}",
        f"--node-name={plugin.node_name}",
        f"--kubelet-root={plugin.kubelet_root}",
    ]
    capsys.readouterr()
    assert main(["status", "--claims", "-o", "yaml", *common]) == 0
    rows = {(r["claim"], r["device"]): r for r in yaml.safe_load(capsys.readouterr().out)}
    assert rows[("whole", "gpu-0")]["pods"] == ["whole-pod"]
    assert rows[("whole", "gpu-0")]["smPercent"] == 70
    assert rows[("mps-a", "gpu-1")]["overShare"] is True
    assert rows[("mps-a", "gpu-1")]["memoryUsedBytes"] == 30 * GI
    assert rows[("mps-a", "gpu-1")]["memoryLimitBytes"] == 20 * GI
    assert rows[("share-2", "gpu-2")]["idleSeconds"] >= 2
    assert rows[("mig", MIG_DEVICE)]["smPercent"] is None
    assert rows[("mig", MIG_DEVICE)]["smUnavailable"] == "mig"

    assert main(["status", *common]) == 0
    table = capsys.readouterr().out
    assert "Claims (sampled by the plugin" in table
    lines = {
        line.split()[0] + " " + line.split()[1]: line
        for line in table.splitlines()[1:]
        if line.startswith("ml/")
    }
    assert lines["ml/mps-a gpu-1"].split()[2:5] == ["mps-a-pod", "40%", "30.0Gi/20.0Gi"]
    assert lines["ml/mps-a gpu-1"].endswith("OVER")
    assert "n/a (MIG)" in lines[f"ml/mig {MIG_DEVICE}"]

    # -o yaml|json carries what the table carries: the GPUs and the claims
    for output, parse in (("json", json.loads), ("yaml", yaml.safe_load)):
        assert main(["status", "-o", output, *common]) == 0
        shown = parse(capsys.readouterr().out)
        assert list(shown) == ["gpus", "claims", "claimsSource"], output
        assert [g["name"] for g in shown["gpus"]] == [f"gpu-{i}" for i in range(len(shown["gpus"]))]
        assert {(r["claim"], r["device"]) for r in shown["claims"]} == set(rows), output
        assert shown["claimsSource"].startswith("sampled by the plugin"), output


def test_claim_status_carries_ready_uuids_and_share_ids(plugin: PluginProcess) -> None:
    checkpoint = plugin.checkpoint()
    assert checkpoint is not None
    mig_record = checkpoint.claims[_uid(20)].devices[0].mig
    assert mig_record is not None
    assert mig_record.uuid is not None
    gpus = {g.minor: g.uuid for g in plugin.hardware().nvml.gpus()}

    def entries(name: str) -> list[dict[str, Any]]:
        claim = plugin.cluster.get_resource_claim(NS, name)
        return list((claim.get("status") or {}).get("devices") or [])

    plugin.wait_for(lambda: all(entries(name) for name in CLAIMS), "status.devices")
    (whole,) = entries("whole")
    assert whole["conditions"][0]["type"] == "Ready"
    assert whole["conditions"][0]["status"] == "True"
    assert whole["data"]["uuid"] == gpus[0]
    (mig,) = entries("mig")
    assert mig["data"]["uuid"] == mig_record.uuid  # the live MIG UUID the slice cannot show
    assert mig["data"]["parentUUID"] == gpus[3]
    assert mig["data"]["profile"] == "1g.10gb"
    (share,) = entries("share-1")
    assert share["shareID"] == _share_id(11)
    assert share["data"]["shareID"] == _share_id(11)
    (mps,) = entries("mps-a")
    assert mps["data"]["mps"]["activeThreadPercentage"] == 25
    assert mps["data"]["mps"]["pipeDirectory"] == "/tmp/nvidia-mps"


def test_a_claim_idle_too_long_gets_a_gpu_idle_event(plugin: PluginProcess) -> None:
    events_dir = plugin.cluster_root / "events" / NS

    def idle_events() -> list[dict[str, Any]]:
        if not events_dir.is_dir():
            return []
        loaded = [yaml.safe_load(p.read_text()) for p in sorted(events_dir.glob("*.yaml"))]
        return [e for e in loaded if e["reason"] == "GPUIdle"]

    def about(name: str) -> list[dict[str, Any]]:
        return [e for e in idle_events() if e["regarding"]["name"] in (name, f"{name}-pod")]

    plugin.wait_for(lambda: len(about("share-2")) == 2, "GPUIdle Events of share-2")
    pod_event, claim_event = sorted(about("share-2"), key=lambda e: e["regarding"]["kind"])
    assert claim_event["type"] == "Warning"
    assert pod_event["regarding"]["kind"] == "Pod"
    assert "gpu-2" in claim_event["note"]
    assert "idle for" in claim_event["note"]
    assert not about("whole")  # it ran from the start
