"""Atomic writes: an interrupted run never leaves a half-written file under the final name."""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import math
import os
import re
import shutil
import stat
import tempfile
from pathlib import Path
from typing import Iterator

from edgekit.core.errors import EdgekitError, InputFileError, UsageError, first_line


def _fsync_dir(path: Path) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _temp_prefix(final: Path) -> str:
    """``.NAME.PID-``: temporaries beside ``final`` carry the pid of the process that made them."""
    return f".{final.name}.{os.getpid()}-"


def temp_sibling(final: str | os.PathLike) -> Path:
    """A fresh, unused name beside ``final`` in edgekit's temporary pattern (nothing is created)."""
    import secrets

    final = Path(final)
    alphabet = "abcdefghijklmnopqrstuvwxyz0123456789_"
    while True:
        token = "".join(secrets.choice(alphabet) for _ in range(8))
        path = final.with_name(f"{_temp_prefix(final)}{token}.tmp")
        if not path.exists():
            return path


def _pid_alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):
        return True
    return True


def clean_stale_temps(final: str | os.PathLike) -> list[Path]:
    """Remove what killed runs left beside ``final``: edgekit's own temporary names only.

    Those are ``.NAME.PID-XXXXXXXX.tmp`` (files from ``atomic_path``, folders from
    ``atomic_dir``) and ``.NAME.old-PID`` (a folder being replaced), whose process PID no longer
    runs, plus ``.NAME.XXXXXXXX.tmp`` from edgekit versions that did not record the pid. Anything
    else, however it is named, is left alone. Returns what was removed.
    """
    final = Path(final)
    parent = final.parent
    name = re.escape(final.name)
    with_pid = re.compile(rf"^\.{name}\.(\d+)-[a-z0-9_]{{8}}\.tmp\Z|^\.{name}\.old-(\d+)\Z")
    without_pid = re.compile(rf"^\.{name}\.[a-z0-9_]{{8}}\.tmp\Z")
    removed = []
    try:
        entries = list(parent.iterdir())
    except OSError:
        return removed
    for entry in entries:
        match = with_pid.match(entry.name)
        if match:
            if _pid_alive(int(match.group(1) or match.group(2))):
                continue
        elif not without_pid.match(entry.name):
            continue
        try:
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry)
            else:
                entry.unlink()
        except OSError:
            continue
        removed.append(entry)
    return removed


def _current_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


@contextlib.contextmanager
def atomic_path(final: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path beside ``final``; rename it over ``final`` only on success."""
    final = Path(final)
    parent = final.parent
    if final.is_dir():
        raise UsageError(f"output path {final} is a folder; name a file")
    created = make_dirs(parent)
    clean_stale_temps(final)
    try:
        fd, tmp_name = tempfile.mkstemp(prefix=_temp_prefix(final), suffix=".tmp", dir=parent)
    except OSError as exc:  # e.g. a folder of /proc: it exists, but nothing can be created in it
        prune_empty(created)
        raise EdgekitError(f"cannot write output file {final}: {exc.strerror or exc}") from None
    os.close(fd)
    tmp = Path(tmp_name)
    done = False
    try:
        yield tmp
        with open(tmp, "rb+") as fh:
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o666 & ~_current_umask())  # mkstemp creates 0600; match a normal open()
        os.replace(tmp, final)
        done = True
        _fsync_dir(parent)
    except Exception as exc:
        _disk_full_instead(exc, parent, final)
        raise
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        if not done:
            prune_empty(created)


DISK_FULL_FREE_BYTES = 1 << 20


def _disk_full_instead(exc: Exception, folder: Path, final: Path) -> None:
    """Raise ENOSPC for a write into ``folder`` that failed while its filesystem is full.

    Some writers never report a full disk: torch's C++ zip writer and the TorchScript ONNX
    exporter leave a cut file behind and the next step fails on it ("wire format was corrupt",
    "failed to find proper ai.onnx domain"). Whatever failed while writing an output, with less
    than ``DISK_FULL_FREE_BYTES`` left where it was being written, is reported as what it is.
    """
    if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return
    try:
        free = shutil.disk_usage(folder).free
    except OSError:
        return
    if free < DISK_FULL_FREE_BYTES:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(final)) from exc


def write_bytes(final: str | os.PathLike, data: bytes) -> Path:
    with atomic_path(final) as tmp:
        tmp.write_bytes(data)
    return Path(final)


def write_text(final: str | os.PathLike, text: str) -> Path:
    return write_bytes(final, text.encode("utf-8"))


def write_json(final: str | os.PathLike, obj) -> Path:
    return write_text(final, json.dumps(obj, indent=2, sort_keys=True) + "\n")


MAX_JSON_BYTES = 64 << 20  # manifests, bundle descriptions, bench results: far below this
MAX_JSON_DEPTH = 32
MAX_TOML_BYTES = 1 << 20
MAX_INT_DIGITS = 19  # every integer edgekit reads fits in 64 bits (TOML's own limit, too)
INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1


class NotJSONError(InputFileError):
    """Text that is not JSON at all (as opposed to JSON whose numbers or nesting are refused)."""


class _Malformed(Exception):
    """Raised from inside a parser hook; becomes the InputFileError naming the file."""


def _parse_int(text: str) -> int:
    digits = len(text) - text.startswith("-")
    if digits > MAX_INT_DIGITS:
        raise _Malformed(f"an integer of {digits} digits (at most {MAX_INT_DIGITS})")
    value = int(text)
    if not INT64_MIN <= value <= INT64_MAX:
        raise _Malformed(f"integer {text} is outside the 64-bit range")
    return value


def _parse_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value) and text.lstrip("+-").lower() not in ("inf", "nan"):
        raise _Malformed(f"number {text[:24]}{'...' if len(text) > 24 else ''} is out of range (it overflows to infinity)")
    return value


def _constant(finite: bool):
    def parse(token: str) -> float:
        if finite:
            raise _Malformed(f"{token} is not allowed here (a finite number is)")
        return float(token.replace("Infinity", "inf"))

    return parse



def read_regular(path: Path, limit: int, head: bool = False, tail: bool = False) -> bytes | None:
    """A regular file's bytes, never through a link (a FIFO is never waited on): all of them, or
    None when there are more than ``limit`` (or it is no regular file, or unreadable); with
    ``head``/``tail`` its first/last ``limit``. For files edgekit may not own: proofs and markers."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or (info.st_size > limit and not (head or tail)):
            return None
        return os.pread(fd, limit, max(0, info.st_size - limit) if tail else 0)
    except OSError:
        return None
    finally:
        os.close(fd)


def tree_size(path: Path) -> tuple[int, int]:
    """(bytes, files) under ``path``, never following links; unreadable folders count as empty."""
    try:
        if path.is_symlink() or not path.is_dir():
            return path.lstat().st_size, 1
    except OSError:
        return 0, 0
    total = files = 0
    stack = [path]
    while stack:
        try:
            entries = list(os.scandir(stack.pop()))
        except OSError:
            continue
        for entry in entries:
            try:
                if entry.is_dir(follow_symlinks=False):
                    stack.append(Path(entry.path))
                else:
                    total += entry.stat(follow_symlinks=False).st_size
                    files += 1
            except OSError:
                continue
    return total, files

def _read_bounded(path: Path, what: str, max_bytes: int) -> bytes:
    """At most ``max_bytes`` of a regular file, as bytes; anything else is an InputFileError."""
    try:
        if not path.is_file():
            raise InputFileError(f"{what} not found: {path}")
        with open(path, "rb") as fh:
            data = fh.read(max_bytes + 1)
    except OSError as exc:
        raise InputFileError(f"cannot read {what} {path}: {exc.strerror or exc}") from None
    if len(data) > max_bytes:
        size = f"{max_bytes >> 20} MiB" if max_bytes >= 1 << 20 else f"{max_bytes >> 10} KiB"
        raise InputFileError(f"{what} {path} is larger than {size}; refusing to read it")
    return data


def loads_json(text: str | bytes, where: str, *, finite: bool = False, depth: int = MAX_JSON_DEPTH):
    """A JSON value from text we did not necessarily write: integers fit in 64 bits, no number
    overflows to infinity, nesting is at most ``depth`` levels, and with ``finite`` NaN and
    Infinity are refused too. Anything else is an InputFileError naming ``where``."""
    try:
        if isinstance(text, bytes):
            text = text.decode("utf-8")
        obj = json.loads(text, parse_int=_parse_int, parse_float=_parse_float, parse_constant=_constant(finite))
    except _Malformed as exc:
        raise InputFileError(f"{where} is malformed: {exc}") from None
    except RecursionError:
        raise InputFileError(f"{where} is malformed: nested too deeply (more than {depth} levels)") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise NotJSONError(f"{where} is not valid JSON ({exc})") from None
    except ValueError as exc:  # anything else json's scanner refuses
        raise InputFileError(f"{where} is malformed: {first_line(exc, 200)}") from None
    if json_depth(obj, depth + 1) > depth:
        raise InputFileError(f"{where} is malformed: nested more than {depth} levels deep")
    return obj


def read_json(path: str | os.PathLike, what: str = "JSON file", *, finite: bool = False,
              max_bytes: int = MAX_JSON_BYTES) -> dict:
    """A JSON object from a file we did not necessarily write: size, nesting and numbers are
    bounded (see ``loads_json``); NaN/Infinity are refused with ``finite``."""
    path = Path(path)
    obj = loads_json(_read_bounded(path, what, max_bytes), f"{what} {path}", finite=finite)
    if not isinstance(obj, dict):
        raise InputFileError(f"{what} {path} must hold a JSON object, not {type(obj).__name__}")
    return obj


def loads_toml(text: str, where: str, *, depth: int = MAX_JSON_DEPTH) -> dict:
    """A TOML document from text we did not necessarily write: integers fit in 64 bits (as
    TOML requires), no float overflows to infinity (``inf``/``nan`` written as such are kept for
    the schema to judge), nesting is at most ``depth`` levels."""
    import tomllib

    try:
        data = tomllib.loads(text, parse_float=_parse_float)
    except _Malformed as exc:
        raise InputFileError(f"{where} is malformed: {exc}") from None
    except RecursionError:
        raise InputFileError(f"{where} is malformed: nested too deeply (more than {depth} levels)") from None
    except tomllib.TOMLDecodeError as exc:
        raise InputFileError(f"{where} is not valid TOML: {exc}") from None
    except ValueError as exc:  # e.g. int() refusing a 5,000-digit integer
        reason = first_line(exc, 200)
        if "integer string conversion" in reason:
            reason = "an integer of thousands of digits is outside TOML's 64-bit range"
        raise InputFileError(f"{where} is malformed: {reason}") from None
    if json_depth(data, depth + 1) > depth:
        raise InputFileError(f"{where} is malformed: nested more than {depth} levels deep")
    huge = _huge_int(data)
    if huge is not None:
        raise InputFileError(f"{where} is malformed: an integer of {huge} digits is outside TOML's 64-bit range")
    return data


def read_toml(path: str | os.PathLike, what: str = "TOML file", *, max_bytes: int = MAX_TOML_BYTES) -> dict:
    """A TOML file, bounded like ``loads_toml`` and in size; not UTF-8 is not valid TOML."""
    path = Path(path)
    data = _read_bounded(path, what, max_bytes)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputFileError(f"{what} {path} is not valid TOML: {exc}") from None
    return loads_toml(text, f"{what} {path}")


def _huge_int(obj) -> int | None:
    """How many digits the first integer outside 64 bits has (None: there is none)."""
    stack = [obj]
    while stack:
        value = stack.pop()
        if isinstance(value, dict):
            stack.extend(value.values())
        elif isinstance(value, list):
            stack.extend(value)
        elif isinstance(value, int) and not isinstance(value, bool) and not INT64_MIN <= value <= INT64_MAX:
            # tomllib gives no integer of more than 4,300 digits (int() refuses them): str() is safe
            return len(str(abs(value))) if value.bit_length() < 14_000 else int(value.bit_length() * math.log10(2)) + 1
    return None


MAX_NPZ_BYTES = 1 << 30
MAX_NPZ_MEMBERS = 4096
MAX_NPY_HEADER = 10_000


def read_npz(path: str | os.PathLike, what: str = ".npz file", *, max_bytes: int = MAX_NPZ_BYTES) -> dict:
    """The arrays of an ``.npz`` we did not necessarily write, read strictly: no pickles (object
    arrays), no encrypted or repeated members, at most ``max_bytes`` expanded (declared and as
    read: no zip bombs), and every member's ``.npy`` header must match the bytes that follow
    (a header claiming 10^12 elements allocates nothing). Anything else is one InputFileError."""
    import zipfile

    path = Path(path)
    where = f"{what} {path}"
    try:
        if not path.is_file():
            raise InputFileError(f"{what} not found: {path}")
        archive = zipfile.ZipFile(path)
    except InputFileError:
        raise
    except Exception as exc:  # noqa: BLE001 - BadZipFile, struct/zlib errors, odd names, OSError
        raise InputFileError(f"cannot read {where}: not a readable .npz archive ({first_line(exc, 200)})") from None
    with archive:
        members = archive.infolist()
        if len(members) > MAX_NPZ_MEMBERS:
            raise InputFileError(f"{where} is malformed: {len(members)} members (at most {MAX_NPZ_MEMBERS})")
        if sum(m.file_size for m in members) > max_bytes:
            raise InputFileError(f"{where} expands past {max_bytes >> 20} MiB; refusing to read it")
        arrays, total = {}, 0
        for member in members:
            name = member.filename[:-4] if member.filename.endswith(".npy") else member.filename
            if member.flag_bits & 0x1:
                raise InputFileError(f"{where} is malformed: member {name[:60]!r} is encrypted")
            if name in arrays:
                raise InputFileError(f"{where} is malformed: member {name[:60]!r} appears twice")
            try:
                with archive.open(member) as fh:
                    data = fh.read(member.file_size + 1)  # a member holding more than it says stops here
            except Exception as exc:  # noqa: BLE001 - CRC, zlib/bz2/lzma errors, unsupported methods
                raise InputFileError(f"cannot read {where}: member {name[:60]!r} is damaged ({first_line(exc, 200)})") from None
            total += len(data)
            if len(data) != member.file_size or total > max_bytes:
                raise InputFileError(f"{where} is malformed: member {name[:60]!r} holds more than its declared size")
            arrays[name] = npy_array(data, f"{where} member {name[:60]!r}")
    return arrays


def npy_array(data: bytes, where: str):
    """One ``.npy`` from bytes: numeric or text dtypes only (no pickles); its header's shape must
    account for exactly the bytes that follow."""
    import io
    import warnings

    import numpy as np

    fh = io.BytesIO(data)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # numpy's literal parser warns about a hostile header's escapes
            version = np.lib.format.read_magic(fh)
            if version == (1, 0):
                shape, fortran, dtype = np.lib.format.read_array_header_1_0(fh, max_header_size=MAX_NPY_HEADER)
            elif version == (2, 0):
                shape, fortran, dtype = np.lib.format.read_array_header_2_0(fh, max_header_size=MAX_NPY_HEADER)
            else:
                raise ValueError(f"unsupported .npy version {version}")
    except Exception as exc:  # noqa: BLE001 - numpy's header parser raises many types on junk
        raise InputFileError(f"{where} is not a readable .npy array ({first_line(exc, 200)})") from None
    if dtype.hasobject:
        raise InputFileError(f"{where} holds Python objects (a pickle, allow_pickle); refusing to load it")
    offset = fh.tell()
    count = math.prod(shape)
    if count * dtype.itemsize != len(data) - offset:
        shown = list(shape)[:8]
        raise InputFileError(f"{where} is malformed: its header claims shape {shown} of {dtype} "
                             f"but {len(data) - offset} bytes follow")
    try:
        array = np.frombuffer(data, dtype=dtype, count=count, offset=offset)
        return array.reshape(shape, order="F" if fortran else "C").copy()
    except Exception as exc:  # noqa: BLE001 - e.g. a zero-sized dtype
        raise InputFileError(f"{where} is not a readable .npy array ({first_line(exc, 200)})") from None


def json_depth(obj, limit: int = MAX_JSON_DEPTH + 1) -> int:
    """Nesting depth of a parsed JSON value (stops counting past ``limit``)."""
    depth, level = 0, [obj]
    while level and depth <= limit:
        depth += 1
        nxt = []
        for value in level:
            if isinstance(value, dict):
                nxt.extend(v for v in value.values() if isinstance(v, (dict, list)))
            elif isinstance(value, list):
                nxt.extend(v for v in value if isinstance(v, (dict, list)))
        level = nxt
    return depth


def ensure_writable_dir(path: str | os.PathLike) -> Path:
    path = Path(path)
    make_dirs(path)
    return path


def make_dirs(path: str | os.PathLike) -> list[Path]:
    """Create ``path`` and missing parents; the folders it created (outermost first).

    Raises EdgekitError when it cannot be created or written (exit 1, "output folder").
    """
    path = Path(path)
    missing = []
    probe = path
    while not probe.exists() and probe != probe.parent:
        missing.append(probe)
        probe = probe.parent
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        # a name no filesystem takes (a 300-character component, a loop of links) is the user's input
        error = UsageError if exc.errno in (errno.ENAMETOOLONG, errno.ELOOP) else EdgekitError
        raise error(f"cannot create output folder {path}: {exc.strerror or exc}") from None
    if not path.is_dir():
        raise EdgekitError(f"cannot create output folder {path}: a file is in the way")
    if not os.access(path, os.W_OK | os.X_OK):
        raise EdgekitError(f"output folder {path} is not writable")
    return list(reversed(missing))


def prune_empty(created: list[Path]) -> None:
    """Remove folders ``make_dirs`` created, innermost first, as long as they are empty."""
    for folder in reversed(created):
        try:
            folder.rmdir()
        except OSError:
            return


def swap_in_dir(new: str | os.PathLike, final: str | os.PathLike, then=None) -> None:
    """Make the folder ``new`` appear as ``final``; a previous ``final`` is replaced and removed.

    On Linux the two folders trade places in one ``renameat2(RENAME_EXCHANGE)`` call, so there
    is no moment without a complete ``final``; elsewhere the old folder is renamed aside first.
    ``then`` runs right after the swap, before the old folder is removed (a sibling file that
    must follow the folder, e.g. a bundle's archive, commits there).
    """
    new, final = Path(new), Path(final)
    then = then or (lambda: None)
    if not final.exists():
        os.replace(new, final)
        then()
        _fsync_dir(final.parent)
        return
    old = final.with_name(f".{final.name}.old-{os.getpid()}")
    if old.exists():  # left by an earlier process with this pid
        shutil.rmtree(old, ignore_errors=True)
    if _exchange(new, final):
        os.replace(new, old)  # the previous folder, now under the work name: out of the way first
    else:
        os.replace(final, old)
        os.replace(new, final)
    then()
    _fsync_dir(final.parent)
    shutil.rmtree(old, ignore_errors=True)


def _exchange(a: Path, b: Path) -> bool:
    """Atomically swap two paths (Linux renameat2 RENAME_EXCHANGE); False where unsupported."""
    import sys

    if not sys.platform.startswith("linux"):
        return False
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):
        return False
    at_fdcwd, rename_exchange = -100, 2
    renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    renameat2.restype = ctypes.c_int
    if renameat2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange) == 0:
        return True
    return False  # EINVAL/ENOSYS (filesystem or kernel without it): fall back


@contextlib.contextmanager
def atomic_dir(final: str | os.PathLike, overwrite: bool = True, then=None) -> Iterator[Path]:
    """Build a folder under a temporary name, then swap it in as ``final`` on success.

    On failure the temporary folder is removed and any previous ``final`` is untouched. What
    killed runs left beside ``final`` (see ``clean_stale_temps``) is removed first.
    """
    final = Path(final)
    if final.exists() and not final.is_dir():
        raise EdgekitError(f"output path {final} exists and is not a folder")
    if final.exists() and not overwrite:
        raise EdgekitError(f"output folder {final} already exists")
    created = make_dirs(final.parent)
    clean_stale_temps(final)
    try:
        tmp = Path(tempfile.mkdtemp(prefix=_temp_prefix(final), suffix=".tmp", dir=final.parent))
    except OSError as exc:
        prune_empty(created)
        raise EdgekitError(f"cannot create output folder {final}: {exc.strerror or exc}") from None
    os.chmod(tmp, 0o777 & ~_current_umask())
    done = False
    try:
        yield tmp
        swap_in_dir(tmp, final, then)
        done = True
    except Exception as exc:
        _disk_full_instead(exc, final.parent, final)
        raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
        if not done:
            prune_empty(created)  # a failed run leaves no empty folders behind either


@contextlib.contextmanager
def working_dir(path: str | os.PathLike) -> Iterator[Path]:
    """Run third-party code that writes into the current folder inside ``path`` instead
    (edgekit's commands are single-threaded while they do; the old folder comes back after)."""
    previous = os.getcwd()
    os.chdir(path)
    try:
        yield Path(path)
    finally:
        os.chdir(previous)


def sha256_file(path: str | os.PathLike, chunk: int = 1 << 20) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(chunk):
            digest.update(block)
    return digest.hexdigest()


# Formats with a signature in their first bytes, for a file that must be something else (ONNX has
# none): a GGUF, a zip or a pickle named .onnx is named for what it is instead of a parser's error.
_SIGNATURES = (
    (b"GGUF", "a GGUF file"), (b"PK\x03\x04", "a zip archive (a PyTorch checkpoint, an .npz)"),
    (b"\x93NUMPY", "a .npy array"), (b"\x89PNG", "a PNG image"), (b"\xff\xd8\xff", "a JPEG image"),
    (b"%PDF", "a PDF document"), (b"%!PS", "a PostScript file"), (b"\x7fELF", "an ELF program"),
    (b"\x1f\x8b", "a gzip archive"), (b"#!", "a script"),
)


def signature_kind(path: str | os.PathLike) -> str | None:
    """What ``path``'s first bytes prove it is, among common formats with a signature, else None."""
    with open(path, "rb") as fh:
        head = fh.read(16)
    if head[4:8] in (b"ET12", b"ET13", b"ET14"):
        return "an ExecuTorch program (.pte)"
    if len(head) >= 2 and head[0] == 0x80 and 2 <= head[1] <= 5:
        return "a Python pickle"
    if len(head) >= 9 and head[8:9] == b"{" and int.from_bytes(head[:8], "little") < 100 << 20:
        return "a safetensors file"
    return next((what for magic, what in _SIGNATURES if head.startswith(magic)), None)
