"""ncnn (Tencent's inference library) through its Python wheel: ``model.ncnn.param`` + ``model.ncnn.bin``.

ncnn runs one sample at a time (its blobs have no batch axis): a batch is run row by row and
the outputs stacked. fp16 storage and arithmetic are off: ncnn turns them on by default where
the CPU has them (the Pi 5's Cortex-A76 does), which would make an fp32 file answer in fp16.
int8 layers (weights stored as int8 with their scales) run as int8 either way.
"""

from __future__ import annotations

import re
from pathlib import Path

from ..errors import BoardError, BoardUsageError, first_line
from .base import Runtime

MAGIC = "7767517"  # the first line of every ncnn .param file
MAX_PARAM_BYTES = 64 << 20
MAX_LAYERS = 100_000
_LAYER_LINE = re.compile(r"^\S+\s+\S+\s+(\d+)\s+(\d+)(\s|$)")


def data_file(param: Path) -> Path:
    """The weights file beside a ``.param`` file: ``model.ncnn.param`` -> ``model.ncnn.bin``."""
    return Path(param).with_suffix(".bin")


def check_param(path: Path) -> str:
    """The text of an ncnn ``.param`` file, checked line by line before ncnn's parser sees it
    (BoardError naming what is wrong: ncnn's own parser prints to stderr and may read past a bad line)."""
    path = Path(path)
    try:
        if path.stat().st_size > MAX_PARAM_BYTES:
            raise BoardError(f"{path.name} is larger than {MAX_PARAM_BYTES >> 20} MiB; not an ncnn .param file")
        text = path.read_text(encoding="ascii")
    except (OSError, UnicodeDecodeError) as exc:
        raise BoardError(f"cannot read {path.name} as an ncnn .param file ({first_line(exc)})") from None
    lines = text.splitlines()
    if not lines or lines[0].strip() != MAGIC:
        raise BoardError(f"{path.name} is not an ncnn .param file (no {MAGIC} magic line)")
    counts = lines[1].split() if len(lines) > 1 else []
    if len(counts) != 2 or not all(c.isdigit() for c in counts) or not 0 < int(counts[0]) <= MAX_LAYERS:
        raise BoardError(f"{path.name} is not an ncnn .param file (line 2 is not a layer and blob count)")
    layers = [line for line in lines[2:] if line.strip()]
    if len(layers) != int(counts[0]):
        raise BoardError(f"{path.name} declares {counts[0]} layers but holds {len(layers)}")
    for number, line in enumerate(layers, start=3):
        if not _LAYER_LINE.match(line):
            raise BoardError(f"{path.name} line {number} is not an ncnn layer (type name inputs outputs ...)")
    if not data_file(path).is_file():
        raise BoardError(f"{data_file(path).name} (the weights of {path.name}) is missing")
    return text


class NcnnRuntime(Runtime):
    format = "ncnn"
    suffixes = (".param",)
    spec_match = "at_most"

    def __init__(self, path: Path, threads: int | None, engine: str | None = None):
        ncnn = _import_ncnn()
        path = Path(path)
        check_param(path)
        self.net = net = ncnn.Net()
        options = net.opt
        options.use_vulkan_compute = False
        for name in ("use_fp16_packed", "use_fp16_storage", "use_fp16_arithmetic", "use_bf16_storage"):
            if hasattr(options, name):
                setattr(options, name, False)
        if threads:
            options.num_threads = int(threads)
        if net.load_param(str(path)) != 0:
            raise BoardError(f"ncnn cannot load {path.name}: a layer type or parameter it does not know")
        if net.load_model(str(data_file(path))) != 0:
            raise BoardError(f"ncnn cannot load {data_file(path).name}: it does not hold {path.name}'s weights")
        self.names = list(net.input_names())
        self.output_names = list(net.output_names())
        if not self.names or not self.output_names:
            raise BoardError(f"{path.name} has no Input layer or no output blob")
        self.ncnn = ncnn
        self.info = {"name": "ncnn", "version": _version(ncnn), "threads": options.num_threads, "engine": None,
                     "providers": ["cpu"]}

    @staticmethod
    def claims(path: Path) -> bool:
        try:
            with open(path, "rb") as fh:
                return fh.read(len(MAGIC) + 1).rstrip(b"\r\n ") == MAGIC.encode()
        except OSError:
            return False

    @classmethod
    def preload(cls, threads: int) -> None:
        _import_ncnn()

    def input_specs(self) -> list[dict]:
        return [{"name": name, "shape": None, "dtype": "float32", "dynamic_axes": {}} for name in self.names]

    def bind(self, arrays: dict):
        return self.run, (list(arrays.values()),)

    def run(self, arrays: list) -> list:
        import numpy as np

        if len(arrays) != len(self.names):
            raise BoardUsageError(f"the ncnn model takes {len(self.names)} inputs, got {len(arrays)}")
        rows = [np.ascontiguousarray(a, dtype=np.float32) for a in arrays]
        if any(r.ndim < 2 or r.ndim > 5 or len(r) != len(rows[0]) for r in rows):
            raise BoardUsageError("ncnn inputs are batches of 1 to 4 dimensional float arrays, one row per sample")
        outputs: list[list] = [[] for _ in self.output_names]
        for index in range(len(rows[0])):
            samples = [np.ascontiguousarray(r[index]) for r in rows]  # alive until extracted: the Mats borrow them
            extractor = self.net.create_extractor()
            for name, sample in zip(self.names, samples):
                extractor.input(name, self.ncnn.Mat(sample))
            for k, name in enumerate(self.output_names):
                status, mat = extractor.extract(name)
                if status != 0:
                    raise BoardError(f"ncnn failed computing {name!r} (status {status})")
                outputs[k].append(np.array(mat, dtype=np.float32, copy=True))
            del samples
        return [np.stack(parts) for parts in outputs]

    def call_order(self, inputs: dict, order: list | None) -> list:
        return [n for n in (order or ()) if n in inputs] or list(inputs)


def _import_ncnn():
    try:
        import ncnn
    except ImportError as exc:
        raise BoardError(f"the ncnn runtime is not installed (pip install ncnn): {first_line(exc)}") from None
    return ncnn


def _version(ncnn) -> str:
    try:
        from importlib.metadata import version

        return version("ncnn")
    except Exception:  # noqa: BLE001 - a board's Python without the distribution's metadata
        return str(getattr(ncnn, "__version__", "unknown"))


RUNTIME = NcnnRuntime
