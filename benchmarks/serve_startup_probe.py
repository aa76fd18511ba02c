"""What the start-up probe costs `edgekit serve`: time from start to ready, with and without it.

`edgekit serve` first loads and runs the model once in a child process (edgekit/serve/startup_probe.py),
so a file that crashes its runtime cannot take the server down. This starts the server on the same
model with the probe and with the probe switched off (in this benchmark only: the server process
replaces `probe_served_model` with a no-op), in alternating rounds, and prints the median time to
`/readyz` answering 200, and their ratio, per format: a tiny MLP as ONNX, TorchScript and ExecuTorch.

    .venv/bin/python benchmarks/serve_startup_probe.py [--rounds 5]

On the 2-core host, quiet (3 rounds): ONNX 1.06 -> 1.28 s (x1.21), TorchScript 3.05 -> 4.17 s (x1.37),
ExecuTorch 3.66 -> 4.20 s (x1.15). Shared with other jobs (load average ~3.6) the child competes with
the server for the cores: x1.16, x2.99, x2.03.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))
os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")

WITHOUT_PROBE = ("import sys\n"
                 "import edgekit.serve.loader as loader\n"
                 "loader.probe_served_model = lambda *args, **kwargs: {}\n"
                 "from edgekit.cli.app import main\n"
                 "sys.argv = ['edgekit', *sys.argv[1:]]\n"
                 "main()\n")


def time_to_ready(artifact: Path, fmt: str, probe: bool) -> float:
    from edgekit.core import process

    start = time.perf_counter()
    args = ["serve", str(artifact), "--format", fmt, "--host", "127.0.0.1", "--port", "0", "--threads", "1"]
    argv = [sys.executable, "-m", "edgekit", *args] if probe else [sys.executable, "-c", WITHOUT_PROBE, *args]
    proc = process.spawn(argv)
    try:
        process.wait_ready(proc, 300)
        return time.perf_counter() - start
    finally:
        process.stop(proc, 30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    from tiny_models import build_models

    with tempfile.TemporaryDirectory() as tmp:
        artifact = build_models(Path(tmp) / "art", formats=("onnx", "torchscript", "executorch"), engine=None)
        print(f"{'format':<12} {'without probe s':>16} {'with probe s':>13} {'ratio':>6}")
        for fmt in ("onnx", "torchscript", "executorch"):
            times: dict[bool, list] = {True: [], False: []}
            for _ in range(args.rounds):
                for probe in (False, True):
                    times[probe].append(time_to_ready(artifact, fmt, probe))
            without, with_probe = statistics.median(times[False]), statistics.median(times[True])
            print(f"{fmt:<12} {without:>16.2f} {with_probe:>13.2f} {with_probe / without:>6.2f}")


if __name__ == "__main__":
    main()
