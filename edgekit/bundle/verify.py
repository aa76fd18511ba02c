"""SHA256SUMS of a bundle: written last by the builder, checked before a bundle is used.

The file is in ``sha256sum`` format (``<64 hex>  <relative path>`` per line, sorted by path), so
on a board ``sha256sum -c SHA256SUMS`` checks it without edgekit.
"""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path, PurePosixPath

from edgekit.bundle.layout import CHECKSUMS
from edgekit.core.errors import InputFileError
from edgekit.core.fileio import sha256_file, write_text

_LINE = re.compile(r"^([0-9a-f]{64}) [ *](.+)\Z")
MAX_CHECKSUMS_BYTES = 16 << 20  # about 150 000 entries
_SPECIAL = ((stat.S_ISFIFO, "a named pipe (FIFO)"), (stat.S_ISCHR, "a character device"),
            (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def special_kind(mode: int) -> str | None:
    """What ``mode`` (an ``lstat`` st_mode) is when it is neither a plain file nor a folder."""
    if stat.S_ISREG(mode) or stat.S_ISDIR(mode):
        return None
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    return next((name for test, name in _SPECIAL if test(mode)), "a special file")


def plain_files(folder: str | Path) -> list[str]:
    """Every file under ``folder`` as sorted POSIX paths relative to it; InputFileError for a link,
    a FIFO, a device or a socket anywhere in it (nothing is followed or opened: reading a FIFO
    would block, a link would read or send a file from outside the bundle)."""
    folder = Path(folder)
    names = []

    def unreadable(exc: OSError) -> None:
        raise InputFileError(f"cannot read the bundle folder {exc.filename}: {exc.strerror}")

    for root, dirs, files in os.walk(folder, onerror=unreadable):
        for name in sorted(dirs + files):
            path = Path(root, name)
            try:
                mode = os.lstat(path).st_mode
            except OSError as exc:
                raise InputFileError(f"cannot read {path}: {exc.strerror}") from None
            kind = special_kind(mode)
            if kind:
                raise InputFileError(f"{path} is {kind}; a bundle holds plain files and folders only")
            if stat.S_ISREG(mode):
                names.append(path.relative_to(folder).as_posix())
    return sorted(names, key=lambda rel: rel.split("/"))


def bundle_files(folder: Path) -> list[str]:
    """Every file under ``folder`` except SHA256SUMS, as sorted POSIX paths relative to it."""
    return [rel for rel in plain_files(folder) if rel != CHECKSUMS]


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
    if path.is_symlink() or not path.is_file():
        raise InputFileError(f"{path} not found; is {folder} an edgekit bundle?")
    if path.stat().st_size > MAX_CHECKSUMS_BYTES:
        raise InputFileError(f"{path} is larger than {MAX_CHECKSUMS_BYTES >> 20} MiB; refusing to read it")
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
    present = plain_files(folder)  # links and special files first: nothing below opens one
    sums = read_checksums(folder)
    for rel, digest in sums.items():
        path = folder / rel
        if not path.is_file() or path.is_symlink():
            raise InputFileError(f"bundle file missing: {path} (listed in {CHECKSUMS})")
        if sha256_file(path) != digest:
            raise InputFileError(f"bundle file {path} does not match its {CHECKSUMS} entry (corrupt or changed)")
    if not allow_extra:
        extra = [rel for rel in present if rel != CHECKSUMS and rel not in sums]
        if extra:
            raise InputFileError(f"bundle file {folder / extra[0]} is not listed in {CHECKSUMS} (added after bundling?)")
    return sums
