"""A frontend app on a fake fleet: real tokenizer, validation and HTTP; engines and the queue faked."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from dynamo_lite.config import FrontendSpec, ModelSpec
from dynamo_lite.discovery import WorkerChange
from dynamo_lite.frontend.app import STATE, FrontendConfig, build_app
from dynamo_lite.frontend.flow import RequestFlow
from dynamo_lite.frontend.request import Piece
from dynamo_lite.frontend.tokenizer import ModelTokenizer
from dynamo_lite.frontend.tools import ParsedCall
from dynamo_lite.frontend.upstream import StreamUsage, UpstreamTimeout, WorkerFailed
from dynamo_lite.protocol import JobId, PrefillResult, Role, WorkerId, WorkerRecord
from dynamo_lite.queue import PrefillError, QueueDepth


@pytest.fixture(scope="session")
def tokenizer(tmp_path_factory: pytest.TempPathFactory) -> ModelTokenizer:
    from dynamo_lite.engines.models.tiny import train_tokenizer

    out = tmp_path_factory.mktemp("tiny-tokenizer")
    train_tokenizer(out)
    (out / "config.json").write_text(json.dumps({"model_type": "llama"}))
    return ModelTokenizer(out)


@dataclass
class Script:
    """What a fake worker does with a request: emit `pieces`, then fail (or time out) if told to."""

    pieces: list[Piece]
    fail_after: int | None = None  # raise WorkerFailed after this many pieces
    timeout: bool = False
    cached_tokens: int = 0
    gate: asyncio.Event | None = None  # if set, the worker waits for it before its first piece


@dataclass
class FakeEngines:
    scripts: dict[str, Script] = field(default_factory=dict)
    calls: list[dict] = field(default_factory=list)
    closed: list[str] = field(default_factory=list)

    async def stream(self, worker: WorkerRecord, request_id: str, model: str, prompt: list[int], max_tokens: int,
                     sampling: object, kv_transfer_params: object, usage: StreamUsage,
                     whole: bool = False) -> AsyncIterator[Piece]:  # fmt: skip
        """The script's pieces; `whole`: all of them as one piece at the end, as a non-streamed answer."""
        self.calls.append({"worker": worker.worker_id, "prompt": prompt, "max_tokens": max_tokens,
                           "kv": kv_transfer_params, "whole": whole, "sampling": sampling})
        if whole:
            got = [p async for p in self._script(worker, usage)]
            ids = [i for p in got for i in (p.token_ids or ())] if all(p.token_ids is not None for p in got) else None
            yield Piece("".join(p.text for p in got), ids, got[-1].finish_reason if got else None,
                        stop_reason=got[-1].stop_reason if got else None)
            return
        async for piece in self._script(worker, usage):
            yield piece

    async def _script(self, worker: WorkerRecord, usage: StreamUsage) -> AsyncIterator[Piece]:
        script = self.scripts[worker.worker_id]
        if script.timeout:
            raise UpstreamTimeout("fake timeout")
        finished = False
        try:
            if script.gate is not None:
                await script.gate.wait()
            for i, piece in enumerate(script.pieces):
                if script.fail_after is not None and i >= script.fail_after:
                    raise WorkerFailed("fake worker died")
                finished = piece.finish_reason is not None
                if finished:
                    usage.cached_tokens = script.cached_tokens
                yield piece
        finally:
            if not finished:
                self.closed.append(worker.worker_id)


@dataclass
class FakeSubmitter:
    pending: int = 0
    fail: bool = False
    jobs: list[list[int]] = field(default_factory=list)

    async def depth(self, model: str) -> QueueDepth:
        return QueueDepth(pending=self.pending, in_flight=0)

    async def prefill(self, request_id: str, model: str, token_ids: list[int], timeout_s: float) -> PrefillResult:
        self.jobs.append(token_ids)
        if self.fail:
            raise PrefillError("fake prefill failure")
        return PrefillResult(job_id=JobId("j"), kv_transfer_params={"do_remote_prefill": True})


def record(worker_id: str, role: Role = Role.DECODE, model: str = "m") -> WorkerRecord:
    return WorkerRecord(worker_id=WorkerId(worker_id), role=role, model=model, engine_url=f"http://{worker_id}",
                        block_size=16)


def pieces(n: int, reason: str = "length") -> list[Piece]:
    return [Piece(f" w{i}", [100 + i], reason if i == n - 1 else None) for i in range(n)]


@dataclass
class Harness:
    client: TestClient
    app: web.Application
    engines: FakeEngines
    submitter: FakeSubmitter

    def add_worker(self, worker_id: str, role: Role = Role.DECODE, model: str = "m", script: Script | None = None) -> None:
        self.app[STATE].fleet.on_worker_change(WorkerChange(WorkerId(worker_id), record(worker_id, role, model), None))
        if script is not None:
            self.engines.scripts[worker_id] = script

    async def metric(self, name: str, **labels: str) -> float:
        text = await (await self.client.get("/metrics")).text()
        total = 0.0
        for line in text.splitlines():
            if line.startswith(name + "{") or line.startswith(name + " "):
                if all(f'{k}="{v}"' in line for k, v in labels.items()):
                    total += float(line.rsplit(" ", 1)[1])
        return total


MakeHarness = Callable[..., "AsyncIterator[Harness]"]


@pytest.fixture
async def harness(tokenizer: ModelTokenizer) -> AsyncIterator[Callable[..., object]]:
    """`await harness(model=m_fields, **frontend_spec_fields)` -> a started Harness (models m: 256 tokens, agg);
    `tok`: m's tokenizer, if not the tiny one."""
    clients: list[TestClient] = []

    async def make(api_keys: frozenset[str] = frozenset(), model: dict[str, Any] | None = None,
                   tok: ModelTokenizer | None = None, **frontend: object) -> Harness:  # fmt: skip
        engines, submitter = FakeEngines(), FakeSubmitter()
        models = (ModelSpec(**{"name": "m", "path": "x", "max_model_len": 256, **(model or {})}),
                  ModelSpec(name="agg", path="x"))
        spec = FrontendSpec.model_validate({"max_body_bytes": 65536, **frontend})
        config = FrontendConfig("test", "nats://unused:1", "http://unused:1", models, spec)

        async def fake_connections(app: web.Application) -> AsyncIterator[None]:
            state = app[STATE]
            state.flow = RequestFlow(state.fleet, engines, submitter, state.metrics, config.flow_settings())  # type: ignore[arg-type]
            yield
            state.flow = None

        app = build_app(config, {"m": tok or tokenizer, "agg": tokenizer}, connections=fake_connections,
                        api_keys=api_keys)
        client = TestClient(TestServer(app, handler_cancellation=True))
        await client.start_server()
        clients.append(client)
        return Harness(client, app, engines, submitter)

    yield make
    for c in clients:
        await c.close()


def named_events(raw: bytes) -> list[dict[str, Any]]:
    """A stream with `event:` lines (the Responses API's, Anthropic's), each checked to name its data's type."""
    events = []
    for block in raw.decode().strip().split("\n\n"):
        kind, data = block.split("\n")
        events.append(json.loads(data.removeprefix("data: ")))
        assert kind == "event: " + events[-1]["type"]
    return events


def folded(calls: list[ParsedCall]) -> list[ParsedCall]:
    """Calls whose arguments streamed in pieces (`open`, then `more`) as whole calls, their JSON written as a whole
    call's is (json.dumps), so that a stream compares with the whole answer (which leaves out a call `void` ends)."""
    out: list[ParsedCall] = []
    for call in calls:
        if call.part == "void":
            out.pop()
        elif call.part == "more":
            out[-1] = ParsedCall(out[-1].name, out[-1].arguments + call.arguments)
        else:
            out.append(ParsedCall(call.name, call.arguments))
    return [ParsedCall(c.name, json.dumps(json.loads(c.arguments), ensure_ascii=False)) for c in out]
