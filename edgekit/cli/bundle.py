"""``edgekit bundle``: an export folder -> a self-contained device bundle folder + ``.tar.gz``."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from edgekit.cli.common import console, echo_json, handles_errors, progress_line
from edgekit.cli.options import TargetOpt
from edgekit.bundle.build import build_bundle, tarball_path
from edgekit.bundle.layout import read_bundle_json
from edgekit.formats.artifacts import load_manifest


@handles_errors
def bundle_command(
    export_dir: Path = typer.Argument(..., help="Export folder (from edgekit export) holding model.onnx and/or model.pt."),
    target: TargetOpt = None,
    out: Optional[Path] = typer.Option(None, "--out", "-o", help="Bundle folder (default: dist/TARGET); the .tar.gz is written beside it."),
    fmt: Optional[str] = typer.Option(None, "--format", help="onnx | torchscript | executorch: the one model to bundle (default: onnx when the export has it; executorch with --runtime native)."),
    runtime: str = typer.Option("python", "--runtime", help="python: the board installs numpy + the model's runtime with pip; native: edgekit-run, a C++ runner cross-compiled for the target's CPU (ExecuTorch .pte, or ONNX through ONNX Runtime's C library; no Python on the board; needs the cross compiler, apt-get install crossbuild-essential-arm64). A language model imported from GGUF is always bundled native."),
    wheels: bool = typer.Option(False, "--wheels", help="Download into wheels/ every wheel the board installs, for an offline board (needs network here): binary wheels of each manylinux tag the board's glibc accepts, and pure-Python ones; serve.py's too."),
    platform: Optional[str] = typer.Option(None, "--platform", help="The newest wheel platform tag the board accepts (default: the target's; manylinux_2_28_aarch64, glibc 2.28, for the Raspberry Pi targets); --wheels also takes the older tags that glibc runs, down to manylinux2014."),
    python_version: str = typer.Option("3.11", "--python-version", help="The board's Python version, for --wheels."),
    force: bool = typer.Option(False, "--force", help="Bundle a model made for another target anyway (recorded in bundle.json); replace --out even when it holds files edgekit did not write."),
    as_json: bool = typer.Option(False, "--json", help="Print bundle.json instead of a summary."),
) -> None:
    """Make a device bundle: model, manifest, reference data, runner, output check, pinned requirements.

    Writes the folder (--out) and OUT.tar.gz beside it; SHA256SUMS covers every file.
    """
    if out is None:
        _, manifest = load_manifest(export_dir, verify=False)
        out = Path("dist") / (target or manifest.target or "rpi4")

    folder = build_bundle(export_dir, target, out, fmt=fmt, wheels=wheels, force=force,
                          platform=platform, python_version=python_version, runtime=runtime,
                          progress=progress_line)
    info = read_bundle_json(folder)
    if as_json:
        echo_json(info)
    else:
        for line in summary(info, folder, tarball_path(folder)):
            console().print(line, highlight=False, markup=False)
    if info.get("override"):
        typer.echo(f"Warning: bundled for {info['target']} despite: {'; '.join(info['override']['mismatches'])}", err=True)


def register(app: typer.Typer) -> None:
    app.command("bundle")(bundle_command)


def _size(n: int) -> str:
    return f"{n / 1024:.1f} KB" if n < 1024 * 1024 else f"{n / (1024 * 1024):.1f} MB"


def summary(info: dict, folder: Path, archive: Path) -> list[str]:
    runtime = info["runtime"]
    lines = [
        f"Bundled {info['model']} ({info.get('variant') or info['format']}, {info['precision']}, "
        f"{_size(info['model_bytes'])}) for {info['target']} -> {folder}/ and {archive} ({_size(archive.stat().st_size)})",
    ]
    native = info.get("native")
    if native:
        lines.append(f"runtime: {native['runner']} ({native.get('runtime_label') or 'ExecuTorch ' + str(runtime['version'])}, "
                     f"native {native['arch']}"
                     f"{' ' + native['cpu'] if native.get('cpu') else ''}) + {len(native['libraries'])} libraries; "
                     f"no Python on the board; {_size(info['bytes_on_disk'])} on disk")
    else:
        lines.append(f"runtime: {runtime['name']}=={runtime['version']} for {info['python_platform']}, "
                     f"Python {info['python_version']}")
    check = info.get("host_check") or {}
    llm = info.get("llm")
    if llm:
        same = "the same ids" if check.get("tokens_equal") else "DIFFERENT ids"
        rss = check.get("peak_rss_mb")
        lines.append(f"check: {len(llm['prompt_ids'])}-token prompt {llm['prompt']!r} -> {llm['max_new_tokens']} greedy ids "
                     f"{llm['expected_text']!r}; edgekit-run on this host gives {same}"
                     + (f", peak RSS {rss:.0f} MiB (the board has {info['ram_mb']} MB)" if rss is not None else ""))
    elif check:
        top1 = check.get("top1_agreement")
        lines.append(
            f"host output check vs the float model: cosine {check['cosine']:.5f}, max |diff| {check['max_abs']:.4g}"
            + (f", top-1 agreement {top1 * 100:.2f}%" if top1 is not None else "")
        )
    wheels = info.get("wheels") or []
    if wheels:
        total = sum((folder / "wheels" / name).stat().st_size for name in wheels)
        lines.append(f"wheels: {len(wheels)} files ({_size(total)}) in {folder}/wheels")
    if llm:
        lines.append(f"next: edgekit verify {folder} --emulate, or copy {archive} to the board and run sh run.sh verify")
    else:
        lines.append(f"next: copy {archive} to the board, or: edgekit bench {folder} --host pi@raspberrypi.local")
    return lines
