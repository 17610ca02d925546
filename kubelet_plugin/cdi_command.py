"""`dra-gpu cdi`: the CDI edits every prepared claim's container gets on this node.

An admin whose pods start without `nvidia-smi` or `libcuda.so.1` checks here
what the plugin would mount: it runs the plugin's own discovery (NVML's
driver version, the files under `--nvidia-driver-root`) and prints the
`containerEdits` every claim's containers get, which the node's base CDI
spec carries (`dra_driver.container.base_spec`): the driver's files
as read-only bind mounts (hostPaths under the host's driver root), the
config files, the control device nodes, the environment, and nvcdi's hooks
(`--nvidia-cdi-hook-path`, less those `--disable-cdi-hook` names), followed
by the per-device edits of each GPU (its `/dev/nvidia<minor>`, DRM nodes
and by-path links). Writes nothing.
"""

from __future__ import annotations

import json
import sys
from typing import TextIO

from dra_driver.container import cdi
from dra_driver.hardware.machine import Hardware
from dra_driver.kube import yaml_io


def print_common_edits(hardware: Hardware, *, output: str, out: TextIO | None = None) -> int:
    out = out or sys.stdout
    version = hardware.driver_version()
    files = hardware.driver.files(version)
    for warning in files.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    edits = cdi.common_edits(hardware.host.char_major("nvidia-uvm")).merged(
        hardware.driver.edits(version)
    )
    hooks = hardware.driver.root.hooks
    devices = [
        {
            "name": f"gpu-{gpu.minor}",  # the DRA device name of the whole GPU
            "containerEdits": cdi.gpu_edits(
                gpu.minor, pci_bus_id=gpu.pci_bus_id, host=hardware.host, hooks=hooks
            ).to_dict(),
        }
        for gpu in hardware.nvml.gpus()
    ]
    doc: dict[str, object] = {"containerEdits": edits.to_dict(), "devices": devices}
    if output == "json":
        out.write(json.dumps(doc, indent=2) + "\n")
    else:
        root = hardware.driver.root
        out.write(f"# NVIDIA driver {version}, driver root {root.host}")
        if root.container_path:
            out.write(f" (read at {root.container_path})")
        out.write("\n")
        out.write(yaml_io.dump(doc, sort_keys=False))
    return 0
