"""The simulated node's fake driver root holds real ELF libraries with real sonames.

The discovery reads each library's DT_SONAME and ELF class, so the fake root
must be readable by ELF tools: pyelftools here, and the system's `ldconfig`,
which creates soname links from the same field.
"""

from __future__ import annotations

import io
import shutil
import subprocess
from pathlib import Path

import pytest
from elftools.elf.dynamic import DynamicSection
from elftools.elf.elffile import ELFFile

from dra_driver.hardware.simulated.driver_root import (
    DRIVER_LIBRARIES,
    LIB32_DIRS,
    LIBRARY_DIRS,
    materialize_driver_root,
)
from dra_driver.hardware.simulated.elf import shared_object

VERSION = "550.163.01"


def elf_facts(data: bytes) -> tuple[int, list[str]]:
    elf = ELFFile(io.BytesIO(data))
    sonames = [
        str(tag.soname)  # type: ignore[attr-defined]
        for section in elf.iter_sections()
        if isinstance(section, DynamicSection)
        for tag in section.iter_tags("DT_SONAME")
    ]
    return elf.elfclass, sonames


@pytest.mark.parametrize("bits", [64, 32])
def test_shared_objects_carry_their_class_and_soname(bits: int) -> None:
    assert elf_facts(shared_object("libcuda.so.1", bits=bits)) == (bits, ["libcuda.so.1"])
    assert elf_facts(shared_object(None, bits=bits)) == (bits, [])


@pytest.mark.parametrize("layout", ["debian", "rhel"])
def test_each_soname_link_names_the_soname_inside_the_file(tmp_path: Path, layout: str) -> None:
    root = materialize_driver_root(tmp_path / "root", VERSION, layout)  # type: ignore[arg-type]
    lib_dir = root / LIBRARY_DIRS[layout].lstrip("/")
    for spec in DRIVER_LIBRARIES:
        folder = lib_dir / spec.folder if spec.folder else lib_dir
        path = folder / f"{spec.stem}.so.{VERSION}"
        bits, sonames = elf_facts(path.read_bytes())
        expected = path.name if spec.soname == "=" else spec.soname
        assert (bits, sonames) == (64, [expected]), path
        if expected != path.name:
            assert (folder / expected).readlink() == Path(path.name)
    lib32 = LIB32_DIRS[layout]
    if lib32 is not None:
        bits, _ = elf_facts((root / lib32.lstrip("/") / f"libcuda.so.{VERSION}").read_bytes())
        assert bits == 32


def test_ldconfig_reads_the_same_sonames(tmp_path: Path) -> None:
    ldconfig = shutil.which("ldconfig") or "/sbin/ldconfig"
    folder = tmp_path / "libs"
    folder.mkdir()
    (folder / f"libnvidia-ml.so.{VERSION}").write_bytes(shared_object("libnvidia-ml.so.1"))
    (folder / f"libnvidia-glcore.so.{VERSION}").write_bytes(
        shared_object(f"libnvidia-glcore.so.{VERSION}")
    )
    subprocess.run([ldconfig, "-n", str(folder)], check=True)
    assert (folder / "libnvidia-ml.so.1").readlink() == Path(f"libnvidia-ml.so.{VERSION}")
    assert sorted(p.name for p in folder.iterdir()) == [
        f"libnvidia-glcore.so.{VERSION}",
        "libnvidia-ml.so.1",
        f"libnvidia-ml.so.{VERSION}",
    ]
