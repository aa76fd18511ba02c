"""The HTTP API of a served model (FastAPI).

    POST /v1/predict    JSON, .npy or .npz body -> {"outputs": {name: nested lists}}
                        (``Accept: application/x-npz`` answers with an .npz)
    POST /v1/generate   language models: {"prompt", "max_tokens", "temperature", "top_k", "seed",
                        "stream"}; with "stream": true, server-sent events, one per token
    POST /v1/chat/completions, GET /v1/models   pretrained LLMs with a KV cache (OpenAI's shapes,
                        ``llm_routes``; they also take /v1/generate)
    GET  /v1/model      the manifest summary
    GET  /healthz       alive;   GET /readyz   model loaded and warmed up
    GET  /metrics       Prometheus text

/v1/predict is the hot path: a plain ASGI handler that ``ServeApp`` calls before FastAPI's middleware
and routing (a tiny model's request costs little more than its HTTP; every layer shows).

Every malformed request is a 4xx with a one-line JSON ``{"error": ...}`` and nothing in the log:
bodies that do not parse (422), too large (413), too many or too large headers (431, checked
here for every route and, before they are buffered, by ``http_limits`` in the HTTP parser). A 500
means the runtime failed on an input the spec allowed.

A model is any object with ``specs`` (input spec dicts, see ``inputs.spec_from_dict``),
``outputs`` (names), ``summary`` (dict), ``run(feed) -> list of arrays`` and optionally
``generator`` (``check(max_tokens, temperature, top_k)`` and ``stream(prompt, max_tokens,
temperature, top_k, seed) -> iterator of text pieces``).

Standalone: numpy, fastapi/starlette and this package's standalone modules only.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import time

import numpy as np
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse, StreamingResponse
from starlette.datastructures import Headers
from starlette.requests import ClientDisconnect

from .auth import OPEN_PATHS, authorized
from .batcher import MicroBatcher, Overloaded
from .inputs import InputError, batchable, decode, parse_json, validate
from .metrics import Metrics
from .settings import ServeSettings


def create_app(model, settings: ServeSettings = ServeSettings(), warmup_feed: dict | None = None) -> "ServeApp":
    metrics = Metrics()
    can_batch = batchable(model.specs)
    batcher = MicroBatcher(model.run, max_batch=settings.max_batch, max_wait_s=settings.max_wait_ms / 1000,
                           queue_size=settings.queue_size, batchable=can_batch, on_batch=metrics.observe_batch)
    metrics.queue_depth = lambda: batcher.depth
    state = {"ready": False, "generations": 0}

    @contextlib.asynccontextmanager
    async def lifespan(app):
        batcher.start()
        if warmup_feed is not None:
            await batcher.call_in_thread(model.run, warmup_feed)
        state["ready"] = True
        yield
        state["ready"] = False
        await batcher.stop()

    app = ServeApp(title="edgekit serve", lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None)
    app.state.batcher = batcher
    app.state.metrics = metrics

    @app.get("/healthz")
    async def healthz():
        return {"status": "ok"}

    @app.get("/readyz")
    async def readyz():
        if not state["ready"]:
            return JSONResponse({"status": "starting"}, status_code=503, headers={"Retry-After": "1"})
        return {"status": "ready"}

    @app.get("/v1/model")
    async def model_info():
        return {**model.summary, "batching": {"dynamic_batch_axis": can_batch, "max_batch": batcher.max_batch,
                                              "max_wait_ms": settings.max_wait_ms, "queue_size": settings.queue_size},
                "generate": getattr(model, "generator", None) is not None or getattr(model, "llm", None) is not None,
                **({"generation": model.llm.status()} if getattr(model, "llm", None) is not None else {})}

    @app.get("/metrics")
    async def prometheus():
        return PlainTextResponse(metrics.render(), media_type="text/plain; version=0.0.4")

    async def predict(scope, receive, send) -> int:
        """POST /v1/predict as a plain ASGI handler (the hot path: no routing, no Request/Response
        objects); answers and returns the status. Guard calls it for every POST to /v1/predict."""
        if not getattr(model, "predicts", True):  # a language model served as text
            return await answer(send, 404, json_bytes({"error": "this model is a language model; use /v1/generate "
                                                                "or /v1/chat/completions"}))
        content_type, accept, declared = "", "", None
        for key, value in scope["headers"]:
            if key == b"content-type":
                content_type = value.decode("latin-1")
            elif key == b"accept":
                accept = value.decode("latin-1")
            elif key == b"content-length":
                declared = value.decode("latin-1")
        try:
            body = await receive_body(receive, declared, settings.max_body_bytes)
            if body is None:  # the client left
                return 499
            arrays = decode(body, content_type, model.specs, settings.max_body_bytes)
            feed = validate(arrays, model.specs, settings.allow_nonfinite)
        except InputError as exc:
            return await answer(send, exc.status, json_bytes(exc.detail))
        try:
            outputs = await batcher.submit(feed)
        except Overloaded as exc:
            return await answer(send, 503, json_bytes(overloaded_detail(str(exc))),
                                extra=[(b"retry-after", str(settings.retry_after_s).encode())])
        except ValueError as exc:  # the wrapper refused the input (e.g. past a program's planned shapes)
            return await answer(send, 422, json_bytes({"error": f"the model refused the input: {first_line(exc)}"}))
        except Exception as exc:  # the runtime failed
            return await answer(send, 500, json_bytes({"error": f"inference failed: {str(exc).splitlines()[0][:300]}"}))
        named = dict(zip(model.outputs, outputs))
        if "application/x-npz" in accept:
            buffer = io.BytesIO()
            np.savez(buffer, **named)
            return await answer(send, 200, buffer.getvalue(), b"application/x-npz")
        return await answer(send, 200, json_bytes({"outputs": {k: v.tolist() for k, v in named.items()}}))

    limits = (settings.max_headers, settings.max_header_bytes)
    app.add_middleware(Guard, api_key=settings.api_key, metrics=metrics, predict=predict, limits=limits)
    app.hot = Guard(None, api_key=settings.api_key, metrics=metrics, predict=predict, limits=limits)

    if getattr(model, "llm", None) is not None:  # a pretrained LLM with a KV cache: chat completions, /v1/generate
        from .llm_routes import add_llm_routes

        add_llm_routes(app, model.llm, settings, batcher, state, first_line=first_line, overloaded=overloaded,
                       read_body=read_body)

    @app.post("/v1/generate")
    async def generate(request: Request):
        generator = getattr(model, "generator", None)
        if generator is None:
            return JSONResponse({"error": "this model is not a language model; use /v1/predict"}, status_code=404)
        try:
            body = await read_body(request, settings.max_body_bytes)
            params = generation_params(body, settings.max_new_tokens, settings.max_prompt_chars)
            generator.check(params["max_tokens"], params["temperature"], params["top_k"])
        except InputError as exc:
            return JSONResponse(exc.detail, status_code=exc.status)
        except ClientDisconnect:  # nobody to answer (the server may be shutting down on a stalled upload)
            return JSONResponse({"error": "the client disconnected"}, status_code=400)
        except ValueError as exc:
            return JSONResponse({"error": first_line(exc)}, status_code=422)
        if state["generations"] >= settings.max_generations:
            return overloaded(f"{settings.max_generations} generations are running or waiting", settings.retry_after_s)
        try:
            pieces = generator.stream(params["prompt"], params["max_tokens"], params["temperature"], params["top_k"],
                                      params["seed"])
        except ValueError as exc:
            return JSONResponse({"error": str(exc)}, status_code=422)
        state["generations"] += 1
        if not params["stream"]:
            try:
                text = "".join(await batcher.call_in_thread(list, pieces))
            except ValueError as exc:
                return JSONResponse({"error": first_line(exc)}, status_code=422)
            except Exception as exc:  # the runtime failed
                return JSONResponse({"error": f"generation failed: {first_line(exc)}"}, status_code=500)
            finally:
                state["generations"] -= 1
            return {"prompt": params["prompt"], "text": text}
        return StreamingResponse(sse_events(pieces, batcher, state), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache"})

    return app


class ServeApp(FastAPI):
    """FastAPI, but requests to /v1/predict (the hot path) go straight to ``hot`` (a ``Guard``: the key
    check, metrics, the plain ASGI predict handler), past FastAPI's own middleware stack: about
    35 µs of CPU a request on the 2-core host, a sixth of a small model's request. Were a host to
    call the middleware stack directly, the ``Guard`` inside it serves /v1/predict the same way."""

    hot = None

    async def __call__(self, scope, receive, send):
        if self.hot is not None and scope["type"] == "http" and scope["path"] == "/v1/predict":
            return await self.hot(scope, receive, send)
        await super().__call__(scope, receive, send)


ROUTES = ("/v1/predict", "/v1/generate", "/v1/chat/completions", "/v1/models", "/v1/model", "/healthz", "/readyz",
          "/metrics")


class Guard:
    """ASGI middleware: the API key check (constant time), per-route request metrics, and the
    /v1/predict hot path (handed straight to ``predict``, past FastAPI's routing)."""

    def __init__(self, app, api_key: str | None, metrics: Metrics, predict=None, limits: tuple[int, int] = (100, 32 << 10)):
        self.app, self.api_key, self.metrics, self.predict = app, api_key, metrics, predict
        self.max_headers, self.max_header_bytes = limits

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        started = time.perf_counter()
        path = scope["path"]
        status = 500
        try:
            headers = scope["headers"]
            size = len(scope.get("raw_path") or b"") + len(scope.get("query_string") or b"")
            size += sum(len(k) + len(v) + 4 for k, v in headers)
            if len(headers) > self.max_headers or size > self.max_header_bytes:
                status = await answer(send, 431, json_bytes(
                    {"error": f"the request has {len(headers)} headers of {size} bytes; the limits are "
                              f"{self.max_headers} headers and {self.max_header_bytes} bytes"}),
                    extra=[(b"connection", b"close")])
            elif self.api_key and path not in OPEN_PATHS and not authorized(Headers(scope=scope), self.api_key):
                status = await answer(send, 401, json_bytes({"error": "missing or wrong API key"}),
                                      extra=[(b"www-authenticate", b"Bearer")])
            elif path == "/v1/predict" and self.predict is not None:
                if scope["method"] == "POST":
                    status = await self.predict(scope, receive, send)
                else:
                    status = await answer(send, 405, json_bytes({"error": "use POST"}), extra=[(b"allow", b"POST")])
            else:
                forwarded = [500]

                async def send_status(message):
                    if message["type"] == "http.response.start":
                        forwarded[0] = message["status"]
                    await send(message)

                try:
                    await self.app(scope, receive, send_status)
                finally:
                    status = forwarded[0]
        finally:
            self.metrics.observe_request(path if path in ROUTES else "other", status, time.perf_counter() - started)


async def answer(send, status: int, body: bytes, content_type: bytes = b"application/json", extra=()) -> int:
    """Send a whole response; its status."""
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", content_type), (b"content-length", str(len(body)).encode()), *extra]})
    await send({"type": "http.response.body", "body": body})
    return status


def json_bytes(doc) -> bytes:
    return json.dumps(doc).encode()


def first_line(exc: BaseException, limit: int = 300) -> str:
    text = str(exc).strip()
    return (text.splitlines()[0] if text else type(exc).__name__)[:limit]


async def receive_body(receive, declared: str | None, limit: int) -> bytes | None:
    """The request body from ASGI ``receive``, refused with 413 as soon as it passes ``limit`` bytes
    (declared or sent); None when the client disconnected first."""
    if declared is not None:
        if not (declared.isascii() and declared.isdigit()):
            raise InputError(400, "malformed Content-Length header")
        if len(declared) > 19 or int(declared) > limit:
            raise InputError(413, f"the body is {declared[:20]} bytes; the limit is {limit}", limit=limit)
    chunks, size = [], 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise InputError(413, f"the body passes the {limit}-byte limit", limit=limit)
        chunks.append(chunk)
        if not message.get("more_body", False):
            return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def overloaded_detail(why: str) -> dict:
    return {"error": f"overloaded: {why}; retry later"}


def overloaded(why: str, retry_after_s: int) -> JSONResponse:
    return JSONResponse(overloaded_detail(why), status_code=503, headers={"Retry-After": str(retry_after_s)})


async def read_body(request: Request, limit: int) -> bytes:
    """The request body, refused with 413 as soon as it passes ``limit`` bytes (declared or sent)."""
    body = await receive_body(request.receive, request.headers.get("content-length"), limit)
    if body is None:
        raise ClientDisconnect()
    return body


MAX_SEED = 2**32 - 1  # what torch's and numpy's generators take


def generation_params(body: bytes, max_new_tokens: int, max_prompt_chars: int = 1 << 16) -> dict:
    try:
        doc = parse_json(body or b"{}")
    except (ValueError, RecursionError) as exc:
        raise InputError(422, f"malformed JSON body: {str(exc)[:200]}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("prompt"), str) or not doc["prompt"]:
        raise InputError(422, 'the body must be a JSON object with a non-empty "prompt" string')
    if len(doc["prompt"]) > max_prompt_chars:
        raise InputError(422, f'"prompt" is {len(doc["prompt"])} characters; the limit is {max_prompt_chars}',
                         field="prompt")
    params = {"prompt": doc["prompt"], "max_tokens": doc.get("max_tokens", 64), "temperature": doc.get("temperature", 0.8),
              "top_k": doc.get("top_k", 20), "seed": doc.get("seed"), "stream": doc.get("stream", False)}
    for key, kinds in (("max_tokens", int), ("top_k", int), ("temperature", (int, float)), ("stream", bool)):
        if isinstance(params[key], bool) != (kinds is bool) or not isinstance(params[key], kinds):
            raise InputError(422, f'"{key}" has the wrong type: {params[key]!r}', field=key)
    seed = params["seed"]
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed <= MAX_SEED):
        raise InputError(422, f'"seed" must be an integer within 0..{MAX_SEED}, got {str(seed)[:40]}', field="seed")
    if not 1 <= params["max_tokens"] <= max_new_tokens:
        raise InputError(422, f'"max_tokens" must be within 1..{max_new_tokens}', field="max_tokens")
    return params


async def sse_events(pieces, batcher: MicroBatcher, state: dict):
    """One ``data:`` event per generated piece, then ``event: done``; generation runs off the event loop."""
    done = object()
    count = 0
    try:
        while True:
            try:
                piece = await batcher.call_in_thread(next, pieces, done)
            except Exception as exc:  # noqa: BLE001 - said in the stream (its 200 is sent), not in the log
                yield f"event: error\ndata: {json.dumps({'error': first_line(exc)})}\n\n"
                return
            if piece is done:
                break
            count += 1
            yield f"data: {json.dumps({'token': piece})}\n\n"
        yield f"event: done\ndata: {json.dumps({'tokens': count})}\n\n"
    finally:
        state["generations"] -= 1
        with contextlib.suppress(Exception):
            pieces.close()
        await asyncio.sleep(0)
