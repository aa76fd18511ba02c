"""The routes of a served pretrained language model (``edgekit.llm.serving.ServedLLM``), shaped as
llama.cpp's server and Ollama shape them, so the ``openai`` client and curl work unchanged:

    POST /v1/chat/completions  {"model", "messages": [{"role", "content"}], "max_tokens", "temperature",
                               "top_p", "top_k" (extension), "seed", "stop", "stream", "stream_options"}
                               -> a chat.completion; with "stream": true, server-sent
                               ``data: {chat.completion.chunk}`` events, then ``data: [DONE]``
    GET  /v1/models            the OpenAI model list (this one model)
    POST /v1/generate          {"prompt", "max_tokens", "temperature", "top_k", "top_p", "seed", "stop",
                               "stream"}: a raw prompt continued (no chat template), edgekit's shape

The model has one KV cache: one generation runs at a time, the others wait for it (up to the
server's ``max_generations`` running or waiting; past that 503 + Retry-After). A bad body is a
4xx with a one-line message (400: not JSON; 422: a value out of range, a prompt that does not fit
the context, a message the template refuses) and the server goes on; a client that leaves stops
its generation at the next token.

Defaults as ``edgekit generate``: temperature 0.8, top_k 20, top_p 0.95, max_tokens all that the
context leaves (at most the server's ``max_new_tokens``).

Standalone: fastapi/starlette and this package's standalone modules only (the model is duck-typed).
"""

from __future__ import annotations

import asyncio
import json
import math
import time
import uuid

from fastapi import Request
from fastapi.responses import JSONResponse, StreamingResponse
from starlette.requests import ClientDisconnect

from edgekit.core.bounds import MAX_SEED

from .inputs import InputError, parse_json

ROLES = ("system", "user", "assistant")
MAX_MESSAGES = 512
MAX_STOPS = 16
MAX_STOP_CHARS = 256
DEFAULTS = {"temperature": 0.8, "top_k": 20, "top_p": 0.95}
_DONE = object()


def add_llm_routes(app, llm, settings, batcher, state: dict, *, first_line, overloaded, read_body) -> None:
    """Register the routes on ``app`` (before the generic /v1/generate, which they replace);
    ``first_line``, ``overloaded`` and ``read_body`` are the app's own helpers (passed in: this
    module is imported by the app, never the other way round)."""

    lock = asyncio.Lock()  # one KV cache: one generation at a time; asyncio.Lock wakes waiters in order
    created = int(time.time())

    @app.get("/v1/models")
    async def models():
        return {"object": "list", "data": [{"id": llm.name, "object": "model", "created": created, "owned_by": "edgekit"}]}

    async def prepare(request: Request, chat: bool):
        """(the request's values, prompt ids, max_tokens) or an InputError."""
        try:
            body = await read_body(request, settings.max_body_bytes)
        except ClientDisconnect:
            raise InputError(400, "the client disconnected") from None
        doc = parse_object(body)
        params = sampling_params(doc)
        if chat:
            messages = chat_messages(doc.get("messages"), settings.max_prompt_chars)
            encode, what = llm.encode_chat, messages
        else:
            prompt = doc.get("prompt")
            if not isinstance(prompt, str) or not prompt:
                raise InputError(422, 'the body needs a non-empty "prompt" string', field="prompt")
            if len(prompt) > settings.max_prompt_chars:
                raise InputError(422, f'"prompt" is {len(prompt):,} characters; the limit is '
                                      f'{settings.max_prompt_chars:,}', field="prompt")
            encode, what = llm.encode_prompt, prompt
        try:  # the template and the tokenizer off the event loop (a long prompt takes milliseconds)
            ids = await asyncio.to_thread(encode, what)
            max_tokens = llm.check(len(ids), params["max_tokens"], params["temperature"], params["top_k"],
                                   params["top_p"], settings.max_new_tokens)
        except ValueError as exc:
            param = getattr(exc, "param", None)
            param = "prompt" if param == "messages" and not chat else param
            raise InputError(422, first_line(exc), **({"field": param} if param else {})) from None
        return params, ids, max_tokens

    async def pieces_of(completion, request: Request):
        """The completion's text pieces, each computed on the inference thread; ends early when the
        client has gone (no further token is computed)."""
        while True:
            if await request.is_disconnected():
                return
            piece = await batcher.call_in_thread(next, completion, _DONE)
            if piece is _DONE:
                return
            yield piece

    async def run_whole(params, ids, max_tokens, request):
        completion = llm.complete(ids, max_tokens, params["temperature"], params["top_k"], params["top_p"],
                                  params["seed"], params["stop"])
        try:
            async with lock:
                text = "".join([piece async for piece in pieces_of(completion, request)])
        finally:
            completion.close()
        return completion, text

    def admit():
        if state["generations"] >= settings.max_generations:
            return overloaded(f"{settings.max_generations} generations are running or waiting", settings.retry_after_s)
        state["generations"] += 1
        return None

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request):
        try:
            params, ids, max_tokens = await prepare(request, chat=True)
        except InputError as exc:
            return openai_error(exc.status, exc.detail["error"], exc.detail.get("field"))
        refused = admit()
        if refused is not None:
            return refused
        ident, made = f"chatcmpl-{uuid.uuid4().hex[:24]}", int(time.time())
        if params["stream"]:
            return StreamingResponse(chat_events(params, ids, max_tokens, request, ident, made),
                                     media_type="text/event-stream", headers={"Cache-Control": "no-cache"})
        try:
            completion, text = await run_whole(params, ids, max_tokens, request)
        except Exception as exc:  # noqa: BLE001 - the runtime failed on an input the checks allowed
            return openai_error(500, f"generation failed: {first_line(exc)}", None, "server_error")
        finally:
            state["generations"] -= 1
        return {"id": ident, "object": "chat.completion", "created": made, "model": llm.name,
                "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                             "finish_reason": completion.finish_reason or "stop"}],
                "usage": usage(completion)}

    async def chat_events(params, ids, max_tokens, request, ident, made):
        completion = llm.complete(ids, max_tokens, params["temperature"], params["top_k"], params["top_p"],
                                  params["seed"], params["stop"])

        def chunk(delta: dict, finish=None, **extra) -> str:
            doc = {"id": ident, "object": "chat.completion.chunk", "created": made, "model": llm.name,
                   "choices": [{"index": 0, "delta": delta, "finish_reason": finish}], **extra}
            return f"data: {json.dumps(doc)}\n\n"

        try:
            async with lock:
                yield chunk({"role": "assistant", "content": ""})
                try:
                    async for piece in pieces_of(completion, request):
                        yield chunk({"content": piece})
                except Exception as exc:  # noqa: BLE001 - said in the stream (its 200 is sent), not in the log
                    error = {"error": {"message": f"generation failed: {first_line(exc)}", "type": "server_error",
                                       "param": None, "code": None}}
                    yield f"data: {json.dumps(error)}\n\ndata: [DONE]\n\n"
                    return
                if completion.finish_reason is None:  # the client left
                    return
                yield chunk({}, completion.finish_reason)
                if params["include_usage"]:
                    doc = {"id": ident, "object": "chat.completion.chunk", "created": made, "model": llm.name,
                           "choices": [], "usage": usage(completion)}
                    yield f"data: {json.dumps(doc)}\n\n"
                yield "data: [DONE]\n\n"
        finally:
            state["generations"] -= 1
            completion.close()

    @app.post("/v1/generate")
    async def generate(request: Request):
        try:
            params, ids, max_tokens = await prepare(request, chat=False)
        except InputError as exc:
            return JSONResponse(exc.detail, status_code=exc.status)
        refused = admit()
        if refused is not None:
            return refused
        if params["stream"]:
            return StreamingResponse(generate_events(params, ids, max_tokens, request), media_type="text/event-stream",
                                     headers={"Cache-Control": "no-cache"})
        try:
            completion, text = await run_whole(params, ids, max_tokens, request)
        except Exception as exc:  # noqa: BLE001
            return JSONResponse({"error": f"generation failed: {first_line(exc)}"}, status_code=500)
        finally:
            state["generations"] -= 1
        return {"prompt": params["prompt"], "text": text, "tokens": completion.completion_tokens,
                "prompt_tokens": completion.prompt_tokens, "finish_reason": completion.finish_reason or "stop"}

    async def generate_events(params, ids, max_tokens, request):
        """As the small LMs' /v1/generate stream: ``data: {"token": piece}`` events, then ``event: done``."""
        completion = llm.complete(ids, max_tokens, params["temperature"], params["top_k"], params["top_p"],
                                  params["seed"], params["stop"])
        try:
            async with lock:
                try:
                    async for piece in pieces_of(completion, request):
                        yield f"data: {json.dumps({'token': piece})}\n\n"
                except Exception as exc:  # noqa: BLE001
                    yield f"event: error\ndata: {json.dumps({'error': f'generation failed: {first_line(exc)}'})}\n\n"
                    return
                if completion.finish_reason is not None:
                    done = {"tokens": completion.completion_tokens, "prompt_tokens": completion.prompt_tokens,
                            "finish_reason": completion.finish_reason}
                    yield f"event: done\ndata: {json.dumps(done)}\n\n"
        finally:
            state["generations"] -= 1
            completion.close()


def usage(completion) -> dict:
    return {"prompt_tokens": completion.prompt_tokens, "completion_tokens": completion.completion_tokens,
            "total_tokens": completion.prompt_tokens + completion.completion_tokens}


def openai_error(status: int, message: str, param: str | None = None, kind: str = "invalid_request_error") -> JSONResponse:
    """OpenAI's error body (what its client reads the message from), one line."""
    return JSONResponse({"error": {"message": message, "type": kind, "param": param, "code": None}}, status_code=status)


def parse_object(body: bytes) -> dict:
    try:
        doc = parse_json(body)
    except (ValueError, RecursionError) as exc:
        raise InputError(400, f"malformed JSON body: {' '.join(str(exc).split())[:200]}") from None
    if not isinstance(doc, dict):
        raise InputError(422, "the body must be a JSON object")
    return doc


def _number(doc: dict, key: str, default, integer: bool = False):
    value = doc.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int if integer else (int, float)) \
            or (not integer and not math.isfinite(value)):
        raise InputError(422, f'"{key}" must be {"an integer" if integer else "a number"}, got {str(value)[:40]}',
                         field=key)
    return value


def sampling_params(doc: dict) -> dict:
    """The sampling values of a request, typed (their ranges are the model's ``check``)."""
    params = {key: _number(doc, key, default) for key, default in DEFAULTS.items() if key != "top_k"}
    params["top_k"] = _number(doc, "top_k", DEFAULTS["top_k"], integer=True)
    max_tokens = doc.get("max_tokens", doc.get("max_completion_tokens"))  # OpenAI's newer name
    params["max_tokens"] = _number({"max_tokens": max_tokens}, "max_tokens", None, integer=True)
    if params["max_tokens"] is not None and params["max_tokens"] < 1:
        raise InputError(422, f'"max_tokens" must be at least 1, got {params["max_tokens"]}', field="max_tokens")
    seed = _number(doc, "seed", None, integer=True)
    if seed is not None and not 0 <= seed <= MAX_SEED:
        raise InputError(422, f'"seed" must be within 0..{MAX_SEED}, got {seed}', field="seed")
    params["seed"] = seed
    n = _number(doc, "n", 1, integer=True)
    if n != 1:
        raise InputError(422, f'"n" must be 1 (one choice per request), got {n}', field="n")
    stream = doc.get("stream", False)
    if not isinstance(stream, bool):
        raise InputError(422, f'"stream" must be true or false, got {str(stream)[:40]}', field="stream")
    options = doc.get("stream_options") or {}
    if not isinstance(options, dict) or not isinstance(options.get("include_usage", False), bool):
        raise InputError(422, '"stream_options" must be {"include_usage": true or false}', field="stream_options")
    model = doc.get("model")
    if model is not None and (not isinstance(model, str) or len(model) > 256):
        raise InputError(422, '"model" must be a string of at most 256 characters', field="model")
    params.update(stream=stream, include_usage=options.get("include_usage", False), stop=stop_strings(doc.get("stop")),
                  prompt=doc.get("prompt"))
    return params


def stop_strings(value) -> tuple[str, ...]:
    stops = (value,) if isinstance(value, str) else value if isinstance(value, list) else () if value is None else None
    if stops is None or len(stops) > MAX_STOPS or any(not isinstance(s, str) or not s or len(s) > MAX_STOP_CHARS
                                                      for s in stops):
        raise InputError(422, f'"stop" must be a string or a list of up to {MAX_STOPS} non-empty strings of at most '
                              f'{MAX_STOP_CHARS} characters', field="stop")
    return tuple(stops)


def chat_messages(value, max_chars: int) -> list[dict]:
    """``messages`` as the chat template takes them: roles system/user/assistant, text content
    (a string, or OpenAI's list of text parts), bounded in number and in total characters."""
    if not isinstance(value, list) or not value:
        raise InputError(422, '"messages" must be a non-empty list of {"role", "content"} objects', field="messages")
    if len(value) > MAX_MESSAGES:
        raise InputError(422, f'"messages" has {len(value):,} messages; the limit is {MAX_MESSAGES}', field="messages")
    messages, total = [], 0
    for at, message in enumerate(value):
        if not isinstance(message, dict) or message.get("role") not in ROLES:
            role = message.get("role") if isinstance(message, dict) else None
            raise InputError(422, f'messages[{at}]: "role" must be one of {", ".join(ROLES)}, got '
                                  f'{json.dumps(role)[:40]}', field="messages")
        content = message.get("content")
        if isinstance(content, list):  # [{"type": "text", "text": ...}, ...]
            if len(content) > MAX_MESSAGES or not all(isinstance(p, dict) and p.get("type") == "text"
                                                      and isinstance(p.get("text"), str) for p in content):
                raise InputError(422, f'messages[{at}]: "content" parts must be {{"type": "text", "text": ...}} '
                                      '(this model reads text only)', field="messages")
            content = "".join(p["text"] for p in content)
        if not isinstance(content, str):
            raise InputError(422, f'messages[{at}]: "content" must be text', field="messages")
        total += len(content)
        if total > max_chars:
            raise InputError(422, f'the messages pass {max_chars:,} characters in all; shorten them', field="messages")
        messages.append({"role": message["role"], "content": content})
    return messages
