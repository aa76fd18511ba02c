"""The one module that talks to ``onnxruntime.quantization``.

Static quantization never lets ORT calibrate: edgekit's streaming calibrators compute the ranges
(``calibration/onnx_ranges.py``) and they reach ORT through its calibration cache (``quantize_static``'s
``calibration_cache_path``: a JSON file of per-tensor ranges; when it exists ORT skips its own
calibration pass). Tensors holding mask sentinels are left out, and the nodes that touch them
are excluded from quantization.
"""

from __future__ import annotations

import contextlib
import inspect
import io
import logging
import tempfile
import warnings
from pathlib import Path
from typing import Iterable, Iterator

from edgekit.core import onnx_files
from edgekit.core.fileio import working_dir
from edgekit.quantize.calibration.calibrators import TensorRange
from edgekit.quantize.toolkits.recipes import OnnxRecipe
from edgekit.core.errors import EdgekitError
from edgekit.quantize.toolkits.onnx_subgraphs import has_subgraphs, lift_constants, walk

# Ops whose weights ORT quantizes: the layers a sensitivity analysis can keep in float.
WEIGHTED_OPS = ("Conv", "ConvTranspose", "Gemm", "MatMul", "LSTM", "Gather", "Attention")


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    logger = logging.getLogger()
    level = logger.level
    logger.setLevel(logging.ERROR)  # the quantizer logs its progress at INFO/WARNING on the root logger
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
            warnings.simplefilter("ignore")
            yield
    finally:
        logger.setLevel(level)


def _quant_type(name: str):
    from onnxruntime.quantization import QuantType

    return {"int8": QuantType.QInt8, "uint8": QuantType.QUInt8}[name]


def preprocess(float_path: Path, out_path: Path, notes: list[str] | None = None) -> Path:
    """Shape inference + graph optimisation recommended before quantization; every node named.

    ``auto_merge`` lets symbolic shape inference merge conflicting symbolic dims (transformer
    exports otherwise fail with "Incomplete symbolic shape inference"). Where ORT's symbolic shape
    inference fails on a valid model (it asserts on some ``Concat``/``If`` nodes), the model is
    pre-processed with ONNX's own shape inference instead, and where the pre-processing fails as a
    whole the model is quantized as it is; ``notes`` gets one line saying which, naming the node.
    """
    external = bool(onnx_files.data_files(float_path))
    float_path, out_path = Path(float_path).absolute(), Path(out_path).absolute()
    float_path, wanted = _weights_as_constants(float_path, out_path, external)
    try:
        _pre_process(float_path, out_path, external)
    except Exception as exc:  # noqa: BLE001 - ORT's shape inference asserts/raises anything on graphs it does not know
        where = failing_node(exc)
        try:
            _pre_process(float_path, out_path, external, skip_symbolic_shape=True)
            done = "pre-processed with ONNX's shape inference instead"
        except Exception:  # noqa: BLE001 - the optimiser may fail the same way: quantize the graph as it is
            onnx_files.save(onnx_files.load(float_path), out_path, external or None)
            done = "quantized without ONNX Runtime's pre-processing (no graph optimisation)"
        if notes is not None:
            notes.append(f"ONNX Runtime's symbolic shape inference failed{where} ({type(exc).__name__}); {done}")
    model = onnx_files.load(out_path)
    got = [vi.name for vi in onnx_files.model_inputs(model)]
    if got != wanted:
        from edgekit.core.errors import EdgekitError

        raise EdgekitError(f"ONNX Runtime's pre-processing changed the model's inputs ({', '.join(wanted)} -> "
                           f"{', '.join(got)}): the int8 model could not be fed like the float one")
    used = {n.name for n in model.graph.node if n.name}
    changed = False
    for index, node in enumerate(model.graph.node):
        if not node.name:
            name = f"{node.op_type}_{index}"
            while name in used:
                name += "_"
            node.name = name
            used.add(name)
            changed = True

    if lift_constants(model):  # a branch's weights as initializers: the quantizer reaches only those
        changed = True
    if changed:
        onnx_files.save(model, out_path, external or None)
    return out_path


def _pre_process(float_path: Path, out_path: Path, external: bool, skip_symbolic_shape: bool = False) -> None:
    from onnxruntime.quantization.shape_inference import quant_pre_process

    # ORT's shape inference drops sym_shape_infer_temp.onnx into the working folder when it fails
    with quiet(), working_dir(out_path.parent):
        quant_pre_process(str(float_path), str(out_path), auto_merge=True, save_as_external_data=external,
                          skip_symbolic_shape=skip_symbolic_shape, all_tensors_to_one_file=True,
                          external_data_location=onnx_files.data_file_name(out_path))


def failing_node(exc: BaseException) -> str:
    """`` at node NAME (OP)`` for the innermost ONNX node a failing shape inference was working on
    (a ``node`` local of the frames the exception passed through), else ``""``."""
    found = ""
    tb = exc.__traceback__
    while tb is not None:
        node = tb.tb_frame.f_locals.get("node")
        if hasattr(node, "op_type") and hasattr(node, "name"):
            found = f" at node {node.name or '(unnamed)'} ({node.op_type})"
        tb = tb.tb_next
    return found


QDQ_MIN_OPSET = 13  # DequantizeLinear's per-channel ``axis``: ORT's own upgrade (to 11) stops short of it


def _weights_as_constants(float_path: Path, out_path: Path, external: bool) -> tuple[Path, list[str]]:
    """(the model to pre-process, its input names). Models as the ONNX model zoo has them are first
    copied into a form the quantizer handles: initializers listed among the graph inputs (IR 3)
    are dropped from the inputs (ORT's optimiser merges and folds such weights but leaves their
    input entries behind, so the result would ask to be fed its own weights), initializers no
    node reads are dropped, and an opset under 13 is converted to 13 (per-channel QDQ needs it).
    Other models go on as they are."""
    model, _ = onnx_files.read(float_path)
    wanted = [vi.name for vi in onnx_files.model_inputs(model)]
    unused = onnx_files.unused_initializers(model)
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), QDQ_MIN_OPSET)
    if not (onnx_files.initializer_inputs(model) or unused or opset < QDQ_MIN_OPSET):
        return float_path, wanted
    onnx_files.attach_data(model, float_path)
    onnx_files.drop_initializer_inputs(model)
    if unused:
        kept = [init for init in model.graph.initializer if init.name not in set(unused)]
        del model.graph.initializer[:]
        model.graph.initializer.extend(kept)
    if opset < QDQ_MIN_OPSET:
        model = _converted(model, QDQ_MIN_OPSET)
    plain = out_path.with_name(f"{out_path.stem}-plain.onnx")
    onnx_files.save(model, plain, external or None)
    return plain, wanted


def _converted(model, opset: int):
    """``model`` at ``opset`` (onnx's version converter), or as it is when the converter cannot."""
    import onnx

    try:
        with quiet():
            return onnx.version_converter.convert_version(model, opset)
    except Exception:  # noqa: BLE001 - the converter lacks adapters for some old ops; ORT may still cope
        return model


def weighted_nodes(model_path: Path) -> list[tuple[str, str]]:
    """(node name, op type) of the nodes with a constant weight input, in graph order, those inside
    ``If``/``Loop`` subgraphs included (``onnx_subgraphs``)."""
    model = onnx_files.load(model_path, load_data=False)
    return [(node.name, node.op_type) for node, consts in walk(model.graph)
            if node.op_type in WEIGHTED_OPS and any(name in consts for name in node.input[:2])]


# what ONNX Runtime's quantizers write (besides every Q* op: QuantizeLinear, QLinear*, QAttention, QGemm,
# QEmbedLayerNormalization...): a file with none of these is the float model
INT8_OPS = ("DequantizeLinear", "DynamicQuantizeLinear", "ConvInteger", "MatMulInteger", "DynamicQuantizeMatMul",
            "DynamicQuantizeLSTM", "MatMulIntegerToFloat")


def int8_nodes(model_path: Path) -> int:
    """How many nodes of the model (subgraphs included) are quantized ops or (de)quantizers."""
    model = onnx_files.load(model_path, load_data=False)
    return sum(node.op_type in INT8_OPS or node.op_type.startswith("Q") for node, _ in walk(model.graph))


def thin_stem_convs(model_path: Path, max_reduction: int = 32) -> list[str]:
    """Convs reading a graph input whose reduction (in_channels x kernel) is tiny (<= 32).

    A 1-3 channel stem does so little arithmetic per output that int8 saves nothing, while the
    QuantizeLinear of the input and the requantization cost time and accuracy: keep it in float.
    """
    import numpy as np
    from onnx import numpy_helper

    model = onnx_files.load(model_path)
    inputs = {i.name for i in onnx_files.model_inputs(model)}
    weights = {i.name: i for i in model.graph.initializer}
    out = []
    for node in model.graph.node:
        if node.op_type == "Conv" and node.input[0] in inputs and len(node.input) > 1 and node.input[1] in weights:
            shape = numpy_helper.to_array(weights[node.input[1]]).shape
            if int(np.prod(shape[1:])) <= max_reduction:
                out.append(node.name)
    return out


def small_lookups(model_path: Path, max_bytes: int = 1 << 20) -> list[str]:
    """Gathers from a constant table under ``max_bytes`` (embeddings of small vocabularies).

    A lookup does no arithmetic, so int8 only saves the table's size, and adds a
    DequantizeLinear plus rounding noise on every token: worth it for a 30k x 384 table, not for
    a 128 x 64 one (measured: next-token agreement of the LSTM LM 98.9% -> 99.2% with it float).
    """
    model = onnx_files.load(model_path, load_data=False)
    sizes = {}
    for init in model.graph.initializer:
        count = 1
        for d in init.dims:
            count *= d
        sizes[init.name] = count * 4
    return [n.name for n in model.graph.node
            if n.op_type == "Gather" and n.input and n.input[0] in sizes and sizes[n.input[0]] <= max_bytes]


def node_names(model_path: Path) -> list[str]:
    return [n.name for n in onnx_files.load(model_path, load_data=False).graph.node]


def nodes_touching(model_path: Path, tensors: Iterable[str]) -> list[str]:
    """Names of the nodes that read or write any of ``tensors``."""
    wanted = set(tensors)
    if not wanted:
        return []
    model = onnx_files.load(model_path, load_data=False)
    return [n.name for n in model.graph.node if wanted & (set(n.input) | set(n.output))]


def _external(prepared: Path) -> bool:
    """Whether the quantized model must be written with external data: when its input was (an
    int8 model is about a quarter of the float one, but the quantizer keeps the float copy)."""
    return bool(onnx_files.data_files(prepared))


def dynamic_int8(prepared: Path, out_path: Path, recipe: OnnxRecipe, nodes_to_exclude: Iterable[str] = (),
                 extra: dict | None = None) -> dict:
    from onnxruntime.quantization import quantize_dynamic


    if has_subgraphs(onnx_files.load(prepared, load_data=False)):  # weights inside If/Loop branches
        extra = {"EnableSubgraph": True, **(extra or {})}
    with quiet():
        quantize_dynamic(
            str(prepared),
            str(out_path),
            use_external_data_format=_external(prepared),
            per_channel=recipe.per_channel,
            reduce_range=recipe.reduce_range,
            weight_type=_quant_type(recipe.weight_type),
            nodes_to_exclude=list(nodes_to_exclude),
            extra_options=dict(extra or {}),
        )
    return {
        "format": "QOperator (dynamic)",
        "weight_type": recipe.weight_type,
        "per_channel": recipe.per_channel,
        "reduce_range": recipe.reduce_range,
    }


def static_int8_qdq(
    prepared: Path,
    out_path: Path,
    ranges: dict[str, TensorRange],
    recipe: OnnxRecipe,
    nodes_to_exclude: Iterable[str] = (),
    op_types: Iterable[str] = (),
    extra: dict | None = None,
) -> dict:
    """QDQ int8 with the given activation ranges (mask-like tensors and their nodes stay float).

    ``op_types``: quantize only these op types (empty: every op ORT can quantize)."""
    import numpy as np
    from onnxruntime.quantization import CalibrationMethod, QuantFormat, quantize_static
    from onnxruntime.quantization.calibrate import TensorData, TensorsData, save_tensors_data


    if "calibration_cache_path" not in inspect.signature(quantize_static).parameters:
        import onnxruntime

        raise EdgekitError(
            f"onnxruntime {onnxruntime.__version__} cannot take precomputed calibration ranges "
            "(quantize_static has no calibration_cache_path); install onnxruntime >= 1.32"
        )
    masked = sorted(name for name, r in ranges.items() if r.mask_like)
    excluded = sorted(set(nodes_to_exclude) | set(nodes_touching(prepared, masked)))
    data = {
        name: TensorData(lowest=np.float32(r.low), highest=np.float32(r.high))
        for name, r in ranges.items()
        if not r.mask_like
    }
    with tempfile.TemporaryDirectory(dir=out_path.parent, prefix=".ort-ranges-") as tmp:
        cache = Path(tmp) / "ranges.json"
        save_tensors_data(TensorsData(CalibrationMethod.MinMax, data), cache)
        with quiet():
            quantize_static(
                str(prepared),
                str(out_path),
                None,
                quant_format=QuantFormat.QDQ,
                use_external_data_format=_external(prepared),
                per_channel=recipe.per_channel,
                reduce_range=recipe.reduce_range,
                activation_type=_quant_type(recipe.activation_type),
                weight_type=_quant_type(recipe.weight_type),
                nodes_to_exclude=excluded,
                op_types_to_quantize=list(op_types) or None,
                calibrate_method=CalibrationMethod.MinMax,
                calibration_cache_path=str(cache),
                extra_options={"CalibTensorRangeSymmetric": False, **(extra or {})},
            )
    return {
        "format": "QDQ",
        **recipe.describe(),
        "float_nodes": excluded,
        "mask_tensors": masked,
        **({"op_types": list(op_types)} if op_types else {}),
    }
