"""``edgekit targets`` and ``edgekit models``: what can be named on the command line."""

from __future__ import annotations

import typer

from edgekit.cli.common import console, echo_json, handles_errors
from edgekit.cli.options import JsonFlag
from edgekit.core.targets import available_targets, load_target
from edgekit.models import get_spec, model_names


@handles_errors
def targets_command(as_json: JsonFlag = False) -> None:
    """List the target device profiles."""
    from rich.table import Table


    targets = [load_target(name) for name in available_targets()]
    if as_json:
        echo_json({t.name: {"arch": t.arch, "core": t.core, "cores": t.cores, "ram_mb": t.ram_mb,
                            "quantized_engine": t.quantized_engine, "budgets": t.budgets} for t in targets})
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
def models_command(as_json: JsonFlag = False) -> None:
    """List the zoo models."""
    specs = {name: get_spec(name) for name in model_names()}
    if as_json:
        echo_json({name: {"description": spec.description, "task": spec.task, "config": spec.default_config,
                          "inputs": [i.to_dict() for i in spec.input_spec(spec.default_config)],
                          "outputs": list(spec.outputs)} for name, spec in specs.items()})
        return
    for name, spec in specs.items():
        console().print(f"{name}  {spec.description}", markup=False, highlight=False)


def register(app: typer.Typer) -> None:
    app.command("targets")(targets_command)
    app.command("models")(models_command)
