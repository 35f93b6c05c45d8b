"""1,000 concurrent streaming clients against one frontend and a mock fleet, for a bounded time.

Every client holds one streaming request open at a time and sends the next as soon as its
stream ends, until the deadline; two such rounds run back to back. Asserted: no request
fails, every stream is well formed (all its tokens, then [DONE]), and the frontend's memory
is bounded: the second round, as long as the first, adds almost nothing to what the first
left (no per-request leak), and the peak is a bounded cost per open stream. The figures of
the second round (requests, TTFT p50/p99, RSS) are printed; with LOAD_REPORT=path also
written there.
"""

from __future__ import annotations

import asyncio
import json
import os
import resource
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import aiohttp
import psutil
import pytest

from dynamo_lite.infra import EmbeddedEtcd, EmbeddedNats, free_port
from tests.waiting import eventually

pytestmark = [pytest.mark.integration, pytest.mark.slow]
CLIENTS = int(os.environ.get("LOAD_CLIENTS", "1000"))
DURATION_S = float(os.environ.get("LOAD_SECONDS", "15"))  # per round
MAX_TOKENS = 16
MOCK = "mock: {speedup_ratio: 10, max_num_seqs: 1024}"


class RssSampler:
    """The frontend's resident memory, sampled every 0.2 s from a thread."""

    def __init__(self, pid: int) -> None:
        self.proc = psutil.Process(pid)
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def rss(self) -> int:
        return self.proc.memory_info().rss

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, self.rss())
            time.sleep(0.2)

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


async def client(session: aiohttp.ClientSession, url: str, i: int, deadline: float, ttfts: list[float],
                 failures: list[str]) -> int:  # fmt: skip
    done = 0
    while time.monotonic() < deadline or done == 0:
        body = {"model": "m", "prompt": [1 + (i + done) % 400] * 24, "max_tokens": MAX_TOKENS, "stream": True,
                "stream_options": {"include_usage": True}}
        started = time.monotonic()
        first, tokens, saw_done = None, None, False
        try:
            async with session.post(f"{url}/v1/completions", json=body) as resp:
                if resp.status != 200:
                    failures.append(f"HTTP {resp.status}: {(await resp.text())[:200]}")
                    return done
                async for line in resp.content:
                    if not line.startswith(b"data: "):
                        continue
                    if line.strip() == b"data: [DONE]":
                        saw_done = True
                        continue
                    chunk = json.loads(line[6:])
                    if first is None and chunk["choices"] and chunk["choices"][0]["text"]:
                        first = time.monotonic() - started
                    if chunk.get("usage"):
                        tokens = chunk["usage"]["completion_tokens"]
        except (aiohttp.ClientError, asyncio.TimeoutError) as e:
            failures.append(f"{type(e).__name__}: {e}")
            return done
        if not saw_done or tokens != MAX_TOKENS or first is None:
            failures.append(f"malformed stream: done={saw_done} tokens={tokens}")
            return done
        ttfts.append(first)
        done += 1
    return done


async def load(url: str) -> tuple[list[int], list[float], list[str], float]:
    ttfts: list[float] = []
    failures: list[str] = []
    timeout = aiohttp.ClientTimeout(total=120)
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0), timeout=timeout) as session:
        started = time.monotonic()
        deadline = started + DURATION_S
        counts = await asyncio.gather(*(client(session, url, i, deadline, ttfts, failures) for i in range(CLIENTS)))
        return list(counts), ttfts, failures, time.monotonic() - started


def test_a_thousand_concurrent_streaming_clients(tmp_path: Path, tiny_model: Path,
                                                 agent_processes: SimpleNamespace) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < 4 * CLIENTS:  # client sockets + the frontend's (it inherits the limit)
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 8 * CLIENTS), hard))
    nats, etcd = EmbeddedNats(tmp_path / "nats"), EmbeddedEtcd(tmp_path / "etcd")
    asyncio.run(nats.start())
    asyncio.run(etcd.start())
    spec = tmp_path / "cluster.yaml"
    spec.write_text(f"namespace: load\nstate_dir: {tmp_path / 'state'}\n"
                    f"models:\n  - {{name: m, path: '{tiny_model}', block_size: 16, max_model_len: 2048}}\n"
                    f"frontend: {{max_concurrent_requests: {CLIENTS}, max_queued_requests: {CLIENTS}}}\n"
                    f"pools:\n  - {{name: agg, role: aggregated, engine: mock, model: m, {MOCK}}}\n")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    agents = [agent_processes.spawn(tmp_path, spec, "agg", nats.url, etcd.url, f"a{i}") for i in range(2)]
    with open(tmp_path / "frontend.log", "wb") as out:
        frontend = subprocess.Popen([sys.executable, "-m", "dynamo_lite.frontend", "-f", str(spec), "--nats-url",
                                     nats.url, "--etcd-url", etcd.url, "--port", str(port)], stdout=out,
                                    stderr=subprocess.STDOUT)  # fmt: skip
    try:
        def ready() -> bool:
            import urllib.request

            try:
                health = json.loads(urllib.request.urlopen(f"{url}/health", timeout=2).read())
            except OSError:
                return False
            return health["models"]["m"]["aggregated"] == 2

        eventually(ready, timeout=60, what="2 workers in the frontend's view")
        before = RssSampler(frontend.pid).rss()
        first_counts, _, first_failures, _ = asyncio.run(load(url))
        time.sleep(1)  # a quiet second between the rounds, so `between` is the frontend at rest
        with RssSampler(frontend.pid) as rss:
            between = rss.rss()
            counts, ttfts, failures, wall = asyncio.run(load(url))
            time.sleep(1)  # likewise: `after` is measured at rest
            after = rss.rss()
        assert frontend.poll() is None, "the frontend died under load"
        failures += first_failures
        ttfts.sort()
        report = {
            "clients": CLIENTS, "seconds": round(wall, 1), "requests": sum(counts), "failed": len(failures),
            "requests_per_s": round(sum(counts) / wall, 1),
            "ttft_p50_ms": round(1000 * statistics.median(ttfts), 1) if ttfts else None,
            "ttft_p99_ms": round(1000 * ttfts[int(0.99 * (len(ttfts) - 1))], 1) if ttfts else None,
            "frontend_rss_mib": {"idle": before >> 20, "after_round_1": between >> 20, "peak_round_2": rss.peak >> 20,
                                 "after_round_2": after >> 20},
        }
        print(f"\nload: {report}")
        if os.environ.get("LOAD_REPORT"):
            Path(os.environ["LOAD_REPORT"]).write_text(json.dumps(report, indent=2))
        assert not failures, failures[:5]
        assert min(counts) >= 1 and min(first_counts) >= 1, "every client completed at least one request a round"
        # Bounded: under ~200 KiB per open stream at the peak; a second round leaks under 8 KiB per request.
        assert max(rss.peak, between) - before < CLIENTS * 200 * 1024, report
        assert after - between < sum(counts) * 8 * 1024, report
    finally:
        frontend.terminate()
        frontend.wait(30)
        agent_processes.stop(agents)
        asyncio.run(nats.stop())
        asyncio.run(etcd.stop())
