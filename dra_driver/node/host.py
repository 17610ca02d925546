"""Readers for the host files the kubelet plugin needs besides NVML.

A CDI spec must name device nodes by major:minor, and two of those numbers
come only from procfs: the dynamic majors of `nvidia-uvm` and `nvidia-caps`
(`/proc/devices`) and the capability minors of MIG GPU and compute instances
(`/proc/driver/nvidia/capabilities/...`). The checkpoint also needs the boot
id to notice a reboot. Everything is read below a configurable `proc_root`,
so the simulated hardware can serve a fake tree with the same formats.

Failures are reported in the caller's layer: device lookups raise `CdiError`
(they only matter while building a CDI spec), the boot id raises
`CheckpointError`. Every message names the file.
"""

from __future__ import annotations

from pathlib import Path

from dra_driver.errors import CdiError, CheckpointError

_CHAR_SECTION = "Character devices:"
_BLOCK_SECTION = "Block devices:"
_ALIASES: dict[str, tuple[str, ...]] = {
    "nvidia": ("nvidia-frontend",),
    "nvidia-frontend": ("nvidia",),
}


class HostInfo:
    """Reads `/proc`-style files under `proc_root` (default the real `/proc`)."""

    def __init__(self, proc_root: Path = Path("/proc")) -> None:
        self.proc_root = Path(proc_root)

    # -- /proc/devices -------------------------------------------------------

    def char_majors(self) -> dict[str, int]:
        """Every character device driver in `<proc_root>/devices`, name -> major.

        A name registered under several majors keeps the first one listed.
        """
        path = self.proc_root / "devices"
        text = _read_text(path, CdiError)
        majors: dict[str, int] = {}
        in_char = False
        for lineno, raw in enumerate(text.splitlines(), start=1):
            line = raw.strip()
            if not line:
                continue
            if line == _CHAR_SECTION:
                in_char = True
                continue
            if line == _BLOCK_SECTION:
                in_char = False
                continue
            if not in_char:
                continue
            number, _, name = line.partition(" ")
            name = name.strip()
            if not number.isdigit() or not name:
                raise CdiError(f"{path}: line {lineno} is not '<major> <name>': {raw!r}")
            majors.setdefault(name, int(number))
        return majors

    def char_major(self, name: str) -> int:
        """The major of the character device driver `name` (e.g. "nvidia-uvm").

        "nvidia" and "nvidia-frontend" are the same driver (the name depends
        on the kernel module's build), so either finds the other.
        """
        majors = self.char_majors()
        for alias in _ALIASES.get(name, ()):
            if name not in majors and alias in majors:
                return majors[alias]
        if name not in majors:
            path = self.proc_root / "devices"
            raise CdiError(
                f"{path}: no character device {name!r} in the {_CHAR_SECTION!r} section "
                f"(is the NVIDIA kernel module that provides it loaded?)"
            )
        return majors[name]

    # -- MIG capability files ------------------------------------------------

    def mig_cap_path(self, gpu_minor: int, gi: int, ci: int | None = None) -> Path:
        """Path of the `access` file of a GPU instance, or of a compute instance in it."""
        base = self.proc_root / "driver" / "nvidia" / "capabilities" / f"gpu{gpu_minor}"
        base = base / "mig" / f"gi{gi}"
        if ci is not None:
            base = base / f"ci{ci}"
        return base / "access"

    def mig_cap(self, gpu_minor: int, gi: int, ci: int | None = None) -> tuple[int, int]:
        """`(DeviceFileMinor, DeviceFileMode)` of a MIG GI (or CI) capability.

        The minor is N in `/dev/nvidia-caps/nvidia-cap<N>`; the mode is the
        decimal `DeviceFileMode` (e.g. 292 == 0o444) to give that node: a
        permission mode, so anything above 0o777 is rejected as garbage.
        """
        path = self.mig_cap_path(gpu_minor, gi, ci)
        fields: dict[str, str] = {}
        for raw in _read_text(path, CdiError).splitlines():
            key, sep, value = raw.partition(":")
            if sep:
                fields[key.strip()] = value.strip()
        try:
            minor = int(fields["DeviceFileMinor"])
            mode = int(fields["DeviceFileMode"])
        except KeyError as exc:
            raise CdiError(f"{path}: field {exc.args[0]} is missing") from exc
        except ValueError as exc:
            raise CdiError(
                f"{path}: DeviceFileMinor/DeviceFileMode are not decimal numbers: {exc}"
            ) from exc
        if minor < 0 or not 0 <= mode <= 0o777:
            raise CdiError(f"{path}: DeviceFileMinor {minor} / DeviceFileMode {mode} out of range")
        return minor, mode

    # -- boot id -------------------------------------------------------------

    def boot_id(self) -> str:
        """The kernel's random boot id; changes on every reboot."""
        path = self.proc_root / "sys" / "kernel" / "random" / "boot_id"
        value = _read_text(path, CheckpointError).strip()
        if not value or any(c.isspace() for c in value):
            raise CheckpointError(f"{path}: not a boot id: {value!r}")
        return value


def _read_text(path: Path, error: type[CdiError] | type[CheckpointError]) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError as exc:
        raise error(f"{path}: file does not exist") from exc
    except UnicodeDecodeError as exc:
        raise error(f"{path}: not UTF-8 text") from exc
    except OSError as exc:
        raise error(f"{path}: cannot read: {exc.strerror or exc}") from exc
