"""The real `dra-gpu kubelet-plugin` process, driven over its Unix sockets like the kubelet does.

One plugin process on a simulated dgx-h100 node serves the whole module; every
test uses its own claims and GPUs and unprepares what it prepared, so the
tests do not see each other. What is checked is what a kubelet, a container
runtime or an operator would notice: the gRPC answers, the CDI spec files,
the checkpoint and the published ResourceSlices.
"""

from __future__ import annotations

import ctypes
import os
import re
import signal
import threading
from collections.abc import Iterator, Sequence
from typing import Any

import grpc
import pytest
import yaml

from controller.limits import validate_resource_slice, validate_schema
from dra_driver import DEFAULT_DRIVER_NAME
from dra_driver.claims.checkpoint import ClaimState
from dra_driver.container import cdi
from dra_driver.errors import PluginError
from dra_driver.hardware.simulated.hardware import SimHardware
from dra_driver.hardware.simulated.node_files import sim_proc_root, sim_sys_root
from dra_driver.node.device_classes import default_device_classes
from dra_driver.node.host import HostInfo
from dra_driver.scheduling.allocator import Features, Node
from dra_driver.scheduling.whatif.engine import Simulation, WorkItem
from dra_driver.scheduling.whatif.extended import class_mapping, extended_resource_claim
from kubelet_plugin.registration import SUPPORTED_VERSIONS
from kubelet_plugin.service import ClaimRef, PrepareResult
from tests.fakes import (
    TEST_POOL,
    PluginProcess,
    make_allocated_claim,
    make_opaque_config,
    wait_until,
)

GPUS = [f"gpu-{n}" for n in range(8)]  # the eight H100s of a dgx-h100, named by minor


@pytest.fixture(scope="module")
def plugin() -> Iterator[PluginProcess]:
    with PluginProcess(shape="dgx-h100") as process:
        yield process


@pytest.fixture(autouse=True)
def _nothing_left_prepared(plugin: PluginProcess) -> Iterator[None]:
    """Each test starts and must end with nothing prepared, so the module's tests stay apart."""
    _assert_no_trace(plugin)
    yield
    _assert_no_trace(plugin)


def _claim(
    plugin: PluginProcess,
    name: str,
    uid: str,
    devices: Sequence[str] | Sequence[tuple[str, str]],
    *,
    namespace: str = "default",
) -> ClaimRef:
    """Store an allocated claim (request "gpu" unless pairs are given) and return its ref."""
    results = [d if isinstance(d, tuple) else ("gpu", d) for d in devices]
    plugin.store_claim(make_allocated_claim(name, namespace, uid, results))
    return ClaimRef(namespace=namespace, uid=uid, name=name)


def _assert_no_trace(plugin: PluginProcess) -> None:
    checkpoint = plugin.checkpoint()
    assert checkpoint is None or dict(checkpoint.claims) == {}
    assert plugin.cdi_files() == []


def _spec(plugin: PluginProcess, uid: str) -> dict[str, Any]:
    loaded = yaml.safe_load(plugin.cdi_spec_path(uid).read_text())
    assert isinstance(loaded, dict)
    return loaded


def _gpu_minors(plugin: PluginProcess) -> dict[str, int]:
    """Device name -> the minor of that GPU on the simulated hardware (matched by UUID)."""
    hardware = SimHardware(state_path=plugin.sim_state)
    minor_by_uuid = {gpu.uuid: gpu.minor for gpu in hardware.gpus()}
    (published,) = plugin.cluster.list_resource_slices(node_name=plugin.node_name)
    return {
        device["name"]: minor_by_uuid[device["attributes"]["uuid"]["string"]]
        for device in published["spec"]["devices"]
    }


def _drm_nodes(plugin: PluginProcess, device_name: str) -> list[dict[str, Any]]:
    """The DRM nodes the simulated node's sysfs shows for a published GPU, as CDI nodes."""
    (published,) = plugin.cluster.list_resource_slices(node_name=plugin.node_name)
    (device,) = [d for d in published["spec"]["devices"] if d["name"] == device_name]
    bus_id = device["attributes"]["resource.kubernetes.io/pciBusID"]["string"]
    drm = sim_sys_root(plugin.sim_state) / "bus/pci/devices" / bus_id / "drm"
    nodes = []
    for entry in sorted(drm.iterdir()):
        major, minor = (entry / "dev").read_text().strip().split(":")
        nodes.append(
            {
                "path": f"/dev/dri/{entry.name}",
                "type": "c",
                "major": int(major),
                "minor": int(minor),
            }
        )
    return nodes


def _unprepare_ok(plugin: PluginProcess, refs: Sequence[ClaimRef], version: str = "v1") -> None:
    answers = plugin.client.unprepare(refs, version=version)
    assert answers == {ref.uid: answers[ref.uid] for ref in refs}
    assert all(answer.error == "" for answer in answers.values()), answers


# --------------------------------------------------------------------------- registration


def test_get_info_describes_a_dra_driver_serving_v1_first(plugin: PluginProcess) -> None:
    info = plugin.client.get_info()

    assert info.type == "DRAPlugin"
    assert info.name == DEFAULT_DRIVER_NAME
    assert info.endpoint == str(plugin.dra_socket)
    # The device-health stream is advertised after the DRA services, v1 and
    # v1alpha1 (kubelet 1.37 opens it only when it is listed and prefers v1).
    assert list(info.supported_versions) == [
        "v1.DRAPlugin",
        "v1beta1.DRAPlugin",
        "v1.DRAResourceHealth",
        "v1alpha1.DRAResourceHealth",
    ]
    assert tuple(info.supported_versions[:2]) == SUPPORTED_VERSIONS
    assert plugin.dra_socket.is_socket()


def test_registration_accepted_and_rejection_answered_with_an_error(
    plugin: PluginProcess,
) -> None:
    assert plugin.client.register() == "v1"

    with pytest.raises(grpc.RpcError) as rejected:
        plugin.client.notify_registration(False, "versions do not match")
    assert "versions do not match" in (rejected.value.details() or "")
    # A rejection does not stop the plugin: the kubelet retries registration later.
    assert plugin.client.register() == "v1"


# --------------------------------------------------------------------------- slices


def test_publishes_one_valid_slice_with_every_gpu(plugin: PluginProcess) -> None:
    slices = plugin.cluster.list_resource_slices(
        driver=DEFAULT_DRIVER_NAME, node_name=plugin.node_name
    )

    assert len(slices) == 1
    (published,) = slices
    spec = published["spec"]
    assert spec["driver"] == DEFAULT_DRIVER_NAME
    assert spec["nodeName"] == plugin.node_name
    assert spec["pool"]["name"] == plugin.node_name
    assert spec["pool"]["resourceSliceCount"] == 1
    assert sorted(d["name"] for d in spec["devices"]) == GPUS
    assert validate_resource_slice(published) == []
    validate_schema(published)


# --------------------------------------------------------------------------- prepare / unprepare


@pytest.mark.parametrize(
    ("version", "uid", "cdi_version"),
    [
        # A UID starting with a digit needs CDI 0.5.0; one starting with a letter 0.3.0.
        ("v1", "1e2d3c4b-0000-4000-8000-000000000001", "0.5.0"),
        ("v1beta1", "ae2d3c4b-0000-4000-8000-000000000002", "0.3.0"),
    ],
)
def test_prepare_and_unprepare_whole_gpus(
    plugin: PluginProcess, version: str, uid: str, cdi_version: str
) -> None:
    ref = _claim(plugin, f"two-gpus-{version}", uid, [("gpus", "gpu-1"), ("gpus", "gpu-3")])
    minors = _gpu_minors(plugin)
    host = HostInfo(sim_proc_root(plugin.sim_state))

    answer = plugin.client.prepare([ref], version=version)

    assert set(answer) == {uid}
    result = answer[uid]
    assert result.error == ""
    assert [(d.pool_name, d.device_name, d.request_names) for d in result.devices] == [
        (TEST_POOL, "gpu-1", ("gpus",)),
        (TEST_POOL, "gpu-3", ("gpus",)),
    ]
    (base_file,) = plugin.base_cdi_files()  # the node's base spec: control nodes, driver files
    base_id = "k8s.gpu.nvidia.com/driver=" + base_file.removeprefix(
        "k8s.gpu.nvidia.com-driver_"
    ).removesuffix(".yaml")
    assert [d.cdi_device_ids for d in result.devices] == [
        (base_id, f"k8s.gpu.nvidia.com/claim={uid}-gpu-1"),
        (base_id, f"k8s.gpu.nvidia.com/claim={uid}-gpu-3"),
    ]
    assert all(d.share_id is None for d in result.devices)

    assert plugin.cdi_files() == [f"k8s.gpu.nvidia.com-claim_{uid}.yaml"]
    spec = _spec(plugin, uid)
    assert spec["kind"] == "k8s.gpu.nvidia.com/claim"
    assert spec["cdiVersion"] == cdi_version
    assert spec["cdiVersion"] == cdi.minimum_cdi_version(spec)
    cdi.validate_spec(spec)
    devices = {d["name"]: d["containerEdits"]["deviceNodes"] for d in spec["devices"]}
    assert devices == {
        f"{uid}-{name}": [
            {
                "path": f"/dev/nvidia{minors[name]}",
                "type": "c",
                "major": 195,
                "minor": minors[name],
            },
            *_drm_nodes(plugin, name),  # card<N> and renderD<M> of that GPU
        ]
        for name in ("gpu-1", "gpu-3")
    }
    assert [n["path"] for n in devices[f"{uid}-gpu-1"]][1:] == [
        "/dev/dri/card2",
        "/dev/dri/renderD129",
    ]
    assert "containerEdits" not in spec  # the base spec carries what every container gets
    container = plugin.container_edits(result.devices[0].cdi_device_ids)
    uvm = host.char_major("nvidia-uvm")
    control = {(n["path"], n["major"], n["minor"]) for n in container["deviceNodes"][:4]}
    assert control == {
        ("/dev/nvidiactl", 195, 255),
        ("/dev/nvidia-uvm", uvm, 0),
        ("/dev/nvidia-uvm-tools", uvm, 1),
        ("/dev/nvidia-modeset", 195, 254),
    }
    assert "NVIDIA_VISIBLE_DEVICES=void" in container["env"]

    checkpoint = plugin.checkpoint()
    assert checkpoint is not None
    entry = checkpoint.claims[uid]
    assert entry.state is ClaimState.PrepareCompleted
    assert (entry.namespace, entry.name) == ("default", ref.name)
    assert [d.device for d in entry.devices] == ["gpu-1", "gpu-3"]
    assert [d.cdi_device_ids for d in entry.devices] == [d.cdi_device_ids for d in result.devices]

    _unprepare_ok(plugin, [ref], version=version)
    assert plugin.base_cdi_files() == [base_file]  # kept for the node's next claim
    # the autouse fixture checks that no CDI spec and no checkpoint entry is left


def test_request_names_are_base_names_of_subrequests(plugin: PluginProcess) -> None:
    uid = "b0000000-0000-4000-8000-000000000003"
    plugin.store_claim(
        make_allocated_claim(
            "prioritized",
            uid=uid,
            results=[{"request": "gpu/big", "device": "gpu-2"}, ("tools", "gpu-4")],
        )
    )
    ref = ClaimRef("default", uid, "prioritized")

    result = plugin.client.prepare([ref])[uid]

    assert result.error == ""
    assert [(d.device_name, d.request_names) for d in result.devices] == [
        ("gpu-2", ("gpu",)),
        ("gpu-4", ("tools",)),
    ]
    _unprepare_ok(plugin, [ref])


def test_repeated_prepare_answers_the_same_without_rewriting_anything(
    plugin: PluginProcess,
) -> None:
    uid = "c0000000-0000-4000-8000-000000000004"
    ref = _claim(plugin, "again", uid, ["gpu-5"])
    first = plugin.client.prepare([ref])[uid]
    spec_path = plugin.cdi_spec_path(uid)
    spec_before = (spec_path.stat().st_ino, spec_path.stat().st_mtime_ns, spec_path.read_bytes())
    checkpoint_before = [(p.name, p.stat().st_mtime_ns) for p in plugin.checkpoint_files()]

    second = plugin.client.prepare([ref])[uid]
    over_v1beta1 = plugin.client.prepare([ref], version="v1beta1")[uid]

    assert first.error == ""
    assert second == first
    assert over_v1beta1 == first
    assert (spec_path.stat().st_ino, spec_path.stat().st_mtime_ns, spec_path.read_bytes()) == (
        spec_before
    )
    assert [(p.name, p.stat().st_mtime_ns) for p in plugin.checkpoint_files()] == checkpoint_before
    _unprepare_ok(plugin, [ref])


def test_repeated_unprepare_and_unprepare_of_unknown_claims_succeed(
    plugin: PluginProcess,
) -> None:
    uid = "d0000000-0000-4000-8000-000000000005"
    ref = _claim(plugin, "twice", uid, ["gpu-6"])
    assert plugin.client.prepare([ref])[uid].error == ""

    _unprepare_ok(plugin, [ref])
    _unprepare_ok(plugin, [ref])
    _unprepare_ok(plugin, [ref], version="v1beta1")
    never = ClaimRef("default", "e0000000-0000-4000-8000-000000000006", "never-prepared")
    _unprepare_ok(plugin, [never])
    _unprepare_ok(plugin, [never], version="v1beta1")


# --------------------------------------------------------------------------- per-claim errors


def test_one_call_answers_every_claim_on_its_own(plugin: PluginProcess) -> None:
    good = _claim(plugin, "good", "f0000000-0000-4000-8000-000000000007", ["gpu-0"])
    missing = ClaimRef("default", "f0000000-0000-4000-8000-000000000008", "missing")
    pending = make_allocated_claim("unallocated", uid="f0000000-0000-4000-8000-00000000000e")
    del pending["status"]
    plugin.store_claim(pending)
    unallocated = ClaimRef("default", "f0000000-0000-4000-8000-00000000000e", "unallocated")
    _claim(plugin, "recreated", "f0000000-0000-4000-8000-00000000000a", ["gpu-7"])
    recreated = ClaimRef("default", "f0000000-0000-4000-8000-000000000009", "recreated")
    plugin.store_claim(
        make_allocated_claim(
            "foreign",
            uid="f0000000-0000-4000-8000-00000000000b",
            results=[{"request": "nic", "driver": "net.example.com", "device": "nic-0"}],
        )
    )
    foreign = ClaimRef("default", "f0000000-0000-4000-8000-00000000000b", "foreign")
    no_uid = ClaimRef("default", "", "no-uid")
    no_namespace = ClaimRef("", "f0000000-0000-4000-8000-00000000000c", "no-namespace")
    refs = [missing, good, unallocated, recreated, foreign, no_uid, no_namespace]

    answer = plugin.client.prepare(refs)

    assert set(answer) == {ref.uid for ref in refs}
    errors = {uid: result.error for uid, result in answer.items()}
    assert errors[good.uid] == ""
    assert [d.device_name for d in answer[good.uid].devices] == ["gpu-0"]
    assert errors[missing.uid].startswith("ResourceClaim default/missing not found")
    assert errors[unallocated.uid] == (
        "ResourceClaim default/unallocated: status.allocation is not set "
        "(the claim is not allocated)"
    )
    assert errors[recreated.uid].startswith(
        f"ResourceClaim default/recreated: metadata.uid is f0000000-0000-4000-8000-00000000000a, "
        f"the kubelet asked for {recreated.uid}"
    )
    assert errors[foreign.uid] == (
        "ResourceClaim default/foreign: status.allocation.devices.results has no device for "
        "driver gpu.nvidia.com"
    )
    assert errors[""] == "claims[5].uid is empty"
    assert errors[no_namespace.uid] == "claims[6].namespace is empty"
    for failed in (missing, unallocated, recreated, foreign, no_namespace):
        assert answer[failed.uid].devices == ()
        assert not plugin.cdi_spec_path(failed.uid).exists()
    checkpoint = plugin.checkpoint()
    assert checkpoint is not None
    assert set(checkpoint.claims) == {good.uid}

    # The daemon keeps serving: a later call of each kind works.
    _unprepare_ok(plugin, [good, missing, unallocated, recreated, foreign])
    later = _claim(plugin, "later", "f0000000-0000-4000-8000-00000000000d", ["gpu-7"])
    assert plugin.client.prepare([later])[later.uid].error == ""
    _unprepare_ok(plugin, [later])


def test_device_claimed_by_another_prepared_claim_is_refused(plugin: PluginProcess) -> None:
    holder = _claim(plugin, "holder", "a1000000-0000-4000-8000-000000000001", ["gpu-2"])
    rogue = _claim(plugin, "rogue", "a1000000-0000-4000-8000-000000000002", ["gpu-4", "gpu-2"])
    assert plugin.client.prepare([holder])[holder.uid].error == ""

    refused = plugin.client.prepare([rogue])[rogue.uid]

    assert refused.devices == ()
    assert refused.error == (
        "ResourceClaim default/rogue: status.allocation.devices.results[1]: device 'gpu-2' is "
        f"already prepared for claim default/holder (uid {holder.uid}); refusing to hand it out "
        "twice"
    )
    assert not plugin.cdi_spec_path(rogue.uid).exists()
    checkpoint = plugin.checkpoint()
    assert checkpoint is not None
    assert set(checkpoint.claims) == {holder.uid}
    # Nothing of the refused claim holds gpu-4: another claim gets it.
    other = _claim(plugin, "other", "a1000000-0000-4000-8000-000000000003", ["gpu-4"])
    assert plugin.client.prepare([other])[other.uid].error == ""
    _unprepare_ok(plugin, [holder, rogue, other])


def test_concurrent_claims_for_one_gpu_get_it_once(plugin: PluginProcess) -> None:
    refs = [
        _claim(plugin, f"racer-{n}", f"a2000000-0000-4000-8000-00000000000{n}", ["gpu-3"])
        for n in range(4)
    ]
    answers: dict[str, PrepareResult] = {}

    def prepare(ref: ClaimRef) -> None:
        answers.update(plugin.client.prepare([ref]))

    threads = [threading.Thread(target=prepare, args=(ref,)) for ref in refs]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    winners = [uid for uid, answer in answers.items() if not answer.error]
    assert len(answers) == 4
    assert len(winners) == 1
    assert plugin.cdi_files() == [f"k8s.gpu.nvidia.com-claim_{winners[0]}.yaml"]
    for uid, answer in answers.items():
        if uid != winners[0]:
            assert "device 'gpu-3' is already prepared for claim" in answer.error
    _unprepare_ok(plugin, refs)


def test_concurrent_claims_for_different_gpus_all_recorded(plugin: PluginProcess) -> None:
    refs = [
        _claim(plugin, f"parallel-{n}", f"a3000000-0000-4000-8000-00000000000{n}", [f"gpu-{n}"])
        for n in range(4)
    ]
    answers: dict[str, PrepareResult] = {}

    def prepare(ref: ClaimRef) -> None:
        answers.update(plugin.client.prepare([ref]))

    threads = [threading.Thread(target=prepare, args=(ref,)) for ref in refs]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert {uid: a.error for uid, a in answers.items()} == {ref.uid: "" for ref in refs}
    checkpoint = plugin.checkpoint()
    assert checkpoint is not None
    assert set(checkpoint.claims) == {ref.uid for ref in refs}
    assert len(plugin.cdi_files()) == 4
    _unprepare_ok(plugin, refs)


@pytest.mark.parametrize(
    ("result", "expected"),
    [
        (
            {"request": "gpu", "device": "gpu-99"},
            "ResourceClaim default/wrong-device: status.allocation.devices.results[0] names "
            "device 'gpu-99', which this node does not publish",
        ),
        (
            {"request": "gpu", "device": "gpu-1", "pool": "other-node"},
            "ResourceClaim default/wrong-device: status.allocation.devices.results[0] is from "
            "pool 'other-node', but this node publishes pool 'sim-node'",
        ),
    ],
    ids=["unknown-device", "other-pool"],
)
def test_device_this_node_does_not_publish_is_an_error(
    plugin: PluginProcess, result: dict[str, str], expected: str
) -> None:
    uid = "a4000000-0000-4000-8000-000000000001"
    plugin.store_claim(make_allocated_claim("wrong-device", uid=uid, results=[result]))
    ref = ClaimRef("default", uid, "wrong-device")

    answer = plugin.client.prepare([ref])[uid]

    assert answer.devices == ()
    assert answer.error.startswith(expected)
    plugin.cluster.delete_resource_claim("default", "wrong-device")
    # the autouse fixture checks that nothing was written


@pytest.mark.parametrize(
    ("parameters", "expected"),
    [
        (
            {
                "apiVersion": "resource.nvidia.com/v1beta1",
                "kind": "GpuConfig",
                "sharing": {
                    "strategy": "MPS",
                    "mpsConfig": {"defaultActiveThreadPercentage": 0},
                },
            },
            "request 'gpu' on gpu-2: defaultActiveThreadPercentage must be 1..100, not 0",
        ),
        (
            {"apiVersion": "resource.nvidia.com/v1beta1", "kind": "GpuConfig", "sharingg": {}},
            "sharingg: Extra inputs are not permitted",
        ),
    ],
)
def test_opaque_config_problems_are_per_claim_errors(
    plugin: PluginProcess, parameters: dict[str, Any], expected: str
) -> None:
    uid = "a5000000-0000-4000-8000-000000000001"
    claim = make_allocated_claim(
        "configured", uid=uid, results=[("gpu", "gpu-2")], configs=[make_opaque_config(parameters)]
    )
    plugin.store_claim(claim)
    ref = ClaimRef("default", uid, "configured")

    answer = plugin.client.prepare([ref])[uid]

    assert answer.devices == ()
    assert expected in answer.error
    assert "ResourceClaim default/configured" in answer.error
    plugin.cluster.delete_resource_claim("default", "configured")


# --------------------------------------------------------------------------- shutdown


def test_sigterm_removes_both_sockets_and_exits_zero() -> None:
    with PluginProcess() as own:
        assert own.registration_socket.is_socket()
        assert own.dra_socket.is_socket()

        assert own.terminate() == 0

        assert not own.registration_socket.exists()
        assert not own.dra_socket.exists()
        assert "received SIGTERM (signal 15): shutting down" in own.log_tail()


def test_a_sigterm_the_kernel_hands_to_a_worker_thread_still_stops_the_plugin() -> None:
    # The kernel may deliver the kubelet's SIGTERM to any thread of the plugin; CPython runs
    # Python handlers only in the main thread. Deliver it to a worker thread on purpose.
    tgkill = ctypes.CDLL(None, use_errno=True).tgkill
    with PluginProcess(mps_host=False) as own:
        pid = own.pid
        workers = sorted(int(tid) for tid in os.listdir(f"/proc/{pid}/task") if int(tid) != pid)
        assert workers, "the plugin runs gRPC and worker threads"
        assert tgkill(pid, workers[-1], signal.SIGTERM) == 0, os.strerror(ctypes.get_errno())

        assert own.wait_exit(timeout=10) == 0, own.log_tail()
        assert not own.dra_socket.exists()
        assert "received SIGTERM (signal 15): shutting down" in own.log_tail()


def test_sigquit_logs_every_threads_stack_and_the_plugin_keeps_serving() -> None:
    with PluginProcess(mps_host=False) as own:
        os.kill(own.pid, signal.SIGQUIT)
        wait_until(
            # kubelet_plugin/main.py's _serve: the main thread's wait (gRPC's threads have a
            # `_serve` of their own, and the dump is written thread by thread)
            lambda: 'kubelet_plugin/main.py", line' in own.log_tail(20_000),
            "the main thread's stack",
            details=lambda: (
                f"exit code {own.process and own.process.poll()}, log:\n" + own.log_tail()
            ),
        )

        log = own.log_tail(20_000)
        assert "(most recent call first)" in log
        assert re.search(r'kubelet_plugin/main\.py", line \d+ in _serve', log)  # the main wait
        assert own.client.prepare([]) == {}  # still serving
        assert own.terminate() == 0


def test_plugin_that_cannot_start_says_why() -> None:
    with pytest.raises(PluginError) as failed, PluginProcess(shape="no-such-shape"):
        pass

    message = str(failed.value)
    assert message.startswith("the plugin exited with 2 before its registration socket appeared")
    assert "unknown simulated node shape 'no-such-shape'" in message


def test_prepares_the_claim_the_scheduler_makes_for_nvidia_com_gpu(plugin: PluginProcess) -> None:
    """KEP-5004: a pod asking `nvidia.com/gpu: 2` gets a claim named
    `<pod>-extended-resources-xxxxx` with request `container-0-request-0`,
    allocated from this node's published slice; the kubelet prepares it like
    any other claim."""
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"namespace": "default", "name": "legacy", "uid": "pod-uid-legacy"},
        "spec": {
            "containers": [
                {"name": "main", "image": "cuda", "resources": {"limits": {"nvidia.com/gpu": 2}}}
            ]
        },
    }
    classes = default_device_classes()
    made = extended_resource_claim(pod, class_mapping(classes), taken={})
    assert made is not None
    claim = made.claim
    key = f"default/{claim['metadata']['name']}"
    published = plugin.cluster.list_resource_slices(node_name=plugin.node_name)
    simulation = Simulation(
        slices=published,
        classes=classes,
        nodes=[Node(plugin.node_name, {"kubernetes.io/hostname": plugin.node_name})],
        claims={key: claim},
        features=Features.for_release("1.37"),
    )
    assert simulation.place(WorkItem("default", claim["metadata"]["name"], None)).placed
    allocated = simulation.claims[key]
    allocated["status"]["reservedFor"] = [
        {"resource": "pods", "name": "legacy", "uid": "pod-uid-legacy"}
    ]
    plugin.store_claim(allocated)
    uid = claim["metadata"]["uid"]
    ref = ClaimRef("default", uid, claim["metadata"]["name"])

    result = plugin.client.prepare([ref])[uid]

    assert result.error == ""
    assert [(d.device_name, d.request_names) for d in result.devices] == [
        ("gpu-0", ("container-0-request-0",)),
        ("gpu-1", ("container-0-request-0",)),
    ]
    assert plugin.cdi_files() == [f"k8s.gpu.nvidia.com-claim_{uid}.yaml"]
    _unprepare_ok(plugin, [ref])
