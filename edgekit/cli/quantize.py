"""``edgekit quantize``: int8 for a target, accuracy (or fidelity) measured for every file."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Optional

import typer

from edgekit.cli import registry_help, llm_program
from edgekit.cli.common import console, echo_json, handles_errors, progress_enabled, split_csv
from edgekit.cli.options import (
    DynamicAxesOpt,
    InputDtypeOpt,
    InputRangeOpt,
    InputShapeOpt,
    LLMKernelsOpt,
    JsonFlag,
    RandomInitOpt,
    StateDictOpt,
    TargetOpt,
    source_options as collect_source_options,
)
from edgekit.cli.describe import manifest_summary
from edgekit.core.errors import UsageError
from edgekit.fidelity.render import binding_text, evidence_lines, output_lines, verdict_text, worst
from edgekit.llm.artifact import METHODS, is_llm_method
from edgekit.quantize.api import quantize
from edgekit.quantize.each_format import failed_rows, partial_failure
from edgekit.quantize.progress import StepProgress


@handles_errors
def quantize_command(
    source: str = typer.Argument(
        ..., metavar="SOURCE", help="Float checkpoint artifact folder, model.onnx, package.module:factory, or hf:FOLDER "
                                    "(a save_pretrained folder: config.json + model.safetensors)."
    ),
    method: str = typer.Option("static", "--method", help="dynamic | static | qat, or a plug-in's method (an unknown name is refused with the registry's list); for a language model imported from GGUF: int4 | int8."),
    out: Path = typer.Option(..., "--out", "-o", help="Output artifact folder."),
    target: TargetOpt = "rpi4",
    calib: Optional[Path] = typer.Option(
        None, "--calib", metavar="PATH",
        help="Static calibration data: a folder/file of .npy/.npz arrays, a folder of images (JPEG/PNG; needs "
             "--calib-preprocess), or a .txt file, one text per line (the model's tokenizer). Default: the set "
             "edgekit ships for a zoo model."),
    calib_preprocess: Optional[str] = typer.Option(
        None, "--calib-preprocess", metavar="KEY=VALUE,...|TOML",
        help="How images become model inputs: resize=S|HxW (shorter side), crop=S|HxW (centre; default: the "
             "input's HxW), range=0:1, mean=R:G:B, std=R:G:B, color=rgb|bgr|gray, layout=nchw|nhwc, "
             "dtype=float32|float16|uint8, interpolation=bilinear; or a .toml file of those keys. "
             "E.g. resize=256,crop=224,mean=0.485:0.456:0.406,std=0.229:0.224:0.225."),
    tokenizer: Optional[Path] = typer.Option(
        None, "--tokenizer", metavar="FILE|FOLDER",
        help="Text calibration: the model's tokenizer.json (or its folder); an hf: folder brings its own. "
             "Sequence length: the input's fixed one, else each batch's longest row."),
    formats: Optional[str] = typer.Option(None, "--format", help="Comma-separated: torchscript, onnx (default: both; onnx for .onnx and hf: sources)."),
    calibrate_method: Optional[str] = typer.Option(None, "--calibrate-method", help="minmax | percentile | entropy | mse (ONNX path only: add --format onnx for a checkpoint)."),
    percentile: Optional[float] = typer.Option(None, "--percentile", help="Percentile calibration: share of values kept (default 99.99)."),
    calib_bins: Optional[int] = typer.Option(None, "--calib-bins", help="Histogram calibrations: bins per tensor (default 2048)."),
    calib_batch_size: Optional[int] = typer.Option(None, "--calib-batch-size", help="Samples per calibration batch."),
    calib_max_samples: Optional[int] = typer.Option(None, "--calib-max-samples", help="Use at most this many samples."),
    no_calib_cache: bool = typer.Option(False, "--no-calib-cache", help="Recalibrate even when cached ranges match."),
    activation_type: Optional[str] = typer.Option(None, "--activation-type", help="ONNX: uint8 | int8 (default: the target's recipe)."),
    weight_type: Optional[str] = typer.Option(None, "--weight-type", help="ONNX: int8 | uint8 (default: the target's recipe)."),
    per_channel: Optional[bool] = typer.Option(None, "--per-channel/--per-tensor", help="Weight scales per output channel (default: the target's recipe)."),
    reduce_range: Optional[bool] = typer.Option(None, "--reduce-range/--no-reduce-range", help="ONNX: 7-bit weights (default: from the host/target ISA)."),
    op_types: Optional[str] = typer.Option(None, "--op-types", help="ONNX static: quantize only these op types, e.g. MatMul,Gemm (default: all)."),
    exclude: Optional[list[str]] = typer.Option(None, "--exclude", metavar="LAYER", help="Keep this layer in float (ONNX node or torch module name; repeatable)."),
    max_drop: Optional[float] = typer.Option(None, "--max-drop", help="Accuracy budget in points: sensitive layers fall back to float until met."),
    auto: bool = typer.Option(False, "--auto", help="Try the target's candidate recipes; keep the fastest within the budget."),
    emulate: bool = typer.Option(True, "--emulate/--no-emulate", help="--auto: compare .pte and ONNX candidates by their cost on the target's core under QEMU (edgekit.estimate), not this host's timings."),
    fusion: Optional[str] = typer.Option(None, "--fusion", help="ONNX graph layout: no-skip-ln (default) | runtime | transformer (dynamic only)."),
    smooth: bool = typer.Option(False, "--smooth", help="ONNX static: SmoothQuant scale migration of outlier channels into the weights, alpha searched on the calibration data."),
    report: bool = typer.Option(False, "--report", help="Per-tensor int8 error table (SQNR, range, outliers), worst first; kept in the manifest."),
    eval_data: Optional[Path] = typer.Option(
        None, "--eval-data", metavar="PATH",
        help="Data the files are judged on (every output vs the float model): what --calib takes (arrays, images "
             "with --calib-preprocess, a .txt file). Default: a held-out part of --calib (all of it for dynamic), "
             "else synthetic inputs, labelled as no evidence of accuracy. A stateful model: each array file one stream."),
    require_eval_data: bool = typer.Option(False, "--require-eval-data", help="Refuse to judge on synthetic inputs (for CI): give --eval-data or --calib."),
    state: Optional[list[str]] = typer.Option(
        None, "--state", metavar="INPUT=OUTPUT",
        help="A state input and the output fed back into it, when their names do not pair them (h/hn, state/stateN "
             "are found); the files are judged on streams, each model feeding back its own state (repeatable)."),
    sample_axis: Optional[list[str]] = typer.Option(
        None, "--sample-axis", metavar="INPUT=AXIS",
        help="The axis of INPUT that counts samples, when it is not axis 0 and no dynamic batch name tells "
             "(a (T, N, C) sequence: x=1; negative counts from the end); --calib and --eval-data are split "
             "into samples along it (repeatable)."),
    output_kind: Optional[list[str]] = typer.Option(
        None, "--output-kind", metavar="OUTPUT=KIND",
        help="What an output is, when its values do not tell: scalar | classes | sequence | tensor (repeatable); "
             "decides the metric that binds (correlation, argmax agreement, per-timestep agreement, cosine)."),
    epochs: Optional[int] = typer.Option(None, "--qat-epochs", help="QAT: fine-tuning epochs (default 3)."),
    lr: Optional[float] = typer.Option(None, "--qat-lr", help="QAT: Adam learning rate (default 5e-4)."),
    input_shape: InputShapeOpt = None,
    input_dtype: InputDtypeOpt = None,
    dynamic_axes: DynamicAxesOpt = None,
    input_range: InputRangeOpt = None,
    state_dict: StateDictOpt = None,
    random_init: RandomInitOpt = False,
    group_size: int = typer.Option(32, "--group-size", help="--method int4: weights per int4 scale (a power of two >= 16 dividing the model's widths)."),
    eval_tokens: Optional[int] = typer.Option(None, "--eval-tokens", help="Language models: held-out tokens the perplexity is measured on (default 1024; 0: none)."),
    eval_text: Optional[Path] = typer.Option(None, "--eval-text", help="Language models: the held-out text (default: the long description shipped in torch's METADATA)."),
    kernels: LLMKernelsOpt = None,
    force: bool = typer.Option(False, "--force", help="Replace --out even when it holds files edgekit did not write (they are deleted)."),
    as_json: JsonFlag = False,
) -> None:
    """Quantize to int8 for a target (torch path -> TorchScript, ONNX Runtime path -> ONNX).

    Static calibration (also --auto's static recipes) reads --calib: .npy/.npz arrays of model-ready
    samples; a folder of images, each resized, centre-cropped, scaled to --calib-preprocess range,
    normalised (x - mean) / std and laid out as the input takes it; or a .txt file, one sample per
    line, tokenized with the model's tokenizer (an hf: folder's, or --tokenizer), token_type_ids 0.
    Without --calib a zoo model uses the set edgekit ships.
    """
    if is_llm_method(method) or llm_program.is_llm_artifact(source):
        if not is_llm_method(method):
            raise UsageError(f"{source} is a language model imported from GGUF: use --method {' or '.join(METHODS)}")
        llm_program.refuse_int8_options({
            "--calib": calib, "--calib-preprocess": calib_preprocess, "--tokenizer": tokenizer, "--format": formats,
            "--calibrate-method": calibrate_method, "--percentile": percentile, "--calib-bins": calib_bins,
            "--calib-batch-size": calib_batch_size, "--calib-max-samples": calib_max_samples,
            "--no-calib-cache": no_calib_cache, "--activation-type": activation_type, "--weight-type": weight_type,
            "--per-channel/--per-tensor": per_channel, "--reduce-range": reduce_range, "--op-types": op_types,
            "--exclude": exclude, "--max-drop": max_drop, "--auto": auto, "--fusion": fusion, "--smooth": smooth,
            "--report": report, "--eval-data": eval_data, "--require-eval-data": require_eval_data or None,
            "--output-kind": output_kind, "--state": state, "--sample-axis": sample_axis, "--qat-epochs": epochs, "--qat-lr": lr, "--input-shape": input_shape,
            "--input-dtype": input_dtype, "--dynamic-axes": dynamic_axes, "--input-range": input_range,
            "--state-dict": state_dict, "--random-init": random_init,
        }, f"--method {method} (a language model's .pte program)")
        llm_program.write(source, out, METHODS[method], "quantized", group_size=group_size, eval_tokens=eval_tokens,
                          eval_text=eval_text, threads=None, force=force, as_json=as_json, target=target,
                          kernels=kernels)
        return
    if eval_tokens is not None or eval_text is not None or group_size != 32 or kernels is not None:
        raise UsageError("--group-size, --kernels, --eval-tokens and --eval-text apply to language models imported "
                         "from GGUF")

    source_options = collect_source_options(input_shape, input_dtype, dynamic_axes, input_range, state_dict, random_init)
    fmt = tuple(split_csv(formats)) if formats is not None else None
    err = console(stderr=True)
    if auto:
        chosen_by_auto = (
            ("--method", method != "static" or None), ("--calibrate-method", calibrate_method),
            ("--percentile", percentile), ("--calib-bins", calib_bins), ("--calib-batch-size", calib_batch_size),
            ("--calib-max-samples", calib_max_samples), ("--no-calib-cache", no_calib_cache),
            ("--activation-type", activation_type), ("--weight-type", weight_type),
            ("--per-channel/--per-tensor", per_channel is not None or None),
            ("--reduce-range/--no-reduce-range", reduce_range is not None or None), ("--op-types", op_types),
            ("--exclude", exclude), ("--qat-epochs", epochs), ("--qat-lr", lr), ("--fusion", fusion), ("--smooth", smooth),
        )
        tuned = [name for name, value in chosen_by_auto if value]
        if tuned:
            raise UsageError(f"--auto chooses the recipe itself; drop {', '.join(tuned)}")
        from edgekit.quantize.search.auto import NoCandidateError, quantize_auto

        with _calibration_progress(err) as progress:
            try:
                folder, manifest, candidates = quantize_auto(
                    source, out, target, calib=calib, formats=fmt, max_drop=max_drop, progress=progress, force=force,
                    with_report=report, calib_preprocess=calib_preprocess, tokenizer=tokenizer, emulate=emulate,
                    eval_data=eval_data, require_eval_data=require_eval_data, output_kinds=output_kind,
                    state_pairs=state, sample_axes=sample_axis, **source_options
                )
            except NoCandidateError as exc:
                if not as_json:
                    console().print(render_candidates(exc.candidates, "Candidates (none within budget)", exc.bench_inputs))
                raise
        _warn(err, manifest)
        if as_json:
            _print_json(folder, manifest)
            return
        console().print(render_candidates(candidates, f"Candidates for {manifest.target}",
                                          (manifest.quantization or {}).get("bench_inputs")))
        chosen_on = ((manifest.quantization or {}).get("target_choice") or {}).get("basis")
        if chosen_on:
            console().print(f"Candidates compared on {manifest.target}: {chosen_on} (p50 ms: this host's)",
                            markup=False, highlight=False)
        render_files(manifest, f"Quantized (auto) for {manifest.target} -> {folder}")
        _render_reports(manifest)
        return

    from edgekit.quantize.search.budget import AccuracyBudgetError

    options = {
        "calib": calib, "formats": fmt, "calibrate_method": calibrate_method, "percentile": percentile,
        "calib_bins": calib_bins, "calib_batch_size": calib_batch_size, "calib_max_samples": calib_max_samples,
        "calib_cache": False if no_calib_cache else None, "activation_type": activation_type,
        "weight_type": weight_type, "per_channel": per_channel, "reduce_range": reduce_range,
        "exclude": tuple(exclude) if exclude else None, "epochs": epochs, "lr": lr,
        "op_types": tuple(split_csv(op_types)) if op_types else None, "fusion": fusion,
        "smooth": smooth or None, "calib_preprocess": calib_preprocess, "tokenizer": tokenizer,
        "eval_data": eval_data, "require_eval_data": require_eval_data, "output_kinds": output_kind, "state_pairs": state,
        "sample_axes": sample_axis,
    }
    with _calibration_progress(err) as progress:
        try:
            folder, manifest = quantize(source, method, out, target, max_drop=max_drop, progress=progress,
                                        force=force, with_report=report, **source_options, **options)
        except AccuracyBudgetError as exc:
            if not as_json:
                console().print(render_budget(exc.report.to_dict(), "Accuracy budget NOT met"))
            raise
    _warn(err, manifest)
    if as_json:
        _print_json(folder, manifest)
        fail_if_some_failed(manifest)
        return
    render_files(manifest, f"Quantized ({method}) for {manifest.target} -> {folder}")
    for report in (manifest.quantization or {}).get("budget", {}).get("files", []):
        if report.get("sensitivity"):  # layers had to fall back to float: show which and why
            console().print(render_budget(report, f"Accuracy budget met ({report['format']})"))
        else:
            console().print(f"Accuracy budget met ({report['format']}): {_budget_caption(report)}",
                            markup=False, highlight=False)
    _render_reports(manifest)
    fail_if_some_failed(manifest)


def fail_if_some_failed(manifest) -> None:
    """Exit 4 with one line when some requested formats failed (their rows say why)."""
    failed = failed_rows(manifest)
    error = partial_failure(failed, len(failed) + len(manifest.files))
    if error is not None:
        raise error


def _print_json(folder, manifest) -> None:
    echo_json(manifest_summary(folder, manifest))


def _warn(err, manifest) -> None:
    for line in (manifest.quantization or {}).get("warnings", []):
        err.print(f"Warning: {line}", style="yellow", markup=False, soft_wrap=True)  # one line, however long


@contextlib.contextmanager
def _calibration_progress(err):
    """Progress of the long steps (calibration, QAT epochs, --auto candidates, sensitivity analysis).

    On a terminal: one live bar, relabelled per step. Elsewhere (CI logs, pipes): one line per
    step (for stages of over 10 steps at most one every 2 s, plus the last). EDGEKIT_NO_PROGRESS=1
    silences it.
    """
    import os
    import time


    if os.environ.get("EDGEKIT_NO_PROGRESS"):
        yield None
        return
    if not progress_enabled():
        last: dict[str, float] = {}

        def plain(state) -> None:
            if not isinstance(state, StepProgress):
                return  # calibration batches: too many for a log; the stage lines frame them
            now = time.monotonic()
            final = state.total is not None and state.done >= state.total
            few = state.total is not None and state.total <= 10  # e.g. QAT epochs: every one is news
            if final or few or now - last.get(state.stage, -1e9) >= 2.0:
                last[state.stage] = now
                err.print(state.describe(), markup=False, highlight=False)

        yield plain
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TimeRemainingColumn(), console=err, transient=True) as bar:
        task = bar.add_task("calibrating samples", total=None)

        def report(state) -> None:
            if isinstance(state, StepProgress):
                label = state.describe().split(":")[0] if state.stage in ("qat", "sensitivity", "fallback") else state.describe()
                bar.update(task, description=label, completed=state.done, total=state.total)
                if state.stage == "qat" and state.detail:
                    err.print(state.describe(), markup=False, highlight=False)
            else:
                bar.update(task, description="calibrating samples", completed=state.samples, total=state.total)

        yield report


def render_files(manifest, title: str) -> None:
    """One row per file. Labelled models show accuracy and its drop in points; every quantized file
    leads its fidelity with the metric that binds (``edgekit/fidelity``) and says what it was
    measured on: figures from synthetic inputs are never shown as a verdict."""
    from rich.table import Table


    labelled = any(entry.metrics.get("accuracy") is not None or entry.metrics.get("float_accuracy") is not None
                   for entry in manifest.files)
    headers = ["file", "format", "precision", "size KB"]
    if labelled:
        headers += ["accuracy", "float acc", "drop pts"]
    headers += ["fidelity (binding metric)", "verdict", "cosine", "SQNR dB"]
    table = Table(*headers, title=title)
    for entry in manifest.files:
        acc, ref = entry.metrics.get("accuracy"), entry.metrics.get("float_accuracy")
        parity = entry.metrics.get("parity") or {}
        fidelity = entry.metrics.get("fidelity") or {}
        drop = entry.metrics.get("accuracy_drop_points") if acc is not None else None
        row = [" + ".join(entry.paths()), entry.format, entry.precision, f"{entry.total_bytes / 1024:.1f}"]
        if labelled:
            row += ["-" if acc is None else f"{acc:.4f}", "-" if ref is None else f"{ref:.4f}",
                    "-" if drop is None else f"{drop:.2f}"]
        cosine, sqnr = worst(fidelity, "cosine"), worst(fidelity, "sqnr_db")  # over every output
        cosine, sqnr = parity.get("cosine") if cosine is None else cosine, parity.get("sqnr_db") if sqnr is None else sqnr
        row += [binding_text(fidelity), verdict_text(fidelity), "-" if cosine is None else f"{cosine:.5f}",
                "-" if sqnr is None else f"{sqnr:.1f}"]
        table.add_row(*row)

    for failed in failed_rows(manifest):  # a format that failed: its reason, no file
        row = ["-", failed["format"], "FAILED", "-"] + (["-", "-", "-"] if labelled else [])
        table.add_row(*row, failed["reason"], f"failed ({failed['stage']})", "-", "-")
    lines = evidence_lines(manifest.files)
    if lines:
        table.caption = "\n".join(lines)
    console().print(table)
    for entry in manifest.files:
        for line in output_lines(entry.metrics.get("fidelity") or {}):
            console().print(f"  {entry.path}: {line}", markup=False, highlight=False, soft_wrap=True)


def _is_fidelity(report: dict) -> bool:
    return report.get("metric") not in (None, "accuracy")


def _budget_caption(report: dict) -> str:
    lat = report.get("latency_ms") or {}
    cost = (f"size {report['bytes_int8'] / 1024:.1f} KB -> {report['bytes_final'] / 1024:.1f} KB"
            + (f"; p50 {lat['int8']:.3f} ms -> {lat['final']:.3f} ms" if "int8" in lat else ""))
    budget = report["budget_points"]
    if not report.get("sensitivity"):  # nothing needed: the fully quantized file is within budget
        if _is_fidelity(report):
            return f"fidelity (cosine vs float) {report['int8_value']:.5f} >= {1 - budget / 100:.4f}, no layer kept in float"
        return f"drop {report['int8_drop_points']:.2f} points within the {budget:g}-point budget, no layer kept in float"
    if _is_fidelity(report):
        quality = (f"fidelity (cosine vs float) {report['int8_value']:.5f} -> {report['final_value']:.5f} "
                   f"(budget: cosine >= {1 - budget / 100:.4f})")
    else:
        quality = f"drop {report['int8_drop_points']:.2f} -> {report['final_drop_points']:.2f} points (budget {budget:g})"
    return f"{report['format']}: {quality}; {cost}"


def render_budget(report: dict, title: str):
    from rich.table import Table

    fidelity = _is_fidelity(report)
    table = Table("layer", "op", "cosine if kept float" if fidelity else "drop pts if kept float", "kept float",
                  title=title)
    fallback = set(report.get("float_layers", []))
    for entry in report.get("sensitivity", []):
        value = f"{1 - entry['drop_points'] / 100:.5f}" if fidelity else f"{entry['drop_points']:.2f}"
        table.add_row(entry["layer"], entry["op"], value, "yes" if entry["layer"] in fallback else "")
    table.caption = _budget_caption(report)
    return table


def _render_reports(manifest, rows: int = 15) -> None:
    for entry in manifest.files:
        found = entry.details.get("error_report")
        if found:
            console().print(render_report(found, f"int8 error per tensor, worst first ({entry.path})", rows))


def render_report(report: dict, title: str, rows: int = 15):
    from rich.table import Table

    table = Table("tensor", "kind", "read by", "range", "SQNR dB", "rel err", "SQNR dB so far", "crest",
                  "outlier ch", title=title)
    for r in report.get("worst", [])[:rows]:
        accum = r.get("accumulated_sqnr_db")
        table.add_row(
            r["tensor"][-56:], r["kind"][:3], r["op"], f"[{r['low']:.3g}, {r['high']:.3g}]", f"{r['sqnr_db']:.1f}",
            f"{r['rel_error']:.3f}", "-" if accum is None else f"{accum:.1f}", f"{r['crest']:.0f}",
            f"{r['outlier_channels']}/{r['channels']}",
        )
    table.caption = (f"{report.get('tensors', 0)} quantized activations, {report.get('weights', 0)} weights; "
                     f"median SQNR {report.get('median_sqnr_db')} dB; {len(report.get('below_20db', []))} below 20 dB. "
                     "SQNR: the tensor's own rounding error; so far: the int8 model vs float at that tensor "
                     "(all upstream error); crest: max|x| / RMS")
    return table


def render_candidates(candidates, title: str, bench_inputs: dict | None = None):
    from rich.table import Table

    table = Table("recipe", "format", "size KB", "metric", "value", "drop pts", "p50 ms", "in budget", "chosen", title=title)
    for c in candidates:
        accuracy = c.metric == "accuracy"  # else fidelity: the binding metric of its closest output says it all
        output = (c.fidelity or {}).get("output")
        table.add_row(
            c.name, c.format, f"{c.bytes / 1024:.1f}" if c.bytes else "-",
            {"accuracy": "accuracy", "cosine": "fidelity (cosine)"}.get(c.metric, c.metric or "-")
            + (f" ({output})" if output and not accuracy else ""),
            "-" if c.value is None else f"{c.value:.4f}",
            "-" if c.drop_points is None or not accuracy else f"{c.drop_points:.2f}",
            "-" if c.p50_ms is None else f"{c.p50_ms:.3f}",
            ("error: " + c.error) if c.error else ("skipped: " + c.skipped) if c.skipped else
            ("refused: " + c.refused) if c.refused else
            ("yes" if c.meets_budget else ("-" if c.method == "fp32" else
                                                   "slower than fp32" if c.slower_than_float else "no")),
            "*" if c.chosen else "",
        )
    if bench_inputs:
        table.caption = "timed at " + ", ".join(f"{k} {'x'.join(map(str, v))}" for k, v in bench_inputs.items())
    return table


def register(app: typer.Typer) -> None:
    app.command("quantize", cls=registry_help.QUANTIZE)(quantize_command)
