"""Sample text from a language model: greedy, temperature, top-k and top-p, seeded.

Two loops: ``iter_tokens`` re-reads a window each token (edgekit's own transformer-lm/lstm-lm and
their exported files), ``generate_cached`` runs a model that keeps its KV cache (a pretrained
Llama, ``edgekit.llm.cached.CachedLM``: the prompt once, then one decode per token). ``TextStream``
turns ids into text as they arrive: whole UTF-8 characters only, and stop strings cut out.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from edgekit.core.errors import InputFileError, UsageError
from edgekit.formats.artifacts import load_manifest, is_cached_family
from edgekit.core.bounds import check_sampling as check, check_seed, check_text, check_threads
from edgekit.core.threads import resolve_threads, target_of
from edgekit.llm.chat import build_messages, render_chat
from edgekit.llm.gguf.importer import is_gguf_source
from edgekit.llm.lm_runtime import check_language_model, load_language_model, load_tokenizer


@dataclass(frozen=True)
class Generated:
    prompt: str
    text: str  # the continuation only
    tokens: int
    seconds: float
    threads: int | None = None  # CPU threads the model ran on (edgekit.core.threads.resolve_threads)
    notes: tuple[str, ...] = ()
    prompt_tokens: int = 0
    stop: str = "max_tokens"  # why it ended: max_tokens, eos (a stop id), stop (a --stop string)
    first_token_s: float | None = None  # time to the first new token (the prefill), cached models
    chat: bool = False  # the prompt went through the model's chat template

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / max(self.seconds, 1e-9)


def sample_tokens(model, prompt_ids, max_tokens: int, temperature: float = 1.0, top_k: int = 0,
                  context: int | None = None, seed: int | None = None) -> list[int]:
    """Extend ``prompt_ids`` by ``max_tokens`` ids, re-reading the last ``context`` tokens each step.

    ``temperature`` 0 is greedy; ``top_k`` 0 samples from the whole vocabulary.
    """
    import torch

    device = next(model.parameters()).device
    model.eval()

    def step(window: list[int]):
        with torch.inference_mode():
            return model(torch.tensor([window], dtype=torch.long, device=device))[0, -1].float()

    return list(iter_tokens(step, prompt_ids, max_tokens, temperature, top_k, context, seed))


def iter_tokens(step, prompt_ids, max_tokens: int, temperature: float = 1.0, top_k: int = 0,
                context: int | None = None, seed: int | None = None, top_p: float = 1.0):
    """Yield ``max_tokens`` new ids one at a time; ``step(window)`` gives the next token's logits.

    ``step`` may be any runtime (torch module, TorchScript, ONNX Runtime: see
    ``edgekit.llm.lm_runtime``); it returns a 1-D float torch tensor.
    """
    import torch

    check_sampling(max_tokens, temperature, top_k, top_p)
    if len(prompt_ids) == 0:
        raise UsageError("the prompt is empty; give at least one character")
    generator = torch.Generator()
    generator.manual_seed(seed if seed is not None else torch.seed())
    ids = [int(i) for i in prompt_ids]
    for _ in range(max_tokens):
        window = ids[-context:] if context else ids
        ids.append(pick_token(step(window), temperature, top_k, top_p, generator))
        yield ids[-1]


def sampling_probs(logits, temperature: float, top_k: int = 0, top_p: float = 1.0):
    """The distribution a token is drawn from: ``softmax(logits / temperature)`` over the ``top_k``
    most likely ids (0: all), then over the smallest set of the most likely whose probability
    reaches ``top_p`` (1: all), renormalised. (Hugging Face's order: temperature, top-k, top-p.)"""
    import torch

    logits = logits.float().cpu() / temperature
    if top_k:
        kth = torch.topk(logits, min(top_k, logits.numel())).values[-1]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    probs = torch.softmax(logits, dim=-1)
    if top_p < 1.0:
        ordered, order = torch.sort(probs, descending=True)
        before = torch.cumsum(ordered, dim=0) - ordered  # mass of the ids more likely than each
        drop = torch.zeros_like(probs, dtype=torch.bool)
        drop[order] = before >= top_p  # the most likely id always stays (its "before" is 0)
        probs = probs.masked_fill(drop, 0.0)
        probs = probs / probs.sum()
    return probs


def pick_token(logits, temperature: float, top_k: int = 0, top_p: float = 1.0, generator=None) -> int:
    """Greedy (``temperature`` 0: the first id of the highest logit) or one draw from ``sampling_probs``."""
    import torch

    logits = logits.float().cpu()
    if not bool(torch.isfinite(logits).any()) or bool(torch.isnan(logits).any()) or bool(torch.isposinf(logits).any()):
        raise InputFileError("the model produced logits that are not finite numbers (NaN or infinity): its weights "
                         "or its program are damaged; re-import or re-export it")
    if temperature == 0:
        return int(logits.argmax())
    return int(torch.multinomial(sampling_probs(logits, temperature, top_k, top_p), 1, generator=generator))


def check_sampling(max_tokens: int, temperature: float, top_k: int, top_p: float = 1.0) -> None:
    import math


    check(max_tokens, temperature, top_k)
    if isinstance(top_p, bool) or not isinstance(top_p, (int, float)) or not math.isfinite(top_p) or not 0 < top_p <= 1:
        raise UsageError(f"top_p must be above 0 and at most 1 (1: no limit), got {top_p!r}")


def generate_text(artifact: str | Path, prompt: str, max_tokens: int = 100, temperature: float = 0.8,
                  top_k: int = 20, seed: int | None = None, device: str = "cpu", fmt: str | None = None,
                  threads: int | None = None, *, top_p: float | None = None, stop: tuple[str, ...] = (),
                  chat: bool | None = None, system: str | None = None, on_text=None,
                  context: int | None = None) -> Generated:
    """Continue ``prompt`` with the language model in an artifact: a checkpoint, or a quantized or
    exported one (any format in ``edgekit.formats``; ``fmt`` picks the file, default as in ``lm_runtime.format_order``).

    ``threads``: CPU threads, by the rule ``edgekit bench`` follows (``edgekit.core.threads``): explicit
    wins, else the artifact's target's count, else all cores, never every core of this host. A
    token is one small forward pass: torch's default of every core spin-waits between them (a
    transformer-lm on 2 cores: 12-14 tokens/s on both, 456 on one).

    ``top_p``: nucleus sampling (default: 0.95 for pretrained chat models, off for edgekit's own);
    ``stop``: strings that end the text (not included); ``on_text(piece)``: called with the text
    as it becomes final (streaming); the result's ``text`` is the same text. A pretrained model
    (``llama``, from ``edgekit import gguf:...``) runs through its KV cache: ``chat`` (default: when
    the artifact has a chat template) makes ``prompt`` the user's message, with ``system``; its
    end-of-turn ids stop it. ``artifact`` may be a ``gguf:`` source, built in memory
    (``context``: its cache length)."""
    import time


    check_sampling(max_tokens, temperature, top_k, 1.0 if top_p is None else top_p)  # before anything is loaded
    check_threads(threads, "--threads")
    check_seed(seed, "--seed")
    check_text(prompt, "the prompt")
    check_text(system, "--system", optional=True)
    stop = check_stops(stop)

    if is_gguf_source(artifact):
        from edgekit.llm.gguf.importer import generate_from_gguf

        if fmt not in (None, "checkpoint"):
            raise UsageError(f"a gguf: source runs as the float model (--format checkpoint), not {fmt!r}; "
                             "import it (edgekit import) to quantize or export it")
        threads, notes = resolve_threads(threads, None)
        text_side, open_lm, cache, where = generate_from_gguf(str(artifact), context, device, threads)
        return generate_llm(text_side, open_lm, cache, prompt, max_tokens, temperature, top_k,
                            0.95 if top_p is None else top_p, seed, chat, system, stop, on_text, threads, notes, where)
    if context is not None:
        raise UsageError("--context applies to gguf: sources (an artifact's cache length was set when it was imported)")
    folder, manifest = load_manifest(artifact)
    check_language_model(folder, manifest)

    if is_cached_family(manifest):
        from edgekit.llm.cached import open_cached
        from edgekit.llm.lm_runtime import load_llm_text

        threads, notes = resolve_threads(threads, target_of(manifest))
        context = manifest.model.get("config", {}).get("max_len")
        return generate_llm(load_llm_text(folder, manifest), lambda: open_cached(folder, manifest, fmt, threads, device),
                            context if isinstance(context, int) else None, prompt, max_tokens, temperature, top_k,
                            0.95 if top_p is None else top_p, seed, chat, system, stop, on_text, threads, notes,
                            str(folder))
    if chat or system is not None:
        raise UsageError(f"{folder} holds {manifest.model.get('name')}, which has no chat template; "
                         "--chat and --system apply to pretrained chat models")
    tokenizer = load_tokenizer(folder, manifest)
    threads, notes = resolve_threads(threads, target_of(manifest))
    lm = load_language_model(folder, manifest, fmt, device, threads)
    started = time.perf_counter()
    prompt_ids = tokenizer.encode(prompt).tolist()
    tokens = iter_tokens(lm.step, prompt_ids, max_tokens, temperature, top_k, lm.context, seed,
                         1.0 if top_p is None else top_p)
    if not stop and on_text is None:
        new = list(tokens)
        return Generated(prompt, tokenizer.decode(new), len(new), time.perf_counter() - started, threads, tuple(notes),
                         len(prompt_ids))
    new, text, by_string = _stream(tokens, lambda ids: tokenizer.decode(ids), stop, on_text)
    return Generated(prompt, text, len(new), time.perf_counter() - started, threads, tuple(notes), len(prompt_ids),
                     "stop" if by_string else "max_tokens")


MAX_STOPS = 16
MAX_STOP_CHARS = 256


def check_stops(stop) -> tuple[str, ...]:
    stops = tuple(stop or ())
    if len(stops) > MAX_STOPS or any(not isinstance(s, str) or not s or len(s) > MAX_STOP_CHARS for s in stops):
        raise UsageError(f"--stop takes up to {MAX_STOPS} non-empty strings of at most {MAX_STOP_CHARS} characters")
    for text in stops:
        check_text(text, "--stop")
    return stops


def generate_cached(lm, prompt_ids, max_tokens: int, temperature: float = 0.0, top_k: int = 0, top_p: float = 1.0,
                    stop_ids=(), seed: int | None = None):
    """Yield up to ``max_tokens`` new ids from a ``CachedLM``: the prompt is fed once (prefill),
    then each new id once (decode). A stop id ends it and is not yielded.

    Prompt and new tokens must fit the model's cache: past it, a UsageError before anything runs.
    """
    import torch

    check_sampling(max_tokens, temperature, top_k, top_p)
    ids = [int(i) for i in prompt_ids]
    if not ids:
        raise UsageError("the prompt is empty; give at least one character")
    check_fits(len(ids), max_tokens, lm.context)
    stops = {int(i) for i in stop_ids}
    generator = torch.Generator()
    generator.manual_seed(seed if seed is not None else torch.seed())
    lm.reset()
    logits = lm.feed(ids, 0)
    position = len(ids)
    for made in range(max_tokens):
        token = pick_token(logits, temperature, top_k, top_p, generator)
        if token in stops:
            return
        yield token
        if made + 1 < max_tokens:
            logits = lm.feed([token], position)
            position += 1


def check_fits(prompt_tokens: int, max_tokens: int, context: int) -> None:
    """Prompt + ``max_tokens`` within the cache, or the UsageError that says by how much not."""
    if prompt_tokens > context:
        raise UsageError(f"the prompt is {prompt_tokens:,} tokens, longer than this model's context of {context:,}")
    if prompt_tokens + max_tokens > context:
        raise UsageError(f"{prompt_tokens:,} prompt tokens + {max_tokens:,} new ones (--max-tokens) do not fit this "
                         f"model's context of {context:,} tokens; ask for at most {context - prompt_tokens:,}")


# A byte-fallback token (``<0x00>``) decodes to any control character; a damaged or hostile model
# picking such ids would put NULs and terminal escapes in a reply. Line breaks and tabs are text.
_CONTROLS = {c: None for c in (*range(0, 9), 11, 12, *range(14, 32), 127)}


class TextStream:
    """New ids in, printable text out: ``push(id)`` returns the text that is now final (a
    character whose UTF-8 bytes are not all there yet is held back, as is the start of a stop
    string), ``finish()`` the rest. ``stopped`` turns true when a stop string appears: the text
    before it is the last given out, the stop string itself never is."""

    def __init__(self, decode, stop_strings=()):
        self.decode = decode
        self.stops = tuple(s for s in stop_strings if s)
        self.ids: list[int] = []
        self.emitted = 0
        self.text = ""  # everything given out so far
        self.stopped = False

    def push(self, token: int) -> str:
        if self.stopped:
            return ""
        self.ids.append(int(token))
        full = self.decode(self.ids)
        cut = min((at for at in (full.find(s, max(0, self.emitted - len(s))) for s in self.stops) if at >= 0),
                  default=-1)
        if cut >= 0:
            self.stopped = True
            return self._emit(full, max(cut, self.emitted))
        safe = len(full)
        while safe > self.emitted and full[safe - 1] == "\ufffd":  # a character still missing bytes
            safe -= 1
        for stop in self.stops:  # the start of a stop string may be one: hold it back
            for k in range(min(len(stop) - 1, safe - self.emitted), 0, -1):
                if full[:safe].endswith(stop[:k]):
                    safe -= k
                    break
        return self._emit(full, safe)

    def finish(self) -> str:
        if self.stopped or not self.ids:
            return ""
        return self._emit(self.decode(self.ids), None)

    def _emit(self, full: str, upto: int | None) -> str:
        piece = full[self.emitted:upto].translate(_CONTROLS)
        self.emitted = len(full) if upto is None else upto
        self.text += piece
        return piece


def _stream(tokens, decode, stop_strings, on_text):
    """Run ``tokens`` (an id iterator) through a ``TextStream``; returns (ids, text, ended by a stop string)."""
    stream = TextStream(decode, stop_strings)
    ids = []
    for token in tokens:
        ids.append(token)
        piece = stream.push(token)
        if piece and on_text:
            on_text(piece)
        if stream.stopped:
            break
    piece = stream.finish()
    if piece and on_text:
        on_text(piece)
    return ids, stream.text, stream.stopped


def encode_prompt(text_side, prompt: str, chat: bool | None, system: str | None, where: str) -> list[int]:
    """The ids a pretrained model is fed for ``prompt``: through its chat template (the default when
    it has one; ``chat`` False: the text as it is, after BOS where the model adds one)."""
    use_chat = text_side.template is not None if chat is None else chat
    if use_chat and text_side.template is None:
        raise UsageError(f"{where} has no chat template; generate with --raw (the prompt as it is)")
    if system is not None and not use_chat:
        raise UsageError("--system is a chat message; it needs the chat template (drop --raw)")
    if use_chat:
        rendered = render_chat(text_side.template, build_messages(prompt, system), bos_token=text_side.bos or "",
                               eos_token=text_side.eos or "", where=where)
        prompt_ids = text_side.tokenizer.encode(rendered, add_special_tokens=False).ids
    else:
        prompt_ids = ([text_side.bos_id] if text_side.add_bos and text_side.bos_id is not None else []) \
            + text_side.tokenizer.encode(prompt, add_special_tokens=False).ids
    if not prompt_ids:
        raise UsageError("the prompt is empty; give at least one character")
    return [int(i) for i in prompt_ids]


def generate_llm(text_side, open_lm, context: int | None, prompt: str, max_tokens: int, temperature: float,
                 top_k: int, top_p: float, seed: int | None, chat: bool | None, system: str | None,
                 stop: tuple[str, ...], on_text, threads: int | None, notes, where: str) -> Generated:
    """``generate_text`` for a model with a KV cache (a pretrained Llama): chat template, stop ids
    and strings, streaming. ``text_side``: ``lm_runtime.LLMText``; ``open_lm()``: the ``CachedLM``,
    loaded only once the prompt is known to fit ``context``."""
    import time

    use_chat = text_side.template is not None if chat is None else chat
    prompt_ids = encode_prompt(text_side, prompt, use_chat, system, where)
    if context:
        check_fits(len(prompt_ids), max_tokens, context)  # before the model is loaded
    lm = open_lm()
    first: list[float] = []
    started = time.perf_counter()

    def timed():
        for token in generate_cached(lm, prompt_ids, max_tokens, temperature, top_k, top_p, text_side.stop_ids, seed):
            if not first:
                first.append(time.perf_counter() - started)
            yield token

    def decode(ids):
        return text_side.tokenizer.decode(ids, skip_special_tokens=True)

    ids, text, by_string = _stream(timed(), decode, stop, on_text)
    seconds = time.perf_counter() - started
    reason = "stop" if by_string else "max_tokens" if len(ids) >= max_tokens else "eos"
    return Generated(prompt, text, len(ids), seconds, threads, tuple(notes), len(prompt_ids), reason,
                     first[0] if first else None, use_chat)

