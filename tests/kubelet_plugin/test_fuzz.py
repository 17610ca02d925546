"""A few thousand hostile kubelet calls: no crash, no hang, nothing left, memory flat.

The same fuzzer as the `fuzz` benchmark (100,000 calls; see bench/fuzz.py),
shorter, so CI runs it on every change.
"""

from __future__ import annotations

import pytest

from tests.fakes import PluginProcess
from tests.fakes.fuzz import Fuzzer

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

CALLS = 3_000


def test_hostile_calls_crash_nothing_hang_nothing_and_leave_nothing() -> None:
    with PluginProcess(prefix="dra-fuzz-", publish_interval=3600) as plugin:
        report = Fuzzer(plugin, seed=7).run(CALLS, rss_every=500)
        log = plugin.log_tail()
    assert report.crashes == 0, log
    assert report.hangs == 0
    assert report.rpc_failures == {}
    assert report.leftovers == []
    assert report.claim_errors > 0  # the input was hostile
    assert report.rss_ratio(after=1000) <= 1.5, report.rss_kib
    assert "Traceback" not in log
