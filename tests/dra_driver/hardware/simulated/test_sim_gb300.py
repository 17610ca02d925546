"""A simulated `gb300-node` answers what a real 4x GB300 node printed.

The facts are those of `nvidia-smi -q -x` on a GB300 compute tray (NVIDIA/k8s-test-infra,
tests/e2e/go/assertions/nvidiasmi/testdata/hardware/qx-gb300.xml): "NVIDIA GB300", PCI device
0x31C2, 284208 MiB, Blackwell, addressing mode ATS, driver 580.173.02 / CUDA 13.0, GPUs at
0008:06:00.0, 0009:06:00.0, 0018:06:00.0 and 0019:06:00.0, MIG mode "Disabled", fabric
Completed / Success / clique 32766 / Healthy. Compute capability 10.3 is NVIDIA's CUDA GPUs
page. The MIG profiles (gpu-mig-nvml.md §2.11) are names only: none is offered, and asking
for one says why.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from dra_driver.cli import main
from dra_driver.compute_domain.devices import compute_domain_devices
from dra_driver.errors import ConfigError, NvmlError
from dra_driver.hardware.nvml import codes, fabric
from dra_driver.hardware.nvml.fabric import FabricCondition, classify
from dra_driver.hardware.nvml.interface import Nvml, Placement
from dra_driver.hardware.nvml.real import RealNvml
from dra_driver.hardware.simulated.hardware import SimHardware
from dra_driver.hardware.simulated.nvml import SimNvml
from dra_driver.hardware.simulated.shapes import NVL72_RACK, load_shape
from dra_driver.node.devices import build_devices
from dra_driver.node.inventory import discover
from tests.fakes import fake_pynvml, fake_sysfs

BUS_IDS = ["0008:06:00.0", "0009:06:00.0", "0018:06:00.0", "0019:06:00.0"]
CLIQUE = "00000001-0000-0000-0000-000000000001.32766"
GB300_PROFILES = ("1g.35gb", "1g.70gb", "2g.70gb", "3g.139gb", "4g.139gb", "7g.278gb")


def _sim(tmp: Path) -> Nvml:
    return SimNvml(SimHardware(load_shape("gb300-node"), node_name="gb300-0"))


def _pynvml(tmp: Path) -> Nvml:
    hw = SimHardware(load_shape("gb300-node"), node_name="gb300-0")
    return RealNvml(fake_pynvml(hw), sysfs_root=fake_sysfs(hw, tmp / "sys"))


BACKENDS = pytest.mark.parametrize("backend", [_sim, _pynvml], ids=["sim", "pynvml"])


@BACKENDS
def test_gb300_node_publishes_four_gpus_as_the_capture_reports(
    backend: Callable[[Path], Nvml], tmp_path: Path
) -> None:
    nvml = backend(tmp_path)
    system = nvml.system()
    assert (system.driver_version, system.cuda_version) == ("580.173.02", "13.0")
    gpus = nvml.gpus()
    assert [g.pci_bus_id for g in gpus] == BUS_IDS
    for gpu in gpus:
        assert gpu.product_name == "NVIDIA GB300"
        assert gpu.pci_device_id == 0x31C210DE
        assert gpu.memory_bytes == 284208 * 2**20
        assert gpu.architecture == "Blackwell"
        assert gpu.cuda_compute_capability == (10, 3)
        assert gpu.addressing_mode == "ATS"
        assert (gpu.mig_capable, gpu.mig_enabled) == (True, False)
        assert gpu.fabric is not None
        assert gpu.fabric.clique == CLIQUE
        assert (gpu.fabric.state, gpu.fabric.status) == (fabric.STATE_COMPLETED, codes.SUCCESS)
        assert gpu.fabric.health_summary == fabric.HEALTH_HEALTHY
        assert classify(gpu.fabric) is FabricCondition.IN_CLIQUE

    devices = build_devices(discover(nvml), dynamic_mig=True)
    assert [d.name for d in devices] == ["gpu-0", "gpu-1", "gpu-2", "gpu-3"]
    for device, bus_id in zip(devices, BUS_IDS, strict=True):
        attributes = device.to_api()["attributes"]
        assert attributes["productName"] == {"string": "NVIDIA GB300"}
        assert attributes["addressingMode"] == {"string": "ATS"}
        assert attributes["cliqueID"] == {"string": CLIQUE}
        assert attributes["cudaComputeCapability"] == {"version": "10.3.0"}
        assert attributes["migCapable"] == {"bool": True}
        assert attributes["resource.kubernetes.io/pciBusID"] == {"string": bus_id}
        assert device.capacity["memory"] == 284208 * 2**20


def test_every_gb300_node_is_in_the_captured_clique_not_the_gb200_racks() -> None:
    for node in ("gb300-0", "gb300-1"):
        nvml = SimNvml(SimHardware(load_shape("gb300-node"), node_name=node))
        assert {gpu.fabric.clique for gpu in nvml.gpus() if gpu.fabric} == {CLIQUE}
    assert NVL72_RACK.clique != CLIQUE


def test_the_compute_domain_driver_publishes_its_channel_on_a_gb300_node() -> None:
    published = compute_domain_devices(discover(_sim(Path())))
    assert published.clique == CLIQUE
    assert [(d["name"], d["attributes"]["cliqueID"]) for d in published.devices] == [
        ("channel-0", {"string": CLIQUE}),
        ("daemon-0", {"string": CLIQUE}),
    ]


def test_mig_profiles_of_a_gb300_are_refused_with_the_reason() -> None:
    """MIG mode switches on (Blackwell), but no GPU-instance profile is offered: §2.11 has
    names and counts only, so creating one fails and names them as unverified."""
    hw = SimHardware(load_shape("gb300-node"))
    nvml = SimNvml(hw)
    uuid = nvml.gpus()[0].uuid
    assert nvml.set_mig_mode(uuid, True) == codes.SUCCESS
    assert hw.mig_mode(0) == (1, 1)
    assert nvml.gpu_instance_profiles(uuid) == []
    with pytest.raises(NvmlError) as err:
        hw.create_gpu_instance(0, 19, Placement(0, 1))
    assert err.value.code == codes.ERROR_INVALID_ARGUMENT
    assert "no GPU instance profile id 19 on GB300" in str(err.value)
    assert ", ".join(GB300_PROFILES) + " exist on real hardware but are not simulated" in str(
        err.value
    )


def test_a_shape_file_cannot_make_a_gb300_mig_device(tmp_path: Path) -> None:
    path = tmp_path / "gb300-mig.yaml"
    path.write_text("gpus:\n  - model: NVIDIA GB300\n    migDevices: [{profile: 1g.35gb}]\n")
    with pytest.raises(ConfigError) as err:
        load_shape(str(path))
    message = str(err.value)
    assert "gpus[0].migDevices[0].profile: GB300 has no MIG profile '1g.35gb'" in message
    assert "no MIG profile is simulated" in message
    assert "1g.35gb, 1g.70gb, 2g.70gb" in message


def test_sim_fabric_moves_a_running_gb300_node(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`dra-gpu sim fabric` changes a gb300-node's answer as it does a gb200-node's: the
    capture's cluster is kept, the clique and state move; a topology file places the node."""
    state = tmp_path / "sim-state.json"
    SimHardware(load_shape("gb300-node"), node_name="gb300-0", state_path=state)
    assert main(["sim", "fabric", f"--state-file={state}", "--state=in_progress"]) == 0
    assert main(["sim", "fabric", f"--state-file={state}", "--state=completed", "--clique=7"]) == 0
    gpus = SimNvml(SimHardware(state_path=state)).gpus()
    assert {g.fabric.clique for g in gpus if g.fabric} == {"00000001-0000-0000-0000-000000000001.7"}
    assert all(g.fabric and classify(g.fabric) is FabricCondition.IN_CLIQUE for g in gpus)
    topology = tmp_path / "topology.yaml"
    topology.write_text(
        "domains:\n  - name: gb300-rack\n    uuid: 00000001-0000-0000-0000-000000000001\n"
        "    cliques:\n      - id: 32766\n        nodes: [gb300-0]\n"
    )
    args = ["sim", "fabric", f"--state-file={state}", f"--topology={topology}", "--node=gb300-0"]
    assert main(args) == 0
    gpus = SimNvml(SimHardware(state_path=state)).gpus()
    assert {g.fabric.clique for g in gpus if g.fabric} == {CLIQUE}
    assert "GPU 3:" in capsys.readouterr().out


def test_simulate_takes_gb300_nodes_and_their_fabric_options(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`dra-gpu simulate --nodes gb300-node:...`: a pod asking for a GB300 lands on one; the
    fabric options apply to the shape's captured fabric."""
    path = tmp_path / "pod.yaml"
    path.write_text(
        "apiVersion: resource.k8s.io/v1\nkind: ResourceClaim\nmetadata:\n  name: gb300\n"
        "spec:\n  devices:\n    requests:\n    - name: gpu\n      exactly:\n"
        "        deviceClassName: gpu.nvidia.com\n        selectors:\n        - cel:\n"
        "            expression: device.attributes['gpu.nvidia.com'].productName == "
        "'NVIDIA GB300'\n"
        "---\napiVersion: v1\nkind: Pod\nmetadata:\n  name: p\nspec:\n  containers:\n"
        "  - name: c\n    image: x\n    resources:\n      claims:\n      - name: g\n"
        "  resourceClaims:\n  - name: g\n    resourceClaimName: gb300\n"
    )
    nodes = "dgx-h100=1,gb300-node:clique=1=1"
    assert main(["simulate", "--nodes", nodes, "-f", str(path), "-o", "yaml"]) == 0
    (placement,) = yaml.safe_load(capsys.readouterr().out)
    assert placement["placed"] is True
    assert placement["node"].startswith("gb300-node")
