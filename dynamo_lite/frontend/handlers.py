"""HTTP endpoints: /v1/chat/completions, /v1/completions, /v1/models, /health, /metrics.

A generation request is admitted (or refused with 429), validated, tokenized
once, checked against the model's context length, then served by `RequestFlow`
as one JSON answer or as server-sent events.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TypeVar

from aiohttp import web
from jinja2 import TemplateError
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from dynamo_lite.frontend.errors import ApiError, api_error, json_response
from dynamo_lite.frontend.openapi import build_document, document_handler
from dynamo_lite.frontend.request import (
    GenerationRequest,
    Outcome,
    Piece,
    RequestFailed,
    Sampling,
    max_tokens_for,
)
from dynamo_lite.frontend.schemas import (
    ChatCompletionRequest,
    CompletionRequest,
    OpenAiRequest,
    parse_body,
)
from dynamo_lite.frontend.sse import (
    DONE,
    ChatShape,
    CompletionShape,
    Shape,
    sse,
    usage_body,
)
from dynamo_lite.frontend.state import STATE, FrontendState
from dynamo_lite.frontend.tokenizer import ModelTokenizer
from dynamo_lite.protocol import RequestId, Role

log = logging.getLogger(__name__)
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
T = TypeVar("T")
LONG_INPUT_CHARS = 16_384  # inputs this long are tokenized off the event loop
MODEL_LABEL = web.RequestKey("model_label", str)
STATUS_LABEL = web.ResponseKey("status_label", str)  # overrides the HTTP status in the request counter


def add_routes(app: web.Application) -> None:
    app.router.add_post("/v1/chat/completions", _counted("chat", chat_completions))
    app.router.add_post("/v1/completions", _counted("completions", completions))
    app.router.add_get("/v1/models", models)
    app.router.add_get("/health", health)
    app.router.add_get("/metrics", metrics)
    state = app[STATE]
    app.router.add_get("/openapi.json", document_handler(build_document(list(state.models),
                                                                        bearer_auth=state.api_keys.enabled)))


def _counted(endpoint: str, handler: Handler) -> Handler:
    """Admission control and the per-status request counter around a handler."""

    async def wrapped(request: web.Request) -> web.StreamResponse:
        state = request.app[STATE]
        status = "500"
        try:
            await _read_body(request, state.config.frontend.body_timeout_s)
            async with state.admission.slot():
                response = await handler(request)
            status = response.get(STATUS_LABEL, str(response.status))
            return response
        except ApiError as e:
            status = str(e.status)
            if e.status == 429:
                state.metrics.rejected.inc()
            raise
        except web.HTTPException as e:  # aiohttp's own: 413 body too large ...
            status = str(e.status)
            raise
        except Exception:
            status = "500"
            raise
        except BaseException:  # cancelled: the client went away
            status = "client_closed"
            raise
        finally:
            state.metrics.requests.labels(request.get(MODEL_LABEL, ""), endpoint, status).inc()

    return wrapped


async def _read_body(request: web.Request, timeout_s: float) -> None:
    """Receive the whole body (aiohttp keeps it for `read()`) before the request may take a slot."""
    try:
        async with asyncio.timeout(timeout_s):
            await request.read()
    except TimeoutError:
        raise ApiError(408, f"The request body was not received within {timeout_s:g} s.", code="request_timeout") \
            from None


async def chat_completions(request: web.Request) -> web.StreamResponse:
    state = request.app[STATE]
    raw = await request.read()
    body = parse_body(raw, ChatCompletionRequest)
    tokenizer = _served(request, state, body.model)
    try:  # the body's size too: many small messages make the template slow as well
        ids = await _off_loop_if_long(max(len(raw), sum(len(m.text()) for m in body.messages)), tokenizer.encode_chat,
                                      body.messages)
    except TemplateError as e:  # e.g. a template that insists on alternating roles
        raise ApiError(400, f"The chat template rejected the messages: {e}", param="messages") from None
    rid = f"chatcmpl-{uuid.uuid4().hex}"
    return await _generate(request, state, body, ids, "messages", ChatShape(rid, body.model, int(time.time()),
                                                                            body.include_usage))


async def completions(request: web.Request) -> web.StreamResponse:
    state = request.app[STATE]
    body = parse_body(await request.read(), CompletionRequest)
    tokenizer = _served(request, state, body.model)
    prompt = body.prompt[0] if isinstance(body.prompt, list) and isinstance(body.prompt[0], (str, list)) \
        else body.prompt
    if isinstance(prompt, str):
        ids = await _off_loop_if_long(len(prompt), tokenizer.encode_prompt, prompt)
    else:
        ids = list(prompt)  # type: ignore[arg-type]  # ids are 0 <= id < 2^31 (schemas.py)
    rid = f"cmpl-{uuid.uuid4().hex}"
    return await _generate(request, state, body, ids, "prompt", CompletionShape(rid, body.model, int(time.time()),
                                                                                body.include_usage))


async def _off_loop_if_long(chars: int, encode: Callable[[T], list[int]], arg: T) -> list[int]:
    """Tokenize; long inputs in a thread (the Rust tokenizer releases the GIL), so the loop keeps serving."""
    if chars < LONG_INPUT_CHARS:
        return encode(arg)
    return await asyncio.to_thread(encode, arg)


def _served(request: web.Request, state: FrontendState, model: str) -> ModelTokenizer:
    tokenizer = state.tokenizers.get(model)
    if tokenizer is None:
        raise ApiError(404, f"The model `{model}` does not exist.", param="model", code="model_not_found")
    request[MODEL_LABEL] = model
    return tokenizer


def _request(state: FrontendState, body: OpenAiRequest, ids: list[int], param: str, rid: str) -> GenerationRequest:
    """The request to serve: the prompt checked against the context length, max_tokens filled in as vLLM does."""
    max_tokens = max_tokens_for(len(ids), body.output_limit(), state.models[body.model].max_model_len,
                                state.config.frontend.max_tokens_limit, param)
    sampling = Sampling(temperature=body.temperature, top_p=body.top_p, seed=body.seed, stop=body.stop_list(),
                        presence_penalty=body.presence_penalty, frequency_penalty=body.frequency_penalty)
    return GenerationRequest(RequestId(rid), body.model, ids, max_tokens, sampling, time.monotonic(),
                             state.tokenizers[body.model].encode_text)


async def _generate(request: web.Request, state: FrontendState, body: OpenAiRequest, ids: list[int], param: str,
                    shape: Shape) -> web.StreamResponse:  # fmt: skip
    try:
        req = _request(state, body, ids, param, shape.id)
    except RequestFailed as e:
        raise api_error(e) from None
    if state.flow is None:
        raise ApiError(503, "The frontend is starting or stopping.", code="not_ready")
    model = req.model
    state.metrics.in_flight.labels(model).inc()
    try:
        async with contextlib.aclosing(state.flow.run(req)) as events:
            if body.stream:
                response, outcome = await _stream(request, events, shape, body.include_usage, req)
            else:
                response, outcome = await _whole(events, shape, req)
        if outcome is not None:
            m = state.metrics
            m.input_tokens.labels(model).inc(len(ids))
            m.prompt_len.labels(model).observe(len(ids))
            m.output_tokens.labels(model).inc(outcome.completion_tokens)
            m.cached_tokens.labels(model).inc(outcome.cached_tokens)
            m.e2e.labels(model).observe(time.monotonic() - req.arrival)
        return response
    finally:
        state.metrics.in_flight.labels(model).dec()


async def _whole(events: AsyncIterator[Piece | Outcome], shape: Shape,
                 req: GenerationRequest) -> tuple[web.Response, Outcome]:  # fmt: skip
    """One JSON answer: every piece's text, then the outcome's usage."""
    texts: list[str] = []
    try:
        async for event in events:
            if isinstance(event, Outcome):
                usage = usage_body(len(req.prompt_ids), event.completion_tokens, event.cached_tokens)
                body = shape.full("".join(texts), event.finish_reason, usage)
                return json_response(body, headers={"X-Request-Id": req.request_id}), event
            texts.append(event.text)
    except RequestFailed as e:
        raise api_error(e) from None
    raise RuntimeError(f"request {req.request_id}: the flow ended without an outcome")


async def _stream(request: web.Request, events: AsyncIterator[Piece | Outcome], shape: Shape, include_usage: bool,
                  req: GenerationRequest) -> tuple[web.StreamResponse, Outcome | None]:  # fmt: skip
    """Server-sent events; the outcome is None when the stream broke off (client gone, failure mid-stream)."""
    # The first event comes before the headers, so that what fails before any output (no
    # worker, timeout, a refused prompt) is still an HTTP status rather than an SSE error.
    try:
        first = await anext(events)
    except RequestFailed as e:
        raise api_error(e) from None
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache",
                                           "X-Request-Id": req.request_id})  # fmt: skip
    await response.prepare(request)
    outcome: Outcome | None = None
    try:
        event = first
        while True:
            if isinstance(event, Outcome):
                outcome = event
                break
            chunks = shape.chunks(event.text, event.finish_reason)
            if chunks:
                await response.write(b"".join(sse(c) for c in chunks))
            event = await anext(events)
        if include_usage:
            usage = usage_body(len(req.prompt_ids), outcome.completion_tokens, outcome.cached_tokens)
            await response.write(sse(shape.usage_chunk(usage)))
        await response.write(DONE)
    except ConnectionResetError:
        log.info("request %s: client went away; engine request closed", req.request_id)
        response[STATUS_LABEL] = "client_closed"
        return response, None
    except RequestFailed as e:
        log.warning("request %s failed mid-stream: %s", req.request_id, e.message)
        response[STATUS_LABEL] = "stream_error"
        await response.write(sse(api_error(e).body()) + DONE)
        outcome = None
    await response.write_eof()
    return response, outcome


async def models(request: web.Request) -> web.Response:
    state = request.app[STATE]
    cards = [{"id": m.name, "object": "model", "created": 0, "owned_by": "dynamo_lite",
              "max_model_len": m.max_model_len} for m in state.models.values()]  # fmt: skip
    return json_response({"object": "list", "data": cards})


async def health(request: web.Request) -> web.Response:
    state = request.app[STATE]
    workers = {}
    for name in state.models:
        fleet = state.fleet.get(name)
        workers[name] = {role.value: fleet.count(role) for role in Role} if fleet else {}
    ready = state.flow is not None
    return json_response({"status": "ok" if ready else "starting", "models": workers}, 200 if ready else 503)


async def metrics(request: web.Request) -> web.Response:
    body = generate_latest(request.app[STATE].metrics.registry)
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})
