"""``edgekit info``: what an artifact or bundle holds (model, target, recipe, files, accuracy, provenance)."""

from __future__ import annotations

from pathlib import Path

import typer

from edgekit.cli.common import console, echo_json, handles_errors
from edgekit.cli.options import JsonFlag
from edgekit.cli.describe import describe


@handles_errors
def info_command(
    artifact: Path = typer.Argument(..., metavar="ARTIFACT",
                                    help="Artifact folder (checkpoint, quantized, export), a model file in one, or a bundle folder."),
    verify: bool = typer.Option(False, "--verify", help="Also check every model file against its recorded SHA-256."),
    as_json: JsonFlag = False,
) -> None:
    """Summarise an artifact's manifest: model, target, recipe, files and sizes, accuracy, provenance."""
    summary = describe(artifact, verify=verify)
    if as_json:
        echo_json(summary)
        return
    for line in render(summary):
        console().print(line, markup=False, highlight=False)


def render(s: dict) -> list[str]:
    if s.get("type") == "gguf":
        return [f"{s['path']}: GGUF version {s['version']} file, {s['tensors']} tensors", *_render_llm(s["language_model"])]
    what = f"bundle ({s['kind']} artifact inside)" if s.get("type") == "bundle" else f"{s['kind']} artifact"
    lines = [f"{s['path']}: {what} of {s['model']}" + (f" for {s['target']}" if s.get("target") else "")]
    if s.get("task"):
        lines.append(f"task: {s['task']}")
    recipe = s.get("recipe") or {}
    if recipe.get("method"):
        config = recipe.get("config") or {}
        shown = ", ".join(f"{k}={v}" for k, v in sorted(config.items()) if v not in (None, (), [], {}) and k != "calib")
        lines.append(f"recipe: {recipe['method']}" + (f" ({shown})" if shown else "")
                     + (f", sha256 {recipe['recipe_sha256'][:12]}" if recipe.get("recipe_sha256") else ""))
        calibration = recipe.get("calibration") or {}
        if calibration.get("source"):
            lines.append(f"calibration: {calibration['source']}, {calibration.get('samples', '?')} samples")
    if s.get("language_model"):
        lines += _render_llm(s["language_model"])
    lines.append(f"files ({_size(s['total_bytes'])} in all):")
    for f in s["files"]:
        lines.append(f"  {f['path']}  {f['format']} {f['precision']}  {_size(f['bytes'])}  {_quality(f)}")
    metrics = s.get("metrics") or {}
    shown = {k: v for k, v in metrics.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
    if shown:
        lines.append("metrics: " + ", ".join(f"{k} {v:.4g}" for k, v in sorted(shown.items())))
    bundle = s.get("bundle")
    if bundle:
        runtime = bundle.get("runtime") or {}
        if bundle.get("kind") == "native":
            lines.append(f"bundle: {runtime.get('name')} {runtime.get('version')}, "
                         f"{_size(bundle['folder_bytes'])} on disk; the board needs {bundle['board_needs']}")
        else:
            lines.append(f"bundle: {runtime.get('name')}=={runtime.get('version')} for {bundle.get('python_platform')}, "
                         f"Python {bundle.get('python_version')}, {_size(bundle['folder_bytes'])} on disk; "
                         f"the board needs {bundle['board_needs']}")
        check = bundle.get("host_check") or {}
        if "cosine" in check:
            lines.append(f"host output check vs float: cosine {check['cosine']:.5f}")
    prov = s.get("provenance") or {}
    versions = prov.get("versions") or {}
    lines.append(f"created {prov.get('created') or '?'} with " + ", ".join(f"{k} {v}" for k, v in versions.items()))
    parent = prov.get("parent") or {}
    if parent.get("path"):
        lines.append(f"made from: {parent.get('kind')} {parent['path']}")
    if s.get("verified"):
        lines.append("checksums: every model file matches its manifest")
    return lines


def _render_llm(m: dict) -> list[str]:
    params = f"{m['parameters'] / 1e6:.1f} M parameters, " if m.get("parameters") else ""
    own = f" (the model's own: {m['model_context']:,})" if m.get("model_context") and m["model_context"] != m.get("context") else ""
    lines = [f"language model: {m.get('architecture')}, {params}{m.get('layers')} layers, {m.get('heads')} heads "
             f"({m.get('kv_heads')} key/value), width {m.get('dim')}, vocabulary {m.get('vocabulary'):,}, "
             f"context {m.get('context'):,} tokens{own}",
             f"chat template: {'yes' if m.get('chat_template') else 'none'}"]
    gguf = m.get("gguf") or {}
    if gguf:
        types = ", ".join(f"{k} x{v}" for k, v in (gguf.get("quant_types") or {}).items())
        lines.append(f"from GGUF {gguf.get('file')} ({_size(gguf.get('bytes'))}; tensor types {types})"
                     + (f", sha256 {gguf['sha256'][:12]}" if gguf.get("sha256") else ""))
    return lines


def _quality(f: dict) -> str:
    if f.get("accuracy") is not None:
        drop = f.get("accuracy_drop_points")
        return f"accuracy {f['accuracy'] * 100:.2f}%" + (f" (drop {drop:.2f} pts)" if drop is not None else "")
    fidelity = f.get("fidelity") or {}
    if fidelity.get("headline"):  # the metric that binds, and what it was measured on
        from edgekit.fidelity.render import binding_text, verdict_text

        return f"fidelity: {binding_text(fidelity)}, {verdict_text(fidelity)}"
    if "cosine" in fidelity:
        return f"fidelity: cosine {fidelity['cosine']:.5f} vs float"
    return ""


def _size(n) -> str:
    if n is None:
        return "?"
    return f"{n / 1024:.1f} KB" if n < 1024 * 1024 else f"{n / (1024 * 1024):.1f} MB"


def register(app: typer.Typer) -> None:
    app.command("info")(info_command)
