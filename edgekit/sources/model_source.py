"""Where the float model comes from: an edgekit checkpoint, an ONNX file, a user ``nn.Module``
factory (``package.module:factory`` + optional state dict), or a Hugging Face ``transformers``
folder (``hf:FOLDER``: its config and trained weights, ``sources/hf_weights.py``; random weights
only with ``--random-init``; nothing is downloaded).

Models from outside the zoo have no labelled dataset: their accuracy is fidelity to the float
model (cosine / SQNR on fixed inputs).
"""

from __future__ import annotations

import importlib
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable

from edgekit.formats.artifacts import InputSpec, Manifest, load_manifest, parent_ref
from edgekit.core.errors import EdgekitError, InputFileError, UsageError, first_line
from edgekit.core.fileio import sha256_file, read_json
from edgekit.core.bounds import model_size_problem
from edgekit.core.onnx_files import model_inputs
from edgekit.core.safeload import load_plain
from edgekit.formats.onnx_export import check_model
from edgekit.sources import hf_weights, torchscript_source
from edgekit.sources.checkpoint import load_model_from_artifact
from edgekit.sources.hf_weights import strict_mismatch
from edgekit.sources.token_inputs import lookup_sizes, token_feed
from edgekit.sources.torchscript_source import is_torchscript_path

DTYPES = ("float32", "float16", "int64", "int32", "bool")
_FACTORY = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*\Z")


@dataclass
class ModelSource:
    kind: str  # checkpoint | onnx | module | torchscript | hf
    label: str
    inputs: tuple[InputSpec, ...]
    outputs: tuple[str, ...]
    task: dict = field(default_factory=dict)
    model_info: dict = field(default_factory=dict)  # the manifest's "model"
    parent: dict | None = None
    float_accuracy: float | None = None
    onnx_path: Path | None = None  # ONNX sources: the float model itself
    loader: Callable[[], Any] | None = None  # torch sources: builds the float nn.Module
    manifest: Manifest | None = None
    reference_feed: Callable[[int], dict] | None = None  # realistic fixed inputs for fidelity, by batch
    tokenizer: Path | None = None  # hf: folders: where the model's tokenizer files are (text calibration)

    @property
    def has_torch(self) -> bool:
        return self.loader is not None

    @property
    def labelled(self) -> bool:
        return self.task.get("type") == "classification" and bool(self.task.get("dataset"))

    def load_torch(self):
        if self.loader is None:
            raise UsageError(f"{self.label} is an ONNX model: only the ONNX Runtime path applies (--format onnx)")
        return self.loader()


def hf_config_file(source) -> Path:
    """``hf:FOLDER`` reads FOLDER/config.json, ``hf:FILE`` the file: the one input to protect."""
    path = Path(str(source)[3:])
    return path / "config.json" if path.is_dir() else path


def resolve_source(
    source: str | Path,
    *,
    input_shapes: list[str] | None = None,
    input_dtypes: list[str] | None = None,
    dynamic_axes: list[str] | None = None,
    input_ranges: list[str] | None = None,
    state_dict: str | Path | None = None,
    random_init: bool = False,
) -> ModelSource:
    text = str(source)
    spec_args = (input_shapes, input_dtypes, dynamic_axes, input_ranges)
    if text.startswith("gguf:") or text.endswith(".gguf") and Path(text).is_file():
        from edgekit.core.outputs import safe_text

        raise UsageError(f"import a GGUF model first: edgekit import {'' if text.startswith('gguf:') else 'gguf:'}"
                         f"{safe_text(text)[:200]} --out DIR, then use DIR (a checkpoint artifact)")
    if text.startswith("hf:"):
        return _hf_source(text[3:], state_dict, spec_args, bool(random_init))
    if random_init:
        raise UsageError("--random-init applies to hf: sources (a transformers config without its weights)")
    path = Path(text)
    if path.suffix == ".onnx":
        if state_dict is not None:
            raise UsageError("--state-dict applies to nn.Module sources, not to an ONNX file")
        return _onnx_source(path, spec_args)

    if is_torchscript_path(path):  # a .pt/.ts file: TorchScript (its code runs when loaded; the user is told)
        return _torchscript_source(path, state_dict, spec_args)
    if not path.exists() and _FACTORY.fullmatch(text):
        return _module_source(text, state_dict, spec_args)
    if any(spec_args) or state_dict is not None:
        raise UsageError("--input-shape/--input-dtype/--dynamic-axes/--state-dict apply to models from outside the zoo "
                         "(an .onnx file, a TorchScript .pt file, package.module:factory, hf:CONFIG); a checkpoint artifact carries its own")
    folder, manifest = load_manifest(path)
    if manifest.kind != "checkpoint":
        raise UsageError(f"{folder} is a {manifest.kind} artifact; quantize takes a float checkpoint")

    def load():
        return load_model_from_artifact(folder, manifest)

    return ModelSource(
        kind="checkpoint", label=str(folder), inputs=manifest.inputs, outputs=manifest.outputs,
        task=dict(manifest.task), model_info=dict(manifest.model), parent=parent_ref(folder, manifest),
        float_accuracy=manifest.metrics.get("accuracy"), loader=load, manifest=manifest,
    )


# ---------------------------------------------------------------------------------------------
# input specs given on the command line


def _split_named(texts: list[str] | None, what: str) -> dict[str | None, str]:
    out: dict[str | None, str] = {}
    for text in texts or []:
        name, sep, value = text.partition("=")
        key = name.strip() if sep else None
        val = value.strip() if sep else text.strip()
        if key in out:
            raise UsageError(f"{what} given twice for {'input ' + repr(key) if key else 'the input'}")
        out[key] = val
    return out


def _dims(text: str) -> tuple[int | None, ...]:
    dims = []
    for part in re.split(r"[x,]", text.lower()):
        part = part.strip()
        if part in ("n", "?", "-1"):
            dims.append(None)
            continue
        if not part.isdigit() or int(part) <= 0:
            raise UsageError(f"bad input shape {text!r}: use positive sizes like 1x3x224x224 (N or ? for dynamic)")
        dims.append(int(part))
    return tuple(dims)


def _axes(text: str) -> dict[int, str]:
    out = {}
    for part in text.split(","):
        axis, _, label = part.partition(":")
        if not axis.strip().isdigit():
            raise UsageError(f"bad dynamic axes {text!r}: use axis numbers like 0,1 or 0:batch,1:sequence")
        index = int(axis)
        out[index] = label.strip() or ("batch" if index == 0 else "sequence" if index == 1 else f"dim{index}")
    return out


def build_specs(
    names: list[str],
    spec_args,
    defaults: dict[str, InputSpec] | None = None,
) -> tuple[InputSpec, ...]:
    """InputSpecs for ``names`` from ``--input-shape/--input-dtype/--dynamic-axes/--input-range``."""
    shapes, dtypes, axes, ranges = (_split_named(a, w) for a, w in zip(
        spec_args, ("--input-shape", "--input-dtype", "--dynamic-axes", "--input-range")))
    defaults = defaults or {}
    for given in (shapes, dtypes, axes, ranges):
        unknown = sorted(k for k in given if k is not None and k not in names)
        if unknown:
            raise UsageError(f"unknown input name(s) {', '.join(unknown)}; the model's inputs: {', '.join(names)}")
        if None in given and len(names) > 1:
            raise UsageError(f"the model has several inputs ({', '.join(names)}); write NAME=VALUE")
    specs = []
    for name in names:
        base = defaults.get(name)
        pick = (lambda d: d.get(name, d.get(None)))
        shape_text = pick(shapes)
        dtype = pick(dtypes) or (base.dtype if base else "float32")
        if dtype not in DTYPES:
            raise UsageError(f"unknown input dtype {dtype!r}; choose one of: {', '.join(DTYPES)}")
        if shape_text is None and base is None:
            raise UsageError(f"input {name!r} needs a shape: --input-shape {name}=1x3x224x224")
        shape = list(_dims(shape_text)) if shape_text is not None else list(base.shape)
        dyn = dict(base.dynamic_axes) if base and shape_text is None else {}
        for index, dim in enumerate(shape):
            if dim is None:
                dyn.setdefault(index, "batch" if index == 0 else "sequence" if index == 1 else f"dim{index}")
        axes_text = pick(axes)
        if axes_text is not None:
            dyn.update(_axes(axes_text))
        for index in dyn:
            if index >= len(shape):
                raise UsageError(f"dynamic axis {index} is beyond input {name!r}'s {len(shape)} dimensions")
            shape[index] = None
        value_range = base.value_range if base else None
        range_text = pick(ranges)
        if range_text is not None:
            low, _, high = range_text.partition(":")
            try:
                value_range = (float(low), float(high))
            except ValueError:
                raise UsageError(f"bad input range {range_text!r}: use LOW:HIGH, e.g. 0:30522") from None
        specs.append(InputSpec(name, tuple(shape), dtype, dyn, value_range))
    check_input_memory(specs)
    return tuple(specs)


INPUT_MEMORY_SHARE = 0.25


def check_input_memory(specs, batch: int = 7, sequence: int = 16) -> None:
    """Refuse fixed input dimensions whose example batches could not be allocated (a graph
    declaring a 10^9-wide input), before any array is made."""
    import math

    import numpy as np
    import psutil

    total, worst = 0, None
    for spec in specs:
        shape = spec.concrete_shape(batch=batch, sequence=sequence)
        size = math.prod(shape) * np.dtype(spec.dtype).itemsize
        total += size
        if worst is None or size > worst[1]:
            worst = (spec, size, shape)
    available = psutil.virtual_memory().available
    if worst is not None and total > INPUT_MEMORY_SHARE * available:
        spec, _, shape = worst
        raise UsageError(
            f"input {spec.name!r} of shape {'x'.join(map(str, shape))} needs {total / 2**30:,.1f} GiB per example batch, "
            f"more than this machine can spare ({available / 2**30:,.1f} GiB available); give smaller --input-shape"
        )


# ---------------------------------------------------------------------------------------------


def _onnx_source(path: Path, spec_args) -> ModelSource:
    import onnx

    if not path.is_file():
        raise InputFileError(f"ONNX model not found: {path}")

    check_model(path)  # a broken graph is the user's input error, not an internal one
    try:
        model = onnx.load(str(path), load_external_data=False)
    except Exception as exc:  # onnx raises DecodeError / ValueError on junk
        raise InputFileError(f"{path} is not a readable ONNX model ({str(exc).splitlines()[0] if str(exc) else type(exc).__name__})") from None

    defaults = {}
    for vi in model_inputs(model):  # an initializer listed among the inputs (IR 3) is a weight, not an input
        tensor = vi.type.tensor_type
        dtype = onnx.helper.tensor_dtype_to_np_dtype(tensor.elem_type).name
        dims, dyn = [], {}
        for index, dim in enumerate(tensor.shape.dim):
            if dim.HasField("dim_value") and dim.dim_value > 0:
                dims.append(dim.dim_value)
            else:
                dims.append(None)
                dyn[index] = dim.dim_param or ("batch" if index == 0 else "sequence" if index == 1 else f"dim{index}")
        defaults[vi.name] = InputSpec(vi.name, tuple(dims), dtype, dyn)

    vocab = lookup_sizes(model)
    for name, rows in vocab.items():  # token ids index an embedding table: that is their range
        if name in defaults and defaults[name].value_range is None:
            defaults[name] = replace(defaults[name], value_range=(0.0, float(rows)))
    names = list(defaults)
    specs = build_specs(names, spec_args, defaults)
    return ModelSource(
        kind="onnx", label=str(path), inputs=specs, outputs=tuple(o.name for o in model.graph.output),
        model_info={"name": "onnx:" + re.sub(r"[^A-Za-z0-9._-]", "_", path.name)[:120], "source": str(path.resolve())},
        parent={"path": str(path.resolve()), "kind": "onnx", "sha256": sha256_file(path)},
        onnx_path=path, reference_feed=token_feed(specs, vocab),
    )


def _load_state_dict(model, state_dict: str | Path | None, label: str) -> None:
    if state_dict is None:
        return

    path = Path(state_dict)
    state = load_plain(path, "state dict")
    if isinstance(state, dict) and isinstance(state.get("model"), dict):
        state = state["model"]  # an edgekit checkpoint payload
    if not isinstance(state, dict):
        raise InputFileError(f"{path} does not hold a state dict")

    problem = strict_mismatch(model, state)  # the whole story in one line (torch's first line is a header)
    if problem is not None:
        raise InputFileError(f"state dict {path} does not match {label}: {problem}")
    try:
        model.load_state_dict(state, strict=True)
    except RuntimeError as exc:
        raise InputFileError(f"state dict {path} does not match {label}: {first_line(exc, 300)}") from None


def _import_user_module(name: str):
    """Import the user's module as ``python -m`` would: the current folder comes first on the path
    (the ``edgekit`` console script, unlike ``python -m edgekit``, does not put it there)."""
    import os
    import sys

    cwd = os.getcwd()
    if cwd in sys.path or "" in sys.path:
        return importlib.import_module(name)
    sys.path.insert(0, cwd)
    try:
        return importlib.import_module(name)
    finally:
        if cwd in sys.path:
            sys.path.remove(cwd)


class _Sink:
    """Where a user's module and factory print while edgekit runs them: kept out of edgekit's
    one-line errors and --json output, and bounded (a factory printing forever costs no memory)."""

    def __init__(self, limit: int = 1 << 16):
        self.limit, self.text = limit, []
        self.size = 0

    def write(self, text) -> int:
        text = str(text)
        if self.size < self.limit:
            self.text.append(text[: self.limit - self.size])
            self.size += len(self.text[-1])
        return len(text)

    def flush(self) -> None:
        pass

    def isatty(self) -> bool:
        return False


def _run_user_code(what: str, call: Callable[[], Any], error: type[EdgekitError] = UsageError):
    """``call()`` with its prints captured; any exception (even SystemExit) is one ``error``:
    "<what> raised <type>: <its first line>"."""
    import contextlib

    sink = _Sink()
    try:
        with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
            return call()
    except EdgekitError:
        raise
    except (Exception, SystemExit) as exc:  # noqa: BLE001 - the user's code may raise anything
        raise error(f"{what} raised {type(exc).__name__}: {first_line(exc, 200)}") from None


def _resolve_factory(text: str) -> Callable[[], Any]:
    """The callable ``package.module:factory`` names, checked before anything is called: a Python
    function that takes no arguments, or an ``nn.Module`` subclass that needs none. Nothing from
    the standard library (``os:system``, ``pdb:set_trace``, ``http.server:test`` are no model
    factories), no built-in, no other class, nothing that is not callable."""
    import inspect
    import sys

    module_name, factory_name = text.split(":")
    top = module_name.split(".")[0]
    if top in sys.stdlib_module_names:
        raise UsageError(f"{text} names the standard-library module {top!r}, not a model factory: name a function of "
                         "your own package that returns a torch.nn.Module (rename a local module of that name)")
    if factory_name.startswith("__"):
        raise UsageError(f"{text} names a special attribute, not a model factory")

    def load_module():
        try:
            return _import_user_module(module_name)
        except ImportError as exc:
            raise UsageError(f"cannot import {module_name!r} for {text}: {first_line(exc, 200)}") from None

    module = _run_user_code(f"importing {module_name} for {text}", load_module)
    factory = getattr(module, factory_name, None)
    if factory is None:
        raise UsageError(f"{module_name} has no callable {factory_name!r}")
    import torch

    if inspect.isclass(factory):
        if not issubclass(factory, torch.nn.Module):
            raise UsageError(f"{text} is a class ({factory.__name__}), not a model factory: name a function that "
                             "returns a torch.nn.Module, or an nn.Module subclass")
    elif not inspect.isfunction(factory):
        kind = "a built-in function" if inspect.isbuiltin(factory) else \
            "not callable" if not callable(factory) else f"a {type(factory).__name__}, not a function"
        raise UsageError(f"{text} is {kind}: name a function that returns a torch.nn.Module")
    home = (getattr(factory, "__module__", None) or "").split(".")[0]
    if home in sys.stdlib_module_names:
        raise UsageError(f"{text} is {home}.{factory.__qualname__} from the standard library, not a model factory")
    try:
        signature = inspect.signature(factory)
    except (TypeError, ValueError):
        raise UsageError(f"{text}: cannot tell which arguments it takes; a factory takes none") from None
    needed = [p.name for p in signature.parameters.values()
              if p.default is p.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    if needed:
        raise UsageError(f"{text} needs arguments ({', '.join(needed[:5])}); edgekit calls a model factory with none")
    return factory


def _torchscript_source(path: Path, state_dict, spec_args) -> ModelSource:
    if state_dict is not None:
        raise UsageError("--state-dict applies to package.module:factory sources; a TorchScript file holds its weights")
    torchscript_source.check_torchscript_archive(path)
    if not spec_args[0]:
        raise UsageError(f"{path} is a TorchScript model: give its input with --input-shape (e.g. 1x3x224x224)")
    shapes = _split_named(spec_args[0], "--input-shape")
    if None in shapes and len(shapes) > 1:
        raise UsageError("several --input-shape values need names: NAME=1x3x224x224")
    names = [k if k is not None else "input" for k in shapes]
    about, parent = torchscript_source.torchscript_model_info(path)
    return ModelSource(kind="torchscript", label=str(path), inputs=build_specs(names, _named_single(spec_args, names)),
                       outputs=("output",), model_info=about, parent=parent,
                       loader=lambda: torchscript_source.load(path))


def _module_source(text: str, state_dict, spec_args) -> ModelSource:
    factory = _resolve_factory(text)

    def load():
        import torch

        model = _run_user_code(text, factory)
        if not isinstance(model, torch.nn.Module):
            raise UsageError(f"{text} returned {type(model).__name__}, not a torch.nn.Module")
        _load_state_dict(model, state_dict, text)
        return model.eval()

    if not spec_args[0]:
        raise UsageError(f"{text} is a user model: give its input with --input-shape (e.g. 1x3x224x224)")
    shapes = _split_named(spec_args[0], "--input-shape")
    if None in shapes and len(shapes) > 1:
        raise UsageError("several --input-shape values need names: NAME=1x3x224x224")
    names = [k if k is not None else "input" for k in shapes]
    specs = build_specs(names, _named_single(spec_args, names))
    about = {"name": f"module:{text}", "factory": text}
    parent = {"path": text, "kind": "module"}
    if state_dict is not None:
        about["state_dict"] = str(Path(state_dict).resolve())
        if Path(state_dict).is_file():
            parent["sha256"] = sha256_file(state_dict)
    return ModelSource(kind="module", label=text, inputs=specs, outputs=("output",),
                       model_info=about, parent=parent, loader=load)


def _named_single(spec_args, names: list[str]):
    """For a one-input model, unnamed values (``1x3x8x8``) name that input."""
    if len(names) != 1:
        return spec_args
    return [[v if "=" in v else f"{names[0]}={v}" for v in (arg or [])] for arg in spec_args]


HF_SIZE_KEYS = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
                "max_position_embeddings", "type_vocab_size", "d_model", "n_layer", "n_head", "n_embd", "n_positions")


def _check_hf_sizes(config: dict, where) -> None:
    """Sizes in a transformers config are positive integers within reason, and the weights they
    imply fit in memory (estimated on the meta device, nothing allocated): checked before any
    model is built."""
    for key in HF_SIZE_KEYS:
        if key in config:
            value = config[key]
            if isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= 1 << 22:
                raise InputFileError(f"{where}: {key} = {value!r} must be an integer between 1 and {1 << 22}")
    hidden = config.get("hidden_size") or config.get("d_model") or config.get("n_embd") or 768
    layers = config.get("num_hidden_layers") or config.get("n_layer") or 12
    inner = config.get("intermediate_size") or 4 * hidden
    vocab = config.get("vocab_size", 30522)
    positions = config.get("max_position_embeddings") or config.get("n_positions") or 512
    params = (vocab + positions) * hidden + layers * (4 * hidden * hidden + 2 * hidden * inner)
    import psutil

    available = psutil.virtual_memory().available
    if params * 4 > 0.5 * available:
        raise InputFileError(
            f"{where} describes a model of about {params * 4 / 2**30:.1f} GiB of fp32 weights; "
            f"this machine has {available / 2**30:.1f} GiB available"
        )
    # What fits in memory can still take minutes to build: millions of width-1 layers, heads or
    # experts. Every size in the config (nested ones too: text_config, vision_config) has a bound.

    tables = [("", config)]
    while tables:
        prefix, table = tables.pop()
        for key, value in table.items():
            if isinstance(value, dict):
                tables.append((f"{prefix}{key}.", value))
            elif (problem := model_size_problem(str(key), value)) is not None:
                raise InputFileError(f"{where}: {prefix}{key} = {value}: {problem}")


def _hf_source(path_text: str, state_dict, spec_args, random_init: bool = False) -> ModelSource:
    """``hf:FOLDER`` (or ``hf:FOLDER/CONFIG.json``): the encoder its config builds, with the trained
    weights beside the config (``sources/hf_weights.py``) or ``--state-dict FILE``. Random weights
    only with ``--random-init``, and then said (a warning line, and ``model.weights`` in the manifest)."""
    path = Path(path_text)
    config_file = path / "config.json" if path.is_dir() else path
    if not config_file.is_file():
        raise InputFileError(f"Hugging Face config not found: {config_file} (give hf:CONFIG.json or hf:FOLDER)")

    config = read_json(config_file, "Hugging Face config", finite=True)
    if not isinstance(config.get("model_type"), str) or not re.match(r"^[A-Za-z0-9_-]{1,64}\Z", config["model_type"]):
        raise InputFileError(f"{config_file} is not a transformers config (no model_type)")
    _check_hf_sizes(config, config_file)
    vocab = int(config.get("vocab_size", 2))
    defaults = {
        "input_ids": InputSpec("input_ids", (None, None), "int64", {0: "batch", 1: "sequence"}, (0.0, float(vocab))),
        "attention_mask": InputSpec("attention_mask", (None, None), "int64", {0: "batch", 1: "sequence"}, (0.0, 2.0)),
    }
    specs = build_specs(list(defaults), spec_args, defaults)
    label = f"hf:{path_text}"
    if random_init and state_dict is not None:
        raise UsageError("--random-init builds random weights and --state-dict loads trained ones: drop one")
    folder = config_file.parent
    weights = hf_weights.weights_file(Path(state_dict)) if state_dict is not None else \
        None if random_init else hf_weights.find_weights(folder)

    def build(device: str | None = None):
        try:
            import transformers
        except ImportError:
            raise UsageError("hf: sources need the transformers package (pip install transformers)") from None
        import contextlib

        import torch

        def make():
            cfg = transformers.AutoConfig.for_model(**config)
            with torch.random.fork_rng(), (torch.device(device) if device else contextlib.nullcontext()):
                torch.manual_seed(0)  # random weights, but the same ones every time (and for the range cache)
                return transformers.AutoModel.from_config(cfg, attn_implementation="eager")

        with _quiet_transformers(transformers):  # an unknown model_type, sizes that do not divide: the file's fault
            return _run_user_code(f"building a model from {config_file}", make, InputFileError)

    if weights is None and not random_init:
        build("meta")  # a config transformers refuses is the first thing to fix (nothing is allocated)
        found = ", ".join(name for name, _ in hf_weights.WEIGHT_FILES[:1] + hf_weights.WEIGHT_FILES[2:3])
        raise UsageError(f"{label} has no weights: {folder} holds no {found} (nor a shard index); point hf: at a "
                         "folder written by save_pretrained, give --state-dict FILE, or pass --random-init for "
                         "random weights (to try the pipeline only: its figures mean nothing)")
    if weights is None:
        ignored = hf_weights.find_weights(folder)
        about_weights = {"kind": "random", "seed": 0, "warnings": [
            f"{label}: random weights (--random-init), not trained ones"
            + (f"; {ignored.label} is not used" if ignored is not None else "")
            + ": its fidelity and speed say nothing about a trained model"]}
    else:
        about_weights = weights.describe()

    def load():
        encoder = build()
        if weights is not None:
            fitted = hf_weights.fit_weights(encoder, hf_weights.read_weights(weights), weights.label)
            warning = fitted.pop("warning", None)
            about_weights.update(fitted)
            if warning and warning not in about_weights.setdefault("warnings", []):
                about_weights["warnings"].append(warning)
        return _last_hidden_state(encoder).eval()

    def feed(batch: int) -> dict:
        """Right-padded token rows like a tokenizer's: real tokens first, then padding (mask 0)."""
        import numpy as np

        from edgekit.formats.reference import sequence_length

        rng = np.random.default_rng(4321 + batch)
        # a fixed --input-shape is what the files take (an ExecuTorch program has no other size)
        fixed = next((spec.shape for spec in specs if spec.name == "input_ids"), (None, None))
        batch = fixed[0] or batch
        length = (fixed[1] if len(fixed) > 1 else None) or sequence_length(batch)
        lens = rng.integers(length // 2, length + 1, size=batch)
        lens[0] = length
        mask = (np.arange(length)[None, :] < lens[:, None]).astype(np.int64)
        ids = rng.integers(min(1000, vocab - 1), vocab, size=(batch, length)) * mask
        return {"input_ids": ids.astype(np.int64), "attention_mask": mask}

    parent = {"path": str(config_file.resolve()), "kind": "hf-config", "sha256": sha256_file(config_file)}
    if weights is not None:
        parent["weights_sha256"] = list(about_weights["sha256"])
    tokenizer = folder if any((folder / name).is_file() for name in HF_TOKENIZER_FILES) else None
    return ModelSource(kind="hf", label=label, inputs=specs, outputs=("last_hidden_state",),
                       model_info={"name": f"hf:{config['model_type']}", "config": config, "weights": about_weights},
                       parent=parent, loader=load, reference_feed=feed, tokenizer=tokenizer)


HF_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.txt")


def source_warnings(model_info: dict) -> list[str]:
    """What the user must be told about where a model's weights came from (random ones, a dropped head)."""
    weights = model_info.get("weights") if isinstance(model_info, dict) else None
    found = weights.get("warnings") if isinstance(weights, dict) else None
    return [str(line) for line in found] if isinstance(found, list) else []


def _quiet_transformers(transformers):
    """transformers logs its warnings to stderr: they are not edgekit's to show (EDGEKIT_DEBUG keeps them)."""
    import contextlib
    import os

    if os.environ.get("EDGEKIT_DEBUG"):
        return contextlib.nullcontext()

    @contextlib.contextmanager
    def quiet():
        logging = transformers.utils.logging
        level = logging.get_verbosity()
        logging.set_verbosity_error()
        try:
            yield
        finally:
            logging.set_verbosity(level)

    return quiet()


def _last_hidden_state(encoder):
    """Wrap a transformers encoder as (input_ids, attention_mask) -> last_hidden_state."""
    from torch import nn

    class Encoder(nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.model = inner

        def forward(self, input_ids, attention_mask):
            return self.model(input_ids=input_ids, attention_mask=attention_mask, return_dict=True).last_hidden_state

    return Encoder(encoder)
