"""Output safety: edgekit replaces only what it wrote; anything else needs ``--force``.

Every command that writes a folder (``--out``) or a report file (``--json``, ``--junit``, ...)
asks this module first:

- ``normalise_out``: the path is made absolute with its parent's links resolved the way the
  kernel will resolve them; ``.``/``..`` endings, a symbolic link, a mount point, the current
  folder or one above it are refused.
- ``check_not_inputs``: an output equal to, inside, or a parent of any input is refused.
- ``foreign_entries``: an existing folder may be replaced only when it is an edgekit output of
  the same kind (its manifest, bundle.json or pipeline.json proves it) holding nothing else, at
  every depth: each file is one the proof lists (manifest ``files``, SHA256SUMS) or a name that
  kind writes itself, each sub-folder holds only such files, and the artifacts inside a pipeline
  run folder pass their own check (the rules are in ``edgekit.core.ownership``).
- ``claim_output``: all of the above plus a lock, so two runs into one folder cannot interleave.
- ``check_report_paths``: report files may not be folders, links, special files, repeat each
  other, or land on or inside an input; an existing one is replaced only when edgekit wrote it
  (its JSON ``schema``, or the generator mark of a Markdown, JUnit XML or HTML report).

Output names (``--out``, report paths) may not hold control characters (a newline, ESC, ...).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import re
import stat
from pathlib import Path
from typing import Iterable, Iterator

from edgekit.core.errors import EdgekitError, UsageError
from edgekit.core.ownership import (  # noqa: F401  (the names callers know from edgekit.core.outputs)
    ARTIFACT_EXTRAS,
    KINDS,
    MANIFEST_NAME,
    MAX_PROOF_BYTES,
    PIPELINE_ENTRIES,
    REFERENCE_NAME,
    REPORT_FORMATS,
    describe_report_format,
    foreign_entries,
    generator_mark,
    owned_tree,
    parse_sums,
    read_proof,
    read_sums,
    report_written_by_edgekit,
)
from edgekit.core.fileio import atomic_dir, make_dirs, prune_empty


class OutputBusyError(EdgekitError):
    """Another edgekit process is writing the same output."""


def normalise_out(out: str | os.PathLike, flag: str = "--out") -> Path:
    """The absolute output path, or a UsageError for one no command should ever replace."""
    text = os.fspath(out)
    if not text or "\x00" in text:
        raise UsageError(f"{flag} must name a folder")
    check_name_text(text, flag)
    given = Path(text)
    if given.name in ("", ".", ".."):
        raise UsageError(f"{flag} {safe_text(text)} must end in a folder name (e.g. dist/model), not '.' or '..'")
    parent = Path(os.path.realpath(given.parent))
    path = parent / given.name
    if path.is_symlink():
        raise UsageError(f"{flag} {safe_text(text)} is a symbolic link; name the folder itself or another path")
    if os.path.ismount(path):
        raise UsageError(f"{flag} {safe_text(text)} is a mount point; name a folder inside it")
    cwd = Path(os.path.realpath(os.getcwd()))
    if cwd == path or cwd.is_relative_to(path):
        raise UsageError(f"{flag} {safe_text(text)} is the current folder or one above it; name a new folder")
    if path.exists() and not path.is_dir():
        raise UsageError(f"{flag} {safe_text(text)} exists and is not a folder")
    return path


def check_not_inputs(out: Path, inputs: Iterable[str | os.PathLike | None], flag: str = "--out") -> None:
    """Refuse an output that is, holds, or lies inside one of ``inputs`` (files or folders)."""
    target = Path(os.path.realpath(out))
    for item in inputs:
        if item is None or str(item) == "" or ":" in str(item) and not Path(str(item)).exists():
            continue  # "package.module:factory", "hf:..." sources are not paths
        source = Path(os.path.realpath(item))
        if target == source:
            raise UsageError(f"{flag} {safe_text(out)} is an input ({safe_text(item)}); choose another folder")
        if source.is_relative_to(target):
            raise UsageError(f"{flag} {safe_text(out)} holds the input {safe_text(item)}; choose another folder")
        if target.is_relative_to(source):
            raise UsageError(f"{flag} {safe_text(out)} lies inside the input {safe_text(item)}; choose another folder")


def check_replaceable(out: Path, kind: str, force: bool = False, flag: str = "--out") -> None:
    """Refuse to replace an existing folder that holds anything edgekit did not write as ``kind``."""
    if force or not out.is_dir():
        return
    if kind in ARTIFACT_EXTRAS:
        doc = read_proof(out / MANIFEST_NAME)
        other = doc.get("kind") if doc is not None and doc.get("schema") == "edgekit.manifest" else None
        if isinstance(other, str) and other != kind:
            raise UsageError(f"{flag} {safe_text(out)} holds an edgekit {safe_text(other)} artifact, not a {kind} one; "
                             "choose another folder (or pass --force to replace it)")
    foreign = foreign_entries(out, kind)
    if foreign:
        what = "a bundle" if kind == "bundle" else f"an edgekit {kind} folder" if kind == "pipeline" else f"an edgekit {kind} artifact"
        raise UsageError(
            f"{flag} {safe_text(out)} holds {safe_text(foreign[0])}, which edgekit did not write as {what}"
            f"{f' (and {len(foreign) - 1} more)' if len(foreign) > 1 else ''}; "
            "choose another folder, move it, or pass --force to replace the folder"
        )


@contextlib.contextmanager
def claim_output(out: str | os.PathLike, kind: str, *, inputs: Iterable = (), force: bool = False,
                 flag: str = "--out") -> Iterator[Path]:
    """Check ``out`` (see the module doc) and hold its lock while the caller writes it."""
    path = normalise_out(out, flag)
    inputs = list(inputs)
    check_not_inputs(path, inputs, flag)
    check_replaceable(path, kind, force, flag)
    with output_lock(path, flag):
        check_replaceable(path, kind, force, flag)  # another run may have finished in between
        yield path


@contextlib.contextmanager
def commit_dir(out: str | os.PathLike, kind: str, *, inputs: Iterable = (), force: bool = False,
               flag: str = "--out") -> Iterator[Path]:
    """``claim_output``, then build the folder under a temporary name and swap it in on success."""
    with claim_output(out, kind, inputs=inputs, force=force, flag=flag) as path, atomic_dir(path) as work:
        yield work


@contextlib.contextmanager
def output_lock(path: Path, flag: str = "--out") -> Iterator[None]:
    """An exclusive lock on ``path`` for this process (``.NAME.lock`` beside it, removed after).

    A second edgekit run on the same output fails at once with a one-line error.
    """
    created = make_dirs(path.parent)
    lock = path.with_name(f".{path.name}.lock")
    while True:
        try:
            fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o644)
        except OSError as exc:
            prune_empty(created)
            raise EdgekitError(f"cannot create output folder {safe_text(path)}: {exc.strerror or exc}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            holder = _read_holder(fd)
            os.close(fd)
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                raise OutputBusyError(
                    f"another edgekit run{f' (pid {holder})' if holder else ''} is writing {safe_text(path)}; "
                    "wait for it to finish or choose another folder"
                ) from None
            raise EdgekitError(f"cannot lock {flag} {safe_text(path)}: {exc.strerror or exc}") from None
        try:
            same = os.fstat(fd).st_ino == os.stat(lock, follow_symlinks=False).st_ino
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)  # the holder removed the file as we opened it: take the new one
    try:
        os.ftruncate(fd, 0)
        os.write(fd, str(os.getpid()).encode())
        yield
    finally:
        with contextlib.suppress(OSError):
            os.unlink(lock)
        os.close(fd)
        prune_empty(created)  # a failed run leaves no empty parent folders (a finished one fills them)


def _read_holder(fd: int) -> str:
    try:
        text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
    except OSError:
        return ""
    return text if text.isdigit() else ""


_SPECIAL = ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
            (stat.S_ISSOCK, "a socket"))


def check_report_paths(outputs: dict[str, str | os.PathLike | None], inputs: Iterable,
                       formats: dict[str, str] | None = None) -> dict[str, Path]:
    """Report files by flag: none a folder, a link, a special file, a repeat of another, an input
    or inside one; none an existing file edgekit did not write.

    ``formats`` maps a flag to what its report is (``json:edgekit.gate``, ``markdown``, ``junit``,
    ``html``; see ``REPORT_FORMATS``): an existing non-empty file there is replaced only when it
    is such a report (without an entry, any edgekit report will do). Call it again right before
    writing: the check is only as fresh as its last run.
    """
    chosen = {flag: Path(path) for flag, path in outputs.items() if path is not None}
    formats = formats or {}
    seen: dict[Path, str] = {}
    resolved_inputs = [(item, Path(os.path.realpath(item))) for item in inputs
                       if item is not None and str(item) and Path(str(item)).exists()]
    for flag, path in chosen.items():
        text = os.fspath(path)
        if not text or "\x00" in text:
            raise UsageError(f"{flag} must name a file")
        check_name_text(text, flag)
        if path.name in ("", ".", ".."):
            raise UsageError(f"{flag} {safe_text(path)} must name a file")
        try:
            info = os.lstat(path)
        except OSError:
            info = None  # absent (or its folder is missing or not a folder: writing says so)
        if info is not None:
            if stat.S_ISLNK(info.st_mode):
                raise UsageError(f"{flag} {safe_text(path)} is a symbolic link; give a plain file path")
            if stat.S_ISDIR(info.st_mode):
                raise UsageError(f"{flag} {safe_text(path)} is a folder; give a file path")
            for test, what in _SPECIAL:
                if test(info.st_mode):
                    raise UsageError(f"{flag} {safe_text(path)} is {what}, not a regular file; give a file path")
        resolved = Path(os.path.realpath(path))
        for item, source in resolved_inputs:
            if resolved == source:
                raise UsageError(f"{flag} {safe_text(path)} would overwrite an input file")
            if source.is_dir() and resolved.is_relative_to(source):
                raise UsageError(f"{flag} {safe_text(path)} would write into the input {safe_text(item)}")
        if resolved in seen:
            raise UsageError(f"{flag} and {seen[resolved]} both write {safe_text(path)}")
        seen[resolved] = flag
        fmt = formats.get(flag)
        if info is not None and info.st_size > 0 and not report_written_by_edgekit(path, fmt):
            raise UsageError(
                f"{flag} {safe_text(path)} exists and edgekit did not write it (it is not an {describe_report_format(fmt)}); "
                "choose another path, or move or delete that file first"
            )
    return chosen


def check_name_text(text: str, flag: str) -> None:
    """Refuse an output name holding a control character (a newline, tab, ESC, DEL, C1)."""
    match = _CONTROL.search(text)
    if match:
        raise UsageError(f"{flag} {safe_text(text)} holds the control character {safe_text(match.group())}; "
                         "choose a name without newlines, tabs or escape codes")


def with_artifact_folders(paths: Iterable) -> list:
    """``paths`` plus the artifact or bundle folder that holds each file among them: a report
    written there would be a foreign file in an artifact (and break a bundle's checksums)."""
    found = []
    for item in paths:
        if item is None:
            continue
        found.append(item)
        path = Path(item)
        if path.is_file() and any((path.parent / proof).is_file() for proof in (MANIFEST_NAME, "bundle.json")):
            found.append(path.parent)
    return found


_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def safe_text(value) -> str:
    """``value`` as text with control characters (ESC, OSC, newlines) escaped, for terminals and reports."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", str(value))

