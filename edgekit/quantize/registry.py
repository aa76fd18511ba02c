"""The quantize registry: methods by name (their config types), routes by (config type, format).

torchao's shape: the config object is the only thing passed, and its type finds the code. A
method is a config class decorated with ``@method``; a route is a function decorated with
``@route(ConfigType, "format")`` in ``edgekit/quantize/routes/`` (one module per format, found by
listing that folder) or in a plug-in format's own module. A route is
``(QuantJob, config) -> list[Produced]``; a route registered for a config class also serves its
subclasses. The same module lists its format's layers for ``--max-drop`` (``@layer_lister``).
What a method needs (calibration data, labelled training data, ...) and what its files hold
(``precision``: int8, int4, fp16, ...) are traits of its config class (``QuantConfig``), never a
test of its name. A format takes the methods its routes serve (``methods_for``): adding a format
or a method never asks another one to change.
"""

from __future__ import annotations

import dataclasses
import importlib
import pkgutil
import re
from dataclasses import dataclass
from typing import Any, Callable, ClassVar

from edgekit.core.errors import UsageError, unknown_name
from edgekit.core.plugins import load_plugins
from edgekit.quantize import routes


class QuantConfig:
    """The base of every method's config (a frozen dataclass); the traits below are class-level."""

    label: ClassVar[str] = ""  # what messages call the method ("" : --method NAME)
    precision: ClassVar[str] = "int8"  # what its files hold (int8, int4, fp16, ...): manifests, tables, parity floors
    calibrated: ClassVar[bool] = False  # activation ranges from calibration data (--calib)
    trains: ClassVar[bool] = False  # fine-tunes the torch model on its labelled training data
    run_time_activations: ClassVar[bool] = False  # activations quantized as the model runs (torch: linears only)

    @classmethod
    def called(cls, name: str) -> str:
        return cls.label or f"--method {name}"

    @classmethod
    def keeps_layers_float(cls) -> bool:
        """Whether the method takes ``exclude`` (``--exclude``, ``--max-drop``)."""
        return "exclude" in getattr(cls, "__dataclass_fields__", {})


Handler = Callable[[Any, Any], list]


@dataclass(frozen=True)
class Method:
    name: str
    config_type: type
    handler: Handler | None = None  # (QuantJob, config) -> list[Produced]; None: the config's routes, per format
    summary: str = ""

    def run(self, job, config) -> list:
        return (self.handler or run_routes)(job, config)


ENTRY_POINTS = "edgekit.quantize_routes"  # plug-in modules of methods and routes (a format's, a method's)
_METHODS: dict[str, Method] = {}
_ROUTES: dict[tuple[type, str], Handler] = {}
_LAYER_LISTERS: dict[str, Handler] = {}
_LOADED: list[bool] = []


def _same(one: Any, other: Any) -> bool:
    """The same function or class, perhaps from its module imported again."""
    return one is other or (getattr(one, "__module__", None), getattr(one, "__qualname__", None)) == (
        getattr(other, "__module__", None), getattr(other, "__qualname__", None))


_PRECISION = re.compile(r"[a-z][a-z0-9]{0,15}")


def _check_name(kind: str, name: Any) -> None:
    if not isinstance(name, str) or not name.strip() or len(name) > 40 or not name.isprintable():
        raise UsageError(f"a quantize plug-in's {kind} name {str(name)[:40]!r} is not a short printable name")


def register_method(entry: Method) -> Method:
    """Add a method; garbage (not a Method, a config that is not a class, a handler that is not
    callable) or a name another method has is refused in one line."""
    if type(entry) is not Method:
        raise UsageError(f"register_method() takes an edgekit Method, not a {type(entry).__name__}")
    _check_name("method", entry.name)
    if not isinstance(entry.config_type, type):
        raise UsageError(f"method {entry.name!r} cannot be registered: its config {entry.config_type!r} is not a class")
    if entry.handler is not None and not callable(entry.handler):
        raise UsageError(f"method {entry.name!r} cannot be registered: its handler is not callable")
    # a name another method has is refused for that first, whatever else is wrong with the entry
    other = _METHODS.get(entry.name)
    if other is not None and not _same(other.config_type, entry.config_type):
        raise UsageError(f"method {entry.name!r} cannot be registered: the name is already "
                         f"{other.config_type.__module__}.{other.config_type.__qualname__}'s")
    found = getattr(entry.config_type, "precision", None)
    if not isinstance(found, str) or not _PRECISION.fullmatch(found) or found == "fp32":
        raise UsageError(f"method {entry.name!r} cannot be registered: its config's precision {found!r} is not a "
                         "lowercase label other than fp32 (int8, int4, fp16, ...)")
    _METHODS[entry.name] = entry
    return entry


def method(name: str, summary: str = ""):
    """Class decorator: the config class is the method ``name`` (its routes do the work)."""
    def register(config_type: type) -> type:
        register_method(Method(name, config_type, None, summary))
        return config_type
    return register


def route(config_type: type, fmt: str):
    """Function decorator: ``fmt``'s files for ``config_type`` (and its subclasses) come from it."""
    if not isinstance(config_type, type):
        raise UsageError(f"a quantize route's config {config_type!r} is not a class")
    _check_name("format", fmt)

    def register(function: Handler) -> Handler:
        if not callable(function):
            raise UsageError(f"the {fmt!r} route of {config_type.__name__} is not a function")
        other = _ROUTES.get((config_type, fmt))
        if other is not None and not _same(other, function):
            raise UsageError(f"the {fmt!r} route of {config_type.__name__} cannot be registered: "
                             f"{other.__module__}.{other.__qualname__} is already that route")
        _ROUTES[(config_type, fmt)] = function
        return function
    return register


def layer_lister(fmt: str):
    """Function decorator: ``(QuantJob, config) -> [(layer, op)]``, the weighted layers of ``fmt``'s
    int8 file that ``--max-drop`` may keep in float, named as its routes' ``exclude`` takes them."""
    _check_name("format", fmt)

    def register(function: Handler) -> Handler:
        if not callable(function):
            raise UsageError(f"the {fmt!r} layer lister is not a function")
        _LAYER_LISTERS[fmt] = function
        return function
    return register


def layers_for(fmt: str) -> Handler:
    """``fmt``'s layer lister; a format whose routes register none is a one-line UsageError."""
    _load_builtin()
    if fmt not in _LAYER_LISTERS:
        raise UsageError(f"--max-drop cannot keep layers of --format {fmt} in float: its quantize routes "
                         f"list no layers (@layer_lister({fmt!r}))")
    return _LAYER_LISTERS[fmt]


def listed_formats() -> list[str]:
    """The formats whose routes list their layers for ``--max-drop`` (``@layer_lister``), by name."""
    _load_builtin()
    return sorted(_LAYER_LISTERS)


def _load_builtin() -> None:
    # always before a lookup: a method or route a user registered first must not keep the built-in ones out
    if _LOADED:
        return

    for found in pkgutil.iter_modules(routes.__path__):
        importlib.import_module(f"{routes.__name__}.{found.name}")

    load_plugins(ENTRY_POINTS, "quantize")
    _LOADED.append(True)


def method_names() -> list[str]:
    _load_builtin()
    return sorted(_METHODS)


def get_method(name: str) -> Method:
    _load_builtin()
    if name not in _METHODS:
        raise unknown_name("quantization method", name, _METHODS)
    return _METHODS[name]


def make_config(name: str, **options: Any):
    """Build the method's config from options; options the method does not take are an error."""
    entry = get_method(name)
    known = {f.name for f in dataclasses.fields(entry.config_type)}
    given = {k: v for k, v in options.items() if v is not None}
    extra = sorted(set(given) - known)
    if extra:
        raise UsageError(f"method {name!r} does not take option(s): {', '.join(extra)}")
    return entry.config_type(**given)


def calibrated(name: str) -> bool:
    """Whether the method ``name`` reads calibration data."""
    return get_method(name).config_type.calibrated


def trains(name: str) -> bool:
    """Whether the method ``name`` fine-tunes on the model's labelled training data."""
    return get_method(name).config_type.trains


def method_for_config(config: Any) -> Method:
    """The registered method whose config type ``config`` is an instance of (exactly that type:
    a subclass is a different method, registered on its own)."""
    _load_builtin()
    for entry in _METHODS.values():
        if type(config) is entry.config_type:
            return entry
    names = ", ".join(f"{m.config_type.__name__} ({m.name})" for m in sorted(_METHODS.values(), key=lambda m: m.name))
    got = f"the class {config.__name__} (call it: {config.__name__}(...))" if isinstance(config, type) \
        else f"{type(config).__name__} {' '.join(repr(config).split())[:80]}"
    raise UsageError(f"not a quantization config: {got}; give one of {names}, or a method name")


def precision(name: str) -> str:
    """What the files of the method ``name`` hold (int8, int4, fp16, ...)."""
    return get_method(name).config_type.precision


def formats_for(config_type: type) -> list[str]:
    """The formats ``config_type`` (or a class it derives from) has a route to, by name."""
    _load_builtin()
    return sorted({fmt for (cls, fmt) in _ROUTES if issubclass(config_type, cls)})


def methods_for(fmt: str) -> list[str]:
    """The methods that write ``fmt``: what the format takes (its routes declare it)."""
    _load_builtin()
    return [name for name, entry in sorted(_METHODS.items())
            if entry.handler is None and fmt in formats_for(entry.config_type)]


def route_for(config_type: type, fmt: str) -> Handler:
    _load_builtin()
    for cls in config_type.__mro__:
        if (cls, fmt) in _ROUTES:
            return _ROUTES[(cls, fmt)]
    served = formats_for(config_type)
    raise UsageError(f"{config_type.__name__} has no route to --format {fmt}; it writes: {', '.join(served) or 'none'}")


def run_routes(job, config) -> list:
    """Each requested format's route, in order. Each gets the whole config: ``--exclude`` names
    are checked against every requested format."""
    produced = []
    for fmt in config.formats:
        produced.extend(route_for(type(config), fmt)(job, config))
    return produced
