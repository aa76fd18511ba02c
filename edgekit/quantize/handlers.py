"""Built-in handlers: each turns a float model into int8 files for the requested formats."""

from __future__ import annotations

from edgekit.quantize.job import QuantJob
from edgekit.quantize.methods import DynamicConfig, Method, Produced, StaticConfig, register_method

TORCHSCRIPT_FILE = "model.pt"
ONNX_FILE = "model.onnx"


def dynamic(job: QuantJob, config: DynamicConfig) -> list[Produced]:
    from edgekit.quantize import ort_backend, torch_backend

    produced = []
    if "torchscript" in config.formats:
        engine = job.target.quantized_engine
        qmodel = torch_backend.dynamic_int8(job.float_model(), engine)
        job.save_torchscript(qmodel, TORCHSCRIPT_FILE, engine)
        produced.append(Produced(TORCHSCRIPT_FILE, "torchscript", {"quantized_engine": engine, "backend": "torch.ao dynamic"}))
    if "onnx" in config.formats:
        details = ort_backend.dynamic_int8(job.float_onnx(), job.work / ONNX_FILE, job.target.onnx_quant)
        produced.append(Produced(ONNX_FILE, "onnx", {**details, "backend": "onnxruntime.quantization"}))
    return produced


def static(job: QuantJob, config: StaticConfig) -> list[Produced]:
    from edgekit.quantize import ort_backend, torch_backend

    calib = job.calibration(config)
    produced = []
    if "torchscript" in config.formats:
        engine = job.target.quantized_engine
        qmodel = torch_backend.static_int8_fx(
            job.float_model(), job.example_inputs(), job.torch_batches(calib), engine
        )
        job.save_torchscript(qmodel, TORCHSCRIPT_FILE, engine)
        produced.append(
            Produced(
                TORCHSCRIPT_FILE,
                "torchscript",
                {"quantized_engine": engine, "backend": "torch.ao FX", **torch_backend.describe_qconfig(engine)},
            )
        )
    if "onnx" in config.formats:
        details = ort_backend.static_int8_qdq(
            job.float_onnx(), job.work / ONNX_FILE, job.onnx_batches(calib), job.target.onnx_quant,
            config.calibrate_method,
        )
        produced.append(Produced(ONNX_FILE, "onnx", {**details, "backend": "onnxruntime.quantization"}))
    return produced


register_method(Method("dynamic", DynamicConfig, dynamic, "int8 weights, activations quantized at run time"))
register_method(Method("static", StaticConfig, static, "int8 weights and activations, calibrated"))
