"""What a pipeline run does for its model, decided before any work.

The model comes from the zoo (``--model``: trained here), a checkpoint artifact (``--checkpoint``),
or anything ``edgekit quantize`` takes (``--source``: an ``.onnx`` file, ``package.module:factory``,
``hf:CONFIG``, a checkpoint folder). The plan says which formats and int8 methods apply to it
and what is skipped and why: every skip is a row of the table, never silently fewer rows.

* An ``.onnx`` source has no PyTorch model: formats written from one (TorchScript, ExecuTorch)
  are skipped, and so is QAT (asked for, it is an error).
* Static int8 needs calibration data: ``--calib``, else the set edgekit ships for the model's
  dataset. With neither, static asked for by ``--methods`` is an error (one line, before any
  work); static from the default methods is skipped, the reason in the table.
* A model without a labelled dataset is judged by fidelity to the float model (cosine, top-1
  agreement on fixed inputs), not accuracy.

Each int8 method becomes its config object here, once (``QuantRun``): a name from ``--methods``
is built from the registry with the plan's formats and calibration data; a config object given
to ``PipelineConfig(methods=...)`` keeps its settings, its ``formats`` are the plan's, and its
``calib``, when None, is the plan's. The stages downstream take the config whole; what a method
needs is read from its config type's traits, never from its name.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from edgekit.core.input_spec import InputSpec
from edgekit.core.errors import UsageError
from edgekit import formats, formats as table
from edgekit.formats.artifacts import load_manifest
from edgekit.data.calibsets import default_calibration
from edgekit.quantize.registry import formats_for, get_method, make_config, methods_for, method_for_config
from edgekit.sources.model_source import resolve_source, source_warnings

DEFAULT_MODEL = "digits-mobilenet"  # a MobileNet-style CNN at 32x32: what int8 is for

DEFAULT_METHODS = ("dynamic", "static")


@dataclass(frozen=True)
class Skipped:
    variants: tuple[str, ...]  # the rows it would have made, e.g. ("int8-static-onnx",)
    reason: str

    def to_dict(self) -> dict:
        return {"variants": list(self.variants), "reason": self.reason}


@dataclass(frozen=True)
class QuantRun:
    """One ``quantize`` call of the pipeline: its folder's name and the method's config, whole."""

    label: str  # quantized/<label>, export/int8-<label>: the method's name (QAT: one run per quantization API)
    config: object  # a registered method's config (edgekit.quantize.registry.QuantConfig)


@dataclass(frozen=True)
class Plan:
    kind: str  # zoo | checkpoint | onnx | module | hf
    name: str  # the model's own name: the table's title, report.html, pipeline.json["model"]
    inputs: tuple[InputSpec, ...]
    task: dict
    formats: tuple[str, ...]
    methods: tuple[str, ...]  # the methods' names, as the rows and messages call them
    calib: Path | None
    quant_runs: tuple[QuantRun, ...] = ()
    skipped: tuple[Skipped, ...] = ()
    checkpoint: Path | None = None  # zoo: None until trained; checkpoint: the artifact folder
    source: object = None  # edgekit.sources.model_source.ModelSource for --source models
    source_options: dict = field(default_factory=dict)
    model_config: dict | None = None
    # {name: entry} of ``formats``, resolved once here: every stage of the run is handed these entries
    format_entries: dict = field(default_factory=dict)

    @property
    def labelled(self) -> bool:
        return self.task.get("type") == "classification" and bool(self.task.get("dataset"))

    @property
    def metric(self) -> str:
        """What the quality column holds: task accuracy, or fidelity to the float model."""
        return "accuracy" if self.labelled else "fidelity"

    @property
    def onnx_file(self) -> bool:
        """The model is an ONNX file: no PyTorch model to write other formats from, or to fine-tune."""
        return self.source is not None and not self.source.has_torch

    @property
    def source_warnings(self) -> list[str]:
        """What the user must be told about the model's weights (random ones, a dropped head)."""
        if self.source is None:
            return []

        return source_warnings(self.source.model_info)

    @property
    def quantize_source(self):
        """What quantize/export take as their source: the checkpoint folder, else the user's source."""
        return self.checkpoint if self.checkpoint is not None else self.source.label


def make_plan(config) -> Plan:
    """The plan for ``config`` (a PipelineConfig); UsageError for what cannot be done as asked."""
    kind, name, inputs, task, extra = _model(config)
    torchless = extra.get("source") is not None and not extra["source"].has_torch
    formats, torch_only, entries_by_name = _formats(config, torchless, name)
    entries, calib, skipped = _methods(config, torchless, name, task, formats)
    methods = tuple(entry_name for entry_name, _, _ in entries)
    if torch_only:  # every row those formats would have had
        variants = tuple(v for fmt in torch_only for v in (f"fp32-{fmt}", *(f"int8-{m}-{fmt}" for m in methods)))
        skipped.insert(0, Skipped(variants, f"{', '.join(torch_only)} {'is' if len(torch_only) == 1 else 'are'} "
                                            f"written from a PyTorch model; {name} is an ONNX file"))
    reading = {"calib_preprocess": getattr(config, "calib_preprocess", None), "tokenizer": getattr(config, "tokenizer", None)}
    runs, unrouted = _quant_runs(entries, formats, calib, {k: v for k, v in reading.items() if v is not None})
    return Plan(kind=kind, name=name, inputs=inputs, task=task, formats=formats, methods=methods, calib=calib,
                quant_runs=runs, skipped=(*skipped, *unrouted), format_entries=entries_by_name, **extra)


def method_entry(entry) -> tuple[str, type, object | None]:
    """(name, config type, the config given or None) of one ``methods`` entry: a registered
    method's name, or a config object of one."""
    found = get_method(entry) if isinstance(entry, str) else method_for_config(entry)
    return found.name, found.config_type, None if isinstance(entry, str) else entry


def _quant_runs(entries, formats: tuple[str, ...], calib: Path | None,
                reading: dict | None = None) -> tuple[tuple[QuantRun, ...], list[Skipped]]:
    """One run per method over the formats it has a route to (the others are skipped rows); a
    method that trains runs once per quantization API (torch.ao vs PT2E), the later runs labelled
    ``<method>-<first format>``. ``reading``: how the plan's calibration data is read
    (``calib_preprocess``, ``tokenizer``), given to the methods whose configs take it."""
    import dataclasses


    runs, skipped = [], []
    for name, config_type, given in entries:
        if get_method(name).handler is None:  # a method of routes writes the formats it has routes to
            routed = set(formats_for(config_type))
            for fmt in (f for f in formats if f not in routed):
                skipped.append(Skipped((f"{config_type.precision}-{name}-{fmt}",),
                                       f"{config_type.called(name)} has no route to {fmt} "
                                       f"({fmt} takes: {', '.join(methods_for(fmt)) or 'no method'})"))
            method_formats = tuple(f for f in formats if f in routed)
            if not method_formats:
                continue
        else:
            method_formats = formats
        groups = list(table.by_qat_api(method_formats).values()) if config_type.trains else [method_formats]
        fill = {"calib": calib} if _takes_plan_calib(config_type, given) else {}
        if fill:  # the plan's data comes with how it is read, where the method's config takes that
            fields = {f.name for f in dataclasses.fields(config_type)}
            fill.update({k: v for k, v in (reading or {}).items() if k in fields})
        for i, group in enumerate(groups):
            group = tuple(group)
            config = (make_config(name, formats=group, **fill) if given is None
                      else dataclasses.replace(given, formats=group, **fill))
            runs.append(QuantRun(name if i == 0 else f"{name}-{group[0]}", config))
    return tuple(runs), skipped


def _takes_plan_calib(config_type: type, given) -> bool:
    """A calibrated method takes the plan's calibration data unless its config object names its own."""
    return config_type.calibrated and getattr(given, "calib", None) is None


def _model(config):
    if config.source is not None and config.checkpoint is not None:
        raise UsageError("--source and --checkpoint both name the model; give one")
    if (config.source is not None or config.checkpoint is not None) and config.model != DEFAULT_MODEL:
        raise UsageError(f"--model {config.model} and --{'source' if config.source is not None else 'checkpoint'} "
                         "both name the model; give one")
    source = config.source if config.source is not None else config.checkpoint
    if source is None:
        if config.source_options:
            raise UsageError("--input-shape/--input-dtype/--dynamic-axes/--input-range/--state-dict apply to --source "
                             "models from outside the zoo; a zoo model knows its inputs")
        from edgekit.models import get_spec

        spec = get_spec(config.model)
        return "zoo", config.model, spec.input_spec(spec.config(None)), dict(spec.task), {}
    text = str(source)
    path = Path(text)
    if config.checkpoint is not None or (path.is_dir() and not text.startswith("hf:")):
        if config.source_options:
            raise UsageError("--input-shape/--input-dtype/--dynamic-axes/--input-range/--state-dict apply to models "
                             "from outside the zoo; a checkpoint artifact carries its own")
        folder, manifest = load_manifest(path)
        if manifest.kind != "checkpoint":
            flag = "--checkpoint" if config.checkpoint is not None else "--source"
            raise UsageError(f"{folder} is a {manifest.kind} artifact; {flag} takes a float checkpoint "
                             "(from `edgekit train`), an .onnx file, package.module:factory or hf:CONFIG")
        extra = {"checkpoint": folder, "model_config": manifest.model.get("config")}
        return "checkpoint", manifest.model["name"], manifest.inputs, dict(manifest.task), extra

    src = resolve_source(text, **config.source_options)
    name = src.model_info.get("name") or src.label
    return src.kind, name, src.inputs, dict(src.task), {"source": src, "source_options": dict(config.source_options)}


def _formats(config, torchless: bool, name: str) -> tuple[tuple[str, ...], list[str], dict]:
    """(the formats to run, the asked-for formats an ONNX file cannot feed, {name: entry} of those that run)."""
    asked = tuple(config.formats) if config.formats is not None else formats.available_names()
    specs = formats.resolve(asked)  # the run's one lookup of each format
    if not torchless:
        return asked, [], specs
    runnable = tuple(f for f in asked if not specs[f].host.needs_torch_model)
    torch_only = [f for f in asked if specs[f].host.needs_torch_model]
    if not runnable:
        fit = ", ".join(formats.default_names(need_torch=False))
        raise UsageError(f"{name} is an ONNX file: only --format {fit} applies "
                         f"(--format {torch_only[0]} is written from a PyTorch model)")
    return runnable, torch_only, {f: specs[f] for f in runnable}


def _methods(config, torchless: bool, name: str, task: dict, formats: tuple[str, ...]):
    """(the methods that run, as (name, config type, given config) entries; the calibration data; skips)."""
    explicit = config.methods is not None
    entries = [method_entry(entry) for entry in (config.methods if explicit else DEFAULT_METHODS)]
    labelled = task.get("type") == "classification" and bool(task.get("dataset"))
    for method, config_type, _ in entries:
        if not config_type.trains:
            continue
        called = config_type.called(method)
        untrained = ",".join(m for m in DEFAULT_METHODS if not method_entry(m)[1].trains)
        if torchless:
            raise UsageError(f"{name} is an ONNX file: {called} needs the PyTorch model and its training data; "
                             f"choose --methods {untrained}")
        if not labelled:
            raise UsageError(f"{called} needs a model with a labelled training set (a zoo classification task); "
                             f"{name} has none: choose --methods {untrained}")
    calib = config.calib
    skipped = []
    needing = tuple(m for m, config_type, given in entries if _takes_plan_calib(config_type, given))
    if needing and calib is None:
        calib = default_calibration(task.get("dataset"))
        if calib is None:
            why = f"edgekit ships no calibration data for {name}"
            if explicit:
                raise UsageError(f"{'/'.join(needing)} int8 needs calibration data and {why}: pass --calib FOLDER "
                                 f"(.npy/.npz samples of its inputs), or drop {'/'.join(needing)} from --methods")
            entries = [entry for entry in entries if entry[0] not in needing]
            skipped.append(Skipped(tuple(f"int8-{m}-{fmt}" for m in needing for fmt in formats),
                                   f"{why}: pass --calib FOLDER (.npy/.npz samples of its inputs)"))
    return entries, calib, skipped
