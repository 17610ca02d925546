"""SIGTERM and SIGINT stop a daemon even when the kernel hands them to a thread other than
the main one (`kubelet_plugin.stop_signals`)."""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Iterator

import pytest

from kubelet_plugin.stop_signals import stop_on_signals


@pytest.fixture
def parked_thread() -> Iterator[threading.Thread]:
    """A thread blocked on a lock, as the daemons' gRPC and worker threads are."""
    release = threading.Event()
    thread = threading.Thread(target=release.wait, name="parked", daemon=True)
    thread.start()
    yield thread
    release.set()
    thread.join()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_delivered_to_another_thread_still_sets_stop(
    parked_thread: threading.Thread, sig: signal.Signals, caplog: pytest.LogCaptureFixture
) -> None:
    stop = threading.Event()
    caplog.set_level(logging.INFO, logger="kubelet_plugin.stop_signals")
    with stop_on_signals(stop, action="shutting down"):
        assert parked_thread.ident is not None
        signal.pthread_kill(parked_thread.ident, sig)

        # A handler that set `stop` itself would never run while this thread waits here.
        assert stop.wait(timeout=5.0), "the signal was lost"
    assert f"received {sig.name} (signal {int(sig)}): shutting down" in caplog.text


def test_a_second_signal_is_logged_as_already_stopping(
    parked_thread: threading.Thread, caplog: pytest.LogCaptureFixture
) -> None:
    stop = threading.Event()
    caplog.set_level(logging.INFO, logger="kubelet_plugin.stop_signals")
    with stop_on_signals(stop, action="shutting down"):
        assert parked_thread.ident is not None
        signal.pthread_kill(parked_thread.ident, signal.SIGTERM)
        assert stop.wait(timeout=5.0)
        signal.pthread_kill(parked_thread.ident, signal.SIGTERM)
        for _ in range(100):
            if "already stopping" in caplog.text:
                break
            threading.Event().wait(0.05)
    assert "received SIGTERM (signal 15): already stopping" in caplog.text


def test_the_previous_handlers_are_back_after_the_block() -> None:
    def previous(_signum: int, _frame: object) -> None:
        pass

    saved = {sig: signal.signal(sig, previous) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        with stop_on_signals(threading.Event(), action="x"):
            assert signal.getsignal(signal.SIGTERM) is not previous
        assert signal.getsignal(signal.SIGTERM) is previous
        assert signal.getsignal(signal.SIGINT) is previous
        assert signal.set_wakeup_fd(-1) == -1  # no wakeup fd left behind
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)


def test_outside_the_main_thread_it_installs_nothing() -> None:
    before = signal.getsignal(signal.SIGTERM)
    seen: list[object] = []

    def in_thread() -> None:
        with stop_on_signals(threading.Event(), action="x"):
            seen.append(signal.getsignal(signal.SIGTERM))

    thread = threading.Thread(target=in_thread)
    thread.start()
    thread.join()
    assert seen == [before]
