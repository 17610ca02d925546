"""The kernel's numbers a channel claim needs: majors from `/proc/devices`, IMEX capability minor.

A container reaches IMEX channel k through the character device
`/dev/nvidia-caps-imex-channels/channel<k>`, major = the
`nvidia-caps-imex-channels` line of `/proc/devices`, minor k; a daemon
container also gets `/dev/nvidia-caps/nvidia-cap<minor>`, minor from
`/proc/driver/nvidia/capabilities/fabric-imex-mgmt`, major of `nvidia-caps`
(computedomain.md §1.5, §3.6). The CDI spec names them by number, so the CD
plugin reads these files; this module turns their text into numbers (pure:
the caller reads the files, below the real or a simulated `/proc`), and every
error names the file, so a node without the IMEX-capable driver says so.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from dra_driver.errors import CdiError

PROC_DEVICES: Final = "devices"  # below the proc root
FABRIC_IMEX_MGMT: Final = "driver/nvidia/capabilities/fabric-imex-mgmt"  # below the proc root
IMEX_CHANNELS_DEVICE: Final = "nvidia-caps-imex-channels"
CAPS_DEVICE: Final = "nvidia-caps"

_CHAR_SECTION: Final = "Character devices:"
_BLOCK_SECTION: Final = "Block devices:"


def char_major(devices_text: str, name: str, *, path: str = "/proc/devices") -> int:
    """The major of character device `name` in `/proc/devices` text read from `path`."""
    in_char = False
    for raw in devices_text.splitlines():
        line = raw.strip()
        if line in (_CHAR_SECTION, _BLOCK_SECTION):
            in_char = line == _CHAR_SECTION
            continue
        number, _, device = line.partition(" ")
        if in_char and device.strip() == name and number.isdigit():
            return int(number)
    raise CdiError(
        f"{path}: no character device {name!r} in the {_CHAR_SECTION!r} section "
        "(is an NVIDIA driver with IMEX support loaded?)"
    )


def imex_channels_major(devices_text: str, *, path: str = "/proc/devices") -> int:
    """The major of `/dev/nvidia-caps-imex-channels/channel<k>`."""
    return char_major(devices_text, IMEX_CHANNELS_DEVICE, path=path)


@dataclass(frozen=True)
class Capability:
    """A capability file of the nvidia module: `DeviceFileMinor/Mode/Modify`."""

    minor: int
    mode: int  # decimal in the file, e.g. 256 = 0o400
    modify: bool


def parse_capability(text: str, *, path: str) -> Capability:
    """A capability file (`fabric-imex-mgmt`, or a MIG `access` file) read from `path`."""
    fields: dict[str, int] = {}
    for raw in text.splitlines():
        key, sep, value = raw.partition(":")
        if sep and value.strip().isdigit():
            fields[key.strip()] = int(value.strip())
    missing = [
        key
        for key in ("DeviceFileMinor", "DeviceFileMode", "DeviceFileModify")
        if key not in fields
    ]
    if missing:
        raise CdiError(f"{path}: no {', '.join(missing)} line (a capability file has all three)")
    return Capability(
        minor=fields["DeviceFileMinor"],
        mode=fields["DeviceFileMode"],
        modify=fields["DeviceFileModify"] == 1,
    )
