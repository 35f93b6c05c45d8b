"""The mock engine's busy time (`mock:busy_seconds_total`), which the arena turns into fleet busy: with one
request at a time the engine is busy exactly while that request lives, so busy time = its e2e latency."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

from aiohttp.test_utils import TestClient, TestServer
from prometheus_client.parser import text_string_to_metric_families

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from benchmarks.arena_fleet import BUSY, busy_shares, engine_counters, engine_timeline  # noqa: E402
from dynamo_lite.engines.mock import MockEngineArgs  # noqa: E402
from dynamo_lite.engines.mock.server import build_app  # noqa: E402


async def scrape(client: TestClient) -> dict[str, float]:
    text = await (await client.get("/metrics")).text()
    return {s.name: s.value for f in text_string_to_metric_families(text) for s in f.samples}


async def test_busy_time_is_the_time_spent_in_steps() -> None:
    args = MockEngineArgs(model="m", timing="dynamo", speedup_ratio=50.0, block_size=16)
    async with TestClient(TestServer(build_app(args))) as client:
        assert (await scrape(client))[f"{BUSY}_total"] == 0.0
        e2e = 0.0
        for n in (300, 1200):  # one at a time
            body = {"model": "m", "prompt": list(range(5, 5 + n)), "max_tokens": 12, "ignore_eos": True}
            r = await client.post("/v1/completions", json=body)
            assert r.status == 200, await r.text()
            after = await scrape(client)
            assert after["vllm:e2e_request_latency_seconds_sum"] > e2e  # it has finished
            e2e = after["vllm:e2e_request_latency_seconds_sum"]
        busy = after[f"{BUSY}_total"]
        assert busy > 0 and abs(busy - e2e) <= 0.02 * e2e, (busy, e2e)


def test_busy_share() -> None:
    # 10 wall seconds at speed-up 4 are 40 simulated seconds: 30 busy is 75%, 0 is idle
    assert busy_shares([5.0, 1.0], [35.0, 1.0], 10.0, 4.0) == [0.75, 0.0]


async def test_the_arena_counts_each_engine_s_preemptions() -> None:
    """A real engine's TTFT tail may be its preemptions (a request evicted for KV space and computed again):
    the arena records them per engine. Four requests that cannot all hold their KV in 24 blocks."""
    args = MockEngineArgs(model="m", timing="dynamo", speedup_ratio=50.0, block_size=16, num_gpu_blocks=24)
    async with TestClient(TestServer(build_app(args))) as client:
        url = str(client.make_url("")).rstrip("/")
        assert [c.preemptions for c in await asyncio.to_thread(engine_counters, [url])] == [0.0]

        async def one(seed: int) -> None:
            body = {"model": "m", "prompt": [seed, *range(5, 150)], "max_tokens": 100, "ignore_eos": True}
            r = await client.post("/v1/completions", json=body)
            assert r.status == 200, await r.text()

        await asyncio.gather(*(one(seed) for seed in range(1000, 1004)))
        counters = await asyncio.to_thread(engine_counters, [url])
        assert counters[0].preemptions >= 1 and counters[0].requests == 4, counters


async def test_the_arena_s_engine_timeline_sees_a_request_run_and_end(tmp_path: Path) -> None:
    """With --records, the arena samples each engine's running and waiting requests and KV use while the
    replay runs: a request that runs for a while shows as running with KV in use, and as gone after it."""
    args = MockEngineArgs(model="m", timing="dynamo", speedup_ratio=1.0, block_size=16, num_gpu_blocks=64)
    async with TestClient(TestServer(build_app(args))) as client:
        url = str(client.make_url("")).rstrip("/")
        path = tmp_path / "run.engines.jsonl"
        with engine_timeline([url], path, period_s=0.05):
            body = {"model": "m", "prompt": list(range(5, 300)), "max_tokens": 40, "ignore_eos": True}
            r = await client.post("/v1/completions", json=body)
            assert r.status == 200, await r.text()
            await asyncio.sleep(0.2)
        rows = [json.loads(line) for line in path.read_text().splitlines()]
        assert {r["engine"] for r in rows} == {0}
        assert [r["t_s"] for r in rows] == sorted(r["t_s"] for r in rows)
        busy = [r for r in rows if r["running"] == 1]
        assert busy and all(r["kv_usage"] > 0 for r in busy), rows
        assert rows[-1]["running"] == 0 and rows[-1]["waiting"] == 0 and rows[-1]["t_s"] > busy[-1]["t_s"], rows
