"""Tiny ELF shared objects for fake driver roots: a SONAME and a word size, no code.

The driver-file discovery reads each library's ELF header the way NVIDIA's
toolkit does: `DT_SONAME` decides which soname links a container gets, and
the ELF class keeps 32-bit libraries out. A fake root must therefore hold
real ELF files, not empty ones. `shared_object` writes the smallest file
that ELF readers (pyelftools, Go's debug/elf, readelf) accept as an
`ET_DYN`: an ELF header, a `PT_LOAD` and a `PT_DYNAMIC` program header
(file offsets are addresses), and four sections (null, `.dynstr`,
`.dynamic`, `.shstrtab`), the `.dynamic` section linked to `.dynstr` and
holding `DT_NEEDED`, `DT_SONAME`, `DT_STRTAB`, `DT_STRSZ` and `DT_NULL`.

Written here because the ELF libraries on PyPI read ELF files; none writes a
shared object from scratch.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Final

ELFCLASS32: Final = 1
ELFCLASS64: Final = 2
_ET_DYN: Final = 3
_EM_386: Final = 3
_EM_X86_64: Final = 62
_SHT_STRTAB: Final = 3
_SHT_DYNAMIC: Final = 6
_SHF_ALLOC: Final = 2
_DT_NULL: Final = 0
_DT_NEEDED: Final = 1
_DT_STRTAB: Final = 5
_DT_STRSZ: Final = 10
_DT_SONAME: Final = 14
_PT_LOAD: Final = 1
_PT_DYNAMIC: Final = 2
_PF_R: Final = 4


def shared_object(soname: str | None, *, bits: int = 64, needed: Sequence[str] = ()) -> bytes:
    """An x86 shared object of `bits` (32 or 64) with `soname` (None: no DT_SONAME)."""
    if bits not in (32, 64):
        raise ValueError(f"ELF word size {bits} is not 32 or 64")
    wide = bits == 64
    dynstr = bytearray(b"\0")
    entries: list[tuple[int, int]] = []
    for name in needed:
        entries.append((_DT_NEEDED, len(dynstr)))
        dynstr += name.encode() + b"\0"
    if soname is not None:
        entries.append((_DT_SONAME, len(dynstr)))
        dynstr += soname.encode() + b"\0"
    shstrtab = b"\0.dynstr\0.dynamic\0.shstrtab\0"
    names = {".dynstr": 1, ".dynamic": 9, ".shstrtab": 18}

    ehsize, phentsize, shentsize = (64, 56, 64) if wide else (52, 32, 40)
    dyn_fmt = "<qQ" if wide else "<iI"
    align = 8 if wide else 4

    def aligned(offset: int) -> int:
        return (offset + align - 1) // align * align

    dynstr_off = ehsize + 2 * phentsize
    entries += [(_DT_STRTAB, dynstr_off), (_DT_STRSZ, len(dynstr)), (_DT_NULL, 0)]
    dynamic = b"".join(struct.pack(dyn_fmt, tag, value) for tag, value in entries)
    shstr_off = dynstr_off + len(dynstr)
    dynamic_off = aligned(shstr_off + len(shstrtab))
    sh_off = aligned(dynamic_off + len(dynamic))

    ident = b"\x7fELF" + bytes([ELFCLASS64 if wide else ELFCLASS32, 1, 1, 0]) + bytes(8)
    machine = _EM_X86_64 if wide else _EM_386
    fields = (_ET_DYN, machine, 1, 0, ehsize, sh_off, 0, ehsize, phentsize, 2, shentsize, 4, 3)
    header = ident + struct.pack("<HHIQQQIHHHHHH" if wide else "<HHIIIIIHHHHHH", *fields)
    end = sh_off + 4 * shentsize

    def segment(kind: int, offset: int, size: int) -> bytes:
        if wide:
            return struct.pack("<IIQQQQQQ", kind, _PF_R, offset, offset, offset, size, size, align)
        return struct.pack("<IIIIIIII", kind, offset, offset, offset, size, size, _PF_R, align)

    header += segment(_PT_LOAD, 0, end) + segment(_PT_DYNAMIC, dynamic_off, len(dynamic))

    def section(name: int, kind: int, flags: int, at: tuple[int, int], link: int = 0) -> bytes:
        offset, size = at
        addr = offset if flags & _SHF_ALLOC else 0
        entsize = struct.calcsize(dyn_fmt) if kind == _SHT_DYNAMIC else 0
        fmt = "<IIQQQQIIQQ" if wide else "<IIIIIIIIII"
        return struct.pack(fmt, name, kind, flags, addr, offset, size, link, 0, align, entsize)

    sections = bytes(shentsize) + b"".join(
        (
            section(names[".dynstr"], _SHT_STRTAB, _SHF_ALLOC, (dynstr_off, len(dynstr))),
            section(names[".dynamic"], _SHT_DYNAMIC, _SHF_ALLOC, (dynamic_off, len(dynamic)), 1),
            section(names[".shstrtab"], _SHT_STRTAB, 0, (shstr_off, len(shstrtab))),
        )
    )
    out = bytearray(header)
    out += dynstr
    out += shstrtab
    out += bytes(dynamic_off - len(out))
    out += dynamic
    out += bytes(sh_off - len(out))
    out += sections
    return bytes(out)
