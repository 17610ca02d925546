"""`dra-gpu demo` (`make demo`): the whole node path on a simulated DGX H100.

It plays the parts a real cluster would: it starts the kubelet plugin as a
real server process on a simulated `dgx-h100` node with a temporary local
store and kubelet root, registers it as the kubelet does, lets it publish
its ResourceSlices, writes allocated ResourceClaims, calls
NodePrepareResources and NodeUnprepareResources over the real Unix socket,
and shows the devices, CDI specs and checkpoint at each step. The plugin
runs with `--dynamic-mig`, so one step asks for MIG slices by profile and
shows them created at Prepare and gone at Unprepare; another has two claims
share one GPU through MPS, each with its own limits, served by one control
daemon (a real process) that comes with the first and goes with the last
(`dra-gpu status` shows it). A last step lets pods run simulated CUDA
processes (`dra-gpu sim workload`) and shows what the plugin reports per
claim: an idle claim, a claim over its share, each claim's status.devices,
the `dra_gpu_claim_*` metrics and a `GPUIdle` Event. The simulated node has
a fake NVIDIA driver root, so each CDI spec shows the driver files a
container gets. It finishes in seconds and removes everything it made
(unless `--keep`).
"""

from __future__ import annotations

import re
import subprocess
import sys
import time
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, TextIO

from dra_driver import DEFAULT_DRIVER_NAME
from dra_driver.claims.mps import DaemonPaths
from dra_driver.composition.demo_claims import demo_claims, mig_profile_claim
from dra_driver.composition.plugin_process import PluginProcess
from dra_driver.hardware.simulated.mps_control import read_state
from dra_driver.kube import yaml_io
from dra_driver.kube.objects import Obj
from dra_driver.node import mig_status
from dra_driver.node.device_classes import default_device_classes
from kubelet_plugin import node_status
from kubelet_plugin.main import plugin_data_dir
from kubelet_plugin.service import ClaimRef, PrepareResult

NODE = "demo-node"
SHAPE = "dgx-h100"


class NodeAllocator(Protocol):
    """Allocates claims on one node as kube-scheduler would; returns them and how it was done.

    The CLI passes `dra_driver.scheduling.whatif.node_allocation.allocate_on_node`
    (scheduling is the simulator's job, and the daemon's package does not
    import the simulator).
    """

    def __call__(
        self,
        claims: Sequence[Mapping[str, Any]],
        slices: Sequence[Obj],
        classes: Sequence[Obj],
        node: str,
    ) -> tuple[list[Obj], str]: ...


class _Printer:
    def __init__(self, out: TextIO) -> None:
        self._out = out
        self._step = 0
        # Bold step titles on a terminal only: piped or logged, escapes are noise.
        self._bold, self._plain = ("\033[1m", "\033[0m") if out.isatty() else ("", "")

    def step(self, title: str) -> None:
        self._step += 1
        self._out.write(f"\n{self._bold}== {self._step}. {title}{self._plain}\n")

    def line(self, text: str = "", indent: int = 3) -> None:
        for part in text.splitlines() or [""]:
            self._out.write(" " * indent + part + "\n")
        self._out.flush()


def run_demo(*, allocate: NodeAllocator, keep: bool = False, out: TextIO = sys.stdout) -> int:
    started = time.monotonic()
    p = _Printer(out)
    plugin = PluginProcess(
        node_name=NODE,
        shape=SHAPE,
        prefix="dra-gpu-demo-",
        keep=keep,
        wait_for_ready=True,
        extra_args=[
            "--dynamic-mig",
            f"--usage-interval={USAGE_INTERVAL:g}",
            f"--idle-claim-after={IDLE_AFTER:g}s",
            "--metrics-address=127.0.0.1:0",
        ],
    )
    work = plugin.work
    try:
        cluster = plugin.cluster
        for device_class in default_device_classes():
            cluster.put_device_class(device_class)

        p.step(f"Start the kubelet plugin on a simulated {SHAPE} node")
        plugin.start()
        p.line(f"pid {plugin.pid}; work dir {work}")
        client = plugin.client
        info = client.get_info()
        version = client.register()
        p.line(f"registration socket {client.registration_socket.relative_to(work)}")
        p.line(
            f"GetInfo: type={info.type} name={info.name} versions={list(info.supported_versions)}"
        )
        p.line(f"endpoint {Path(info.endpoint).relative_to(work)}; kubelet picks {version}")

        p.step("ResourceSlices it published (dra-gpu inventory shows the same)")
        plugin.wait_for(lambda: bool(cluster.list_resource_slices(node_name=NODE)), "slices")
        slices = cluster.list_resource_slices(driver=DEFAULT_DRIVER_NAME, node_name=NODE)
        for s in slices:
            pool = s["spec"]["pool"]
            p.line(
                f"{s['metadata']['name']}: pool {pool['name']} generation {pool['generation']}, "
                f"{len(s['spec'].get('devices', []))} devices, "
                f"{len(s['spec'].get('sharedCounters', []))} counter sets"
            )
        devices = [d for s in slices for d in s["spec"].get("devices", [])]
        whole = [d for d in devices if d["attributes"]["type"]["string"] == "gpu"]
        for device in whole[:3]:
            attrs = device["attributes"]
            p.line(
                f"  {device['name']}: {attrs['productName']['string']}, "
                f"{device['capacity']['memory']['value']}, {attrs['uuid']['string']}, "
                f"pci {attrs['resource.kubernetes.io/pciBusID']['string']}"
            )
        p.line("  ...")
        p.line(
            f"plus {len(devices) - len(whole)} MIG devices, one per profile and placement, "
            "created on demand; per-GPU counters keep overlapping ones apart"
        )

        p.step("Allocate claims for two pods")
        claims = demo_claims()
        allocated, how = allocate(claims, slices, cluster.list_device_classes(), NODE)
        p.line(how)
        for claim in allocated:
            plugin.store_claim(claim)
            results = claim["status"]["allocation"]["devices"]["results"]
            p.line(
                f"{claim['metadata']['namespace']}/{claim['metadata']['name']} "
                f"(uid {claim['metadata']['uid'][:8]}…): "
                + ", ".join(f"{r['request']} -> {r['device']}" for r in results)
            )
        refs = [
            ClaimRef(c["metadata"]["namespace"], c["metadata"]["uid"], c["metadata"]["name"])
            for c in allocated
        ]

        p.step("NodePrepareResources over the DRA socket, one call per pod")
        prepared: dict[str, PrepareResult] = {}
        for ref in refs:
            prepared.update(client.prepare([ref], version=version))
            _show_prepare(p, ref, prepared[ref.uid])
        spec_path = plugin.cdi_spec_path(refs[1].uid)
        p.line(f"CDI spec {spec_path.name}:")
        p.line(_abridged_yaml(spec_path.read_text()), indent=5)
        p.line(
            f"with the node's base spec {', '.join(plugin.base_cdi_files())} (written once: the "
            "control nodes and the driver's files every claim's containers get)"
        )
        ids = [i for d in prepared[refs[1].uid].devices for i in d.cdi_device_ids]
        _show_driver_mounts(p, plugin.container_edits(ids), work)
        _show_checkpoint(p, plugin)

        p.step("Repeat the call, as a restarted kubelet would: same answer, no side effects")
        before = spec_path.stat().st_mtime_ns
        again = client.prepare([refs[1]], version=version)[refs[1].uid]
        _show_prepare(p, refs[1], again)
        p.line(f"CDI spec rewritten: {spec_path.stat().st_mtime_ns != before}")

        p.step("A claim that names a GPU another claim holds is refused (overlap guard)")
        taken = allocated[1]["status"]["allocation"]["devices"]["results"][0]["device"]
        rogue = _rogue_claim(taken)
        plugin.store_claim(rogue)
        rogue_ref = ClaimRef("default", rogue["metadata"]["uid"], rogue["metadata"]["name"])
        p.line("error: " + client.prepare([rogue_ref], version=version)[rogue_ref.uid].error)

        p.step("NodeUnprepareResources for every claim")
        answers = client.unprepare([*refs, rogue_ref], version=version)
        for ref in (*refs, rogue_ref):
            p.line(f"{ref.namespace}/{ref.name}: {answers[ref.uid].error or 'ok'}")
        p.line(f"CDI specs left: {plugin.cdi_files()}")
        _show_checkpoint(p, plugin)

        p.step("Dynamic MIG: three 1g.10gb slices on one GPU, created at Prepare, gone after")
        mig_claim = mig_profile_claim(
            "inference-slices", "5e1f0c2a-7b3d-4e9a-8c61-0d2b4f6a8e13", ["1g.10gb"] * 3
        )
        p.line("requests: 3 x mig.nvidia.com with profile == '1g.10gb', matchAttribute parentUUID")
        (mig_allocated,), _how = allocate([mig_claim], slices, cluster.list_device_classes(), NODE)
        plugin.store_claim(mig_allocated)
        mig_ref = ClaimRef("default", mig_claim["metadata"]["uid"], "inference-slices")
        mig_devices = [
            r["device"] for r in mig_allocated["status"]["allocation"]["devices"]["results"]
        ]
        p.line(f"allocated: {', '.join(mig_devices)}")
        _show_prepare(p, mig_ref, client.prepare([mig_ref], version=version)[mig_ref.uid])
        minor = int(mig_devices[0].split("-")[1])
        _show_mig_status(p, plugin, minor, "dra-gpu mig status, after Prepare:")
        p.line(
            f"unprepare: {client.unprepare([mig_ref], version=version)[mig_ref.uid].error or 'ok'}"
        )
        _show_mig_status(p, plugin, minor, "after Unprepare:")

        _mps_step(p, plugin, version)
        _usage_step(p, plugin, version)

        p.step("SIGTERM: the plugin stops and removes its sockets")
        code = plugin.terminate()
        p.line(f"exit code {code}")
        p.line(f"registration socket exists: {plugin.registration_socket.exists()}")
        p.line(f"DRA socket exists: {plugin.dra_socket.exists()}")
        p.line("")
        p.line(f"demo finished in {time.monotonic() - started:.1f} s", indent=0)
        return 0
    finally:
        plugin.close()
        if keep:
            out.write(f"kept {work}\n")


MPS_GPU = 7
MPS_CLAIMS = (  # name, uid, thread percentage, memory consumed
    ("infer-a", "2c9f4e1a-6b7d-4c3e-9a8f-1e0d2c3b4a51", 25, "20Gi"),
    ("infer-b", "8e1d3c5b-4a2f-4e6d-8b9c-0f1e2d3c4b62", 50, "40Gi"),
)


def _mps_step(p: _Printer, plugin: PluginProcess, version: str) -> None:
    """Two claims share one GPU through MPS; the daemon comes and goes."""
    p.step(f"MPS: two claims share gpu-{MPS_GPU} through one control daemon, own limits each")
    refs = []
    for index, (name, uid, percentage, memory) in enumerate(MPS_CLAIMS):
        plugin.store_claim(_mps_claim(name, uid, percentage, memory, index))
        refs.append(ClaimRef("ml-team", uid, name))
        p.line(
            f"ml-team/{name}: GpuConfig sharing MPS, defaultActiveThreadPercentage {percentage}; "
            f"share of gpu-{MPS_GPU} consuming {memory} of memory"
        )
    for ref in refs:
        _show_prepare(p, ref, plugin.client.prepare([ref], version=version)[ref.uid])
    for ref in refs:
        spec = yaml_io.load(plugin.cdi_spec_path(ref.uid).read_text())
        env = [e for d in spec["devices"] for e in d["containerEdits"].get("env", [])]
        p.line(f"{ref.name} containers get: {' '.join(e for e in env if 'MPS' in e)}")
    _show_node_status(p, plugin, "dra-gpu status: one daemon, both claims its clients")
    gpu_uuid = plugin.hardware().nvml.gpus()[MPS_GPU].uuid
    told = read_state(DaemonPaths.of(plugin.mps_root, gpu_uuid).log) or {}
    p.line(
        f"daemon defaults (the most generous claim's): {told.get('defaultActiveThreadPercentage')}"
        f" % of threads, pinned memory {told.get('defaultDevicePinnedMemLimits')}"
    )
    for ref, title in zip(
        refs, ("the daemon stays for the other claim", "after the last claim"), strict=True
    ):
        error = plugin.client.unprepare([ref], version=version)[ref.uid].error
        p.line(f"unprepare {ref.name}: {error or 'ok'}")
        _show_node_status(p, plugin, title)


USAGE_INTERVAL = 0.5
IDLE_AFTER = 2.0


@dataclass(frozen=True)
class _UsageClaim:
    name: str
    uid: str
    device: str
    pod_uid: str
    share_id: str | None = None  # a share of the device, consuming `memory`
    memory: str | None = None
    workload: tuple[int, str] | None = None  # the pod's process: SM %, memory used


USAGE_CLAIMS = (
    _UsageClaim("notebook", "4d1c2b3a-0e9f-4a8b-9c7d-6e5f4a3b2c10", "gpu-6",
                "7a6b5c4d-3e2f-4a1b-8c9d-0e1f2a3b4c01"),
    _UsageClaim("serve-a", "5e2d3c4b-1f0a-4b9c-8d7e-6f5a4b3c2d20", "gpu-7",
                "7a6b5c4d-3e2f-4a1b-8c9d-0e1f2a3b4c02", "0d5c7e9a-1b3f-4d6e-8a0c-0000000000a1",
                "20Gi", (35, "30Gi")),
    _UsageClaim("serve-b", "6f3e4d5c-2a1b-4c0d-9e8f-7a6b5c4d3e30", "gpu-7",
                "7a6b5c4d-3e2f-4a1b-8c9d-0e1f2a3b4c03", "0d5c7e9a-1b3f-4d6e-8a0c-0000000000b2",
                "40Gi", (20, "10Gi")),
)  # fmt: skip


def _sim_workload(plugin: PluginProcess, claim: _UsageClaim, *args: str) -> list[str]:
    """Run `dra-gpu sim workload` for the claim's pod; the command line as shown."""
    command = [
        "sim",
        "workload",
        f"--sim-state={plugin.sim_state}",
        f"--device={claim.device}",
        f"--pod-uid={claim.pod_uid}",
        *args,
    ]
    subprocess.run(
        [sys.executable, "-m", "dra_driver.cli", *command], check=True, capture_output=True
    )
    return command


def _usage_step(p: _Printer, plugin: PluginProcess, version: str) -> None:
    """Pods use their GPUs; the plugin reports who is idle and who is over its share."""
    p.step("See what your GPUs do: an idle claim, a claim over its share")
    refs = []
    for usage in USAGE_CLAIMS:
        claim = _allocated_claim("ml-team", usage.name, usage.uid, usage.device)
        result = claim["status"]["allocation"]["devices"]["results"][0]
        if usage.share_id is not None:
            result["shareID"] = usage.share_id
            result["consumedCapacity"] = {"memory": usage.memory}
        pod = {"resource": "pods", "name": f"{usage.name}-0", "uid": usage.pod_uid}
        claim["status"]["reservedFor"] = [pod]
        plugin.store_claim(claim)
        refs.append(ClaimRef("ml-team", usage.uid, usage.name))
        what = usage.device
        if usage.share_id is not None:
            what = f"a share of {usage.device} consuming {usage.memory} of memory"
        p.line(f"ml-team/{usage.name} (pod {usage.name}-0): {what}")
    for ref in refs:
        error = plugin.client.prepare([ref], version=version)[ref.uid].error
        if error:
            p.line(f"{ref.name}: error: {error}")
    for usage in USAGE_CLAIMS:
        if usage.workload is not None:
            sm, used = usage.workload
            command = _sim_workload(plugin, usage, f"--sm={sm}", f"--memory={used}")
            p.line(f"$ dra-gpu {' '.join(command).replace(str(plugin.work), '<work>')}")
    data_dir = plugin_data_dir(plugin.kubelet_root, plugin.driver)

    def reported() -> bool:
        view = node_status.collect_claims(plugin.hardware(), data_dir=data_dir)
        rows = {c.claim: c for c in view.claims}
        infer, notebook = rows.get("serve-a"), rows.get("notebook")
        return (
            infer is not None
            and infer.over_share
            and notebook is not None
            and (notebook.idle_seconds or 0) >= IDLE_AFTER
        )

    plugin.wait_for(reported, "the sampled usage", timeout=60)
    view = node_status.collect_claims(plugin.hardware(), data_dir=data_dir)
    mine = tuple(c for c in view.claims if c.namespace == "ml-team")
    p.line("dra-gpu status --claims:")
    p.line(node_status.render_claims(node_status.ClaimsView(mine, view.source)).rstrip(), indent=5)
    p.line("on /metrics (dra_gpu_claim_*):")
    for line in _claim_metrics(plugin, ("serve-a", "notebook")):
        p.line(line, indent=5)
    claim = plugin.cluster.get_resource_claim("ml-team", "serve-a")
    (entry,) = claim["status"]["devices"]
    ready = entry["conditions"][0]
    p.line(
        f"serve-a status.devices: {entry['device']} Ready={ready['status']} ({ready['reason']}), "
        f"uuid {entry['data']['uuid']}, shareID {entry['shareID'][:8]}…"
    )
    event = _idle_event(plugin, "notebook")
    p.line(f"Event {event.get('reason')} on ml-team/notebook: {event.get('note')}")
    for usage in USAGE_CLAIMS:
        if usage.workload is not None:
            _sim_workload(plugin, usage, "--stop")
    answers = plugin.client.unprepare(refs, version=version)
    p.line("unprepare: " + ", ".join(f"{r.name} {answers[r.uid].error or 'ok'}" for r in refs))


def _claim_metrics(plugin: PluginProcess, claims: Sequence[str]) -> list[str]:
    """The /metrics lines of the per-claim series of `claims`."""
    found = re.search(
        r"serving metrics on http://127\.0\.0\.1:(\d+)/metrics", plugin.log_tail(20000)
    )
    if found is None:
        return ["(metrics address not found in the plugin's log)"]
    with urllib.request.urlopen(f"http://127.0.0.1:{found.group(1)}/metrics", timeout=10) as answer:
        text = answer.read().decode()
    wanted = tuple(f'claim="{name}"' for name in claims)
    return [
        line
        for line in text.splitlines()
        if line.startswith("dra_gpu_claim_") and any(w in line for w in wanted)
    ]


def _idle_event(plugin: PluginProcess, claim: str) -> dict[str, Any]:
    """The GPUIdle Event the plugin posted on `claim` (waits for it)."""
    found: list[dict[str, Any]] = []

    def posted() -> bool:
        directory = plugin.cluster_root / "events" / "ml-team"
        for path in sorted(directory.glob("*.yaml")) if directory.is_dir() else ():
            event = yaml_io.load(path.read_text())
            if event.get("reason") == "GPUIdle" and event["regarding"].get("name") == claim:
                found.append(event)
                return True
        return False

    plugin.wait_for(posted, f"the GPUIdle Event of {claim}", timeout=60)
    return found[0]


def _mps_claim(name: str, uid: str, percentage: int, memory: str, index: int) -> dict[str, Any]:
    """An MPS claim allocated a share of the demo GPU, as the scheduler would write it for a
    device published with allowMultipleAllocations."""
    config = {
        "apiVersion": "resource.nvidia.com/v1beta1",
        "kind": "GpuConfig",
        "sharing": {"strategy": "MPS", "mpsConfig": {"defaultActiveThreadPercentage": percentage}},
    }
    claim = _allocated_claim("ml-team", name, uid, f"gpu-{MPS_GPU}")
    devices = claim["status"]["allocation"]["devices"]
    devices["results"][0]["shareID"] = f"0d5c7e9a-1b3f-4d6e-8a0c-{index:012d}"
    devices["results"][0]["consumedCapacity"] = {"memory": memory}
    devices["config"] = [
        {"source": "FromClaim", "opaque": {"driver": DEFAULT_DRIVER_NAME, "parameters": config}}
    ]
    return claim


def _show_node_status(p: _Printer, plugin: PluginProcess, title: str) -> None:
    """The `dra-gpu status` line of the MPS GPU."""
    statuses = node_status.collect(
        plugin.hardware(),
        data_dir=plugin_data_dir(plugin.kubelet_root, plugin.driver),
    )
    p.line(title + ":")
    table = node_status.render_table([s for s in statuses if s.name == f"gpu-{MPS_GPU}"], wide=True)
    p.line(table.rstrip().replace(str(plugin.work), "<work>"), indent=5)


def _show_prepare(p: _Printer, ref: ClaimRef, result: PrepareResult) -> None:
    if result.error:
        p.line(f"{ref.namespace}/{ref.name}: error: {result.error}")
        return
    for device in result.devices:
        p.line(
            f"{ref.namespace}/{ref.name}: request {','.join(device.request_names)} -> "
            f"{device.pool_name}/{device.device_name}"
        )
        for cdi_id in device.cdi_device_ids:
            p.line(f"    CDI {cdi_id}")


def _show_driver_mounts(p: _Printer, container: dict[str, Any], work: Path) -> None:
    """The driver files the claim's containers get (the simulated node's fake driver root),
    from the edits a runtime injects (`PluginProcess.container_edits`)."""
    mounts = container.get("mounts", [])
    p.line(
        f"driver files mounted read-only into the claim's containers: {len(mounts)} mounts "
        "(dra-gpu cdi shows them for a node), e.g.:"
    )
    shown = [
        m
        for m in mounts
        if m["containerPath"].rsplit("/", 1)[-1].startswith(("libcuda.so.", "libnvidia-ml.so."))
        or m["containerPath"].rsplit("/", 1)[-1]
        in ("nvidia-smi", "nvidia-cuda-mps-control", "nvidia_icd.json", "nvidia.icd")
        or m["containerPath"].endswith("gsp_ga10x.bin")
    ]
    for mount in shown:
        host = Path(mount["hostPath"])
        shown_host = f"<work dir>/{host.relative_to(work)}" if host.is_relative_to(work) else host
        p.line(f"  {mount['containerPath']}  <-  {shown_host}")
    hooks = [h["args"][-1 if len(h["args"]) < 3 else 1] for h in container.get("hooks", [])]
    if hooks:
        p.line(f"  hooks (nvidia-cdi-hook): {', '.join(dict.fromkeys(hooks))}")
    nodes = [n["path"] for n in container.get("deviceNodes", [])]
    p.line(f"  device nodes: {', '.join(nodes)}")


def _show_mig_status(p: _Printer, plugin: PluginProcess, minor: int, title: str) -> None:
    """The `dra-gpu mig status` block of GPU `minor`."""
    layouts = mig_status.collect(plugin.hardware().nvml)
    p.line(title)
    p.line(mig_status.render([g for g in layouts if g.gpu.minor == minor]).rstrip(), indent=5)


def _show_checkpoint(p: _Printer, plugin: PluginProcess) -> None:
    checkpoint = plugin.checkpoint()
    claims = checkpoint.claims if checkpoint is not None else {}
    p.line(f"checkpoint {plugin.checkpoint_dir.name}/: {len(claims)} claim(s), one file each")
    for entry in claims.values():
        devices = ", ".join(d.device for d in entry.devices)
        p.line(f"  {entry.namespace}/{entry.name}: {entry.state.value} [{devices}]")


def _abridged_yaml(text: str, limit: int = 24) -> str:
    lines = text.splitlines()
    if len(lines) <= limit:
        return text
    return "\n".join([*lines[:limit], f"... ({len(lines) - limit} more lines)"])


def _rogue_claim(device: str) -> dict[str, Any]:
    return _allocated_claim("default", "rogue", "9c1a7e52-5d0b-4f7e-8a43-2d1f0c9b6e11", device)


def _allocated_claim(namespace: str, name: str, uid: str, device: str) -> dict[str, Any]:
    """A one-GPU claim allocated `device` of the demo node, as the scheduler writes it."""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"namespace": namespace, "name": name, "uid": uid},
        "spec": {
            "devices": {
                "requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}}]
            }
        },
        "status": {
            "allocation": {
                "devices": {
                    "results": [
                        {
                            "request": "gpu",
                            "driver": DEFAULT_DRIVER_NAME,
                            "pool": NODE,
                            "device": device,
                        }
                    ]
                }
            }
        },
    }


__all__: Sequence[str] = ["NodeAllocator", "run_demo"]
