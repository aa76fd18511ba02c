"""Upper bounds on numbers from flags: past them a value is a typo or an attack, never a setting.

Each check raises a ``UsageError`` naming the flag, the value and the allowed range, before any
work starts (a ``--timeout 1e300`` would otherwise overflow a timer thread, ``--seed 2**70``
torch's generator, ``--threads 100000`` the runtime's thread pool).
"""

from __future__ import annotations

import math
import os

from edgekit.core.errors import UsageError

THREADS_PER_CORE = 4  # oversubscription past this only measures the scheduler
MAX_SEED = 2**32 - 1  # numpy's legacy seeding and torch both take this range
MAX_TIMEOUT_S = 7 * 24 * 3600.0
MAX_RUNS = 10_000_000
MAX_TOKENS = 100_000
MAX_TOP_K = 1 << 21  # MODEL_SIZE_LIMITS' vocabulary: a runner's int32 never overflows
MIN_TEMPERATURE = 1e-3  # below this, logits / T overflow float32; 0 means greedy


def max_threads() -> int:
    return THREADS_PER_CORE * (os.cpu_count() or 1)


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def check_threads(value, flag: str = "threads"):
    if value is None:
        return None
    limit = max_threads()
    if not _is_int(value) or not 1 <= value <= limit:
        raise UsageError(f"{flag} must be an integer between 1 and {limit} ({THREADS_PER_CORE}x this host's cores), got {value!r}")
    return value


def check_seed(value, flag: str = "seed"):
    if value is None:
        return None
    if not _is_int(value) or not 0 <= value <= MAX_SEED:
        raise UsageError(f"{flag} must be an integer between 0 and {MAX_SEED}, got {value!r}")
    return value


def check_text(value, flag: str, optional: bool = False):
    """Text that every encoder downstream can take: a str of valid Unicode. Invalid UTF-8 in argv
    reaches Python as lone surrogates (surrogateescape), and JSON's ``\\ud800`` escapes decode to
    them too; tokenizers and writers then fail deep inside with an internal error."""
    if value is None and optional:
        return None
    if not isinstance(value, str):
        raise UsageError(f"{flag} must be text, got {type(value).__name__}")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        bad = value[exc.start]
        what = f"byte 0x{ord(bad) - 0xDC00:02x}" if 0xDC80 <= ord(bad) <= 0xDCFF else f"lone surrogate U+{ord(bad):04X}"
        raise UsageError(f"{flag} is not valid UTF-8 text ({what} at character {exc.start})") from None
    return value


def check_timeout(value, flag: str = "--timeout"):
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or not 0 < value <= MAX_TIMEOUT_S:
        raise UsageError(f"{flag} must be a positive number of seconds up to {MAX_TIMEOUT_S:g} (7 days), got {value!r}")
    return value


def check_runs(value, flag: str, low: int = 1):
    if not _is_int(value) or not low <= value <= MAX_RUNS:
        raise UsageError(f"{flag} must be an integer between {low} and {MAX_RUNS}, got {value!r}")
    return value


def check_sampling(max_tokens, temperature, top_k) -> None:
    if not _is_int(max_tokens) or not 1 <= max_tokens <= MAX_TOKENS:
        raise UsageError(f"max_tokens must be between 1 and {MAX_TOKENS}, got {max_tokens!r}")
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) or not math.isfinite(temperature) \
            or temperature < 0 or 0 < temperature < MIN_TEMPERATURE or temperature > 100:
        raise UsageError(f"temperature must be 0 (greedy) or between {MIN_TEMPERATURE:g} and 100, got {temperature!r}")
    if not _is_int(top_k) or not 0 <= top_k <= MAX_TOP_K:
        raise UsageError(f"top_k must be between 0 (no limit) and {MAX_TOP_K:,} (the largest vocabulary), got {top_k!r}")


# -- model sizes ------------------------------------------------------------------------------
# A zoo config (--set, a manifest's model.config) or a transformers config.json names sizes that
# are cheap to write and slow to build: a million layers of width 1 pass any memory estimate and
# take minutes to construct, module by module. Each size has a bound far above any real model
# (the largest published ones have ~128 layers, 128 heads, hidden 18,432, 256k vocabularies).
MODEL_SIZE_LIMITS = {
    "layers": 1024,
    "experts": 1024,
    "heads": 1024,
    "width": 1 << 16,  # hidden size, embedding width, channels, head dim
    "feed-forward size": 1 << 18,
    "vocabulary": 1 << 21,
    "sequence length": 1 << 20,
}
_SEQUENCE_KEYS = {"max_len", "n_ctx", "seq_length", "seq_len", "max_seq_len", "max_seq_length", "max_sequence_length",
                  "block_size", "window", "sliding_window", "context_length", "max_length"}
_FFN_KEYS = {"n_inner", "d_ff", "ffn_dim", "encoder_ffn_dim", "decoder_ffn_dim", "ffn_hidden_size", "ff_dim"}
_WIDTH_KEYS = {"width", "d_model", "n_embd", "d_kv", "dim", "channels", "embedding_size"}


def model_size_kind(key: str) -> str | None:
    """Which kind of model size a config key names ("layers", "heads", ...), or None."""
    name = key.lower()
    if "layer" in name:
        return "layers"
    if "expert" in name:
        return "experts"
    if "head" in name and "dim" not in name and "size" not in name:
        return "heads"
    if "vocab" in name:
        return "vocabulary"
    if "position" in name or name in _SEQUENCE_KEYS:
        return "sequence length"
    if "intermediate" in name or name in _FFN_KEYS:
        return "feed-forward size"
    if name in _WIDTH_KEYS or name.endswith(("hidden_size", "_dim", "embed_dim")):
        return "width"
    return None


def model_size_problem(key: str, value) -> str | None:
    """Why ``value`` is not a sane model size for ``key`` (None: it is, or ``key`` is no size)."""
    kind = model_size_kind(key)
    if kind is None or isinstance(value, bool) or not isinstance(value, int):
        return None
    limit = MODEL_SIZE_LIMITS[kind]
    if value > limit:
        return f"more {kind} than any model has (at most {limit:,})"
    return None


# -- config objects ---------------------------------------------------------------------------
def check_field_types(config) -> None:
    """Each field of the dataclass ``config`` holds a value of its declared type, or a UsageError
    names the field, the value and what it may be: ``TrainConfig(epochs="3")`` or
    ``DynamicConfig(formats="onnx")`` fail here, not later as a raw TypeError deep in a stage.

    Understood: ``bool``, ``int``, ``float`` (an int will do; its range is the config's to check), ``str``, ``Path`` (a str or
    any os.PathLike will do), ``tuple[X, ...]`` (a list will do, a str will not), ``dict[K, V]``,
    ``X | None``; anything else (``Any``, callables) is left to the config's own checks.
    """
    import dataclasses
    import typing

    hints = typing.get_type_hints(type(config))
    for item in dataclasses.fields(config):
        expected = hints.get(item.name)
        value = getattr(config, item.name)
        if expected is not None and not _conforms(value, expected):
            shown = repr(value)
            shown = shown if len(shown) <= 80 else shown[:77] + "..."
            raise UsageError(f"{type(config).__name__}.{item.name} must be {_describe(expected)}, "
                             f"got {shown} ({type(value).__name__})")


def _conforms(value, expected) -> bool:
    import types
    import typing
    from pathlib import Path

    origin, args = typing.get_origin(expected), typing.get_args(expected)
    if origin in (typing.Union, types.UnionType):
        return any(_conforms(value, arg) for arg in args)
    if expected is type(None):
        return value is None
    if expected is bool:
        return isinstance(value, bool)
    if expected is int:
        return _is_int(value)
    if expected is float:  # the range (finite, positive, ...) is the config's own check, with its own words
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if expected is str:
        return isinstance(value, str)
    if expected is Path:
        return isinstance(value, (str, os.PathLike))
    if origin is tuple:
        if not isinstance(value, (tuple, list)):
            return False
        if len(args) == 2 and args[1] is Ellipsis:
            return all(_conforms(v, args[0]) for v in value)
        return len(args) == len(value) and all(_conforms(v, a) for v, a in zip(value, args))
    if origin is dict:
        if not isinstance(value, dict):
            return False
        key, item = args if len(args) == 2 else (typing.Any, typing.Any)
        return all(_conforms(k, key) and _conforms(v, item) for k, v in value.items())
    return True  # Any, Callable, a class of the config's own: its own checks judge


def _describe(expected) -> str:
    import types
    import typing
    from pathlib import Path

    origin, args = typing.get_origin(expected), typing.get_args(expected)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_describe(arg) for arg in args)
    names = {type(None): "None", bool: "true or false (a bool)", int: "an integer", float: "a number",
             str: "a string", Path: "a path (str or Path)"}
    if expected in names:
        return names[expected]
    plural = {bool: "bools", int: "integers", float: "numbers", str: "strings", Path: "paths"}
    if origin is tuple:
        return f"a tuple (or list) of {plural.get(args[0], 'values') if args else 'values'}"
    if origin is dict:
        return "a dict" + (f" with {plural.get(args[0], 'typed')[:-1]} keys" if args else "")
    return getattr(expected, "__name__", str(expected))


# -- public functions' arguments --------------------------------------------------------------
def check_call(function, args: tuple, kwargs: dict, name: str | None = None, names: dict | None = None) -> None:
    """Each argument of a call to ``function`` holds a value of its annotated type (as
    ``check_field_types`` reads them, plus: a float must be finite, ``os.PathLike`` and other classes
    by ``isinstance``, ``list[X]``/``Iterable[X]``/``Mapping[K, V]``/``Callable``), or a UsageError
    names the function, the argument, the value and what it may be, before any work starts: the
    Python API's front door, so ``export(None, out)`` or ``quantize(..., force="yes")`` never reach a
    raw TypeError (or a silent truth test) deep in a stage."""
    import inspect
    import typing

    called = name or function.__name__
    signature = inspect.signature(function)
    try:
        bound = signature.bind(*args, **kwargs)
    except TypeError as exc:
        raise UsageError(f"{called}(): {exc}") from None
    try:
        hints = typing.get_type_hints(function, localns=names)  # names: those its module imports only for typing
    except Exception:  # noqa: BLE001 - an annotation this module cannot resolve is left to the stage
        hints = {}
    for arg, value in bound.arguments.items():
        if signature.parameters[arg].kind in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD):
            continue
        expected = hints.get(arg)
        if expected is not None and not _arg_conforms(value, expected):
            shown = repr(value)
            shown = shown if len(shown) <= 80 else shown[:77] + "..."
            raise UsageError(f"{called}() argument {arg} must be {_describe(expected)}, got {shown} ({type(value).__name__})")


def _arg_conforms(value, expected) -> bool:
    import collections.abc as abc
    import types
    import typing

    origin, args = typing.get_origin(expected), typing.get_args(expected)
    if origin in (typing.Union, types.UnionType):
        return any(_arg_conforms(value, arg) for arg in args)
    if expected is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if origin in (list, abc.Sequence, abc.Iterable, set, frozenset):
        if isinstance(value, (str, bytes, abc.Mapping)) or not isinstance(value, abc.Iterable):
            return False
        if origin is list and not isinstance(value, list):
            return False
        if args and isinstance(value, (list, tuple)):  # other iterables are not consumed here
            return all(_arg_conforms(item, args[0]) for item in value)
        return True
    if origin is abc.Mapping:
        if not isinstance(value, abc.Mapping):
            return False
        return len(args) != 2 or all(_arg_conforms(k, args[0]) and _arg_conforms(v, args[1]) for k, v in value.items())
    if origin is abc.Callable or expected is abc.Callable:
        return callable(value)
    if origin is tuple and isinstance(value, (tuple, list)) and len(args) == 2 and args[1] is Ellipsis:
        return all(_arg_conforms(item, args[0]) for item in value)
    if origin is None and isinstance(expected, type) and expected not in (bool, int, str, type(None)) \
            and expected.__module__ != "pathlib":
        try:
            return isinstance(value, expected)
        except TypeError:  # a Protocol that is not runtime-checkable
            return True
    return _conforms(value, expected)
