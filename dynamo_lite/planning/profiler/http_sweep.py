"""Sweep a running engine over vLLM's HTTP API (`/v1/completions` with token-id prompts).

Prefill: a lone request of each input length with max_tokens=1 (its TTFT), then
`batch` at once (throughput). Decode: `concurrency` streams of `steps` tokens
over prompts of each context length; ITL is the mean gap between streamed
tokens. Prompts are random token ids, so no two share a prefix. Times are
multiplied by `time_scale` (a mock engine's speed-up ratio; 1 for vLLM).
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections.abc import Iterable

import aiohttp

from planner.profile import DecodePoint, EngineProfile, PrefillPoint


class HttpSweep:
    def __init__(self, url: str, model: str, time_scale: float = 1.0, batch: int = 8, steps: int = 32,
                 max_seconds_per_point: float = 120.0) -> None:
        self.url = url.rstrip("/")
        self.model = model
        self.scale = time_scale
        self.batch = batch
        self.steps = steps
        self.timeout = aiohttp.ClientTimeout(total=max_seconds_per_point)
        self._rng = random.Random(0)

    def _prompt(self, n: int) -> list[int]:
        return [self._rng.randrange(1000, 30000) for _ in range(n)]

    async def _complete(self, s: aiohttp.ClientSession, isl: int, max_tokens: int) -> list[float]:
        """Stream one request; returns the wall time of each token chunk from sending."""
        body = {"model": self.model, "prompt": self._prompt(isl), "max_tokens": max_tokens, "stream": True,
                "ignore_eos": True, "temperature": 0.0}
        start, times = time.monotonic(), []
        async with s.post(f"{self.url}/v1/completions", json=body, timeout=self.timeout) as resp:
            resp.raise_for_status()
            async for raw in resp.content:
                line = raw.decode().strip()
                if not line.startswith("data:") or line == "data: [DONE]":
                    continue
                if json.loads(line[5:]).get("choices"):
                    times.append(time.monotonic() - start)
        return times

    async def prefill_point(self, s: aiohttp.ClientSession, isl: int) -> PrefillPoint:
        lone = await self._complete(s, isl, 1)
        start = time.monotonic()
        await asyncio.gather(*(self._complete(s, isl, 1) for _ in range(self.batch)))
        elapsed = (time.monotonic() - start) * self.scale
        return PrefillPoint(isl=isl, ttft_s=lone[0] * self.scale, throughput_tps=self.batch * isl / elapsed)

    async def decode_point(self, s: aiohttp.ClientSession, context: int, concurrency: int) -> DecodePoint:
        runs = await asyncio.gather(*(self._complete(s, context, self.steps + 1) for _ in range(concurrency)))
        gaps = [(t[-1] - t[0]) / (len(t) - 1) for t in runs if len(t) > 1]
        itl = sum(gaps) / len(gaps) * self.scale
        return DecodePoint(context=context, concurrency=concurrency, itl_s=itl, throughput_tps=concurrency / itl)

    async def sweep(self, isls: Iterable[int], contexts: Iterable[int], concurrencies: Iterable[int],
                    progress=print) -> EngineProfile:  # noqa: ANN001
        async with aiohttp.ClientSession() as s:
            prefill = []
            for isl in isls:
                prefill.append(await self.prefill_point(s, isl))
                progress(f"prefill isl={isl}: ttft {prefill[-1].ttft_s * 1000:.1f} ms")
            decode = []
            for context in contexts:
                for c in concurrencies:
                    try:
                        decode.append(await self.decode_point(s, context, c))
                    except (aiohttp.ClientError, TimeoutError) as e:
                        progress(f"decode context={context} concurrency={c}: stopped ({e})")
                        break
                    progress(f"decode context={context} concurrency={c}: itl {decode[-1].itl_s * 1000:.1f} ms")
        return EngineProfile(engine=f"{self.model} at {self.url}", prefill=prefill, decode=decode,
                             meta={"source": "dynamo_lite.planning.profiler HTTP sweep"})
