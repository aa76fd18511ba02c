"""Output safety: edgekit replaces only what it wrote; anything else needs ``--force``.

Every command that writes a folder (``--out``) or a report file (``--json``, ``--junit``, ...)
asks this module first:

- ``normalise_out``: the path is made absolute with its parent's links resolved the way the
  kernel will resolve them; ``.``/``..`` endings, a symbolic link, a mount point, the current
  folder or one above it are refused.
- ``check_not_inputs``: an output equal to, inside, or a parent of any input is refused.
- ``foreign_entries``: an existing folder may be replaced only when it is an edgekit output of
  the same kind (its manifest, bundle.json or pipeline.json proves it) holding nothing else.
- ``claim_output``: all of the above plus a lock, so two runs into one folder cannot interleave.
- ``check_report_paths``: report files may not be folders, repeat each other, or land on or
  inside an input.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import re
from pathlib import Path
from typing import Iterable, Iterator

from edgekit.errors import EdgekitError, UsageError

MANIFEST_NAME = "manifest.json"
REFERENCE_NAME = "reference.npz"
#: What each artifact kind writes beside the model files its manifest lists.
ARTIFACT_EXTRAS = {
    "checkpoint": ("checkpoint.pt", "last.pt", "metrics.jsonl", "tokenizer.json", "profile"),
    "quantized": (REFERENCE_NAME, "tokenizer.json"),  # a language model's vocabulary (lm_runtime.carry_tokenizer)
    "export": (REFERENCE_NAME, "tokenizer.json"),
}
#: The entries of a pipeline run folder (each sub-folder is an artifact it guards on its own).
PIPELINE_ENTRIES = (
    "checkpoint", "quantized", "export", "bench.json", "gate.json", "gate.md", "junit.xml",
    "pipeline.json", "pipeline.md", "report.html",
)
KINDS = (*ARTIFACT_EXTRAS, "bundle", "pipeline")

_TEMP = re.compile(r"^\..+\.(\d+-[a-z0-9_]{8}\.tmp|old-\d+|lock)$")
MAX_PROOF_BYTES = 16 << 20  # a manifest/bundle.json/pipeline.json larger than this proves nothing


class OutputBusyError(EdgekitError):
    """Another edgekit process is writing the same output."""


def normalise_out(out: str | os.PathLike, flag: str = "--out") -> Path:
    """The absolute output path, or a UsageError for one no command should ever replace."""
    text = os.fspath(out)
    if not text or "\x00" in text:
        raise UsageError(f"{flag} must name a folder")
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


def foreign_entries(folder: Path, kind: str) -> list[str]:
    """What in ``folder`` edgekit did not write as an output of ``kind`` (sorted; [] when none).

    A folder with no proof of ownership (manifest of that kind, bundle.json + SHA256SUMS,
    pipeline.json) is foreign as a whole: its first entry is named.
    """
    if kind not in KINDS:
        raise ValueError(f"unknown output kind {kind!r}")
    entries = sorted(p.name for p in folder.iterdir() if not _TEMP.match(p.name))
    if not entries:
        return []
    owned = _owned(folder, kind)
    if owned is None:
        return entries
    return [name for name in entries if name not in owned]


def _owned(folder: Path, kind: str) -> set[str] | None:
    if kind == "bundle":
        return _bundle_owned(folder)
    if kind == "pipeline":
        doc = read_proof(folder / "pipeline.json")
        return set(PIPELINE_ENTRIES) if doc is not None and doc.get("schema") == "edgekit.pipeline" else None
    doc = read_proof(folder / MANIFEST_NAME)
    if doc is None or doc.get("schema") != "edgekit.manifest" or doc.get("kind") != kind:
        return None
    owned = {MANIFEST_NAME, *ARTIFACT_EXTRAS[kind]}
    files = doc.get("files")
    for entry in files if isinstance(files, list) else ():
        if not isinstance(entry, dict):
            continue
        paths = [entry.get("path"), *(d.get("path") for d in entry.get("data_files") or () if isinstance(d, dict))]
        owned.update(p.split("/")[0] for p in paths if isinstance(p, str) and p)
    return owned


def _bundle_owned(folder: Path) -> set[str] | None:
    if read_proof(folder / "bundle.json") is None:
        return None
    sums = folder / "SHA256SUMS"
    try:
        if sums.stat().st_size > MAX_PROOF_BYTES:
            return None
        text = sums.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    owned = {"SHA256SUMS"}
    for line in text.splitlines():
        match = re.match(r"^[0-9a-f]{64} [ *](.+)$", line)
        if match:
            owned.add(match.group(1).split("/")[0])
    return owned


def read_proof(path: Path) -> dict | None:
    try:
        if path.is_symlink() or not path.is_file() or path.stat().st_size > MAX_PROOF_BYTES:
            return None
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError):
        return None
    return doc if isinstance(doc, dict) else None


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
    from edgekit.fileio import atomic_dir

    with claim_output(out, kind, inputs=inputs, force=force, flag=flag) as path, atomic_dir(path) as work:
        yield work


@contextlib.contextmanager
def output_lock(path: Path, flag: str = "--out") -> Iterator[None]:
    """An exclusive lock on ``path`` for this process (``.NAME.lock`` beside it, removed after).

    A second edgekit run on the same output fails at once with a one-line error.
    """
    from edgekit.fileio import make_dirs, prune_empty

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


def check_report_paths(outputs: dict[str, str | os.PathLike | None], inputs: Iterable) -> dict[str, Path]:
    """Report files by flag: none a folder, a link, a repeat of another, an input or inside one."""
    chosen = {flag: Path(path) for flag, path in outputs.items() if path is not None}
    seen: dict[Path, str] = {}
    resolved_inputs = [(item, Path(os.path.realpath(item))) for item in inputs
                       if item is not None and str(item) and Path(str(item)).exists()]
    for flag, path in chosen.items():
        if path.name in ("", ".", ".."):
            raise UsageError(f"{flag} {safe_text(path)} must name a file")
        if path.is_dir():
            raise UsageError(f"{flag} {safe_text(path)} is a folder; give a file path")
        if path.is_symlink():
            raise UsageError(f"{flag} {safe_text(path)} is a symbolic link; give a plain file path")
        resolved = Path(os.path.realpath(path))
        for item, source in resolved_inputs:
            if resolved == source:
                raise UsageError(f"{flag} {safe_text(path)} would overwrite an input file")
            if source.is_dir() and resolved.is_relative_to(source):
                raise UsageError(f"{flag} {safe_text(path)} would write into the input {safe_text(item)}")
        if resolved in seen:
            raise UsageError(f"{flag} and {seen[resolved]} both write {safe_text(path)}")
        seen[resolved] = flag
    return chosen


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

