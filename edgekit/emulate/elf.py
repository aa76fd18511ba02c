"""The shared libraries an ELF program names (``DT_NEEDED``), read from its dynamic section.

Enough of ELF to put together a minimal userland for a program (``edgekit.emulate.board_root``):
64-bit little-endian files, every offset checked against the file's size.
"""

from __future__ import annotations

import struct
from pathlib import Path

ELF_MAGIC = b"\x7fELF"
SHT_DYNAMIC, DT_NEEDED, DT_NULL = 6, 1, 0
MAX_ELF_BYTES = 1 << 30


def needed(path: Path) -> list[str]:
    """The ``DT_NEEDED`` names of the ELF file at ``path`` ([] for a static program); ValueError for a non-ELF."""
    data = Path(path).read_bytes()[:MAX_ELF_BYTES]
    if data[:4] != ELF_MAGIC or data[4] != 2 or data[5] != 1:
        raise ValueError(f"{path} is not a 64-bit little-endian ELF file")

    def read(fmt: str, offset: int) -> tuple:
        if not 0 <= offset <= len(data) - struct.calcsize(fmt):
            raise ValueError(f"{path}: offset {offset} lies outside the file")
        return struct.unpack_from(fmt, data, offset)

    shoff, = read("<Q", 0x28)
    shentsize, shnum = read("<HH", 0x3A)
    sections = [read("<IIQQQQIIQQ", shoff + i * shentsize) for i in range(min(shnum, 4096))]
    names = []
    for _, kind, _, _, offset, size, link, _, _, entsize in sections:
        if kind != SHT_DYNAMIC or not 0 <= link < len(sections):
            continue
        strtab = sections[link][4]
        for position in range(offset, offset + size, entsize or 16):
            tag, value = read("<qQ", position)
            if tag == DT_NULL:
                break
            if tag == DT_NEEDED:
                start = strtab + value
                end = data.find(b"\x00", start, start + 4096)
                if end < 0:
                    raise ValueError(f"{path}: a library name runs past its string table")
                names.append(data[start:end].decode("ascii", "replace"))
    return names
