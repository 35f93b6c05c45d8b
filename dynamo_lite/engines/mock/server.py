"""The mock engine's HTTP server: vLLM's endpoints over a `MockEngine`.

`build_app(args)` builds one engine (wiring.py) and ties its lifetime to the
app's (aiohttp cleanup_ctx); on shutdown in-flight requests are aborted first.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any, TypeVar

import msgspec
import pydantic
from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from dynamo_lite.engines.mock import nixl, output, pooling
from dynamo_lite.engines.mock.args import MockEngineArgs
from dynamo_lite.engines.mock.blocks import hash_blocks
from dynamo_lite.engines.mock.engine import RequestStream
from dynamo_lite.engines.mock.job import Job, Writer
from dynamo_lite.engines.mock.openai_api import (
    ChatRequest,
    ChatShape,
    CompletionRequest,
    CompletionShape,
    GenerateRequest,
    GenerateShape,
    Result,
    Shape,
    TokenizeRequest,
    usage,
)  # fmt: skip
from dynamo_lite.engines.mock.pooling import EmbeddingRequest
from dynamo_lite.engines.mock.sequence import FinishReason, Sequence, output_key
from dynamo_lite.engines.mock.tokenizer import render_chat
from dynamo_lite.engines.mock.wiring import ServerState, build_state

log = logging.getLogger(__name__)


STATE = web.AppKey("state", ServerState)
M = TypeVar("M", bound=pydantic.BaseModel)


class ApiError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def build_app(args: MockEngineArgs, registry: CollectorRegistry | None = None) -> web.Application:
    app = web.Application(middlewares=[_errors])
    app[STATE] = build_state(args, registry)
    app.cleanup_ctx.append(_engine_ctx)
    app.on_shutdown.append(_abort_all)
    app.router.add_get("/health", _health)
    app.router.add_get("/version", _version)
    app.router.add_get("/v1/models", _models)
    app.router.add_get("/metrics", _metrics)
    if args.runner == "pooling":  # (as vLLM: a pooling model's server has no text routes, a text model's no pooling)
        app.router.add_post("/v1/embeddings", _embeddings)
    else:
        app.router.add_post("/inference/v1/generate", _generate)
        app.router.add_post("/v1/completions", _completions)
        app.router.add_post("/v1/chat/completions", _chat)
    app.router.add_post("/inference/v1/abort_requests", _abort_requests)
    app.router.add_post("/reset_prefix_cache", _reset_prefix_cache)
    app.router.add_post("/tokenize", _tokenize)
    return app


async def _engine_ctx(app: web.Application) -> AsyncIterator[None]:
    engine = app[STATE].engine
    await engine.start()
    yield
    await engine.stop()


async def _abort_all(app: web.Application) -> None:
    app[STATE].engine.abort_external(None)


@web.middleware
async def _errors(request: web.Request, handler: Any) -> web.StreamResponse:
    try:
        return await handler(request)
    except ApiError as e:
        kind = "NotFoundError" if e.status == 404 else "BadRequestError"
        return _json({"error": {"message": str(e), "type": kind, "param": None, "code": e.status}}, e.status)


def _json(data: Any, status: int = 200) -> web.Response:
    return web.Response(body=msgspec.json.encode(data), status=status, content_type="application/json")


async def _parse(request: web.Request, model: type[M]) -> M:
    try:
        return model.model_validate_json(await request.read())
    except pydantic.ValidationError as e:
        raise ApiError(400, str(e)) from e


def _check_model(state: ServerState, name: str | None) -> str:
    if name is not None and name != state.args.model_name:
        raise ApiError(404, f"The model `{name}` does not exist.")
    return state.args.model_name


# --- endpoints ----------------------------------------------------------------------
async def _health(request: web.Request) -> web.Response:
    return web.Response()


async def _version(request: web.Request) -> web.Response:
    return _json({"version": "0.32.0+dynamo_lite.mock"})


async def _models(request: web.Request) -> web.Response:
    args = request.app[STATE].args
    card = {"id": args.model_name, "object": "model", "created": int(time.time()), "owned_by": "vllm",
            "root": args.model, "parent": None, "max_model_len": args.max_model_len}  # fmt: skip
    return _json({"object": "list", "data": [card]})


async def _metrics(request: web.Request) -> web.Response:
    body = generate_latest(request.app[STATE].registry)
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})


async def _generate(request: web.Request) -> web.StreamResponse:
    state = request.app[STATE]
    body = await _parse(request, GenerateRequest)
    model = _check_model(state, body.model)
    sp = body.sampling_params
    rid = "generate-tokens-" + (request.headers.get("X-Request-Id") or body.request_id or uuid.uuid4().hex)
    job = Job(body.token_ids, sp.max_tokens, frozenset(sp.stop_token_ids or ()), sp.seed, sp.n, body.stream,
              bool(body.stream_options and body.stream_options.include_usage), body.kv_transfer_params)  # fmt: skip
    return await _serve(request, state, job, GenerateShape(job.stop_ids), rid, model)


async def _completions(request: web.Request) -> web.StreamResponse:
    state = request.app[STATE]
    body = await _parse(request, CompletionRequest)
    model = _check_model(state, body.model)
    prompt = body.prompt
    if isinstance(prompt, list) and prompt and not isinstance(prompt[0], int):
        if len(prompt) != 1:
            raise ApiError(400, "the mock engine serves one prompt per request")
        prompt = prompt[0]
    ids = state.tokenizer.encode(prompt) if isinstance(prompt, str) else list(prompt)  # type: ignore[arg-type]
    job = _job(state, body, ids, body.max_tokens)
    rid = "cmpl-" + (request.headers.get("X-Request-Id") or body.request_id or uuid.uuid4().hex)
    shape = CompletionShape(job.stop_ids, body.return_token_ids, int(time.time()))
    return await _serve(request, state, job, shape, rid, model)


async def _chat(request: web.Request) -> web.StreamResponse:
    state = request.app[STATE]
    body = await _parse(request, ChatRequest)
    model = _check_model(state, body.model)
    ids = state.tokenizer.encode(render_chat([(m.role, m.text()) for m in body.messages]))
    job = _job(state, body, ids, body.max_completion_tokens or body.max_tokens)
    rid = "chatcmpl-" + (request.headers.get("X-Request-Id") or body.request_id or uuid.uuid4().hex)
    shape = ChatShape(job.stop_ids, body.return_token_ids, int(time.time()))
    return await _serve(request, state, job, shape, rid, model)


async def _embeddings(request: web.Request) -> web.Response:
    state = request.app[STATE]
    body = await _parse(request, EmbeddingRequest)
    model = _check_model(state, body.model)
    if body.dimensions is not None:
        raise ApiError(400, f"Model '{model}' does not support Matryoshka embeddings; dimensions must be unset "
                            f"(received dimensions={body.dimensions}).")  # fmt: skip
    prompts = body.prompts(state.tokenizer.encode)
    if not prompts:
        raise ApiError(400, "The input cannot be empty")
    rid = "embd-" + (request.headers.get("X-Request-Id") or body.request_id or uuid.uuid4().hex)
    jobs = [Job(prompt=ids, max_tokens=1, stop_ids=frozenset(), seed=None, n=1, stream=False, include_usage=False,
                kv_transfer_params=None) for ids in prompts]  # a prefill each, and the one step it takes
    runs = [_sequence(state, job, f"{rid}-{i}")[0] for i, job in enumerate(jobs)]  # (each checked before any runs)
    async with asyncio.TaskGroup() as group:
        for seq in runs:
            group.create_task(_prefilled(state, seq, rid))
    vectors = [pooling.embedding(ids, state.args.embedding_size, state.args.seed) for ids in prompts]
    return _json(pooling.answer(rid, model, int(time.time()), vectors, body.encoding_format, sum(map(len, prompts))))


async def _prefilled(state: ServerState, seq: Sequence, rid: str) -> None:
    """Until the engine has run `seq` (its prompt, and the one step it asks for)."""
    stream = state.engine.submit(seq, rid)
    try:
        async for _ in stream.batches():
            pass
    finally:
        if seq.finish_reason is None:
            state.engine.abort(seq.request_id)  # the client went away or the server is stopping


async def _tokenize(request: web.Request) -> web.Response:
    """vLLM's /tokenize (routers such as vllm-router's cache_aware and kv_aware ask every worker)."""
    state = request.app[STATE]
    body = await _parse(request, TokenizeRequest)
    _check_model(state, body.model)
    if (body.prompt is None) == (body.messages is None):
        raise ApiError(400, "give exactly one of 'prompt' and 'messages'")
    text = body.prompt if body.prompt is not None else render_chat([(m.role, m.text()) for m in body.messages or []])
    ids = state.tokenizer.encode(text)
    strs = [state.tokenizer.decode([t]) for t in ids] if body.return_token_strs else None
    return _json({"count": len(ids), "max_model_len": state.args.max_model_len, "tokens": ids, "token_strs": strs})


async def _abort_requests(request: web.Request) -> web.Response:
    body = await request.json()
    ids = body.get("request_ids") if isinstance(body, dict) else None
    if ids is None:
        raise ApiError(400, "Missing 'request_ids' in request body")
    request.app[STATE].engine.abort_external(ids or None)
    return web.Response()


async def _reset_prefix_cache(request: web.Request) -> web.Response:
    if not request.app[STATE].engine.reset_prefix_cache():
        raise ApiError(400, "cannot reset the prefix cache while requests hold blocks")
    return web.Response()


# --- running one request -----------------------------------------------------------------
def _job(state: ServerState, body: CompletionRequest | ChatRequest, ids: list[int], max_tokens: int | None) -> Job:
    opts = body.stream_options
    if isinstance(body, ChatRequest):
        logprobs, echo = (body.top_logprobs if body.logprobs else None), False
    else:
        logprobs, echo = body.logprobs, body.echo
    return Job(ids, max_tokens, frozenset(body.stop_token_ids or ()), body.seed, body.n, body.stream,
               bool(opts and opts.include_usage), body.kv_transfer_params, body.stop_list(),
               body.include_stop_str_in_output, body.ignore_eos, body.min_tokens, logprobs, echo,
               body.return_tokens_as_token_ids, body.vllm_xargs, body.structured(),
               bool(opts and opts.continuous_usage_stats), body.use_beam_search,
               tuple(body.logprob_token_ids or ()))  # fmt: skip


def _sequence(state: ServerState, job: Job, rid: str) -> tuple[Sequence, list[str]]:
    """Validate a job like vLLM does and build its Sequence (and scripted text pieces); ApiError(400) if it
    cannot run."""
    args = state.args
    if job.n != 1:
        raise ApiError(400, "the mock engine supports n=1 only")
    if not job.prompt:
        raise ApiError(400, "The prompt cannot be empty")
    max_tokens = job.max_tokens or args.max_model_len - len(job.prompt)
    if len(job.prompt) + max_tokens > args.max_model_len:
        raise ApiError(400, f"This model's maximum context length is {args.max_model_len} tokens. However, you "
                            f"requested {len(job.prompt) + max_tokens} tokens ({len(job.prompt)} in the messages, "
                            f"{max_tokens} in the completion).")  # fmt: skip
    if -(-(len(job.prompt) + max_tokens) // args.block_size) > args.num_gpu_blocks:
        raise ApiError(400, f"request needs more than the engine's {args.num_gpu_blocks} KV blocks")
    try:
        remote = nixl.parse_remote_kv(job.kv_transfer_params) if state.connector else None
    except ValueError as e:
        raise ApiError(400, str(e)) from e
    key = output_key(args.seed if job.seed is None else job.seed, job.prompt)
    try:
        script = output.script_for(job.xargs, job.structured, key)
    except ValueError as e:  # a JSON schema that is not JSON, as vLLM refuses it
        raise ApiError(400, f"Invalid structured outputs: {e}") from e
    pieces = output.script_pieces(script) if script is not None else []
    return Sequence(
        request_id=state.engine.internal_id(rid), prompt=job.prompt, max_tokens=max_tokens,
        output_key=key, arrival=0.0, stop_token_ids=job.stop_ids, vocab_size=args.vocab_size, remote_kv=remote,
        for_remote_decode=state.connector and nixl.wants_remote_decode(job.kv_transfer_params),
        prompt_hashes=hash_blocks(job.prompt, args.block_size, args.seed),
        script=tuple(state.tokenizer.encode(p)[0] if p.strip() else 0 for p in pieces),
        eos_token_id=args.vocab_size if script is not None else None, ignore_eos=job.ignore_eos,
        min_tokens=job.min_tokens,
    ), pieces


def _result(state: ServerState, seq: Sequence, rid: str, model: str) -> Result:
    args = state.args
    cached = nixl.cached_tokens(seq) if args.enable_prompt_tokens_details else None
    params = None
    if seq.for_remote_decode and seq.finish_reason in (FinishReason.STOP, FinishReason.LENGTH):
        params = nixl.producer_params(seq, state.engine_id, args.nixl_side_channel_host, args.nixl_side_channel_port)
    reason = seq.finish_reason.value if seq.finish_reason else "abort"
    use = usage(len(seq.prompt), len(seq.output), cached)
    return Result(rid, model, seq.prompt, list(seq.output), reason, use, params)


async def _serve(
    request: web.Request, state: ServerState, job: Job, shape: Shape, rid: str, model: str
) -> web.StreamResponse:
    if job.beam_search:
        return _json(await _beam_search(state, job, shape, rid, model))
    seq, pieces = _sequence(state, job, rid)
    if not job.stream:
        return _json(await _whole(state, job, seq, pieces, shape, rid, model))
    stream = state.engine.submit(seq, rid)
    try:
        return await _stream(request, state, stream, shape, rid, model, Writer(state, job, seq, pieces))
    finally:
        if seq.finish_reason is None:
            state.engine.abort(seq.request_id)  # the client went away or the server is stopping


async def _beam_search(state: ServerState, job: Job, shape: Shape, rid: str, model: str) -> dict[str, Any]:
    """`use_beam_search` with `n` beams, answered whole as vLLM answers it, in the mock's terms: `n` sequences of
    the prompt (seeds seed .. seed + n - 1), run at once. The mock has no model to score beams with: this is the
    load and the shape of a beam search, not what one finds."""
    if job.stream:
        raise ApiError(400, "Streaming is not currently supported with beam search")
    seed = state.args.seed if job.seed is None else job.seed
    beams = [replace(job, n=1, seed=seed + i, beam_search=False) for i in range(job.n)]
    runs = [(b, *_sequence(state, b, rid)) for b in beams]  # (each checked before any runs)
    async with asyncio.TaskGroup() as group:  # one failing (or the client gone) ends them all
        tasks = [group.create_task(_whole(state, b, seq, pieces, shape, rid, model)) for b, seq, pieces in runs]
    answers = [t.result() for t in tasks]
    out = answers[0]
    out["choices"] = [{**a["choices"][0], "index": i} for i, a in enumerate(answers)]
    done = sum(a["usage"]["completion_tokens"] for a in answers)
    out["usage"] = {**out["usage"], "completion_tokens": done, "total_tokens": out["usage"]["prompt_tokens"] + done}
    return out


async def _whole(state: ServerState, job: Job, seq: Sequence, pieces: list[str], shape: Shape, rid: str,
                 model: str) -> dict[str, Any]:  # fmt: skip
    """One request's answer, whole."""
    stream = state.engine.submit(seq, rid)
    writer = Writer(state, job, seq, pieces)
    try:
        texts: list[str] = []
        lps: list[dict[str, Any]] = []
        async for events in stream.batches():
            text, lp = writer.chunk([e.token_id for e in events if e.token_id is not None])
            texts.append(text)
            lps += [lp] if lp else []
            if _stopped(state, writer):
                break
        result = _result(state, seq, rid, model)
        logprobs = {k: [v for lp in lps for v in lp[k]] for k in lps[0]} if lps else None
        return shape.full(result, "".join(texts), logprobs, writer.text.stopped)
    finally:
        if seq.finish_reason is None:
            state.engine.abort(seq.request_id)  # the client went away or the server is stopping


def _stopped(state: ServerState, writer: Writer) -> bool:
    """A stop string ended the text: end the engine request too, as vLLM's output processor does."""
    if writer.text.stopped is None or writer.seq.finish_reason is not None:
        return writer.text.stopped is not None
    state.engine.abort(writer.seq.request_id, FinishReason.STOP)
    return True


async def _stream(request: web.Request, state: ServerState, stream: RequestStream, shape: Shape, rid: str,
                  model: str, writer: Writer) -> web.StreamResponse:  # fmt: skip
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
    await resp.prepare(request)
    job = writer.job
    async for events in stream.batches():
        ids = [e.token_id for e in events if e.token_id is not None]
        reason = events[-1].finish_reason
        text, lp = writer.chunk(ids)
        stop = writer.text.stopped
        if _stopped(state, writer):
            reason = FinishReason.STOP
        chunks = shape.chunks(rid, model, ids, text, reason.value if reason else None, lp, stop)
        if job.continuous_usage:
            for c in chunks:
                c["usage"] = usage(len(stream.seq.prompt), len(stream.seq.output), None)
        await resp.write(b"".join(b"data: " + msgspec.json.encode(c) + b"\n\n" for c in chunks))
        if stop is not None:
            break
    if job.include_usage:
        result = _result(state, stream.seq, rid, model)
        await resp.write(b"data: " + msgspec.json.encode(shape.usage_chunk(rid, model, result.usage)) + b"\n\n")
    await resp.write(b"data: [DONE]\n\n")
    await resp.write_eof()
    return resp
