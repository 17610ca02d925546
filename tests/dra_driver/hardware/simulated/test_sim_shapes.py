"""Built-in and YAML node shapes, and the errors a bad shape file gives."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from dra_driver.errors import ConfigError
from dra_driver.hardware.simulated.hardware import SimHardware
from dra_driver.hardware.simulated.shapes import BUILTIN_SHAPES, load_shape

BUS_ID = re.compile(r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.0$")

EXPECTED = {
    # shape: (model key, count, MIG at boot, driver, CUDA)
    "dgx-a100-40gb": ("A100-SXM4-40GB", 8, True, "550.54.15", 12040),
    "dgx-a100-80gb": ("A100-SXM4-80GB", 8, False, "550.54.15", 12040),
    "dgx-h100": ("H100-SXM5-80GB", 8, False, "570.172.08", 12080),
    "dgx-h200": ("H200", 8, False, "570.172.08", 12080),
    "dgx-b200": ("B200", 8, False, "570.172.08", 12080),
    "gb200-node": ("GB200", 4, False, "580.95.05", 13000),
    "gb300-node": ("GB300", 4, False, "580.173.02", 13000),
    "gh200-node": ("GH200-96GB", 2, False, "550.127.05", 12040),
    "a30-node": ("A30", 4, True, "535.183.01", 12020),
    "l4-node": ("L4", 4, False, "570.172.08", 12080),
    "h100-pcie-node": ("H100-PCIE", 2, False, "570.172.08", 12080),
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_builtin_shapes(name):
    key, count, mig, driver, cuda = EXPECTED[name]
    shape = load_shape(name)
    assert shape.model_keys == (key,) * count
    assert all(g.mig_enabled is mig for g in shape.gpus)
    assert (shape.driver_version, shape.cuda_driver_version) == (driver, cuda)
    buses = [g.pci_bus_id for g in shape.gpus]
    assert all(BUS_ID.match(b) for b in buses)
    assert len(set(buses)) == count
    assert all(g.pcie_root.startswith(f"pci{g.pci_bus_id[:4]}:") for g in shape.gpus)
    assert {g.numa_node for g in shape.gpus} <= {0, 1}


def test_builtin_shape_names_are_the_documented_ones():
    assert set(BUILTIN_SHAPES) == set(EXPECTED)


def test_dgx_shapes_pair_gpus_behind_pcie_roots_and_split_numa():
    shape = load_shape("dgx-h100")
    roots = [g.pcie_root for g in shape.gpus]
    assert roots[0] == roots[1] != roots[2]
    assert [g.numa_node for g in shape.gpus] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert shape.gpus[0].pci_bus_id == "0000:1b:00.0"


def test_gb300_node_has_its_gpus_where_the_real_node_has_them() -> None:
    """qx-gb300.xml (NVIDIA/k8s-test-infra): a PCI domain per GPU, each at bus 06."""
    shape = load_shape("gb300-node")
    assert [g.pci_bus_id for g in shape.gpus] == [
        "0008:06:00.0",
        "0009:06:00.0",
        "0018:06:00.0",
        "0019:06:00.0",
    ]
    assert [g.pcie_root for g in shape.gpus] == [
        "pci0008:00",
        "pci0009:00",
        "pci0018:00",
        "pci0019:00",
    ]


def test_yaml_shape(tmp_path: Path):
    path = tmp_path / "mixed.yaml"
    path.write_text(
        "driverVersion: '550.54.15'\n"
        "cudaDriverVersion: 12040\n"
        "gpus:\n"
        "  - model: A100-SXM4-40GB\n"
        "    migEnabled: true\n"
        "    count: 2\n"
        "  - model: NVIDIA L4\n"
    )
    shape = load_shape(str(path))
    assert shape.model_keys == ("A100-SXM4-40GB", "A100-SXM4-40GB", "L4")
    assert [g.mig_enabled for g in shape.gpus] == [True, True, False]
    assert (shape.driver_version, shape.cuda_driver_version) == ("550.54.15", 12040)
    assert shape.name == str(path)

    hw = SimHardware(shape)
    assert hw.mig_mode(0) == (1, 1)
    assert hw.gpu(2).model.key == "L4"
    assert hw.driver_version() == "550.54.15"


def test_yaml_shape_defaults_to_a_r570_driver_and_mig_off(tmp_path: Path):
    path = tmp_path / "one.yml"
    path.write_text("gpus:\n  - model: h100-sxm5-80gb\n")
    shape = load_shape(str(path))
    assert (shape.driver_version, shape.cuda_driver_version) == ("570.172.08", 12080)
    assert shape.gpus[0].mig_enabled is False


def test_yaml_shape_with_admin_made_mig_devices_boots_with_them(tmp_path: Path):
    path = tmp_path / "balanced.yaml"
    path.write_text(
        _a100(
            "{profile: 3g.20gb, placement: 4}",
            "{profile: 2g.10gb, placement: 0}",
            "{profile: 1g.5gb, placement: 2}",
            "{profile: 1g.5gb, placement: 3}",
        ).replace("model: A100-SXM4-40GB", "model: A100-SXM4-40GB\n    count: 2")
    )
    shape = load_shape(str(path))
    assert all(g.mig_enabled for g in shape.gpus)  # implied by migDevices

    hw = SimHardware(shape)
    for gpu in (0, 1):
        gis = hw.gpu_instances(gpu)
        # GI ids as NVML hands them out: 4-slot at 4 -> 2, 2-slot at 0 -> 3, 1-slot at 2, 3 -> 9, 10
        assert [(gi.id, gi.profile_id, gi.placement.start, gi.placement.size) for gi in gis] == [
            (2, 9, 4, 4),
            (3, 14, 0, 2),
            (9, 19, 2, 1),
            (10, 19, 3, 1),
        ]
        names = sorted(ci.profile.name for gi in gis for ci in hw.compute_instances(gpu, gi.id))
        assert names == ["1g.5gb", "1g.5gb", "2g.10gb", "3g.20gb"]
        assert hw.max_mig_devices(gpu) == 7
        assert hw.gi_remaining_capacity(gpu, 19) == 0  # every memory slice is taken


def test_hopper_admin_made_two_slice_1g_uses_ci_profile_7(tmp_path: Path):
    """`nvidia-smi mig -cgi 15 -C` on an H100 makes CI profile 7 (26 SMs), not 0 (§2.4)."""
    path = tmp_path / "h100.yaml"
    path.write_text(
        "gpus:\n  - model: H100-SXM5-80GB\n    migDevices:\n"
        "      - {profile: 1g.20gb, placement: 6}\n"
    )
    hw = SimHardware(load_shape(str(path)))
    (gi,) = hw.gpu_instances(0)
    (ci,) = hw.compute_instances(0, gi.id)
    assert (ci.profile.id, ci.profile.multiprocessors) == (7, 26)


def _a100(*devices: str) -> str:
    lines = "".join(f"      - {device}\n" for device in devices)
    return f"gpus:\n  - model: A100-SXM4-40GB\n    migDevices:\n{lines}"


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ("gpus: [\n", "not valid YAML"),
        ("- model: L4\n", "must be a mapping"),
        ("gpus: []\n", "gpus must be a non-empty list"),
        ("gpus:\n  - model: L4\nnodes: 2\n", "unknown field(s) nodes"),
        ("gpus:\n  - model: B300\n", "gpus[0].model: unknown GPU model 'B300'"),
        ("gpus:\n  - L4\n", "gpus[0]: must be a mapping"),
        ("gpus:\n  - model: 7\n", "gpus[0].model"),
        ("gpus:\n  - model: L4\n  - model: L4\n    migEnabled: true\n", "gpus[1].migEnabled"),
        ("gpus:\n  - model: A30\n    migEnabled: 'yes'\n", "gpus[0].migEnabled"),
        ("gpus:\n  - model: A30\n    count: 0\n", "gpus[0].count"),
        ("gpus:\n  - model: A30\n    count: true\n", "gpus[0].count"),
        ("gpus:\n  - model: A30\n    colour: red\n", "gpus[0]: unknown field(s) colour"),
        ("gpus:\n  - model: T4\n    count: 33\n", "at most 32"),
        ("driverVersion: 570\ngpus:\n  - model: T4\n", "driverVersion"),
        ("cudaDriverVersion: 12.8\ngpus:\n  - model: T4\n", "cudaDriverVersion"),
        ("cudaDriverVersion: 12085\ngpus:\n  - model: T4\n", "cudaDriverVersion"),
        ("gpus:\n  - model: L4\n    migDevices: [{profile: 1g.5gb, placement: 0}]\n", "gpus[0]"),
        ("gpus:\n  - model: A30\n    migDevices: {profile: 1g.6gb}\n", "gpus[0].migDevices"),
        (_a100("{profile: 1g.6gb, placement: 0}"), "gpus[0].migDevices[0].profile"),
        (_a100("{profile: 1g.5gb, placement: 7}"), "gpus[0].migDevices[0]: 7 is not a placement"),
        (_a100("{profile: 3g.20gb, placement: 2}"), "placements: 0, 4"),
        (_a100("{profile: 1g.5gb}"), "gpus[0].migDevices[0].placement"),
        (_a100("{profile: 1g.5gb, placement: 0, ci: 1}"), "unknown field(s) ci"),
        (
            _a100("{profile: 3g.20gb, placement: 4}", "{profile: 2g.10gb, placement: 4}"),
            "gpus[0].migDevices[1]: placement 4:2 overlaps migDevices[0] at 4:4",
        ),
        (
            _a100("{profile: 1g.5gb+me, placement: 0}", "{profile: 1g.5gb+me, placement: 1}"),
            "migDevices[1]: profile 1g.5gb+me already has its 1 instance(s)",
        ),
        (
            _a100("{profile: 1g.5gb, placement: 0}") + "    migEnabled: false\n",
            "gpus[0].migEnabled: false, but migDevices need MIG mode on",
        ),
        (
            "gpus:\n  - model: B200\n    migDevices: [{profile: 3g.90gb, placement: 0}]\n",
            "3g.90gb, 4g.90gb, 7g.180gb exist on real hardware but are not simulated",
        ),
    ],
)
def test_bad_yaml_shapes_name_the_file_and_the_field(tmp_path: Path, text: str, field: str):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as err:
        load_shape(str(path))
    assert str(path) in str(err.value)
    assert field in str(err.value)


def test_a_yaml_syntax_error_is_one_line_with_its_position(tmp_path: Path):
    path = tmp_path / "bad.yaml"
    path.write_text("gpus:\n  - model: L4\n    count: [\n")
    with pytest.raises(ConfigError) as err:
        load_shape(str(path))
    message = str(err.value)
    assert "\n" not in message
    assert f"shape file {path}: not valid YAML: line 4, column 1: " in message


def test_missing_shape_file(tmp_path: Path):
    path = tmp_path / "nope.yaml"
    with pytest.raises(ConfigError, match="cannot read"):
        load_shape(str(path))


def test_unknown_shape_name_lists_the_builtin_ones():
    with pytest.raises(ConfigError) as err:
        load_shape("dgx-b300")
    assert "dgx-h100" in str(err.value)
    assert "YAML" in str(err.value)


def test_gpu_uuids_are_stable_per_node_name_and_index():
    shape = load_shape("l4-node")
    a = [g.uuid for g in SimHardware(shape, node_name="node-a").gpus()]
    again = [g.uuid for g in SimHardware(shape, node_name="node-a").gpus()]
    b = [g.uuid for g in SimHardware(shape, node_name="node-b").gpus()]
    assert a == again
    assert not set(a) & set(b)
    assert len(set(a)) == 4
    assert all(re.match(r"^GPU-[0-9a-f]{8}-[0-9a-f]{4}-5[0-9a-f]{3}-", u) for u in a)


def test_minor_equals_index():
    hw = SimHardware(load_shape("dgx-a100-40gb"))
    assert [(g.index, g.minor) for g in hw.gpus()] == [(i, i) for i in range(8)]
