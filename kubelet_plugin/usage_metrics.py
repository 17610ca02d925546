"""The per-claim GPU use metrics, built at each scrape from the sampler's last pass.

A custom prometheus-client collector rather than labelled gauges: claims come
and go, and a series of an unprepared claim must vanish with it, which
`Gauge.labels(...)` would keep forever. Every series is labelled
`namespace`, `claim`, `pod` and `device` (`pod` is the pod's name, its UID
when no claim names it, "" when no pod is known):

- `dra_gpu_claim_sm_utilization_percent`: summed over the pod's processes;
  absent where NVML cannot sample it (MIG, no new sample), and then
  `dra_gpu_claim_usage_unavailable{...,metric="sm_utilization",reason}` is 1.
- `dra_gpu_claim_memory_used_bytes`: absent where NVML cannot read it.
- `dra_gpu_claim_memory_limit_bytes`: the claim's MPS limit, consumed
  `memory` or the device's memory (label `source`: mps, share, device).
- `dra_gpu_claim_idle_seconds`: since the claim last used the device.
- `dra_gpu_claim_over_share`: 1 while a shared claim uses more than its share.

The claim-level values (limit, idle, over share) are repeated on each pod's
series, so every metric joins on the same four labels.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from kubelet_plugin.usage_sampler import UsageReport

LABELS = ("namespace", "claim", "pod", "device")


class UsageCollector(Collector):
    """Yields the metrics of `latest()` (None: no pass yet, no series)."""

    def __init__(self, latest: Callable[[], UsageReport | None]) -> None:
        self._latest = latest

    def describe(self) -> list[Metric]:
        return []  # claims vary; nothing to check at registration

    def collect(self) -> Iterator[Metric]:
        sm = GaugeMetricFamily(
            "dra_gpu_claim_sm_utilization_percent",
            "SM utilization of a claim's pod on a device (NVML per-process samples)",
            labels=LABELS,
        )
        unavailable = GaugeMetricFamily(
            "dra_gpu_claim_usage_unavailable",
            "1 where a usage metric of a claim cannot be measured, with the reason",
            labels=(*LABELS, "metric", "reason"),
        )
        used = GaugeMetricFamily(
            "dra_gpu_claim_memory_used_bytes",
            "GPU memory used by a claim's pod on a device",
            labels=LABELS,
        )
        limit = GaugeMetricFamily(
            "dra_gpu_claim_memory_limit_bytes",
            "GPU memory a claim may use on a device (MPS limit, consumed memory, or the device's)",
            labels=(*LABELS, "source"),
        )
        idle = GaugeMetricFamily(
            "dra_gpu_claim_idle_seconds",
            "Seconds since the claim last used the device",
            labels=LABELS,
        )
        over = GaugeMetricFamily(
            "dra_gpu_claim_over_share",
            "1 while a shared claim uses more than its share of the device",
            labels=LABELS,
        )
        report = self._latest()
        for usage in report.claims if report is not None else ():
            t = usage.target
            for pod in usage.pods:
                labels = [t.namespace, t.claim, pod.pod, t.device]
                if pod.sm_percent is not None:
                    sm.add_metric(labels, pod.sm_percent)
                elif usage.sm_unavailable is not None:
                    unavailable.add_metric([*labels, "sm_utilization", usage.sm_unavailable], 1.0)
                if pod.memory_used_bytes is not None:
                    used.add_metric(labels, float(pod.memory_used_bytes))
                else:
                    unavailable.add_metric([*labels, "memory_used", "error"], 1.0)
                if t.memory_limit_bytes is not None:
                    limit.add_metric([*labels, t.limit_source], float(t.memory_limit_bytes))
                idle.add_metric(labels, usage.idle_seconds)
                over.add_metric(labels, 1.0 if usage.over_share else 0.0)
        yield from (sm, unavailable, used, limit, idle, over)


__all__ = ["LABELS", "UsageCollector"]
