"""A pretrained language model with a KV cache (a Llama imported from GGUF) as a served model.

``edgekit serve`` on such an artifact (its checkpoint, or its ``.pte`` program with the cache
inside) serves text, not tensors: ``/v1/generate`` (a raw prompt) and the OpenAI-compatible
``/v1/chat/completions`` and ``/v1/models`` (``llm_routes``). The model runs through
``edgekit.llm.cached.CachedLM`` (the prompt once, then one decode per token), the artifact's
chat template renders the messages, its end-of-turn ids and the request's stop strings end the
reply (``edgekit.llm.generation.TextStream``: whole UTF-8 characters, stop strings never
given out).

One ``CachedLM`` has one cache: ``llm_routes`` runs one generation at a time (the others queue);
each generation feeds its prompt from position 0 (``generate_cached`` resets the cache first),
so nothing of the previous conversation is read.
"""

from __future__ import annotations

from pathlib import Path

from edgekit.core.errors import EdgekitError
from edgekit.llm.cached import open_cached
from edgekit.llm.chat import render_chat
from edgekit.llm.generation import TextStream, generate_cached, check_fits, check_sampling
from edgekit.llm.lm_runtime import load_llm_text

class LLMRequestError(ValueError):
    """A request this model cannot take (the client's: a 422), one line; ``param`` the field at fault."""

    def __init__(self, message: str, param: str | None = None):
        super().__init__(message)
        self.param = param


class Completion:
    """One generation as an iterator of text pieces (run it off the event loop, piece by piece);
    once it ends: ``finish_reason`` ("stop": an end-of-turn id or a stop string; "length":
    ``max_tokens`` reached) and ``completion_tokens`` (ids the model made, a stop id not counted)."""

    def __init__(self, engine: ServedLLM, prompt_ids: list[int], max_tokens: int, temperature: float, top_k: int,
                 top_p: float, seed: int | None, stops: tuple[str, ...]):
        self.prompt_tokens = len(prompt_ids)
        self.completion_tokens = 0
        self.finish_reason: str | None = None
        self.max_tokens = max_tokens
        self._engine = engine
        self._ids = generate_cached(engine.lm, prompt_ids, max_tokens, temperature, top_k, top_p,
                                    engine.text.stop_ids, seed)
        self._text = TextStream(engine.decode, stops)
        self._done = False

    def __iter__(self):
        return self

    def __next__(self) -> str:
        while not self._done:
            token = next(self._ids, None)
            if token is None:  # max_tokens made, or a stop id
                self._done = True
                self.finish_reason = "length" if self.completion_tokens >= self.max_tokens else "stop"
                piece = self._text.finish()
            else:
                self.completion_tokens += 1
                self._engine.tokens_generated += 1
                piece = self._text.push(token)
                if self._text.stopped:
                    self._done = True
                    self.finish_reason = "stop"
            if piece:
                return piece
        raise StopIteration

    def close(self) -> None:
        """Stop generating (the client left): no more tokens are computed."""
        self._done = True
        try:
            self._ids.close()
        except ValueError:  # a token is being computed on the inference thread: the flag stops it after that one
            pass


class ServedLLM:
    """The served model object of ``create_app`` for a cached language model: no ``/v1/predict``
    (``predicts`` false), ``llm`` (this object) for the text routes."""

    predicts = False

    def __init__(self, folder: Path, manifest, entry, threads: int | None):
        self.text = load_llm_text(folder, manifest)
        import dataclasses

        # Each generation feeds its prompt from position 0, which overwrites the cache there, and the
        # model never reads keys past the position it is at (``Llama.step``): a conversation never sees
        # the one before, with no reset. (A ``.pte``'s reset reloads the program: seconds per request.)
        self.lm = dataclasses.replace(open_cached(folder, manifest, entry.format, threads), reset_fn=lambda: None)
        self.context = int(self.lm.context)
        self.tokens_generated = 0
        source = manifest.model.get("source") if isinstance(manifest.model.get("source"), dict) else {}
        self.name = Path(folder).resolve().name[:200] or "model"  # the id clients send as "model" (any is taken)
        self.has_template = self.text.template is not None
        self.specs, self.outputs = [], []
        self.llm = self
        import torch

        self.summary = {
            "model": manifest.model.get("name"), "id": self.name, "task": manifest.task.get("type"),
            "source": str(source.get("name"))[:200] if source.get("name") else None,
            "format": entry.format, "path": entry.path, "precision": entry.precision, "bytes": entry.total_bytes,
            "sha256": entry.sha256, "inputs": [], "outputs": [], "runtime": f"torch {torch.__version__}",
            "context": self.context, "chat_template": self.has_template,
            "routes": ["/v1/generate", "/v1/chat/completions", "/v1/models"],
            "concurrency": "one generation at a time (one KV cache): further requests queue, "
                           "past --max-generations they get 503",
        }

    # -- what the routes call ---------------------------------------------------------------

    def encode_prompt(self, prompt: str) -> list[int]:
        """A raw prompt's ids (the BOS first when the model adds one)."""
        ids = self.text.tokenizer.encode(prompt, add_special_tokens=False).ids
        bos = [self.text.bos_id] if self.text.add_bos and self.text.bos_id is not None else []
        return bos + list(ids)

    def encode_chat(self, messages: list[dict]) -> list[int]:
        """The ids of ``messages`` rendered by the model's chat template (with the assistant's turn opened)."""
        if not self.has_template:
            raise LLMRequestError("this model has no chat template; use /v1/generate with a raw prompt")
        try:
            rendered = render_chat(self.text.template, messages, bos_token=self.text.bos or "",
                                   eos_token=self.text.eos or "", where="this model")
        except EdgekitError as exc:  # the template refused these messages, or failed on them
            raise LLMRequestError(_line(exc)) from None
        return list(self.text.tokenizer.encode(rendered, add_special_tokens=False).ids)

    def check(self, prompt_tokens: int, max_tokens: int | None, temperature, top_k, top_p, limit: int) -> int:
        """The request's ``max_tokens`` (by default all the context leaves, at most ``limit``),
        checked with the sampling values against the context; LLMRequestError names what is wrong."""
        if prompt_tokens < 1:
            raise LLMRequestError("the prompt encodes to no tokens")
        if prompt_tokens >= self.context:
            raise LLMRequestError(f"the prompt is {prompt_tokens:,} tokens; this model's context is {self.context:,} "
                                  "(prompt and reply must fit it)", "messages")
        if max_tokens is None:
            max_tokens = min(limit, self.context - prompt_tokens)
        elif max_tokens > limit:
            raise LLMRequestError(f'"max_tokens" must be within 1..{limit:,}, got {max_tokens}', "max_tokens")
        try:
            check_sampling(max_tokens, temperature, top_k, top_p)
            check_fits(prompt_tokens, max_tokens, self.context)
        except EdgekitError as exc:
            line = _line(exc).replace("(--max-tokens) ", "")
            raise LLMRequestError(line, next((k for k in ("max_tokens", "temperature", "top_k", "top_p")
                                              if line.startswith(k)), "max_tokens" if "new ones" in line else None)) from None
        return max_tokens

    def complete(self, prompt_ids: list[int], max_tokens: int, temperature: float, top_k: int, top_p: float,
                 seed: int | None, stops: tuple[str, ...]) -> Completion:
        return Completion(self, prompt_ids, max_tokens, temperature, top_k, top_p, seed, stops)

    def decode(self, ids: list[int]) -> str:
        return self.text.tokenizer.decode(ids, skip_special_tokens=True)

    def status(self) -> dict:
        return {"tokens_generated": self.tokens_generated}

    # -- the served-model protocol (the start-up probe and warm-up call) -----------------------

    def example_feed(self) -> dict:
        return {}

    def run(self, feed: dict) -> list:
        """The warm-up call: one token through the cache (what a request's prefill does)."""
        self.lm.feed([self.text.bos_id if self.text.bos_id is not None else 0], 0)
        return []


def _line(exc: BaseException) -> str:
    text = str(exc).strip()
    return (text.splitlines()[0] if text else type(exc).__name__)[:300]
