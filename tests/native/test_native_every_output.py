"""edgekit-run's check and probe on a model with three outputs (class logits, a feature vector, one
score per sample), in native bundles of both backends (ExecuTorch .pte, ONNX Runtime .onnx).

Independent references: the float torch model run in this process (the reference.npz must hold its
every output, and probe must return them), and the Python board check (check_outputs.py, the same
files through the Python runtimes): the C++ twin must reach the same verdicts with the same words.
The bundles are made through the CLI from ``edgekit export three_heads_model:three_heads``.
"""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import REPO

TIMEOUT = 900
HOST_TARGET = "x86-64"
MODEL_FILES = {"executorch": "model.pte", "onnx": "model.onnx"}
PER_SAMPLE = [4, 6, 1]  # the three outputs' values per sample (three_heads_model.three_heads)


def edgekit(*args) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parent), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, "-m", "edgekit", *map(str, args)], capture_output=True, text=True,
                          timeout=TIMEOUT, cwd=REPO, stdin=subprocess.DEVNULL, env=env)


def run(*argv) -> subprocess.CompletedProcess:
    return subprocess.run([str(a) for a in argv], capture_output=True, text=True, timeout=TIMEOUT,
                          stdin=subprocess.DEVNULL)


def python_check(*args) -> subprocess.CompletedProcess:
    """check_outputs.py (edgekit.board.check) on the same files, through the Python runtimes."""
    return subprocess.run([sys.executable, "-m", "edgekit.board.check", *map(str, args)], capture_output=True,
                          text=True, cwd=REPO, timeout=TIMEOUT, env={**os.environ, "TORCH_CPP_LOG_LEVEL": "ERROR"})


def check_doc(done: subprocess.CompletedProcess) -> tuple[dict, str]:
    from edgekit.board.check import read_output

    assert done.returncode in (0, 1), done.stderr[-2000:]
    return read_output(done.stdout)


@pytest.fixture(scope="module")
def bundles(tmp_path_factory) -> dict[str, Path]:
    """The three-output model exported (fp32, .pte and .onnx) and bundled native for this host."""
    if shutil.which("g++") is None:
        pytest.skip("no C++ compiler (g++): apt-get install g++")
    if platform.machine() != "x86_64":
        pytest.skip(f"the host bundles here are built for the {HOST_TARGET} target; this host is {platform.machine()}")
    base = tmp_path_factory.mktemp("every-output")
    done = edgekit("export", "three_heads_model:three_heads", "--input-shape", "Nx12", "--format", "onnx,executorch",
                   "--target", HOST_TARGET, "--out", base / "export")
    assert done.returncode == 0, done.stderr[-2000:]
    out = {}
    for fmt in MODEL_FILES:
        done = edgekit("bundle", base / "export", "--target", HOST_TARGET, "--runtime", "native", "--format", fmt,
                       "--out", base / fmt)
        assert done.returncode == 0, done.stderr[-2000:]
        out[fmt] = base / fmt
    return out


def float_outputs(inputs: np.ndarray) -> list[np.ndarray]:
    import torch
    from three_heads_model import three_heads

    with torch.no_grad():
        return [t.numpy() for t in three_heads().eval()(torch.from_numpy(inputs))]


def label(doc: dict, index: int) -> str:
    """How a failure names output ``index``: with the model's name for it where it has one (ONNX)."""
    name = doc["outputs"][index]["name"]
    return f"output {index} ({name!r}): " if name else f"output {index}: "


def write_reference(path: Path, arrays: dict) -> Path:
    np.savez(path, **arrays)
    return path


def checked(runner: Path, model: Path, reference: Path) -> tuple[subprocess.CompletedProcess, dict, str]:
    """edgekit-run check and check_outputs.py on the same files: the same exit status, verdict words
    and failures; figures equal to float32 rounding."""
    native = run(runner, "check", "--model", model, "--reference", reference)
    python = python_check("--model", model, "--reference", reference)
    assert native.returncode == python.returncode, (native.stderr[-1000:], python.stderr[-1000:])
    (ours, ours_verdict), (theirs, _) = check_doc(native), check_doc(python)
    assert sorted(ours) == sorted(theirs)
    assert ours["failures"] == theirs["failures"] and ours["notes"] == theirs["notes"]
    assert len(ours["outputs"]) == len(theirs["outputs"])
    for mine, other in zip(ours["outputs"], theirs["outputs"]):
        assert sorted(mine) == sorted(other)
        assert {k: mine[k] for k in ("index", "name", "per_sample", "ok", "failures")} == \
               {k: other[k] for k in ("index", "name", "per_sample", "ok", "failures")}
        for key in ("max_abs", "cosine", "top1_agreement", "max_abs_of_spread"):
            assert mine.get(key) == pytest.approx(other.get(key), abs=1e-6), key
    for batch, figures in ours["batches"].items():
        assert sorted(figures) == sorted(theirs["batches"][batch])
        assert [o["index"] for o in figures["outputs"]] == [o["index"] for o in theirs["batches"][batch]["outputs"]]
    assert ours_verdict.startswith("PASS: " if native.returncode == 0 else "FAIL: outputs differ from the reference: ")
    return native, ours, ours_verdict


@pytest.mark.slow
@pytest.mark.parametrize("fmt", list(MODEL_FILES))
def test_check_and_probe_cover_every_output(bundles, fmt, tmp_path):
    bundle = bundles[fmt]
    runner, model = bundle / "edgekit-run", bundle / MODEL_FILES[fmt]
    with np.load(bundle / "reference.npz") as data:
        reference = {key: data[key] for key in data.files}
    batches = sorted({key.split("/")[0] for key in reference})
    outputs_of = {b: [f"{b}/output", f"{b}/outputs/1", f"{b}/outputs/2"] for b in batches}
    expected = {b: float_outputs(reference[f"{b}/input/input"]) for b in batches}
    for b in batches:  # the bundle's reference holds the float model's every output
        assert sorted(k for k in reference if k.startswith(f"{b}/") and "/input/" not in k) == sorted(outputs_of[b])
        for key, want in zip(outputs_of[b], expected[b]):
            np.testing.assert_allclose(reference[key], want, rtol=0, atol=1e-5)

    # probe writes every output; the Python side (NativeRuntime.run) returns every output
    done = run(runner, "probe", model, bundle / "reference.npz", tmp_path / "probed.npz")
    assert done.returncode == 0, done.stderr
    with np.load(tmp_path / "probed.npz") as probed:
        assert sorted(probed.files) == sorted(k for b in batches for k in outputs_of[b])
        for b in batches:
            for key, want in zip(outputs_of[b], expected[b]):
                assert probed[key].dtype == np.float32
                np.testing.assert_allclose(probed[key], want, rtol=0, atol=1e-5)
    from edgekit.board.runtimes.native_runtime import NativeRuntime

    inputs = reference[f"{batches[-1]}/input/input"]
    got = NativeRuntime(model, 1, runner=runner).predict_outputs({"input": inputs})
    assert [g.shape for g in got] == [w.shape for w in expected[batches[-1]]]
    for g, want in zip(got, expected[batches[-1]]):
        np.testing.assert_allclose(g, want, rtol=0, atol=1e-5)

    # intact: PASS over the three outputs; the score (one value per sample) is held to its spread
    done, doc, line = checked(runner, model, bundle / "reference.npz")
    assert done.returncode == 0 and doc["ok"] and doc["notes"] == []
    assert [(o["index"], o["per_sample"], o["ok"]) for o in doc["outputs"]] == [(0, 4, True), (1, 6, True), (2, 1, True)]
    assert "max_abs_of_spread" in doc["outputs"][2] and "max_abs_of_spread" not in doc["outputs"][0]
    assert all(len(b["outputs"]) == 3 for b in doc["batches"].values())
    assert doc["max_abs"] < 1e-4 and doc["cosine"] > 0.9999

    # output 1 negated: FAIL naming output 1 (the cosine floor), nothing said of the others
    altered = dict(reference)
    for b in batches:
        altered[f"{b}/outputs/1"] = -reference[f"{b}/outputs/1"]
    done, doc, line = checked(runner, model, write_reference(tmp_path / "negated.npz", altered))
    assert done.returncode == 1 and [o["ok"] for o in doc["outputs"]] == [True, False, True]
    assert line.startswith(f"FAIL: outputs differ from the reference: {label(doc, 1)}cosine -1.000000 < 0.5"), line

    # the score shifted by 1 (its float values span far less): FAIL naming output 2, by its spread;
    # a cosine over its eight values would still pass the floor
    altered = dict(reference)
    for b in batches:
        altered[f"{b}/outputs/2"] = reference[f"{b}/outputs/2"] + np.float32(1)
    done, doc, line = checked(runner, model, write_reference(tmp_path / "shifted.npz", altered))
    scores = np.concatenate([reference[f"{b}/outputs/2"].ravel() for b in batches]).astype(np.float64)
    assert done.returncode == 1 and [o["ok"] for o in doc["outputs"]] == [True, True, False]
    assert doc["outputs"][2]["cosine"] > 0.5
    assert doc["outputs"][2]["max_abs_of_spread"] == pytest.approx(1 / (scores.max() - scores.min()), rel=1e-4)
    assert line.startswith(f"FAIL: outputs differ from the reference: {label(doc, 2)}max abs error ") and \
        line.endswith("of the float values' spread > 0.5 (one value per sample)"), line

    # a reference from before every output was kept (b{N}/output alone): output 0 compared, said in a note
    old = {k: v for k, v in reference.items() if "/outputs/" not in k}
    done, doc, line = checked(runner, model, write_reference(tmp_path / "old.npz", old))
    assert done.returncode == 0 and [o["index"] for o in doc["outputs"]] == [0]
    assert doc["notes"] == ["the model gives 3 outputs; the reference holds 1 (written before every output "
                            "was kept): 1 compared"]

    # a reference holding more outputs than the model gives: FAIL, one line
    more = dict(reference)
    for b in batches:
        more[f"{b}/outputs/3"] = reference[f"{b}/outputs/2"]
    done, doc, line = checked(runner, model, write_reference(tmp_path / "more.npz", more))
    assert done.returncode == 1 and doc["failures"] == ["the model gives 3 output(s); the reference holds 4"]

    # malformed numbering: a usage error in one line, nothing compared, the same words as check_outputs.py
    counts = {k: v for k, v in reference.items() if k != "b7/outputs/2"}
    malformed = {
        "gap": ({k: v for k, v in reference.items() if "/outputs/1" not in k}, "batch 1 lacks output 1"),
        "counts": (counts, "its batches hold different numbers of outputs"),
        "zero": ({**reference, "b1/outputs/0": reference["b1/output"]}, "unexpected array 'b1/outputs/0'"),
        "padded": ({**reference, "b1/outputs/01": reference["b1/outputs/1"]}, "unexpected array 'b1/outputs/01'"),
    }
    for name, (arrays, words) in malformed.items():
        path = write_reference(tmp_path / f"{name}.npz", arrays)
        native = run(runner, "check", "--model", model, "--reference", path)
        python = python_check("--model", model, "--reference", path)
        assert native.returncode == 2 == python.returncode and native.stdout == "", (name, native.stdout[-500:])
        assert native.stderr.splitlines() == [f"Error: {path}: {words}"] == python.stderr.splitlines(), \
            (name, native.stderr, python.stderr)
