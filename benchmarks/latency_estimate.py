"""Predicted vs published latency on Raspberry Pi boards: edgekit's per-core estimate, fitted and checked.

For every architecture with published on-board figures (edgekit/estimate/published.toml) this
exports the same network (benchmarks/published_nets.py, random weights) to an fp32 .pte, counts its
instructions per inference on each board's core under QEMU (edgekit.emulate.icount, one thread),
fits each core's cost model to the figures marked "fit" (edgekit.estimate.fit) and prints, for
every figure, the published latency, the prediction and the error; the median absolute error is
printed separately for the fitted figures and the held-back ("check") ones.

    .venv/bin/python benchmarks/latency_estimate.py            # counts from the cache file; fit; table
    .venv/bin/python benchmarks/latency_estimate.py --recount  # count again (about 1-3 min per net and core)
    .venv/bin/python benchmarks/latency_estimate.py --write    # also write edgekit/estimate/cores.toml

Counts are kept in benchmarks/latency_estimate_counts.json (with the QEMU version and runner build
they were counted with); the exported .pte files in ~/.cache/edgekit/latency-estimate.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.published_nets import NETS  # noqa: E402
from edgekit.estimate.cores import default_path as cores_path, write_cores  # noqa: E402
from edgekit.estimate.figures import load_figures  # noqa: E402
from edgekit.estimate.fit import fit_core, predict  # noqa: E402

COUNTS = Path(__file__).with_name("latency_estimate_counts.json")
CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "edgekit" / "latency-estimate"
# the order nets are counted in: cheap ones first, so a partial run already fits and checks (resnet50 takes longest)
ORDER = ("mobilenet_v2", "efficientnet_b0", "mobilenet_v3_large", "mobilenet_v1", "mobilenet_v3_small", "resnet18",
         "resnet50")
# A core whose nets were not all counted takes the missing counts from another core that runs the same
# fp32 kernels (both ARMv8.0-A without dot-product: XNNPACK picks the same microkernels); each such
# row is marked. Measured: mobilenet_v2 on cortex-a53 and cortex-a72 differ by 995 instructions in 114.7 M.
BORROW = {"cortex-a53": "cortex-a72"}
RUNS = 1  # counts are deterministic: runs of 1 and 2 inferences differ by one inference exactly


def exported(net: str) -> Path:
    """The net's fp32 .pte, exported (and verified) by ``edgekit export`` once and cached."""
    import fcntl

    out = CACHE / net
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / "export.lock", "w") as lock:  # one export at a time: several cores may be counted at once
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (out / "model.pte").is_file():
            env = {**os.environ, "PYTHONPATH": str(ROOT)}
            subprocess.run([sys.executable, "-m", "edgekit", "export", f"benchmarks.published_nets:{net}",
                            "--input-shape", "1x3x224x224", "--format", "executorch", "--out", str(out), "--force"],
                           check=True, env=env, cwd=ROOT, stdout=subprocess.DEVNULL)
    return out / "model.pte"


def counted(nets: list[str], cores: list[str], recount: bool) -> dict:
    from edgekit.emulate.icount import count_per_run

    for core in cores:
        for net in nets:
            if not recount and net in read_counts().get(core, {}):
                continue
            started = time.monotonic()
            result = count_per_run(exported(net), "executorch", core, threads=1, runs=RUNS)
            result["seconds"] = round(time.monotonic() - started, 1)
            save_count(core, net, result)
            print(f"counted {net} on {core}: {result['per_run'] / 1e6:.1f} M instructions per inference "
                  f"({result['seconds']:.0f} s)", flush=True)
    return read_counts()


def read_counts() -> dict:
    return json.loads(COUNTS.read_text()) if COUNTS.is_file() else {}


def save_count(core: str, net: str, result: dict) -> None:
    """Merged into the file under a lock: several cores may be counted at once, one process each."""
    import fcntl

    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / "counts.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        cache = read_counts()
        cache.setdefault(core, {})[net] = result
        COUNTS.write_text(json.dumps(cache, indent=1, sort_keys=True) + "\n")


def fit_all(figures, cache: dict):
    """(core -> fitted model, a Prediction per figure with counts, the (core, net) counts borrowed)."""
    models, rows, borrowed = {}, [], set()
    for core in sorted({f.core for f in figures}):
        counts = {net: entry["classes"] for net, entry in cache.get(core, {}).items()}
        for net, entry in cache.get(BORROW.get(core, ""), {}).items():
            if net not in counts:
                counts[net] = entry["classes"]
                borrowed.add((core, net))
        if counts:
            models[core] = fit_core(core, figures, counts)
            rows += predict(models[core], figures, counts)
    return models, rows, borrowed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--recount", action="store_true", help="count every net again under QEMU")
    parser.add_argument("--count", action="store_true", help="count the nets and cores missing from the cache file")
    parser.add_argument("--write", action="store_true", help="write the fitted models to edgekit/estimate/cores.toml")
    parser.add_argument("--markdown", action="store_true", help="print the table as markdown (docs/latency-estimate.md)")
    parser.add_argument("--cores", help="comma-separated cores to count, in this order (default: every core figured)")
    args = parser.parse_args()

    figures = load_figures()
    cores = sorted({f.core for f in figures})
    if args.count or args.recount:
        order = args.cores.split(",") if args.cores else cores
        wanted = {f.model for f in figures} & set(NETS)
        counted([net for net in ORDER if net in wanted], order, args.recount)
    cache = read_counts()
    models, rows, borrowed = fit_all(figures, cache)
    for core in sorted(set(cores) - set(models)):
        print(f"{core}: no counts (run with --count)")

    ordered = sorted(rows, key=lambda r: (r.figure.core, r.figure.role, r.figure.label))
    if args.markdown:
        print("| board (core, MHz) | network | threads | source | role | published ms | predicted ms | error |")
        print("|---|---|---:|---|---|---:|---:|---:|")
        for row in ordered:
            f = row.figure
            mark = "*" if (f.core, f.model) in borrowed else ""
            print(f"| {f.board} ({f.core}, {f.mhz:.0f}) | {f.model}{mark} | {f.threads} | {f.source.name} | {f.role} | "
                  f"{f.ms:.2f} | {row.ms:.2f} | {100 * row.error:+.1f}% |")
    else:
        print(f"{'figure':<44} {'role':<5} {'published':>9} {'predicted':>9} {'error':>7}")
        for row in ordered:
            f = row.figure
            mark = "*" if (f.core, f.model) in borrowed else " "
            print(f"{f.label + mark:<44} {f.role:<5} {f.ms:>9.2f} {row.ms:>9.2f} {100 * row.error:>+6.1f}%")
    missing = [f.label for f in figures if (f.core, f.model) not in {(r.figure.core, r.figure.model) for r in rows}]
    if missing:
        print(f"not compared (no counts yet; run with --count): {', '.join(missing)}")
    if borrowed:
        print("* counts taken on " + ", ".join(f"{BORROW[c]} for {c}" for c in sorted({c for c, _ in borrowed}))
              + " (the same fp32 kernels run on both)")
    for role in ("fit", "check", "aside"):
        errors = [abs(r.error) for r in rows if r.figure.role == role]
        cores_seen = sorted({r.figure.core for r in rows if r.figure.role == role})
        if errors:
            print(f"median absolute error, {role} figures: {100 * statistics.median(errors):.1f}% "
                  f"({len(errors)} figures on {', '.join(cores_seen)})")
    for core in sorted(models):
        errors = [abs(r.error) for r in rows if r.figure.role == "check" and r.figure.core == core]
        if errors:
            print(f"  {core}: check figures {100 * statistics.median(errors):.1f}% ({len(errors)})")
    errors = [abs(r.error) for r in rows]
    if errors:
        print(f"median absolute error, all figures: {100 * statistics.median(errors):.1f}% ({len(errors)} figures)")
    for core, model in models.items():
        cycles = ", ".join(f"{g} {c:.3f}" for g, c in model.cycles.items())
        print(f"{core}: cycles per instruction {cycles}; serial fraction {model.serial_fraction:.3f}; "
              f"sigma {model.sigma:.3f}")
    seconds = sum(entry.get("seconds", 0) for per_core in cache.values() for entry in per_core.values())
    print(f"counting took {seconds / 60:.1f} min in all (cached in {COUNTS.name})")
    if args.write and models:
        qemu = sorted({entry["qemu"] for per_core in cache.values() for entry in per_core.values()})
        header = ("Cost models per core, fitted by benchmarks/latency_estimate.py --write to the \"fit\" figures of\n"
                  "published.toml, from fp32 .pte instruction counts (edgekit.emulate.icount, one thread, QEMU "
                  f"{', '.join(qemu)}).\ncycles: per instruction of each group; serial_fraction: Amdahl's, for "
                  "threads; sigma: RMS of the fit's log errors (the band).")
        write_cores(cores_path(), models, header)
        print(f"wrote {cores_path()}")


if __name__ == "__main__":
    main()
