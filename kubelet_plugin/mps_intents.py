"""The kubelet plugin's side of the MPS host protocol: write an intent, wait for the answer.

The plugin never runs an MPS control daemon itself (see `kubelet_plugin.mps_host`
for why). To start, re-limit or stop the daemon of a device it writes the
device's intent file (`dra_driver.claims.mps_intent`) with the claims that
use it, wakes the host and waits until the host's status file answers that
very intent. Callers hold the per-GPU lock of the device's GPU around
`request`, so intents of one device are written one at a time by every
plugin instance on the node, and the read-modify-write of the claim set
(`claims_of`, then `request`) cannot lose an update: two claims released at
once leave an empty set exactly once, and the daemon is stopped exactly once.

With no host on the node (nothing holds its lock) a start fails at once
with an error that says what to deploy; a stop is left as an intent for the
host to carry out when it comes, and succeeds.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import secrets
import time
from collections.abc import Collection
from pathlib import Path
from typing import TYPE_CHECKING, Final

from dra_driver.claims.mps import DaemonPaths, MpsLimits
from dra_driver.claims.mps_intent import (
    HOST_LOCK_FILE,
    MAX_FILE_BYTES,
    DaemonState,
    decode_intent,
    decode_status,
    device_uuid_of,
    encode_intent,
    intent_file_name,
    is_device_uuid,
    make_intent,
    status_file_name,
)
from dra_driver.errors import MpsError
from dra_driver.files import atomic

if TYPE_CHECKING:
    from dra_driver.claims.mps_intent_records import DaemonIntent, DaemonStatus

REQUEST_TIMEOUT_S: Final = 40.0
"""Longest wait for the host's answer: a start (10 s) and a command (10 s) with room to
spare, inside the kubelet's 45 s per call."""
_POLL_S: Final = 0.005
_HOST_CHECK_S: Final = 0.5

NO_HOST_HINT: Final = (
    "deploy the dra-gpu-mps-host DaemonSet (deploy/base/mps-host.yaml) on this node to use MPS"
)


class MpsHostClient:
    """Intents and statuses under `root` (`<plugin data dir>/mps`)."""

    def __init__(self, root: Path, *, timeout_s: float = REQUEST_TIMEOUT_S) -> None:
        self.root = root
        self.timeout_s = timeout_s

    def paths(self, device_uuid: str) -> DaemonPaths:
        """Where the daemon of `device_uuid` keeps its pipe, log and shm directories."""
        return DaemonPaths.of(self.root, device_uuid)

    # -- reading ------------------------------------------------------------------

    def host_running(self) -> bool:
        """Whether an MPS host serves `root` (it holds `host.lock` while it runs)."""
        try:
            fd = os.open(self.root / HOST_LOCK_FILE, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        finally:
            os.close(fd)  # also drops the shared lock if we got it
        return False

    def intent(self, device_uuid: str) -> DaemonIntent | None:
        """The device's current intent; None without one. `MpsError` if it is unreadable."""
        path = self.root / intent_file_name(device_uuid)
        try:
            data = _read_bounded(path)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise MpsError(f"{path}: cannot read: {exc.strerror or exc}") from exc
        return decode_intent(data, source=str(path))

    def status(self, device_uuid: str) -> DaemonStatus | None:
        """The host's last answer for the device; None without one (or unreadable)."""
        path = self.root / status_file_name(device_uuid)
        try:
            return decode_status(_read_bounded(path), source=str(path))
        except (OSError, MpsError):
            return None

    def claims_of(self, device_uuid: str) -> frozenset[str]:
        """The claims the device's intent lists (none without an intent; an unreadable
        intent lists none, and the caller's next `request` replaces it)."""
        try:
            intent = self.intent(device_uuid)
        except MpsError:
            return frozenset()
        return frozenset(intent.claims) if intent is not None else frozenset()

    def devices(self) -> list[str]:
        """Every device with an intent file or a daemon directory, sorted."""
        try:
            names = os.listdir(self.root)
        except FileNotFoundError:
            return []
        found = {uuid for name in names if (uuid := device_uuid_of(name)) is not None}
        found |= {name for name in names if is_device_uuid(name) and (self.root / name).is_dir()}
        return sorted(found)

    def running(self) -> int:
        """How many daemons the host reports running (the `dra_gpu_mps_daemons` gauge)."""
        if not self.host_running():
            return 0
        count = 0
        for uuid in self.devices():
            status = self.status(uuid)
            if status is not None and status.state is DaemonState.RUNNING:
                count += 1
        return count

    # -- writing ------------------------------------------------------------------

    def request(
        self,
        device_uuid: str,
        *,
        claims: Collection[str],
        multi_user: bool = False,
        limits: MpsLimits | None = None,
        gpu_uuid: str | None = None,
        need_daemon: bool = True,
    ) -> DaemonStatus | None:
        """Ask for the daemon of `device_uuid` to serve `claims` (stopped when empty).

        Returns the host's status (None: no host runs, and the intent waits for
        the next one). Hold the GPU lock of the device around the call. Raises
        `MpsError` when no host runs and a daemon is wanted with `need_daemon`
        (a Prepare; an Unprepare that leaves other users need not wait), when
        the host reports a failure, or when it does not answer within `timeout_s`.
        """
        wanted = bool(claims)
        if wanted and need_daemon and not self.host_running():
            raise MpsError(
                f"MPS for {device_uuid}: no MPS host runs on this node (nothing holds "
                f"{self.root / HOST_LOCK_FILE}); {NO_HOST_HINT}"
            )
        intent = make_intent(
            device_uuid,
            claims=frozenset(claims),
            multi_user=multi_user,
            limits=limits if wanted and limits is not None else MpsLimits(),
            token=secrets.token_hex(8),
            gpu_uuid=gpu_uuid,
        )
        path = self.root / intent_file_name(device_uuid)
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            atomic.atomic_write(path, encode_intent(intent), mode=0o644)
        except OSError as exc:
            raise MpsError(f"{path}: cannot write the MPS intent: {exc.strerror or exc}") from exc
        if not _wake(self.root) and not (wanted and need_daemon):
            return None  # no host: the intent waits for the next one
        status = self._wait(intent)
        if status.state is DaemonState.FAILED:
            raise MpsError(f"MPS host: {status.error}")
        if status.state is DaemonState.STOPPED:
            self.forget(device_uuid)
        return status

    def forget(self, device_uuid: str) -> None:
        """Remove the intent and status files of a stopped daemon (hold the GPU lock)."""
        for name in (intent_file_name(device_uuid), status_file_name(device_uuid)):
            with contextlib.suppress(OSError):
                atomic.remove_file(self.root / name)

    def _wait(self, intent: DaemonIntent) -> DaemonStatus:
        deadline = time.monotonic() + self.timeout_s
        next_check = time.monotonic() + _HOST_CHECK_S
        while True:
            status = self.status(intent.device_uuid)
            if status is not None and status.token == intent.token:
                return status
            now = time.monotonic()
            if now > deadline:
                raise MpsError(
                    f"MPS for {intent.device_uuid}: the MPS host did not answer within "
                    f"{self.timeout_s:g} s; see the dra-gpu-mps-host pod's log on this node"
                )
            if now > next_check:
                next_check = now + _HOST_CHECK_S
                if not self.host_running():
                    raise MpsError(
                        f"MPS for {intent.device_uuid}: the MPS host stopped before it "
                        f"answered; {NO_HOST_HINT}"
                    )
                _wake(self.root)
            time.sleep(_POLL_S)


def _wake(root: Path) -> bool:
    """`mps_host.wake`, imported on first use: the host's module loads pydantic, which a
    plugin without MPS claims never needs."""
    from kubelet_plugin.mps_host import wake

    return wake(root)


def _read_bounded(path: Path) -> bytes:
    with path.open("rb") as f:
        return f.read(MAX_FILE_BYTES + 1)
