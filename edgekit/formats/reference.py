"""Fixed inputs and the float model's outputs on them: the yardstick every artifact is held to.

Stored beside each exported model as ``reference.npz`` so parity can be re-checked anywhere
(another machine, the device bundle, an emulated board) without the float model. Per batch size N:
``bN/input/{name}`` for each input, ``bN/output`` the model's first output, and
``bN/outputs/{k}`` each further output k = 1, 2, ... in the model's output order (files written
before every output was kept hold ``bN/output`` alone, and stay valid).
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from edgekit.core.input_spec import InputSpec
from edgekit.core.fileio import atomic_path, read_npz
from edgekit.core.errors import InputFileError

REFERENCE_FILE = "reference.npz"
# An input name is everything after "input/": ONNX names are arbitrary strings ("gpu_0/data_0"),
# read as the board's reader (edgekit/board/inputs.py) reads them.
_KEY = re.compile(r"^b(?P<batch>[1-9][0-9]{0,5})/(?:input/(?P<name>.+)|output|outputs/(?P<index>[1-9][0-9]{0,3}))\Z",
                  re.DOTALL)
BATCH_SIZES = (1, 7)  # two sizes, so a dynamic batch axis is really exercised
# ...and two lengths for a dynamic sequence axis: the case at batch 1 is 16 long, at batch 7 11 long
# (the example inputs exports trace with are 16 long, so a length baked in by tracing shows up).
SEQUENCE_LENGTHS = {1: 16, 7: 11}
SEED = 1234


def sequence_length(batch: int) -> int:
    """The sequence length of the reference case at ``batch``."""
    return SEQUENCE_LENGTHS.get(batch, 16)


def fixed_inputs(specs: tuple[InputSpec, ...], batch: int, task: dict | None = None) -> dict[str, np.ndarray]:
    """Deterministic inputs: held-out samples when the task has a dataset, else seeded random data."""
    task = task or {}
    if task.get("type") == "classification" and task.get("dataset") and len(specs) == 1:
        from edgekit.data.datasets import load_split

        data = load_split(task["dataset"], "test").inputs
        if len(data) >= batch:
            return {specs[0].name: np.ascontiguousarray(data[:batch])}
    return random_inputs(specs, batch, sequence_length(batch))


def random_inputs(specs: tuple[InputSpec, ...], batch: int, sequence: int) -> dict[str, np.ndarray]:
    """Seeded random inputs: integers inside each input's value range (token ids in the vocabulary;
    8-bit pixels over 0..255 when no range is declared), else standard normal (the range of a
    normalised image or feature)."""
    rng = np.random.default_rng(SEED + batch)
    arrays = {}
    for spec in specs:
        shape = spec.concrete_shape(batch=batch, sequence=sequence)
        if np.dtype(spec.dtype).kind in "iu":
            low, high = spec.value_range or _undeclared_range(spec.dtype)
            arrays[spec.name] = rng.integers(int(low), int(high), size=shape).astype(spec.dtype)
        else:
            arrays[spec.name] = rng.standard_normal(shape).astype(spec.dtype)
    return arrays


def _undeclared_range(dtype: str) -> tuple[int, int]:
    """[low, high) for an integer input without a declared range: an 8-bit one (raw pixels) its whole
    range, a wider one (token ids of an unknown vocabulary) 0 and 1, valid in every vocabulary."""
    info = np.iinfo(np.dtype(dtype))
    return (int(info.min), int(info.max) + 1) if info.bits == 8 else (0, 2)


def example_tensors(specs: tuple[InputSpec, ...], batch: int = 2) -> tuple:
    """Inputs to trace/export with: ``batch`` rows, sequences 16 long."""
    import torch

    return tuple(torch.from_numpy(a) for a in random_inputs(specs, batch, 16).values())


def float_outputs(model, inputs: dict[str, np.ndarray]) -> list[np.ndarray]:
    """Every output of the torch ``model`` on ``inputs``, flattened in order as torch.export and
    the ONNX exporter flatten them (tuples, lists and dicts, nested)."""
    import torch

    with torch.inference_mode():
        out = model(*(torch.from_numpy(a) for a in inputs.values()))
    return [t.float().numpy() for t in _flat_tensors(out)]


def _flat_tensors(out) -> list:
    import torch

    if isinstance(out, torch.Tensor):
        return [out]
    if hasattr(out, "to_tuple"):  # transformers' ModelOutput: its non-None fields, in order
        out = out.to_tuple()
    if isinstance(out, dict):
        out = list(out.values())
    if isinstance(out, (tuple, list)):
        return [t for item in out for t in _flat_tensors(item)]
    return []


def write_reference(path: Path, model, specs: tuple[InputSpec, ...], task: dict) -> None:
    write_predicted_reference(path, lambda inputs: float_outputs(model, inputs), specs, task)


def write_predicted_reference(path: Path, predict, specs: tuple[InputSpec, ...], task: dict, feed=None) -> None:
    """reference.npz from any float predictor (inputs by name -> every output as a list, or one
    output array), e.g. ONNX Runtime on an ``.onnx`` source; ``feed(batch)``, when given, makes the
    inputs instead of ``fixed_inputs``."""
    arrays = {}
    for batch in BATCH_SIZES:
        inputs = feed(batch) if feed is not None else fixed_inputs(specs, batch, task)
        for name, value in inputs.items():
            arrays[f"b{batch}/input/{name}"] = value
        arrays.update(output_arrays(batch, predict(inputs)))
    with atomic_path(path) as tmp:
        with open(tmp, "wb") as fh:
            np.savez(fh, **arrays)


def output_arrays(batch: int, outputs) -> dict[str, np.ndarray]:
    """The reference file's arrays for the outputs of one batch (a list, or one array)."""
    outputs = list(outputs) if isinstance(outputs, (list, tuple)) else [outputs]
    if not outputs:
        from edgekit.core.errors import InputFileError

        raise InputFileError("the float model returned no tensor output to hold the exports to")
    arrays = {f"b{batch}/output": np.asarray(outputs[0], dtype=np.float32)}
    for k, value in enumerate(outputs[1:], start=1):
        arrays[f"b{batch}/outputs/{k}"] = np.asarray(value, dtype=np.float32)
    return arrays


def read_reference(path: Path, every_output: bool = False) -> dict[int, tuple[dict[str, np.ndarray], object]]:
    """{batch: (inputs by name, float outputs)}: the first output as an array, or with
    ``every_output`` the list of every output the file holds (one, in files written before)."""
    items = read_npz(path, "reference data")  # strict: no pickles, no zip bombs, headers match their bytes
    cases: dict[int, tuple[dict, dict]] = {}
    for key, value in items.items():
        match = _KEY.match(key)
        if match is None:
            raise InputFileError(f"reference data {path} is malformed: unexpected array {key[:60]!r}")
        inputs, outputs = cases.setdefault(int(match["batch"]), ({}, {}))
        if match["name"] is not None:
            inputs[match["name"]] = value
        else:
            outputs[int(match["index"] or 0)] = value
    if not cases:
        raise InputFileError(f"reference data {path} is malformed: it holds no cases")
    for batch, (inputs, outputs) in cases.items():
        if 0 not in outputs or not inputs:
            raise InputFileError(f"reference data {path} is malformed: batch {batch} lacks its inputs or outputs")
        if sorted(outputs) != list(range(len(outputs))):
            missing = min(set(range(len(outputs))) - set(outputs))
            raise InputFileError(f"reference data {path} is malformed: batch {batch} lacks output {missing}")
        if (any(o.dtype.kind not in "fiu" for o in outputs.values())
                or any(a.dtype.kind not in "fiub" for a in inputs.values())):
            raise InputFileError(f"reference data {path} is malformed: batch {batch} holds non-numeric arrays")
    counts = {len(outputs) for _, outputs in cases.values()}
    if len(counts) > 1:
        raise InputFileError(f"reference data {path} is malformed: its batches hold {sorted(counts)} outputs")
    return {batch: (inputs, [outputs[k] for k in sorted(outputs)] if every_output else outputs[0])
            for batch, (inputs, outputs) in cases.items()}
