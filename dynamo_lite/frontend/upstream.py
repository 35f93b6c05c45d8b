"""Talking to one engine: POST /v1/completions with a token-id prompt, streamed back.

Every engine request streams (`stream: true`, `stream_options.include_usage`),
also for a client that asked for a single JSON answer: the frontend notices a
dead worker mid-answer the same way in both cases, and a client that disconnects
closes the engine connection, which aborts the request in vLLM (and the mock).

Text: the engine's own detokenization is relayed as it is. Token ids: asked for
with `return_token_ids` (vLLM >= 0.10.2 and the mock return them per chunk);
they are what request migration appends to the prompt. An engine that does not
return them yields pieces with `token_ids` None.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import aiohttp
import msgspec

from dynamo_lite.frontend.request import Piece, Sampling, TokenLogprob
from dynamo_lite.protocol import KvTransferParams, RequestId, WorkerRecord

log = logging.getLogger(__name__)


class WorkerFailed(Exception):
    """The worker could not be reached or broke off the stream: the request may move elsewhere."""


class UpstreamTimeout(Exception):
    """The worker sent nothing for `upstream_timeout_s`."""


class UpstreamRejected(Exception):
    """The engine refused the request (4xx): the request itself is at fault; not retried."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass
class StreamUsage:
    """What the engine's final usage chunk said (None: it sent none)."""

    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cached_tokens: int | None = None


class EngineClient:
    def __init__(self, session: aiohttp.ClientSession, timeout_s: float, connect_timeout_s: float = 5.0) -> None:
        self.session = session
        self.timeout = aiohttp.ClientTimeout(total=None, sock_connect=connect_timeout_s, sock_read=timeout_s)

    async def stream(self, worker: WorkerRecord, request_id: RequestId, model: str, prompt: list[int],
                     max_tokens: int, sampling: Sampling, kv_transfer_params: KvTransferParams | None,
                     usage: StreamUsage) -> AsyncIterator[Piece]:
        """Pieces as the engine sends them; fills `usage` from the final chunk.

        Raises WorkerFailed, UpstreamTimeout or UpstreamRejected. Closing the generator
        early (client gone, stop) closes the connection, which aborts the engine request.
        """
        body: dict[str, Any] = {
            "model": model, "prompt": prompt, "max_tokens": max_tokens, "stream": True,
            "stream_options": {"include_usage": True}, "return_token_ids": True, **sampling.fields(),
        }  # fmt: skip
        if kv_transfer_params is not None:
            body["kv_transfer_params"] = kv_transfer_params
        url = f"{worker.engine_url}/v1/completions"
        headers = {"X-Request-Id": request_id, "Content-Type": "application/json"}
        finished = False
        try:
            async with self.session.post(url, data=msgspec.json.encode(body), headers=headers,
                                         timeout=self.timeout) as resp:
                if resp.status != 200:
                    await _raise_for(resp)
                try:
                    async for piece in _pieces(resp, usage, len(prompt) if sampling.echo else 0):
                        finished = finished or piece.finish_reason is not None
                        yield piece
                finally:
                    if not finished:
                        resp.close()  # abort: drop the connection rather than read the rest
        except aiohttp.ConnectionTimeoutError as e:  # could not even connect: try another worker
            raise WorkerFailed(f"worker {worker.worker_id}: connect timed out") from e
        except TimeoutError as e:
            raise UpstreamTimeout(f"worker {worker.worker_id} sent nothing for {self.timeout.sock_read:.0f} s") from e
        except (aiohttp.ClientError, ConnectionError) as e:
            if finished:  # the answer is complete; only the trailer (usage, [DONE]) was lost
                log.warning("request %s: worker %s dropped the connection after the last token", request_id,
                            worker.worker_id)
                return
            raise WorkerFailed(f"worker {worker.worker_id}: {type(e).__name__}: {e}") from e
        if not finished:
            raise WorkerFailed(f"worker {worker.worker_id}: stream ended before the request finished")


async def _raise_for(resp: aiohttp.ClientResponse) -> None:
    text = await resp.text(errors="replace")
    message = text[:500]
    try:
        payload = msgspec.json.decode(text)
        error = payload.get("error") if isinstance(payload, dict) else None
        message = str(error.get("message", error) if isinstance(error, dict) else payload.get("message", message))
    except (msgspec.DecodeError, AttributeError):
        pass
    if resp.status == 404:  # not the client's fault: this worker does not serve the model (or the route)
        raise WorkerFailed(f"engine answered 404: {message}")
    if 400 <= resp.status < 500:
        raise UpstreamRejected(resp.status, message)
    raise WorkerFailed(f"engine answered {resp.status}: {message}")


async def _pieces(resp: aiohttp.ClientResponse, usage: StreamUsage, echoed: int = 0) -> AsyncIterator[Piece]:
    """The engine's chunks as pieces; with `echoed` prompt tokens, the first chunk's leading logprobs are theirs."""
    async for line in resp.content:
        if not line.startswith(b"data:"):
            continue
        data = line[5:].strip()
        if data == b"[DONE]":
            return
        chunk = msgspec.json.decode(data)
        if "error" in chunk:
            error = chunk["error"]
            raise WorkerFailed(f"engine error mid-stream: {error.get('message', error) if isinstance(error, dict) else error}")
        if chunk.get("usage"):
            u = chunk["usage"]
            usage.prompt_tokens = u.get("prompt_tokens")
            usage.completion_tokens = u.get("completion_tokens")
            usage.cached_tokens = (u.get("prompt_tokens_details") or {}).get("cached_tokens")
        for choice in chunk.get("choices") or ():
            reason = choice.get("finish_reason")
            logprobs = prompt_logprobs = None
            if choice.get("logprobs"):
                logprobs = token_logprobs(choice["logprobs"])
                if echoed:
                    prompt_logprobs, logprobs = logprobs[:echoed], logprobs[echoed:]
                    echoed = 0
            if reason == "abort":
                # The frontend aborts only by closing the connection, so this is the engine giving
                # up on its own (a worker shutting down aborts what it runs): like a dead worker.
                if choice.get("text") or choice.get("token_ids"):
                    yield Piece(choice.get("text") or "", choice.get("token_ids"), None, logprobs, prompt_logprobs)
                raise WorkerFailed("engine aborted the request (shutting down?)")
            yield Piece(choice.get("text") or "", choice.get("token_ids"), reason, logprobs, prompt_logprobs,
                        choice.get("stop_reason"))


def token_logprobs(body: dict[str, Any]) -> list[TokenLogprob | None]:
    """Completions-style logprobs whose tokens are `token_id:N` (return_tokens_as_token_ids) as typed entries."""
    out: list[TokenLogprob | None] = []
    for token, logprob, top in zip(body.get("tokens") or (), body.get("token_logprobs") or (),
                                   body.get("top_logprobs") or (), strict=False):  # fmt: skip
        if logprob is None:
            out.append(None)  # the first prompt token has none
            continue
        alternatives = sorted(((_token_id(t), lp) for t, lp in (top or {}).items()), key=lambda a: -a[1])
        out.append(TokenLogprob(_token_id(token), logprob, tuple(alternatives)))
    return out


def _token_id(token: str) -> int:
    try:
        return int(token.rsplit(":", 1)[1])
    except (IndexError, ValueError):
        raise WorkerFailed(f"engine returned logprob token {token[:40]!r}, not token_id:N") from None
