"""Host-managed IMEX: ask the host's own `nvidia-imex` whether it is READY.

With `--imex-mode hostManaged` the node runs NVIDIA's `nvidia-imex` service
itself (systemd); dra-gpu creates no member and starts no daemon. Before a
channel goes to a container, the plugin runs the driver's
`nvidia-imex-ctl -q --u=<socket>` against the host daemon's control socket
and requires READY (NVIDIA: `kp/nvlib.go:405-435`, which runs it chrooted
into the driver root; here the binary is taken from the driver root as this
process sees it, as the MPS binaries are). Anything else is a retryable
error that quotes what the tool said.
"""

from __future__ import annotations

import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from dra_driver.errors import ClaimError

IMEX_CTL: Final = "/usr/bin/nvidia-imex-ctl"
"""Where NVIDIA's driver installs the IMEX control tool, inside the driver root."""
DEFAULT_SOCKET: Final = "/etc/nvidia-imex/imex_ctrl.sock"
QUERY_TIMEOUT_S: Final = 10.0


@dataclass(frozen=True)
class HostImex:
    """The host's IMEX service, asked through `ctl` (the tool under the driver root)."""

    ctl: Path
    socket: str = DEFAULT_SOCKET
    node_name: str = ""
    env: Mapping[str, str] = field(default_factory=dict)
    timeout: float = QUERY_TIMEOUT_S

    def require_ready(self) -> None:
        """Return if the host IMEX daemon says READY; ClaimError saying what it said otherwise."""
        command = [str(self.ctl), "-q", f"--u={self.socket}"]
        where = f"host-managed IMEX on node {self.node_name or '?'}"
        shown = " ".join(command)
        try:
            done = subprocess.run(
                command,
                capture_output=True,
                text=True,
                timeout=self.timeout,
                check=False,
                env=dict(self.env) or None,
            )
        except FileNotFoundError:
            raise ClaimError(
                f"{where}: {self.ctl} does not exist: the NVIDIA driver root has no "
                "nvidia-imex-ctl (is the driver's IMEX package installed?)"
            ) from None
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise ClaimError(f"{where}: `{shown}` failed: {exc}") from None
        lines = [line.strip() for line in done.stdout.splitlines() if line.strip()]
        if "READY" in lines:
            return
        said = "; ".join(lines + [line.strip() for line in done.stderr.splitlines()][:3])
        raise ClaimError(
            f"{where} is not ready: `{shown}` printed {said or 'nothing'!r} (exit "
            f"{done.returncode}); check `systemctl status nvidia-imex` on the node"
        )
