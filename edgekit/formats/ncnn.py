"""ncnn: ``model.ncnn.param`` (the graph, text) + ``model.ncnn.bin`` (the weights), run by ncnn.

pnnx (ncnn's PyTorch converter) turns the traced model into ncnn's two files; only those two
are kept. ncnn has no batch axis (one sample per run), so the model is traced at batch 1 and
the runtime runs a batch row by row. The files have no slot for metadata: the provenance lives
in the manifest. fp32 weights stay fp32 (pnnx's ``fp16=0``); int8 files come from the static
route (``quantize/routes/ncnn.py``).
"""

from __future__ import annotations

import shutil
from pathlib import Path

from edgekit.formats import Board, Files, Format, Host, register
from edgekit.board.errors import BoardError
from edgekit.board.runtimes.ncnn_runtime import NcnnRuntime, check_param
from edgekit.core.errors import EdgekitError, UsageError, first_line, InputFileError
from edgekit.core.fileio import atomic_path

FORMAT = register(Format(
    name="ncnn",
    files=Files(file_name="model.ncnn.param", suffixes=(".param",), external_data=True),
    host=Host(backend="edgekit.formats.ncnn", modules=("ncnn", "pnnx"), extra="ncnn", table_order=30,
              default=False),  # written when asked for (--format ncnn) or by `pipeline --format all`
    board=Board(runtime="ncnn", footprint_mb=16.0, preference=30, check_wheel=True, counted_in_python=True),
))

CONVERT_TIMEOUT_S = 600


def data_file(path: Path) -> Path:
    """The weights beside the graph (``model.ncnn.param`` -> ``model.ncnn.bin``)."""
    return Path(path).with_suffix(".bin")


def data_files(path: Path) -> list[str]:
    """The files that belong with ``path`` (listed in its manifest entry, copied with it)."""
    return [data_file(path).name]


def _check_inputs(inputs) -> None:
    for spec in inputs:
        if spec.dtype != "float32" or not 2 <= len(spec.shape) <= 5:
            raise UsageError(f"--format ncnn takes float32 inputs of 1 to 4 dimensions besides the batch; input "
                             f"{spec.name!r} is {spec.dtype} with shape {tuple(spec.shape)}")


def convert(model, examples: tuple, inputs, path: Path) -> dict:
    """pnnx's ncnn files for ``model`` written as ``path`` and its ``.bin``; the converter's facts."""
    import subprocess
    import tempfile

    import pnnx
    import torch


    _check_inputs(inputs)
    single = tuple(example[:1].contiguous() for example in examples)  # ncnn blobs carry one sample
    with tempfile.TemporaryDirectory(prefix="edgekit-pnnx-") as tmp:
        work = Path(tmp)
        try:
            with torch.no_grad():
                traced = torch.jit.trace(model.eval(), single, check_trace=False)
            traced.save(str(work / "model.pt"))
        except Exception as exc:  # noqa: BLE001 - tracing raises many types
            raise UsageError(f"cannot trace the model for ncnn: {first_line(exc, 300)}") from None
        shapes = ",".join("[" + ",".join(str(d) for d in example.shape) + "]f32" for example in single)
        outputs = {key: work / name for key, name in (
            ("ncnnparam", "model.ncnn.param"), ("ncnnbin", "model.ncnn.bin"), ("ncnnpy", "model_ncnn.py"),
            ("pnnxparam", "model.pnnx.param"), ("pnnxbin", "model.pnnx.bin"), ("pnnxpy", "model_pnnx.py"),
            ("pnnxonnx", "model.pnnx.onnx"))}
        command = [pnnx.EXEC_PATH, str(work / "model.pt"), f"inputshape={shapes}", "device=cpu", "fp16=0",
                   *(f"{key}={value}" for key, value in outputs.items())]
        try:
            done = subprocess.run(command, cwd=work, capture_output=True, text=True, timeout=CONVERT_TIMEOUT_S,
                                  check=False)
        except subprocess.TimeoutExpired:
            raise EdgekitError(f"pnnx did not convert the model within {CONVERT_TIMEOUT_S} s") from None
        param, weights = outputs["ncnnparam"], outputs["ncnnbin"]
        if done.returncode != 0 or not param.is_file() or not weights.is_file():
            said = [line for line in (done.stderr + done.stdout).splitlines() if line.strip()]
            raise EdgekitError(f"pnnx cannot convert the model to ncnn (exit {done.returncode}): "
                               f"{(said or ['no output'])[-1][:300]}")
        with torch.no_grad():
            expected = [tuple(t.shape[1:]) for t in _tensors(model(*single))]
        _fix_output_shapes(param, expected, single)
        with atomic_path(data_file(path)) as tmp_bin:
            shutil.copyfile(weights, tmp_bin)
        with atomic_path(path) as tmp_param:
            shutil.copyfile(param, tmp_param)
    return {"converter": f"pnnx {_version('pnnx')}", "ncnn": _version("ncnn")}


def _tensors(out) -> list:
    """The tensors of a model's output (a tensor, or tuples/lists/dicts of them), in order."""
    if isinstance(out, dict):
        out = list(out.values())
    if isinstance(out, (tuple, list)):
        return [t for item in out for t in _tensors(item)]
    return [out]


def _fix_output_shapes(param: Path, expected: list[tuple], single: tuple) -> None:
    """pnnx keeps the batch axis of a reshape it cannot drop (``flatten(1)`` -> a (1, 64) blob), so
    an output would come out of ncnn with an extra leading 1 per sample. Such an output gets a
    closing Reshape to its sample shape (the float model's, less the batch axis), in the file
    itself: every ncnn runtime (a board's too) then answers in the float model's shape."""
    import numpy as np


    runtime = NcnnRuntime(param, 1)
    got = [out.shape[1:] for out in runtime.run([np.asarray(t.numpy(), dtype=np.float32) for t in single])]
    names = list(runtime.output_names)
    del runtime
    fixes = {name: want for name, want, have in zip(names, expected, got)
             if tuple(have) != tuple(want) and 1 <= len(want) <= 4 and int(np.prod(have)) == int(np.prod(want))}
    if not fixes:
        return
    lines = [line for line in param.read_text(encoding="ascii").splitlines() if line.strip()]
    layers, blobs = (int(n) for n in lines[1].split())
    body = []
    for line in lines[2:]:
        words = line.split()
        n_in, n_out = int(words[2]), int(words[3])
        blob_words = range(4, 4 + n_in + n_out)
        body.append(" ".join(f"{w}_{SHAPED_SUFFIX}" if i in blob_words and w in fixes else w for i, w in enumerate(words)))
    for name, want in fixes.items():
        keys = (0, 1, 11, 2) if len(want) == 4 else (0, 1, 2)  # w, h, (d,) c: the sample shape reversed
        params = " ".join(f"{key}={dim}" for key, dim in zip(keys, reversed(want)))
        body.append(f"Reshape shape_{name} 1 1 {name}_{SHAPED_SUFFIX} {name} {params}")
    param.write_text("\n".join([lines[0], f"{layers + len(fixes)} {blobs + len(fixes)}", *body]) + "\n",
                     encoding="ascii")


SHAPED_SUFFIX = "unshaped"


def export_float(model, request) -> dict:
    details = {"variant": "fp32-ncnn", "api": "pnnx", **convert(model, request.examples, request.inputs, request.path)}
    check_file(request.path)
    return details


def copy_quantized(request) -> dict:
    check_file(request.source)
    with atomic_path(data_file(request.path)) as tmp:
        shutil.copyfile(data_file(request.source), tmp)
    with atomic_path(request.path) as tmp:
        shutil.copyfile(request.source, tmp)
    return dict(request.details)


def predictor(path, details: dict | None = None, threads: int = 1):
    from edgekit.formats import evaluation

    check_file(Path(path))
    return evaluation.board_predictor(FORMAT.name, path, threads)


def check_file(path) -> None:
    try:
        check_param(Path(path))
    except BoardError as exc:
        raise InputFileError(f"{path}: {exc}") from None


def _version(dist: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(dist)
    except PackageNotFoundError:
        return "unknown"
