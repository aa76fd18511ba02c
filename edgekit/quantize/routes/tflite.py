"""int8 ``.tflite`` through litert-torch's PT2E quantizer (symmetric int8 weights, per channel).

The program is exported at batch 1 (what the file runs at), quantized with torchao's PT2E
prepare/convert under litert-torch's quantizer, calibrated sample by sample on edgekit's
calibration data (static), then converted with the quantizer's config so the converter emits
int8 kernels. QAT has no route here (its fake-quant graph is torch.ao's or XNNPACK's).
"""

from __future__ import annotations

from edgekit.formats.tflite import FORMAT
from edgekit.quantize.methods import DynamicConfig, StaticConfig
from edgekit.quantize.produced import Produced
from edgekit.quantize.registry import route
from edgekit.core.errors import UsageError
from edgekit.formats import tflite

FILE = FORMAT.files.file_name


def _prepared(job, config, dynamic: bool):
    import torch
    from torchao.quantization.pt2e import quantize_pt2e


    if config.exclude:
        raise UsageError("--format tflite keeps no layer in float: --exclude and --max-drop take torch or ONNX layer "
                         "names of the other formats")
    per_channel = True if config.per_channel is None else bool(config.per_channel)
    with tflite.quiet():  # importing litert-torch loads JAX, which logs to stderr from C++
        from litert_torch.quantize import pt2e_quantizer

        quantizer = pt2e_quantizer.PT2EQuantizer().set_global(
            pt2e_quantizer.get_symmetric_quantization_config(is_per_channel=per_channel, is_dynamic=dynamic))
        program = torch.export.export(job.float_model().eval(), tflite.single(job.example_inputs())).module()
        return quantize_pt2e.prepare_pt2e(program, quantizer), quantizer, per_channel


def _write(job, graph, quantizer, details: dict) -> list[Produced]:
    from torchao.quantization.pt2e import quantize_pt2e


    with tflite.quiet():
        from litert_torch.quantize import quant_config

        converted = quantize_pt2e.convert_pt2e(graph, fold_quantize=False)
    done = tflite.convert(converted, job.example_inputs(), job.source.inputs, job.dest / FILE,
                          quant_config=quant_config.QuantConfig(pt2e_quantizer=quantizer))
    return [Produced(FILE, FORMAT.name, {**details, **done, "backend": "litert-torch PT2EQuantizer",
                                         "api": "torchao PT2E + litert-torch"})]


@route(StaticConfig, FORMAT.name)
def static(job, config) -> list[Produced]:
    import torch

    graph, quantizer, per_channel = _prepared(job, config, dynamic=False)
    calib = job.calibration(config)
    job.note_calibration(config, calib)
    seen = 0
    with torch.no_grad():
        for batch in job.torch_batches(calib):
            for row in range(len(batch[0])):  # the program's batch is 1
                graph(*(tensor[row:row + 1] for tensor in batch))
                seen += 1
    details = {"method": "static", "per_channel": per_channel, "calibration_samples": seen}
    if config.calibrate_method != "minmax":
        details["calibrate_method_note"] = (f"--calibrate-method {config.calibrate_method} applies to ONNX; "
                                            "litert-torch's quantizer observes min/max")
    return _write(job, graph, quantizer, details)


@route(DynamicConfig, FORMAT.name)
def dynamic(job, config) -> list[Produced]:
    import torch


    graph, quantizer, per_channel = _prepared(job, config, dynamic=True)
    with torch.no_grad():
        graph(*tflite.single(job.example_inputs()))  # dynamic: one pass places the weight observers
    return _write(job, graph, quantizer, {"method": "dynamic", "per_channel": per_channel})
