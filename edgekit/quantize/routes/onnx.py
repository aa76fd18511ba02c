"""int8 ONNX through ONNX Runtime's quantizer (QDQ for static, integer ops for dynamic)."""

from __future__ import annotations

from edgekit.formats.onnx import FORMAT
from edgekit.quantize.layers import excluded
from edgekit.quantize.methods import DynamicConfig, QatConfig, StaticConfig
from edgekit.quantize.produced import Produced
from edgekit.quantize.registry import layer_lister, route
from edgekit.core.errors import UsageError
from edgekit.formats.onnx_export import export_onnx
from edgekit.quantize.toolkits import torch_backend
from edgekit.quantize.toolkits.qat import fine_tuned

FILE = FORMAT.files.file_name


def _check_quantizable(job, kept_by_rule) -> None:
    """UsageError when the model has no layer with a constant weight to quantize besides those kept
    float by rule (thin stems, small lookups; a user's or the budget's --exclude do not count):
    the result would be the float model under an int8 label."""
    from edgekit.quantize.toolkits import onnx_graphs, ort_backend

    nodes = ort_backend.weighted_nodes(onnx_graphs.prepared_onnx(job))
    left = [name for name, _ in nodes if name not in set(kept_by_rule)]
    if not left:
        what = "only ones int8 gains nothing on (a thin input convolution, small lookups)" if nodes else "it has none"
        raise UsageError(f"nothing to quantize in {job.source.label}: int8 needs layers with constant weights "
                         f"({', '.join(ort_backend.WEIGHTED_OPS)}) and {what}")


def _check_changed(job, method: str) -> None:
    """UsageError when ONNX Runtime's quantizer quantized nothing (weights it does not reach, such as
    an ``If`` branch's under static QDQ): the file would be the float model under an int8 label."""
    from edgekit.quantize.toolkits import onnx_graphs, ort_backend

    if ort_backend.int8_nodes(job.dest / FILE):
        return
    nodes = ort_backend.weighted_nodes(onnx_graphs.prepared_onnx(job))
    top = set(ort_backend.node_names(onnx_graphs.prepared_onnx(job)))
    inside = sum(name not in top for name, _ in nodes)
    where = f" ({inside} of its {len(nodes)} weighted layers are inside If/Loop subgraphs)" if inside else ""
    hint = "; --method dynamic reaches subgraphs" if inside and method == "static" else ""
    raise UsageError(f"int8 ONNX of {job.source.label} would be the float model unchanged: ONNX Runtime's {method} "
                     f"quantizer quantized none of its layers{where}{hint}")


def _small_lookups(job, notes: list[str]) -> list[str]:
    from edgekit.quantize.toolkits import onnx_graphs, ort_backend

    lookups = ort_backend.small_lookups(onnx_graphs.prepared_onnx(job))
    if lookups:
        notes.append(f"small embedding lookups kept in float ({', '.join(lookups)}): int8 only saves size there")
    return lookups


@layer_lister(FORMAT.name)
def layers(job, config) -> list[tuple[str, str]]:
    """The nodes with constant weights of the prepared graph, by ONNX node name."""
    from edgekit.quantize.toolkits import onnx_graphs, ort_backend

    return ort_backend.weighted_nodes(onnx_graphs.prepared_onnx(job))


@route(DynamicConfig, FORMAT.name)
def dynamic(job, config) -> list[Produced]:
    from edgekit.quantize.toolkits import onnx_graphs, ort_backend

    exclude = excluded(job, config, "onnx")
    recipe = onnx_graphs.recipe(job, config)
    notes = list(recipe.notes)
    lookups = _small_lookups(job, notes)
    _check_quantizable(job, lookups)
    graph, fusion = onnx_graphs.fused_onnx(job, config.fusion)
    # the transformer optimizer's contrib ops have no type information for the quantizer
    extra = {"DefaultTensorType": 1} if config.fusion == "transformer" else None
    details = ort_backend.dynamic_int8(graph, job.dest / FILE, recipe, (*exclude, *lookups), extra)
    _check_changed(job, "dynamic")
    if exclude or lookups:
        details["float_nodes"] = [*exclude, *lookups]
    return [Produced(FILE, FORMAT.name, {**details, **fusion, "backend": "onnxruntime.quantization", "api": "onnxruntime.quantization",
                                         "recipe": recipe.short, "recipe_notes": notes, **job.onnx_exporter()})]


@route(StaticConfig, FORMAT.name)
def static(job, config) -> list[Produced]:
    from edgekit.quantize.toolkits import onnx_graphs, ort_backend

    exclude = excluded(job, config, "onnx")
    recipe = onnx_graphs.recipe(job, config)
    ranges = onnx_graphs.activation_ranges(job, config)
    notes = list(recipe.notes)
    stem = ort_backend.thin_stem_convs(onnx_graphs.prepared_onnx(job)) if config.float_stem else []
    if stem:
        notes.append(f"thin input convolution kept in float ({', '.join(stem)}): int8 gains nothing there")
    lookups = _small_lookups(job, notes)
    _check_quantizable(job, (*stem, *lookups))
    graph, fusion = onnx_graphs.fused_onnx(job, config.fusion)  # same tensor names: the ranges still apply
    extra = None if config.quantize_matmul_outputs else {"OpTypesToExcludeOutputQuantization": ["MatMul"]}
    if config.smooth:
        from edgekit.quantize.toolkits.smooth import search

        details = search(job, config, graph, recipe, (*exclude, *stem, *lookups), extra, job.dest / FILE)
    else:
        details = ort_backend.static_int8_qdq(graph, job.dest / FILE, ranges, recipe,
                                              (*exclude, *stem, *lookups), config.op_types, extra)
    _check_changed(job, "static")
    if not config.quantize_matmul_outputs:
        details["float_outputs"] = ["MatMul"]
    return [Produced(FILE, FORMAT.name, {**details, **fusion, "backend": "onnxruntime.quantization", "api": "onnxruntime.quantization",
                                         "calibrate_method": config.calibrate_method,
                                         "recipe": recipe.short, "recipe_notes": notes, **job.onnx_exporter()})]


@route(QatConfig, FORMAT.name)
def qat(job, config) -> list[Produced]:
    """The fake-quant network QAT trained, exported as QDQ with its weights folded to int8."""
    from edgekit.quantize.toolkits.onnx_qdq import fold_weight_quantizers

    prepared, qat_info = fine_tuned(job, config)
    fake = torch_backend.export_ready_fake_quant(prepared)
    raw = job.scratch / "qat-fakequant.onnx"
    with torch_backend.quiet():
        # The TorchScript exporter: it turns fake-quant modules into QuantizeLinear/DequantizeLinear pairs
        export_onnx(fake, job.example_inputs(), job.source.inputs, job.source.outputs, raw,
                    max(job.target.onnx_opset, 13), route="torchscript")
    folded = fold_weight_quantizers(raw, job.dest / FILE)
    return [Produced(FILE, FORMAT.name, {
        "format": "QDQ", "backend": "torch.ao FX QAT -> torch.onnx (fake-quant export)", "api": "torch.ao",
        "weights_folded": folded, "qat": qat_info})]
