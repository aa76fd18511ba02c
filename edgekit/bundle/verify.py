"""SHA256SUMS of a bundle: written last by the builder, checked before a bundle is used.

The file is in ``sha256sum`` format (``<64 hex>  <relative path>`` per line, sorted by path), so
on a board ``sha256sum -c SHA256SUMS`` checks it without edgekit.
"""

from __future__ import annotations

import re
from pathlib import Path, PurePosixPath

from edgekit.bundle.layout import CHECKSUMS
from edgekit.errors import InputFileError
from edgekit.fileio import sha256_file, write_text

_LINE = re.compile(r"^([0-9a-f]{64}) [ *](.+)$")


def bundle_files(folder: Path) -> list[str]:
    """Every file under ``folder`` except SHA256SUMS, as sorted POSIX paths relative to it."""
    names = []
    for path in sorted(folder.rglob("*")):
        if path.is_symlink():
            raise InputFileError(f"{path} is a symbolic link; a bundle holds plain files only")
        if path.is_file():
            rel = path.relative_to(folder).as_posix()
            if rel != CHECKSUMS:
                names.append(rel)
    return names


def write_checksums(folder: str | Path) -> Path:
    """Write SHA256SUMS over every other file in ``folder`` (atomically); returns its path."""
    folder = Path(folder)
    lines = []
    for rel in bundle_files(folder):
        if "\n" in rel or "\\" in rel:
            raise InputFileError(f"cannot list {rel!r} in {CHECKSUMS}: newline or backslash in the name")
        lines.append(f"{sha256_file(folder / rel)}  {rel}\n")
    return write_text(folder / CHECKSUMS, "".join(lines))


def read_checksums(folder: str | Path) -> dict[str, str]:
    """{relative path: sha256} from ``folder``/SHA256SUMS; paths may not leave the folder."""
    path = Path(folder) / CHECKSUMS
    if not path.is_file():
        raise InputFileError(f"{path} not found; is {folder} an edgekit bundle?")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise InputFileError(f"{path} is not UTF-8 text") from None
    sums: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), 1):
        match = _LINE.match(line)
        if not match:
            raise InputFileError(f"{path} line {number} is not '<sha256>  <file>'")
        digest, rel = match.groups()
        parts = PurePosixPath(rel).parts
        if rel.startswith("/") or ".." in parts or not parts or rel in sums:
            raise InputFileError(f"{path} line {number}: bad or repeated path {rel!r}")
        sums[rel] = digest
    if not sums:
        raise InputFileError(f"{path} lists no files")
    return sums


def verify_checksums(bundle_dir: str | Path, allow_extra: bool = False) -> dict[str, str]:
    """Check every file listed in SHA256SUMS; returns {relative path: sha256}.

    Unless ``allow_extra``, a file the list does not name is an error too: python puts the
    bundle folder first on ``sys.path``, so a stray ``numpy.py`` there would run on the board.
    Raises InputFileError naming the first missing, changed or unlisted file.
    """
    folder = Path(bundle_dir)
    if not folder.is_dir():
        raise InputFileError(f"bundle folder not found: {folder}")
    sums = read_checksums(folder)
    for rel, digest in sums.items():
        path = folder / rel
        if not path.is_file() or path.is_symlink():
            raise InputFileError(f"bundle file missing: {path} (listed in {CHECKSUMS})")
        if sha256_file(path) != digest:
            raise InputFileError(f"bundle file {path} does not match its {CHECKSUMS} entry (corrupt or changed)")
    if not allow_extra:
        extra = [rel for rel in bundle_files(folder) if rel not in sums]
        if extra:
            raise InputFileError(f"bundle file {folder / extra[0]} is not listed in {CHECKSUMS} (added after bundling?)")
    return sums
