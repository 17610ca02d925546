"""The GPU models the simulator impersonates, as plain data.

A simulator is only useful if it answers with the numbers real hardware
gives: profile ids (not enums), `memorySizeMB`, SM and engine counts,
placements. Every number below is copied from `gpu-mig-nvml.md` (§2, §3, §7),
which took them from real `nvidia-smi` output; the GI profile rows use the
compact §7 notation `id:name:inst:MiB:SM:CE:DEC:ENC:JPG:OFA[:{starts}/size]`
verbatim so they can be checked against the reference by eye. The record
types and the derivation of compute-instance profiles live in `specs`.

Where no real output exists, nothing is made up. B200 and GB200 are
simulated with the profiles `nvidia-smi mig -lgip` was seen to print
(1g, 1g+me, the two-slice 1g and 2g); NVIDIA's MIG user guide (Supported MIG
Profiles, B200 table) names their 3g, 4g and 7g profiles but gives only
fractions of memory and SMs, so those profiles are listed in
`GpuModel.unverified_profiles` and not offered: a simulated B200 cannot
create a 3g.90gb instance, and says why. The GB200's full-GPU SM count is
not known either (`multiprocessors` is None). Two models are left out on
purpose: the GH200 144 GB (its total memory and
its 3g/4g/7g rows were never seen in real output) and the H20 (no
`nvidia-smi` MIG table or device totals were found; the user guide lists
it only as "H20, 96GB, 7 instances").

The GB300 comes from a real capture: `nvidia-smi -q -x` of a 4x GB300 node
(NVIDIA/k8s-test-infra, tests/e2e/go/assertions/nvidiasmi/testdata/hardware/
qx-gb300.xml, driver 580.173.02 / CUDA 13.0): product name, PCI device id
0x31C2, 284208 MiB, Blackwell, ATS, PCI domain 0x0008 of its first GPU, and
MIG mode "Disabled" (so NVML answers the MIG-mode query: MIG-capable). Its
compute capability, 10.3, is NVIDIA's CUDA GPUs page
(developer.nvidia.com/cuda-gpus: "10.3 NVIDIA GB300 NVIDIA B300"). Its SM
count is in neither (None, as for GB200). Its MIG profiles are names and
counts only (§2.11, ids unverified, and the user guide's minimum MIG driver
for GB300 is R595, newer than the captured R580): all of them are in
`unverified_profiles`, none is offered, so a simulated GB300 is MIG-capable
and lists no GPU-instance profile; asking for one says why.

Addressing mode (`nvmlDeviceGetAddressingMode`): the Grace superchips
(GH200, GB200), whose CPU and GPU share coherent memory over NVLink-C2C,
report ATS (§3 and §7 for GH200; NVIDIA's driver publishes it on GB200 as
on GH200, issue #25; the GB200 and GB300 captures of NVIDIA/k8s-test-infra
print `<addressing_mode>ATS`). Every other model answers NOT_SUPPORTED, as PCIe/SXM
GPUs on older drivers do (§3), so no `addressingMode` is published for them.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from dra_driver.hardware.nvml import codes
from dra_driver.hardware.nvml.interface import Placement
from dra_driver.hardware.simulated.specs import (
    CiProfileSpec,
    GiProfileSpec,
    GpuModel,
    derive_ci_profiles,
)

__all__ = ["MODELS", "CiProfileSpec", "GiProfileSpec", "GpuModel", "find_model"]

NVIDIA_PCI_VENDOR = 0x10DE

# GI enums (NVML_GPU_INSTANCE_PROFILE_*) used below
_1_SLICE, _2_SLICE, _3_SLICE, _4_SLICE, _7_SLICE = 0x0, 0x1, 0x2, 0x3, 0x4
_1_SLICE_REV1, _2_SLICE_REV1, _1_SLICE_REV2 = 0x7, 0x8, 0x9
_1_GFX, _2_GFX, _4_GFX = 0xA, 0xB, 0xC
_1_NO_ME, _2_NO_ME, _1_ALL_ME, _2_ALL_ME = 0xD, 0xE, 0xF, 0x10


def _placements(starts: tuple[int, ...], size: int) -> tuple[Placement, ...]:
    return tuple(Placement(start, size) for start in starts)


# The 8-slot grid (A100, H100, H200, GH200): profile id -> (enum, placements). §1.1, §7 "pattern".
_EIGHT_SLOT: Mapping[int, tuple[int, tuple[Placement, ...]]] = {
    19: (_1_SLICE, _placements((0, 1, 2, 3, 4, 5, 6), 1)),
    20: (_1_SLICE_REV1, _placements((0, 1, 2, 3, 4, 5, 6), 1)),
    15: (_1_SLICE_REV2, _placements((0, 2, 4, 6), 2)),
    14: (_2_SLICE, _placements((0, 2, 4), 2)),
    9: (_3_SLICE, _placements((0, 4), 4)),
    5: (_4_SLICE, _placements((0,), 4)),
    0: (_7_SLICE, _placements((0,), 8)),
}
# A30 (4-slot grid) and RTX PRO 6000 Blackwell (12-unit grid): profile id -> enum. §1.1
_A30_ENUMS: Mapping[int, int] = {
    14: _1_SLICE,
    21: _1_SLICE_REV1,
    5: _2_SLICE,
    6: _2_SLICE_REV1,
    0: _4_SLICE,
}
_RTX_PRO_ENUMS: Mapping[int, int] = {
    14: _1_SLICE,
    21: _1_SLICE_REV1,
    47: _1_GFX,
    65: _1_ALL_ME,
    67: _1_NO_ME,
    5: _2_SLICE,
    35: _2_GFX,
    64: _2_ALL_ME,
    66: _2_NO_ME,
    0: _4_SLICE,
    32: _4_GFX,
}


def _gi_rows(rows: tuple[str, ...], enums: Mapping[int, int]) -> tuple[GiProfileSpec, ...]:
    """Parse §7 rows `id:name:inst:MiB:SM:CE:DEC:ENC:JPG:OFA[:{starts}/size]`."""
    profiles = []
    for row in rows:
        fields = row.split(":")
        pid = int(fields[0])
        if len(fields) == 11:
            starts_text, size_text = fields[10].split("/")
            starts = tuple(int(s) for s in starts_text.strip("{}").split(","))
            placements = _placements(starts, int(size_text))
            enum = enums[pid]
        else:
            enum, placements = _EIGHT_SLOT[pid]
        inst, mib, sm, ce, dec, enc, jpg, ofa = (int(f) for f in fields[2:10])
        profiles.append(
            GiProfileSpec(enum, pid, fields[1], inst, mib, sm, ce, dec, enc, jpg, ofa, placements)
        )
    return tuple(profiles)


def _model(
    key: str,
    product_name: str,
    pci_device: int,
    *,
    arch: int,
    cc: tuple[int, int],
    memory_mib: int,
    sms: int | None,
    slots: int = 0,
    compute_slices: int = 0,
    rows: tuple[str, ...] = (),
    enums: Mapping[int, int] = MappingProxyType({}),
    pci_domain: int = 0,
    unverified: tuple[str, ...] = (),
    addressing_mode: int | None = None,
) -> GpuModel:
    gis = _gi_rows(rows, enums)
    memory_bytes = memory_mib * 2**20
    base = next((p.multiprocessors for p in gis if p.enum == _1_SLICE), 0)
    hopper = arch >= codes.ARCH_HOPPER
    cis = {
        gi.id: derive_ci_profiles(
            gi, base_sms=base, memory_bytes=memory_bytes, rev1_fills_rev2=hopper
        )
        for gi in gis
    }
    return GpuModel(
        key=key,
        product_name=product_name,
        pci_device_id=(pci_device << 16) | NVIDIA_PCI_VENDOR,
        architecture_id=arch,
        compute_capability=cc,
        memory_mib=memory_mib,
        multiprocessors=sms,
        memory_slices=slots,
        compute_slices=compute_slices,
        pci_domain=pci_domain,
        gi_profiles=gis,
        ci_profiles=MappingProxyType(cis),
        unverified_profiles=unverified,
        addressing_mode=addressing_mode,
    )


_AMPERE, _ADA, _HOPPER, _BLACKWELL, _TURING = 7, 8, 9, 10, 6

# §2.2 / §7 (driver 550-era "set A" memory sizes)
_A100_40GB_ROWS = (
    "19:1g.5gb:7:4864:14:1:0:0:0:0",
    "20:1g.5gb+me:1:4864:14:1:1:0:1:1",
    "15:1g.10gb:4:9856:14:1:1:0:0:0",
    "14:2g.10gb:3:9856:28:2:1:0:0:0",
    "9:3g.20gb:2:19968:42:3:2:0:0:0",
    "5:4g.20gb:1:19968:56:4:2:0:0:0",
    "0:7g.40gb:1:40192:98:7:5:0:1:1",
)
# §2.3 / §7 (driver 550.54.14)
_A100_80GB_ROWS = (
    "19:1g.10gb:7:9728:14:1:0:0:0:0",
    "20:1g.10gb+me:1:9728:14:1:1:0:1:1",
    "15:1g.20gb:4:19968:14:1:1:0:0:0",
    "14:2g.20gb:3:19968:28:2:1:0:0:0",
    "9:3g.40gb:2:40192:42:3:2:0:0:0",
    "5:4g.40gb:1:40192:56:4:2:0:0:0",
    "0:7g.80gb:1:80640:98:7:5:0:1:1",
)
# §2.4 / §7
_H100_SXM_ROWS = (
    "19:1g.10gb:7:9984:16:1:1:0:1:0",
    "20:1g.10gb+me:1:9984:16:1:1:0:1:1",
    "15:1g.20gb:4:20096:26:1:1:0:1:0",
    "14:2g.20gb:3:20096:32:2:2:0:2:0",
    "9:3g.40gb:2:40448:60:3:3:0:3:0",
    "5:4g.40gb:1:40448:64:4:4:0:4:0",
    "0:7g.80gb:1:81152:132:8:7:0:7:1",
)
# §2.4: H100 PCIe has the SXM ids, memory and engines, with SMs 14/14/14/30/46/62/114
_H100_PCIE_ROWS = (
    "19:1g.10gb:7:9984:14:1:1:0:1:0",
    "20:1g.10gb+me:1:9984:14:1:1:0:1:1",
    "15:1g.20gb:4:20096:14:1:1:0:1:0",
    "14:2g.20gb:3:20096:30:2:2:0:2:0",
    "9:3g.40gb:2:40448:46:3:3:0:3:0",
    "5:4g.40gb:1:40448:62:4:4:0:4:0",
    "0:7g.80gb:1:81152:114:8:7:0:7:1",
)
# §2.5 / §7 (driver 560.35.03)
_H100_NVL_ROWS = (
    "19:1g.12gb:7:11008:16:1:1:0:1:0",
    "20:1g.12gb+me:1:11008:16:1:1:0:1:1",
    "15:1g.24gb:4:22144:26:1:1:0:1:0",
    "14:2g.24gb:3:22144:32:2:2:0:2:0",
    "9:3g.47gb:2:47488:60:3:3:0:3:0",
    "5:4g.47gb:1:47488:64:4:4:0:4:0",
    "0:7g.94gb:1:95360:132:8:7:0:7:1",
)
# §2.6 / §7
_GH200_96GB_ROWS = (
    "19:1g.12gb:7:11264:16:1:1:0:1:0",
    "20:1g.12gb+me:1:11264:16:1:1:0:1:1",
    "15:1g.24gb:4:23552:26:1:1:0:1:0",
    "14:2g.24gb:3:23552:32:2:2:0:2:0",
    "9:3g.48gb:2:47616:60:3:3:0:3:0",
    "5:4g.48gb:1:47616:64:4:4:0:4:0",
    "0:7g.96gb:1:95232:132:8:7:0:7:1",
)
# §2.7 / §7
_H200_ROWS = (
    "19:1g.18gb:7:16384:16:1:1:0:1:0",
    "20:1g.18gb+me:1:16384:16:1:1:0:1:1",
    "15:1g.35gb:4:33024:26:1:1:0:1:0",
    "14:2g.35gb:3:33024:32:2:2:0:2:0",
    "9:3g.71gb:2:71168:60:3:3:0:3:0",
    "5:4g.71gb:1:71168:64:4:4:0:4:0",
    "0:7g.141gb:1:143104:132:8:7:0:7:1",
)
# §2.9 / §7: B200, the rows real `nvidia-smi mig -lgip` printed (mig-parted #166, gpu-operator
# #1242, driver 570-era "22.00 GiB" set). The user guide's B200 table (Supported MIG Profiles)
# agrees on names, instance counts and memory fractions (1/8, 1/8, 2/8, 2/8 of 8 slots).
_B200_ROWS = (
    "19:1g.23gb:7:22528:18:2:1:0:1:0",
    "20:1g.23gb+me:1:22528:18:2:1:0:1:1",
    "15:1g.45gb:4:45312:30:2:1:0:1:0",
    "14:2g.45gb:3:45312:36:4:2:0:2:0",
)
_B200_UNVERIFIED = ("3g.90gb", "4g.90gb", "7g.180gb")  # user guide: names and fractions only
# §2.10 / §7: GB200 (mig-parted #227, gpu-operator #1303; the later "1g.23gb" driver)
_GB200_ROWS = (
    "19:1g.23gb:7:22528:18:2:1:0:1:0",
    "20:1g.23gb+me:1:22528:18:2:1:0:1:1",
    "15:1g.47gb:4:46592:32:2:1:0:1:0",
    "14:2g.47gb:3:46592:38:4:2:0:2:0",
)
_GB200_UNVERIFIED = ("3g.93gb", "4g.93gb", "7g.186gb")  # mig-parted config names only (§2.10)
# §2.11: GB300's profile names and counts only ("1g.35gb x7, 1g.70gb x4, 2g.70gb x3, 3g.139gb x2,
# 4g.139gb x1, 7g.278gb x1"; ids "probably 19/20/15/14/9/5/0, but UNVERIFIED"): none simulated.
_GB300_UNVERIFIED = ("1g.35gb", "1g.70gb", "2g.70gb", "3g.139gb", "4g.139gb", "7g.278gb")
# §2.1 / §7 (driver 535.183.01)
_A30_ROWS = (
    "14:1g.6gb:4:5952:14:1:1:0:0:0:{0,1,2,3}/1",
    "21:1g.6gb+me:1:5952:14:1:1:0:1:1:{0,1,2,3}/1",
    "5:2g.12gb:2:11968:28:2:2:0:0:0:{0,2}/2",
    "6:2g.12gb+me:1:11968:28:2:2:0:1:1:{0,2}/2",
    "0:4g.24gb:1:24000:56:4:4:0:1:1:{0}/4",
)
# §2.12 / §7
_RTX_PRO_6000_ROWS = (
    "14:1g.24gb:4:24192:46:1:1:1:1:0:{0,3,6,9}/3",
    "21:1g.24gb+me:1:24192:46:1:1:1:1:1:{0,3,6,9}/3",
    "47:1g.24gb+gfx:4:24192:46:1:1:1:1:0:{0,3,6,9}/3",
    "65:1g.24gb+me.all:1:24192:46:1:4:4:4:1:{0,3,6,9}/3",
    "67:1g.24gb-me:4:24192:46:1:0:0:0:0:{0,3,6,9}/3",
    "5:2g.48gb:2:48512:94:2:2:2:2:0:{0,6}/6",
    "35:2g.48gb+gfx:2:48512:94:2:2:2:2:0:{0,6}/6",
    "64:2g.48gb+me.all:1:48512:94:2:4:4:4:1:{0,6}/6",
    "66:2g.48gb-me:2:48512:94:2:0:0:0:0:{0,6}/6",
    "0:4g.96gb:1:97408:188:4:4:4:4:1:{0}/12",
    "32:4g.96gb+gfx:1:97408:188:4:4:4:4:1:{0}/12",
)

_MODELS: tuple[GpuModel, ...] = (
    # Ampere: §3 table (names, device ids, totals, SMs), §2.1-2.3 MIG tables
    _model("A30", "NVIDIA A30", 0x20B7, arch=_AMPERE, cc=(8, 0), memory_mib=24576, sms=56,
           slots=4, compute_slices=4, rows=_A30_ROWS, enums=_A30_ENUMS),
    _model("A100-SXM4-40GB", "NVIDIA A100-SXM4-40GB", 0x20B0, arch=_AMPERE, cc=(8, 0),
           memory_mib=40960, sms=108, slots=8, compute_slices=7, rows=_A100_40GB_ROWS),
    _model("A100-PCIE-40GB", "NVIDIA A100-PCIE-40GB", 0x20F1, arch=_AMPERE, cc=(8, 0),
           memory_mib=40960, sms=108, slots=8, compute_slices=7, rows=_A100_40GB_ROWS),
    _model("A100-SXM4-80GB", "NVIDIA A100-SXM4-80GB", 0x20B2, arch=_AMPERE, cc=(8, 0),
           memory_mib=81920, sms=108, slots=8, compute_slices=7, rows=_A100_80GB_ROWS),
    _model("A100-PCIE-80GB", "NVIDIA A100 80GB PCIe", 0x20B5, arch=_AMPERE, cc=(8, 0),
           memory_mib=81920, sms=108, slots=8, compute_slices=7, rows=_A100_80GB_ROWS),
    # Hopper: §3 table, §2.4-2.7 MIG tables
    _model("H100-SXM5-80GB", "NVIDIA H100 80GB HBM3", 0x2330, arch=_HOPPER, cc=(9, 0),
           memory_mib=81559, sms=132, slots=8, compute_slices=7, rows=_H100_SXM_ROWS),
    _model("H100-PCIE", "NVIDIA H100 PCIe", 0x2331, arch=_HOPPER, cc=(9, 0),
           memory_mib=81559, sms=114, slots=8, compute_slices=7, rows=_H100_PCIE_ROWS),
    _model("H100-NVL", "NVIDIA H100 NVL", 0x2321, arch=_HOPPER, cc=(9, 0),
           memory_mib=95830, sms=132, slots=8, compute_slices=7, rows=_H100_NVL_ROWS),
    _model("GH200-96GB", "NVIDIA GH200 480GB", 0x2342, arch=_HOPPER, cc=(9, 0),
           memory_mib=97871, sms=132, slots=8, compute_slices=7, rows=_GH200_96GB_ROWS,
           pci_domain=0x0009, addressing_mode=codes.ADDRESSING_MODE_ATS),
    _model("H200", "NVIDIA H200", 0x2335, arch=_HOPPER, cc=(9, 0),
           memory_mib=143771, sms=132, slots=8, compute_slices=7, rows=_H200_ROWS),
    # Blackwell B200 / GB200: §3 table (names, device ids, totals, SMs), §2.9-2.10 MIG rows; the
    # 8-slot grid (§1: "Grid sizes: 8 on ... B200, GB200"). GB200 SMs: unverified (None).
    # NVIDIA/k8s-test-infra's qx-gb200.xml (4x GB200, AWS p6e-gb200.36xlarge, 580.173.02)
    # agrees on name, 0x2941, 189471 MiB, Blackwell and ATS; its PCI domain is 0000 (that
    # instance's), where §3 saw 0008 (kept: the GB300 capture's first GPU is also at 0008).
    _model("B200", "NVIDIA B200", 0x2901, arch=_BLACKWELL, cc=(10, 0), memory_mib=183359,
           sms=148, slots=8, compute_slices=7, rows=_B200_ROWS, unverified=_B200_UNVERIFIED),
    _model("GB200", "NVIDIA GB200", 0x2941, arch=_BLACKWELL, cc=(10, 0), memory_mib=189471,
           sms=None, slots=8, compute_slices=7, rows=_GB200_ROWS, pci_domain=0x0008,
           unverified=_GB200_UNVERIFIED, addressing_mode=codes.ADDRESSING_MODE_ATS),
    # GB300: the qx-gb300.xml capture (module docstring): "NVIDIA GB300", pci_device_id 31C210DE,
    # product_architecture Blackwell (10, §3 enum), fb_memory_usage total 284208 MiB,
    # addressing_mode ATS, pci_domain 0008 (the first GPU; the node's four are 0008, 0009, 0018,
    # 0019: shapes.gb300-node). CC 10.3: developer.nvidia.com/cuda-gpus. SMs: not in either
    # (None). Compute slices 7: §2.11's "1g.35gb x7" and "7g.278gb" (at most 7 MIG devices);
    # no placement grid (memory slices 0): §1 lists none for GB300 and no profile is offered.
    _model("GB300", "NVIDIA GB300", 0x31C2, arch=_BLACKWELL, cc=(10, 3), memory_mib=284208,
           sms=None, compute_slices=7, pci_domain=0x0008, unverified=_GB300_UNVERIFIED,
           addressing_mode=codes.ADDRESSING_MODE_ATS),
    # Blackwell: §2.12 / §3 (a 12-unit placement grid, 4 compute slices)
    _model("RTX-PRO-6000-BW-SERVER", "NVIDIA RTX PRO 6000 Blackwell Server Edition", 0x2BB5,
           arch=_BLACKWELL, cc=(12, 0), memory_mib=97887, sms=188,
           slots=12, compute_slices=4, rows=_RTX_PRO_6000_ROWS, enums=_RTX_PRO_ENUMS),
    # Not MIG-capable. L4: "NVIDIA L4, 23034 MiB" in many public nvidia-smi transcripts;
    # lspci "AD104GL [L4] [10de:27b8]"; CUDA deviceQuery "CC 8.9 ... (58) Multiprocessors,
    # (128) CUDA Cores/MP: 7424 CUDA Cores"; Ada Lovelace = arch 8 (§3).
    _model("L4", "NVIDIA L4", 0x27B8, arch=_ADA, cc=(8, 9), memory_mib=23034, sms=58),
    # T4: "Tesla T4, 15360 MiB" in public nvidia-smi transcripts; lspci "TU104GL [Tesla T4]
    # [10de:1eb8]"; deviceQuery "CC 7.5 ... (40) Multiprocessors"; Turing = arch 6; §3 says
    # current drivers report brand NVIDIA (14) for T4.
    _model("T4", "Tesla T4", 0x1EB8, arch=_TURING, cc=(7, 5), memory_mib=15360, sms=40),
)  # fmt: skip


MODELS: Mapping[str, GpuModel] = MappingProxyType({m.key: m for m in _MODELS})


def find_model(name: str) -> GpuModel | None:
    """A model by key ("H100-SXM5-80GB") or product name ("NVIDIA H100 80GB HBM3"), any case."""
    wanted = name.strip().casefold()
    for model in _MODELS:
        if wanted in (model.key.casefold(), model.product_name.casefold()):
            return model
    return None
