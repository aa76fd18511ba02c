"""ExecuTorch: ``model.pte``, a ``torch.export`` program lowered to the XNNPACK delegate.

XNNPACK is the CPU kernel library PyTorch documents for Raspberry Pi 4/5. The program is
memory-planned for the largest shapes it accepts, so dynamic axes get upper bounds
(``MAX_BATCH``, ``MAX_SEQUENCE``) recorded in the file's details; the predictor feeds larger
batches in chunks. Provenance travels inside the program as a constant method
(``edgekit_provenance``, a JSON string), like the ONNX metadata and the TorchScript extra file.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from edgekit.core.errors import first_line, EdgekitError, InputFileError, UsageError
from edgekit.formats import Board, Files, Format, Host, Quantization, register
from edgekit.core.fileio import atomic_path, loads_json
from edgekit.formats.onnx_export import native_output_silenced

FORMAT = register(Format(
    name="executorch",
    files=Files(file_name="model.pte", suffixes=(".pte",)),
    host=Host(backend="edgekit.formats.executorch", modules=("executorch", "torchao"), extra="executorch",
              table_order=20,
              default=False),  # written when asked for (--format executorch) or by `pipeline` when installed
    board=Board(
        runtime="executorch",
        # What ``executorch.runtime`` imports to run a program (found by installing executorch with
        # --no-deps into an empty venv and adding what each import asked for), torch's own
        # dependencies, and torch itself (the runtime takes torch tensors): installed with --no-deps.
        # edgekit's scripts load the native module directly and need only torch of these; the rest
        # keeps the public runtime (and the scripts' fallback to it) working on the board.
        requirements=("filelock", "typing-extensions", "sympy", "mpmath", "networkx", "jinja2", "markupsafe",
                      "fsspec", "torch", "torchao", "ruamel.yaml", "flatbuffers", "tabulate"),
        no_deps=True,
        with_deps_off_index=("torch",),
        footprint_mb=300.0,
        index_url="https://download.pytorch.org/whl/cpu",  # torch's CPU build for the board
        extra_index_url="https://pypi.org/simple",  # executorch and its dependencies
        check_wheel=True,  # executorch ships wheels for fewer platforms than numpy/onnxruntime
        preference=10,
        native_runner=True,
    ),
    quantization=Quantization(qat_api="torchao PT2E"),
))

PROVENANCE_METHOD = "edgekit_provenance"
MAX_BATCH = 128  # accuracy runs evaluate in batches of 128
MAX_SEQUENCE = 512
MAX_BATCH_WITH_SEQUENCE = 16  # planned memory grows with batch x length (x length for attention)
FILE_IDENTIFIER = b"ET"  # flatbuffer file identifier at bytes 4..8: "ET" + a 2-digit schema version


def quiet_imports() -> None:
    """Keep torchao's and torch's import-time log lines (optional kernels not built for this host,
    pytree deprecations) out of the user's terminal; real errors still raise."""
    import logging

    for name in ("torchao", "torch.utils._pytree", "executorch"):
        logging.getLogger(name).setLevel(logging.ERROR)


def native():
    """ExecuTorch's native runtime module. Its public wrappers (``executorch.runtime``,
    ``portable_lib``) import the whole export toolchain (``executorch.exir``) only to issue an
    "experimental API" warning: about 3.4 s and 140 MB more peak memory here, which a board pays
    too. The extension itself needs only libtorch loaded first."""
    import torch  # noqa: F401 - loads libtorch, which the extension links against

    try:
        from executorch.extension.pybindings import _C as module
    except ImportError:  # another executorch layout: the public wrapper re-exports the same functions
        from executorch.extension.pybindings import portable_lib as module
    return module


class Method:
    """A loaded method and the program that owns it (the method must not outlive its program)."""

    def __init__(self, program, name: str):
        self._program = program
        self._method = program.load_method(name)

    @property
    def metadata(self):
        return self._method.method_meta()

    def execute(self, inputs) -> list:
        return self._method(list(inputs))


def _load_program(path: Path):
    module = native()
    return module._load_program(str(path), enable_etdump=False, debug_buffer_size=0,
                                program_verification=module.Verification.InternalConsistency)


def _load_forward(path: Path) -> Method:
    """The program's ``forward``; loading the first method prints XNNPACK's CPU-probe lines from
    C++ (``cpuinfo_utils.cpp: Reading file ...``), silenced here."""
    with native_output_silenced():  # a damaged program's verification errors print there too
        return Method(_load_program(Path(path)), "forward")


def dynamic_shapes(inputs, narrowed: dict | None = None) -> tuple:
    """torch.export dims for each input's dynamic axes, bounded so the memory plan stays small;
    ``narrowed`` maps a dim's name to tighter (min, max) bounds the model itself imposes."""
    from torch.export import Dim

    has_sequence = any(name != "batch" for spec in inputs for name in spec.dynamic_axes.values())
    dims: dict = {}
    shapes = []
    for spec in inputs:
        axes = {}
        for axis, name in spec.dynamic_axes.items():
            if name not in dims:
                high = (MAX_BATCH_WITH_SEQUENCE if has_sequence else MAX_BATCH) if name == "batch" else MAX_SEQUENCE
                low, high = (narrowed or {}).get(_dim_name(name), (1, high))
                dims[name] = Dim(_dim_name(name), min=low, max=high)
            axes[axis] = dims[name]
        shapes.append(axes or None)
    return tuple(shapes)


_SUGGESTED_DIM = re.compile(r"^\s*(\w+) = Dim\('(\w+)'((?:, (?:min|max)=\d+)*)\)\s*$")


def narrowed_bounds(message: str, inputs) -> dict | None:
    """Tighter dim bounds from torch.export's "Suggested fixes" (e.g. a language model's positional
    table caps the sequence at its context: ``sequence = Dim('sequence', max=128)``).

    Only narrowing within our own bounds is taken; a suggestion to make an axis a constant, or
    anything not understood, returns None (the export stays an error)."""
    if "Suggested fixes:" not in message:
        return None
    ours = {_dim_name(name) for spec in inputs for name in spec.dynamic_axes.values()}
    narrowed = {}
    for line in message.split("Suggested fixes:", 1)[1].strip().splitlines():
        if not line.strip():
            break
        found = _SUGGESTED_DIM.match(line)
        if not found or found.group(1) != found.group(2) or found.group(1) not in ours:
            return None
        bounds = dict(part.split("=") for part in found.group(3).replace(" ", "").split(",") if part)
        low, high = int(bounds.get("min", 1)), int(bounds.get("max", MAX_SEQUENCE))
        if not 1 <= low <= high:
            return None
        narrowed[found.group(1)] = (low, high)
    return narrowed or None


def _dim_name(name: str) -> str:
    return "".join(ch if ch.isalnum() else "_" for ch in name) or "dim"


def _quiet_capture():
    """torch.export prints the partial graph to stderr when it fails on a branch on data: the
    one-line error says what failed (EDGEKIT_DEBUG=1 lets the dump through)."""
    import contextlib
    import io
    import os

    if os.environ.get("EDGEKIT_DEBUG"):
        return contextlib.nullcontext()
    stack = contextlib.ExitStack()
    sink = io.StringIO()
    stack.enter_context(contextlib.redirect_stderr(sink))
    stack.enter_context(contextlib.redirect_stdout(sink))
    return stack


def export_program(model, examples: tuple, inputs):
    """``torch.export`` with the inputs' dynamic axes; a model that cannot be exported is a one-line error."""
    import torch


    if not isinstance(model, torch.fx.GraphModule):  # a PT2E graph is already in eval form, and refuses eval()
        model = model.eval()
    narrowed = None
    for _ in range(2):  # once more with the bounds the model itself imposes, when torch.export names them
        try:
            with torch.no_grad(), _quiet_capture():
                return torch.export.export(model, tuple(examples), dynamic_shapes=dynamic_shapes(inputs, narrowed),
                                           strict=False)
        except Exception as exc:  # noqa: BLE001 - torch.export raises many types (UserError, GuardOnDataDependent...)
            error = exc
            narrowed = None if narrowed else narrowed_bounds(str(exc), inputs)
            if narrowed is None:
                break
    raise UsageError(f"torch.export cannot capture the model for ExecuTorch: {first_line(error, 300)}") from None


def lower(program, path: Path, provenance: dict, in_place_buffers: bool = False) -> int:
    """Lower an exported program to XNNPACK, write it to ``path``; the number of delegated subgraphs.

    ``in_place_buffers``: writes into a mutable buffer (a KV cache's ``index_put``) update it in
    place instead of copying the whole buffer back on every call."""
    quiet_imports()
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import ExecutorchBackendConfig, to_edge_transform_and_lower


    try:
        edge = to_edge_transform_and_lower(
            program, partitioner=[XnnpackPartitioner()],
            constant_methods={PROVENANCE_METHOD: json.dumps(provenance, sort_keys=True)},
        )
        delegated = _count_delegates(edge.exported_program().graph_module)
        buffer = edge.to_executorch(ExecutorchBackendConfig(run_reinplace_pass=in_place_buffers)).buffer
    except Exception as exc:  # noqa: BLE001 - the lowering passes raise many types
        raise EdgekitError(f"cannot lower the model to ExecuTorch/XNNPACK: {first_line(exc, 300)}") from None
    with atomic_path(path) as tmp:
        Path(tmp).write_bytes(buffer)
    return delegated


def _count_delegates(graph_module) -> int:
    return sum(1 for node in graph_module.graph.nodes
               if node.op == "call_function" and "executorch_call_delegate" in str(node.target))


def export_float(model, request) -> dict:
    program = export_program(model, request.examples, request.inputs)
    details = {"variant": "fp32-executorch", "delegate": "xnnpack", "api": "torch.export"}
    details["delegated_subgraphs"] = lower(program, request.path, {**request.provenance, **details})
    details["max_shapes"] = planned_bounds(request.path, request.inputs)
    return details


def planned_bounds(path: Path, inputs) -> dict:
    """The largest size of each dynamic axis the written program accepts, by axis name.

    Read back from the program's memory plan, not from the bounds asked of torch.export: the
    XNNPACK lowering can plan a convolution network's batch axis for fewer rows than asked.
    """
    meta = load_method(path).metadata
    out: dict = {}
    for index, spec in enumerate(inputs):
        sizes = meta.input_tensor_meta(index).sizes()
        for axis, name in spec.dynamic_axes.items():
            out[name] = min(out.get(name, sizes[axis]), int(sizes[axis]))
    return out


def copy_quantized(request) -> dict:
    """A ``.pte`` carries its provenance from quantization (a program cannot be re-stamped)."""
    import shutil

    check_file(request.source)
    shutil.copyfile(request.source, request.path)
    return dict(request.details)


def check_file(path: Path) -> None:
    with open(path, "rb") as fh:
        head = fh.read(8)
    if len(head) < 8 or head[4:6] != FILE_IDENTIFIER:
        raise InputFileError(f"{path} is not an ExecuTorch program (.pte)")


def load_method(path: Path):
    check_file(path)
    try:
        return _load_forward(path)
    except Exception as exc:  # noqa: BLE001 - the runtime raises RuntimeError/ValueError
        raise InputFileError(f"{path} is not a loadable ExecuTorch program ({first_line(exc, 300)})") from None


def read_provenance(path: Path) -> dict:
    check_file(path)
    program = _load_program(Path(path))
    if PROVENANCE_METHOD not in {program.get_method_name(i) for i in range(program.num_methods())}:
        return {}

    return loads_json(Method(program, PROVENANCE_METHOD).execute([])[0], f"provenance of {path}")


def predictor(path, details: dict | None = None, threads: int = 1):
    """numpy in, numpy out, through the board's ExecuTorch runtime; batches past the program's bound
    run in chunks."""
    from edgekit.formats import evaluation

    check_file(Path(path))
    return evaluation.board_predictor(FORMAT.name, path, threads)
