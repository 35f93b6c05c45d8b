"""Reading an engine's SSE stream: tokens, usage, and the endings that mean the worker failed."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import pytest

from dynamo_lite.frontend.upstream import StreamUsage, UpstreamRejected, WorkerFailed, _pieces, _raise_for


class FakeResponse:
    """An engine answer's lines, as `http1.Response.lines()` gives them (the transport is tested in test_http1.py)."""

    def __init__(self, *chunks: object) -> None:
        self._lines = [b"data: " + (c if isinstance(c, bytes) else json.dumps(c).encode()) for c in chunks]

    async def lines(self) -> AsyncIterator[bytes]:
        for line in self._lines:
            yield line
            yield b""

    async def read(self) -> bytes:
        return b""


def chunk(text: str, ids: list[int], finish: str | None = None) -> dict:
    return {"choices": [{"index": 0, "text": text, "token_ids": ids, "finish_reason": finish}]}


async def read(resp: FakeResponse, usage: StreamUsage) -> list:
    return [p async for p in _pieces(resp, usage)]  # type: ignore[arg-type]


async def test_tokens_finish_and_usage() -> None:
    usage = StreamUsage()
    resp = FakeResponse(chunk("a", [1]), chunk("b", [2], "length"),
                        {"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 2,
                                                  "prompt_tokens_details": {"cached_tokens": 4}}}, b"[DONE]")
    pieces = await read(resp, usage)
    assert [(p.text, p.token_ids, p.finish_reason) for p in pieces] == [("a", [1], None), ("b", [2], "length")]
    assert (usage.prompt_tokens, usage.completion_tokens, usage.cached_tokens) == (5, 2, 4)


async def test_an_engine_abort_is_a_worker_failure_after_its_last_tokens() -> None:
    """A worker shutting down aborts what it runs; the request must move on, not end early."""
    got = []
    with pytest.raises(WorkerFailed, match="aborted"):
        async for piece in _pieces(FakeResponse(chunk("a", [1]), chunk("b", [2], "abort")), StreamUsage()):  # type: ignore[arg-type]
            got.append(piece)
    assert [(p.text, p.finish_reason) for p in got] == [("a", None), ("b", None)]


async def test_an_error_event_is_a_worker_failure() -> None:
    with pytest.raises(WorkerFailed, match="engine error mid-stream: boom"):
        await read(FakeResponse(chunk("a", [1]), {"error": {"message": "boom"}}), StreamUsage())


class FakeErrorResponse:
    def __init__(self, status: int, message: str) -> None:
        self.status = status
        self.body = json.dumps({"error": {"message": message}})

    async def read(self) -> bytes:
        return self.body.encode()


async def test_an_engine_404_is_a_worker_failure_other_4xx_the_clients() -> None:
    """A worker that does not serve the model is the fleet's problem (move on), a bad prompt the client's."""
    with pytest.raises(WorkerFailed, match="404: The model `m` does not exist"):
        await _raise_for(FakeErrorResponse(404, "The model `m` does not exist."))  # type: ignore[arg-type]
    with pytest.raises(UpstreamRejected):
        await _raise_for(FakeErrorResponse(400, "prompt too long"))  # type: ignore[arg-type]
    with pytest.raises(WorkerFailed, match="503"):
        await _raise_for(FakeErrorResponse(503, "overloaded"))  # type: ignore[arg-type]
