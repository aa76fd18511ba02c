"""Chat templates: a model's own Jinja template turns messages into the prompt it was tuned on.

Rendered as Hugging Face ``transformers`` renders them (``apply_chat_template``): jinja2's
``ImmutableSandboxedEnvironment`` with ``trim_blocks``/``lstrip_blocks``, the ``messages`` list of
``{"role", "content"}``, ``add_generation_prompt=True``, ``bos_token``/``eos_token``, and the
helpers templates call (``raise_exception``, ``strftime_now``, ``tojson``). A template comes from
a file someone else wrote: the sandbox keeps it away from Python's internals, its size and the
size of what it renders are bounded, and any failure is one line.
"""

from __future__ import annotations

from pathlib import Path

from edgekit.core.errors import InputFileError, UsageError
from edgekit.llm.template_sandbox import RenderLimit, render_bounded, environment
from edgekit.core.outputs import safe_text
from edgekit.formats.artifacts import check_carried

MAX_TEMPLATE_BYTES = 256 << 10  # real ones are a few KB
MAX_RENDERED_CHARS = 4 << 20
ROLES = ("system", "user", "assistant", "tool")
TEMPLATE_FILE = "chat_template.jinja"


RENDER_DEADLINE_S = 2.0  # real templates render in milliseconds, on a Pi too


class _TemplateError(Exception):
    pass


class _Refused(InputFileError):
    """The template's own raise_exception: it refuses these messages (not a fault of the template)."""


def _environment():
    def raise_exception(message):
        raise _TemplateError(str(message))

    def strftime_now(fmt):
        import datetime

        return datetime.datetime.now().strftime(str(fmt)[:256])

    env = environment()
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def _compile(template: str, where: str):
    from jinja2 import TemplateError

    if not isinstance(template, str):
        raise InputFileError(f"the chat template of {where} is not text")
    if len(template.encode("utf-8", "surrogatepass")) > MAX_TEMPLATE_BYTES:
        raise InputFileError(f"the chat template of {where} is {len(template):,} characters "
                             f"(at most {MAX_TEMPLATE_BYTES:,} bytes)")
    try:
        return _environment().from_string(template)
    except TemplateError as exc:
        raise InputFileError(f"the chat template of {where} is not a valid Jinja template: "
                             f"{safe_text(' '.join(str(exc).split()))[:200]}") from None
    except RecursionError:
        raise InputFileError(f"the chat template of {where} nests too deeply") from None


# What a template is tried on before it is accepted: one user turn must render; a longer conversation
# must stay within the render bounds (a template may refuse it, e.g. one that takes no system turn).
REPRESENTATIVE = (
    {"role": "system", "content": "You are a helpful assistant. Answer briefly."},
    {"role": "user", "content": "Hello! What can you do?"},
    {"role": "assistant", "content": "I can answer questions, summarise text and help with code."},
    {"role": "user", "content": "Write a haiku about a Raspberry Pi, then explain it in two sentences."},
)


def check_template(template: str, where: str) -> None:
    """A template edgekit can render: within the size bound, valid Jinja, it renders one user turn,
    and a representative conversation renders within the time, memory and size bounds."""
    render_chat(template, [{"role": "user", "content": "Hello"}], where=where)
    for messages in (list(REPRESENTATIVE), list(REPRESENTATIVE[1:])):
        try:
            render_chat(template, messages, where=where)
        except _Refused:
            continue


def build_messages(prompt: str, system: str | None = None) -> list[dict]:
    messages = [{"role": "system", "content": system}] if system else []
    return messages + [{"role": "user", "content": prompt}]


def render_chat(template: str, messages: list[dict], *, bos_token: str = "", eos_token: str = "",
                add_generation_prompt: bool = True, where: str = "the model") -> str:
    """The prompt text ``template`` makes of ``messages`` (InputFileError when the template fails)."""
    from jinja2 import TemplateError

    for message in messages:
        if not isinstance(message, dict) or message.get("role") not in ROLES or not isinstance(message.get("content"), str):
            raise UsageError(f"a chat message is {{'role': one of {', '.join(ROLES)}, 'content': text}}")
    compiled = _compile(template, where)
    try:
        text = render_bounded(compiled, {"messages": messages, "bos_token": bos_token, "eos_token": eos_token,
                                         "add_generation_prompt": add_generation_prompt},
                              deadline_s=RENDER_DEADLINE_S, max_chars=MAX_RENDERED_CHARS)
    except RenderLimit as exc:
        raise InputFileError(f"the chat template of {where} fails to render within edgekit's bounds: {exc}") from None
    except _TemplateError as exc:
        raise _Refused(f"the chat template of {where} refused these messages: "
                       f"{safe_text(' '.join(str(exc).split()))[:200]}") from None
    except (TemplateError, TypeError, ValueError, KeyError, AttributeError, IndexError, ZeroDivisionError,
            OverflowError) as exc:
        raise InputFileError(f"the chat template of {where} fails to render: "
                             f"{type(exc).__name__}: {safe_text(' '.join(str(exc).split()))[:200]}") from None
    except (RecursionError, MemoryError):
        raise InputFileError(f"the chat template of {where} fails to render (it recurses or grows without bound)") from None
    return text


def load_template(folder: Path, manifest) -> str | None:
    """The artifact's chat template (checked against its manifest checksum), or None."""
    path = Path(folder) / TEMPLATE_FILE
    if not path.is_file():
        return None
    check_carried(Path(folder), manifest, TEMPLATE_FILE)
    if path.stat().st_size > MAX_TEMPLATE_BYTES:
        raise InputFileError(f"{path} is {path.stat().st_size:,} bytes (a chat template is at most {MAX_TEMPLATE_BYTES:,})")
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise InputFileError(f"{path} is not UTF-8 text") from None
