"""int8 ncnn: the float model through pnnx, then ncnn's int8 layout scaled on the calibration data.

Static only: ncnn's int8 layers take a fixed input scale (no run-time activation ranges), and
QAT's fake-quant graph has no pnnx path. ``--exclude`` has no ncnn layer names to take.
"""

from __future__ import annotations

from edgekit.formats.ncnn import FORMAT
from edgekit.quantize.methods import StaticConfig
from edgekit.quantize.produced import Produced
from edgekit.quantize.registry import route
from edgekit.core.errors import UsageError
from edgekit.formats import ncnn
from edgekit.quantize.toolkits import ncnn_int8

FILE = FORMAT.files.file_name


@route(StaticConfig, FORMAT.name)
def static(job, config) -> list[Produced]:
    if config.exclude:
        raise UsageError("--format ncnn keeps no layer in float: --exclude and --max-drop take torch or ONNX "
                         "layer names (use --format onnx)")
    float_param = job.scratch / "ncnn-fp32" / FILE
    float_param.parent.mkdir(exist_ok=True)
    converted = ncnn.convert(job.float_model(), job.example_inputs(), job.source.inputs, float_param)
    calib = job.calibration(config)
    job.note_calibration(config, calib)
    details = ncnn_int8.quantize(float_param, job.dest / FILE, calib.feeds(), [spec.name for spec in job.source.inputs])
    if config.calibrate_method != "minmax":
        details["calibrate_method_note"] = (f"--calibrate-method {config.calibrate_method} applies to ONNX; "
                                            "ncnn's int8 scales here come from max |x|")
    return [Produced(FILE, FORMAT.name, {**details, **converted, "method": "static", "backend": "ncnn int8",
                                         "api": "pnnx + ncnn int8 layout"})]
