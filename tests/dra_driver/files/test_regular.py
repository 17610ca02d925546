"""Reading files that must be regular: anything else is refused at once, never waited on."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

from dra_driver.files.regular import NotRegularFileError, read_regular


def test_a_regular_file_is_read_through_a_symbolic_link_and_bounded(tmp_path: Path) -> None:
    (tmp_path / "file").write_bytes(b"content")
    (tmp_path / "link").symlink_to(tmp_path / "file")
    assert read_regular(tmp_path / "link") == b"content"
    assert read_regular(str(tmp_path / "file"), max_bytes=3) == b"con"


def test_a_missing_file_stays_file_not_found(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        read_regular(tmp_path / "nothing")


@pytest.mark.parametrize("kind", ["a FIFO", "a socket", "a directory", "a character device"])
def test_anything_else_is_refused_with_its_kind(tmp_path: Path, kind: str) -> None:
    path = tmp_path / "entry"
    if kind == "a FIFO":
        os.mkfifo(path)  # reading one would wait for a writer, for ever
    elif kind == "a socket":
        with socket.socket(socket.AF_UNIX) as bound:
            bound.bind(str(path))
    elif kind == "a directory":
        path.mkdir()
    else:
        path.symlink_to("/dev/null")
    with pytest.raises(NotRegularFileError, match=rf"^not a regular file \({kind}\)$"):
        read_regular(path)
