"""The simulated GPU models report the numbers real hardware reports (gpu-mig-nvml.md)."""

from __future__ import annotations

import pytest

from dra_driver.hardware.nvml import codes, naming
from dra_driver.hardware.nvml.interface import Placement
from dra_driver.hardware.simulated.models import MODELS, find_model

MIG_MODELS = [m for m in MODELS.values() if m.mig_capable]


def _placements(starts: tuple[int, ...], size: int) -> tuple[Placement, ...]:
    return tuple(Placement(s, size) for s in starts)


@pytest.mark.parametrize("model", MIG_MODELS, ids=lambda m: m.key)
def test_every_profile_name_is_the_go_nvlib_name(model):
    for gi in model.gi_profiles:
        assert gi.name == naming.mig_profile_name(gi.enum, gi.memory_mib, model.memory_bytes)
        for ci in model.ci_profiles_for(gi.id):
            expected = naming.mig_profile_name(
                gi.enum, gi.memory_mib, model.memory_bytes, ci_slices=ci.slice_count
            )
            assert ci.name == expected


# §3: name, PCI device id, arch, CC, total MiB, SMs
DEVICE_FACTS = {
    "A30": ("NVIDIA A30", 0x20B7, 7, (8, 0), 24576, 56),
    "A100-SXM4-40GB": ("NVIDIA A100-SXM4-40GB", 0x20B0, 7, (8, 0), 40960, 108),
    "A100-PCIE-40GB": ("NVIDIA A100-PCIE-40GB", 0x20F1, 7, (8, 0), 40960, 108),
    "A100-SXM4-80GB": ("NVIDIA A100-SXM4-80GB", 0x20B2, 7, (8, 0), 81920, 108),
    "A100-PCIE-80GB": ("NVIDIA A100 80GB PCIe", 0x20B5, 7, (8, 0), 81920, 108),
    "H100-SXM5-80GB": ("NVIDIA H100 80GB HBM3", 0x2330, 9, (9, 0), 81559, 132),
    "H100-PCIE": ("NVIDIA H100 PCIe", 0x2331, 9, (9, 0), 81559, 114),
    "H100-NVL": ("NVIDIA H100 NVL", 0x2321, 9, (9, 0), 95830, 132),
    "GH200-96GB": ("NVIDIA GH200 480GB", 0x2342, 9, (9, 0), 97871, 132),
    "H200": ("NVIDIA H200", 0x2335, 9, (9, 0), 143771, 132),
    "B200": ("NVIDIA B200", 0x2901, 10, (10, 0), 183359, 148),
    "GB200": ("NVIDIA GB200", 0x2941, 10, (10, 0), 189471, None),  # SMs never seen: None
    # qx-gb300.xml capture (NVIDIA/k8s-test-infra); CC 10.3: developer.nvidia.com/cuda-gpus
    "GB300": ("NVIDIA GB300", 0x31C2, 10, (10, 3), 284208, None),
    "RTX-PRO-6000-BW-SERVER": (
        "NVIDIA RTX PRO 6000 Blackwell Server Edition",
        0x2BB5,
        10,
        (12, 0),
        97887,
        188,
    ),
    "L4": ("NVIDIA L4", 0x27B8, 8, (8, 9), 23034, 58),
    "T4": ("Tesla T4", 0x1EB8, 6, (7, 5), 15360, 40),
}


@pytest.mark.parametrize("key", sorted(DEVICE_FACTS))
def test_device_facts_match_nvidia_smi(key):
    name, device, arch, cc, mib, sms = DEVICE_FACTS[key]
    model = MODELS[key]
    assert model.product_name == name
    assert model.pci_device_id == (device << 16) | 0x10DE
    assert model.architecture_id == arch
    assert model.compute_capability == cc
    assert model.memory_mib == mib
    assert model.memory_bytes == mib * 2**20
    assert model.multiprocessors == sms
    assert model.brand_id == 14


def test_only_l4_and_t4_lack_mig():
    assert {m.key for m in MODELS.values() if not m.mig_capable} == {"L4", "T4"}
    assert MODELS["L4"].gi_profiles == ()


SEVEN = (0, 1, 2, 3, 4, 5, 6)
RTX = "RTX-PRO-6000-BW-SERVER"
# (model, profile id) -> (enum, name, inst, MiB, SM, CE, DEC, ENC, JPG, OFA, starts, size)
GI_ROWS = {
    ("A100-SXM4-40GB", 19): (0x0, "1g.5gb", 7, 4864, 14, 1, 0, 0, 0, 0, SEVEN, 1),
    ("A100-SXM4-40GB", 20): (0x7, "1g.5gb+me", 1, 4864, 14, 1, 1, 0, 1, 1, SEVEN, 1),
    ("A100-SXM4-40GB", 15): (0x9, "1g.10gb", 4, 9856, 14, 1, 1, 0, 0, 0, (0, 2, 4, 6), 2),
    ("A100-SXM4-40GB", 9): (0x2, "3g.20gb", 2, 19968, 42, 3, 2, 0, 0, 0, (0, 4), 4),
    ("A100-SXM4-40GB", 0): (0x4, "7g.40gb", 1, 40192, 98, 7, 5, 0, 1, 1, (0,), 8),
    ("A100-SXM4-80GB", 19): (0x0, "1g.10gb", 7, 9728, 14, 1, 0, 0, 0, 0, SEVEN, 1),
    ("A100-SXM4-80GB", 14): (0x1, "2g.20gb", 3, 19968, 28, 2, 1, 0, 0, 0, (0, 2, 4), 2),
    ("A100-SXM4-80GB", 5): (0x3, "4g.40gb", 1, 40192, 56, 4, 2, 0, 0, 0, (0,), 4),
    ("A100-SXM4-80GB", 0): (0x4, "7g.80gb", 1, 80640, 98, 7, 5, 0, 1, 1, (0,), 8),
    ("H100-SXM5-80GB", 19): (0x0, "1g.10gb", 7, 9984, 16, 1, 1, 0, 1, 0, SEVEN, 1),
    ("H100-SXM5-80GB", 15): (0x9, "1g.20gb", 4, 20096, 26, 1, 1, 0, 1, 0, (0, 2, 4, 6), 2),
    ("H100-SXM5-80GB", 14): (0x1, "2g.20gb", 3, 20096, 32, 2, 2, 0, 2, 0, (0, 2, 4), 2),
    ("H100-SXM5-80GB", 9): (0x2, "3g.40gb", 2, 40448, 60, 3, 3, 0, 3, 0, (0, 4), 4),
    ("H100-SXM5-80GB", 5): (0x3, "4g.40gb", 1, 40448, 64, 4, 4, 0, 4, 0, (0,), 4),
    ("H100-SXM5-80GB", 0): (0x4, "7g.80gb", 1, 81152, 132, 8, 7, 0, 7, 1, (0,), 8),
    ("H100-PCIE", 15): (0x9, "1g.20gb", 4, 20096, 14, 1, 1, 0, 1, 0, (0, 2, 4, 6), 2),
    ("H100-PCIE", 14): (0x1, "2g.20gb", 3, 20096, 30, 2, 2, 0, 2, 0, (0, 2, 4), 2),
    ("H100-PCIE", 9): (0x2, "3g.40gb", 2, 40448, 46, 3, 3, 0, 3, 0, (0, 4), 4),
    ("H100-PCIE", 0): (0x4, "7g.80gb", 1, 81152, 114, 8, 7, 0, 7, 1, (0,), 8),
    ("H100-NVL", 20): (0x7, "1g.12gb+me", 1, 11008, 16, 1, 1, 0, 1, 1, SEVEN, 1),
    ("H100-NVL", 15): (0x9, "1g.24gb", 4, 22144, 26, 1, 1, 0, 1, 0, (0, 2, 4, 6), 2),
    ("H100-NVL", 9): (0x2, "3g.47gb", 2, 47488, 60, 3, 3, 0, 3, 0, (0, 4), 4),
    ("H100-NVL", 0): (0x4, "7g.94gb", 1, 95360, 132, 8, 7, 0, 7, 1, (0,), 8),
    ("H200", 19): (0x0, "1g.18gb", 7, 16384, 16, 1, 1, 0, 1, 0, SEVEN, 1),
    ("H200", 15): (0x9, "1g.35gb", 4, 33024, 26, 1, 1, 0, 1, 0, (0, 2, 4, 6), 2),
    ("H200", 5): (0x3, "4g.71gb", 1, 71168, 64, 4, 4, 0, 4, 0, (0,), 4),
    ("H200", 0): (0x4, "7g.141gb", 1, 143104, 132, 8, 7, 0, 7, 1, (0,), 8),
    ("GH200-96GB", 9): (0x2, "3g.48gb", 2, 47616, 60, 3, 3, 0, 3, 0, (0, 4), 4),
    ("B200", 19): (0x0, "1g.23gb", 7, 22528, 18, 2, 1, 0, 1, 0, SEVEN, 1),
    ("B200", 20): (0x7, "1g.23gb+me", 1, 22528, 18, 2, 1, 0, 1, 1, SEVEN, 1),
    ("B200", 15): (0x9, "1g.45gb", 4, 45312, 30, 2, 1, 0, 1, 0, (0, 2, 4, 6), 2),
    ("B200", 14): (0x1, "2g.45gb", 3, 45312, 36, 4, 2, 0, 2, 0, (0, 2, 4), 2),
    ("GB200", 19): (0x0, "1g.23gb", 7, 22528, 18, 2, 1, 0, 1, 0, SEVEN, 1),
    ("GB200", 15): (0x9, "1g.47gb", 4, 46592, 32, 2, 1, 0, 1, 0, (0, 2, 4, 6), 2),
    ("GB200", 14): (0x1, "2g.47gb", 3, 46592, 38, 4, 2, 0, 2, 0, (0, 2, 4), 2),
    ("A30", 14): (0x0, "1g.6gb", 4, 5952, 14, 1, 1, 0, 0, 0, (0, 1, 2, 3), 1),
    ("A30", 21): (0x7, "1g.6gb+me", 1, 5952, 14, 1, 1, 0, 1, 1, (0, 1, 2, 3), 1),
    ("A30", 5): (0x1, "2g.12gb", 2, 11968, 28, 2, 2, 0, 0, 0, (0, 2), 2),
    ("A30", 6): (0x8, "2g.12gb+me", 1, 11968, 28, 2, 2, 0, 1, 1, (0, 2), 2),
    ("A30", 0): (0x3, "4g.24gb", 1, 24000, 56, 4, 4, 0, 1, 1, (0,), 4),
    (RTX, 65): (0xF, "1g.24gb+me.all", 1, 24192, 46, 1, 4, 4, 4, 1, (0, 3, 6, 9), 3),
    (RTX, 66): (0xE, "2g.48gb-me", 2, 48512, 94, 2, 0, 0, 0, 0, (0, 6), 6),
    (RTX, 0): (0x3, "4g.96gb", 1, 97408, 188, 4, 4, 4, 4, 1, (0,), 12),
}  # fmt: skip


@pytest.mark.parametrize("row", sorted(GI_ROWS), ids=lambda r: f"{r[0]}-{r[1]}")
def test_gi_profile_rows_match_the_reference(row):
    key, profile_id = row
    enum, name, inst, mib, sm, ce, dec, enc, jpg, ofa, starts, size = GI_ROWS[row]
    model = MODELS[key]
    gi = model.gi_profile_by_id(profile_id)
    assert gi is not None
    assert model.gi_profile_by_enum(enum) == gi  # enum and id are different numbers
    assert (gi.name, gi.instance_count, gi.memory_mib, gi.multiprocessors) == (name, inst, mib, sm)
    assert (gi.copy_engines, gi.decoders, gi.encoders, gi.jpeg_engines, gi.ofa_engines) == (
        ce,
        dec,
        enc,
        jpg,
        ofa,
    )
    assert gi.placements == _placements(starts, size)


EIGHT_SLOT_IDS = {0x0: 19, 0x7: 20, 0x9: 15, 0x1: 14, 0x2: 9, 0x3: 5, 0x4: 0}


@pytest.mark.parametrize("key", [m.key for m in MIG_MODELS if m.memory_slices == 8])
def test_eight_slot_models_map_enums_to_the_real_profile_ids(key):
    """The go-nvml mock's bug (id == enum) must not be repeated (§2.14)."""
    model = MODELS[key]
    ids = {p.enum: p.id for p in model.gi_profiles}
    if model.unverified_profiles:  # Blackwell: only the rows real output showed
        assert ids == {e: i for e, i in EIGHT_SLOT_IDS.items() if e in (0x0, 0x7, 0x9, 0x1)}
    else:
        assert ids == EIGHT_SLOT_IDS
    assert (model.memory_slices, model.compute_slices) == (8, 7)


def test_unverified_blackwell_profiles_are_named_not_simulated():
    """NVIDIA's user guide names B200's 3g/4g/7g profiles but gives no sizes: not made up."""
    assert MODELS["B200"].unverified_profiles == ("3g.90gb", "4g.90gb", "7g.180gb")
    assert MODELS["GB200"].unverified_profiles == ("3g.93gb", "4g.93gb", "7g.186gb")
    assert MODELS["GB300"].unverified_profiles == (
        "1g.35gb",
        "1g.70gb",
        "2g.70gb",
        "3g.139gb",
        "4g.139gb",
        "7g.278gb",
    )
    for key in ("B200", "GB200", "GB300"):
        names = {p.name for p in MODELS[key].gi_profiles}
        assert not names & set(MODELS[key].unverified_profiles)
    blackwell = ("B200", "GB200", "GB300")
    assert all(not m.unverified_profiles for k, m in MODELS.items() if k not in blackwell)


def test_gb300_is_mig_capable_but_offers_no_profile() -> None:
    """Real `nvidia-smi -q` prints GB300's MIG mode ("Disabled"), but §2.11 gives its profiles'
    names and counts only: none is simulated; at most 7 MIG devices (1g x7), no placement grid."""
    gb300 = MODELS["GB300"]
    assert gb300.mig_capable
    assert gb300.gi_profiles == ()
    assert (gb300.memory_slices, gb300.compute_slices) == (0, 7)
    assert gb300.mig_toggle_supported  # Blackwell: MIG mode applies without a reset
    assert gb300.pci_domain == 0x0008
    assert gb300.addressing_mode == codes.ADDRESSING_MODE_ATS


def test_grids_of_a30_and_rtx_pro():
    assert (MODELS["A30"].memory_slices, MODELS["A30"].compute_slices) == (4, 4)
    rtx = MODELS["RTX-PRO-6000-BW-SERVER"]
    assert (rtx.memory_slices, rtx.compute_slices) == (12, 4)
    assert len(rtx.gi_profiles) == 11


def _cis(key, gi_profile_id):
    return [
        (c.id, c.name, c.instance_count, c.multiprocessors)
        for c in MODELS[key].ci_profiles_for(gi_profile_id)
    ]


def test_ci_profiles_of_a100_80gb_3g_and_4g_as_nvidia_smi_lists_them():
    assert _cis("A100-SXM4-80GB", 9) == [
        (0, "1c.3g.40gb", 3, 14),
        (1, "2c.3g.40gb", 1, 28),
        (2, "3g.40gb", 1, 42),
    ]
    assert _cis("A100-SXM4-80GB", 5) == [
        (0, "1c.4g.40gb", 4, 14),
        (1, "2c.4g.40gb", 2, 28),
        (3, "4g.40gb", 1, 56),
    ]


def test_ci_profiles_of_a30_2g():
    assert _cis("A30", 5) == [(0, "1c.2g.12gb", 2, 14), (1, "2g.12gb", 1, 28)]


def test_seven_slice_gi_offers_1c_2c_3c_4c_7c():
    assert [c.slice_count for c in MODELS["H100-SXM5-80GB"].ci_profiles_for(0)] == [1, 2, 3, 4, 7]
    assert _cis("H100-SXM5-80GB", 0)[-1] == (4, "7g.80gb", 1, 132)


@pytest.mark.parametrize("key", ["H100-SXM5-80GB", "H100-NVL", "H200", "GH200-96GB"])
def test_hopper_1g_two_slice_gi_is_filled_by_ci_profile_7(key):
    model = MODELS[key]
    gi = model.gi_profile_by_id(15)
    assert gi is not None
    cis = {c.id: c for c in model.ci_profiles_for(15)}
    assert set(cis) == {0, 7}
    assert cis[7].multiprocessors == gi.multiprocessors == 26
    assert cis[0].multiprocessors == 16
    assert cis[7].name == cis[0].name == gi.name


def test_ampere_1g_two_slice_gi_is_filled_by_ci_profile_0():
    assert _cis("A100-SXM4-40GB", 15) == [(0, "1g.10gb", 1, 14)]


def test_ci_profiles_repeat_their_gi_engine_counts():
    gi = MODELS["A100-SXM4-80GB"].gi_profile_by_id(9)
    assert gi is not None
    for ci in MODELS["A100-SXM4-80GB"].ci_profiles_for(9):
        assert (ci.shared_copy_engines, ci.shared_decoders) == (gi.copy_engines, gi.decoders)


def test_ci_profile_ids_equal_their_enums_and_fit_the_enum_range():
    for model in MIG_MODELS:
        for gi in model.gi_profiles:
            for ci in model.ci_profiles_for(gi.id):
                assert ci.id == ci.enum
                assert 0 <= ci.id < codes.COMPUTE_INSTANCE_PROFILE_COUNT
                assert ci.instance_count == gi.slice_count // ci.slice_count


def test_find_model_by_key_or_product_name_in_any_case():
    assert find_model("h100-sxm5-80gb") is MODELS["H100-SXM5-80GB"]
    assert find_model("NVIDIA L4") is MODELS["L4"]
    assert find_model(" tesla t4 ") is MODELS["T4"]
    assert find_model("NVIDIA B200") is MODELS["B200"]
    assert find_model("NVIDIA GB300") is MODELS["GB300"]
    assert find_model("NVIDIA GH200 144G HBM3e") is None  # total memory never verified
