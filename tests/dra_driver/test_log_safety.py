"""Untrusted text in log records: one bounded line, escaped, with structured claim fields."""

from __future__ import annotations

import io
import json
import logging

import pytest

from dra_driver import cli
from dra_driver.log_safety import MAX_MESSAGE_CHARS, claim_fields, one_line

FORGED = "claim\n2026-11-27 10:00:00,000 INFO kubelet_plugin.driver: prepared everything\r\x1b[2J"


def _logged(json_format: bool, *args: object, **extra: str) -> str:
    cli._configure_logging(verbose=False, json_format=json_format)
    out = io.StringIO()
    handler = logging.getLogger().handlers[0]
    assert isinstance(handler, logging.StreamHandler)
    handler.setStream(out)
    logging.getLogger("test").warning(*args, extra=extra)  # type: ignore[arg-type]
    return out.getvalue()


@pytest.fixture(autouse=True)
def _restore_logging() -> object:
    yield
    logging.basicConfig(force=True, handlers=[logging.NullHandler()])


def test_a_name_with_newlines_cannot_forge_a_log_line() -> None:
    text = _logged(False, "prepare %s failed: %s", FORGED, "bad")
    assert text.count("\n") == 1  # the record's own line end
    assert "claim\\n2026-11-27" in text
    assert "\\x1b[2J" in text
    assert "\x1b" not in text


def test_a_huge_name_gives_a_bounded_line() -> None:
    text = _logged(False, "prepare %s", "n" * (3 << 20))
    assert len(text) < MAX_MESSAGE_CHARS + 200
    assert f"({(3 << 20) + len('prepare ') - MAX_MESSAGE_CHARS} more characters)" in text


def test_json_logs_carry_the_claim_as_fields() -> None:
    fields = claim_fields("default", "name\nforged", "u" * 1000)
    record = json.loads(_logged(True, "prepare failed", **fields))
    assert record["claim_namespace"] == "default"
    assert record["claim_name"] == "name\\nforged"
    assert len(record["claim_uid"]) < 600


def test_one_line_leaves_ordinary_text_alone() -> None:
    assert one_line("ResourceClaim ns/name (uid 1): gpu-0 is taken") == (
        "ResourceClaim ns/name (uid 1): gpu-0 is taken"
    )
