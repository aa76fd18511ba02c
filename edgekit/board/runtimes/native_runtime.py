"""The native runner (``edgekit-run``, a C++ program): ExecuTorch, or ONNX Runtime, with no Python on the board.

The other runtimes load a model into this process; this one is a program, so this class runs it:
the argument lists of its commands (``bench``, ``check``, ``probe``, ``info``) and, for callers that
want arrays in and out, ``run`` through its ``probe`` command on temporary files.
"""

from __future__ import annotations

import json
import subprocess
import tempfile
from pathlib import Path

from ..errors import BoardError, BoardUsageError
from .base import Runtime

RUNNER = "edgekit-run"
RUN_TIMEOUT_S = 600.0


class NativeRuntime(Runtime):
    """``edgekit-run`` at ``runner`` (with its lib/ beside it) running the program at ``path``."""

    format = "executorch"
    suffixes = (".pte",)
    spec_match = "count"

    def __init__(self, path: Path, threads: int | None, engine: str | None = None, runner: Path | None = None,
                 prefix: tuple[str, ...] = ()):
        self.path = Path(path)
        self.runner = Path(runner) if runner is not None else self.path.parent / RUNNER
        self.prefix = tuple(prefix)  # e.g. qemu-aarch64-static -cpu cortex-a72 -L SYSROOT
        self.threads = threads or 1
        if not self.runner.is_file():
            raise BoardError(f"{self.runner} not found (a native bundle carries it beside the model)")
        self.facts = self._call(["info", str(self.path)])
        built = self.facts.get("runtime") if isinstance(self.facts.get("runtime"), dict) else {}  # which backend
        self.info = {"name": built.get("name") or "executorch-native",
                     "version": built.get("version") or self.facts.get("executorch_version"),
                     "threads": self.threads, "engine": None,
                     "providers": list(self.facts.get("registered_backends") or [])}

    def argv(self, command: str, *args: str) -> list[str]:
        return [*self.prefix, str(self.runner), command, *args]

    def _call(self, args: list[str]) -> dict:
        try:
            done = subprocess.run(self.argv(*args), capture_output=True, text=True, timeout=RUN_TIMEOUT_S,
                                  check=False, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            raise BoardError(f"{RUNNER} {args[0]} did not finish within {RUN_TIMEOUT_S:g} s") from None
        except OSError as exc:
            raise BoardError(f"cannot start {self.runner}: {exc.strerror or exc}") from None
        if done.returncode != 0:
            lines = [line for line in done.stderr.splitlines() if line.strip()]
            why = lines[-1].removeprefix("Error: ") if lines else (
                f"killed by signal {-done.returncode}" if done.returncode < 0 else f"exit status {done.returncode}")
            raise (BoardUsageError if done.returncode == 2 else BoardError)(why)
        try:
            doc = json.loads(done.stdout.strip().splitlines()[-1] if args[0] == "probe" else done.stdout)
        except (ValueError, IndexError):
            raise BoardError(f"{RUNNER} {args[0]} printed no JSON") from None
        if not isinstance(doc, dict):
            raise BoardError(f"{RUNNER} {args[0]} printed {type(doc).__name__}, not a JSON object")
        return doc

    def input_specs(self) -> list[dict]:
        specs = []
        for index, spec in enumerate(self.facts.get("inputs") or []):
            sizes = [int(d) for d in spec.get("sizes") or []]
            rest = [d if d >= 0 else None for d in sizes[1:]]  # an ONNX model's dynamic axes are -1
            specs.append({"name": f"input{index}", "shape": [None, *rest] if sizes else [],
                          "dtype": str(spec.get("dtype")), "dynamic_axes": {0: "batch"} if sizes else {},
                          "bounded": True})
        return specs

    def bind(self, arrays: dict):
        raise BoardUsageError("the native runner times itself: run its bench command (edgekit-run bench)")

    def run(self, arrays: list) -> list:
        """Every output for ``arrays``, in the program's order, through ``edgekit-run probe`` on
        temporary files (it writes ``b{batch}/output`` for output 0, ``b{batch}/outputs/{k}`` after)."""
        import numpy as np

        batch = len(arrays[0])
        with tempfile.TemporaryDirectory(prefix="edgekit-native-") as tmp:
            reference = Path(tmp) / "in.npz"
            np.savez(reference, **{f"b{batch}/input/input{i}": a for i, a in enumerate(arrays)})
            out = Path(tmp) / "out.npz"
            self._call(["probe", str(self.path), str(reference), str(out), "--threads", str(self.threads)])
            with np.load(out, allow_pickle=False) as data:
                names = [f"b{batch}/output", *(f"b{batch}/outputs/{k}" for k in range(1, len(data.files)))]
                if sorted(names) != sorted(data.files):
                    raise BoardError(f"{RUNNER} probe wrote {sorted(data.files)[:8]}, not {names[:8]}")
                return [data[name] for name in names]
