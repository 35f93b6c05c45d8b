"""What the frontend adds: latency (p50, p99) and requests/s through the frontend against one fast
mock worker, versus calling that worker directly, at each concurrency, side by side in one run.

Starts NATS, etcd, one aggregated mock worker (agent + engine) and the frontend as processes.
Both paths get the same requests: POST /v1/completions with a token-id prompt, non-streaming
(through the frontend: validation, routing, KV/load bookkeeping, an SSE hop to the engine and
aggregation back to one JSON answer). The mock runs with a large speed-up so that the engine's
simulated compute is negligible and the difference is the frontend's own cost. On a small machine
the client, frontend and engine share the cores: the absolute figures include that contention.

    .venv/bin/python benchmarks/frontend_overhead.py            # writes benchmarks/results/frontend_overhead.json
    .venv/bin/python benchmarks/frontend_overhead.py --requests 400 --concurrency 1 32 64
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import random
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dynamo_lite.discovery import WorkerWatcher, etcd_client  # noqa: E402
from dynamo_lite.infra import EmbeddedEtcd, EmbeddedNats, free_port  # noqa: E402

MODEL = "bench"


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q / 100 * (len(ordered) - 1))))]


async def run_level(url: str, prompts: list[list[int]], concurrency: int, max_tokens: int) -> dict[str, float]:
    latencies: list[float] = []
    warmup, queue = prompts[:20], prompts[20:]
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector) as session:

        async def one(prompt: list[int]) -> None:
            body = {"model": MODEL, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0}
            started = time.perf_counter()
            async with session.post(f"{url}/v1/completions", json=body) as resp:
                payload = await resp.json()
                assert resp.status == 200, payload
                assert payload["usage"]["completion_tokens"] == max_tokens, payload
            latencies.append(time.perf_counter() - started)

        async def worker() -> None:
            while queue:
                await one(queue.pop())

        for prompt in warmup:  # warm-up: connections, first-request paths
            await one(prompt)
        latencies.clear()
        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        wall = time.perf_counter() - started
    return {
        "requests": len(latencies),
        "p50_ms": round(statistics.median(latencies) * 1000, 3),
        "p99_ms": round(percentile(latencies, 99) * 1000, 3),
        "mean_ms": round(statistics.fmean(latencies) * 1000, 3),
        "requests_per_s": round(len(latencies) / wall, 1),
    }


def start_stack(tmp: Path, model_dir: str, speedup: float) -> tuple[list, list[subprocess.Popen], str, str]:
    nats, etcd = EmbeddedNats(tmp / "nats"), EmbeddedEtcd(tmp / "etcd")
    asyncio.run(nats.start())
    asyncio.run(etcd.start())
    spec = tmp / "cluster.yaml"
    spec.write_text(
        f"namespace: bench\nstate_dir: {tmp / 'state'}\n"
        f"models: [{{name: {MODEL}, path: '{model_dir}', block_size: 16, max_model_len: 4096}}]\n"
        f"frontend: {{max_concurrent_requests: 1024}}\n"
        f"pools: [{{name: w, role: aggregated, engine: mock, mock: {{speedup_ratio: {speedup}}}}}]\n"
    )
    port = free_port()
    logs = tmp / "logs"
    logs.mkdir()
    base = [sys.executable, "-m"]
    agent = subprocess.Popen(base + ["dynamo_lite.worker", "-f", str(spec), "--pool", "w", "--nats-url", nats.url,
                                     "--etcd-url", etcd.url, "--worker-id", "w0", "--log-level", "warning"],
                             stdout=open(logs / "agent.log", "wb"), stderr=subprocess.STDOUT)
    frontend = subprocess.Popen(base + ["dynamo_lite.frontend", "-f", str(spec), "--nats-url", nats.url, "--etcd-url",
                                        etcd.url, "--port", str(port), "--log-level", "warning"],
                                stdout=open(logs / "frontend.log", "wb"), stderr=subprocess.STDOUT)
    frontend_url = f"http://127.0.0.1:{port}"
    engine_url = asyncio.run(_engine_url(etcd.url))
    deadline = time.monotonic() + 120
    while True:
        try:
            health = json.loads(urllib.request.urlopen(f"{frontend_url}/health", timeout=2).read())
            if health["models"][MODEL].get("aggregated") == 1:
                break
        except OSError:
            pass
        assert frontend.poll() is None, (logs / "frontend.log").read_text()[-2000:]
        assert time.monotonic() < deadline, "frontend did not see the worker in 120 s"
        time.sleep(0.2)
    return [nats, etcd], [frontend, agent], frontend_url, engine_url


async def _engine_url(etcd_url: str) -> str:
    async with etcd_client(etcd_url) as client:
        watcher = WorkerWatcher(client, "bench")
        await watcher.start()
        try:
            await watcher.wait_for(lambda workers: bool(workers), 120)
            return next(iter(watcher.workers.values())).engine_url
        finally:
            await watcher.stop()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--concurrency", type=int, nargs="+", default=[1, 32])
    p.add_argument("--requests", type=int, default=300, help="measured requests per path and concurrency")
    p.add_argument("--prompt-len", type=int, default=128)
    p.add_argument("--max-tokens", type=int, default=16)
    p.add_argument("--speedup", type=float, default=1000.0, help="mock speed-up: large = negligible engine time")
    p.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "frontend_overhead.json")
    args = p.parse_args()

    with tempfile.TemporaryDirectory() as tmp_dir:
        tmp = Path(tmp_dir)
        from dynamo_lite.engines.models.tiny import train_tokenizer

        model_dir = tmp / "tiny"
        model_dir.mkdir()
        train_tokenizer(model_dir)
        (model_dir / "config.json").write_text(json.dumps({"model_type": "llama"}))
        servers, procs, frontend_url, engine_url = start_stack(tmp, str(model_dir), args.speedup)
        rng = random.Random(0)
        try:
            rows = []
            for concurrency in args.concurrency:
                row: dict[str, object] = {"concurrency": concurrency}
                for name, url in (("direct", engine_url), ("frontend", frontend_url)):
                    prompts = [[rng.randrange(1000) for _ in range(args.prompt_len)] for _ in range(args.requests + 20)]
                    row[name] = asyncio.run(run_level(url, prompts, concurrency, args.max_tokens))
                d, f = row["direct"], row["frontend"]  # type: ignore[assignment]
                row["added_p50_ms"] = round(f["p50_ms"] - d["p50_ms"], 3)  # type: ignore[index]
                row["added_p99_ms"] = round(f["p99_ms"] - d["p99_ms"], 3)  # type: ignore[index]
                rows.append(row)
        finally:
            for proc in procs:
                proc.terminate()
            for proc in procs:
                proc.wait(30)
            for server in servers:
                asyncio.run(server.stop())

    result = {
        "benchmark": "frontend_overhead",
        "command": "python benchmarks/frontend_overhead.py " + " ".join(sys.argv[1:]),
        "machine": {"cpus": __import__("os").cpu_count(), "python": platform.python_version()},
        "workload": {"prompt_tokens": args.prompt_len, "max_tokens": args.max_tokens, "stream": False,
                     "endpoint": "/v1/completions (token-id prompt)", "mock_speedup": args.speedup,
                     "requests_per_level": args.requests},
        "results": rows,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"{'conc':>4} | {'direct p50':>10} {'p99':>8} {'req/s':>8} | {'frontend p50':>12} {'p99':>8} {'req/s':>8} |"
          f" {'added p50':>9} {'added p99':>9}")
    for r in rows:
        d, f = r["direct"], r["frontend"]
        print(f"{r['concurrency']:>4} | {d['p50_ms']:>10.2f} {d['p99_ms']:>8.2f} {d['requests_per_s']:>8.1f} | "
              f"{f['p50_ms']:>12.2f} {f['p99_ms']:>8.2f} {f['requests_per_s']:>8.1f} | "
              f"{r['added_p50_ms']:>9.2f} {r['added_p99_ms']:>9.2f}")
    print(f"written to {args.out}")


if __name__ == "__main__":
    main()
