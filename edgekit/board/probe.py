"""edgekit emulation probe: run one model file on the inputs stored in a reference.npz.

Part of the board package (``edgekit.board``). ``edgekit verify --emulate`` runs it inside the
emulated aarch64 rootfs with the bundle's own Python environment and on the host, so both sides
execute identical code.

    python probe.py MODEL REFERENCE.npz OUT.npz [--format onnx|torchscript|executorch] [--engine NAME]
        [--threads N] [--inputs NAME,NAME...]

Writes every output, ``b{batch}/output`` (the first) and ``b{batch}/outputs/{k}`` (k = 1, 2, ...), for
every ``b{batch}/input/...`` group of REFERENCE.npz into OUT.npz (atomically) and prints one JSON object about the run on stdout. Exit codes: 0 ok, 1 the model
failed to load or run, 2 usage error.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
from pathlib import Path

from .errors import EXIT_FAILED, EXIT_OK, EXIT_USAGE, BoardError, BoardUsageError, first_line
from .inputs import output_key, read_reference
from .manifest import FORMATS, detect_format
from .outfile import check_output_path, write_atomic
from .runtimes import open_model


def save_npz(path: str, arrays: dict) -> None:
    import numpy as np

    write_atomic(path, lambda fh: np.savez(fh, **arrays), "OUT")


def probe(args) -> dict:
    import numpy as np

    check_output_path(args.out, "OUT")

    fmt = detect_format(Path(args.model), None, args.format)
    runtime = open_model(fmt, Path(args.model), args.threads, args.engine)
    order = [name for name in (args.inputs or "").split(",") if name]
    outputs = {}
    for batch, (inputs, _) in read_reference(args.reference, need_outputs=False).items():
        try:
            for index, output in enumerate(runtime.predict_outputs(inputs, order)):
                outputs[output_key(batch, index)] = output
        except (BoardError, BoardUsageError):
            raise
        except Exception as exc:  # noqa: BLE001 - runtime-specific exception types
            raise BoardError(f"inference at batch {batch} failed: {first_line(exc)}") from None
    save_npz(args.out, outputs)
    info = {key: value for key, value in runtime.info.items() if key != "threads_note"}
    return {
        "machine": platform.machine(),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "runtime": info,
        "format": fmt,
        "threads": args.threads,
        "batches": sorted({int(k[1:].split("/")[0]) for k in outputs}),
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="probe.py", description="Run a model on reference inputs.")
    parser.add_argument("model")
    parser.add_argument("reference")
    parser.add_argument("out")
    parser.add_argument("--format", choices=FORMATS)
    parser.add_argument("--engine")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--inputs", help="comma-separated input names in call order")
    args = parser.parse_args(argv)
    try:
        info = probe(args)
    except BoardUsageError as exc:
        print(f"Error: {first_line(exc)}", file=sys.stderr)
        return EXIT_USAGE
    except BoardError as exc:
        print(f"Error: {first_line(exc)}", file=sys.stderr)
        return EXIT_FAILED
    except ImportError as exc:
        print(f"Error: a runtime is missing: {first_line(exc)}", file=sys.stderr)
        return EXIT_FAILED
    except (OSError, ValueError) as exc:
        print(f"Error: {first_line(exc)}", file=sys.stderr)
        return EXIT_USAGE
    sys.stdout.write(json.dumps(info) + "\n")
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
