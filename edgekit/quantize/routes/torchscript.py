"""int8 TorchScript through torch.ao (FX graph mode, the target's quantized engine).

torch.ao's eager/FX quantization is deprecated in favour of PT2E; it stays here because int8
TorchScript for the ``qnnpack``/``x86`` engines has no PT2E route. ``.pte`` files use PT2E
(``routes/executorch``).
"""

from __future__ import annotations

from pathlib import Path

from edgekit.formats.torchscript import FORMAT
from edgekit.quantize.layers import excluded, torch_module_layers
from edgekit.quantize.methods import DynamicConfig, QatConfig, StaticConfig
from edgekit.quantize.produced import Produced
from edgekit.quantize.registry import layer_lister, route
from edgekit.core.errors import UsageError
from edgekit.formats import torchscript_backend
from edgekit.quantize.toolkits import torch_backend
from edgekit.quantize.toolkits.qat import fine_tuned
from edgekit.quantize.toolkits.torch_backend import quantized_engine

FILE = FORMAT.files.file_name


def _save(job, module, engine: str) -> Path:
    """The int8 module traced under its quantized engine and saved as the job's ``FILE``, with provenance."""
    path = job.dest / FILE
    with quantized_engine(engine):
        traced = torchscript_backend.trace(module, job.example_inputs())
        _check_changed(job, traced)
        torchscript_backend.save(traced, path, {**job.provenance, "quantized_engine": engine})
    return path


def _check_changed(job, traced) -> None:
    """UsageError when the traced int8 module runs no quantized op: torch.ao found nothing it
    quantizes (a ScriptModule's layers are not nn.Linear to it), and the file would be the float
    model under an int8 label."""
    def kinds(block):
        for node in block.nodes():
            yield node.kind()
            for inner in node.blocks():
                yield from kinds(inner)

    if any(kind.startswith("quantized::") or kind.startswith("aten::quantize_per") for kind in kinds(traced.inlined_graph)):
        return
    why = ("torch.ao quantizes no layer of a TorchScript model (its layers are compiled code, not nn.Linear)"
           if job.source.kind == "torchscript" else "the model has no layer torch.ao quantizes (nn.Linear, nn.LSTM, "
           "nn.Conv2d...)")
    raise UsageError(f"int8 TorchScript of {job.source.label} would be the float model unchanged: {why}; "
                     "use --format onnx")


layers = layer_lister(FORMAT.name)(torch_module_layers)


@route(DynamicConfig, FORMAT.name)
def dynamic(job, config) -> list[Produced]:
    exclude = excluded(job, config, "torch")
    engine = job.target.quantized_engine
    qmodel = torch_backend.dynamic_int8(job.float_model(), engine, exclude=exclude)
    _save(job, qmodel, engine)
    details = {"quantized_engine": engine, "backend": "torch.ao dynamic", "api": "torch.ao"}
    if exclude:
        details["float_layers"] = list(exclude)
    return [Produced(FILE, FORMAT.name, details)]


@route(StaticConfig, FORMAT.name)
def static(job, config) -> list[Produced]:
    exclude = excluded(job, config, "torch")
    engine = job.target.quantized_engine
    calib = job.calibration(config)
    job.note_calibration(config, calib)
    per_channel = job.target.torch_quant.per_channel if config.per_channel is None else bool(config.per_channel)
    qmodel = torch_backend.static_int8_fx(
        job.float_model(), job.example_inputs(), job.torch_batches(calib), engine, exclude=exclude,
        per_channel=per_channel,
    )
    _save(job, qmodel, engine)
    details = {"quantized_engine": engine, "backend": "torch.ao FX", "api": "torch.ao",
               **torch_backend.describe_qconfig(engine, per_channel)}
    if exclude:
        details["float_layers"] = list(exclude)
    return [Produced(FILE, FORMAT.name, details)]


@route(QatConfig, FORMAT.name)
def qat(job, config) -> list[Produced]:
    import copy


    prepared, qat_info = fine_tuned(job, config)
    engine = job.target.quantized_engine
    qmodel = torch_backend.convert_qat(copy.deepcopy(prepared), engine)
    _save(job, qmodel, engine)
    return [Produced(FILE, FORMAT.name, {"quantized_engine": engine, "backend": "torch.ao FX QAT", "api": "torch.ao",
                                         "qat": qat_info, **torch_backend.describe_qconfig(engine, config.per_channel)})]
