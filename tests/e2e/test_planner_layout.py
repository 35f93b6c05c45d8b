"""The SLA planner drops a prefill pool that does not pay for itself (`planner.prefill.min_replicas: 0`), live:
`orchestrator up` with the real frontend, a mock prefill pool of 2 and a decode pool of 1, and traffic where one
prompt in ten is long enough for the prefill pool. Sized as two pools, each with its spare (`spare_always`:
these short prompts would not earn one), that is 4 workers; decode workers alone, prefilling every prompt,
need 2. The planner grows the decode pool, removes the prefill workers once the new decode worker serves, and
every request is answered."""

from __future__ import annotations

import asyncio
import itertools
import re
import urllib.request
from pathlib import Path

import aiohttp
import pytest

from dynamo_lite.infra import free_port
from tests.e2e.running import Running, orchestrator_up
from tests.waiting import eventually

pytestmark = [pytest.mark.integration, pytest.mark.slow]
LONG, SHORT, OUT = 1200, 24, 8


def spec_text(tmp: Path, port: int) -> str:
    mock = "{speedup_ratio: 10}"
    return (f"namespace: playout\nstate_dir: {tmp / 'state'}\n"
            "models: [{name: tiny, path: 'builtin:tiny', block_size: 16, max_model_len: 4096}]\n"
            f"frontend: {{port: {port}, disaggregation: {{max_local_prefill_tokens: 256}}}}\n"
            "pools:\n"
            f"  - {{name: prefill, role: prefill, engine: mock, replicas: 2, mock: {mock}}}\n"
            f"  - {{name: decode, role: decode, engine: mock, replicas: 1, mock: {mock}}}\n"
            "planner: {enabled: true, policy: sla, interval_s: 1, cooldown_s: 0, scale_down_after: 3,\n"
            "  worker_startup_s: 2, max_total_replicas: 4, ttft_target_ms: 2000, itl_target_ms: 200, spare_always: true,\n"
            "  prefill: {min_replicas: 0, max_replicas: 2}, decode: {min_replicas: 1, max_replicas: 3}}\n")


async def send(session: aiohttp.ClientSession, url: str, n: int, failures: list[str]) -> None:
    length = LONG if n % 10 == 0 else SHORT
    prompt = [(n * 7919 + i) % 30000 + 100 for i in range(length)]  # unique: nothing cached
    body = {"model": "tiny", "prompt": prompt, "max_tokens": OUT, "ignore_eos": True}
    async with session.post(f"{url}/v1/completions", json=body) as r:
        data = await r.json()
    if r.status != 200 or data["usage"]["completion_tokens"] != OUT:
        failures.append(f"request {n} ({length} tokens): {r.status} {data}")


async def traffic(url: str, stop: asyncio.Event, failures: list[str]) -> int:
    """4 requests/s until `stop`; every one awaited. Returns how many were sent."""
    tasks = []
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as session:
        for n in itertools.count():
            if stop.is_set():
                break
            tasks.append(asyncio.create_task(send(session, url, n, failures)))
            await asyncio.sleep(0.25)
        await asyncio.gather(*tasks)
    return len(tasks)


def test_a_prefill_pool_that_does_not_pay_for_itself_is_drained_under_traffic(tmp_path: Path) -> None:
    port = free_port()
    with orchestrator_up(tmp_path, port, spec_text(tmp_path, port), Running) as cluster:
        failures: list[str] = []

        async def run() -> int:
            stop = asyncio.Event()
            sending = asyncio.create_task(traffic(cluster.url, stop, failures))

            def dropped() -> bool:
                assert re.search(r"scaling prefill \d+ -> 0", cluster.log.read_text()), "the prefill pool is still there"
                return True

            await asyncio.to_thread(eventually, dropped, timeout=60, interval=0.5, what="the prefill pool dropped")
            await asyncio.sleep(5)  # long prompts now prefill on the decode workers
            stop.set()
            return await sending

        sent = asyncio.run(run())
        log = cluster.log.read_text()
        metrics = urllib.request.urlopen(f"{cluster.url}/metrics", timeout=10).read().decode()
    assert failures == [], failures[:5]
    # Dropped for the layout, and only after the decode pool grew: make before break. (Ticks before any traffic
    # is measured propose "no traffic"; three in a row remove one worker, six the pool: traffic starts sooner.)
    decisions = re.findall(r"planner: prefill (\d+)->(\d+) \((.*?)\); decode (\d+)->(\d+)", log)
    last = next(i for i, d in enumerate(decisions) if d[1] == "0" and d[0] != "0")
    assert "no prefill pool" in decisions[last][2] and "decode workers alone need" in decisions[last][2], decisions[last]
    assert any(int(d[4]) > 1 for d in decisions[:last + 1]), decisions[:last + 1]
    # The long prompts sent without prefill workers were still counted as the prefill pool's (its remote share).
    counted = re.search(r'decisions_total\{model="tiny",reason="no_prefill_workers"\} (\d+)', metrics)
    assert counted and int(counted.group(1)) >= 1, metrics
    assert sent > 20
