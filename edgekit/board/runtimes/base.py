"""The interface every board runtime implements, and what they share."""

from __future__ import annotations

import contextlib
from pathlib import Path


class Runtime:
    """A loaded model file. Subclasses set ``format`` and ``spec_match`` and implement the rest.

    ``spec_match`` says how a manifest's input list must fit the model (``inputs.resolve_specs``).
    ``info`` holds the runtime facts a result records: name, version, threads, engine, providers.
    """

    format = ""
    suffixes: tuple[str, ...] = ()  # file suffixes that name the format
    spec_match = "names"

    @staticmethod
    def claims(path: Path) -> bool:
        """Whether the file's content says it is this format (a file whose suffix tells nothing)."""
        return False

    def __init__(self, path: Path, threads: int | None, engine: str | None = None):
        """Load ``path``; ``threads`` None leaves the runtime's (process-wide) thread settings alone."""
        raise NotImplementedError

    @classmethod
    def preload(cls, threads: int) -> None:
        """Import the runtime (timed apart from the model's load) and size its thread pool."""

    def input_specs(self) -> list[dict]:
        """The model's own input specs: name, shape (None where dynamic or unknown), dtype, dynamic_axes."""
        raise NotImplementedError

    def bind(self, arrays: dict):
        """(function, arguments) for the timed loop: ``function(*arguments)`` runs the model once on
        ``arrays`` (by input name, in spec order), exactly as a user's own loop would call it."""
        raise NotImplementedError

    def run(self, arrays: list) -> list:
        """Every output, as numpy arrays, for inputs in the model's order (batches past a bound in chunks)."""
        raise NotImplementedError

    def context(self):
        """Entered around calls (a runtime's inference mode, a log capture)."""
        return contextlib.nullcontext()

    def predict(self, inputs: dict, order: list | None = None):
        """The first output as float32 for inputs by name; ``order`` names the call order when the
        model cannot tell it (TorchScript, ExecuTorch)."""
        return self.predict_outputs(inputs, order)[0]

    def predict_outputs(self, inputs: dict, order: list | None = None) -> list:
        """Every output, in the model's order, as float32, for inputs by name (``order`` as ``predict``'s)."""
        import numpy as np

        names = self.call_order(inputs, order)
        missing = [n for n in names if n not in inputs]
        if missing:
            from ..errors import BoardUsageError

            raise BoardUsageError(f"no array for input {missing[0]!r} (given: {', '.join(inputs) or 'none'})")
        with self.context():
            outputs = self.run([np.ascontiguousarray(inputs[n]) for n in names])
        if not outputs:
            from ..errors import BoardError

            raise BoardError("the model returned no output")
        return [np.asarray(out, dtype=np.float32) for out in outputs]

    def call_order(self, inputs: dict, order: list | None) -> list:
        """The input names in the order the model takes them."""
        return [n for n in (order or ()) if n in inputs] or list(inputs)


def in_chunks(run_chunk, arrays: list, bound: int) -> list:
    """``run_chunk`` over slices of at most ``bound`` rows, outputs joined along axis 0."""
    import numpy as np

    rows = len(arrays[0]) if arrays and arrays[0].ndim else 0
    if rows <= bound:
        return run_chunk(arrays)
    parts = [run_chunk([a[i:i + bound] for a in arrays]) for i in range(0, rows, bound)]
    return [np.concatenate([p[k] for p in parts]) for k in range(len(parts[0]))]
