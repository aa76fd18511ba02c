"""The board scripts' output files, by the rule edgekit's own writers follow (edgekit.core.outputs).

An output is a regular file or nothing yet. A rename over a device (``/dev/null``), a FIFO, a
socket, a folder or a symbolic link would replace what is there (or write where the link points),
so those are refused in one line (exit 2); a regular file is replaced atomically: a temporary
beside it, fsynced, then renamed over it.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile

from .errors import BoardUsageError

_SPECIAL = ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
            (stat.S_ISSOCK, "a socket"))


def check_output_path(path: str, flag: str) -> None:
    """BoardUsageError unless ``path`` is a regular file or nothing yet."""
    text = os.fspath(path)
    if not text or "\x00" in text:
        raise BoardUsageError(f"{flag} must name a file")
    if os.path.basename(text) in ("", ".", ".."):
        raise BoardUsageError(f"{flag} {text} must name a file")
    try:
        info = os.lstat(text)
    except OSError:
        return  # absent (or its folder is: writing says so)
    if stat.S_ISLNK(info.st_mode):
        raise BoardUsageError(f"{flag} {text} is a symbolic link; give a plain file path")
    if stat.S_ISDIR(info.st_mode):
        raise BoardUsageError(f"{flag} {text} is a folder; give a file path")
    for test, what in _SPECIAL:
        if test(info.st_mode):
            raise BoardUsageError(f"{flag} {text} is {what}, not a regular file; give a file path")


def write_atomic(path: str, write, flag: str, make_parents: bool = False) -> None:
    """``write(fh)`` fills a temporary file beside ``path`` (binary), renamed over it when done."""
    check_output_path(path, flag)
    folder = os.path.dirname(os.path.abspath(path))
    if make_parents:
        os.makedirs(folder, exist_ok=True)
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", suffix=".tmp", dir=folder)
    except OSError as exc:
        raise BoardUsageError(f"cannot write {flag} {path}: {exc.strerror or exc}") from None
    try:
        with os.fdopen(fd, "wb") as fh:
            write(fh)
            fh.flush()
            os.fsync(fh.fileno())
        mask = os.umask(0)
        os.umask(mask)
        os.chmod(tmp, 0o666 & ~mask)  # mkstemp makes 0600; match a plain open()
        check_output_path(path, flag)  # what is there may have changed while the model ran
        os.replace(tmp, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
