"""Dynamic MIG end to end: the real plugin with `--dynamic-mig`, driven over its socket.

What a cluster user and a node admin would see: MIG placements published as
partitionable devices, a claim that asks for `profile == '1g.10gb'` devices
on one GPU allocated from those slices by the scheduler's algorithm, the GPU
and compute instances created at Prepare (right profile, right placement, CDI
capability nodes from /proc, ids in the checkpoint) and gone after Unprepare,
MIG mode switched on and off on Hopper and left alone on Ampere, allocations
that collide refused without a trace, instances an admin made left alone
(unless `--mig-reclaim-unknown`), and claims on different GPUs prepared and
unprepared in parallel. `dra-gpu mig status` is run after each step, as the
admin would run it.

One dgx-h100 plugin serves most tests (each test uses its own GPUs or cleans
up, and the fixture checks that every GPU is back to "MIG off, no instances");
the other node shapes get a plugin each.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest
import yaml

from dra_driver import cli
from dra_driver.claims.checkpoint import ClaimEntry, ClaimState
from dra_driver.container import cdi
from dra_driver.hardware.nvml.interface import Placement
from dra_driver.hardware.simulated.hardware import SimHardware
from dra_driver.hardware.simulated.node_files import sim_proc_root
from dra_driver.hardware.simulated.shapes import load_shape
from dra_driver.node.device_classes import default_device_classes
from dra_driver.node.host import HostInfo
from dra_driver.scheduling.allocator import AllocatedState, Allocator, Node
from kubelet_plugin.gpu_locks import GpuLocks
from kubelet_plugin.main import plugin_data_dir
from kubelet_plugin.service import ClaimRef, PrepareResult
from tests.fakes import (
    LiveMigInstance,
    PluginProcess,
    live_mig_instances,
    make_allocated_claim,
    make_mig_profile_claim,
    plugin_sim,
)

pytestmark = pytest.mark.slow

DYNAMIC_MIG = ("--dynamic-mig",)
DEVICE_CLASSES = default_device_classes()
NVIDIA_MAJOR = 195  # /dev/nvidia<N>


def _uid(n: int) -> str:
    return f"d1a90000-0000-4000-8000-{n:012d}"


@dataclass
class MigNode:
    """A `--dynamic-mig` plugin on a simulated node, and the views a test checks it through."""

    plugin: PluginProcess
    hardware: SimHardware
    allocated: AllocatedState = field(default_factory=AllocatedState)

    @property
    def host(self) -> HostInfo:
        return HostInfo(sim_proc_root(self.plugin.sim_state))

    def published(self) -> dict[str, dict[str, Any]]:
        """Every device in the plugin's ResourceSlices, by name."""
        return {
            device["name"]: device
            for s in self.plugin.cluster.list_resource_slices(node_name=self.plugin.node_name)
            for device in s["spec"].get("devices", [])
        }

    def allocate(self, claim: dict[str, Any]) -> ClaimRef:
        """Allocate `claim` from the published slices as kube-scheduler would, and store it."""
        slices = self.plugin.cluster.list_resource_slices(node_name=self.plugin.node_name)
        allocator = Allocator(slices, DEVICE_CLASSES, allocated=self.allocated)
        results = allocator.allocate(Node(self.plugin.node_name, {}), [claim])
        assert results is not None, f"claim {claim['metadata']['name']} does not fit"
        claim = {**claim, "status": {"allocation": results[0]}}
        self.allocated.add(claim)
        self.plugin.store_claim(claim)
        meta = claim["metadata"]
        return ClaimRef(meta["namespace"], meta["uid"], meta["name"])

    def store(self, name: str, uid: str, devices: Sequence[str]) -> ClaimRef:
        """Store a claim allocated by hand (what a buggy or racing scheduler could write)."""
        results = [(f"r{index}", device) for index, device in enumerate(devices)]
        self.plugin.store_claim(make_allocated_claim(name, uid=uid, results=results))
        return ClaimRef("default", uid, name)

    def results(self, ref: ClaimRef) -> list[str]:
        claim = self.plugin.cluster.get_resource_claim(ref.namespace, ref.name)
        return [r["device"] for r in claim["status"]["allocation"]["devices"]["results"]]

    def prepare(self, *refs: ClaimRef) -> dict[str, PrepareResult]:
        answers = self.plugin.client.prepare(list(refs))
        assert set(answers) == {ref.uid for ref in refs}
        return answers

    def prepare_ok(self, ref: ClaimRef) -> PrepareResult:
        answer = self.prepare(ref)[ref.uid]
        assert answer.error == "", answer.error
        return answer

    def unprepare_ok(self, *refs: ClaimRef) -> None:
        answers = self.plugin.client.unprepare(list(refs))
        assert {uid: a.error for uid, a in answers.items()} == {ref.uid: "" for ref in refs}

    def entry(self, uid: str) -> ClaimEntry | None:
        checkpoint = self.plugin.checkpoint()
        return None if checkpoint is None else checkpoint.claims.get(uid)

    def gpu_uuid(self, minor: int) -> str:
        (uuid,) = [g.uuid for g in self.hardware.gpus() if g.minor == minor]
        return uuid

    def instances(self, minor: int | None = None) -> list[LiveMigInstance]:
        every = live_mig_instances(self.hardware).values()
        if minor is None:
            return sorted(every, key=lambda i: (i.parent_uuid, i.gi_id))
        uuid = self.gpu_uuid(minor)
        return sorted((i for i in every if i.parent_uuid == uuid), key=lambda i: i.gi_id)

    def mig_mode(self, minor: int) -> tuple[int, int]:
        return self.hardware.mig_mode(self.gpu_uuid(minor))

    def gpu_locks(self) -> GpuLocks:
        """The plugin's per-GPU locks, taken from this (another) process."""
        return GpuLocks(plugin_data_dir(self.plugin.kubelet_root, self.plugin.driver) / "locks")


def mig_status(node: MigNode, capsys: pytest.CaptureFixture[str]) -> dict[int, str]:
    """`dra-gpu mig status --nvml sim:<shape> --sim-state <file>`, one block per GPU minor."""
    capsys.readouterr()
    code = cli.main(
        [
            "mig",
            "status",
            "--nvml",
            f"sim:{node.plugin.shape}",
            "--sim-state",
            str(node.plugin.sim_state),
        ]
    )
    assert code == 0
    blocks: dict[int, str] = {}
    for block in capsys.readouterr().out.split("\n\n"):
        match = re.match(r"gpu-(\d+) ", block)
        assert match, block
        blocks[int(match.group(1))] = block
    return blocks


def _plugin(shape: str) -> PluginProcess:
    """A `--dynamic-mig` plugin on `shape`, not started yet (`with` starts it)."""
    return PluginProcess(  # no MPS claim here: no MPS host
        shape=shape, extra_args=DYNAMIC_MIG, prefix="dra-gpu-mig-", mps_host=False
    )


@pytest.fixture(scope="module")
def _h100_plugin() -> Iterator[PluginProcess]:
    with _plugin("dgx-h100") as plugin:
        yield plugin


@pytest.fixture
def h100(_h100_plugin: PluginProcess) -> Iterator[MigNode]:
    """The shared dgx-h100 plugin; afterwards everything is unprepared and every GPU is
    back to MIG off without instances (what Unprepare promises on Hopper)."""
    node = MigNode(_h100_plugin, plugin_sim(_h100_plugin))
    yield node
    checkpoint = node.plugin.checkpoint()
    leftover = [] if checkpoint is None else list(checkpoint.claims.values())
    if leftover:
        node.plugin.client.unprepare([ClaimRef(e.namespace, e.uid, e.name) for e in leftover])
    assert node.plugin.cdi_files() == []
    assert node.instances() == []
    assert all(node.hardware.mig_mode(g.uuid) == (0, 0) for g in node.hardware.gpus())


def _placement_of(node: MigNode, device: dict[str, Any]) -> tuple[int, Placement]:
    """(GI profile id, placement) a published dynamic MIG device stands for (from its name)."""
    match = re.fullmatch(r"gpu-(\d+)-mig-[a-z0-9-]+-(\d+)-(\d+)", device["name"])
    assert match, device["name"]
    minor, profile_id, start = (int(x) for x in match.groups())
    (profile,) = [p for p in node.hardware.gi_profiles(node.gpu_uuid(minor)) if p.id == profile_id]
    (placement,) = [p for p in profile.placements if p.start == start]
    return profile_id, placement


# --------------------------------------------------------------------------- acceptance 1


def test_one_gpu_profile_claim_is_published_allocated_prepared_and_unprepared(
    h100: MigNode, capsys: pytest.CaptureFixture[str]
) -> None:
    published = h100.published()
    one_g = {
        n for n, d in published.items() if d["attributes"].get("profile") == {"string": "1g.10gb"}
    }
    assert len(one_g) == 8 * 7  # seven 1g.10gb placements on each of the eight H100s
    # Another pod took five of the seven 1g.10gb slots of one GPU: three on one GPU
    # can only be satisfied on another GPU, so the constraint has to do its job.
    filler = h100.allocate(make_mig_profile_claim("filler", _uid(1), ["1g.10gb"] * 5))
    trio = h100.allocate(make_mig_profile_claim("trio", _uid(2), ["1g.10gb"] * 3))

    devices = h100.results(trio)
    assert set(devices) <= one_g
    parents = {published[d]["attributes"]["parentUUID"]["string"] for d in devices}
    filler_parents = {
        published[d]["attributes"]["parentUUID"]["string"] for d in h100.results(filler)
    }
    assert len(parents) == 1
    assert len(filler_parents) == 1
    assert parents != filler_parents
    (parent,) = parents
    (minor,) = [g.minor for g in h100.hardware.gpus() if g.uuid == parent]
    before = mig_status(h100, capsys)
    assert "MIG off" in before[minor]
    assert "whole GPU (no GPU instances)" in before[minor]

    answers = h100.prepare(filler, trio)

    assert answers[filler.uid].error == ""
    assert answers[trio.uid].error == ""
    answer = answers[trio.uid]
    assert [d.device_name for d in answer.devices] == devices
    assert [d.request_names for d in answer.devices] == [("mig-0",), ("mig-1",), ("mig-2",)]
    (base,) = h100.plugin.base_cdi_files()
    base_id = "k8s.gpu.nvidia.com/driver=" + base.split("_", 1)[1].removesuffix(".yaml")
    assert [d.cdi_device_ids for d in answer.devices] == [
        (base_id, cdi.qualified_device_id(trio.uid, d)) for d in devices
    ]
    # The hardware: one 1g.10gb GI (profile 19) per device at its placement, each filled by
    # one 1-slice CI (profile 0); MIG mode on.
    assert h100.mig_mode(minor) == (1, 1)
    live = {(i.profile_id, i.placement): i for i in h100.instances(minor)}
    assert set(live) == {_placement_of(h100, published[d]) for d in devices}
    assert all(len(i.compute_instances) == 1 for i in live.values())
    assert {ci[1] for i in live.values() for ci in i.compute_instances} == {0}
    # The checkpoint records exactly those ids and MIG UUIDs.
    entry = h100.entry(trio.uid)
    assert entry is not None
    assert entry.state is ClaimState.PrepareCompleted
    for prepared in entry.devices:
        mig = prepared.mig
        assert mig is not None
        assert mig.created_by_us
        assert mig.parent_uuid == parent
        instance = live[(mig.profile_id, Placement(mig.placement_start, mig.placement_size))]
        assert (mig.gi_id, mig.ci_id, mig.uuid) == (
            instance.gi_id,
            instance.compute_instances[0][0],
            instance.compute_instances[0][2],
        )
    # The CDI spec: the parent GPU's node and the GI and CI capability nodes, with the
    # minors the (fake) /proc/driver/nvidia/capabilities files give.
    spec = yaml.safe_load(h100.plugin.cdi_spec_path(trio.uid).read_text())
    by_name = {d["name"]: d["containerEdits"]["deviceNodes"] for d in spec["devices"]}
    caps_major = h100.host.char_major("nvidia-caps")
    for prepared in entry.devices:
        mig = prepared.mig
        assert mig is not None
        assert mig.gi_id is not None
        assert mig.ci_id is not None
        gi_minor, gi_mode = h100.host.mig_cap(minor, mig.gi_id)
        ci_minor, ci_mode = h100.host.mig_cap(minor, mig.gi_id, mig.ci_id)
        nodes = by_name[cdi.cdi_device_name(trio.uid, prepared.device)]
        assert [(n["path"], n["major"], n["minor"]) for n in nodes] == [
            (f"/dev/nvidia{minor}", NVIDIA_MAJOR, minor),
            (f"/dev/nvidia-caps/nvidia-cap{gi_minor}", caps_major, gi_minor),
            (f"/dev/nvidia-caps/nvidia-cap{ci_minor}", caps_major, ci_minor),
        ]
        assert [n["fileMode"] for n in nodes[1:]] == [gi_mode, ci_mode]
    # What the admin sees.
    during = mig_status(h100, capsys)
    assert "MIG on" in during[minor]
    assert len(re.findall(r"GI \d+ +1g\.10gb ", during[minor])) == 3
    for prepared in entry.devices:
        assert prepared.mig is not None
        assert str(prepared.mig.uuid) in during[minor]

    h100.unprepare_ok(filler, trio)

    assert h100.instances() == []
    assert h100.mig_mode(minor) == (0, 0)  # Hopper: MIG off again once the GPU is empty
    after = mig_status(h100, capsys)
    assert all("MIG off" in block for block in after.values())
    assert h100.entry(trio.uid) is None
    assert h100.plugin.cdi_files() == []


# --------------------------------------------------------------------------- acceptance 2


def test_h100_asymmetric_1g20gb_gets_the_26_sm_compute_instance(
    h100: MigNode, capsys: pytest.CaptureFixture[str]
) -> None:
    ref = h100.allocate(make_mig_profile_claim("wide-1g", _uid(10), ["1g.20gb"]))
    (device,) = h100.results(ref)

    h100.prepare_ok(ref)

    minor = int(device.split("-")[1])
    (instance,) = h100.instances(minor)
    assert instance.profile_id == 15  # 1g.20gb: one compute slice, two memory slices
    assert [ci[1] for ci in instance.compute_instances] == [7]  # 1_SLICE_REV1, not 0
    (mig,) = h100.hardware.snapshot().compute_instances
    assert mig.profile.multiprocessors == 26  # what the device advertises; CI 0 has 16
    assert h100.published()[device]["capacity"]["multiprocessors"]["value"] == "26"
    assert re.search(r"1g\.20gb .* CI 0 \(profile 7\)  26 SMs", mig_status(h100, capsys)[minor])
    h100.unprepare_ok(ref)


def test_h100_media_extension_profile_is_created_once_per_gpu(
    h100: MigNode, capsys: pytest.CaptureFixture[str]
) -> None:
    first = h100.allocate(make_mig_profile_claim("me-1", _uid(20), ["1g.10gb+me"]))
    second = h100.allocate(make_mig_profile_claim("me-2", _uid(21), ["1g.10gb+me"]))
    (device_1,), (device_2,) = h100.results(first), h100.results(second)
    # A GPU has one set of media engines: the counters put the second +me elsewhere.
    assert device_1.split("-mig-")[0] != device_2.split("-mig-")[0]
    assert "-mig-1g10gb-me-20-" in device_1

    answers = h100.prepare(first, second)

    assert all(a.error == "" for a in answers.values())
    minor = int(device_1.split("-")[1])
    (instance,) = h100.instances(minor)
    assert instance.profile_id == 20
    assert re.search(r"GI \d+ +1g\.10gb\+me ", mig_status(h100, capsys)[minor])
    h100.unprepare_ok(first, second)


def test_ampere_with_mig_on_offers_only_mig_and_keeps_mig_on(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with _plugin("dgx-a100-40gb") as plugin:
        node = MigNode(plugin, plugin_sim(plugin))
        published = node.published()
        assert published
        assert all(d["attributes"]["type"]["string"] == "mig" for d in published.values())
        assert not {f"gpu-{n}" for n in range(8)} & set(published)
        before = mig_status(node, capsys)
        assert all("MIG on" in b and "no GPU instances" in b for b in before.values())

        ref = node.allocate(make_mig_profile_claim("ampere", _uid(30), ["3g.20gb", "1g.5gb"]))
        node.prepare_ok(ref)

        (minor,) = {int(d.split("-")[1]) for d in node.results(ref)}
        assert sorted(i.profile_id for i in node.instances(minor)) == [9, 19]
        during = mig_status(node, capsys)[minor]
        assert re.search(r"GI \d+ +3g\.20gb .* CI 0 \(profile 2\)  42 SMs", during)
        assert re.search(r"GI \d+ +1g\.5gb .* CI 0 \(profile 0\)  14 SMs", during)

        node.unprepare_ok(ref)

        assert node.instances() == []
        assert node.mig_mode(minor) == (1, 1)  # Ampere: switching off needs a reset
        after = mig_status(node, capsys)[minor]
        assert "MIG on" in after
        assert "no GPU instances" in after
        assert plugin.cdi_files() == []


def test_a30_four_slice_grid_fills_and_empties(capsys: pytest.CaptureFixture[str]) -> None:
    with _plugin("a30-node") as plugin:
        node = MigNode(plugin, plugin_sim(plugin))
        published = node.published()
        gpu0 = sorted(n for n in published if n.startswith("gpu-0-mig-"))
        assert gpu0 == sorted(
            [f"gpu-0-mig-1g6gb-14-{s}" for s in range(4)]
            + [f"gpu-0-mig-1g6gb-me-21-{s}" for s in range(4)]
            + ["gpu-0-mig-2g12gb-5-0", "gpu-0-mig-2g12gb-5-2"]
            + ["gpu-0-mig-2g12gb-me-6-0", "gpu-0-mig-2g12gb-me-6-2"]
            + ["gpu-0-mig-4g24gb-0-0"]
        )
        counters = [
            s["spec"]["sharedCounters"]
            for s in plugin.cluster.list_resource_slices(node_name=plugin.node_name)
            if s["spec"].get("sharedCounters")
        ]
        slices = {c for sets in counters for cs in sets for c in cs["counters"]}
        assert {c for c in slices if c.startswith("memory-slice-")} == {
            f"memory-slice-{i}" for i in range(4)
        }

        before = mig_status(node, capsys)
        assert all("MIG on" in b and "no GPU instances" in b for b in before.values())

        ref = node.allocate(
            make_mig_profile_claim("a30-full", _uid(40), ["2g.12gb", "1g.6gb", "1g.6gb"])
        )
        node.prepare_ok(ref)

        (minor,) = {int(d.split("-")[1]) for d in node.results(ref)}
        instances = node.instances(minor)
        assert sorted(i.profile_id for i in instances) == [5, 14, 14]
        assert sorted(s for i in instances for s in i.placement.slices) == [0, 1, 2, 3]
        block = mig_status(node, capsys)[minor]
        assert "slices |0      |1      |2      |3      |" in block
        assert "......." not in block  # every memory slice is taken
        assert re.search(r"2g\.12gb .* CI 0 \(profile 1\)  28 SMs", block)

        node.unprepare_ok(ref)

        assert node.instances() == []
        assert node.mig_mode(minor) == (1, 1)
        assert "no GPU instances" in mig_status(node, capsys)[minor]


def test_ampere_with_mig_off_offers_whole_gpus_and_refuses_mig_devices() -> None:
    with _plugin("dgx-a100-80gb") as plugin:
        node = MigNode(plugin, plugin_sim(plugin))
        assert sorted(node.published()) == sorted(f"gpu-{n}" for n in range(8))
        assert "MIG mode on before" in plugin.log_tail(20000)
        unplaceable = make_mig_profile_claim("nope", _uid(50), ["1g.10gb"])
        assert (
            Allocator(
                plugin.cluster.list_resource_slices(node_name=plugin.node_name), DEVICE_CLASSES
            ).allocate(Node(plugin.node_name, {}), [unplaceable])
            is None
        )
        ref = node.store("by-hand", _uid(51), ["gpu-0-mig-1g10gb-19-0"])

        answer = node.prepare(ref)[ref.uid]

        assert "gpu-0-mig-1g10gb-19-0" in answer.error
        assert "does not publish" in answer.error
        assert node.mig_mode(0) == (0, 0)
        assert node.entry(ref.uid) is None
        assert plugin.cdi_files() == []


# --------------------------------------------------------------------------- acceptance 3


def _assert_refused_without_trace(node: MigNode, ref: ClaimRef, *names: str) -> str:
    before = node.instances()
    modes = [node.hardware.mig_mode(g.uuid) for g in node.hardware.gpus()]
    answer = node.prepare(ref)[ref.uid]
    assert answer.error
    assert answer.devices == ()
    for name in names:
        assert name in answer.error
    assert node.entry(ref.uid) is None
    assert not node.plugin.cdi_spec_path(ref.uid).exists()
    assert node.instances() == before
    assert [node.hardware.mig_mode(g.uuid) for g in node.hardware.gpus()] == modes
    return answer.error


def test_overlapping_placements_in_two_claims_are_refused(h100: MigNode) -> None:
    first = h100.store("big", _uid(60), ["gpu-3-mig-3g40gb-9-0"])
    clean = h100.prepare_ok(first)
    instances = h100.instances(3)
    overlap = h100.store("small", _uid(61), ["gpu-3-mig-1g10gb-19-2"])

    error = _assert_refused_without_trace(
        h100, overlap, "gpu-3-mig-1g10gb-19-2", "gpu-3-mig-3g40gb-9-0", "default/big"
    )

    assert "memory slice" in error
    # The first claim is untouched: same answer, same instance (same MIG UUID).
    assert h100.prepare_ok(first) == clean
    assert h100.instances(3) == instances
    h100.unprepare_ok(first, overlap)


def test_whole_gpu_and_mig_device_of_it_in_two_claims_are_refused(h100: MigNode) -> None:
    whole = h100.store("whole", _uid(70), ["gpu-4"])
    h100.prepare_ok(whole)
    slice_of_it = h100.store("slice", _uid(71), ["gpu-4-mig-1g10gb-19-0"])

    _assert_refused_without_trace(h100, slice_of_it, "gpu-4-mig-1g10gb-19-0", "gpu-4")
    assert h100.mig_mode(4) == (0, 0)  # not switched on under the whole-GPU user

    mig_first = h100.store("mig-first", _uid(72), ["gpu-5-mig-1g10gb-19-0"])
    h100.prepare_ok(mig_first)
    whole_after = h100.store("whole-after", _uid(73), ["gpu-5"])

    _assert_refused_without_trace(h100, whole_after, "gpu-5", "gpu-5-mig-1g10gb-19-0")
    assert h100.mig_mode(5) == (1, 1)
    assert len(h100.instances(5)) == 1
    h100.unprepare_ok(whole, slice_of_it, mig_first, whole_after)


def test_overlapping_placements_within_one_claim_are_refused(h100: MigNode) -> None:
    ref = h100.store("self-overlap", _uid(80), ["gpu-6-mig-3g40gb-9-0", "gpu-6-mig-1g10gb-19-2"])

    _assert_refused_without_trace(h100, ref, "gpu-6-mig-1g10gb-19-2", "gpu-6-mig-3g40gb-9-0")
    h100.unprepare_ok(ref)


# --------------------------------------------------------------------------- parallelism


def _in_thread(call: Any, *args: Any) -> tuple[threading.Thread, list[Any]]:
    out: list[Any] = []
    thread = threading.Thread(target=lambda: out.append(call(*args)), daemon=True)
    thread.start()
    return thread, out


def _state(node: MigNode, uid: str) -> str:
    entry = node.entry(uid)
    if entry is None:
        return "absent"
    stages = {d.mig.stage for d in entry.devices if d.mig is not None}
    return f"{entry.state.value}:{','.join(sorted(stages))}"


def test_claims_on_different_gpus_of_one_call_do_not_wait_for_each_other(h100: MigNode) -> None:
    blocked = h100.store("blocked", _uid(90), ["gpu-7-mig-1g10gb-19-0"])
    free = h100.store("free", _uid(91), ["gpu-6-mig-1g10gb-19-0"])
    locks = h100.gpu_locks()

    with locks.hold([h100.gpu_uuid(7)]):  # another process is busy on GPU 7
        thread, answers = _in_thread(h100.plugin.client.prepare, [blocked, free])
        h100.plugin.wait_for(
            lambda: _state(h100, free.uid) == "PrepareCompleted:complete", "GPU 6 prepared"
        )
        assert _state(h100, blocked.uid) == "PrepareStarted:planned"
        assert h100.instances(7) == []
    thread.join(timeout=30)
    assert {uid: a.error for uid, a in answers[0].items()} == {blocked.uid: "", free.uid: ""}
    assert len(h100.instances(7)) == 1
    assert len(h100.instances(6)) == 1

    with locks.hold([h100.gpu_uuid(7)]):
        thread, _ = _in_thread(h100.plugin.client.unprepare, [blocked, free])
        h100.plugin.wait_for(lambda: _state(h100, free.uid) == "absent", "GPU 6 unprepared")
        assert h100.instances(6) == []
        assert _state(h100, blocked.uid) == "PrepareCompleted:complete"
        assert len(h100.instances(7)) == 1
    thread.join(timeout=30)
    assert _state(h100, blocked.uid) == "absent"


def test_concurrent_calls_for_different_gpus_do_not_wait_for_each_other(h100: MigNode) -> None:
    blocked = h100.store("blocked-call", _uid(92), ["gpu-7-mig-3g40gb-9-4"])
    free = h100.store("free-call", _uid(93), ["gpu-6-mig-3g40gb-9-4"])

    with h100.gpu_locks().hold([h100.gpu_uuid(7)]):
        slow, slow_answer = _in_thread(h100.plugin.client.prepare, [blocked])
        h100.plugin.wait_for(
            lambda: _state(h100, blocked.uid) == "PrepareStarted:planned", "GPU 7 claim started"
        )
        fast, fast_answer = _in_thread(h100.plugin.client.prepare, [free])
        fast.join(timeout=30)
        assert fast_answer[0][free.uid].error == ""
        assert slow.is_alive()  # still waiting for GPU 7
    slow.join(timeout=30)
    assert slow_answer[0][blocked.uid].error == ""
    h100.unprepare_ok(blocked, free)


def test_same_claim_prepared_by_two_concurrent_calls_is_created_once(h100: MigNode) -> None:
    ref = h100.store("twice", _uid(94), ["gpu-7-mig-2g20gb-14-0", "gpu-7-mig-1g10gb-19-6"])
    log_marker = f"NodePrepareResources[v1] default/twice ({ref.uid})"

    with h100.gpu_locks().hold([h100.gpu_uuid(7)]):
        log_before = h100.plugin.log_tail(1_000_000)
        seen = log_before.count(log_marker)
        first, first_answer = _in_thread(h100.plugin.client.prepare, [ref])
        h100.plugin.wait_for(
            lambda: _state(h100, ref.uid) == "PrepareStarted:planned", "first call started"
        )
        # The kubelet gave up waiting and asks again while the first call still runs.
        second, second_answer = _in_thread(h100.plugin.client.prepare, [ref])
        h100.plugin.wait_for(
            lambda: h100.plugin.log_tail(1_000_000).count(log_marker) == seen + 2,
            "second call received",
        )
    first.join(timeout=30)
    second.join(timeout=30)

    answers = [first_answer[0][ref.uid], second_answer[0][ref.uid]]
    assert answers[0].error == ""
    assert answers[0] == answers[1]
    instances = h100.instances(7)
    entry = h100.entry(ref.uid)
    assert entry is not None
    assert entry.state is ClaimState.PrepareCompleted
    recorded = sorted(d.mig.gi_id for d in entry.devices if d.mig is not None and d.mig.gi_id)
    # The second call waited for the first instead of rolling its work back under it.
    log = h100.plugin.log_tail(1_000_000)[len(log_before) :]
    assert "destroyed GI" not in log
    assert "half-prepared" not in log
    assert sorted(i.gi_id for i in instances) == recorded
    assert len(instances) == 2
    h100.unprepare_ok(ref)


# --------------------------------------------------------------------------- acceptance 4


def test_admin_instances_are_published_kept_and_reclaimed_only_when_asked() -> None:
    plugin = _plugin("dgx-h100")
    try:
        # Before the plugin ever runs, the admin carves a 3g.40gb out of GPU 0.
        admin_hw = SimHardware(
            load_shape("dgx-h100"),
            node_name=plugin.node_name,
            state_path=plugin.sim_state,
            proc_root=sim_proc_root(plugin.sim_state),
        )
        gpu0 = admin_hw.gpu(0).uuid
        assert admin_hw.set_mig_mode(gpu0, True) == 0
        admin_gi = admin_hw.create_gpu_instance(gpu0, 9, Placement(4, 4))
        admin_ci = admin_hw.create_compute_instance(gpu0, admin_gi.id, 2)
        plugin.start()
        node = MigNode(plugin, admin_hw)
        admin = LiveMigInstance(
            gpu0, admin_gi.id, 9, Placement(4, 4), ((admin_ci.id, 2, admin_ci.uuid),)
        )

        published = node.published()
        static = published["gpu-0-mig-3g40gb-9-4"]
        assert static["attributes"]["uuid"]["string"] == admin_ci.uuid
        assert "gpu-0" not in published  # MIG cannot be switched off under it
        assert {f"gpu-0-mig-1g10gb-19-{s}" for s in range(4)} <= set(published)
        assert not {f"gpu-0-mig-1g10gb-19-{s}" for s in range(4, 7)} & set(published)
        assert "gpu-0-mig-7g80gb-0-0" not in published
        assert "not owned by any claim" in plugin.log_tail(20000)

        beside = node.store("beside", _uid(100), ["gpu-0-mig-1g10gb-19-0"])
        on_it = node.store("on-it", _uid(101), ["gpu-0-mig-3g40gb-9-4"])
        node.prepare_ok(beside)
        node.prepare_ok(on_it)
        spec = yaml.safe_load(plugin.cdi_spec_path(on_it.uid).read_text())
        (device,) = spec["devices"]
        gi_minor, _ = node.host.mig_cap(0, admin_gi.id)
        ci_minor, _ = node.host.mig_cap(0, admin_gi.id, admin_ci.id)
        assert [n["minor"] for n in device["containerEdits"]["deviceNodes"]] == [
            0,
            gi_minor,
            ci_minor,
        ]
        node.unprepare_ok(beside, on_it)
        assert node.instances() == [admin]  # ours is gone, the admin's stays
        assert node.mig_mode(0) == (1, 1)

        # A restart leaves it alone too, while one of our own instances is prepared.
        ours = node.store("ours", _uid(102), ["gpu-1-mig-1g10gb-19-3"])
        node.prepare_ok(ours)
        (own,) = node.instances(1)
        plugin.kill()
        plugin.start()
        assert set(node.instances()) == {admin, own}

        # Only --mig-reclaim-unknown destroys it (and MIG goes off on the emptied H100).
        plugin.kill()
        plugin.extra_args = (*DYNAMIC_MIG, "--mig-reclaim-unknown")
        plugin.start()

        assert node.instances() == [own]
        assert node.mig_mode(0) == (0, 0)
        assert f"destroyed MIG instance GI {admin_gi.id} (3g.40gb)" in plugin.log_tail(20000)
        published = node.published()
        assert "gpu-0" in published
        assert "gpu-0-mig-1g10gb-19-4" in published
        assert "gpu-0-mig-3g40gb-9-4" in published  # now a dynamic placement again
        assert "uuid" not in published["gpu-0-mig-3g40gb-9-4"]["attributes"]
        assert "uuid" not in published["gpu-1-mig-1g10gb-19-3"]["attributes"]  # still ours
        node.unprepare_ok(ours)
        assert node.instances() == []
        assert node.mig_mode(1) == (0, 0)
    finally:
        plugin.close()


def test_an_instance_made_after_start_up_fails_prepare_and_survives_it(h100: MigNode) -> None:
    # The admin carves GPU 5 by hand while the plugin runs: the published devices are
    # stale until a restart, and the scheduler hands out a placement the admin took.
    uuid = h100.gpu_uuid(5)
    assert h100.hardware.set_mig_mode(uuid, True) == 0
    gi = h100.hardware.create_gpu_instance(uuid, 19, Placement(3, 1))
    ci = h100.hardware.create_compute_instance(uuid, gi.id, 0)
    admin = h100.instances(5)
    ref = h100.store("late", _uid(110), ["gpu-5-mig-1g10gb-19-0", "gpu-5-mig-1g10gb-19-3"])
    try:
        answer = h100.prepare(ref)[ref.uid]

        assert "gpu-5-mig-1g10gb-19-3" in answer.error
        assert "occupied" in answer.error
        assert h100.instances(5) == admin  # ours (slice 0) rolled back, the admin's kept
        assert h100.entry(ref.uid) is None
        assert not h100.plugin.cdi_spec_path(ref.uid).exists()
    finally:
        h100.hardware.destroy_compute_instance(uuid, gi.id, ci.id)
        h100.hardware.destroy_gpu_instance(uuid, gi.id)
        h100.hardware.set_mig_mode(uuid, False)


def test_published_dynamic_devices_carry_parent_and_counters(h100: MigNode) -> None:
    published = h100.published()
    device = published["gpu-2-mig-3g40gb-9-4"]
    assert device["attributes"]["type"]["string"] == "mig"
    assert device["attributes"]["parentUUID"]["string"] == h100.gpu_uuid(2)
    assert device["attributes"]["profile"]["string"] == "3g.40gb"
    assert "uuid" not in device["attributes"]  # it does not exist yet
    (consumed,) = device["consumesCounters"]
    assert consumed["counterSet"] == "gpu-2-counter-set"
    assert {f"memory-slice-{i}" for i in range(4, 8)} <= set(consumed["counters"])
    assert "gpu-2" in published  # Hopper: the whole GPU is offered too
