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

from edgekit.errors import InputFileError, UsageError
from edgekit.outputs import safe_text

MAX_TEMPLATE_BYTES = 256 << 10  # real ones are a few KB
MAX_RENDERED_CHARS = 4 << 20
ROLES = ("system", "user", "assistant", "tool")
TEMPLATE_FILE = "chat_template.jinja"


class _TemplateError(Exception):
    pass


def _environment():
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message):
        raise _TemplateError(str(message))

    def strftime_now(fmt):
        import datetime

        return datetime.datetime.now().strftime(str(fmt))

    def tojson(value, indent=None):
        import json

        return json.dumps(value, indent=indent, ensure_ascii=False)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"])
    env.filters["tojson"] = tojson
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


def check_template(template: str, where: str) -> None:
    """A template edgekit can render: within the size bound, valid Jinja, and it renders one user turn."""
    render_chat(template, [{"role": "user", "content": "Hello"}], where=where)


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
        text = compiled.render(messages=messages, bos_token=bos_token, eos_token=eos_token,
                               add_generation_prompt=add_generation_prompt)
    except _TemplateError as exc:
        raise InputFileError(f"the chat template of {where} refused these messages: "
                             f"{safe_text(' '.join(str(exc).split()))[:200]}") from None
    except (TemplateError, TypeError, ValueError, KeyError, AttributeError, IndexError, ZeroDivisionError,
            OverflowError) as exc:
        raise InputFileError(f"the chat template of {where} fails to render: "
                             f"{type(exc).__name__}: {safe_text(' '.join(str(exc).split()))[:200]}") from None
    except (RecursionError, MemoryError):
        raise InputFileError(f"the chat template of {where} fails to render (it recurses or grows without bound)") from None
    if len(text) > MAX_RENDERED_CHARS:
        raise InputFileError(f"the chat template of {where} renders {len(text):,} characters "
                             f"(at most {MAX_RENDERED_CHARS:,})")
    return text


def load_template(folder: Path, manifest) -> str | None:
    """The artifact's chat template (checked against its manifest checksum), or None."""
    from edgekit.artifacts import check_carried

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
