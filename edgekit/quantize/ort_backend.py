"""The one module that talks to ``onnxruntime.quantization``."""

from __future__ import annotations

import contextlib
import io
import logging
import tempfile
import warnings
from pathlib import Path
from typing import Iterable, Iterator

import numpy as np

from edgekit.targets import OnnxQuantSettings


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


def preprocess(float_path: Path, out_path: Path) -> Path:
    """Shape inference + graph optimisation recommended before quantization.

    ``auto_merge`` lets symbolic shape inference merge conflicting symbolic dims (transformer
    exports otherwise fail with "Incomplete symbolic shape inference").
    """
    from onnxruntime.quantization.shape_inference import quant_pre_process

    with quiet():
        quant_pre_process(str(float_path), str(out_path), auto_merge=True)
    return out_path


class _Reader:
    """Adapts an iterator of input dicts to ORT's CalibrationDataReader protocol."""

    def __init__(self, batches: Iterable[dict[str, np.ndarray]]):
        self._iter = iter(batches)

    def get_next(self):
        return next(self._iter, None)

    def rewind(self):  # pragma: no cover - only used by ORT's multi-pass calibrators
        raise NotImplementedError

    def set_range(self, start_index: int, end_index: int):  # pragma: no cover
        raise NotImplementedError


def dynamic_int8(float_path: Path, out_path: Path, settings: OnnxQuantSettings) -> dict:
    from onnxruntime.quantization import quantize_dynamic

    with tempfile.TemporaryDirectory(dir=out_path.parent) as tmp:
        prepared = preprocess(float_path, Path(tmp) / "prepared.onnx")
        with quiet():
            quantize_dynamic(
                str(prepared),
                str(out_path),
                per_channel=settings.per_channel,
                reduce_range=settings.reduce_range,
                weight_type=_quant_type(settings.weight_type),
            )
    return {
        "format": "QOperator (dynamic)",
        "weight_type": settings.weight_type,
        "per_channel": settings.per_channel,
        "reduce_range": settings.reduce_range,
    }


def static_int8_qdq(
    float_path: Path,
    out_path: Path,
    batches: Iterable[dict[str, np.ndarray]],
    settings: OnnxQuantSettings,
    calibrate_method: str = "minmax",
) -> dict:
    from onnxruntime.quantization import CalibrationMethod, QuantFormat, quantize_static

    methods = {"minmax": CalibrationMethod.MinMax, "entropy": CalibrationMethod.Entropy,
               "percentile": CalibrationMethod.Percentile}
    with tempfile.TemporaryDirectory(dir=out_path.parent) as tmp:
        prepared = preprocess(float_path, Path(tmp) / "prepared.onnx")
        with quiet():
            quantize_static(
                str(prepared),
                str(out_path),
                _Reader(batches),
                quant_format=QuantFormat.QDQ,
                per_channel=settings.per_channel,
                reduce_range=settings.reduce_range,
                activation_type=_quant_type(settings.activation_type),
                weight_type=_quant_type(settings.weight_type),
                calibrate_method=methods[calibrate_method],
                extra_options={"CalibTensorRangeSymmetric": False},
            )
    return {
        "format": "QDQ",
        "activation_type": settings.activation_type,
        "weight_type": settings.weight_type,
        "per_channel": settings.per_channel,
        "reduce_range": settings.reduce_range,
        "calibrate_method": calibrate_method,
    }
