"""Minimal `nvidia-imex` / `nvidia-imex-ctl` shell scripts, to test the IMEX host's process runner.

They exercise only what `ProcessImexRunner` relies on: a daemon that runs
until SIGTERM, logs NVIDIA's `Identified this node as ID n` and a line per
SIGUSR1, and a ctl that prints READY or the `-N -j` JSON. The stand-ins that
speak IMEX's protocol to peers live in `dra_driver.hardware.simulated.imex`;
these are for the runner's mechanics (sessions, pid files, adoption,
signals, timeouts), in a few milliseconds per start.

Environment knobs: FAKE_IMEX_ID (the ID logged, default 0), FAKE_IMEX_EXIT
(log "No matching network interface" and exit 1), FAKE_CTL_HANG (the ctl
sleeps 30 s), FAKE_CTL_NOT_READY (prints NOT READY, exit 1), FAKE_CTL_READY_FILE
(NOT READY until that file exists).
"""

from __future__ import annotations

from pathlib import Path

IMEX_SCRIPT = """#!/bin/sh
echo "IMEX starting: $*"
if [ -n "$FAKE_IMEX_EXIT" ]; then echo "No matching network interface"; exit 1; fi
echo "Identified this node as ID ${FAKE_IMEX_ID:-0}"
trap 'echo "SIGUSR1: re-resolving peers in $IMEX_STANDIN_HOSTS_FILE"' USR1
trap 'echo "SIGTERM: shutting down"; exit 0' TERM
while :; do sleep 0.05; done
"""

CTL_SCRIPT = """#!/bin/sh
if [ -n "$FAKE_CTL_HANG" ]; then exec sleep 30; fi
case "$*" in
  *-q*) if [ -n "$FAKE_CTL_NOT_READY" ]; then echo "NOT READY"; exit 1; fi
        if [ -n "$FAKE_CTL_READY_FILE" ] && [ ! -e "$FAKE_CTL_READY_FILE" ]; then
          echo "NOT READY"; exit 1
        fi
        echo READY ;;
  *-N*) echo '{"status": "UP", "nodes": {"0": {"host": "a", "status": "C"},'
        echo '  "1": {"host": "b", "status": "N"}}}' ;;
esac
"""


def install(directory: Path) -> tuple[Path, Path]:
    """Write both scripts into `directory`; returns (nvidia-imex, nvidia-imex-ctl)."""
    directory.mkdir(parents=True, exist_ok=True)
    imex, ctl = directory / "nvidia-imex", directory / "nvidia-imex-ctl"
    imex.write_text(IMEX_SCRIPT)
    ctl.write_text(CTL_SCRIPT)
    imex.chmod(0o755)
    ctl.chmod(0o755)
    return imex, ctl
