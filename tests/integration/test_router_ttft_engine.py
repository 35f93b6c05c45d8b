"""The ttft router's online rate estimate against a real mock engine process of known speed.

The engine runs Dynamo's mocker timing at speed-up 1 (prefill of T tokens: 16.5 ms + 15.2 us x T +
0.42 ns x T^2). Requests of 200 to 6,000 tokens go in pairs, the second 10 ms after the first, so it
queues behind the first one's prefill step. The
router learns from the first tokens it is told of, as the frontend tells it, and its prediction for
the last requests ends within 10% of the measured time.

The machine is shared: a CI run once saw first tokens 0.6 s late for a few seconds (predicted 0.08 s,
measured 0.72 s), which no model of the engine predicts. So after 80 requests of learning, the
prediction is judged on windows of 30 requests, up to three, and one window must be within 10% at
the median. A model that does not converge fails all three: the router keeps learning through them.
"""

from __future__ import annotations

import asyncio
import random
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import aiohttp
import pytest

from dynamo_lite.engines.mock import MockEngineArgs
from dynamo_lite.infra import free_port
from dynamo_lite.protocol import RequestId, WorkerId
from router import Router, RouterConfig, RouterMode
from tests.integration.mock_engine_process import mock_engine

pytestmark = pytest.mark.integration

WORKER = WorkerId("mock")


async def first_token_s(http: aiohttp.ClientSession, url: str, prompt: list[int],
                        on_first: Callable[[], None] = lambda: None) -> float:  # fmt: skip
    """Seconds from sending a streamed completion to its first chunk with a token (`on_first` called then)."""
    body = {"model": "mock", "prompt": prompt, "max_tokens": 2, "stream": True}
    started = time.monotonic()
    async with http.post(f"{url}/v1/completions", json=body) as r:
        assert r.status == 200, await r.text()
        async for line in r.content:
            if line.startswith(b"data: {"):
                first = time.monotonic() - started
                on_first()
                break
        async for _ in r.content:  # the rest of the stream
            pass
    return first


@pytest.mark.usefixtures("steady_client_clock")
async def test_the_learnt_ttft_ends_within_10_percent_of_a_mock_engine_of_known_speed(tmp_path: Path):
    args = MockEngineArgs(model="mock", port=free_port(), timing="dynamo", speedup_ratio=1.0, num_gpu_blocks=65536,
                          enable_prefix_caching=False)  # fmt: skip
    clock = time.monotonic
    router = Router(RouterConfig(block_size=16, mode=RouterMode.TTFT), clock=clock, rng=random.Random(0))
    router.add_worker(WORKER, 65536)
    rng = random.Random(5)
    pairs: list[tuple[float, float]] = []

    async def one(http: aiohttp.ClientSession, url: str, i: int, after_s: float = 0.0) -> None:
        prompt = [rng.randrange(1, 30_000) for _ in range(rng.randint(200, 6000))]
        await asyncio.sleep(after_s)
        decision = router.route(prompt, [WORKER])
        rid = RequestId(f"r{i}")
        router.on_request_start(rid, decision)
        seen = await first_token_s(http, url, prompt, lambda: router.on_prefill_done(rid, measured=True))
        router.on_request_finish(rid, 2)
        pairs.append((decision.predicted_ttft_s or 0.0, seen))

    async def requests(http: aiohttp.ClientSession, url: str, first: int, count: int) -> None:
        for i in range(first, first + count, 2):  # the second 10 ms after the first: it waits for the first's step
            await asyncio.gather(one(http, url, i), one(http, url, i + 1, after_s=0.01))

    windows: list[float] = []
    async with mock_engine(args, tmp_path / "engine.log") as url, aiohttp.ClientSession() as http:
        await requests(http, url, 0, 80)
        while len(windows) < 3 and not (windows and windows[-1] < 0.10):
            pairs.clear()
            await requests(http, url, 80 + 30 * len(windows), 30)
            windows.append(statistics.median(abs(p - m) / m for p, m in pairs))

    assert windows[-1] < 0.10, (windows, pairs)
    assert router.ttft_model.ttft.updates == 80 + 30 * len(windows)
