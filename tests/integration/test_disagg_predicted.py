"""The predicted disaggregation rule on a real frontend over mock prefill and decode workers (worker
agents, NATS JetStream queue, etcd): the threshold rule bootstraps it (the first long prompt goes to
the prefill worker, whose hop and transfer the frontend then times); afterwards an idle decode
worker prefills a long prompt itself when that is predicted sooner, and a burst that queues prefill
work on the decode worker sends prompts through the prefill queue again, as does the decode-side
guard while the decode worker streams another request.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import aiohttp
import pytest

from tests.integration.fleet import Fleet, metric, start_fleet, stop_fleet

pytestmark = pytest.mark.integration
MOCK = "mock: {timing: dynamo, speedup_ratio: 0.5, max_num_batched_tokens: 1024}"
POOLS = (f"  - {{name: prefill, role: prefill, engine: mock, model: m, {MOCK}}}\n"
         f"  - {{name: decode, role: decode, engine: mock, model: m, {MOCK}}}\n")


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory, tiny_model: Path, agent_processes: SimpleNamespace) -> Iterator[Fleet]:
    f = start_fleet(tmp_path_factory.mktemp("disagg"), tiny_model, agent_processes, {"p0": "prefill", "d0": "decode"},
                    POOLS, "{disaggregation: {decision: predicted, max_local_prefill_tokens: 64}}",
                    {"m": {"prefill": 1, "decode": 1}})
    yield f
    stop_fleet(f, agent_processes)


def prompt(rng: random.Random, tokens: int) -> list[int]:
    return [rng.randrange(1, 30_000) for _ in range(tokens)]  # random: nothing cached anywhere


async def send(http: aiohttp.ClientSession, url: str, ids: list[int]) -> None:
    body = {"model": "m", "prompt": ids, "max_tokens": 2, "stream": True}
    async with http.post(f"{url}/v1/completions", json=body) as r:
        assert r.status == 200, await r.text()
        await r.read()


def decisions(fleet: Fleet) -> dict[str, float]:
    """The frontend's placement counts by reason, and how many of the remote ones the decode guard moved."""
    out = {r: metric(fleet.url, "dynamo_lite_frontend_disaggregation_decisions_total", model="m", reason=r)
           for r in ("remote", "predicted_local", "short_prompt", "queue_full", "prefill_failed")}
    return out | {"guard_moves": metric(fleet.url, "dynamo_lite_frontend_decode_guard_moves_total", model="m")}


def test_the_predicted_rule_bootstraps_then_prefers_the_faster_path(fleet: Fleet) -> None:
    rng = random.Random(7)

    async def run(batches: list[int], tokens: int) -> None:
        async with aiohttp.ClientSession() as http:
            for at_once in batches:
                await asyncio.gather(*(send(http, fleet.url, prompt(rng, tokens)) for _ in range(at_once)))

    asyncio.run(run([1], 900))
    assert decisions(fleet)["remote"] == 1  # nothing timed yet: the threshold rule
    # the router learns the decode worker's speed from local prefills; the remote path is now known too
    asyncio.run(run([1, 2, 1, 3, 1, 2, 4, 1, 2, 1], 900))
    idle = decisions(fleet)
    assert idle["predicted_local"] >= 1, idle
    asyncio.run(run([12], 900))  # a burst: prefill queues on the decode worker, the prefill worker is idle
    after = decisions(fleet)
    assert after["remote"] > idle["remote"], (idle, after)
    assert after["prefill_failed"] == after["short_prompt"] == 0


def test_the_decode_guard_keeps_prefill_off_a_decode_worker_that_streams(fleet: Fleet) -> None:
    """Idle, the decode worker prefills a long prompt itself when that is predicted sooner. While it streams
    another request, the same prompts go to the prefill worker: prefilling one there would hold that stream up
    for longer than planner.itl_target_ms (50 ms; the mock takes about 85 ms for 1,600 tokens at speed-up 0.5)."""
    rng = random.Random(11)

    async def stream(http: aiohttp.ClientSession, started: asyncio.Event) -> None:
        body = {"model": "m", "prompt": prompt(rng, 16), "max_tokens": 400, "stream": True}
        async with http.post(f"{fleet.url}/v1/completions", json=body) as r:
            assert r.status == 200, await r.text()
            async for _ in r.content:
                started.set()

    async def run() -> tuple[dict[str, float], dict[str, float]]:
        async with aiohttp.ClientSession() as http:
            for _ in range(20):  # idle: until the predicted rule keeps one local (it needs timings of both paths)
                idle = decisions(fleet)["predicted_local"]
                await send(http, fleet.url, prompt(rng, 1600))
                if decisions(fleet)["predicted_local"] > idle:
                    break
            else:
                pytest.fail(f"no prompt was prefilled on the idle decode worker: {decisions(fleet)}")
            started = asyncio.Event()
            streaming = asyncio.create_task(stream(http, started))
            await asyncio.wait_for(started.wait(), 30)
            before = decisions(fleet)
            for _ in range(4):
                await send(http, fleet.url, prompt(rng, 1600))
            after = decisions(fleet)
            assert not streaming.done(), "the stream ended before the prompts were placed: nothing was guarded"
            await streaming
            return before, after

    before, after = asyncio.run(run())
    assert after["remote"] - before["remote"] == 4, (before, after)
    assert after["predicted_local"] == before["predicted_local"], (before, after)
    assert after["guard_moves"] - before["guard_moves"] == 4, (before, after)  # each would have stayed unguarded
