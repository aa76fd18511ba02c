"""``edgekit bundle``: an export folder -> a self-contained device bundle folder + ``.tar.gz``."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from edgekit.cli.common import console, echo_json, handles_errors
from edgekit.cli.options import TargetOpt


@handles_errors
def bundle_command(
    export_dir: Path = typer.Argument(..., help="Export folder (from edgekit export) holding model.onnx and/or model.pt."),
    target: TargetOpt = None,
    out: Optional[Path] = typer.Option(None, "--out", "-o", help="Bundle folder (default: dist/TARGET); the .tar.gz is written beside it."),
    fmt: Optional[str] = typer.Option(None, "--format", help="onnx | torchscript: the one model to bundle (default: onnx when the export has it)."),
    wheels: bool = typer.Option(False, "--wheels", help="Download the target platform's wheels into wheels/ (needs network) for offline install."),
    platform: Optional[str] = typer.Option(None, "--platform", help="Wheel platform tag (default: the target's, e.g. manylinux2014_aarch64)."),
    python_version: str = typer.Option("3.11", "--python-version", help="The board's Python version, for --wheels."),
    force: bool = typer.Option(False, "--force", help="Bundle a model made for another target anyway (recorded in bundle.json); replace --out even when it holds files edgekit did not write."),
    as_json: bool = typer.Option(False, "--json", help="Print bundle.json instead of a summary."),
) -> None:
    """Make a device bundle: model, manifest, reference data, runner, output check, pinned requirements.

    Writes the folder (--out) and OUT.tar.gz beside it; SHA256SUMS covers every file.
    """
    from edgekit.artifacts import load_manifest
    from edgekit.bundle.build import build_bundle, tarball_path
    from edgekit.bundle.layout import read_bundle_json

    if out is None:
        _, manifest = load_manifest(export_dir, verify=False)
        out = Path("dist") / (target or manifest.target or "rpi4")
    folder = build_bundle(export_dir, target, out, fmt=fmt, wheels=wheels, force=force,
                          platform=platform, python_version=python_version)
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
        f"runtime: {runtime['name']}=={runtime['version']} for {info['python_platform']}, Python {info['python_version']}",
    ]
    check = info.get("host_check") or {}
    if check:
        top1 = check.get("top1_agreement")
        lines.append(
            f"host output check vs the float model: cosine {check['cosine']:.5f}, max |diff| {check['max_abs']:.4g}"
            + (f", top-1 agreement {top1 * 100:.2f}%" if top1 is not None else "")
        )
    wheels = info.get("wheels") or []
    if wheels:
        total = sum((folder / "wheels" / name).stat().st_size for name in wheels)
        lines.append(f"wheels: {len(wheels)} files ({_size(total)}) in {folder}/wheels")
    lines.append(f"next: copy {archive} to the board, or: edgekit bench {folder} --host pi@raspberrypi.local")
    return lines
