"""How much traffic one mock engine process sustains, and what it costs.

Starts `python -m dynamo_lite.engines.mock` as a child process, drives it with a
closed-loop client (`--concurrency` requests in flight) over the token-in/out
endpoint, then reports wall-clock and simulated throughput, the engine's CPU
use and resident memory, and whether the simulation kept up with its speed-up
(the engine's own TTFT/ITL histograms, in simulated seconds, against the
client's wall-clock view times the speed-up).

    .venv/bin/python benchmarks/mock_throughput.py --speedup 100 --requests 2000
    .venv/bin/python benchmarks/mock_throughput.py --num-gpu-blocks 100000 --prompt-len 4096 \
        --unique-prompts --requests 500   # fills the 100k-block cache: memory figure
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dynamo_lite.engines.mock import MockEngineArgs, engine_command  # noqa: E402


@dataclass
class Stats:
    done: int = 0
    tokens: int = 0
    ttft: list[float] = field(default_factory=list)  # wall seconds
    errors: int = 0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def proc_stat(pid: int) -> tuple[float, int]:
    """(CPU seconds used, resident bytes) of a process."""
    fields_ = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    cpu = (int(fields_[11]) + int(fields_[12])) / ticks
    rss = int(fields_[21]) * os.sysconf("SC_PAGE_SIZE")
    return cpu, rss


def prompts(n: int, length: int, unique: bool, seed: int = 0) -> list[list[int]]:
    """Eight shared system prompts of half the length, then a unique tail (or all unique)."""
    rng = random.Random(seed)
    shared = [[rng.randrange(128000) for _ in range(length // 2)] for _ in range(8)]
    out = []
    for i in range(n):
        head = [] if unique else shared[i % 8]
        out.append(head + [rng.randrange(128000) for _ in range(length - len(head))])
    return out


async def client(url: str, todo: list[list[int]], out_len: int, stream: bool, stats: Stats) -> None:
    """One closed-loop client: a request, its answer, the next request. Parses only
    the usage chunk of a stream, to keep the client's CPU out of the figure."""
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=600)) as http:
        while todo:
            body = {"token_ids": todo.pop(), "sampling_params": {"max_tokens": out_len}, "stream": stream,
                    "stream_options": {"include_usage": True} if stream else None}  # fmt: skip
            start = time.perf_counter()
            first = None
            async with http.post(f"{url}/inference/v1/generate", json=body) as r:
                if r.status != 200:
                    stats.errors += 1
                    continue
                if not stream:
                    stats.tokens += (await r.json())["usage"]["completion_tokens"]
                else:
                    async for line in r.content:
                        first = first or time.perf_counter()
                        if line.startswith(b'data: {"request_id"') and b'"choices":[]' in line:
                            stats.tokens += json.loads(line[6:])["usage"]["completion_tokens"]
            stats.done += 1
            stats.ttft.append((first or time.perf_counter()) - start)


async def wait_healthy(url: str) -> None:
    async with aiohttp.ClientSession() as http:
        for _ in range(200):
            with contextlib.suppress(aiohttp.ClientError):
                async with http.get(f"{url}/health") as r:
                    if r.status == 200:
                        return
            await asyncio.sleep(0.05)
    raise RuntimeError("mock engine did not come up")


async def engine_histograms(url: str) -> dict[str, float]:
    async with aiohttp.ClientSession() as http, http.get(f"{url}/metrics") as r:
        text = await r.text()
    out: dict[str, float] = {}
    for line in text.splitlines():
        for name in ("vllm:time_to_first_token_seconds", "vllm:inter_token_latency_seconds",
                     "vllm:num_preemptions_total", "mock:clock_lag_max_seconds"):  # fmt: skip
            if line.startswith((f"{name}_sum", f"{name}_count", f"{name}{{")):
                out[line.split("{")[0]] = float(line.rsplit(" ", 1)[1])
    return out


async def main(opts: argparse.Namespace) -> None:
    args = MockEngineArgs(
        model="bench", port=free_port(), speedup_ratio=opts.speedup, num_gpu_blocks=opts.num_gpu_blocks,
        timing=opts.timing,
    )  # fmt: skip
    proc = subprocess.Popen(engine_command(args), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{args.port}"
    try:
        await wait_healthy(url)
        cpu0, rss0 = proc_stat(proc.pid)
        todo = prompts(opts.requests, opts.prompt_len, opts.unique_prompts)
        stats = Stats()
        start = time.perf_counter()
        stream = not opts.no_stream
        await asyncio.gather(*(client(url, todo, opts.output_len, stream, stats) for _ in range(opts.concurrency)))
        wall = time.perf_counter() - start
        cpu1, rss1 = proc_stat(proc.pid)
        hist = await engine_histograms(url)
    finally:
        proc.terminate()
        proc.wait(10)
    ttft_eng = hist["vllm:time_to_first_token_seconds_sum"] / max(1, hist["vllm:time_to_first_token_seconds_count"])
    itl_eng = hist["vllm:inter_token_latency_seconds_sum"] / max(1, hist["vllm:inter_token_latency_seconds_count"])
    ttft_client = sum(stats.ttft) / max(1, len(stats.ttft)) * opts.speedup
    report = {
        "requests": stats.done, "errors": stats.errors, "wall_s": round(wall, 2),
        "wall_requests_per_s": round(stats.done / wall, 1), "wall_tokens_per_s": round(stats.tokens / wall),
        "simulated_requests_per_s": round(stats.done / wall / opts.speedup, 2),
        "engine_cpu_s": round(cpu1 - cpu0, 2), "engine_cpu_share": round((cpu1 - cpu0) / wall, 2),
        "engine_rss_mib_start": round(rss0 / 2**20, 1), "engine_rss_mib_end": round(rss1 / 2**20, 1),
        "ttft_ms_engine_sim": round(ttft_eng * 1e3, 1), "ttft_ms_client_x_speedup": round(ttft_client * 1e3, 1),
        "itl_ms_engine_sim": round(itl_eng * 1e3, 2), "preemptions": hist.get("vllm:num_preemptions_total", 0),
        "max_lag_s_sim": round(hist.get("mock:clock_lag_max_seconds", 0.0), 2),
    }  # fmt: skip
    print(json.dumps({"options": vars(opts), "result": report}, indent=1))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--speedup", type=float, default=100.0)
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--prompt-len", type=int, default=1024)
    parser.add_argument("--output-len", type=int, default=32)
    parser.add_argument("--num-gpu-blocks", type=int, default=16384)
    parser.add_argument("--timing", choices=["roofline", "dynamo"], default="roofline")
    parser.add_argument("--no-stream", action="store_true", help="non-streaming requests (one answer each)")
    parser.add_argument("--unique-prompts", action="store_true", help="no shared prefixes (fills the cache)")
    asyncio.run(main(parser.parse_args()))
