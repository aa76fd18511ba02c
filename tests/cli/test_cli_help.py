"""Every command's --help reads well at 80 columns: every option name appears whole, no line is cut."""

from __future__ import annotations

import re

import click
import pytest
import typer
from typer.testing import CliRunner

from edgekit.cli.app import app

runner = CliRunner()


def _commands() -> list[tuple[list[str], click.Command]]:
    root = typer.main.get_command(app)
    found = [([], root)]
    ctx = click.Context(root)
    for name in root.list_commands(ctx):
        found.append(([name], root.get_command(ctx, name)))
    return found


COMMANDS = _commands()


def test_every_command_is_listed():
    names = {" ".join(path) for path, _ in COMMANDS}
    for expected in ("pipeline", "train", "quantize", "export", "bundle", "verify", "bench", "gate", "info",
                     "targets", "models", "cache"):
        assert expected in names


@pytest.mark.parametrize("path,command", COMMANDS, ids=[" ".join(p) or "edgekit" for p, _ in COMMANDS])
def test_help_at_80_columns_shows_every_option_whole(path, command):
    result = runner.invoke(app, [*path, "--help"], env={"COLUMNS": "80", "TERMINAL_WIDTH": "80"})
    assert result.exit_code == 0, result.output
    text = result.stdout
    assert "…" not in text  # nothing truncated with an ellipsis
    too_wide = [line for line in text.splitlines() if len(line) > 80]
    assert not too_wide, too_wide
    for param in command.params:
        for name in [*param.opts, *getattr(param, "secondary_opts", [])]:
            if not name.startswith("-"):
                continue
            assert re.search(rf"(?<![\w-]){re.escape(name)}(?![\w-])", text), f"{name} not shown whole:\n{text}"
    if path:
        assert command.help and command.help.split("\n")[0].split(".")[0] in " ".join(text.split())


def test_target_short_form_everywhere():
    """-t means --target in every command that takes a target."""
    for path, command in COMMANDS:
        for param in command.params:
            if "--target" in getattr(param, "opts", []):
                assert "-t" in param.opts, f"{' '.join(path)}: --target without -t"
