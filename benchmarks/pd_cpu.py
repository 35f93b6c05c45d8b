"""Prefill/decode over NIXL on this machine's CPU: idle CPU with and without the
progress-delay fix, start-up time of a prefill+decode pair, and for one long prompt
the prefill time, the KV transfer time and the decode TTFT.

    .venv/bin/python benchmarks/pd_cpu.py [--model builtin:smollm2] [--prompt-tokens 700]

Runs two pairs in turn (NIXL's own busy-polling progress thread, then ours with a
delay), so the figures are side by side in one run. Writes
benchmarks/results/pd_cpu.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
from pathlib import Path

import aiohttp
import psutil

from connectors import kv_transfer_config, nixl_env
from dynamo_lite.engines.models import resolve_model
from dynamo_lite.engines.vllm import VllmEngine, VllmEngineConfig
from dynamo_lite.infra import free_port
from dynamo_lite.protocol import Role

RESULTS = Path(__file__).parent / "results"


def tree_cpu_seconds(pid: int) -> float:
    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return 0.0
    total = 0.0
    for p in procs:
        try:
            t = p.cpu_times()
            total += t.user + t.system
        except psutil.NoSuchProcess:
            pass
    return total


async def idle_cpu(engines: list[VllmEngine], seconds: float) -> list[float]:
    pids = [e.process.pid for e in engines]
    before = [tree_cpu_seconds(p) for p in pids if p]
    await asyncio.sleep(seconds)
    after = [tree_cpu_seconds(p) for p in pids if p]
    return [(a - b) / seconds for a, b in zip(after, before)]


async def metric(session: aiohttp.ClientSession, url: str, name: str, labels: str = "") -> float:
    async with session.get(f"{url}/metrics") as r:
        text = await r.text()
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name) and labels in line:
            total += float(line.rsplit(" ", 1)[1])
    return total


async def pd_request(session: aiohttp.ClientSession, prefill: str, decode: str, prompt: list[int]) -> dict:
    body = {"model": "m", "prompt": prompt, "max_tokens": 1, "temperature": 0,
            "kv_transfer_params": {"do_remote_decode": True}}
    t0 = time.perf_counter()
    async with session.post(f"{prefill}/v1/completions", json=body) as r:
        first = await r.json()
    prefill_s = time.perf_counter() - t0
    body = {"model": "m", "prompt": prompt, "max_tokens": 16, "temperature": 0, "stream": True,
            "kv_transfer_params": first["kv_transfer_params"]}
    t1 = time.perf_counter()
    ttft = None
    async with session.post(f"{decode}/v1/completions", json=body) as r:
        async for line in r.content:
            if line.startswith(b"data: {") and ttft is None:
                ttft = time.perf_counter() - t1
    return {"prefill_s": prefill_s, "decode_ttft_s": ttft}


async def run_pair(model_dir: Path, name: str, delay_us: int, prompt: list[int], logs: Path, idle_s: float) -> dict:
    engines = []
    for role in (Role.PREFILL, Role.DECODE):
        cfg = VllmEngineConfig(
            model_dir=model_dir, served_model_name="m", port=free_port(), max_model_len=2048,
            kv_transfer_config=kv_transfer_config(role, "cpu", progress_delay_us=delay_us),
            env={**nixl_env(free_port()), "VLLM_CPU_OMP_THREADS_BIND": str(len(engines) % psutil.cpu_count())},
        )
        engines.append(VllmEngine(cfg, logs / f"{name}-{role.value}.log"))
    print(f"[{name}] starting prefill + decode (NIXL progress delay {delay_us} us) ...", flush=True)
    t0 = time.monotonic()
    try:
        await asyncio.gather(*(e.start() for e in engines))
        startup = time.monotonic() - t0
        print(f"[{name}] pair healthy after {startup:.0f} s; measuring idle CPU for {idle_s:.0f} s ...", flush=True)
        async with aiohttp.ClientSession() as session:
            await pd_request(session, engines[0].url, engines[1].url, prompt[:64])  # NIXL handshake
            await asyncio.sleep(2)
            idle = await idle_cpu(engines, idle_s)
            xfer0 = await metric(session, engines[1].url, "vllm:nixl_xfer_time_seconds_sum")
            timing = await pd_request(session, engines[0].url, engines[1].url, prompt)
            xfer = await metric(session, engines[1].url, "vllm:nixl_xfer_time_seconds_sum") - xfer0
            local = await metric(session, engines[1].url, "vllm:prompt_tokens_by_source_total", 'source="local_compute"')
        print(f"[{name}] idle CPU: prefill {idle[0]:.2f}, decode {idle[1]:.2f} cores; "
              f"prefill {timing['prefill_s'] * 1e3:.0f} ms, transfer {xfer * 1e3:.1f} ms, "
              f"decode TTFT {timing['decode_ttft_s'] * 1e3:.0f} ms", flush=True)
        return {"progress_delay_us": delay_us, "startup_s": startup, "idle_cores": idle,
                "kv_transfer_s": xfer, "decode_local_compute_tokens": local, **timing}
    finally:
        await asyncio.gather(*(e.stop() for e in engines))


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="builtin:smollm2", help="builtin:smollm2, builtin:tiny or a directory")
    parser.add_argument("--prompt-tokens", type=int, default=700)
    parser.add_argument("--idle-seconds", type=float, default=10.0)
    parser.add_argument("--cache-dir", type=Path, default=Path.home() / ".local/state/dynamo_lite/models")
    args = parser.parse_args()
    model_dir = resolve_model(args.model, args.cache_dir)
    prompt = [(i * 7919) % 20000 + 100 for i in range(args.prompt_tokens)]
    logs = Path(tempfile.mkdtemp(prefix="pd_cpu-"))
    print(f"engine logs in {logs}")
    rows = [await run_pair(model_dir, "nixl-default", 0, prompt, logs, args.idle_seconds),
            await run_pair(model_dir, "delay-1ms", 1000, prompt, logs, args.idle_seconds)]
    RESULTS.mkdir(exist_ok=True)
    out = {"model": args.model, "prompt_tokens": args.prompt_tokens, "runs": rows}
    (RESULTS / "pd_cpu.json").write_text(json.dumps(out, indent=2))
    print("\n| NIXL progress delay | idle CPU prefill | idle CPU decode | pair start-up | prefill | KV transfer | decode TTFT |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['progress_delay_us']} us | {r['idle_cores'][0]:.2f} cores | {r['idle_cores'][1]:.2f} cores | "
              f"{r['startup_s']:.0f} s | {r['prefill_s'] * 1e3:.0f} ms | {r['kv_transfer_s'] * 1e3:.1f} ms | "
              f"{r['decode_ttft_s'] * 1e3:.0f} ms |")


if __name__ == "__main__":
    asyncio.run(main())
