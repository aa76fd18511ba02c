"""Built-in handlers: each turns a float model into int8 files for the requested formats."""

from __future__ import annotations

from edgekit.quantize.job import QuantJob
from edgekit.quantize.methods import DynamicConfig, Method, Produced, StaticConfig, register_method

TORCHSCRIPT_FILE = "model.pt"
ONNX_FILE = "model.onnx"


def _split_exclude(job: QuantJob, config) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(torch module names, ONNX node names) from ``--exclude``; a name that is neither is an error."""
    from edgekit.errors import UsageError
    from edgekit.quantize import ort_backend

    if not config.exclude:
        return (), ()
    modules = {name for name, _ in job.float_model().named_modules()} if job.source.has_torch and "torchscript" in config.formats else set()
    nodes = set(ort_backend.node_names(job.prepared_onnx())) if "onnx" in config.formats else set()
    unknown = sorted(set(config.exclude) - modules - nodes)
    if unknown:
        raise UsageError(f"no layer named {', '.join(unknown)} in the model (torch module or ONNX node names; "
                         "the --max-drop sensitivity report lists them)")
    return tuple(n for n in config.exclude if n in modules), tuple(n for n in config.exclude if n in nodes)


def _check_quantizable(job: QuantJob, excluded) -> None:
    """UsageError when the model has no layer with a constant weight to quantize besides those kept
    float by rule (``excluded``: thin stems, small lookups; a user's or the budget's --exclude do
    not count): the result would be the float model under an int8 label."""
    from edgekit.errors import UsageError
    from edgekit.quantize import ort_backend

    nodes = ort_backend.weighted_nodes(job.prepared_onnx())
    left = [name for name, _ in nodes if name not in set(excluded)]
    if not left:
        what = "only ones int8 gains nothing on (a thin input convolution, small lookups)" if nodes else "it has none"
        raise UsageError(f"nothing to quantize in {job.source.label}: int8 needs layers with constant weights "
                         f"({', '.join(ort_backend.WEIGHTED_OPS)}) and {what}")


def _small_lookups(job: QuantJob, notes: list[str]) -> list[str]:
    from edgekit.quantize import ort_backend

    lookups = ort_backend.small_lookups(job.prepared_onnx())
    if lookups:
        notes.append(f"small embedding lookups kept in float ({', '.join(lookups)}): int8 only saves size there")
    return lookups


def dynamic(job: QuantJob, config: DynamicConfig) -> list[Produced]:
    from edgekit.quantize import ort_backend, torch_backend

    torch_exclude, onnx_exclude = _split_exclude(job, config)
    produced = []
    if "torchscript" in config.formats:
        engine = job.target.quantized_engine
        qmodel = torch_backend.dynamic_int8(job.float_model(), engine, exclude=torch_exclude)
        job.save_torchscript(qmodel, TORCHSCRIPT_FILE, engine)
        details = {"quantized_engine": engine, "backend": "torch.ao dynamic"}
        if torch_exclude:
            details["float_layers"] = list(torch_exclude)
        produced.append(Produced(TORCHSCRIPT_FILE, "torchscript", details))
    if "onnx" in config.formats:
        recipe = job.recipe(config)
        notes = list(recipe.notes)
        lookups = _small_lookups(job, notes)
        _check_quantizable(job, lookups)
        graph, fusion = job.fused_onnx(config.fusion)
        # the transformer optimizer's contrib ops have no type information for the quantizer
        extra = {"DefaultTensorType": 1} if config.fusion == "transformer" else None
        details = ort_backend.dynamic_int8(graph, job.dest / ONNX_FILE, recipe, (*onnx_exclude, *lookups), extra)
        if onnx_exclude or lookups:
            details["float_nodes"] = [*onnx_exclude, *lookups]
        produced.append(Produced(ONNX_FILE, "onnx", {**details, **fusion, "backend": "onnxruntime.quantization",
                                                     "recipe": recipe.short, "recipe_notes": notes, **job.onnx_exporter}))
    return produced


def static(job: QuantJob, config: StaticConfig) -> list[Produced]:
    from edgekit.quantize import ort_backend, torch_backend

    torch_exclude, onnx_exclude = _split_exclude(job, config)
    produced = []
    if "torchscript" in config.formats:
        engine = job.target.quantized_engine
        calib = job.calibration(config)
        if not job.calibration_info:
            from edgekit.quantize.calib_cache import files_fingerprint

            job.calibration_info = {"source": str(config.calib), "files": [p.name for p in calib.files],
                                    "data_sha256": files_fingerprint(calib.files),
                                    "samples": calib.count(), "batch_size": config.calib_batch_size}
        qmodel = torch_backend.static_int8_fx(
            job.float_model(), job.example_inputs(), job.torch_batches(calib), engine, exclude=torch_exclude
        )
        job.save_torchscript(qmodel, TORCHSCRIPT_FILE, engine)
        details = {"quantized_engine": engine, "backend": "torch.ao FX", **torch_backend.describe_qconfig(engine)}
        if torch_exclude:
            details["float_layers"] = list(torch_exclude)
        produced.append(Produced(TORCHSCRIPT_FILE, "torchscript", details))
    if "onnx" in config.formats:
        recipe = job.recipe(config)
        ranges = job.activation_ranges(config)
        notes = list(recipe.notes)
        stem = ort_backend.thin_stem_convs(job.prepared_onnx()) if config.float_stem else []
        if stem:
            notes.append(f"thin input convolution kept in float ({', '.join(stem)}): int8 gains nothing there")
        lookups = _small_lookups(job, notes)
        _check_quantizable(job, (*stem, *lookups))
        graph, fusion = job.fused_onnx(config.fusion)  # same tensor names: the ranges still apply
        extra = None if config.quantize_matmul_outputs else {"OpTypesToExcludeOutputQuantization": ["MatMul"]}
        if config.smooth:
            from edgekit.quantize.smooth import search

            details = search(job, config, graph, recipe, (*onnx_exclude, *stem, *lookups), extra, job.dest / ONNX_FILE)
        else:
            details = ort_backend.static_int8_qdq(graph, job.dest / ONNX_FILE, ranges, recipe,
                                                  (*onnx_exclude, *stem, *lookups), config.op_types, extra)
        if not config.quantize_matmul_outputs:
            details["float_outputs"] = ["MatMul"]
        produced.append(Produced(ONNX_FILE, "onnx", {**details, **fusion, "backend": "onnxruntime.quantization",
                                                     "calibrate_method": config.calibrate_method,
                                                     "recipe": recipe.short, "recipe_notes": notes, **job.onnx_exporter}))
    return produced


def qat(job: QuantJob, config):
    from edgekit.quantize.qat import quantization_aware_training

    return quantization_aware_training(job, config)


def _register() -> None:
    from edgekit.quantize.methods import QatConfig

    register_method(Method("dynamic", DynamicConfig, dynamic, "int8 weights, activations quantized at run time"))
    register_method(Method("static", StaticConfig, static, "int8 weights and activations, calibrated"))
    register_method(Method("qat", QatConfig, qat, "fake-quant fine-tuning on the training data, then int8"))


_register()
