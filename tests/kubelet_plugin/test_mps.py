"""MPS end to end: the real plugin over its socket, starting real (simulated) control daemons.

What a user and an admin would see: two claims that share a GPU through MPS
each get their own limits in their CDI spec and talk to one daemon, whose
defaults are the larger of the two; the daemon goes away with the last
claim; MPS works on a dynamic MIG device (the daemon sees the MIG UUID); a
claim whose limits cannot be honoured is refused with a message naming it;
and nothing (CDI file, checkpoint entry, daemon, MIG instance) is left once
every claim is unprepared. `PluginProcess.close` kills any daemon a failing
test leaves behind.
"""

from __future__ import annotations

import re
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml

from dra_driver import cli
from dra_driver.claims.mps import DaemonPaths
from dra_driver.hardware.simulated.mps_control import read_state
from kubelet_plugin.mps_daemons import process_start_ticks
from kubelet_plugin.service import ClaimRef
from tests.fakes import PluginProcess, make_allocated_claim, make_opaque_config, plugin_sim

pytestmark = pytest.mark.slow

SHARE_A = ClaimRef("default", "3b500000-0000-4000-8000-000000000001", "share-a")
SHARE_B = ClaimRef("default", "3b500000-0000-4000-8000-000000000002", "share-b")
MIG_CLAIM = ClaimRef("default", "3b500000-0000-4000-8000-000000000003", "mps-mig")
MIG_DEVICE = "gpu-1-mig-1g10gb-19-0"


def mps_config(kind: str = "GpuConfig", **mps: Any) -> dict[str, Any]:
    return make_opaque_config(
        {
            "apiVersion": "resource.nvidia.com/v1beta1",
            "kind": kind,
            "sharing": {"strategy": "MPS", "mpsConfig": mps},
        }
    )


def store_share(
    plugin: PluginProcess,
    ref: ClaimRef,
    device: str,
    *,
    memory: str | None = None,
    configs: Sequence[Mapping[str, Any]] = (),
    share: int = 1,
) -> None:
    result: dict[str, Any] = {
        "request": "gpu",
        "device": device,
        "shareID": f"5fa1e000-0000-4000-8000-00000000000{share}",
    }
    if memory is not None:
        result["consumedCapacity"] = {"memory": memory}
    plugin.store_claim(
        make_allocated_claim(ref.name, uid=ref.uid, results=[result], configs=configs)
    )


def container_edits(plugin: PluginProcess, ref: ClaimRef) -> dict[str, Any]:
    """The edits of the claim's one device in its CDI spec."""
    spec = yaml.safe_load(plugin.cdi_spec_path(ref.uid).read_text())
    (device,) = spec["devices"]
    edits: dict[str, Any] = device["containerEdits"]
    return edits


def daemon_state(plugin: PluginProcess, uuid: str) -> dict[str, Any]:
    state = read_state(DaemonPaths.of(plugin.mps_root, uuid).log)
    assert state is not None, f"no simulated daemon state for {uuid}"
    return state


def gpu_uuid(plugin: PluginProcess, index: int) -> str:
    return plugin_sim(plugin).gpu(index).uuid


@pytest.fixture
def plugin() -> Iterator[PluginProcess]:
    with PluginProcess(prefix="dra-mps-") as process:
        yield process


def node_status(plugin: PluginProcess, capsys: pytest.CaptureFixture[str]) -> list[dict[str, Any]]:
    """What `dra-gpu status -o yaml` shows the admin for the plugin's node."""
    capsys.readouterr()
    assert (
        cli.main(
            [
                "status",
                f"--nvml=sim:{plugin.shape}",
                f"--sim-state={plugin.sim_state}",
                f"--node-name={plugin.node_name}",
                f"--kubelet-root={plugin.kubelet_root}",
                "-o",
                "yaml",
            ]
        )
        == 0
    )
    shown = yaml.safe_load(capsys.readouterr().out)
    assert isinstance(shown["gpus"], list)
    return shown["gpus"]


def assert_nothing_left(plugin: PluginProcess) -> None:
    checkpoint = plugin.checkpoint()
    assert checkpoint is None or dict(checkpoint.claims) == {}
    assert plugin.cdi_files() == []
    assert plugin.mps_daemons() == {}
    assert plugin.mps_files() == []


def test_two_claims_share_one_gpu_with_their_own_limits_and_one_daemon(
    plugin: PluginProcess, capsys: pytest.CaptureFixture[str]
) -> None:
    store_share(
        plugin,
        SHARE_A,
        "gpu-0",
        memory="20Gi",
        configs=[mps_config(defaultActiveThreadPercentage=30)],
    )
    store_share(
        plugin,
        SHARE_B,
        "gpu-0",
        memory="40Gi",
        configs=[mps_config(defaultActiveThreadPercentage=50)],
        share=2,
    )
    uuid = gpu_uuid(plugin, 0)
    pipe = DaemonPaths.of(plugin.mps_root, uuid).pipe

    assert plugin.client.prepare([SHARE_A])[SHARE_A.uid].error == ""
    daemons = plugin.mps_daemons()
    assert list(daemons) == [uuid]
    assert plugin.client.prepare([SHARE_B])[SHARE_B.uid].error == ""
    assert plugin.mps_daemons() == daemons  # the same process serves both

    for ref, percentage, memory in ((SHARE_A, 30, 20480), (SHARE_B, 50, 40960)):
        edits = container_edits(plugin, ref)
        assert "CUDA_MPS_PIPE_DIRECTORY=/tmp/nvidia-mps" in edits["env"]
        assert f"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE={percentage}" in edits["env"]
        assert f"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0={memory}M" in edits["env"]
        mounts = {m["containerPath"]: m["hostPath"] for m in edits["mounts"]}
        assert mounts["/tmp/nvidia-mps"] == str(pipe)
        assert Path(mounts["/dev/shm"]).is_dir()

    state = daemon_state(plugin, uuid)
    assert state["visibleDevices"] == uuid
    assert state["multiUser"] is False
    # The daemon's defaults are the most generous claim's: the ceiling.
    assert state["defaultActiveThreadPercentage"] == 50
    assert state["defaultDevicePinnedMemLimits"] == {uuid: "40960M"}

    gpu0 = node_status(plugin, capsys)[0]
    assert gpu0["name"] == "gpu-0"
    assert gpu0["uuid"] == uuid
    assert gpu0["migMode"] == "Disabled"
    assert gpu0["mps"] == {
        "running": True,
        "pid": daemons[uuid],
        "pipeDirectory": str(pipe),
        "clients": ["default/share-a", "default/share-b"],
    }

    assert plugin.client.unprepare([SHARE_B])[SHARE_B.uid].error == ""
    assert plugin.mps_daemons() == daemons  # share-a still uses it
    state = daemon_state(plugin, uuid)
    assert state["defaultActiveThreadPercentage"] == 30  # lowered to what is left
    assert state["defaultDevicePinnedMemLimits"] == {uuid: "20480M"}

    assert plugin.client.unprepare([SHARE_A])[SHARE_A.uid].error == ""
    assert process_start_ticks(daemons[uuid]) is None  # the daemon process is gone
    assert_nothing_left(plugin)
    assert node_status(plugin, capsys)[0]["mps"] is None


def test_a_repeated_prepare_keeps_the_daemon_and_the_answer(plugin: PluginProcess) -> None:
    store_share(plugin, SHARE_A, "gpu-2", configs=[mps_config()])
    first = plugin.client.prepare([SHARE_A])[SHARE_A.uid]
    daemons = plugin.mps_daemons()
    assert plugin.client.prepare([SHARE_A])[SHARE_A.uid] == first
    assert plugin.mps_daemons() == daemons
    # No limits asked for: the client gets only the pipe directory, the daemon the whole GPU.
    env = container_edits(plugin, SHARE_A)["env"]
    assert [e for e in env if e.startswith("CUDA_MPS_")] == [
        "CUDA_MPS_PIPE_DIRECTORY=/tmp/nvidia-mps"
    ]
    state = daemon_state(plugin, gpu_uuid(plugin, 2))
    assert state["defaultActiveThreadPercentage"] == 100
    assert plugin.client.unprepare([SHARE_A])[SHARE_A.uid].error == ""
    assert_nothing_left(plugin)


def test_multi_user_mode_must_match_the_running_daemon(plugin: PluginProcess) -> None:
    store_share(plugin, SHARE_A, "gpu-3", configs=[mps_config(multiUser=True)])
    store_share(plugin, SHARE_B, "gpu-3", configs=[mps_config()], share=2)
    assert plugin.client.prepare([SHARE_A])[SHARE_A.uid].error == ""
    assert daemon_state(plugin, gpu_uuid(plugin, 3))["multiUser"] is True
    error = plugin.client.prepare([SHARE_B])[SHARE_B.uid].error
    assert "multi-user mode" in error
    assert "multiUser must match" in error
    assert list(plugin.mps_daemons()) == [gpu_uuid(plugin, 3)]  # share-a's daemon survives
    assert plugin.client.unprepare([SHARE_A, SHARE_B])[SHARE_A.uid].error == ""
    assert_nothing_left(plugin)


def test_mps_on_two_devices_of_one_claim_is_refused(plugin: PluginProcess) -> None:
    plugin.store_claim(
        make_allocated_claim(
            SHARE_A.name,
            uid=SHARE_A.uid,
            results=[("gpu", "gpu-4"), ("gpu", "gpu-5")],
            configs=[mps_config()],
        )
    )
    error = plugin.client.prepare([SHARE_A])[SHARE_A.uid].error
    assert f"ResourceClaim default/{SHARE_A.name}" in error
    assert "MPS on 2 devices (gpu-4, gpu-5)" in error
    assert_nothing_left(plugin)


def test_an_exclusive_claim_is_still_refused_a_device_shared_through_mps(
    plugin: PluginProcess,
) -> None:
    store_share(plugin, SHARE_A, "gpu-6", configs=[mps_config()])
    plugin.store_claim(
        make_allocated_claim(SHARE_B.name, uid=SHARE_B.uid, results=[("g", "gpu-6")])
    )
    assert plugin.client.prepare([SHARE_A])[SHARE_A.uid].error == ""
    refused = plugin.client.prepare([SHARE_B])[SHARE_B.uid].error
    assert "allocated exclusively, but it is being shared by claim" in refused
    assert plugin.client.unprepare([SHARE_A])[SHARE_A.uid].error == ""
    assert_nothing_left(plugin)


def test_mps_on_a_dynamic_mig_device(capsys: pytest.CaptureFixture[str]) -> None:
    with PluginProcess(prefix="dra-mps-mig-", extra_args=["--dynamic-mig"]) as plugin:
        plugin.store_claim(
            make_allocated_claim(
                MIG_CLAIM.name,
                uid=MIG_CLAIM.uid,
                results=[("mig", MIG_DEVICE)],
                configs=[
                    mps_config(
                        "MigDeviceConfig",
                        defaultActiveThreadPercentage=40,
                        defaultPinnedDeviceMemoryLimit="4Gi",
                    )
                ],
                device_class="mig.nvidia.com",
            )
        )
        assert plugin.client.prepare([MIG_CLAIM])[MIG_CLAIM.uid].error == ""
        checkpoint = plugin.checkpoint()
        assert checkpoint is not None
        (device,) = checkpoint.claims[MIG_CLAIM.uid].devices
        assert device.mig is not None
        assert device.mig.uuid is not None
        assert device.mps is not None
        assert device.mps.device_uuid == device.mig.uuid
        assert list(plugin.mps_daemons()) == [device.mig.uuid]
        state = daemon_state(plugin, device.mig.uuid)
        assert state["visibleDevices"] == device.mig.uuid  # CUDA_VISIBLE_DEVICES = MIG UUID
        assert state["defaultActiveThreadPercentage"] == 40
        assert state["defaultDevicePinnedMemLimits"] == {device.mig.uuid: "4096M"}
        env = container_edits(plugin, MIG_CLAIM)["env"]
        assert "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=40" in env
        assert "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=4096M" in env
        gpu1 = node_status(plugin, capsys)[1]
        assert gpu1["migMode"] == "Enabled"
        assert gpu1["mps"] is None  # the MIG device has the daemon, not its GPU
        (mig,) = gpu1["migDevices"]
        assert mig["uuid"] == device.mig.uuid
        assert mig["profile"] == "1g.10gb"
        assert mig["mps"]["running"] is True
        assert mig["mps"]["clients"] == ["default/mps-mig"]

        assert plugin.client.unprepare([MIG_CLAIM])[MIG_CLAIM.uid].error == ""
        assert_nothing_left(plugin)
        snapshot = plugin_sim(plugin).snapshot()
        assert list(snapshot.gpu_instances) == []  # the MIG instance is gone too


def test_consumable_shares_become_enforced_mps_limits() -> None:
    """With `--consumable-shares=4`, 1 and 3 shares are 25 % and 75 % of the SMs.

    No mpsConfig limits are set: the limits come from what each share
    consumed (`dra_driver.claims.mps.claim_limits`), its `memory` too.
    """
    with PluginProcess(prefix="dra-mps-shares-", extra_args=["--consumable-shares=4"]) as plugin:
        for ref, share, consumed in (
            (SHARE_A, 1, {"shares": "1", "memory": "20Gi"}),
            (SHARE_B, 2, {"shares": "3"}),
        ):
            result = {
                "request": "gpu",
                "device": "gpu-0",
                "shareID": f"5fa1e000-0000-4000-8000-00000000000{share}",
                "consumedCapacity": consumed,
            }
            plugin.store_claim(
                make_allocated_claim(
                    ref.name, uid=ref.uid, results=[result], configs=[mps_config()]
                )
            )
        uuid = gpu_uuid(plugin, 0)

        assert plugin.client.prepare([SHARE_A])[SHARE_A.uid].error == ""
        daemons = plugin.mps_daemons()
        assert list(daemons) == [uuid]
        assert plugin.client.prepare([SHARE_B])[SHARE_B.uid].error == ""
        assert plugin.mps_daemons() == daemons  # one daemon serves both shares

        env_a = container_edits(plugin, SHARE_A)["env"]
        assert "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=25" in env_a
        assert "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=20480M" in env_a  # consumed 20Gi
        env_b = container_edits(plugin, SHARE_B)["env"]
        assert "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=75" in env_b
        assert not [e for e in env_b if e.startswith("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT")]
        # The daemon's ceiling is the larger share; share-b has no memory limit.
        assert daemon_state(plugin, uuid)["defaultActiveThreadPercentage"] == 75

        assert plugin.client.unprepare([SHARE_A])[SHARE_A.uid].error == ""
        assert plugin.mps_daemons() == daemons
        assert plugin.client.unprepare([SHARE_B])[SHARE_B.uid].error == ""
        assert process_start_ticks(daemons[uuid]) is None
        assert_nothing_left(plugin)


def test_metrics_count_the_running_mps_daemons() -> None:
    with PluginProcess(prefix="dra-mps-", extra_args=["--metrics-address=127.0.0.1:0"]) as plugin:
        (port,) = re.findall(
            r"serving metrics on http://127\.0\.0\.1:(\d+)/metrics", plugin.log_tail(20000)
        )

        def daemons_gauge() -> str:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics") as answer:
                text: str = answer.read().decode()
            (value,) = re.findall(r"^dra_gpu_mps_daemons (\S+)$", text, re.MULTILINE)
            return value

        assert daemons_gauge() == "0.0"
        store_share(plugin, SHARE_A, "gpu-0", configs=[mps_config()])
        assert not plugin.client.prepare([SHARE_A])[SHARE_A.uid].error
        assert daemons_gauge() == "1.0"
        plugin.client.unprepare([SHARE_A])
        assert daemons_gauge() == "0.0"
        assert_nothing_left(plugin)
