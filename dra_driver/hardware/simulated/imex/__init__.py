"""Stand-ins for NVIDIA's `nvidia-imex` daemon and `nvidia-imex-ctl`, run on simulated nodes.

ComputeDomains need one IMEX daemon per node of a domain, connected to the
daemons of the other nodes (computedomain.md §4, §8.1). The proprietary
binary needs GPUs, so a simulated node's fake driver root
(`dra_driver.hardware.simulated.driver_root`) holds, at `usr/bin/nvidia-imex`
and `usr/bin/nvidia-imex-ctl`, the scripts `launchers` returns: real
processes that read the same files, speak TCP to each other on the simulated
nodes' loopback addresses (127.0.1.x and up; 127.0.0.2 is where NVIDIA maps
unused names) and answer the same commands. `protocol` holds the formats,
`daemon` the daemon, `ctl` the control program.

The scripts are Python scripts with the interpreter in their `#!` line, so
that, as with the real binary, the process is named `nvidia-imex` (its
`/proc/<pid>/comm`) and its command line holds `<root>/usr/bin/nvidia-imex -c
<cfg>` (after the interpreter), which the IMEX host checks to adopt a running
daemon.
"""

from __future__ import annotations

import shlex
import sys
from typing import Final

_MODULES: Final = {
    "nvidia-imex": "dra_driver.hardware.simulated.imex.daemon",
    "nvidia-imex-ctl": "dra_driver.hardware.simulated.imex.ctl",
}
_MAX_SHEBANG: Final = 120  # the kernel reads at most 127 bytes of a #! line (before 5.1)


def launchers() -> dict[str, bytes]:
    """The fake driver root's `nvidia-imex` and `nvidia-imex-ctl`: scripts that run the
    stand-ins."""
    scripts = {}
    for name, module in _MODULES.items():
        if len(sys.executable) <= _MAX_SHEBANG and " " not in sys.executable:
            text = (
                f"#!{sys.executable}\nimport sys\n\nfrom {module} import main\n\nsys.exit(main())\n"
            )
        else:  # an interpreter path the #! line cannot hold: through the shell
            text = f'#!/bin/sh\nexec {shlex.quote(sys.executable)} -m {module} "$@"\n'
        scripts[name] = text.encode()
    return scripts
