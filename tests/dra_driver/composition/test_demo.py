"""`dra-gpu demo` output: readable on a terminal and clean when piped or logged."""

from __future__ import annotations

import io

import pytest

from dra_driver.composition.demo import _Printer, run_demo
from dra_driver.scheduling.whatif.node_allocation import allocate_on_node


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_step_titles_have_no_escape_codes_when_piped() -> None:
    out = io.StringIO()
    _Printer(out).step("Start the kubelet plugin")
    assert out.getvalue() == "\n== 1. Start the kubelet plugin\n"


def test_step_titles_are_bold_on_a_terminal() -> None:
    out = _Terminal()
    _Printer(out).step("Start the kubelet plugin")
    assert out.getvalue() == "\n\033[1m== 1. Start the kubelet plugin\033[0m\n"


@pytest.mark.slow
def test_demo_runs_through_and_its_mps_daemon_comes_and_goes() -> None:
    out = io.StringIO()
    assert run_demo(allocate=allocate_on_node, out=out) == 0
    text = out.getvalue()
    mps = text[text.index("MPS: two claims share gpu-7") :]
    assert "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=25 CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=20480M" in mps
    assert "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=50 CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=40960M" in mps
    assert "(ml-team/infer-a, ml-team/infer-b)" in mps
    assert "daemon defaults (the most generous claim's): 50.0 %" in mps
    last = mps[mps.index("after the last claim") :].splitlines()[2]
    assert last.split()[0] == "gpu-7"
    assert last.split()[-1] == "-"  # no daemon any more

    usage = text[text.index("See what your GPUs do") :]
    rows = {line.split()[0]: line.split() for line in usage.splitlines() if "ml-team/" in line}
    assert rows["ml-team/serve-a"][1:] == [
        "gpu-7",
        "serve-a-0",
        "35%",
        "30.0Gi/20.0Gi",
        "(share)",
        "0s",
        "OVER",
    ]
    assert rows["ml-team/serve-b"][-1] == "ok"
    assert rows["ml-team/notebook"][3:6] == ["-", "(no", "sample)"]  # idle: no sample, not 0 %
    assert 'dra_gpu_claim_over_share{claim="serve-a"' in usage
    assert "serve-a status.devices: gpu-7 Ready=True (Prepared)" in usage
    assert "Event GPUIdle on ml-team/notebook" in usage
