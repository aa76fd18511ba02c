"""A user's install: build the wheel, install it (not editable) into a fresh venv, run the default
pipeline from an empty folder, and read its table. Catches data files missing from the wheel
(target profiles, calibration sets) and paths that only resolve inside the checkout."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
REPORT_FILES = ("pipeline.md", "pipeline.json", "bench.json", "gate.json", "gate.md", "junit.xml", "report.html")


def _run(argv, **kwargs) -> subprocess.CompletedProcess:
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=1200, check=False, **kwargs)
    assert proc.returncode == 0, f"{argv[:4]} exited {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """A venv holding the wheel of this checkout; its dependencies come from this interpreter's
    site-packages through a .pth line (added after the venv's own, so the wheel wins; the editable
    install's finder there is not activated: .pth files are read only in site directories)."""
    work = tmp_path_factory.mktemp("wheel")
    source = _source_copy(work / "src")
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(work / "dist"),
          str(source)])
    (wheel,) = (work / "dist").glob("edgekit_ml-*.whl")
    venv = _venv_over_host_dependencies(work / "venv")
    _run([sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install", "--no-deps", "--no-index",
          "-q", str(wheel)])
    return venv


def _source_copy(source: Path) -> Path:
    """What a source distribution holds: the packaging files, the package and the target profiles."""
    source.mkdir()
    for name in ("pyproject.toml", "setup.py", "README.md"):
        shutil.copy2(REPO / name, source / name)
    for folder in ("edgekit", "targets"):
        shutil.copytree(REPO / folder, source / folder, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    return source


def _venv_over_host_dependencies(venv: Path) -> Path:
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)])
    python = venv / "bin" / "python"
    site = Path(_run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).stdout.strip())
    (site / "zz_host_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return venv


@pytest.mark.slow
def test_the_wheel_carries_its_data_and_imports_from_the_venv(installed, tmp_path):
    python = installed / "bin" / "python"
    probe = ("import edgekit, edgekit.core.targets as t, edgekit.data.calibsets as c; "
             "print(edgekit.__file__); print(sorted(t.available_targets())); print(c.default_calibration('digits32'))")
    lines = _run([str(python), "-c", probe], cwd=tmp_path).stdout.splitlines()
    assert lines[0].startswith(str(installed)), lines[0]  # the installed copy, not the checkout
    assert "rpi4" in lines[1] and "rpi5" in lines[1]
    assert lines[2].startswith(str(installed)) and lines[2].endswith("digits32")
    meta = _run([str(python), "-c", "from importlib import metadata; print(metadata.version('edgekit-ml'))"]).stdout
    assert meta.strip() == "0.1.0"


SETUPTOOLS_WARNINGS = re.compile(r"!!|BuildBackendWarning|Setuptools\w*Warning|absent from the packages")


@pytest.mark.slow
def test_an_editable_install_says_no_warning_and_finds_the_targets_and_handlers(tmp_path):
    """What .ci/setup does (pip install -e), in a fresh venv over a copy of the checkout."""
    source = _source_copy(tmp_path / "src")
    python = _venv_over_host_dependencies(tmp_path / "venv") / "bin" / "python"
    done = _run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "--no-index",
                 "--no-build-isolation", "-e", str(source)])
    assert not SETUPTOOLS_WARNINGS.search(done.stdout + done.stderr), (done.stdout + done.stderr)[-3000:]
    probe = ("import edgekit, edgekit.core.targets as t; from importlib.metadata import entry_points; "
             "print(edgekit.__file__); print(sorted(t.available_targets())); "
             "print(sorted(e.value for e in entry_points(group='edgekit.handlers')))")
    lines = _run([str(python), "-c", probe], cwd=tmp_path).stdout.splitlines()
    assert lines[0] == str(source / "edgekit" / "__init__.py")  # the checkout's files, edited in place
    assert "rpi4" in lines[1] and "rpi5" in lines[1]  # targets/ read from the checkout, from any folder
    assert lines[2] == "['edgekit.llm.handlers', 'edgekit.serve.handlers']"


@pytest.mark.slow
def test_the_readme_python_api_example_runs_on_the_installed_wheel(installed, tmp_path):
    from test_api import readme_example

    check = f"import edgekit.api\nassert edgekit.api.__file__.startswith({str(installed)!r}), edgekit.api.__file__\n"
    proc = _run([str(installed / "bin" / "python"), "-c", check + readme_example()], cwd=tmp_path,
                env={**os.environ, "EDGEKIT_NO_PROGRESS": "1"})
    assert proc.stdout.strip().splitlines()[-1] == "gate passed"  # deterministic: rpi4's p99 holds runs on a Pi only
    assert (tmp_path / "dist" / "model.onnx").is_file()


@pytest.mark.slow
def test_default_pipeline_from_an_empty_folder_shows_int8_paying_off(installed, tmp_path):
    env = {**os.environ, "EDGEKIT_NO_PROGRESS": "1"}
    env.pop("EDGEKIT_TARGETS_DIR", None)
    # Defaults throughout (model, epochs, calibration, bench); only the p99/RSS budgets are opened
    # up: this shared test machine's stalls are not what this test checks.
    proc = subprocess.run([str(installed / "bin" / "edgekit"), "pipeline", "--out", "run",
                           "--max-p99-ms", "10s", "--max-peak-rss-mb", "8GiB"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=1200, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = tmp_path / "run"
    for name in REPORT_FILES:
        assert (out / name).is_file(), name
    summary = json.loads((out / "pipeline.json").read_text())
    assert summary["model"] == "digits-mobilenet" and summary["float_accuracy"] >= 0.95
    best = summary["recommended"]
    # The pipeline's own decision, from intervals across worker processes (not one median):
    assert best["pays_off"] is True, best  # the 95 % interval of int8/fp32 p50 lies below 1
    # measured 0.38-0.42x on AVX512-VNNI hosts and 0.70-0.77x on an AVX2-only AMD EPYC (no VNNI: int8
    # dot products have no fast path there); the interval above is the decision, this bounds its centre
    assert best["p50_ratio"] <= 0.85, best
    assert best["size_ratio"] <= 0.3, best
    assert best["accuracy_drop_points"] <= 1.0, best
    # "Recommended: VARIANT: ..." on host timings, "Recommended for the target, estimated on ...: VARIANT: ..." on rpi4's core
    assert "Recommended" in proc.stdout and f": {best['variant']}: " in " ".join(proc.stdout.split())
    # static int8 calibrated on the set shipped inside the installed package
    assert "data/calib/digits32" in (out / "quantized" / "static" / "manifest.json").read_text()


def readme_commands(heading: str) -> list[str]:
    """The command lines of the first ``sh`` block under ``heading`` in the README, as written
    (comments after ``#`` removed)."""
    text = (REPO / "README.md").read_text(encoding="utf-8")
    section = text[text.index("\n" + heading + "\n"):]
    block = section[section.index("```sh\n") + len("```sh\n"):]
    block = block[:block.index("```")]
    lines = []
    for line in block.splitlines():
        command = line.split("  #", 1)[0].strip()
        if command and not command.startswith("#"):
            lines.append(command)
    return lines


THIRD_PARTY_NOISE = re.compile(r"(Deprecation|User|Future|Tracer|Runtime)Warning|SetuptoolsDeprecation|warnings\.warn"
                               r"|^\s*!!|^W\d{4} |^\[W ")


def _user_env(installed: Path) -> dict:
    env = {**os.environ, "PATH": f"{installed / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}"}
    for name in ("EDGEKIT_TARGETS_DIR", "EDGEKIT_NO_PROGRESS", "PYTHONWARNINGS"):
        env.pop(name, None)
    return env


def _run_readme_line(line: str, cwd: Path, env: dict) -> subprocess.CompletedProcess:
    """One README line as a shell would run it (argv, a ``> FILE`` redirect), never through a shell."""
    target = None
    if " > " in line:
        line, target = (part.strip() for part in line.rsplit(" > ", 1))
    proc = subprocess.run(shlex.split(line), cwd=cwd, env=env, capture_output=True, text=True, timeout=1200,
                          check=False)
    assert proc.returncode == 0, f"{line}\nexited {proc.returncode}\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
    if target:
        (cwd / target).write_text(proc.stdout)
    noise = [text for text in proc.stderr.splitlines() if THIRD_PARTY_NOISE.search(text)]
    assert not noise, f"{line}: third-party noise on stderr:\n" + "\n".join(noise[:20])
    return proc


@pytest.mark.slow
def test_the_readme_stage_commands_run_as_written_from_an_empty_folder(installed, tmp_path):
    """README's "The stages, one at a time", line by line, as a user pastes it: the installed wheel
    on PATH, an empty folder, nothing from the checkout. Then the serving example's payloads against
    `edgekit serve dist`: the predict requests a user can send as written."""
    stages = readme_commands("## The stages, one at a time")
    assert [line.split()[1] for line in stages] == ["train", "quantize", "export", "bench", "gate"]
    env = _user_env(installed)
    work = tmp_path / "empty"
    work.mkdir()
    outputs = [_run_readme_line(line, work, env) for line in stages]
    assert json.loads((work / "runs" / "digits" / "manifest.json").read_text())["model"]["name"] == "digits-cnn"
    recipe = (work / "runs" / "digits-int8" / "manifest.json").read_text()
    assert '"static"' in recipe and str(installed) in recipe  # calibrated on the set inside the installed wheel
    assert (work / "dist" / "model.onnx").is_file() and (work / "dist" / "model.pt").is_file()
    assert json.loads((work / "bench.json").read_text())["results"]
    assert "passed" in outputs[-1].stdout.lower()

    serving = readme_commands("## Serving")
    payloads = [line for line in serving if line.startswith(("python -c", "curl")) and "/v1/generate" not in line]
    assert len(payloads) == 4, payloads
    port = _free_port()
    server = subprocess.Popen(["edgekit", "serve", "dist", "--port", str(port)], cwd=work, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        _wait_ready(port, server)
        answers = []
        for line in payloads:
            line = line.replace("localhost:8000", f"127.0.0.1:{port}").replace("python -c", sys.executable + " -c")
            proc = _run_readme_line(line, work, env)
            if line.startswith("curl"):
                answers.append(json.loads(proc.stdout))
    finally:
        server.terminate()
        server.wait(timeout=60)
    for answer in answers:
        logits = answer["outputs"]["logits"]
        assert len(logits) == 1 and len(logits[0]) == 10, answer
    assert answers[0] == answers[1]  # the JSON and the .npz body carry the same image


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _wait_ready(port: int, server: subprocess.Popen) -> None:
    import time
    import urllib.error
    import urllib.request

    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise AssertionError(f"edgekit serve exited {server.returncode}: {server.stdout.read()[-3000:]}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=5) as reply:
                if reply.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.5)
    raise AssertionError("edgekit serve was not ready within 180 s")


def test_the_readme_examples_need_no_checkout_and_no_sudo():
    """What a user pastes must work from any folder: no `sudo`, no checkout-relative data paths in
    the examples of a stage (the install, quick-start and test sections set up a checkout on purpose; the
    docs/ pages are held to the same in tests/test_docs.py)."""
    text = (REPO / "README.md").read_text(encoding="utf-8")
    assert "sudo " not in text
    for heading in ("## The stages, one at a time", "## Quantize a model of your own", "## Export and bundle for a Pi",
                    "## Verify under emulation", "## Bench, here or on the board", "## CI gates",
                    "## Language models from GGUF", "## Serving"):
        for line in readme_commands(heading):
            assert "calib_data/" not in line and ".venv/bin" not in line and "pip install -e" not in line, line
