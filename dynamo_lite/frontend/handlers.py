"""HTTP endpoints: /v1/chat/completions, /v1/completions, /v1/models, /health, /metrics (and
the vLLM extras in extras.py: /v1/models/{id}, /tokenize, /detokenize, /version; SageMaker's in
sagemaker.py; the batch chat endpoint in batch.py).

A generation request is admitted (or refused with 429), validated under the field policy
(policy.py), tokenized once, checked against the model's context length, planned into one
engine request per choice (plan.py) and served (respond.py) as one JSON answer or as
server-sent events. The request id is the client's X-Request-Id (or body `request_id`),
as vLLM takes it; it names the response, the log lines and the engine requests.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, TypeVar

import msgspec
from aiohttp import web
from jinja2 import TemplateError
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from dynamo_lite.frontend import anthropic, checks, extras, plan, pooling, responses, responses_out, sagemaker
from dynamo_lite.frontend.admission import Refused
from dynamo_lite.frontend.errors import ApiError, json_response, no_such_model
from dynamo_lite.frontend.ids import base_request_id
from dynamo_lite.frontend.openapi import build_document, document_handler
from dynamo_lite.frontend.policy import FieldCheck
from dynamo_lite.frontend.respond import STATUS_LABEL, Plan, serve
from dynamo_lite.frontend.schemas import (
    ChatCompletionRequest,
    CompletionRequest,
    OpenAiRequest,
    parse_request,
    validated,
)
from dynamo_lite.frontend.schemas import (
    json_object as _json_object,
)
from dynamo_lite.frontend.sse import Shape
from dynamo_lite.frontend.state import MODEL_LABEL, STATE, FrontendState
from dynamo_lite.frontend.tokenizer import ChatInput, ModelTokenizer
from dynamo_lite.protocol import Role

log = logging.getLogger(__name__)
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
T = TypeVar("T")
R = TypeVar("R")
LONG_INPUT_CHARS = 4096  # inputs this long are tokenized in a thread (about 2 ms of BPE; benchmarks/tokenize_bench.py)
# When the whole body was in (time.monotonic()): a request's TTFT, its SLO and admission by predicted TTFT count
# from here, so the wait for an admission slot and the tokenization count too, as its client sees them.
RECEIVED = web.RequestKey("received", float)
PRIORITY_HEADER = "X-Vllm-Priority"  # vLLM's: overrides the body's `priority`
SESSION_HEADER = "X-Session-ID"  # vLLM's: a session id where the body has none


def add_routes(app: web.Application) -> None:
    chat, complete = counted("chat", chat_completions), counted("completions", completions)
    app.router.add_post("/v1/chat/completions", chat)
    app.router.add_post("/v1/completions", complete)
    sagemaker.add_routes(app, chat, complete, counted("pooling", pooling.pooled), health)
    app.router.add_post("/v1/responses", counted("responses", responses_create))
    app.router.add_post("/v1/messages", counted("messages", messages_create))
    app.router.add_post("/v1/messages/count_tokens", messages_count_tokens)
    app.router.add_get("/v1/models", models)
    app.router.add_get("/health", health)
    app.router.add_get("/metrics", metrics)
    extras.add_routes(app)
    pooling.add_routes(app, lambda handler: counted("pooling", handler))
    state = app[STATE]
    app.router.add_get("/openapi.json", document_handler(build_document(
        list(state.models), bearer_auth=state.api_keys.enabled, strict=state.config.frontend.strict_request_fields)))


def counted(endpoint: str, handler: Handler) -> Handler:
    """Admission control and the per-status request counter around a handler."""

    async def wrapped(request: web.Request) -> web.StreamResponse:
        state = request.app[STATE]
        status = "500"
        try:
            raw = await _read_body(request, state.config.frontend.body_timeout_s)
            request[RECEIVED] = time.monotonic()
            async with state.admission.slot(lambda: _head(raw, request).priority):
                response = await handler(request)
            status = response.get(STATUS_LABEL, str(response.status))
            return response
        except Refused as e:  # (a refusal by predicted TTFT is the flow's, counted there)
            status = str(e.status)
            model = _head(raw, request).model
            state.metrics.rejected.labels(model if model in state.models else "", e.reason).inc()
            raise
        except ApiError as e:
            status = str(e.status)
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


class _Head(msgspec.Struct):
    """What admission reads of a body before it is validated: only for a request that has to wait."""

    model: str = ""
    priority: int = 0


def _head(raw: bytes, request: web.Request) -> _Head:
    """The body's model and priority (vLLM's X-Vllm-Priority header wins); defaults where the body is not
    valid JSON of those types, which its validation then reports."""
    try:
        head = msgspec.json.decode(raw, type=_Head)
    except msgspec.DecodeError:  # (ValidationError is one)
        head = _Head()
    header = request.headers.get(PRIORITY_HEADER)
    if header is not None:
        try:
            head.priority = int(header)
        except ValueError:
            pass
    return head


async def _read_body(request: web.Request, timeout_s: float) -> bytes:
    """Receive the whole body (aiohttp keeps it for `read()`) before the request may take a slot."""
    try:
        async with asyncio.timeout(timeout_s):
            return await request.read()
    except TimeoutError:
        raise ApiError(408, f"The request body was not received within {timeout_s:g} s.", code="request_timeout") \
            from None


async def chat_completions(request: web.Request) -> web.StreamResponse:
    state = request.app[STATE]
    raw = await request.read()
    body, check = parse_request(raw, ChatCompletionRequest, state.config.frontend.strict_request_fields)
    checks.common(body, next(iter(state.models), None))
    checks.chat(body)
    return await generate(request, state, await chat_plan(request, state, body, check, len(raw), "chatcmpl-"))


async def responses_create(request: web.Request) -> web.StreamResponse:
    """POST /v1/responses: a chat request underneath (responses.py), its answer reshaped (responses_out.py)."""
    state = request.app[STATE]
    raw = await request.read()
    data = _json_object(raw)
    if (refused := responses.refusal(data)) is not None:
        raise refused
    req = validated(data, responses.ResponsesRequest)
    body, p = await _as_chat(request, state, responses.chat_body(req), responses.responses_param, len(raw), "resp_")
    p.reshape = responses_out.Envelope(p.shape.id, body.model, p.shape.created, req, p.requests[0].max_tokens)
    return await generate(request, state, p)


async def messages_create(request: web.Request) -> web.StreamResponse:
    """POST /v1/messages (Anthropic's Messages API): a chat request underneath (anthropic.py), its answer reshaped."""
    state = request.app[STATE]
    raw = await request.read()
    req = validated(_json_object(raw), anthropic.MessagesRequest)
    body, p = await _as_chat(request, state, anthropic.chat_body(req), anthropic.anthropic_param, len(raw), "msg_")
    p.reshape = anthropic.Reply(p.shape.id, body.model)
    return await generate(request, state, p)


async def messages_count_tokens(request: web.Request) -> web.Response:
    """POST /v1/messages/count_tokens: the prompt's tokens, as the chat template renders the request."""
    state = request.app[STATE]
    raw = await request.read()
    chat = anthropic.chat_body(validated(_json_object(raw), anthropic.CountTokensRequest))
    with _renamed(anthropic.anthropic_param):
        body, _ = parse_request(msgspec.json.encode(chat), ChatCompletionRequest,
                                state.config.frontend.strict_request_fields)
        n = len((await _chat_prompt(request, state, body, len(raw)))[1])
    return json_response({"input_tokens": n, "context_management": {"original_input_tokens": n}})


async def _as_chat(request: web.Request, state: FrontendState, chat: dict[str, Any],
                   rename: Callable[[str | None], str | None], raw_len: int,
                   id_prefix: str) -> tuple[ChatCompletionRequest, Plan]:  # fmt: skip
    """Another API's request as the chat request that serves it, validated and planned; errors name the
    fields as that API does."""
    with _renamed(rename):
        body, check = parse_request(msgspec.json.encode(chat), ChatCompletionRequest,
                                    state.config.frontend.strict_request_fields)
        return body, await chat_plan(request, state, body, check, raw_len, id_prefix)


@contextlib.contextmanager
def _renamed(rename: Callable[[str | None], str | None]) -> Iterator[None]:
    """An error about the chat request underneath names the field as the client's API calls it."""
    try:
        yield
    except ApiError as e:
        new = rename(e.param)
        if new != e.param:
            e.message = e.message.replace(f"'{e.param}'", f"'{new}'")
            e.args, e.param = (e.message,), new
        raise


async def _chat_prompt(request: web.Request, state: FrontendState, body: ChatCompletionRequest,
                       raw_len: int) -> tuple[str, list[int]]:  # fmt: skip
    """The prompt, as text and token ids: the messages through the model's chat template (with tools, documents,
    kwargs)."""
    tokenizer = _served(request, state, body.model)
    spec = state.models[body.model]
    chat = ChatInput(tools=body.tools, tool_format=spec.tool_call_parser or "hermes",
                     add_generation_prompt=body.add_generation_prompt and not body.continue_final_message,
                     continue_final_message=body.continue_final_message, documents=body.documents,
                     kwargs=plan.template_kwargs(body, spec), reasoning_effort=body.reasoning_effort)
    try:  # the body's size too: many small messages make the template slow as well
        return await _off_loop_if_long(max(raw_len, sum(len(m.text()) for m in body.messages)),
                                       lambda m: tokenizer.encode_chat(m, chat), body.messages)
    except TemplateError as e:  # e.g. a template that insists on alternating roles
        raise ApiError(400, f"The chat template rejected the messages: {e}", param="messages") from None


async def chat_plan(request: web.Request, state: FrontendState, body: ChatCompletionRequest, check: FieldCheck,
                     raw_len: int, id_prefix: str) -> Plan:  # fmt: skip
    text, ids = await _chat_prompt(request, state, body, raw_len)
    tokenizer = state.tokenizers[body.model]
    spec = state.models[body.model]
    structured = plan.chat_structured(body, spec, tokenizer)
    opts = plan.chat_options(body, spec, text, tokenizer, structured)
    ids = plan.truncate(ids, body, spec.max_model_len)
    rid = id_prefix + base_request_id(request, body.request_id)
    _log_fields(rid, check)
    want_prompt = body.prompt_logprobs is not None and not body.use_beam_search  # (vLLM's beam search: none)
    prompt_k = body.prompt_logprobs if want_prompt else None
    sampling = plan.sampling_of(body, structured, _engine_k(body.logprobs_k(), prompt_k), want_prompt,
                                plan.keeps_special_tokens(body, spec), session_of(request, body),
                                plan.joins_special_tokens(body, spec))
    reqs = plan.choice_requests(body, spec, state.config.frontend.max_tokens_limit, _internal(rid), [ids], sampling,
                                "messages", tokenizer, want_prompt, request[RECEIVED])  # fmt: skip
    shape = Shape(rid, body.model, int(time.time()), chat=True, include_usage=body.include_usage)
    return Plan(shape, reqs, list(plan.chat_choices(body, opts, tokenizer)), [0] * len(reqs), bool(body.stream),
                body.continuous_usage, prompt_logprobs_k=prompt_k,
                chat_prompt_ids=bool(body.return_token_ids), prompt_text=text if body.return_prompt_text else None,
                token_text=plan.token_texts(body, tokenizer), reasoning_details=spec.reasoning_parser is not None,
                header={"X-Request-Id": rid[len(id_prefix):]})  # fmt: skip


async def completions(request: web.Request) -> web.StreamResponse:
    state = request.app[STATE]
    body, check = parse_request(await request.read(), CompletionRequest, state.config.frontend.strict_request_fields)
    checks.common(body, next(iter(state.models), None))
    tokenizer = _served(request, state, body.model)
    body = checks.completion(body)
    prompts: list[list[int]] = []
    texts: list[str] = []
    special = body.add_special_tokens is not False
    for prompt in body.prompts():
        if isinstance(prompt, str):
            ids = await _off_loop_if_long(len(prompt), lambda t: tokenizer.encode_prompt(t, special), prompt)
            texts.append(prompt)
        else:
            ids = list(prompt)  # ids are 0 <= id < 2^31 (schemas.py)
            texts.append(tokenizer.decode(ids) if body.echo else "")
        prompts.append(plan.truncate(ids, body, state.models[body.model].max_model_len))
    rid = "cmpl-" + base_request_id(request, body.request_id)
    _log_fields(rid, check)
    want_prompt = not body.use_beam_search and (body.prompt_logprobs is not None or bool(body.echo and
                                                                                          body.logprobs is not None))
    prompt_k = None if not want_prompt else body.prompt_logprobs if body.prompt_logprobs is not None else body.logprobs
    sampling = plan.sampling_of(body, body.structured(), _engine_k(body.logprobs, prompt_k), want_prompt,
                                session_id=session_of(request, body))
    reqs = plan.choice_requests(body, state.models[body.model], state.config.frontend.max_tokens_limit,
                                _internal(rid), prompts, sampling, "prompt", tokenizer, want_prompt,
                                request[RECEIVED], min_one=body.max_tokens == 0)  # fmt: skip
    shape = Shape(rid, body.model, int(time.time()), chat=False, include_usage=body.include_usage)
    p = Plan(shape, reqs, list(plan.completion_choices(body, prompts, texts, tokenizer)),
             [i // body.choices for i in range(len(reqs))], bool(body.stream), body.continuous_usage,
             drop_output=body.max_tokens == 0, dropped_counted=not body.use_beam_search,
             prompt_logprobs_k=prompt_k,  # vLLM: echo's are returned too
             token_text=plan.token_texts(body, tokenizer), header={"X-Request-Id": rid[len("cmpl-"):]})  # fmt: skip
    return await generate(request, state, p)


def _engine_k(output_k: int | None, prompt_k: int | None) -> int | None:
    """The top-k the engine is asked for: enough for the output's and the prompt's."""
    ks = [k for k in (output_k, prompt_k) if k is not None]
    if not ks:
        return None
    return -1 if -1 in ks else max(ks)


def session_of(request: web.Request, body: OpenAiRequest) -> str | None:
    """vLLM's session id: the body's `session_id`, else the X-Session-ID header (else `vllm_xargs.session_id`,
    which the engine reads itself)."""
    return body.session_id or request.headers.get(SESSION_HEADER) or None


def _internal(rid: str) -> str:
    """The id the request has inside (router, engines, logs): the client's, made unique, as vLLM does."""
    return f"{rid}-{uuid.uuid4().hex[:8]}"


def _log_fields(rid: str, check: FieldCheck) -> None:
    if check.ignored or check.unknown:
        log.info("request %s: accepted and ignored: %s%s", rid, ", ".join(check.ignored) or "-",
                 f" (+{check.unknown} unknown field(s))" if check.unknown else "")


async def _off_loop_if_long(chars: int, encode: Callable[[T], R], arg: T) -> R:
    """Tokenize; long inputs in a thread (`ModelTokenizer` lets go of the GIL there), so the loop keeps serving
    and several prompts tokenize on several cores at once. A chat template is still rendered under the GIL."""
    if chars < LONG_INPUT_CHARS:
        return encode(arg)
    return await asyncio.to_thread(encode, arg)


def _served(request: web.Request, state: FrontendState, model: str | None) -> ModelTokenizer:
    if model is None:
        raise ApiError(404, "No model is served here.", param="model", code="model_not_found")
    tokenizer = state.tokenizers.get(model)
    if tokenizer is None:
        raise no_such_model(model)
    pooling.refuse_text(state.models[model])
    request[MODEL_LABEL] = model
    return tokenizer


async def generate(request: web.Request, state: FrontendState, p: Plan) -> web.StreamResponse:
    if state.flow is None:
        raise ApiError(503, "The frontend is starting or stopping.", code="not_ready")
    model = p.requests[0].model
    mm = state.metrics.for_model(model)
    mm.in_flight.inc()
    flow = state.flow
    try:
        response = await serve(request, p, flow.flows(p.requests, whole=not p.stream))
        if len(p.outcomes) == len(p.requests):
            prompts = {p.prompt_of[i]: len(r.prompt_ids) for i, r in enumerate(p.requests)}
            mm.input_tokens.inc(sum(prompts.values()))
            for n in prompts.values():
                mm.prompt_len.observe(n)
            mm.output_tokens.inc(sum(o.completion_tokens for o in p.outcomes.values()))
            mm.cached_tokens.inc(p.usage().get("prompt_tokens_details", {}).get("cached_tokens", 0))
            mm.e2e.observe(time.monotonic() - p.requests[0].arrival)
        return response
    finally:
        mm.in_flight.dec()


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
