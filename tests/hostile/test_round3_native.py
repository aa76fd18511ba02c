"""Issue 31, "hostile round three": the native runner (``edgekit-run``) and the board's scripts.

1. writers: every file the runner writes (bench --json/--samples-json, check --json, probe OUT) and
   every file the board's Python scripts write (runner.py --json, check --json, probe OUT) is a
   regular file or nothing yet: a device, a FIFO, a socket, a folder or a symbolic link is refused in
   one line (exit 2) before the model runs, and is still what it was; a regular file is replaced;
2. damaged programs: bit-flipped ``.pte`` files end in one ``Error:`` line, never a signal death
   or a hang (a step timer, ``--timeout``); fatal signals become one line; the Python launchers
   report the runner's line;
3. run.sh: ``sh run.sh verify``/``check``, ``./run.sh`` from inside and outside the bundle;
4. the output check cannot pass wrong outputs with its limits turned off (C++ and Python agree);
5. bundle.json's ``native`` section is untrusted input: one line, exit 2;
6. a killed native compile leaves nothing behind.

All through real binaries, real files and real subprocesses.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import random
import shutil
import signal
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from corpus.hostile import assert_one_line_error, leftovers
from typer.testing import CliRunner

from edgekit.cli.app import app

cli = CliRunner()
HOST_TARGET = {"x86_64": "x86-64", "aarch64": "rpi5"}.get(platform.machine())
RUN_TIMEOUT = 120  # "does not hang": far above the step limits the tests set
# One byte of the session's fp32 digits program, XORed: a program XNNPACK runs for ever (while
# allocating), and one ExecuTorch aborts on while loading. Where the export differs, they are two
# more damaged programs that must end cleanly.
HANG_FLIP, ABORT_FLIP = (4898, 0x20), (2659, 0x01)


# ---------------------------------------------------------------------------------------------
# Fixtures


@pytest.fixture(scope="module")
def binary() -> Path:
    if shutil.which("g++") is None:
        pytest.skip("no C++ compiler (g++)")
    pytest.importorskip("executorch")
    from edgekit.native.build import build_runner

    return build_runner(platform.machine(), None).binary


@pytest.fixture(scope="module")
def exports(digits_checkpoint, tmp_path_factory) -> dict[str, Path]:
    pytest.importorskip("executorch")
    from conftest import CALIB_DIGITS

    from edgekit.export.api import export
    from edgekit.quantize.api import quantize

    base = tmp_path_factory.mktemp("round3-native")
    export(digits_checkpoint, base / "fp32", formats=("executorch",), target="rpi4")
    quantize(digits_checkpoint, "static", base / "q", "rpi4", calib=CALIB_DIGITS, formats=("executorch",))
    export(base / "q", base / "int8", formats=("executorch",), target="rpi4")
    return {"fp32": base / "fp32", "int8": base / "int8"}


@pytest.fixture(scope="module")
def host_bundles(exports, binary, tmp_path_factory) -> dict[str, Path]:
    if HOST_TARGET is None:
        pytest.skip(f"no edgekit target for {platform.machine()}")
    out = {}
    for precision, folder in exports.items():
        dest = tmp_path_factory.mktemp(f"round3-bundle-{precision}") / "b"
        result = cli.invoke(app, ["bundle", str(folder), "--target", HOST_TARGET, "--runtime", "native",
                                  "--out", str(dest), "--force"])
        assert result.exit_code == 0, result.output
        out[precision] = dest
    return out


def run(argv, *, cwd=None, timeout=RUN_TIMEOUT, env=None) -> subprocess.CompletedProcess:
    environment = {k: v for k, v in os.environ.items() if k != "EDGEKIT_DEBUG"}
    environment.update(env or {})
    return subprocess.run([str(a) for a in argv], capture_output=True, text=True, cwd=cwd, timeout=timeout,
                          env=environment, stdin=subprocess.DEVNULL)


def one_error(done: subprocess.CompletedProcess, code: int, message: str | None = None) -> str:
    """Exit ``code`` (a status, not a signal) and exactly one stderr line ``Error: ...``."""
    assert done.returncode == code, (done.returncode, done.stdout[-1000:], done.stderr[-2000:])
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("Error: "), done.stderr[-2000:]
    assert "Traceback" not in done.stderr + done.stdout
    if message is not None:
        assert message in lines[0], lines[0]
    return lines[0]


def flipped(program: Path, dest: Path, flips) -> Path:
    data = bytearray(program.read_bytes())
    for at, mask in flips:
        data[at % len(data)] ^= mask
    dest.write_bytes(bytes(data))
    return dest


def rehash_bundle(folder: Path) -> None:
    """The bundle's checksums made to match its (replaced or added) files again: only running it can tell."""
    def sha(name: str) -> str:
        return hashlib.sha256((folder / name).read_bytes()).hexdigest()

    manifest = json.loads((folder / "manifest.json").read_text())
    for entry in manifest["files"]:
        entry["sha256"], entry["bytes"] = sha(entry["path"]), (folder / entry["path"]).stat().st_size
    (folder / "manifest.json").write_text(json.dumps(manifest))
    info = json.loads((folder / "bundle.json").read_text())
    info["model_sha256"] = sha("model.pte")
    (folder / "bundle.json").write_text(json.dumps(info))
    lines = []
    for line in (folder / "SHA256SUMS").read_text().splitlines():
        name = line.split(None, 1)[1].lstrip("*")
        lines.append(f"{sha(name)}  {name}")
    (folder / "SHA256SUMS").write_text("\n".join(lines) + "\n")


# ---------------------------------------------------------------------------------------------
# 1. Writers: only a regular file (or nothing) is ever replaced


def _special_paths(tmp_path: Path) -> dict[str, Path]:
    """One of each kind of path a writer must refuse, in ``tmp_path``."""
    target = tmp_path / "precious.txt"
    target.write_text("keep me\n")
    paths = {"folder": tmp_path / "a-folder", "fifo": tmp_path / "a-fifo", "link-to-file": tmp_path / "link",
             "dangling-link": tmp_path / "dangling", "link-to-dev-null": tmp_path / "null-link",
             "socket": tmp_path / "s.sock", "dev-null": Path("/dev/null")}
    paths["folder"].mkdir()
    os.mkfifo(paths["fifo"])
    os.symlink(target, paths["link-to-file"])
    os.symlink(tmp_path / "nowhere" / "x.json", paths["dangling-link"])
    os.symlink("/dev/null", paths["link-to-dev-null"])
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(paths["socket"]))
    server.close()  # the socket file stays
    if os.geteuid() == 0:
        paths["char-device"] = tmp_path / "null"
        os.mknod(paths["char-device"], stat.S_IFCHR | 0o666, os.makedev(1, 3))
    paths["stdout"] = Path("/dev/stdout")
    return paths


def _state(path: Path):
    info = os.lstat(path)
    body = path.read_bytes() if stat.S_ISREG(info.st_mode) else None
    return (stat.S_IFMT(info.st_mode), info.st_ino, info.st_rdev, os.readlink(path) if path.is_symlink() else None,
            body)


WHAT = {"folder": "is a folder", "fifo": "is a FIFO", "link-to-file": "is a symbolic link",
        "dangling-link": "is a symbolic link", "link-to-dev-null": "is a symbolic link", "socket": "is a socket",
        "dev-null": "is a character device", "char-device": "is a character device", "stdout": "is a symbolic link"}


def _writers(binary: Path, program: Path, out: Path) -> dict[str, tuple[list, str]]:
    """Each writer's command line writing ``out``, and its flag."""
    model, reference = program / "model.pte", program / "reference.npz"
    quick = ["--warmup", "0", "--min-runs", "1", "--min-time", "0", "--threads", "1"]
    py = [sys.executable, "-m"]
    return {
        "native bench --json": ([binary, "bench", model, *quick, "--json", out], "--json"),
        "native bench --samples-json": ([binary, "bench", model, *quick, "--samples-json", out], "--samples-json"),
        "native check --json": ([binary, "check", "--model", model, "--reference", reference, "--json", out], "--json"),
        "native probe OUT": ([binary, "probe", model, reference, out], "OUT"),
        "board runner.py --json": ([*py, "edgekit.board.runner", model, *quick, "--json", out], "--json"),
        "board check --json": ([*py, "edgekit.board.check", "--model", model, "--reference", reference, "--json", out],
                               "--json"),
        "board probe OUT": ([*py, "edgekit.board.probe", model, reference, out], "OUT"),
    }


def test_no_writer_replaces_a_device_fifo_socket_folder_or_link(binary, exports, tmp_path):
    paths = _special_paths(tmp_path)
    before = {kind: _state(path) for kind, path in paths.items()}
    for kind, path in paths.items():
        for name, (argv, flag) in _writers(binary, exports["int8"], path).items():
            started = time.monotonic()
            done = run(argv, cwd=tmp_path)
            line = one_error(done, 2, f"{flag} {path} {WHAT[kind]}")
            assert done.stdout == "", (name, done.stdout)
            assert _state(path) == before[kind], (name, kind, line)
            assert time.monotonic() - started < 60, name  # refused up front, not after the model ran
    assert _state(Path("/dev/null"))[0] == stat.S_IFCHR
    assert (tmp_path / "precious.txt").read_text() == "keep me\n"
    assert not (tmp_path / "nowhere").exists()
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []  # no temporaries left


def test_writers_replace_a_regular_file_and_write_a_new_one(binary, exports, tmp_path):
    for index, (name, (argv, _)) in enumerate(_writers(binary, exports["int8"], tmp_path / "x").items()):
        for existing in (False, True):
            out = tmp_path / f"out{index}-{int(existing)}.bin"
            if existing:
                out.write_text("old")
            inode = out.stat().st_ino if existing else None
            done = run([out if a == tmp_path / "x" else a for a in argv], cwd=tmp_path)
            assert done.returncode == 0, (name, done.stderr[-2000:])
            assert out.is_file() and out.read_bytes() not in (b"", b"old"), name
            assert inode is None or out.stat().st_ino != inode  # renamed over it, not written into it
            assert leftovers(tmp_path, out.name) == [out.name], name


def test_board_write_helper_follows_the_same_rule(tmp_path):
    """``edgekit.board.outfile`` (what the board scripts write with) against the same paths."""
    from edgekit.board.errors import BoardUsageError
    from edgekit.board.outfile import write_atomic

    paths = _special_paths(tmp_path)
    for kind, path in paths.items():
        before = _state(path)
        with pytest.raises(BoardUsageError, match=WHAT[kind]):
            write_atomic(str(path), lambda fh: fh.write(b"x"), "--json")
        assert _state(path) == before
    write_atomic(str(tmp_path / "new" / "r.json"), lambda fh: fh.write(b"{}"), "--json", make_parents=True)
    assert (tmp_path / "new" / "r.json").read_bytes() == b"{}"
    assert oct((tmp_path / "new" / "r.json").stat().st_mode & 0o777) == oct(0o666 & ~_umask())


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


# ---------------------------------------------------------------------------------------------
# 2. Damaged programs: one line, within the limit, never a signal


def test_bit_flipped_programs_end_in_one_line_within_the_step_limit(binary, exports, tmp_path):
    fp32 = exports["fp32"]
    cases = [[HANG_FLIP], [ABORT_FLIP]]
    rnd = random.Random(31)
    size = (fp32 / "model.pte").stat().st_size
    cases += [[(rnd.randrange(size), 1 << rnd.randrange(8)) for _ in range(rnd.choice((1, 4, 16)))] for _ in range(24)]
    seen = set()
    for index, flips in enumerate(cases):
        program = flipped(fp32 / "model.pte", tmp_path / f"m{index}.pte", flips)
        for argv in (["check", "--model", program, "--reference", fp32 / "reference.npz"],
                     ["probe", program, fp32 / "reference.npz", tmp_path / f"o{index}.npz"]):
            started = time.monotonic()
            done = run([binary, *argv, "--timeout", "3"], cwd=tmp_path)
            took = time.monotonic() - started
            assert done.returncode in (0, 1, 2), (flips, done.returncode, done.stderr[-2000:])
            assert took < 60, (flips, took)
            verdict = done.stdout.strip().splitlines()[-1:] or [""]
            if done.returncode == 1 and argv[0] == "check" and verdict[0].startswith("FAIL: ") and not done.stderr:
                continue  # it ran, and its outputs are wrong: the check's verdict, not an error
            if done.returncode != 0:
                line = one_error(done, done.returncode)
                if "did not finish within 3 s" in line:
                    seen.add("timeout")
                    assert took >= 2.5 and argv[0] in ("check", "probe")
                if "crashed (SIGABRT)" in line:
                    seen.add("abort")
            if argv[0] == "probe" and done.returncode != 0:
                assert not (tmp_path / f"o{index}.npz").exists()
    # where the export is the one these flips were found on, both kinds were met (and ended cleanly)
    assert seen <= {"timeout", "abort"}


def test_a_hung_program_ends_with_one_line_in_every_command(binary, exports, tmp_path):
    fp32 = exports["fp32"]
    program = endless_program(tmp_path / "hang.pte")
    for argv in (["bench", program, "--threads", "1"], ["bench", program, "--json", tmp_path / "r.json"],
                 ["check", "--model", program, "--reference", fp32 / "reference.npz", "--json", tmp_path / "c.json"],
                 ["probe", program, fp32 / "reference.npz", tmp_path / "o.npz"]):
        started = time.monotonic()
        done = run([binary, *argv, "--timeout", "2"])
        one_error(done, 1, f"running {program.name} did not finish within 2 s")
        assert time.monotonic() - started < 60
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hang.pte"]  # nothing written, no temporaries


def test_a_program_that_aborts_the_runtime_ends_with_one_line(binary, exports, tmp_path):
    fp32 = exports["fp32"]
    program = flipped(fp32 / "model.pte", tmp_path / "abort.pte", [ABORT_FLIP])
    for argv in (["check", "--model", program, "--reference", fp32 / "reference.npz"], ["info", program],
                 ["bench", program], ["probe", program, fp32 / "reference.npz", tmp_path / "o.npz"]):
        done = run([binary, *argv])
        assert done.returncode in (1, 2), (argv[0], done.returncode, done.stderr[-2000:])  # never -6
        one_error(done, done.returncode)
    assert not (tmp_path / "o.npz").exists()


@pytest.mark.parametrize("sig", [signal.SIGABRT, signal.SIGSEGV, signal.SIGBUS, signal.SIGFPE, signal.SIGILL])
def test_a_fatal_signal_is_one_error_line_and_exit_1(binary, exports, sig):
    """What ExecuTorch's abort() or a wild pointer would raise, delivered to a loaded runner."""
    proc = subprocess.Popen([str(binary), "bench", str(exports["int8"] / "model.pte"), "--serve", "--threads", "1"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert json.loads(proc.stdout.readline())["event"] == "ready"  # loaded, waiting for a command
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=RUN_TIMEOUT)
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == 1, (proc.returncode, err)
    assert err.splitlines() == [f"Error: edgekit-run crashed ({signal.Signals(sig).name})"], err


def test_the_board_build_behaves_the_same_under_emulation(exports, tmp_path):
    """The aarch64 cross build (what a Pi runs) under qemu-user: the timer, the abort handler and
    the writers' rule hold there too."""
    if shutil.which("qemu-aarch64-static") is None or shutil.which("aarch64-linux-gnu-g++") is None:
        pytest.skip("needs qemu-aarch64-static and the aarch64 cross compiler")
    pytest.importorskip("executorch")
    from edgekit.native.build import build_runner

    board = build_runner("aarch64", "cortex-a72").binary
    qemu = ["qemu-aarch64-static", "-cpu", "cortex-a72", "-L", "/usr/aarch64-linux-gnu", board]
    fp32 = exports["fp32"]
    hang = flipped(fp32 / "model.pte", tmp_path / "hang.pte", [HANG_FLIP])
    abort = flipped(fp32 / "model.pte", tmp_path / "abort.pte", [ABORT_FLIP])
    for program in (hang, abort):
        done = run([*qemu, "check", "--model", program, "--reference", fp32 / "reference.npz", "--timeout", "5"])
        assert done.returncode in (0, 1, 2), done.stderr[-2000:]
        failed_check = done.stdout.strip().splitlines()[-1:] and done.stdout.strip().splitlines()[-1].startswith("FAIL:")
        if done.returncode != 0 and not (failed_check and not done.stderr):
            one_error(done, done.returncode)
    os.mkfifo(tmp_path / "fifo")
    for path, what in ((Path("/dev/null"), "a character device"), (tmp_path / "fifo", "a FIFO")):
        done = run([*qemu, "probe", fp32 / "model.pte", fp32 / "reference.npz", path])
        one_error(done, 2, f"OUT {path} is {what}")
    assert stat.S_ISCHR(os.lstat("/dev/null").st_mode) and stat.S_ISFIFO(os.lstat(tmp_path / "fifo").st_mode)


@pytest.mark.parametrize("value", ["-1", "nan", "inf", "1e9", "abc", ""])
def test_a_bad_timeout_is_a_usage_error(binary, exports, value):
    one_error(run([binary, "check", "--model", exports["int8"] / "model.pte", "--timeout", value]), 2, "--timeout")


def test_the_python_launcher_reports_the_runners_line(binary, exports, tmp_path):
    """The board package's native runtime (what check_outputs.py, probe.py and the emulator run)."""
    from edgekit.board.errors import BoardError
    from edgekit.board.runtimes.native_runtime import NativeRuntime

    fp32 = exports["fp32"]
    program = flipped(fp32 / "model.pte", tmp_path / "abort.pte", [ABORT_FLIP])
    shutil.copyfile(binary, tmp_path / "edgekit-run")
    os.chmod(tmp_path / "edgekit-run", 0o755)
    shutil.copytree(binary.parent / "lib", tmp_path / "lib")
    try:
        NativeRuntime(program, 1).run([np.zeros((1, 1, 8, 8), np.float32)])
    except BoardError as exc:
        assert "\n" not in str(exc) and str(exc).startswith("the ExecuTorch runtime crashed (SIGABRT) while loading")
    else:
        pytest.skip("this export's bytes differ from the one the abort was found on")


def endless_program(path: Path) -> Path:
    """A valid program with the digits model's input (1x1x8x8) that runs for minutes on any host.

    64 chained 2048x2048 products of activations, which XNNPACK does not take: the portable kernel
    runs them (seconds each). A flipped byte's hang depends on the export's bytes and the inputs
    (one CI run's bench finished it); this one is the same on every machine.
    """
    import torch
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import to_edge_transform_and_lower

    class Endless(torch.nn.Module):
        def forward(self, x):
            a = x.reshape(8, 8).repeat(256, 256)
            for _ in range(64):
                a = torch.tanh(torch.mm(a, a) * (1.0 / 2048))
            return a[:1, :10]

    program = torch.export.export(Endless().eval(), (torch.zeros(1, 1, 8, 8),))
    path.write_bytes(to_edge_transform_and_lower(program, partitioner=[XnnpackPartitioner()]).to_executorch().buffer)
    return path


@pytest.mark.slow
def test_edgekit_bench_of_a_hung_bundle_ends_with_one_line(host_bundles, binary, tmp_path):
    """The reported case: ``edgekit bench BUNDLE`` ran past 120 s; the runner's default limit ends it."""
    bundle = tmp_path / "b"
    shutil.copytree(host_bundles["fp32"], bundle)
    endless_program(bundle / "model.pte")
    kernels = "lib/libexecutorch_kernels_optimized.so"  # the portable mm and repeat are registered there
    shutil.copyfile(binary.parent / kernels, bundle / kernels)
    info = json.loads((bundle / "bundle.json").read_text())
    info["native"]["libraries"].append(kernels)
    (bundle / "bundle.json").write_text(json.dumps(info))
    with open(bundle / "SHA256SUMS", "a") as sums:
        sums.write(f"0  {kernels}\n")
    rehash_bundle(bundle)
    started = time.monotonic()
    done = run([Path(sys.executable).parent / "edgekit", "bench", bundle], timeout=150)
    took = time.monotonic() - started
    one_error(done, 1, "did not finish within 30 s")
    assert took < 100, took
    one_error(run(["sh", bundle / "run.sh", "check"], timeout=150), 1, "did not finish within 30 s")


# ---------------------------------------------------------------------------------------------
# 3. run.sh


def test_run_sh_works_as_sh_and_as_a_program_from_anywhere(host_bundles, tmp_path):
    bundle = tmp_path / "board" / "b"
    shutil.copytree(host_bundles["int8"], bundle)
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    calls = [(["sh", "run.sh", "verify"], bundle), (["sh", "run.sh", "check"], bundle), (["sh", "run.sh"], bundle),
             (["./run.sh", "verify"], bundle), (["./run.sh", "check"], bundle),
             (["sh", bundle / "run.sh", "verify"], outside), ([bundle / "run.sh", "verify"], outside),
             (["sh", "b/run.sh", "verify"], bundle.parent), (["sh", "../board/b/run.sh", "verify"], outside),
             (["sh", "run.sh", "verify", "--threads", "1"], bundle)]
    for argv, cwd in calls:
        done = run(argv, cwd=cwd)
        assert done.returncode == 0, (argv, cwd, done.stderr)
        assert done.stdout.strip().splitlines()[-1].startswith("PASS: model.pte on "), (argv, done.stdout[-300:])
    for argv in (["sh", "run.sh", "info"], ["./run.sh", "info"]):
        assert json.loads(run(argv, cwd=bundle).stdout)["schema"] == "edgekit.native-info"
    one_error(run(["sh", "run.sh", "frobnicate"], cwd=bundle), 2, "unknown command frobnicate")


def test_run_sh_verify_stops_at_a_changed_file_in_one_line(host_bundles, tmp_path):
    bundle = tmp_path / "b"
    shutil.copytree(host_bundles["int8"], bundle)
    with open(bundle / "reference.npz", "ab") as fh:
        fh.write(b"tampered")
    for argv, cwd in ((["sh", "run.sh", "verify"], bundle), (["sh", bundle / "run.sh", "verify"], tmp_path)):
        done = run(argv, cwd=cwd)
        one_error(done, 1, "do not match SHA256SUMS: reference.npz: FAILED")
        assert "PASS" not in done.stdout and "FAIL:" not in done.stdout  # the check did not run


# ---------------------------------------------------------------------------------------------
# 4. The output check cannot pass wrong outputs


def _reference_with(src: Path, dest: Path, change) -> Path:
    with np.load(src, allow_pickle=False) as data:
        arrays = {k: (change(data[k]) if k.endswith("/output") else data[k]) for k in data.files}
    np.savez(dest, **arrays)
    return dest


@pytest.mark.parametrize("wrong", ["negated", "zeroed", "shuffled"])
def test_the_check_fails_wrong_outputs_with_its_limits_off(binary, exports, tmp_path, wrong):
    program = exports["int8"]
    change = {"negated": lambda a: -a, "zeroed": np.zeros_like,
              "shuffled": lambda a: np.random.default_rng(0).standard_normal(a.shape).astype(a.dtype)}[wrong]
    reference = _reference_with(program / "reference.npz", tmp_path / "ref.npz", change)
    for limits in ([], ["--max-abs", "inf", "--min-cosine", "-1", "--min-top1", "0"], ["--max-abs", "1e9"]):
        native = run([binary, "check", "--model", program / "model.pte", "--reference", reference, *limits])
        python = run([sys.executable, "-m", "edgekit.board.check", "--model", program / "model.pte",
                      "--reference", reference, *limits])
        from edgekit.board.check import read_output

        for done in (native, python):
            assert done.returncode == 1, (limits, done.stdout[-500:], done.stderr[-500:])
            doc, last = read_output(done.stdout)
            assert last.startswith("FAIL: outputs differ from the reference: cosine ") and "floor" in last, last
            assert doc["ok"] is False
        assert read_output(native.stdout)[0]["failures"] == read_output(python.stdout)[0]["failures"]


def test_the_check_still_passes_right_outputs_with_its_limits_off(binary, exports):
    for precision, program in exports.items():
        for limits in ([], ["--max-abs", "inf", "--min-cosine", "-1", "--min-top1", "0"]):
            done = run([binary, "check", "--model", program / "model.pte", "--reference", program / "reference.npz",
                        *limits])
            assert done.returncode == 0 and done.stdout.strip().splitlines()[-1].startswith("PASS: "), done.stdout


# ---------------------------------------------------------------------------------------------
# 5. bundle.json's native section


NATIVE_CASES = {
    "cpu a list": ("cpu", [1]), "cpu with a space": ("cpu", "cortex a72"), "cpu an option": ("cpu", "-march=x"),
    "cpu a number": ("cpu", 72), "arch unknown": ("arch", "sparc"), "arch a number": ("arch", 64),
    "arch missing": ("arch", None), "libraries a string": ("libraries", "lib/libexecutorch.so"),
    "library outside lib/": ("libraries", ["../../etc/passwd"]), "library absolute": ("libraries", ["/lib/x.so"]),
    "library a number": ("libraries", [7]), "runner renamed": ("runner", "sh"),
    "compiler with a newline": ("compiler", "gcc\nError: forged"), "build_key an object": ("build_key", {}),
    "native a string": (None, "x86_64"), "native a list": (None, []),
}


@pytest.mark.parametrize("case", sorted(NATIVE_CASES))
def test_a_malformed_native_section_is_one_line_exit_2(host_bundles, tmp_path, case):
    key, value = NATIVE_CASES[case]
    bundle = tmp_path / "b"
    shutil.copytree(host_bundles["int8"], bundle)
    info = json.loads((bundle / "bundle.json").read_text())
    if key is None:
        info["native"] = value
    else:
        info["native"][key] = value
    (bundle / "bundle.json").write_text(json.dumps(info))
    for argv in (["bench", str(bundle)], ["info", str(bundle)], ["verify", str(bundle)]):
        result = cli.invoke(app, argv)
        assert_one_line_error(result, 2, "native")
    from edgekit.bundle.layout import read_bundle_json
    from edgekit.core.errors import InputFileError

    with pytest.raises(InputFileError, match="is malformed: native"):
        read_bundle_json(bundle)


# ---------------------------------------------------------------------------------------------
# 6. A killed compile


@pytest.mark.slow
def test_a_killed_compile_leaves_nothing_behind(tmp_path):
    if shutil.which("g++") is None:
        pytest.skip("no C++ compiler (g++)")
    pytest.importorskip("executorch")
    scratch, cache = tmp_path / "tmp", tmp_path / "cache"
    scratch.mkdir()
    env = {**os.environ, "TMPDIR": str(scratch), "EDGEKIT_CACHE_DIR": str(cache)}
    code = "import platform; from edgekit.native.build import build_runner; build_runner(platform.machine(), None)"
    proc = subprocess.Popen([sys.executable, "-c", code], env=env, start_new_session=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not list(cache.rglob("*.o")):  # compiling, some objects out
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)  # the whole group: python and the compilers, as a kill -9 of a job
    proc.wait()
    assert list(scratch.iterdir()) == []  # nothing in TMPDIR, ever
    entries = list((cache / "native").glob("runner-*"))
    def builds():  # the folders builds compile in (.build.lock is the entry's lock file)
        return [p for p in entries[0].glob(".build.*") if p.is_dir()]

    assert entries and builds()  # the killed build's own folder, left by SIGKILL
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-2000:]
    assert builds() == [] and list(scratch.iterdir()) == []
    assert (entries[0] / "edgekit-run").is_file()
