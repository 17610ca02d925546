"""The CEL parser's LALR tables are built once per user (in the user's cache directory),
not once per run, and a cache that cannot be written or read costs time, never a result."""

from __future__ import annotations

from pathlib import Path

import lark
import pytest

from dra_driver.scheduling.cel import parser

EXPRESSION = "device.attributes['gpu.nvidia.com'].productName == 'NVIDIA H100 80GB HBM3'"


@pytest.fixture
def builds(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts the LALR table builds of fresh parsers (the module's one is set aside)."""
    monkeypatch.setattr(parser, "_parser", None)
    counted: list[int] = []
    build = lark.Lark._build_parser

    def counting(self: lark.Lark) -> object:
        counted.append(1)
        return build(self)

    monkeypatch.setattr(lark.Lark, "_build_parser", counting)
    return counted


def _fresh_parse() -> str:
    parser._parser = None
    return repr(parser.parse(EXPRESSION))  # nodes compare by identity; their text does not


def test_the_tables_are_built_once_and_then_read_from_the_user_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, builds: list[int]
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    first = _fresh_parse()
    files = list((tmp_path / "dra-gpu").iterdir())

    second = _fresh_parse()

    assert second == first
    assert len(builds) == 1
    assert [f.name for f in files] == [f"{files[0].name}"]
    assert files[0].name.startswith("cel-lalr-")
    assert files[0].name.endswith(f"-lark-{lark.__version__}.cache")


def test_without_a_writable_cache_directory_every_run_builds_and_parses(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, builds: list[int]
) -> None:
    blocked = tmp_path / "not-a-directory"
    blocked.write_text("")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocked))

    results = [_fresh_parse(), _fresh_parse()]

    assert results[0] == results[1]
    assert len(builds) == 2
    assert blocked.read_text() == ""


def test_a_damaged_cache_file_is_rebuilt_and_replaced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, builds: list[int]
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    expected = _fresh_parse()
    (cached,) = (tmp_path / "dra-gpu").iterdir()
    cached.write_bytes(cached.read_bytes()[:100])

    assert _fresh_parse() == expected
    assert _fresh_parse() == expected
    assert len(builds) == 2  # the first run, and the one that found the damage


def test_a_missing_home_directory_is_not_created(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, builds: list[int]
) -> None:
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "gone"))

    _fresh_parse()

    assert not (tmp_path / "gone").exists()
    assert len(builds) == 1
