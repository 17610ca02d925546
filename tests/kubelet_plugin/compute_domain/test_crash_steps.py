"""Every step of a channel claim's Prepare and Unprepare can fail, and a restart recovers.

The failpoints (`dra_driver.failpoints.CD_PREPARE_STEPS`, `CD_UNPREPARE_STEPS`)
are armed as `fail:<step>`: the step is done and the transaction stops there,
as a crash would stop it (the process test kills the real plugin at one). A new
driver on the same stores (a restarted plugin) must leave either nothing
(a claim never completed: no member, no spec, no entry) or the complete
claim, and a retried Prepare or Unprepare must finish the job.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from dra_driver import failpoints
from dra_driver.compute_domain.membership import member_name
from tests.kubelet_plugin.compute_domain.harness import DOMAIN_UID, NODE, Node, make_node


@pytest.fixture
def node(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Node]:
    armed = tmp_path / "failpoints"
    monkeypatch.setenv(failpoints.FILE_ENV_VAR, str(armed))
    failpoints._from_environment.cache_clear()
    try:
        yield from make_node(tmp_path)
    finally:
        failpoints._from_environment.cache_clear()


def _arm(node: Node, step: str | None) -> None:
    (node.root / "failpoints").write_text(f"{failpoints.FAIL_PREFIX}{step}\n" if step else "")


@pytest.mark.parametrize("step", failpoints.CD_PREPARE_STEPS)
def test_a_prepare_stopped_at_any_step_is_rolled_back_or_kept_by_a_restart(
    node: Node, step: str
) -> None:
    node.new_driver()
    node.auto_ready()
    ref = node.claim()
    _arm(node, step)
    error = node.prepare(ref).error
    assert f"failpoint {step}" in error
    _arm(node, None)
    node.new_driver()  # the restart
    entry = node.checkpoint().claims.get(ref.uid)
    if step == failpoints.CD_PREPARE_STEPS[-1]:  # completed before it stopped: kept whole
        assert entry is not None
        assert node.spec(ref) is not None
        assert node.members() == [member_name(DOMAIN_UID, NODE)]
    else:
        assert entry is None
        assert node.spec(ref) is None
        assert node.members() == []
    assert node.prepare(ref).error == ""  # the kubelet's retry
    assert node.spec(ref) is not None
    assert node.unprepare(ref) == ""
    assert node.members() == []
    assert node.spec(ref) is None


@pytest.mark.parametrize("step", failpoints.CD_UNPREPARE_STEPS)
def test_an_unprepare_stopped_at_any_step_finishes_on_retry(node: Node, step: str) -> None:
    node.new_driver()
    node.auto_ready()
    ref = node.claim()
    assert node.prepare(ref).error == ""
    _arm(node, step)
    assert f"failpoint {step}" in node.unprepare(ref)
    _arm(node, None)
    node.new_driver()  # the restart
    assert node.unprepare(ref) == ""
    assert node.checkpoint().claims == {}
    assert node.members() == []
    assert node.spec(ref) is None
