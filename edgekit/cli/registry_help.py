"""``--method``/``--format`` help written from the registries (plug-ins included), when help is shown.

A command registered with ``cls=registry_help.command(...)`` replaces the help of the named
options just before its help is printed: listing the registries loads every format module,
route module and plug-in, which a command that is only run need not pay for.
"""

from __future__ import annotations

from typing import Callable

from typer.core import TyperCommand
from edgekit import formats as table
from edgekit.quantize import registry, routes
from edgekit.quantize.registry import formats_for, get_method, method_names, methods_for


def methods() -> str:
    """The registered methods: name (precision; the formats it writes)."""
    listed = []
    for name in method_names():
        entry = get_method(name)
        writes = "its own handler" if entry.handler is not None else ", ".join(formats_for(entry.config_type))
        listed.append(f"{name} ({entry.config_type.precision}: {writes})")
    return "; ".join(listed)


def formats(with_methods: bool = False) -> str:
    """The format table in order, with what this host lacks (and, for quantize, the methods each takes)."""
    listed = []
    for name in table.names():
        entry = table.get(name)
        notes = [f"takes {'/'.join(methods_for(name)) or 'no method'}"] if with_methods else []
        if not entry.available():
            notes.append(f"needs edgekit-ml[{entry.host.extra}]")
        listed.append(f"{name} ({', '.join(notes)})" if notes else name)
    return ", ".join(listed)


def command(helps: dict[str, Callable[[], str]]) -> type[TyperCommand]:
    """A command class whose options named in ``helps`` (by flag, e.g. "--method") get their help
    from ``helps[flag]()`` when the help is printed."""

    class RegistryHelpCommand(TyperCommand):
        def format_help(self, ctx, formatter) -> None:
            for param in self.params:
                for flag in getattr(param, "opts", ()):
                    if flag in helps:
                        param.help = _written(flag, helps[flag], param.help)
            super().format_help(ctx, formatter)

    return RegistryHelpCommand


def _written(flag: str, write: Callable[[], str], given: str | None) -> str | None:
    """``write()``; when that fails (a plug-in that does not load), the built-in names with the
    reason the plug-ins are left out. Help never fails: at worst the option's own help stays."""
    try:
        return write()
    except Exception as exc:  # noqa: BLE001 - a broken plug-in must not take --help down with it
        from edgekit.core.errors import first_line

        why = first_line(exc, 200)
    try:
        builtin = _builtin_methods() if flag in ("--method", "--methods") else _builtin_formats()
    except Exception:  # noqa: BLE001
        return given
    what = "One of, built in" if flag == "--method" else "Comma-separated, built in"
    return f"{what}: {builtin} (plug-ins not listed: {why})."


def _builtin_formats() -> str:
    """The formats edgekit ships, in table order, no plug-in loaded."""
    import importlib


    entries = [importlib.import_module(f"{table.__name__}.{name}").FORMAT for name in table._builtin_modules()]
    return ", ".join(entry.name for entry in sorted(entries, key=lambda entry: entry.host.table_order))


def _builtin_methods() -> str:
    """The methods edgekit's own route modules register, no plug-in loaded."""
    import importlib
    import pkgutil


    for found in pkgutil.iter_modules(routes.__path__):
        importlib.import_module(f"{routes.__name__}.{found.name}")
    return ", ".join(sorted(name for name, entry in registry._METHODS.items()
                            if getattr(entry.config_type, "__module__", "").startswith("edgekit.")))


def _defaults() -> str:
    return ", ".join(table.default_names()) or "none installed"


def _available() -> str:
    return ", ".join(table.available_names())


QUANTIZE = command({
    "--method": lambda: (f"A registered method (precision: the formats it writes): {methods()}. An unknown name is "
                         "refused with this list. For a language model imported from GGUF: int4 | int8."),
    "--format": lambda: (f"Comma-separated, from the format table: {formats(with_methods=True)}. Default: the "
                         f"default formats ({_defaults()}) the method writes; for .onnx and hf: sources, those "
                         "written without a PyTorch model."),
})
EXPORT = command({
    "--format": lambda: (f"Comma-separated, from the format table: {formats()}. Default: {_defaults()}; for a "
                         "quantized artifact, the formats it holds."),
})
PIPELINE = command({
    "--methods": lambda: (f"Comma-separated methods: {methods()} (default: dynamic,static; a format a method has no "
                          "route to is a skipped row; static is skipped, and said, when there is no calibration "
                          "data; asked for, it needs --calib)."),
    "--format": lambda: f"Comma-separated formats: {formats()} (default: every one this host can write: {_available()}).",
})
