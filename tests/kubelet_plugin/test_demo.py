"""`dra-gpu demo` output: readable on a terminal and clean when piped or logged."""

from __future__ import annotations

import io

from kubelet_plugin.demo import _Printer


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
