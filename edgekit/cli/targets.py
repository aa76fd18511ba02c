"""``edgekit targets`` and ``edgekit models``: what can be named on the command line."""

from __future__ import annotations

import typer

from edgekit.cli.common import console, echo_json, handles_errors


@handles_errors
def targets_command(as_json: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """List the target device profiles."""
    from rich.table import Table

    from edgekit.targets import available_targets, load_target

    targets = [load_target(name) for name in available_targets()]
    if as_json:
        echo_json({t.name: {"arch": t.arch, "core": t.core, "ram_mb": t.ram_mb, "budgets": t.budgets} for t in targets})
        return
    table = Table("target", "cpu", "cores", "RAM MB", "engine", "ONNX int8", "budgets")
    for t in targets:
        q = t.onnx_quant
        table.add_row(
            t.name,
            t.core,
            str(t.cores),
            str(t.ram_mb),
            t.quantized_engine,
            f"{q.activation_type}/{q.weight_type}{' per-channel' if q.per_channel else ''}",
            ", ".join(f"{k}={v:g}" for k, v in t.budgets.items()),
        )
    console().print(table)


@handles_errors
def models_command() -> None:
    """List the zoo models."""
    from edgekit.models import get_spec, model_names

    for name in model_names():
        spec = get_spec(name)
        console().print(f"{name}  {spec.description}")


def register(app: typer.Typer) -> None:
    app.command("targets")(targets_command)
    app.command("models")(models_command)
