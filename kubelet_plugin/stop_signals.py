"""SIGTERM and SIGINT stop a daemon, whichever of its threads the kernel hands them to.

Why this module exists: the obvious `signal.signal(SIGTERM, lambda *_: stop.set())`
with the main thread parked in `stop.wait()` loses SIGTERMs. The kernel may deliver a
process-directed signal to any thread that does not block it, and CPython runs the Python
handler only in the main thread, between bytecodes. When the signal lands on a gRPC or
worker thread, the main thread stays blocked in the Event's lock and the handler never
runs: the plugin ignores the kubelet's SIGTERM until the SIGKILL 30 s later, and leaves its
sockets, lease and slices behind. (The test suite hit this about once in 300 stops; a
faulthandler dump showed the main thread still in `stop.wait()` 8 s after the SIGTERM.)
Calling `Event.set()` from a handler is unsafe anyway: the handler may run while the main
thread holds that Event's non-reentrant lock, and then it deadlocks.

So the Python handler does nothing. CPython's C-level handler writes the signal number to
the wakeup fd (`signal.set_wakeup_fd`) on whatever thread receives it, and a small watcher
thread reads it and sets `stop` from ordinary thread context.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
from collections.abc import Iterator
from types import FrameType

log = logging.getLogger(__name__)

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
"""The signals that ask a daemon to stop cleanly (the kubelet's SIGTERM, a terminal's ^C)."""

_END = 0
"""The byte that ends the watcher (no signal has number 0)."""

__all__ = ["STOP_SIGNALS", "stop_on_signals"]


@contextlib.contextmanager
def stop_on_signals(stop: threading.Event, *, action: str) -> Iterator[None]:
    """While in the block, SIGTERM or SIGINT sets `stop`, logged as
    `received SIGTERM (signal 15): <action>`; the previous handlers are put back after it.

    Only the main thread can install signal handlers: elsewhere (a test running a daemon
    in a thread) this does nothing, and `stop` is the only way to stop.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    read_fd, write_fd = os.pipe()  # not inherited by the processes the daemon starts
    os.set_blocking(write_fd, False)  # set_wakeup_fd requires it; the watcher blocks on read
    previous = {sig: signal.signal(sig, _record_nothing) for sig in STOP_SIGNALS}
    previous_fd = signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
    watcher = threading.Thread(
        target=_watch, args=(read_fd, stop, action), name="stop-signals", daemon=True
    )
    watcher.start()
    try:
        yield
    finally:
        signal.set_wakeup_fd(previous_fd)
        for sig, handler in previous.items():
            signal.signal(sig, signal.SIG_DFL if handler is None else handler)
        os.write(write_fd, bytes([_END]))
        watcher.join(timeout=5.0)
        os.close(write_fd)
        if not watcher.is_alive():  # never close an fd a thread still reads
            os.close(read_fd)


def _record_nothing(_signum: int, _frame: FrameType | None) -> None:
    """The Python-level handler: a no-op. Installing it makes CPython's C handler catch the
    signal (and write it to the wakeup fd) instead of the default action killing us."""


def _watch(read_fd: int, stop: threading.Event, action: str) -> None:
    while True:
        data = os.read(read_fd, 64)  # PEP 475: retried on EINTR
        for signum in data:
            if signum == _END:
                return
            if signum in STOP_SIGNALS:
                name = signal.Signals(signum).name
                if stop.is_set():
                    log.info("received %s (signal %d): already stopping", name, signum)
                else:
                    log.info("received %s (signal %d): %s", name, signum, action)
                stop.set()
        if not data:
            return
