"""Two mock engines as real processes, as a prefill and a decode instance:
the decode side computes no prompt token of a transferred request, and its
/metrics and its ZMQ KV events say the same."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import msgspec
import pytest
import zmq
import zmq.asyncio
from aiohttp.test_utils import TestClient, TestServer

from dynamo_lite.engines.mock import KvEventsConfig, KvTransferConfig, MockEngineArgs
from dynamo_lite.engines.mock.server import build_app
from dynamo_lite.infra import free_port
from dynamo_lite.protocol import BlockStored, KvEventBatch
from tests.integration.mock_engine_process import mock_engine
from tests.waiting import eventually_async

pytestmark = pytest.mark.integration

BS = 16
PROMPT = list(range(1000, 1000 + 5 * BS + 3))  # five full blocks and a partial one


def engine_args(role: str, events_port: int, **kw: object) -> MockEngineArgs:
    return MockEngineArgs(
        model="mock-8b", port=free_port(), block_size=BS, num_gpu_blocks=256, speedup_ratio=100.0,
        enable_prompt_tokens_details=True,
        kv_events_config=KvEventsConfig(enable_kv_cache_events=True, endpoint=f"tcp://127.0.0.1:{events_port}",
                                        topic="kv", **kw),  # type: ignore[arg-type]
        kv_transfer_config=KvTransferConfig(kv_connector="NixlConnector", kv_role=role,  # type: ignore[arg-type]
                                            kv_buffer_device="cpu"),
    )  # fmt: skip


async def scrape(http: aiohttp.ClientSession, url: str) -> dict[str, float]:
    async with http.get(f"{url}/metrics") as r:
        text = await r.text()
    values: dict[str, float] = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            values[name] = float(value)
    return values


def metric(values: dict[str, float], name: str, **labels: str) -> float:
    want = {"engine": "0", "model_name": "mock-8b", **labels}
    key = name + "{" + ",".join(f'{k}="{v}"' for k, v in sorted(want.items())) + "}"
    return values[key]


@contextlib.asynccontextmanager
async def collecting(sub: zmq.asyncio.Socket) -> AsyncIterator[list[tuple[int, KvEventBatch]]]:
    """Receive (seq, batch) continuously, as a real subscriber does: a SUB that is
    not being read does not take part in the handshake, and a PUB drops what it
    sends before the subscription reaches it."""
    got: list[tuple[int, KvEventBatch]] = []

    async def receive() -> None:
        while True:
            topic, seq, payload = await sub.recv_multipart()
            assert topic == b"kv"
            got.append((int.from_bytes(seq, "big"), msgspec.msgpack.decode(payload, type=KvEventBatch)))

    task = asyncio.create_task(receive())
    try:
        yield got
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def settled(got: list[tuple[int, KvEventBatch]], quiet: float = 0.3) -> list[tuple[int, KvEventBatch]]:
    """`got` once no new batch has arrived for `quiet` seconds."""
    seen = -1
    while seen != len(got):
        seen = len(got)
        await asyncio.sleep(quiet)  # a quiet period is the condition: nothing to poll for
    return list(got)


def running(n: int) -> str:
    return f'vllm:num_requests_running{{engine="0",model_name="mock-8b"}} {n:.1f}'


async def metrics_with(client: TestClient, line: str) -> str:
    """The engine's /metrics text if it has `line`, else "" (a check for eventually_async)."""
    text = await (await client.get("/metrics")).text()
    return text if line in text.splitlines() else ""


def stored_hashes(batches: list[tuple[int, KvEventBatch]]) -> list[int]:
    return [h for _, b in batches for e in b.events if isinstance(e, BlockStored) for h in e.block_hashes]


@pytest.fixture
def zmq_ctx() -> AsyncIterator[zmq.asyncio.Context]:
    ctx = zmq.asyncio.Context()
    yield ctx
    ctx.destroy(linger=0)


def bound_sub(ctx: zmq.asyncio.Context) -> tuple[zmq.asyncio.Socket, int]:
    """A SUB socket bound on loopback: the engine's PUB connects to it, as vLLM's does."""
    sub = ctx.socket(zmq.SUB)
    sub.setsockopt(zmq.SUBSCRIBE, b"")
    port = sub.bind_to_random_port("tcp://127.0.0.1")
    return sub, port


async def test_disaggregated_request_skips_prefill_on_decode(tmp_path: Path, zmq_ctx: zmq.asyncio.Context) -> None:
    p_sub, p_events = bound_sub(zmq_ctx)
    d_sub, d_events = bound_sub(zmq_ctx)
    p_args, d_args = engine_args("kv_producer", p_events), engine_args("kv_consumer", d_events)
    async with (
        collecting(p_sub) as p_got,
        collecting(d_sub) as d_got,
        mock_engine(p_args, tmp_path / "prefill.log") as p_url,
        mock_engine(d_args, tmp_path / "decode.log") as d_url,
        aiohttp.ClientSession() as http,
    ):
        headers = {"X-Request-Id": "req-1"}
        body = {"token_ids": PROMPT, "sampling_params": {"max_tokens": 1},
                "kv_transfer_params": {"do_remote_decode": True}}  # fmt: skip
        async with http.post(f"{p_url}/inference/v1/generate", json=body, headers=headers) as r:
            assert r.status == 200
            prefilled = await r.json()
        params = prefilled["kv_transfer_params"]
        assert params["do_remote_prefill"] is True and params["remote_num_tokens"] == len(PROMPT)
        assert len(params["remote_block_ids"][0]) == 6 and params["remote_port"] == d_args.nixl_side_channel_port
        for key in ("remote_engine_id", "remote_host", "remote_request_id"):
            assert params[key]

        body = {"token_ids": PROMPT, "sampling_params": {"max_tokens": 8}, "kv_transfer_params": params}
        async with http.post(f"{d_url}/inference/v1/generate", json=body, headers=headers) as r:
            assert r.status == 200
            decoded = await r.json()
        choice = decoded["choices"][0]
        assert len(choice["token_ids"]) == 8 and choice["finish_reason"] == "length"
        assert choice["token_ids"][0] == prefilled["choices"][0]["token_ids"][0]  # same seed, same first token
        assert decoded["usage"]["prompt_tokens_details"] == {"cached_tokens": 0}  # P's own hits
        assert decoded["kv_transfer_params"] is None

        d = await scrape(http, d_url)
        assert metric(d, "vllm:prompt_tokens_by_source_total", source="local_compute") == 0
        assert metric(d, "vllm:prompt_tokens_by_source_total", source="external_kv_transfer") == len(PROMPT)
        assert metric(d, "vllm:prompt_tokens_total") == len(PROMPT)
        assert metric(d, "vllm:generation_tokens_total") == 8
        assert metric(d, "vllm:nixl_xfer_time_seconds_count") == 1
        assert metric(d, "vllm:num_requests_running") == 0 and metric(d, "vllm:kv_cache_usage_perc") == 0
        p = await scrape(http, p_url)
        assert metric(p, "vllm:prompt_tokens_by_source_total", source="local_compute") == len(PROMPT)

        p_batches, d_batches = await settled(p_got), await settled(d_got)
        # both engines now hold the prompt's five full blocks, under the same hashes
        assert len(stored_hashes(p_batches)) == 5
        assert stored_hashes(d_batches)[:5] == stored_hashes(p_batches)
        first = next(e for _, b in d_batches for e in b.events if isinstance(e, BlockStored))
        assert first.token_ids == PROMPT[: 5 * BS] and first.parent_block_hash is None and first.block_size == BS
        assert [s for s, _ in d_batches] == list(range(len(d_batches)))

        # a second, local request for the same prompt on decode is a prefix hit, not a prefill
        body = {"token_ids": PROMPT, "sampling_params": {"max_tokens": 2}}
        async with http.post(f"{d_url}/inference/v1/generate", json=body) as r:
            assert (await r.json())["usage"]["prompt_tokens_details"] == {"cached_tokens": 5 * BS}
        d = await scrape(http, d_url)
        assert metric(d, "vllm:prompt_tokens_by_source_total", source="local_compute") == 3
        assert metric(d, "vllm:prefix_cache_hits_total") == 5 * BS


async def test_streaming_endpoints_replay_and_vllm_decoding(tmp_path: Path, zmq_ctx: zmq.asyncio.Context) -> None:
    sub, events_port = bound_sub(zmq_ctx)
    replay_port = free_port()
    args = engine_args("kv_both", events_port, replay_endpoint=f"tcp://127.0.0.1:{replay_port}")
    async with (
        collecting(sub) as got,
        mock_engine(args, tmp_path / "engine.log") as url,
        aiohttp.ClientSession() as http,
    ):
        body = {"model": "mock-8b", "prompt": PROMPT, "max_tokens": 5, "stream": True,
                "stream_options": {"include_usage": True}, "return_token_ids": True}  # fmt: skip
        async with http.post(f"{url}/v1/completions", json=body) as r:
            lines = [line async for line in r.content if line.strip()]
        assert lines[-1] == b"data: [DONE]\n"
        chunks = [msgspec.json.decode(line[len(b"data: ") :]) for line in lines[:-1]]
        tokens = [t for c in chunks for ch in c["choices"] for t in ch["token_ids"]]
        assert len(tokens) == 5 and chunks[-1]["usage"]["completion_tokens"] == 5

        body = {"model": "mock-8b", "messages": [{"role": "user", "content": "hello there"}], "max_tokens": 3}
        async with http.post(f"{url}/v1/chat/completions", json=body) as r:
            chat = await r.json()
        assert chat["object"] == "chat.completion" and len(chat["choices"][0]["message"]["content"].split()) == 3
        async with http.post(f"{url}/v1/completions", json={"model": "nope", "prompt": "x"}) as r:
            assert r.status == 404
        async with http.get(f"{url}/v1/models") as r:
            assert (await r.json())["data"][0]["id"] == "mock-8b"

        live = await settled(got)
        assert live, "no KV events published"
        replayed = await replay(zmq_ctx, replay_port, start=0)
        assert replayed == [(seq, msgspec.msgpack.encode(batch)) for seq, batch in live]

        kv_events = pytest.importorskip("vllm.distributed.kv_events", reason="vllm is not installed")
        for _, payload in replayed:
            batch = msgspec.msgpack.decode(payload, type=kv_events.KVEventBatch)
            assert batch.data_parallel_rank == 0
            assert all(isinstance(e, kv_events.BlockStored) for e in batch.events)


async def replay(ctx: zmq.asyncio.Context, port: int, start: int) -> list[tuple[int, bytes]]:
    """Ask the replay ROUTER for every batch from `start`; read up to the seq -1 marker."""
    dealer = ctx.socket(zmq.DEALER)
    dealer.connect(f"tcp://127.0.0.1:{port}")
    await dealer.send_multipart([b"", start.to_bytes(8, "big")])
    out = []
    while True:
        assert await dealer.poll(5000), "replay timed out"
        _, _topic, seq, payload = await dealer.recv_multipart()
        n = int.from_bytes(seq, "big", signed=True)
        if n == -1:
            break
        out.append((n, payload))
    dealer.close(linger=0)
    return out


# --- the HTTP server in-process (aiohttp test server): errors, aborts, stop tokens ------
@contextlib.asynccontextmanager
async def in_process(**kw: object) -> AsyncIterator[TestClient]:
    args = MockEngineArgs(model="mock-8b", block_size=BS, num_gpu_blocks=64, speedup_ratio=10.0,
                          max_model_len=2048, **kw)  # type: ignore[arg-type]  # fmt: skip
    async with TestClient(TestServer(build_app(args))) as client:
        yield client


async def test_invalid_requests_get_openai_errors() -> None:
    connector = KvTransferConfig(kv_connector="NixlConnector", kv_role="kv_both")
    async with in_process(kv_transfer_config=connector) as client:
        cases = [
            ({"token_ids": [1, 2], "sampling_params": {"n": 2}}, 400),
            ({"token_ids": []}, 400),
            ({"token_ids": [1] * 2000, "sampling_params": {"max_tokens": 100}}, 400),  # over max_model_len
            ({"token_ids": [1] * 1100, "sampling_params": {"max_tokens": 10}}, 400),  # over the 64 blocks
            ({"token_ids": [1, 2], "kv_transfer_params": {"do_remote_prefill": True}}, 400),
            ({"token_ids": [1, 2], "model": "other"}, 404),
        ]
        for body, status in cases:
            r = await client.post("/inference/v1/generate", json=body)
            assert r.status == status, body
            assert (await r.json())["error"]["code"] == status


async def test_stop_token_and_abort_by_request_id() -> None:
    async with in_process() as client:
        body = {"token_ids": [7, 8, 9], "sampling_params": {"max_tokens": 6}}
        r = await client.post("/inference/v1/generate", json=body)
        tokens = (await r.json())["choices"][0]["token_ids"]
        body = {"token_ids": [7, 8, 9], "sampling_params": {"max_tokens": 6, "stop_token_ids": [tokens[2]]}}
        r = await client.post("/inference/v1/generate", json=body)
        choice = (await r.json())["choices"][0]
        assert choice["token_ids"] == tokens[:3] and choice["finish_reason"] == "stop"
        assert choice["stop_reason"] == tokens[2]

        body = {"token_ids": [1, 2, 3], "sampling_params": {"max_tokens": 1000}}
        pending = asyncio.ensure_future(client.post("/inference/v1/generate", json=body, headers={"X-Request-Id": "x"}))
        await eventually_async(lambda: metrics_with(client, running(1)), timeout=5, interval=0.01,
                               what="the request running")
        r = await client.post("/inference/v1/abort_requests", json={"request_ids": ["generate-tokens-x"]})
        assert r.status == 200
        aborted = await (await pending).json()
        assert aborted["choices"][0]["finish_reason"] == "abort" and len(aborted["choices"][0]["token_ids"]) < 1000


async def test_a_client_that_goes_away_frees_its_blocks() -> None:
    async with in_process() as client:
        body = {"token_ids": list(range(100)), "sampling_params": {"max_tokens": 900}, "stream": True}
        r = await client.post("/inference/v1/generate", json=body)
        assert r.status == 200 and (await r.content.readline()).startswith(b"data: {")
        r.close()
        text = await eventually_async(lambda: metrics_with(client, running(0)), timeout=5, interval=0.02,
                                      what="the engine to drop the request")
        assert 'vllm:kv_cache_usage_perc{engine="0",model_name="mock-8b"} 0.0' in text
        assert 'vllm:request_success_total{engine="0",finished_reason="abort",model_name="mock-8b"} 1.0' in text
        assert (await client.post("/reset_prefix_cache")).status == 200


async def test_tokenize_as_vllm() -> None:
    async with in_process() as client:
        r = await client.post("/tokenize", json={"model": "mock-8b", "prompt": "t5 t6 hello"})
        body = await r.json()
        assert r.status == 200
        assert body["tokens"][:2] == [5, 6] and body["count"] == 3 and body["max_model_len"] == 2048
        r = await client.post("/tokenize", json={"messages": [{"role": "user", "content": "t5"}],
                                                 "return_token_strs": True})
        body = await r.json()
        assert body["count"] == len(body["token_strs"]) > 1
        r = await client.post("/tokenize", json={"model": "mock-8b"})
        assert r.status == 400


async def test_a_pooling_mock_serves_embeddings_as_vllm_shapes_them() -> None:
    """`--runner pooling`: /v1/embeddings answers each input (text, a list, token ids) with a unit vector that is a
    function of its tokens, in floats or base64 (float32, as OpenAI's clients decode it); the text routes are gone,
    as on vLLM's pooling server; each input ran through the scheduler (the prompt counter says so)."""
    import base64
    import struct

    async with in_process(runner="pooling", embedding_size=8) as client:
        one = await (await client.post("/v1/embeddings", json={"input": "t1 t2 t3"})).json()
        (vector,) = [d["embedding"] for d in one["data"]]
        assert len(vector) == 8 and abs(sum(v * v for v in vector) - 1) < 1e-9
        assert (one["object"], one["model"], one["usage"]["prompt_tokens"]) == ("list", "mock-8b", 3)
        many = await (await client.post("/v1/embeddings", json={"input": ["t1 t2 t3", "t9"],
                                                                "encoding_format": "base64"})).json()  # fmt: skip
        decoded = [list(struct.unpack("<8f", base64.b64decode(d["embedding"]))) for d in many["data"]]
        assert [d["index"] for d in many["data"]] == [0, 1] and decoded[0] == pytest.approx(vector, rel=1e-6)
        assert decoded[1] != decoded[0] and many["usage"]["prompt_tokens"] == 4
        ids = await (await client.post("/v1/embeddings", json={"input": [1, 2, 3]})).json()
        assert ids["usage"]["prompt_tokens"] == 3
        for body, status in (({"input": "x", "dimensions": 4}, 400), ({"input": []}, 400),
                             ({"input": "x", "model": "other"}, 404)):  # fmt: skip
            assert (await client.post("/v1/embeddings", json=body)).status == status, body
        assert (await client.post("/v1/completions", json={"prompt": "t1"})).status == 404
        metrics = await (await client.get("/metrics")).text()
        assert "vllm:prompt_tokens_total{" in metrics
        prompt_tokens = [float(line.rsplit(" ", 1)[1]) for line in metrics.splitlines()
                         if line.startswith("vllm:prompt_tokens_total{")]  # fmt: skip
        assert sum(prompt_tokens) == 3 + 4 + 3
