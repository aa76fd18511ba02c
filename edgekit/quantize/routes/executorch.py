"""int8 ``.pte`` through PT2E (torchao) and the XNNPACK delegate.

Every method ends the same way: the quantized graph is exported again with the model's dynamic
axes and lowered to XNNPACK (``formats.executorch.lower``), which turns quantize/dequantize
pairs around convolutions and linears into int8 kernels.
"""

from __future__ import annotations

from edgekit.formats.executorch import FORMAT
from edgekit.quantize.layers import excluded, torch_module_layers
from edgekit.quantize.methods import DynamicConfig, QatConfig, StaticConfig
from edgekit.quantize.produced import Produced
from edgekit.quantize.registry import layer_lister, route
from edgekit.formats import executorch
from edgekit.quantize.toolkits import pt2e_backend
from edgekit.quantize.toolkits.qat import train_fake_quant

FILE = FORMAT.files.file_name


def _per_channel(job, config) -> bool:
    """``--per-channel`` when given, else the target's ``[runtime.executorch_quant] per_channel`` (default on)."""
    return job.target.pte_quant.per_channel if config.per_channel is None else bool(config.per_channel)


def _write(job, graph, details: dict) -> list[Produced]:
    path = job.dest / FILE
    program = executorch.export_program(graph, job.example_inputs(), job.source.inputs)
    details = {**details, "variant": f"int8-{details['method']}-executorch", "delegate": "xnnpack",
               "api": "torchao PT2E"}
    details["delegated_subgraphs"] = executorch.lower(program, path, {**job.provenance, **details})
    details["max_shapes"] = executorch.planned_bounds(path, job.source.inputs)
    return [Produced(FILE, FORMAT.name, details)]


def _details(job, config, method: str, exclude, dynamic: bool = False) -> dict:
    details = {"method": method, "backend": "torchao PT2E + XNNPACKQuantizer",
               **pt2e_backend.describe(_per_channel(job, config), dynamic)}
    if exclude:
        details["float_layers"] = list(exclude)
    return details


layers = layer_lister(FORMAT.name)(torch_module_layers)


@route(DynamicConfig, FORMAT.name)
def dynamic(job, config) -> list[Produced]:
    exclude = excluded(job, config, "torch")
    q = pt2e_backend.quantizer(per_channel=_per_channel(job, config), dynamic=True, exclude=exclude)
    graph, _ = pt2e_backend.calibrated(job.float_model(), job.example_inputs(), job.source.inputs,
                                       [job.example_inputs()], q)  # dynamic: one pass inserts the observers
    return _write(job, graph, _details(job, config, "dynamic", exclude, dynamic=True))


@route(StaticConfig, FORMAT.name)
def static(job, config) -> list[Produced]:
    exclude = excluded(job, config, "torch")
    calib = job.calibration(config)
    job.note_calibration(config, calib)
    q = pt2e_backend.quantizer(per_channel=_per_channel(job, config), exclude=exclude)
    graph, seen = pt2e_backend.calibrated(job.float_model(), job.example_inputs(), job.source.inputs,
                                          job.torch_batches(calib), q,
                                          dict(getattr(calib, "axes", ())).get(job.source.inputs[0].name, 0))
    details = _details(job, config, "static", exclude)
    details["calibration_samples"] = seen
    if config.calibrate_method != "minmax":
        details["calibrate_method_note"] = (f"--calibrate-method {config.calibrate_method} applies to ONNX; "
                                            "XNNPACKQuantizer observes min/max")
    return _write(job, graph, details)


@route(QatConfig, FORMAT.name)
def qat(job, config) -> list[Produced]:
    q = pt2e_backend.quantizer(per_channel=_per_channel(job, config), qat=True)
    prepared = pt2e_backend.prepare_qat(job.float_model(), job.example_inputs(), job.source.inputs, q)
    with pt2e_backend.quiet():
        qat_info = train_fake_quant(job, config, prepared, pt2e_backend.qat_hooks())
    graph = pt2e_backend.convert(prepared)
    job.reference_model = prepared  # the int8 file implements the trained fake-quant graph
    details = _details(job, config, "qat", ())
    details["qat"] = qat_info
    return _write(job, graph, details)
