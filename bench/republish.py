"""How fast the plugin puts back wiped slices and taints a GPU that throws an Xid.

The kubelet deletes every ResourceSlice of its node when it starts; until the
plugin re-creates them, the scheduler sees no GPUs there. A GPU that throws a
fatal Xid keeps getting pods until its devices are tainted. Both delays are
what an admin notices, so this benchmark measures them on the real plugin
process (simulated dgx-h100, local directory cluster, re-sync interval
3600 s so only the watch and the health monitor can act), once with whole
GPUs (one slice) and once with `--dynamic-mig` (every MIG placement: five
large slices):

* restore: all of the node's slices are deleted from the store; the time until
  every one is back;
* taint / untaint: `SimHardware.inject_health_event` (what `dra-gpu sim health`
  does) with Xid 79, then recovery; the time until the GPU's devices carry,
  then lose, the `gpu.nvidia.com/unhealthy` taint in the store.

Baseline, from the same run: the time of one `SlicePublisher.publish` that
re-creates the same slices, called directly on a second, private store (the
plugin's own store would race with the plugin). The ratio restore/publish is
the cost of noticing the deletion (the 0.5 s poll of the local store).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from bench import BenchOptions, BenchResult, real_plugin, summarize_ns
from controller.publisher import SlicePublisher
from dra_driver.errors import PluginError
from dra_driver.hardware.simulated.hardware import SimHardware
from dra_driver.kube.local_store import LocalCluster
from tests.fakes import PluginProcess

NAME = "republish"
DESCRIPTION = "wiped slices restored, Xid taint and recovery published"
SHAPE = "dgx-h100"
DEFAULT_CYCLES = 10
MODES = {"whole GPUs": [], "--dynamic-mig": ["--dynamic-mig"]}
TIMEOUT_S = 60.0


def run(options: BenchOptions) -> BenchResult:
    cycles = options.cycles or DEFAULT_CYCLES
    latencies: dict[str, dict[str, float]] = {}
    headline: list[str] = []
    data: dict[str, Any] = {"shape": SHAPE, "cycles": cycles}
    for mode, args in MODES.items():
        rows, slices = _measure(cycles, args)
        restore, publish = rows["restore wiped slices"], rows["direct publish (baseline)"]
        headline.append(
            f"{mode} ({slices} slices): restore p50 {restore['p50']:.0f} ms = "
            f"{restore['p50'] / publish['p50']:.1f}x one direct publish ({publish['p50']:.0f} ms)"
        )
        latencies.update({f"{mode}: {label}": stats for label, stats in rows.items()})
        data[mode] = {"slices": slices}
    return BenchResult(
        name=NAME,
        title=f"{NAME}: {DESCRIPTION} ({SHAPE}, {cycles} cycles)",
        headline=headline,
        latencies=latencies,
        data=data,
    )


def _measure(cycles: int, args: list[str]) -> tuple[dict[str, dict[str, float]], int]:
    restore_ns: list[int] = []
    publish_ns: list[int] = []
    taint_ns: list[int] = []
    untaint_ns: list[int] = []
    with real_plugin(
        shape=SHAPE,
        prefix="dra-gpu-bench-",
        extra_args=args,
    ) as plugin:
        cluster = plugin.cluster
        _until(plugin, lambda: bool(_slices(plugin)))
        published = _slices(plugin)
        names = sorted(obj["metadata"]["name"] for obj in published)
        private = LocalCluster(plugin.work / "baseline-cluster")
        direct = SlicePublisher(private, driver=plugin.driver, node_name=plugin.node_name)
        hw = SimHardware(state_path=plugin.sim_state)
        for _ in range(cycles):
            for name in names:
                cluster.delete_resource_slice(name)
            started = time.perf_counter_ns()
            _until(plugin, lambda: len(_slices(plugin)) == len(names))
            restore_ns.append(time.perf_counter_ns() - started)

            for name in names:
                private.delete_resource_slice(name)
            started = time.perf_counter_ns()
            direct.publish(published)
            publish_ns.append(time.perf_counter_ns() - started)

            started = time.perf_counter_ns()
            hw.inject_health_event(3, "xid", 79)
            _until(plugin, lambda: _tainted(plugin))
            taint_ns.append(time.perf_counter_ns() - started)
            started = time.perf_counter_ns()
            hw.inject_health_event(3, "recovered")
            _until(plugin, lambda: not _tainted(plugin))
            untaint_ns.append(time.perf_counter_ns() - started)
    rows = {
        "restore wiped slices": summarize_ns(restore_ns),
        "direct publish (baseline)": summarize_ns(publish_ns),
        "Xid 79 -> tainted": summarize_ns(taint_ns),
        "recovered -> untainted": summarize_ns(untaint_ns),
    }
    return rows, len(names)


def _slices(plugin: PluginProcess) -> list[dict[str, Any]]:
    return plugin.cluster.list_resource_slices(node_name=plugin.node_name)


def _tainted(plugin: PluginProcess) -> bool:
    return any(
        device.get("taints")
        for obj in plugin.cluster.list_resource_slices(node_name=plugin.node_name)
        for device in obj["spec"].get("devices") or []
    )


def _until(plugin: PluginProcess, condition: Callable[[], bool]) -> None:
    deadline = time.monotonic() + TIMEOUT_S
    while not condition():
        if time.monotonic() > deadline:
            raise PluginError(f"condition not met in {TIMEOUT_S:g} s; log:\n{plugin.log_tail()}")
        time.sleep(0.005)
