"""``remote_bench``: time a model on a board over SSH, with the same runner and result schema.

Flow: a bundle folder is checked against its SHA256SUMS (an export folder is bundled first,
in a temporary folder, reproducibly) -> the board is probed and the bundle re-used or copied
(``transfer``) -> ``runner.py MODEL --mode remote ...`` runs there under ``timeout`` (its own
process group) -> its JSON becomes a BenchResult (mode "remote"). ``timeout_s`` (``--timeout``)
bounds all of it from the first connection: the probe, the copy and the run each get only the
time left (plus ``STOP_GRACE_S`` for the board's ``timeout`` to stop the runner).
"""

from __future__ import annotations

import json
import math
import os
import re
import shlex
import tempfile
import uuid
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, Mapping, Sequence

from edgekit.records.result import BenchResult, from_document
from edgekit.bundle.layout import WHEELS_DIR, is_bundle, read_bundle_json
from edgekit.core.errors import InputFileError, RemoteError, UsageError, EdgekitError
from edgekit.remote import scripts, ssh, transfer
from edgekit.remote.hosts import check_remote_path
from edgekit.bundle.build import build_bundle
from edgekit.bundle.verify import verify_checksums
from edgekit.formats.artifacts import load_manifest
from edgekit.core.bounds import check_timeout
from edgekit.formats.limits import check_fits
from edgekit.core.targets import available_targets, load_target

DEFAULT_REMOTE_DIR = "~/.cache/edgekit"
DEFAULT_REMOTE_PYTHON = "python3"
DEFAULT_TIMEOUT_S = 600.0
VENV = "~/edgekit-venv"  # the virtual environment the bundle's README.txt suggests
STOP_GRACE_S = 15.0  # past the deadline: for the board's `timeout -k` to stop the runner and ssh to end
KILL_TIMEOUT_S = 30.0
EXIT_USAGE = 2  # runner.py's exit status for a usage error
_MISSING_MODULE = re.compile(r"No module named '([^']+)'")


@dataclass(frozen=True)
class RemoteRun:
    """A remote benchmark: the result, and where and how it ran."""

    result: BenchResult
    host: str
    remote_path: str
    copied: bool  # False: a matching copy was already on the board


def remote_bench(source: str | os.PathLike, host: str, **options) -> BenchResult:
    """Benchmark ``source`` (a bundle or export folder, or a model file in one) on ``host``.

    Keyword options are those of ``run_remote_bench``. Returns a BenchResult with mode
    "remote"; raises UsageError for bad input, RemoteError when the board or the run fails.
    """
    return run_remote_bench(source, host, **options).result


def run_remote_bench(
    source: str | os.PathLike,
    host: str,
    *,
    target: str | None = None,
    port: int | None = None,
    identity: str | os.PathLike | None = None,
    ssh_options: Sequence[str] = (),
    remote_dir: str = DEFAULT_REMOTE_DIR,
    remote_python: str = DEFAULT_REMOTE_PYTHON,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    threads: int | None = None,
    warmup: int = 10,
    min_runs: int = 50,
    min_time_s: float = 1.0,
    max_runs: int = 100_000,
    batch: int = 1,
    shapes: Mapping[str, Sequence[int]] | None = None,
    fmt: str | None = None,
    on_line: Callable[[str], None] | None = None,
    force: bool = False,
) -> RemoteRun:
    """``remote_bench`` with the facts of the run (see RemoteRun). ``on_line`` receives progress
    lines and the board's stderr as they come; ``timeout_s`` bounds the whole remote run (the
    probe, the copy and the runner), see the module doc."""
    board = ssh.SshTarget.make(host, port, identity, ssh_options)  # validated before anything runs
    base = check_remote_path(remote_dir, "--remote-dir")
    python = check_remote_path(remote_python, "--remote-python")
    runner_args = _runner_args(threads=threads, warmup=warmup, min_runs=min_runs, min_time_s=min_time_s,
                               max_runs=max_runs, batch=batch, shapes=shapes)

    check_timeout(timeout_s)
    say = on_line or (lambda line: None)
    with tempfile.TemporaryDirectory(prefix="edgekit-remote-") as scratch:
        bundle, info = resolve_bundle(source, target, fmt, Path(scratch), force)
        warning = _check_fits(bundle, info, force)  # before anything is copied or started on the board
        if warning:
            say(f"Warning: {warning}")
        from edgekit.bundle import native

        if native.is_native(info):
            python = "sh"  # edgekit-run needs no Python on the board: the probe asks only for a shell
        deadline = transfer.Deadline.after(timeout_s, board.display())  # from the first connection to the board
        placement = transfer.place(board, bundle, info, base, python, on_line=say, deadline=deadline)
        args = ["--format", info["format"], "--mode", "remote", "--target", info["target"], *runner_args]
        if threads is None and info.get("threads"):
            args += ["--threads", str(info["threads"])]
        if info.get("quantized_engine"):
            args += ["--engine", str(info["quantized_engine"])]
        say(f"running {info['model']} on {board.display()} (stopped in {max(0.0, deadline.left()):.0f} s, "
            f"when --timeout {timeout_s:g} s runs out)")
        result = _run(board, placement, python, info, args, deadline, bundle, say)
    how = "copied the bundle to" if placement.copied else "re-used the bundle already at"
    result = replace(result, notes=(f"ran on {board.host} ({how} {placement.path})",) + result.notes)
    return RemoteRun(result, str(board.host), placement.path, placement.copied)


def _check_fits(bundle: Path, info: dict, force: bool) -> str | None:
    """The model against the RAM of the board the bundle was made for (edgekit.formats.limits)."""
    ram_mb = info.get("ram_mb")
    if not (isinstance(ram_mb, int) and not isinstance(ram_mb, bool) and ram_mb > 0):
        if info["target"] not in available_targets():
            return None  # an older bundle for a profile this machine does not know: nothing to compare
        try:
            ram_mb = load_target(info["target"]).ram_mb
        except EdgekitError:
            return None
    size = info.get("model_bytes")
    if not isinstance(size, int) or isinstance(size, bool):
        size = (bundle / info["model"]).stat().st_size
    return check_fits(ram_mb, info["target"], size, info["format"], f"{bundle / info['model']}", force)


def resolve_bundle(source: str | os.PathLike, target: str | None, fmt: str | None, scratch: Path,
                   force: bool = False) -> tuple[Path, dict]:
    """A verified bundle folder for ``source`` and its bundle.json (an export is bundled in ``scratch``)."""
    path = Path(source)
    if not path.exists():
        raise InputFileError(f"not found: {path}")
    if path.is_file():
        if path.name.endswith((".tar.gz", ".tgz")):
            raise UsageError(f"{path} is an archive; give the bundle folder it was made beside (or unpack it)")
        if fmt is None:  # from the suffix (the format table); else from the folder's bundle.json or manifest
            from edgekit import formats

            known = formats.by_suffix(path.suffix)
            fmt = known.name if known else None
        folder = path.parent
    else:
        folder = path
    if is_bundle(folder):
        from edgekit.bundle.layout import REQUIREMENTS
        from edgekit.bundle.requirements import read_requirements
        from edgekit.bundle.verify import plain_files

        plain_files(folder)  # a link or a FIFO (which would block a read) anywhere: refused before any read
        info = read_bundle_json(folder)
        verify_checksums(folder)
        if (folder / REQUIREMENTS).is_file():  # the install hint runs pip -r on it: pins only
            read_requirements(folder / REQUIREMENTS, info["format"])
        if path.is_file() and path.name != info["model"]:
            raise UsageError(f"{path} is not the model of the bundle {folder} (that is {info['model']})")
        if target and target != info["target"]:
            raise UsageError(f"{folder} was bundled for {info['target']!r}, not {target!r}; bundle it again for {target}")
        if fmt and fmt != info["format"]:
            raise UsageError(f"{folder} holds a {info['format']} model, not {fmt}")
        return folder, info
    _, manifest = load_manifest(folder)
    if manifest.kind != "export":
        raise UsageError(f"{folder} is neither a bundle nor an export folder; export it (edgekit export) first")
    if path.is_file():
        listed = next((f for f in manifest.files if f.path == path.name and fmt in (None, f.format)), None)
        if listed is None:
            raise UsageError(f"{path} is not {f'the {fmt}' if fmt else 'a'} model listed in {folder}/manifest.json")
        fmt = listed.format
    # A bundle made on the fly is reproducible (stamped with the export's time), so the copy on
    # the board is re-used by the next run of the same export.
    out = scratch / "bundle"
    build_bundle(folder, target, out, fmt=fmt, created=manifest.created or "1970-01-01T00:00:00+00:00",
                 archive=False, force=force)
    return out, read_bundle_json(out)


def _runner_args(*, threads, warmup, min_runs, min_time_s, max_runs, batch, shapes) -> list[str]:
    minimum = {"threads": (threads, 1), "warmup": (warmup, 0), "min-runs": (min_runs, 1),
               "max-runs": (max_runs, 1), "batch": (batch, 1)}
    for name, (value, low) in minimum.items():
        if value is None and name == "threads":
            continue
        if not isinstance(value, int) or isinstance(value, bool) or value < low:
            raise UsageError(f"--{name} must be an integer of at least {low}, got {value!r}")
    if not (isinstance(min_time_s, (int, float)) and math.isfinite(min_time_s) and min_time_s >= 0):
        raise UsageError(f"--min-time must be 0 or more seconds, got {min_time_s!r}")
    if max_runs < min_runs:
        raise UsageError(f"--max-runs ({max_runs}) must be at least --min-runs ({min_runs})")
    args = ["--warmup", str(warmup), "--min-runs", str(min_runs), "--min-time", repr(float(min_time_s)),
            "--max-runs", str(max_runs), "--batch", str(batch)]
    if threads is not None:
        args += ["--threads", str(threads)]
    for name, dims in (shapes or {}).items():
        if not re.fullmatch(r"[A-Za-z0-9_.:/-]+", str(name)) or not dims or any(int(d) <= 0 for d in dims):
            raise UsageError(f"shape of input {name!r} must be positive dimensions, got {dims!r}")
        args += ["--shape", f"{name}={'x'.join(str(int(d)) for d in dims)}"]
    return args


def _run(board: ssh.SshTarget, placement: transfer.Placement, python: str, info: dict, args: list[str],
         deadline: transfer.Deadline, bundle: Path, say) -> BenchResult:
    run_id = uuid.uuid4().hex
    left = deadline.left()
    if left <= 0:
        raise deadline.expired()
    limit = f"{max(1, math.ceil(left))}"
    try:
        done = ssh.run(board, scripts.RUN, [placement.base, placement.name, python, limit, run_id, info["model"], *args],
                       timeout_s=left + STOP_GRACE_S, on_line=lambda line: say(f"[{board.host}] {line}"))
    except KeyboardInterrupt:  # without a terminal the runner would outlive its connection
        _stop(board, placement, run_id)
        raise
    where = board.display()
    if done.timed_out:  # the connection hung past the runner's own limit: stop the group from outside
        _stop(board, placement, run_id)
        raise deadline.expired()
    code = done.returncode
    if code == ssh.SSH_FAILED:
        raise ssh.connection_error(board, done.stderr)
    if code in scripts.TIMEOUT_EXITS:
        raise deadline.expired()
    if code == scripts.EXIT_NO_PYTHON:
        raise transfer.python_missing(board, python)
    if code == scripts.EXIT_NO_BUNDLE:
        raise RemoteError(f"the bundle vanished from {where}:{placement.path} during the run; run again")
    if code != 0:
        raise _runner_failure(board, placement, python, bundle, code, done.stderr)
    try:
        doc = json.loads(done.stdout)
        result = from_document(doc, f"the runner's output on {where}")[0]
    except (ValueError, InputFileError) as exc:
        raise RemoteError(f"the runner on {where} wrote no valid bench result: {str(exc).splitlines()[0]}") from None
    if result.mode != "remote":
        raise RemoteError(f"the runner on {where} reported mode {result.mode!r}, not 'remote'; is runner.py current?")
    if result.model.sha256 and result.model.sha256 != info["model_sha256"]:
        raise RemoteError(f"the model timed on {where} is not the bundled one (sha256 differs)")
    return result


def _stop(board: ssh.SshTarget, placement: transfer.Placement, run_id: str) -> None:
    """Best effort: stop a run's process group on the board over a fresh connection."""
    try:
        ssh.run(board, scripts.KILL, [placement.base, run_id], timeout_s=KILL_TIMEOUT_S)
    except RemoteError:
        pass


def _runner_failure(board, placement, python, bundle: Path, code: int, stderr) -> Exception:
    text = "\n".join(stderr)
    missing = _MISSING_MODULE.search(text)
    where = board.display()
    if missing:
        module = missing.group(1).split(".")[0]
        return RemoteError(f"{module} is not installed for {python} on {where}; {_install_hint(board, placement, python, bundle)}")
    lines = [line.strip() for line in stderr if line.strip() and not line.startswith("edgekit:")]
    last = lines[-1].removeprefix("Error: ") if lines else (
        f"killed by signal {code - 128}" if code > 128 else f"exit status {code}")
    if code == EXIT_USAGE:
        return UsageError(f"the runner on {where} refused the settings: {last}")
    return RemoteError(f"the benchmark on {where} failed: {last}")


def _install_hint(board, placement, python: str, bundle: Path) -> str:
    """The one command that installs the bundle's requirements on the board (a venv for the
    system python: Raspberry Pi OS refuses system-wide pip installs)."""
    offline = (bundle / WHEELS_DIR).is_dir()
    source = "--no-index --find-links wheels -r requirements.txt" if offline else "-r requirements.txt"
    cd = f"cd {shlex.quote(_shell_path(placement.path))}"
    if python == DEFAULT_REMOTE_PYTHON:
        remote = f"{cd} && python3 -m venv {VENV} && {VENV}/bin/pip install {source}"
        then = f", then pass --remote-python {VENV}/bin/python"
    else:
        remote = f"{cd} && {_word(python)} -m pip install {source}"
        then = ""
    where = "from the bundle's wheels" if offline else "(the board needs network; bundle with --wheels for an offline one)"
    return f"install them {where}: {shlex.join([*board.ssh_words(), remote])}{then}"


def _word(path: str) -> str:
    """Shell-quote a remote path, keeping a leading ``~/`` outside the quotes (so it expands)."""
    return "~/" + shlex.quote(path[2:]) if path.startswith("~/") else shlex.quote(path)


def _shell_path(path: str) -> str:
    """A remote path for a command typed after ``ssh host``, which starts in the home folder."""
    if path == "~":
        return "."
    return path[2:] if path.startswith("~/") else path
