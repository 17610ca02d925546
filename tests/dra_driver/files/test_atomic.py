"""Atomic writes: readers see old or new content, never a mix, and no litter is left."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from dra_driver.files import atomic as fsutil


def test_atomic_write_creates_file_with_content_and_mode(tmp_path: Path) -> None:
    target = tmp_path / "spec.yaml"
    fsutil.atomic_write(target, b"hello", mode=0o600)
    assert target.read_bytes() == b"hello"
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    assert [p.name for p in tmp_path.iterdir()] == ["spec.yaml"]


def test_atomic_write_default_mode_ignores_umask(tmp_path: Path) -> None:
    old = os.umask(0o077)
    try:
        fsutil.atomic_write(tmp_path / "f", b"x")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "f").stat().st_mode) == 0o644


def test_atomic_write_replaces_existing_content(tmp_path: Path) -> None:
    target = tmp_path / "f"
    target.write_bytes(b"old content that is longer")
    fsutil.atomic_write(target, b"new")
    assert target.read_bytes() == b"new"
    assert [p.name for p in tmp_path.iterdir()] == ["f"]


def test_failed_write_keeps_old_content_and_removes_temp_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "f"
    target.write_bytes(b"old")

    def broken_fsync(fd: int) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(os, "fsync", broken_fsync)
    with pytest.raises(OSError, match="Input/output error"):
        fsutil.atomic_write(target, b"new")
    assert target.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["f"]


def test_failed_rename_keeps_old_content_and_removes_temp_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "f"
    target.write_bytes(b"old")

    def broken_replace(src: object, dst: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", broken_replace)
    with pytest.raises(OSError, match="No space"):
        fsutil.atomic_write(target, b"new")
    assert target.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["f"]


def test_atomic_write_into_missing_directory_fails_without_litter(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        fsutil.atomic_write(tmp_path / "missing" / "f", b"x")
    assert list(tmp_path.iterdir()) == []


def test_temp_files_are_recognisable_by_prefix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[str] = []
    real_replace = os.replace

    def spy(src: str, dst: str) -> None:
        seen.append(Path(src).name)
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", spy)
    fsutil.atomic_write(tmp_path / "name.yaml", b"x")
    assert len(seen) == 1
    assert seen[0].startswith(fsutil.temp_prefix_for("name.yaml"))
    assert not seen[0].endswith(".yaml")


def test_remove_file(tmp_path: Path) -> None:
    target = tmp_path / "f"
    target.write_bytes(b"x")
    assert fsutil.remove_file(target) is True
    assert not target.exists()
    assert fsutil.remove_file(target) is False
