"""One lock per key: the same key waits, other keys do not, and idle keys are forgotten."""

from __future__ import annotations

import threading

import pytest

from kubelet_plugin.keyed_locks import KeyedLocks


def test_a_key_is_held_by_one_thread_and_forgotten_when_free() -> None:
    locks = KeyedLocks()
    inside = threading.Event()
    release = threading.Event()

    def holder() -> None:
        with locks.hold("claim-a"):
            inside.set()
            release.wait(5)

    thread = threading.Thread(target=holder)
    thread.start()
    assert inside.wait(5)
    with pytest.raises(TimeoutError, match="claim-a"), locks.hold("claim-a", timeout=0.01):
        pass
    with locks.hold("claim-b", timeout=0.01):  # another key is free
        assert len(locks) == 2
    release.set()
    thread.join(5)
    assert len(locks) == 0
    with locks.hold("claim-a", timeout=0.01):
        pass
    assert len(locks) == 0


def test_a_body_that_raises_frees_the_key() -> None:
    locks = KeyedLocks()
    with pytest.raises(ValueError, match="boom"), locks.hold("k"):
        raise ValueError("boom")
    with locks.hold("k", timeout=0):
        pass
    assert len(locks) == 0
