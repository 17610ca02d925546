"""A fake `/sys` with the DRM nodes of a simulated node's GPUs.

A CDI spec gives a container the DRM nodes of its GPU (`/dev/dri/card*`,
`/dev/dri/renderD*`), which the plugin finds in sysfs under the GPU's PCI
device (`dra_driver.node.host.HostInfo.drm_nodes`). The simulator writes the
same files for its GPUs: `bus/pci/devices/<bus id>/drm/<name>/dev` holding
`226:<minor>` ("drm" is char major 226). As on a server whose BMC takes
`card0`, GPU i gets `card<i+1>` and `renderD<128+i>`.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Final

DRM_MAJOR: Final = 226
RENDER_BASE: Final = 128


def drm_node_names(index: int) -> tuple[tuple[str, int], tuple[str, int]]:
    """`((card name, minor), (render name, minor))` of the GPU at NVML index `index`."""
    return (f"card{index + 1}", index + 1), (f"renderD{RENDER_BASE + index}", RENDER_BASE + index)


def materialize_sysfs(root: Path, pci_bus_ids: Sequence[str]) -> Path:
    """Write the DRM entries of GPUs `pci_bus_ids` (in NVML index order) under `root`."""
    for index, bus_id in enumerate(pci_bus_ids):
        drm = Path(root) / "bus" / "pci" / "devices" / bus_id / "drm"
        for name, minor in drm_node_names(index):
            (drm / name).mkdir(parents=True, exist_ok=True)
            dev = drm / name / "dev"
            text = f"{DRM_MAJOR}:{minor}\n"
            if not dev.exists() or dev.read_text() != text:
                dev.write_text(text)
    return Path(root)
