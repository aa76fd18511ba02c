"""A Jinja sandbox whose renders are bounded in time, memory and output size.

jinja2's ``ImmutableSandboxedEnvironment`` keeps a template away from Python's internals, but not
from the machine's resources: a ``recursive`` loop that calls ``loop()`` twice per item runs for
ever, nested ``range(100000)`` loops for hours, ``'x' * 1500000000`` allocates 1.5 GB and
``tojson(indent=300000000)`` renders gigabytes. A chat template comes from a downloaded file, so
every render here is bounded three ways:

- every operation that can amplify (``*``, ``**``, ``+``, ``%`` on strings; ``str.replace``,
  ``center``, ``ljust``/``rjust``, ``zfill``, ``expandtabs``, ``join``, ``format`` widths; the
  filters ``center``, ``indent``, ``wordwrap``, ``format``, ``replace``, ``join``, ``tojson``,
  ``pprint``, ``batch``/``slice`` counts) is checked *before* it runs, against ``MAX_VALUE_CHARS``;
- what a value prints as (``{{ }}``, ``~``, a block's or macro's output, any filter's arguments,
  ``format``/``%``/``translate`` results) is measured by walking it first: a list of 1,000
  references to one 4 MB string is 8 KB to make and 4 GB to print;
- a trace function on the rendering thread ends the render past ``deadline_s`` and when the
  process's resident memory has grown by more than ``MAX_GROWTH_BYTES`` since the render began
  (checked every few hundred events: cheap next to the render);
- the output is streamed and cut off past ``max_chars``.

Any of these raises ``RenderLimit`` with the reason; the caller turns it into one line.
"""

from __future__ import annotations

import re
import sys
import time

MAX_VALUE_CHARS = 4 << 20  # one string, list or number's digits inside a render
MAX_GROWTH_BYTES = 256 << 20
CHECK_EVERY = 256  # trace events between memory checks
_WIDTH = re.compile(r"%[-+ #0]*(\*|\d+)?(?:\.(\*|\d+))?")


class RenderLimit(Exception):
    """A render passed one of the bounds (time, memory, size)."""


_END = object()


def text_size(value, budget: int = MAX_VALUE_CHARS) -> tuple[int, int, int]:
    """(characters, items, depth) that ``str(value)`` or ``json.dumps`` would make, walked without
    making them; the walk stops once past ``budget`` characters. A list of 1,000 references to one
    4-million-character string costs 8 KB to make and 4 GB to print: its size is the walk's, not ``len``'s."""
    from jinja2.utils import Namespace

    chars = items = depth = 0
    stack = [iter((value,))]  # one iterator per open container: the walk holds no copy of a big list
    while stack and chars <= budget:
        item = next(stack[-1], _END)
        if item is _END:
            stack.pop()
            continue
        items += 1
        depth = max(depth, len(stack))
        if isinstance(item, (str, bytes)):
            chars += len(item) + 2
        elif isinstance(item, bool) or item is None:
            chars += 5
        elif isinstance(item, int):
            chars += int(item.bit_length() * 0.302) + 2
        elif isinstance(item, (list, tuple, set, frozenset, range)):
            chars += 2 + 2 * len(item)
            stack.append(iter(item))
        elif isinstance(item, dict):
            chars += 2 + 4 * len(item)
            stack.append(iter([member for pair in item.items() for member in pair]) if len(item) <= budget
                         else iter(()))
        elif isinstance(item, Namespace):
            stack.append(iter((object.__getattribute__(item, "_Namespace__attrs"),)))
        else:
            chars += 64
        if len(stack) > 512:  # deeper than any chat template's data; repr would recurse anyway
            chars = budget + 1
    return chars, items, depth


def check_text_size(value, what: str) -> None:
    if isinstance(value, str):
        _check_size(len(value), what)
    elif not isinstance(value, (int, float)) or isinstance(value, bool):
        _check_size(text_size(value)[0], what)


def _sized(value) -> int:
    return len(value) if isinstance(value, (str, bytes, list, tuple)) else 0


def _check_size(chars: int, what: str) -> None:
    if chars > MAX_VALUE_CHARS:
        raise RenderLimit(f"{what} would make a value of {chars:,} characters (at most {MAX_VALUE_CHARS:,})")


def _check_width(width, what: str) -> None:
    if isinstance(width, bool) or not isinstance(width, int):
        return
    _check_size(width, what)


def _check_format_string(fmt: str, what: str) -> None:
    for match in _WIDTH.finditer(fmt):
        for part in match.groups():
            if part == "*":
                raise RenderLimit(f"{what}: '*' widths are not allowed in a template")
            if part is not None and len(part) > 7:
                _check_size(int(part[:12]), what)
            elif part is not None:
                _check_size(int(part), what)
    if "{" not in fmt:
        return
    import string

    try:
        fields = list(string.Formatter().parse(fmt))
    except ValueError:
        return  # str.format itself refuses it
    for _, _, spec, _ in fields:
        if spec and "{" in spec:
            raise RenderLimit(f"{what}: nested fields in a format spec are not allowed in a template")
        for digits in re.findall(r"\d+", spec or ""):
            _check_size(int(digits[:12]), what)


def check_binop(operator: str, left, right) -> None:
    if operator == "*":
        for seq, count in ((left, right), (right, left)):
            if _sized(seq) or isinstance(seq, (str, list, tuple)):
                if isinstance(count, int) and not isinstance(count, bool):
                    _check_size(len(seq) * max(count, 0), "'*'")
    elif operator == "**":
        if isinstance(left, int) and isinstance(right, int) and not isinstance(right, bool) and right > 0:
            digits = abs(left).bit_length() * right * 0.302  # log10(2)
            _check_size(int(digits), "'**'")
    elif operator == "+":
        if _sized(left) and type(left) is type(right):
            _check_size(len(left) + len(right), "'+'")
    elif operator == "%" and isinstance(left, str):
        _check_size(len(left) + left.count("%") * text_size(right)[0], "'%' formatting")
        _check_format_string(left, "'%' formatting")


def check_call(obj, args, kwargs) -> None:
    """Refuse a str method call whose result would pass the size bound, before it runs."""
    owner = getattr(obj, "__self__", None)
    name = getattr(obj, "__name__", "")
    if isinstance(owner, str):
        if name in ("center", "ljust", "rjust", "zfill") and args:
            _check_width(args[0], f"str.{name}")
        elif name == "expandtabs":
            size = args[0] if args else kwargs.get("tabsize", 8)
            if isinstance(size, int):
                _check_size(owner.count("\t") * max(size, 0) + len(owner), "str.expandtabs")
        elif name == "replace" and len(args) >= 2 and isinstance(args[0], str) and isinstance(args[1], str):
            old, new = args[0], args[1]
            hits = len(owner) + 1 if old == "" else owner.count(old)
            _check_size(len(owner) + hits * max(len(new) - len(old), 0), "str.replace")
        elif name == "join" and args:
            _check_join(owner, args[0], "str.join")
        elif name in ("format", "format_map"):
            _check_size(len(owner) + owner.count("{") * text_size([list(args), kwargs])[0], f"str.{name}")
            _check_format_string(owner, f"str.{name}")
        elif name == "translate" and args and isinstance(args[0], dict):
            widest = max((len(v) for v in args[0].values() if isinstance(v, str)), default=1)
            _check_size(len(owner) * max(widest, 1), "str.translate")


def _check_join(sep: str, items, what: str) -> None:
    if isinstance(items, (list, tuple)):
        total = len(sep) * max(len(items) - 1, 0) + sum(len(i) if isinstance(i, str) else 32 for i in items)
        _check_size(total, what)


def bounded_filters(filters: dict) -> dict:
    """The built-in filters that can amplify, each checked before it runs."""
    import json

    originals = {name: filters[name] for name in ("center", "indent", "wordwrap", "format", "replace", "join")
                 if name in filters}

    def center(value, width=80):
        _check_width(width, "the center filter")
        return originals["center"](value, width)

    def indent(value, width=4, *args, **kwargs):
        text = str(value)
        if isinstance(width, int) and not isinstance(width, bool):
            _check_size((text.count("\n") + 1) * max(width, 0) + len(text), "the indent filter")
        elif isinstance(width, str):
            _check_size((text.count("\n") + 1) * len(width) + len(text), "the indent filter")
        return originals["indent"](value, width, *args, **kwargs)

    def wordwrap(environment, value, width=79, *args, **kwargs):
        text = str(value)
        _check_size(len(text) * 2, "the wordwrap filter")
        return originals["wordwrap"](environment, value, width, *args, **kwargs)

    def format_(value, *args, **kwargs):
        _check_size(len(str(value)) + str(value).count("%") * text_size([list(args), kwargs])[0], "the format filter")
        _check_format_string(str(value), "the format filter")
        return originals["format"](value, *args, **kwargs)

    def replace(eval_ctx, value, old, new, count=None):
        text, old, new = str(value), str(old), str(new)
        hits = len(text) + 1 if old == "" else text.count(old)
        _check_size(len(text) + hits * max(len(new) - len(old), 0), "the replace filter")
        return originals["replace"](eval_ctx, value, old, new, count)

    def join(eval_ctx, value, d="", attribute=None):
        items = list(value) if not isinstance(value, str) else value
        _check_size(len(items), "the join filter")
        _check_join(str(d), items if isinstance(items, list) else [], "the join filter")
        return originals["join"](eval_ctx, items, d, attribute)

    def tojson(value, indent=None):
        _check_width(indent, "tojson's indent")
        chars, items, depth = text_size(value)
        if isinstance(indent, int) and not isinstance(indent, bool):
            chars += items * (1 + max(indent, 0) * depth)
        elif isinstance(indent, str):
            chars += items * (1 + len(indent) * depth)
        _check_size(chars, "tojson")
        text = json.dumps(value, indent=indent, ensure_ascii=False)
        _check_size(len(text), "tojson")
        return text

    # the wrapped filters keep the pass-context markers jinja dispatches on
    wordwrap.jinja_pass_arg = originals["wordwrap"].jinja_pass_arg  # type: ignore[attr-defined]
    replace.jinja_pass_arg = originals["replace"].jinja_pass_arg  # type: ignore[attr-defined]
    join.jinja_pass_arg = originals["join"].jinja_pass_arg  # type: ignore[attr-defined]
    bounded = {"center": center, "indent": indent, "wordwrap": wordwrap, "format": format_, "replace": replace,
               "join": join, "tojson": tojson, "pprint": tojson}
    for name, count in (("batch", "linecount"), ("slice", "slices")):
        if name in filters:
            bounded[name] = _counted(filters[name], name)
    return {name: _checked_arguments(bounded.get(name, function), name) for name, function in {**filters, **bounded}.items()}


def _counted(function, name: str):
    def counted(value, count, *args, **kwargs):
        _check_width(count, f"the {name} filter's count")
        return function(value, count, *args, **kwargs)

    return counted


def _checked_arguments(function, name: str):
    """Any filter: its arguments' printed sizes within the bound (``string``, ``e``, ``sum``, ``list``
    ... all walk or print what they are given)."""
    passes = getattr(function, "jinja_pass_arg", None)

    def checked(*args, **kwargs):
        for value in args[1:] if passes is not None else args:
            check_text_size(value, f"the {name} filter's argument")
        for value in kwargs.values():
            check_text_size(value, f"the {name} filter's argument")
        return function(*args, **kwargs)

    if passes is not None:
        checked.jinja_pass_arg = passes  # type: ignore[attr-defined]
    return checked


def environment():
    """A bounded ``ImmutableSandboxedEnvironment`` (class made on first use: jinja2 is optional)."""
    from jinja2.compiler import CodeGenerator
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    class BoundedCodeGenerator(CodeGenerator):
        def visit_Concat(self, node, frame):  # '~' joins str() of each side: printed sizes checked first
            self.write("environment.bounded_str_join((")
            for arg in node.nodes:
                self.visit(arg, frame)
                self.write(", ")
            self.write("))")

    def bounded_concat(pieces) -> str:
        pieces = list(pieces)
        _check_size(sum(len(p) if isinstance(p, str) else text_size(p)[0] for p in pieces), "a block's output")
        return "".join(pieces)

    def bounded_str_join(values) -> str:
        _check_size(sum(len(v) if isinstance(v, str) else text_size(v)[0] for v in values), "'~'")
        return "".join(map(str, values))

    def finalize(value):
        check_text_size(value, "an output")
        return value

    class BoundedEnvironment(ImmutableSandboxedEnvironment):
        intercepted_binops = frozenset(["*", "**", "+", "%"])
        code_generator_class = BoundedCodeGenerator
        concat = staticmethod(bounded_concat)

        def call_binop(self, context, operator, left, right):
            check_binop(operator, left, right)
            return super().call_binop(context, operator, left, right)

        def wrap_str_format(self, value):
            wrapped = super().wrap_str_format(value)
            if wrapped is None:
                return None
            owner, name = value.__self__, value.__name__

            def checked(*args, **kwargs):
                check_call(getattr(owner, name), args, kwargs)
                return wrapped(*args, **kwargs)

            return checked

        def call(__self, __context, __obj, *args, **kwargs):  # noqa: N805 - jinja's own signature
            check_call(__obj, args, kwargs)
            result = super().call(__context, __obj, *args, **kwargs)
            if isinstance(result, range):
                _check_size(len(result), "range()")
            return result

    env = BoundedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"],
                             finalize=finalize)
    env.bounded_str_join = bounded_str_join
    env.globals.pop("lipsum", None)  # lorem ipsum of any length: no chat template needs it
    env.filters.update(bounded_filters(env.filters))
    return env


class _Watch:
    """The trace function: time and memory checked as the template's Python code runs."""

    def __init__(self, deadline_s: float) -> None:
        import psutil

        self.process = psutil.Process()
        self.deadline = time.monotonic() + deadline_s
        self.deadline_s = deadline_s
        self.rss_limit = self.process.memory_info().rss + MAX_GROWTH_BYTES
        self.events = 0

    def __call__(self, frame, event, arg):
        if event == "call" and frame.f_code.co_filename == __file__:
            return None  # the bounds' own checks are bounded: tracing them only slows them down
        self.events += 1
        if self.events % CHECK_EVERY == 0:
            if time.monotonic() > self.deadline:
                raise RenderLimit(f"rendering took longer than {self.deadline_s:g} s")
            if self.process.memory_info().rss > self.rss_limit:
                raise RenderLimit(f"rendering grew memory by over {MAX_GROWTH_BYTES >> 20} MB")
        return self


def render_bounded(compiled, variables: dict, *, deadline_s: float, max_chars: int) -> str:
    """``compiled.generate(**variables)`` joined, within the bounds (``RenderLimit`` past them)."""
    watch = _Watch(deadline_s)
    previous = sys.gettrace()
    pieces: list[str] = []
    total = 0
    sys.settrace(watch)
    try:
        for piece in compiled.generate(**variables):
            total += len(piece)
            if total > max_chars:
                raise RenderLimit(f"the rendered text passes {max_chars:,} characters")
            pieces.append(piece)
    finally:
        sys.settrace(previous)
    return "".join(pieces)
