"""Issue 19, "never lose a user's files, round two": the ways an attack run found around the output
guard of issue 11, each through the real CLI.

1. the cache: a cache root that is home, the current folder or above them is refused; only part
   folders carrying edgekit's tag, and in them only entries edgekit recognises, are ever removed;
2. every level of a tree and every member of an archive: bundle folders and archives, run
   folders (``profile/``), artifact sub-folders and pipeline run folders are proven at every depth;
3. report files: an existing file is replaced only when edgekit wrote it (its schema or generator
   mark), never a special file;
4. control characters in output names.

Every hostile case checks: the exit code, exactly one ``Error:`` line, no traceback, the user's
files unchanged (``snapshot``), nothing planted, no child process left. Every class also has its
positive side: edgekit still replaces what it wrote itself, without ``--force``.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import shutil
import socket
import stat
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest
from corpus.hostile import assert_one_line_error, child_pids, snapshot
from typer.testing import CliRunner

from edgekit.cli.app import app

runner = CliRunner()
TESTS = Path(__file__).resolve().parent.parent
REPO = TESTS.parent
GOOD_BENCH = TESTS / "corpus" / "bench" / "good.json"
CALIB_DIGITS = REPO / "calib_data" / "digits"
EDGEKIT = Path(sys.executable).parent / "edgekit"


def _refused(result, code: int, message: str | None, folder: Path, before: dict, children: set[int]) -> None:
    """One ``Error:`` line (exit ``code``), and ``folder`` exactly as it was: nothing removed, changed or added."""
    assert_one_line_error(result, code, message)
    assert snapshot(folder) == before
    assert child_pids() <= children


def _run(args: list[str], env: dict | None = None):
    return runner.invoke(app, [str(a) for a in args], env=env)


# =============================================================================================
# 1. the cache


def _users_files(folder: Path) -> None:
    """A user's own files with the names of edgekit's cache parts (what the attack run deleted)."""
    (folder / "text").mkdir(parents=True, exist_ok=True)
    (folder / "text" / "thesis.txt").write_text("chapter 1\n")
    (folder / "calibration").write_text("my calibration notes\n")  # a plain file where a part folder belongs
    (folder / "rootfs" / "etc").mkdir(parents=True, exist_ok=True)
    (folder / "rootfs" / "etc" / "fstab").write_text("/dev/sda1 / ext4\n")
    (folder / "native").mkdir(exist_ok=True)
    (folder / "native" / "runner.c").write_text("int main(void) { return 0; }\n")


def _cache_env(monkeypatch, tmp_path, case: str) -> tuple[Path, Path]:
    """Set HOME / XDG_CACHE_HOME / EDGEKIT_CACHE_DIR and the current folder for ``case``: the
    folder edgekit would take as its cache root holds the user's files. Returns (that folder,
    the folder to snapshot)."""
    home = tmp_path / "home"
    work = tmp_path / "work"
    (work / "sub").mkdir(parents=True)
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.delenv("EDGEKIT_CACHE_DIR", raising=False)
    monkeypatch.chdir(work / "sub")
    if case == "home":
        root, env = home, str(home)
    elif case == "home-trailing-slash":
        root, env = home, f"{home}/"
    elif case == "home-via-link":
        os.symlink(home, tmp_path / "link")
        root, env = home, str(tmp_path / "link")
    elif case == "above-home":
        root, env = tmp_path, str(tmp_path)
    elif case == "home-by-xdg":  # XDG_CACHE_HOME/edgekit is the home folder itself
        home = tmp_path / "users" / "edgekit"
        home.mkdir(parents=True)
        monkeypatch.setenv("HOME", str(home))
        monkeypatch.setenv("XDG_CACHE_HOME", str(home.parent))
        root, env = home, None
    elif case == "cwd-dot":
        monkeypatch.chdir(work)
        root, env = work, "."
    elif case == "cwd-absolute":
        root, env = work / "sub", str(work / "sub")
    elif case == "parent-of-cwd":
        root, env = work, ".."
    else:
        raise AssertionError(case)
    if env is not None:
        monkeypatch.setenv("EDGEKIT_CACHE_DIR", env)
    _users_files(root)
    return root, tmp_path


UNSAFE_ROOTS = ["home", "home-trailing-slash", "home-via-link", "above-home", "home-by-xdg", "cwd-dot",
                "cwd-absolute", "parent-of-cwd"]


@pytest.mark.parametrize("case", UNSAFE_ROOTS)
def test_cache_clear_refuses_a_root_no_cache_may_use(case, tmp_path, monkeypatch):
    _, watched = _cache_env(monkeypatch, tmp_path, case)
    before, children = snapshot(watched), child_pids()
    for args in (["cache", "--clear"], ["cache", "--clear", "text", "calibration"], ["cache", "rootfs", "--clear", "--json"]):
        _refused(_run(args), 2, "is the current folder or a folder above it" if case.startswith(("cwd", "parent"))
                 else "is your home folder or a folder above it", watched, before, children)


@pytest.mark.parametrize("case", ["home", "cwd-dot", "above-home"])
def test_cache_writers_create_no_part_in_a_root_no_cache_may_use(case, tmp_path, monkeypatch):
    from edgekit.core.cache import part_dir
    from edgekit.data.text import load_text_corpus
    from edgekit.core.errors import UsageError
    from edgekit.quantize.calibration.cache import CalibrationCache
    from edgekit.quantize.calibration.calibrators import TensorRange

    root, watched = _cache_env(monkeypatch, tmp_path, case)
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n\n".join(f"paragraph {i} of some text" for i in range(40)))
    shutil.rmtree(root / "text")  # where the writer would now put its part
    (root / "calibration").unlink()
    before = snapshot(watched)
    load_text_corpus(corpus)  # works, without its cache
    CalibrationCache().store("0" * 64, {"x": TensorRange(0.0, 1.0)}, 1, {})
    assert snapshot(watched) == before
    with pytest.raises(UsageError, match="cache folder"):
        part_dir("native")  # what the native builds will call
    assert snapshot(watched) == before


def test_quantize_writes_no_calibration_part_into_home(digits_checkpoint, tmp_path, monkeypatch):
    _, watched = _cache_env(monkeypatch, tmp_path, "home")
    (tmp_path / "home" / "calibration").unlink()  # the part folder would be created here
    before = snapshot(watched)
    out = tmp_path / "q"
    result = _run(["quantize", digits_checkpoint, "--method", "static", "--format", "onnx", "--calib", CALIB_DIGITS,
                   "--out", out])
    assert result.exit_code == 0, result.stderr
    assert {k: v for k, v in snapshot(watched).items() if not k.startswith("q")} == before


@pytest.fixture
def shared(tmp_path, monkeypatch) -> Path:
    """A cache root that may be used (not home, not the current folder), as edgekit sees it."""
    root = tmp_path / "shared"
    root.mkdir()
    monkeypatch.setenv("EDGEKIT_CACHE_DIR", str(root))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    return root


def test_cache_clear_leaves_part_folders_without_edgekits_tag(shared, tmp_path):
    _users_files(shared)
    os.symlink(shared / "text", shared / "linked")  # a foreign link too
    before, children = snapshot(tmp_path), child_pids()
    cleared = _run(["cache", "--clear"])
    assert cleared.exit_code == 0, cleared.stderr
    assert "Error" not in cleared.stderr and "Traceback" not in cleared.output
    assert snapshot(tmp_path) == before
    assert "left alone" in cleared.stdout and "thesis" not in cleared.stdout  # names the parts, not their insides
    for part in ("text", "calibration", "rootfs", "native"):  # named: said once, nothing removed
        _refused(_run(["cache", "--clear", part]), 2, "is not edgekit's cache part", tmp_path, before, children)
    listed = json.loads(_run(["cache", "--json"]).stdout)
    foreign = {p["name"] for p in listed["parts"] if not p["ours"]}
    assert {"text", "calibration", "rootfs", "native", "linked"} <= foreign


def test_cache_part_that_is_a_link_is_neither_followed_nor_removed(shared, tmp_path):
    mine = tmp_path / "mine"
    _users_files(mine)
    for part in ("text", "rootfs", "native"):
        os.symlink(mine / part, shared / part)
    os.symlink(mine / "calibration", shared / "calibration")  # a link to a file
    before, children = snapshot(tmp_path), child_pids()
    assert _run(["cache", "--clear"]).exit_code == 0
    assert snapshot(tmp_path) == before
    _refused(_run(["cache", "--clear", "rootfs"]), 2, "is not edgekit's cache part rootfs", tmp_path, before, children)


def _edgekit_entries(root: Path) -> set[str]:
    """Fill the parts the way edgekit's own writers do; the entries they wrote (relative paths)."""
    from edgekit.core.cache import entry_dir, part_dir
    from edgekit.data.text import load_text_corpus
    from edgekit.quantize.calibration.cache import CalibrationCache
    from edgekit.quantize.calibration.calibrators import TensorRange

    corpus = root.parent / "corpus.txt"
    corpus.write_text("\n\n".join(f"paragraph {i} of some text" for i in range(40)))
    key = load_text_corpus(corpus).key
    CalibrationCache().store("ab" * 32, {"x": TensorRange(0.0, 1.0)}, 1, {})
    build = part_dir("rootfs") / "bookworm-arm64-py3.11"
    (build / "etc").mkdir(parents=True)
    (build / "etc" / "edgekit-rootfs.json").write_text(json.dumps({"schema": "edgekit.rootfs", "release": "bookworm"}))
    (build / "usr" / "bin").mkdir(parents=True)
    (build / "usr" / "bin" / "python3").write_text("#!/bin/sh\n")
    (entry_dir("native", "executorch-0.4-aarch64") / "runner").write_bytes(b"\x7fELF")
    return {f"text/{key}", "calibration/" + "ab" * 32 + ".json", "rootfs/bookworm-arm64-py3.11",
            "native/executorch-0.4-aarch64"}


def test_cache_clear_removes_only_the_entries_edgekit_recognises(shared, tmp_path):
    ours = _edgekit_entries(shared)
    (shared / "text" / "notes.txt").write_text("mine\n")
    (shared / "text" / ("c" * 32)).mkdir()  # named like a corpus entry, holds a thesis
    (shared / "text" / ("c" * 32) / "thesis.txt").write_text("chapter 2\n")
    (shared / "calibration" / ("d" * 64 + ".json")).write_text(json.dumps({"mine": True}))  # an entry's name, not its content
    (shared / "calibration" / "ranges.json").write_text("{}")
    (shared / "rootfs" / "bookworm-arm64-py3.11-mine").mkdir()
    (shared / "rootfs" / "bookworm-arm64-py3.11-mine" / "notes").write_text("mine\n")
    (shared / "native" / "my-runner").mkdir()
    (shared / "native" / "my-runner" / "main.c").write_text("int x;\n")
    (shared / "native" / "borrowed").mkdir()  # an entry meta of another part proves nothing here
    (shared / "native" / "borrowed" / ".edgekit-entry.json").write_text(
        json.dumps({"schema": "edgekit.core.cache-entry", "part": "text", "name": "borrowed"}))
    (shared / "native" / "borrowed" / "keep.txt").write_text("mine\n")
    before = snapshot(tmp_path)
    expected = {rel: v for rel, v in before.items()
                if not any(rel == f"shared/{e}" or rel.startswith(f"shared/{e}/") for e in ours)}

    listed = json.loads(_run(["cache", "--json"]).stdout)
    foreign = {p["name"] for p in listed["parts"] if not p["ours"]}
    assert {"text/notes.txt", "text/" + "c" * 32, "calibration/" + "d" * 64 + ".json", "native/borrowed"} <= foreign
    cleared = _run(["cache", "--clear"])
    assert cleared.exit_code == 0, cleared.stderr
    assert snapshot(tmp_path) == expected  # edgekit's entries gone, every one of the user's files as it was
    assert "left alone (not edgekit's)" in cleared.stdout
    again = _run(["cache", "--clear", "--json"])
    assert again.exit_code == 0 and json.loads(again.stdout)["removed"] == []
    assert snapshot(tmp_path) == expected


def test_cache_clear_removes_what_edgekit_wrote_without_force(shared, tmp_path):
    _edgekit_entries(shared)
    (shared / "text" / ".0123456789abcdef0123456789abcdef.x1y2z3w4.tmp").mkdir()  # a killed build's temporary
    outside = tmp_path / "outside.txt"
    outside.write_text("precious\n")
    os.symlink(outside, shared / "calibration" / "link")  # a link in a part: removed, never followed
    first = _run(["cache", "--clear", "--json"])
    assert first.exit_code == 0, first.stderr
    assert {p["name"] for p in json.loads(first.stdout)["removed"]} == {"calibration", "text", "rootfs", "native"}
    assert list(shared.iterdir()) == [] and outside.read_text() == "precious\n"
    second = _run(["cache", "--clear"])
    assert second.exit_code == 0 and "nothing (already empty)" in second.stdout


def test_a_writer_adopts_an_untagged_part_of_only_edgekit_entries(shared):
    """A cache an edgekit without tags wrote: its writers tag it, then --clear removes it."""
    from edgekit.core.cache import TAG_NAME, part_dir

    _edgekit_entries(shared)
    for part in ("calibration", "text"):
        (shared / part / TAG_NAME).unlink()
    assert _run(["cache", "--clear"]).exit_code == 0
    assert (shared / "calibration").is_dir()  # untagged: left alone
    part_dir("calibration")
    part_dir("text")
    assert _run(["cache", "--clear"]).exit_code == 0
    assert not (shared / "calibration").exists() and not (shared / "text").exists()


def test_onnxruntime_writes_nothing_under_home_during_quantize(digits_checkpoint, tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    env = {**os.environ, "HOME": str(home), "EDGEKIT_NO_PROGRESS": "1", "OMP_NUM_THREADS": "1"}
    for name in ("EDGEKIT_CACHE_DIR", "XDG_CACHE_HOME", "ORT_DISABLE_TELEMETRY"):
        env.pop(name, None)  # edgekit itself must keep ONNX Runtime's telemetry database away
    done = subprocess.run([str(EDGEKIT), "quantize", str(digits_checkpoint), "--method", "dynamic", "--format", "onnx",
                           "--out", str(tmp_path / "q")], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    assert snapshot(home) == {}, snapshot(home)  # no ~/.cache/Microsoft/DeveloperTools/.onnxruntime


# =============================================================================================
# 2. every level of a tree, every member of an archive


@pytest.fixture(scope="module")
def built_bundle(digits_fp32_export, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("round2-bundle") / "rpi4"
    result = _run(["bundle", digits_fp32_export, "--target", "rpi4", "--out", out])
    assert result.exit_code == 0, result.stderr
    return out


def _copy_bundle(built: Path, dest: Path, archive: bool = True) -> Path:
    out = dest / "rpi4"
    shutil.copytree(built, out)
    if archive:
        shutil.copyfile(built.parent / "rpi4.tar.gz", dest / "rpi4.tar.gz")
    return out


def _sub_folder(bundle: Path) -> Path:
    """A sub-folder the bundle writes itself (the serving or board package)."""
    subs = sorted(p for p in bundle.iterdir() if p.is_dir() and any(q.suffix == ".py" for q in p.iterdir()))
    assert subs, sorted(p.name for p in bundle.iterdir())
    return subs[0]


def _plant_in_sub(bundle: Path) -> str:
    sub = _sub_folder(bundle)
    (sub / "notes.txt").write_text("my notes\n")
    return f"{sub.name}/notes.txt"


def _plant_deep(bundle: Path) -> str:
    sub = _sub_folder(bundle)
    (sub / "deeper").mkdir()
    (sub / "deeper" / "thesis.txt").write_text("chapter 3\n")
    return f"{sub.name}/deeper"  # an unlisted folder is named as a whole


def _plant_listed_as_folder(bundle: Path) -> str:
    (bundle / "README.txt").unlink()
    (bundle / "README.txt").mkdir()  # a listed name, but a folder of the user's now
    (bundle / "README.txt" / "thesis.txt").write_text("chapter 4\n")
    return "README.txt"


def _plant_in_pycache(bundle: Path) -> str:
    sub = _sub_folder(bundle)
    (sub / "__pycache__").mkdir(exist_ok=True)
    (sub / "__pycache__" / "thesis.txt").write_text("chapter 5\n")
    return f"{sub.name}/__pycache__/thesis.txt"


def _plant_foreign_proof(bundle: Path) -> str:
    """A user's folder with a bundle.json and SHA256SUMS of their own (not edgekit's schema)."""
    shutil.rmtree(bundle)
    bundle.mkdir()
    (bundle / "thesis.txt").write_text("chapter 6\n")
    (bundle / "bundle.json").write_text(json.dumps({"title": "my bundle of papers"}))
    sums = "".join(f"{hashlib.sha256((bundle / n).read_bytes()).hexdigest()}  {n}\n" for n in ("bundle.json", "thesis.txt"))
    (bundle / "SHA256SUMS").write_text(sums)
    (bundle.parent / "rpi4.tar.gz").unlink()
    return "bundle.json"


BUNDLE_TREE_CASES = {
    "file-in-sub-folder": _plant_in_sub,
    "file-two-levels-down": _plant_deep,
    "listed-file-is-now-a-folder": _plant_listed_as_folder,
    "foreign-file-in-pycache": _plant_in_pycache,
    "bundle-json-not-edgekits": _plant_foreign_proof,
}


@pytest.mark.parametrize("case", list(BUNDLE_TREE_CASES))
def test_bundle_rebuild_proves_every_file_of_the_tree(case, built_bundle, digits_fp32_export, tmp_path):
    out = _copy_bundle(built_bundle, tmp_path)
    named = BUNDLE_TREE_CASES[case](out)
    before, children = snapshot(tmp_path), child_pids()
    result = _run(["bundle", digits_fp32_export, "--target", "rpi4", "--out", out])
    _refused(result, 2, f"holds {named}" if case != "bundle-json-not-edgekits" else "which edgekit did not write",
             tmp_path, before, children)


def test_bundle_rebuild_replaces_its_own_bundle_and_archive(built_bundle, digits_fp32_export, tmp_path):
    out = _copy_bundle(built_bundle, tmp_path)
    sub = _sub_folder(out)
    module = next(p for p in sorted(sub.iterdir()) if p.suffix == ".py")
    (sub / "__pycache__").mkdir(exist_ok=True)  # the bundle's scripts were run in place: python's own cache
    (sub / "__pycache__" / f"{module.stem}.cpython-311.pyc").write_bytes(b"\x00" * 16)
    old_archive, old_created = os.stat(tmp_path / "rpi4.tar.gz").st_ino, json.loads((out / "bundle.json").read_text())["created"]
    time.sleep(1.1)  # a new "created" stamp
    result = _run(["bundle", digits_fp32_export, "--target", "rpi4", "--out", out])
    assert result.exit_code == 0, result.stderr
    assert json.loads((out / "bundle.json").read_text())["created"] != old_created  # replaced, without --force
    assert os.stat(tmp_path / "rpi4.tar.gz").st_ino != old_archive
    assert not (sub / "__pycache__" / f"{module.stem}.cpython-311.pyc").exists()


def _tar_bytes(members: list[tuple[tarfile.TarInfo, bytes | None]]) -> bytes:
    raw = io.BytesIO()
    with gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as gz, tarfile.open(fileobj=gz, mode="w") as tar:
        for info, data in members:
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return raw.getvalue()


def _member(name: str, data: bytes | None = None, kind: bytes = tarfile.REGTYPE, link: str = "") -> tuple:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = link
    if data is not None:
        info.size = len(data)
    return info, data


def _real_members(archive: Path) -> list[tuple]:
    with tarfile.open(archive) as tar:
        return [(m, tar.extractfile(m).read() if m.isreg() else None) for m in tar.getmembers()]


def _archive_cases(built: Path) -> dict[str, bytes]:
    real = _real_members(built.parent / "rpi4.tar.gz")
    bundle_json = json.dumps({"schema": "edgekit.bundle", "schema_version": 1}).encode()
    sums_of_json = f"{hashlib.sha256(bundle_json).hexdigest()}  bundle.json\n".encode()
    sub = _sub_folder(built).name
    return {
        # the attack run's archive: a bundle.json, and a user's thesis beside it
        "bundle-json-and-thesis": _tar_bytes([_member("rpi4", kind=tarfile.DIRTYPE), _member("rpi4/bundle.json", bundle_json),
                                              _member("rpi4/SHA256SUMS", sums_of_json), _member("rpi4/thesis.txt", b"ch 1\n")]),
        "bundle-json-without-sums": _tar_bytes([_member("rpi4", kind=tarfile.DIRTYPE), _member("rpi4/bundle.json", bundle_json)]),
        "own-archive-plus-a-file": _tar_bytes([*real, _member("rpi4/zz-thesis.txt", b"ch 2\n")]),
        "own-archive-plus-a-deep-file": _tar_bytes([*real, _member(f"rpi4/{sub}/notes/thesis.txt", b"ch 3\n")]),
        "own-archive-plus-a-folder": _tar_bytes([*real, _member("rpi4/photos", kind=tarfile.DIRTYPE)]),
        "own-archive-plus-a-link": _tar_bytes([*real, _member("rpi4/passwd", kind=tarfile.SYMTYPE, link="/etc/passwd")]),
        "own-archive-with-a-member-twice": _tar_bytes([*real, real[-1]]),
        "member-outside-the-top-folder": _tar_bytes([*real, _member("elsewhere/thesis.txt", b"ch 4\n")]),
    }


ARCHIVE_CASES = ["bundle-json-and-thesis", "bundle-json-without-sums", "own-archive-plus-a-file",
                 "own-archive-plus-a-deep-file", "own-archive-plus-a-folder", "own-archive-plus-a-link",
                 "own-archive-with-a-member-twice", "member-outside-the-top-folder"]


@pytest.mark.parametrize("case", ARCHIVE_CASES)
def test_bundle_archive_is_replaced_only_when_every_member_is_the_bundles(case, built_bundle, digits_fp32_export, tmp_path):
    (tmp_path / "rpi4.tar.gz").write_bytes(_archive_cases(built_bundle)[case])
    before, children = snapshot(tmp_path), child_pids()
    result = _run(["bundle", digits_fp32_export, "--target", "rpi4", "--out", tmp_path / "rpi4"])
    _refused(result, 2, "is not an edgekit bundle archive", tmp_path, before, children)


def test_an_archive_edgekit_wrote_passes_the_member_check(built_bundle):
    from edgekit.bundle.tarball import is_bundle_archive

    assert is_bundle_archive(built_bundle.parent / "rpi4.tar.gz", "rpi4")


def _finished_run(checkpoint: Path, dest: Path) -> Path:
    run = dest / "run"
    shutil.copytree(checkpoint, run)
    return run


def _profile_notes(run: Path) -> None:
    (run / "profile").mkdir(exist_ok=True)
    (run / "profile" / "notes.txt").write_text("what I saw in the trace\n")


def _profile_trace_folder(run: Path) -> None:
    (run / "profile" / "trace_step5.json").mkdir(parents=True)  # a trace's name, a folder of the user's
    (run / "profile" / "trace_step5.json" / "thesis.txt").write_text("chapter 7\n")


def _profile_is_a_file(run: Path) -> None:
    shutil.rmtree(run / "profile", ignore_errors=True)
    (run / "profile").write_text("my profiling notes\n")


def _owned_name_is_a_folder(run: Path) -> None:
    (run / "metrics.jsonl").unlink()
    (run / "metrics.jsonl").mkdir()
    (run / "metrics.jsonl" / "thesis.txt").write_text("chapter 8\n")


def _work_folder_holds_thesis(run: Path) -> None:
    partial = run.with_name("run.partial")
    partial.mkdir()
    (partial / "thesis.txt").write_text("chapter 9\n")


RUN_CASES = {
    "profile-holds-notes": (_profile_notes, "profile/notes.txt"),
    "profile-trace-name-is-a-folder": (_profile_trace_folder, "profile/trace_step5.json"),
    "profile-is-a-users-file": (_profile_is_a_file, "profile"),
    "owned-name-is-a-folder": (_owned_name_is_a_folder, "metrics.jsonl"),
    "work-folder-holds-thesis": (_work_folder_holds_thesis, "thesis.txt"),
}


@pytest.mark.parametrize("case", list(RUN_CASES))
@pytest.mark.parametrize("resume", [False, True], ids=["train", "resume"])
def test_retraining_proves_every_entry_of_the_run_folder(case, resume, digits_checkpoint, tmp_path):
    plant, named = RUN_CASES[case]
    run = _finished_run(digits_checkpoint, tmp_path)
    plant(run)
    before, children = snapshot(tmp_path), child_pids()
    result = _run(["train", "--max-steps", "1", "--threads", "1", "--out", run, *(["--resume"] if resume else [])])
    _refused(result, 2, named, tmp_path, before, children)


def test_retraining_replaces_its_own_profile_traces(tmp_path):
    run = tmp_path / "run"
    args = ["train", "--set", "width=4", "--max-steps", "6", "--threads", "1", "--profile", "--out", run]
    first = _run(args)
    assert first.exit_code == 0, first.stderr
    traces = sorted(p.name for p in (run / "profile").iterdir())
    assert traces and all(name.startswith("trace_step") and name.endswith(".json") for name in traces)
    second = _run(args)  # the profiler's own files are edgekit's: replaced without --force
    assert second.exit_code == 0, second.stderr


def _sub_folder_artifact(source: Path, dest: Path) -> Path:
    """A copy of ``source`` whose manifest lists its model under ``sub/``; a user's notes beside it."""
    out = dest / "artifact"
    shutil.copytree(source, out)
    manifest = json.loads((out / "manifest.json").read_text())
    entry = manifest["files"][0]
    (out / "sub").mkdir()
    os.replace(out / entry["path"], out / "sub" / entry["path"])
    entry["path"] = f"sub/{entry['path']}"
    (out / "manifest.json").write_text(json.dumps(manifest))
    (out / "sub" / "notes.txt").write_text("mine\n")
    return out


def test_artifact_sub_folders_are_proven_file_by_file(digits_checkpoint, digits_static, digits_fp32_export, tmp_path):
    quantized = _sub_folder_artifact(digits_static, tmp_path / "a")
    before, children = snapshot(tmp_path), child_pids()
    result = _run(["quantize", digits_checkpoint, "--method", "dynamic", "--format", "onnx", "--out", quantized])
    _refused(result, 2, "holds sub/notes.txt", tmp_path, before, children)

    export = tmp_path / "e" / "export"
    shutil.copytree(digits_fp32_export, export)
    (export / "reference.npz").unlink()
    (export / "reference.npz").mkdir()  # a name export writes, a folder of the user's now
    (export / "reference.npz" / "data.csv").write_text("1,2\n")
    before = snapshot(tmp_path)
    result = _run(["export", digits_checkpoint, "--format", "onnx", "--out", export])
    _refused(result, 2, "holds reference.npz", tmp_path, before, children)


def _pipeline_folder(dest: Path, checkpoint: Path, fp32: Path, static: Path) -> Path:
    """A pipeline run folder made of edgekit's own outputs (its reports by the real gate command)."""
    out = dest / "runs"
    out.mkdir(parents=True)
    (out / "pipeline.json").write_text(json.dumps({"schema": "edgekit.pipeline.run", "schema_version": 1, "status": "incomplete"}))
    shutil.copytree(checkpoint, out / "checkpoint")
    shutil.copytree(fp32, out / "export" / "fp32")
    shutil.copytree(static, out / "quantized" / "static")
    shutil.copyfile(GOOD_BENCH, out / "bench.json")
    gate = _run(["gate", GOOD_BENCH, "--target", "rpi4", "--json", out / "gate.json", "--junit", out / "junit.xml",
                 "--markdown", out / "gate.md"])
    assert gate.exit_code == 0, gate.stderr
    return out


def _in_export(out: Path) -> str:
    (out / "export" / "fp32" / "notes.txt").write_text("mine\n")
    return "export/fp32/notes.txt"


def _not_an_artifact(out: Path) -> str:
    (out / "quantized" / "mine").mkdir()
    (out / "quantized" / "mine" / "thesis.txt").write_text("chapter 10\n")
    return "quantized/mine/thesis.txt"


def _users_gate_md(out: Path) -> str:
    (out / "gate.md").write_text("# My notes on the gate\n")
    return "gate.md"


def _in_checkpoint_profile(out: Path) -> str:
    _profile_notes(out / "checkpoint")
    return "checkpoint/profile/notes.txt"


def _users_bench_json(out: Path) -> str:
    (out / "bench.json").write_text(json.dumps({"my": "measurements"}))
    return "bench.json"


PIPELINE_CASES = {
    "file-in-an-export": _in_export,
    "quantized-folder-not-an-artifact": _not_an_artifact,
    "gate-md-is-the-users": _users_gate_md,
    "notes-in-the-checkpoints-profile": _in_checkpoint_profile,
    "bench-json-is-the-users": _users_bench_json,
}


@pytest.mark.parametrize("case", list(PIPELINE_CASES))
def test_pipeline_rerun_proves_each_artifact_and_report_inside(case, digits_checkpoint, digits_fp32_export, digits_static,
                                                                tmp_path):
    out = _pipeline_folder(tmp_path, digits_checkpoint, digits_fp32_export, digits_static)
    named = PIPELINE_CASES[case](out)
    before, children = snapshot(tmp_path), child_pids()
    result = _run(["pipeline", "--checkpoint", digits_checkpoint, "--calib", CALIB_DIGITS, "--out", out])
    _refused(result, 2, f"holds {named}", tmp_path, before, children)


def test_a_pipeline_rerun_replaces_its_own_run_folder(digits_checkpoint, tmp_path):
    out = tmp_path / "runs"
    args = ["pipeline", "--checkpoint", digits_checkpoint, "--methods", "dynamic", "--format", "onnx", "--min-runs", "1",
            "--min-time", "0", "--processes", "1", "--no-reference", "--out", out]
    first = _run(args)
    assert first.exit_code == 0, first.stderr
    from edgekit.core.outputs import foreign_entries

    assert foreign_entries(out, "pipeline") == []  # every report it wrote proves itself, every artifact too
    second = _run(args)  # without --force
    assert second.exit_code == 0, second.stderr


def test_a_pipeline_folder_of_edgekits_outputs_is_its_own(digits_checkpoint, digits_fp32_export, digits_static, tmp_path):
    from edgekit.core.outputs import foreign_entries

    out = _pipeline_folder(tmp_path, digits_checkpoint, digits_fp32_export, digits_static)
    assert foreign_entries(out, "pipeline") == []


# =============================================================================================
# 3. report files


def _gate(*flags) -> list:
    return ["gate", GOOD_BENCH, "--target", "rpi4", *flags]


USERS_FILES = {
    "thesis.json": "My thesis, chapter 1\n",
    "results.xml": '<?xml version="1.0"?>\n<testsuites name="pytest"/>\n',
    "summary.md": "# Release notes\n\nThis summary was generated by edgekit 0.1.0 last week, then edited.\n",
    "index.html": "<!DOCTYPE html><html><head><title>my page</title></head><body>hi</body></html>\n",
    "other-bench.json": GOOD_BENCH.read_text(),  # an edgekit bench document: still not a gate report
    "gate-report.json": json.dumps({"schema": "edgekit.gate", "schema_version": 1}),  # not a bench document
}

REPORT_CASES = [
    ("gate-json-over-text", _gate("--json", "thesis.json"), "thesis.json"),
    ("gate-json-over-bench-document", _gate("--json", "other-bench.json"), "other-bench.json"),
    ("gate-junit-over-other-tools-xml", _gate("--junit", "results.xml"), "results.xml"),
    ("gate-markdown-mentioning-edgekit", _gate("--markdown", "summary.md"), "summary.md"),
    ("gate-markdown-over-html", _gate("--markdown", "index.html"), "index.html"),
    ("bench-html-over-users-page", ["bench", "{model}", "--min-runs", "1", "--min-time", "0", "--html", "index.html"],
     "index.html"),
    ("bench-json-over-text", ["bench", "{model}", "--min-runs", "1", "--min-time", "0", "--json", "thesis.json"],
     "thesis.json"),
    ("bench-json-over-gate-report", ["bench", "{model}", "--min-runs", "1", "--min-time", "0", "--json", "gate-report.json"],
     "gate-report.json"),
    ("verify-json-over-text", ["verify", "{bundle}", "--json", "thesis.json"], "thesis.json"),
    ("loadtest-json-over-text", ["loadtest", "http://127.0.0.1:9", "--duration", "1", "--json", "thesis.json"], "thesis.json"),
]


@pytest.mark.parametrize("case, argv, named", REPORT_CASES, ids=[c[0] for c in REPORT_CASES])
def test_a_report_never_replaces_a_file_edgekit_did_not_write(case, argv, named, digits_fp32_export, built_bundle,
                                                              tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for name, text in USERS_FILES.items():
        (tmp_path / name).write_text(text)
    places = {"model": str(digits_fp32_export / "model.onnx"), "bundle": str(built_bundle)}
    before, children = snapshot(tmp_path), child_pids()
    result = _run([str(a).format(**places) for a in argv])
    _refused(result, 2, f"{named} exists and edgekit did not write it", tmp_path, before, children)
    assert "choose another path" in result.stderr


def _special(kind: str, path: Path) -> None:
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "socket":
        server = socket.socket(socket.AF_UNIX)
        server.bind(str(path))
        server.close()
    else:
        try:
            os.mknod(path, 0o600 | stat.S_IFCHR, os.makedev(1, 3))  # what /dev/null is
        except PermissionError:
            pytest.skip("making a character device needs root")


@pytest.mark.parametrize("kind", ["fifo", "socket", "char-device"])
@pytest.mark.parametrize("command", ["gate-json", "gate-junit", "bench-html"])
def test_a_report_never_replaces_a_special_file(kind, command, digits_fp32_export, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    special = tmp_path / "specials" / "report"
    special.parent.mkdir()
    _special(kind, special)
    mode = os.lstat(special).st_mode
    (tmp_path / "mine.txt").write_text("mine\n")
    watched = tmp_path / "watched"
    watched.mkdir()
    (watched / "keep.txt").write_text("keep\n")
    argv = {"gate-json": _gate("--json", special), "gate-junit": _gate("--junit", special),
            "bench-html": ["bench", digits_fp32_export / "model.onnx", "--min-runs", "1", "--min-time", "0", "--html", special]}
    before, children = snapshot(watched), child_pids()
    result = _run(argv[command])
    _refused(result, 2, "not a regular file", watched, before, children)
    assert os.lstat(special).st_mode == mode and sorted(p.name for p in special.parent.iterdir()) == ["report"]


def test_a_report_edgekit_wrote_is_replaced_by_the_same_command(digits_fp32_export, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "summary.md").write_text("")  # $GITHUB_STEP_SUMMARY starts as an empty file
    flags = ["--json", "gate.json", "--junit", "junit.xml", "--markdown", "summary.md"]
    for _ in range(2):
        result = _run(_gate(*flags))
        assert result.exit_code == 0, result.stderr
    assert json.loads((tmp_path / "gate.json").read_text())["schema"] == "edgekit.gate"
    bench = ["bench", digits_fp32_export / "model.onnx", "--min-runs", "1", "--min-time", "0", "--warmup", "0", "--quiet",
             "--json", "bench.json", "--html", "bench.html"]
    for _ in range(2):
        result = _run(bench)
        assert result.exit_code == 0, result.stderr
    from edgekit.core.outputs import report_written_by_edgekit

    assert report_written_by_edgekit(tmp_path / "bench.html", "html")
    assert report_written_by_edgekit(tmp_path / "summary.md", "markdown")
    assert report_written_by_edgekit(tmp_path / "junit.xml", "junit")


# =============================================================================================
# 4. control characters in output names


CONTROL_CASES = [
    ("export-out-newline", ["export", "{ckpt}", "--format", "onnx", "--out", "dist\n"]),
    ("export-out-tab-in-parent", ["export", "{ckpt}", "--format", "onnx", "--out", "a\tb/dist"]),
    ("bundle-out-escape", ["bundle", "{fp32}", "--target", "rpi4", "--out", "rpi4\x1b[31m"]),
    ("train-out-carriage-return", ["train", "--max-steps", "1", "--out", "run\r"]),
    ("quantize-out-delete", ["quantize", "{ckpt}", "--method", "dynamic", "--format", "onnx", "--out", "q\x7f"]),
    ("gate-json-newline", _gate("--json", "gate\n.json")),
    ("gate-markdown-escape", _gate("--markdown", "sum\x1b]0;pwned\x07.md")),
    ("bench-html-newline", ["bench", "{fp32}/model.onnx", "--min-runs", "1", "--min-time", "0", "--html", "r\n.html"]),
    ("loadtest-json-tab", ["loadtest", "http://127.0.0.1:9", "--json", "load\t.json"]),
]


@pytest.mark.parametrize("case, argv", CONTROL_CASES, ids=[c[0] for c in CONTROL_CASES])
def test_output_names_with_control_characters_are_refused(case, argv, digits_checkpoint, digits_fp32_export, tmp_path,
                                                          monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "mine.txt").write_text("mine\n")
    places = {"ckpt": str(digits_checkpoint), "fp32": str(digits_fp32_export)}
    before, children = snapshot(tmp_path), child_pids()
    result = _run([str(a).format(**places) for a in argv])
    _refused(result, 2, "control character", tmp_path, before, children)
    assert "\n" not in result.stderr.strip() and "\x1b" not in result.stderr  # the name is shown escaped
