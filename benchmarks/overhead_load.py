"""The load of benchmarks/overhead.py: distinct text prompts, requests at a fixed concurrency, their stats,
and the CPU seconds of the processes that served them (from /proc)."""

from __future__ import annotations

import asyncio
import json
import os
import random
import statistics
import time
from collections.abc import Iterable
from pathlib import Path
from typing import NamedTuple

import aiohttp

MODEL = "bench"
Stats = dict[str, float]


class Target(NamedTuple):
    url: str
    metrics_url: str
    pids: dict[str, int]  # the target's own processes, by name (CPU per request is theirs)


def cpu_seconds(pids: Iterable[int]) -> float:
    """User + system CPU seconds the processes used so far."""
    total = 0
    for pid in pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15 of proc(5))
    return total / os.sysconf("SC_CLK_TCK")



class Prompts:
    """Distinct 64-word prompts: 32 words of one of 4 shared prefixes, then 32 unique words."""

    def __init__(self, seed: int = 0, vocab: int = 128_256) -> None:
        rng = random.Random(seed)
        self.prefixes = [" ".join(f"t{rng.randrange(vocab)}" for _ in range(32)) for _ in range(4)]
        self.rng, self.vocab, self.count = rng, vocab, 0

    def next(self) -> str:
        self.count += 1
        tail = " ".join(f"t{self.rng.randrange(self.vocab)}" for _ in range(32))
        return f"{self.prefixes[self.count % 4]} {tail}"


async def one(session: aiohttp.ClientSession, url: str, prompt: str, max_tokens: int, stream: bool) -> float:
    """Seconds to the whole answer (non-streaming) or to the first chunk with text (streaming)."""
    body = {"model": MODEL, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "stream": stream}
    started = time.perf_counter()
    first: float | None = None
    async with session.post(f"{url}/v1/completions", json=body) as resp:
        if resp.status != 200:
            raise RuntimeError(f"{url}: HTTP {resp.status}: {(await resp.text())[:300]}")
        if not stream:
            payload = await resp.json()
            if payload["usage"]["completion_tokens"] != max_tokens:
                raise RuntimeError(f"{url}: {payload['usage']}")
            return time.perf_counter() - started
        async for line in resp.content:
            if first is None and line.startswith(b"data: {"):
                choices = json.loads(line[6:])["choices"]
                if choices and choices[0].get("text"):
                    first = time.perf_counter() - started
    if first is None:
        raise RuntimeError(f"{url}: a stream without text")
    return first


async def drive(session: aiohttp.ClientSession, url: str, prompts: Prompts, n: int, concurrency: int,
                max_tokens: int, stream: bool) -> tuple[list[float], float]:  # fmt: skip
    """`n` requests, `concurrency` at a time: (latencies, wall seconds)."""
    latencies: list[float] = []
    left = [prompts.next() for _ in range(n)]

    async def client() -> None:
        while left:
            latencies.append(await one(session, url, left.pop(), max_tokens, stream))

    started = time.perf_counter()
    await asyncio.gather(*(client() for _ in range(concurrency)))
    return latencies, time.perf_counter() - started


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


def stats(latencies: list[float], wall_s: float) -> Stats:
    return {"requests": len(latencies), "p50_ms": round(statistics.median(latencies) * 1000, 3),
            "p99_ms": round(percentile(latencies, 99) * 1000, 3),
            "mean_ms": round(statistics.fmean(latencies) * 1000, 3),
            "requests_per_s": round(len(latencies) / wall_s, 1)}
