"""Talking to one engine: POST /v1/completions with a token-id prompt.

A streaming client's request streams from the engine (`stream: true`,
`stream_options.include_usage`); a client that asked for a single JSON answer gets a
single engine answer (`whole=True`): one HTTP response to read instead of a chunk per
token. Either way the caller sees `Piece`s (one, for a whole answer). A worker that dies
mid-answer is a `WorkerFailed`: the flow moves a stream on from its last token and
resends a whole request from the start. A client that disconnects closes the engine
connection, which aborts the request in vLLM (and the mock).

Engine answers are decoded into typed structs (`_Chunk`), once per chunk, not walked as
dicts. Text: the engine's own detokenization is relayed as it is. Token ids: asked for
with `return_token_ids` (vLLM >= 0.10.2 and the mock return them); they are what request
migration appends to the prompt. An engine that does not return them yields pieces with
`token_ids` None.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import msgspec

from dynamo_lite.frontend.http1 import ConnectTimeout, EnginePool, Response
from dynamo_lite.frontend.request import Piece, Sampling, TokenLogprob
from dynamo_lite.protocol import KvTransferParams, RequestId, WorkerRecord

log = logging.getLogger(__name__)
WHOLE_TOKEN_ALLOWANCE_S = 0.25
"""A whole (non-streamed) answer sends nothing until it is done: its read timeout is the
upstream timeout plus this much per token asked for (an engine slower than 4 tokens/s is stuck)."""


class WorkerFailed(Exception):
    """The worker could not be reached or broke off the stream: the request may move elsewhere."""


class UpstreamTimeout(Exception):
    """The worker sent nothing for `upstream_timeout_s`."""


class UpstreamRejected(Exception):
    """The engine refused the request (4xx): the request itself is at fault; not retried."""

    def __init__(self, status: int, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.param = param  # the request field the engine named, if it named one


@dataclass
class StreamUsage:
    """What the engine's usage said (None: it sent none)."""

    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cached_tokens: int | None = None


# --- the engine's answer, typed (vLLM's CompletionResponse / CompletionStreamResponse) -------
class _Details(msgspec.Struct):
    cached_tokens: int | None = None


class _Usage(msgspec.Struct):
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    prompt_tokens_details: _Details | None = None


class _Logprobs(msgspec.Struct):
    tokens: list[str] = []
    token_logprobs: list[float | None] = []
    top_logprobs: list[dict[str, float] | None] = []


class _Choice(msgspec.Struct):
    index: int = 0
    text: str | None = ""
    token_ids: list[int] | None = None
    finish_reason: str | None = None
    stop_reason: int | str | None = None
    logprobs: _Logprobs | None = None


class _Chunk(msgspec.Struct):
    choices: list[_Choice] | None = None
    usage: _Usage | None = None
    error: Any = None


_decode_chunk = msgspec.json.Decoder(_Chunk).decode


class EngineClient:
    def __init__(self, pool: EnginePool, timeout_s: float, connect_timeout_s: float = 5.0) -> None:
        self.pool = pool
        self.timeout_s = timeout_s
        self.connect_timeout_s = connect_timeout_s

    async def stream(self, worker: WorkerRecord, request_id: RequestId, model: str, prompt: list[int],
                     max_tokens: int, sampling: Sampling, kv_transfer_params: KvTransferParams | None,
                     usage: StreamUsage, whole: bool = False) -> AsyncIterator[Piece]:
        """Pieces as the engine sends them (one, when `whole`); fills `usage` from the engine's usage.

        Raises WorkerFailed, UpstreamTimeout or UpstreamRejected. Closing the generator
        early (client gone, stop) closes the connection, which aborts the engine request.
        """
        body: dict[str, Any] = {"model": model, "prompt": prompt, "max_tokens": max_tokens, "stream": not whole,
                                "return_token_ids": True, **sampling.fields()}  # fmt: skip
        if not whole:
            body["stream_options"] = {"include_usage": True}
        if kv_transfer_params is not None:
            body["kv_transfer_params"] = kv_transfer_params
        read_timeout_s = self.timeout_s + (max_tokens * WHOLE_TOKEN_ALLOWANCE_S if whole else 0.0)
        headers = {"X-Request-Id": request_id, "Content-Type": "application/json"}
        echoed = len(prompt) if sampling.echo else 0
        finished = False
        resp: Response | None = None
        try:
            resp = await self.pool.post(worker.engine_url, "/v1/completions", msgspec.json.encode(body), headers,
                                        self.connect_timeout_s, read_timeout_s)
            if resp.status != 200:
                await _raise_for(resp)
            pieces = _chunk_pieces(_decoded(await resp.read()), usage, echoed) if whole else \
                _pieces(resp, usage, echoed)
            async for piece in pieces:
                finished = finished or piece.finish_reason is not None
                yield piece
        except ConnectTimeout as e:  # could not even connect: try another worker
            raise WorkerFailed(f"worker {worker.worker_id}: connect timed out") from e
        except TimeoutError as e:
            raise UpstreamTimeout(f"worker {worker.worker_id} sent nothing for {read_timeout_s:.0f} s") from e
        except OSError as e:  # refused, reset, or the answer broken off (http1.EngineDisconnected)
            if finished:  # the answer is complete; only the trailer (usage, [DONE]) was lost
                log.warning("request %s: worker %s dropped the connection after the last token", request_id,
                            worker.worker_id)
                return
            raise WorkerFailed(f"worker {worker.worker_id}: {type(e).__name__}: {e}") from e
        finally:
            if resp is not None:
                resp.close()  # after a whole answer read to its end, a no-op; else it aborts the request
        if not finished:
            raise WorkerFailed(f"worker {worker.worker_id}: stream ended before the request finished")


async def _raise_for(resp: Response) -> None:
    text = (await resp.read()).decode("utf-8", "replace")
    message, param = text[:500], None
    try:
        payload = msgspec.json.decode(text)
        error = payload.get("error") if isinstance(payload, dict) else None
        message = str(error.get("message", error) if isinstance(error, dict) else payload.get("message", message))
        if isinstance(error, dict) and isinstance(error.get("param"), str):
            param = error["param"]
    except (msgspec.DecodeError, AttributeError):
        pass
    if resp.status == 404:  # not the client's fault: this worker does not serve the model (or the route)
        raise WorkerFailed(f"engine answered 404: {message}")
    if 400 <= resp.status < 500:
        raise UpstreamRejected(resp.status, message, param)
    raise WorkerFailed(f"engine answered {resp.status}: {message}")


def _decoded(data: bytes) -> _Chunk:
    try:
        return _decode_chunk(data)
    except (msgspec.DecodeError, msgspec.ValidationError) as e:
        raise WorkerFailed(f"engine sent an answer that is not a completion: {e}") from None


async def _pieces(resp: Response, usage: StreamUsage, echoed: int = 0) -> AsyncIterator[Piece]:
    """The engine's SSE chunks as pieces; with `echoed` prompt tokens, the first chunk's leading logprobs are theirs."""
    async with contextlib.aclosing(resp.lines()) as lines:
        async for line in lines:
            if not line.startswith(b"data:"):
                continue
            data = line[5:].strip()
            if data == b"[DONE]":
                break
            async for piece in _chunk_pieces(_decoded(data), usage, echoed):
                echoed = 0
                yield piece
        else:
            return
    await resp.read()  # after [DONE], the stream's end (its last chunk), so that the connection is kept


async def _chunk_pieces(chunk: _Chunk, usage: StreamUsage, echoed: int) -> AsyncIterator[Piece]:
    """One chunk (or a whole answer) as pieces; fills `usage` when it carries one."""
    if chunk.error is not None:
        error = chunk.error
        raise WorkerFailed(f"engine error mid-stream: {error.get('message', error) if isinstance(error, dict) else error}")
    if chunk.usage is not None:
        u = chunk.usage
        usage.prompt_tokens = u.prompt_tokens
        usage.completion_tokens = u.completion_tokens
        usage.cached_tokens = u.prompt_tokens_details.cached_tokens if u.prompt_tokens_details else None
    for choice in chunk.choices or ():
        logprobs = prompt_logprobs = None
        if choice.logprobs is not None:
            logprobs = token_logprobs(choice.logprobs)
            if echoed:
                prompt_logprobs, logprobs = logprobs[:echoed], logprobs[echoed:]
                echoed = 0
        text = choice.text or ""
        if choice.finish_reason == "abort":
            # The frontend aborts only by closing the connection, so this is the engine giving
            # up on its own (a worker shutting down aborts what it runs): like a dead worker.
            if text or choice.token_ids:
                yield Piece(text, choice.token_ids, None, logprobs, prompt_logprobs)
            raise WorkerFailed("engine aborted the request (shutting down?)")
        yield Piece(text, choice.token_ids, choice.finish_reason, logprobs, prompt_logprobs, choice.stop_reason,
                    choice.index)


def token_logprobs(body: _Logprobs) -> list[TokenLogprob | None]:
    """Completions-style logprobs whose tokens are `token_id:N` (return_tokens_as_token_ids) as typed entries, the
    alternatives in the engine's order."""
    out: list[TokenLogprob | None] = []
    for token, logprob, top in zip(body.tokens, body.token_logprobs, body.top_logprobs, strict=False):
        if logprob is None:
            out.append(None)  # the first prompt token has none
            continue
        alternatives = tuple((_token_id(t), lp) for t, lp in (top or {}).items())
        out.append(TokenLogprob(_token_id(token), logprob, alternatives))
    return out


def _token_id(token: str) -> int:
    try:
        return int(token.rsplit(":", 1)[1])
    except (IndexError, ValueError):
        raise WorkerFailed(f"engine returned logprob token {token[:40]!r}, not token_id:N") from None
