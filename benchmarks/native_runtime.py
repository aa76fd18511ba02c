"""The native runtime (``edgekit-run``, C++, no Python) against ExecuTorch's Python runtime, side by side.

For the digits CNN, the default digits-mobilenet and pretrained EfficientNet-Lite0 (``bench-models``
extra; skipped without it), fp32 and static int8 ``.pte`` files made through the CLI:

- per-call p50 and peak RSS: the Python runtime (the export's ``model.pte``) and the native runner
  (a native bundle built for this host) in one interleaved ``edgekit bench`` session (batch 1,
  1 thread, worker processes alternating), as ratios native / Python;
- process start to first output: ``edgekit-run probe`` and the board package's ``probe.py`` on the
  same reference inputs, alternated, median of the runs, as a ratio;
- bundle size on disk: the native rpi4 bundle vs the Python ``.pte`` bundle plus the wheels its
  requirements pin for the board (sizes read from PyPI's index for manylinux_2_28_aarch64: PyPI's
  aarch64 torch is the one a board can reach; nothing is downloaded);
- parity on emulated Cortex-A72 (rpi4) and Cortex-A76 (rpi5): ``edgekit verify --emulate`` of the
  native bundles (needs root, qemu-user-static and the cross compiler): largest difference from this
  host's outputs, and whether they are bit-identical.

    PYTHONPATH=tests .venv/bin/python benchmarks/native_runtime.py [--models digits-cnn,digits-mobilenet,cnn]
        [--min-time 2] [--processes 4] [--starts 7] [--work DIR (kept; finished steps are reused)]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
EDGEKIT = [str(Path(sys.executable).with_name("edgekit"))]
ENV = {**os.environ, "EDGEKIT_NO_PROGRESS": "1", "PYTHONPATH": str(ROOT / "tests")}
PLATFORM = "manylinux_2_28_aarch64"


def run(*args, check=True) -> subprocess.CompletedProcess:
    done = subprocess.run([*map(str, args)], capture_output=True, text=True, env=ENV)
    if check and done.returncode != 0:
        raise SystemExit(f"{' '.join(map(str, args[:4]))} ... failed: {done.stderr.strip().splitlines()[-1:]}")
    return done


def produce(model: str, work: Path) -> dict[str, Path]:
    """fp32 and int8 .pte export folders for ``model``."""
    out = {"fp32": work / "fp32", "int8": work / "int8"}
    if all((folder / "model.pte").is_file() for folder in out.values()):
        return out
    if model == "cnn":
        import pretrained_cnn as cnn

        calib = cnn.write_calibration(work / "calib", count=32)
        source = ["pretrained_cnn:model", "--input-shape", "1x3x224x224"]
        run(*EDGEKIT, "export", *source, "--format", "executorch", "--target", "rpi4", "--out", out["fp32"])
        run(*EDGEKIT, "quantize", *source, "--method", "static", "--calib", calib, "--format", "executorch",
            "--target", "rpi4", "--out", work / "q")
    else:
        run(*EDGEKIT, "train", "-m", model, "--epochs", "3", "--out", work / "ckpt")
        run(*EDGEKIT, "export", work / "ckpt", "--format", "executorch", "--target", "rpi4", "--out", out["fp32"])
        run(*EDGEKIT, "quantize", work / "ckpt", "--method", "static", "--format", "executorch", "--target", "rpi4",
            "--out", work / "q")
    run(*EDGEKIT, "export", work / "q", "--format", "executorch", "--target", "rpi4", "--out", out["int8"])
    return out


def bundle(export: Path, target: str, out: Path, runtime: str) -> Path:
    if not (out / "bundle.json").is_file():
        run(*EDGEKIT, "bundle", export, "--target", target, "--runtime", runtime, "--out", out, "--force")
    return out


def timing(exports: dict, natives: dict, work: Path, args) -> dict:
    paths = []
    for precision in ("fp32", "int8"):
        paths += [exports[precision] / "model.pte", natives[precision]]
    out = work / "bench.json"
    run(*EDGEKIT, "bench", *paths, "--threads", "1", "--min-time", args.min_time, "--processes", args.processes,
        "--json", out)
    results = json.loads(out.read_text())["results"]
    figures = {}
    for i, precision in enumerate(("fp32", "int8")):
        python, native = results[2 * i], results[2 * i + 1]
        assert native["runtime"]["name"] == "executorch-native", native["runtime"]
        figures[precision] = {
            "p50_ratio": native["timing"]["p50"] / python["timing"]["p50"],
            "p50_ms": (python["timing"]["p50"], native["timing"]["p50"]),
            "rss_ratio": native["memory"]["peak_rss"] / python["memory"]["peak_rss"],
            "rss_mb": (python["memory"]["peak_rss"], native["memory"]["peak_rss"]),
        }
    return figures


def start_up(exports: dict, natives: dict, starts: int) -> dict:
    from edgekit.board.entries import install

    figures = {}
    with tempfile.TemporaryDirectory() as tmp:
        install(Path(tmp) / "board", entries=("probe.py",))
        probe = Path(tmp) / "board" / "probe.py"
        for precision in ("fp32", "int8"):
            model, reference = exports[precision] / "model.pte", exports[precision] / "reference.npz"
            commands = {
                "python": [sys.executable, "-I", str(probe), str(model), str(reference), f"{tmp}/p.npz", "--threads", "1"],
                "native": [str(natives[precision] / "edgekit-run"), "probe", str(model), str(reference), f"{tmp}/n.npz",
                           "--threads", "1"],
            }
            seconds = {name: [] for name in commands}
            for _ in range(starts):  # alternated: the machine's state hits both alike
                for name, argv in commands.items():
                    began = time.perf_counter()
                    subprocess.run(argv, check=True, capture_output=True, env=ENV)
                    seconds[name].append(time.perf_counter() - began)
            python, native = statistics.median(seconds["python"]), statistics.median(seconds["native"])
            figures[precision] = {"ratio": native / python, "seconds": (python, native)}
    return figures


def wheel_bytes(requirements: Path) -> tuple[int, list[str]]:
    """The pinned wheels' sizes on PyPI for the board's platform (read from the index, not downloaded)."""
    total, missing = 0, []
    for line in requirements.read_text().splitlines():
        if not line or line.startswith(("#", "-")) or "==" not in line:
            continue
        name, version = line.split("==")
        request = urllib.request.Request(f"https://pypi.org/simple/{name}/",
                                         headers={"Accept": "application/vnd.pypi.simple.v1+json"})
        with urllib.request.urlopen(request, timeout=60) as answer:
            files = json.load(answer)["files"]
        sizes = [f["size"] for f in files if f"-{version}-" in f["filename"] and f["filename"].endswith(".whl")
                 and ("none-any" in f["filename"] or (("aarch64" in f["filename"]) and "cp311" in f["filename"]))]
        if sizes:
            total += max(sizes)
        else:
            missing.append(line)
    return total, missing


def sizes(exports: dict, work: Path) -> dict:
    native = bundle(exports["int8"], "rpi4", work / "rpi4-native", "native")
    python = bundle(exports["int8"], "rpi4", work / "rpi4-python", "python")
    native_bytes = sum(p.stat().st_size for p in native.rglob("*") if p.is_file())
    folder_bytes = sum(p.stat().st_size for p in python.rglob("*") if p.is_file())
    wheels, missing = wheel_bytes(python / "requirements.txt")
    return {"native": native_bytes, "python": folder_bytes + wheels, "ratio": native_bytes / (folder_bytes + wheels),
            "missing": missing}


def parity(exports: dict, work: Path) -> dict:
    figures = {}
    for target in ("rpi4", "rpi5"):
        for precision in ("fp32", "int8"):
            folder = bundle(exports[precision], target, work / f"{target}-{precision}-native", "native")
            report = work / f"verify-{target}-{precision}.json"
            done = run(*EDGEKIT, "verify", folder, "--emulate", "--no-bench", "--json", report, check=False)
            if done.returncode != 0 or not report.is_file():
                figures[(target, precision)] = {"error": (done.stderr.strip().splitlines() or ["?"])[-1]}
                continue
            doc = json.loads(report.read_text())
            figures[(target, precision)] = {
                "cpu": doc["emulation"]["qemu_cpu"], "bit_identical": doc["emulation"].get("bit_identical"),
                "max_abs": max(b["emulated_vs_host"]["max_abs"] for b in doc["batches"]), "passed": doc["passed"]}
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="digits-cnn,digits-mobilenet,cnn")
    parser.add_argument("--min-time", default="2")
    parser.add_argument("--processes", default="4")
    parser.add_argument("--starts", type=int, default=7)
    parser.add_argument("--work", type=Path, default=None)
    parser.add_argument("--no-emulation", action="store_true")
    args = parser.parse_args()
    work_root = args.work or Path(tempfile.mkdtemp(prefix="edgekit-native-bench-"))
    for model in args.models.split(","):
        if model == "cnn":
            import pretrained_cnn as cnn

            if cnn.weights_path() is None:
                print("cnn: skipped (pip install 'edgekit-ml[bench-models]')")
                continue
        work = work_root / model
        work.mkdir(parents=True, exist_ok=True)
        exports = produce(model, work)
        natives = {p: bundle(exports[p], "x86-64", work / f"host-{p}-native", "native") for p in ("fp32", "int8")}
        print(f"== {model}")
        for precision, f in timing(exports, natives, work, args).items():
            print(f"  {precision}: per-call p50 native/python {f['p50_ratio']:.3f}x ({f['p50_ms'][1]:.4f} vs "
                  f"{f['p50_ms'][0]:.4f} ms); peak RSS {f['rss_ratio']:.3f}x ({f['rss_mb'][1]:.1f} vs {f['rss_mb'][0]:.1f} MB)")
        for precision, f in start_up(exports, natives, args.starts).items():
            print(f"  {precision}: start to first output native/python {f['ratio']:.3f}x "
                  f"({f['seconds'][1]:.3f} vs {f['seconds'][0]:.3f} s, median of {args.starts})")
        s = sizes(exports, work)
        print(f"  rpi4 int8 bundle on disk native/python+wheels {s['ratio']:.4f}x ({s['native'] / 2**20:.1f} MiB vs "
              f"{s['python'] / 2**20:.1f} MiB){'; not on PyPI: ' + ', '.join(s['missing']) if s['missing'] else ''}")
        if not args.no_emulation:
            for (target, precision), f in parity(exports, work).items():
                if "error" in f:
                    print(f"  {target} {precision}: emulation failed: {f['error']}")
                else:
                    print(f"  {target} {precision} on emulated {f['cpu']}: max |emulated - host| {f['max_abs']:.3g}, "
                          f"bit-identical {f['bit_identical']}, passed {f['passed']}")
    print(f"(work folder: {work_root})")


if __name__ == "__main__":
    main()
