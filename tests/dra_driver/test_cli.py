"""`dra-gpu` flag checks that stop a mistake before anything runs."""

from __future__ import annotations

import pytest

from dra_driver.cli import main


@pytest.mark.parametrize("interval", ["0", "-1", "nan", "soon"])
def test_publish_interval_must_be_a_positive_number_of_seconds(
    interval: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # 0 or less made the re-sync loop list the API server's slices without pause.
    args = ["kubelet-plugin", "--node-name", "n1", "--nvml", "sim:l4-node"]
    with pytest.raises(SystemExit) as exited:
        main([*args, "--publish-interval", interval])
    assert exited.value.code == 2
    assert "argument --publish-interval" in capsys.readouterr().err
