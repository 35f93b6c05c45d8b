"""Router arena: the same mock fleet and the same trace slice behind each router in turn.

For each router, a fresh fleet of ``--workers`` mock engines (same seed, same parameters, empty
caches) is started, the router is put in front of it, and the same slice of the Mooncake trace
is replayed through it with `trace_replay` (text prompts, streaming, open loop). Routers:

- this project, ``orchestrator up`` of a generated cluster.yaml (NATS, etcd, one agent per
  engine, the frontend) in router modes ``kv`` (KV events), ``approx`` (its own decisions) and
  ``round_robin``, one frontend process; ``kv:2p``: mode ``kv`` with two frontend processes on one port
  (``frontend.processes: 2``, load shared over NATS); the frontend tokenizes with ``builtin:mock-words``, so it sends the engines
  the token ids they would compute from the text themselves;
- ``vllm-router`` (``cache_aware``; ``kv_aware`` fed by the engines' ZMQ KV events;
  ``round_robin``) and ``sglang-router`` (``cache_aware``), installed on demand into
  benchmarks/.peers-venv (see peers.py), in front of engines started directly.

The engines of both kinds are built by one function (`mock_engine_args`), so they are equal
but for where their KV events go. The prefix-hit ratio is the engines' own count
(``usage.prompt_tokens_details.cached_tokens``), the same for every router. For ours, the balance of the load: requests routed to each worker, summed
over every frontend process's own /metrics (max/mean and coefficient of variation). Everything binds to
127.0.0.1; each request has a timeout and each run a deadline.

    .venv/bin/python benchmarks/arena.py                         # reduced: 1,000 requests, ~5 min
    .venv/bin/python benchmarks/arena.py --requests 2000 --time-scale 0.15   # the README's table (~15 min)
    .venv/bin/python benchmarks/arena.py --routers dynamo_lite:kv,sglang-router:cache_aware

Writes benchmarks/results/arena.json and arena.png; prints the table (ratios to dynamo_lite:kv).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks import peers, trace_replay  # noqa: E402
from benchmarks.cluster import counter_by_label, frontend_processes, orchestrator_up, stop, wait_for  # noqa: E402
from benchmarks.paths import RESULTS, add_trace_option, recorded_args  # noqa: E402
from dynamo_lite.config import MockEngineSpec  # noqa: E402
from dynamo_lite.engines.mock import engine_command  # noqa: E402
from dynamo_lite.infra import free_port  # noqa: E402
from dynamo_lite.worker.engine import mock_engine_args  # noqa: E402

MODEL = "bench"
OURS = ("dynamo_lite:kv", "dynamo_lite:kv:2p", "dynamo_lite:approx", "dynamo_lite:round_robin")
ROUTERS = (*OURS, *(p.label for p in peers.PEERS))


@dataclass(frozen=True)
class FleetParams:
    workers: int
    block_size: int
    num_gpu_blocks: int
    speedup: float
    max_model_len: int
    seed: int = 0

    def mock(self) -> MockEngineSpec:
        return MockEngineSpec(speedup_ratio=self.speedup, num_gpu_blocks=self.num_gpu_blocks, seed=self.seed)


def log(line: str) -> None:
    print(f"[arena {time.strftime('%H:%M:%S')}] {line}", flush=True)


@contextlib.contextmanager
def ours(label: str, fleet: FleetParams, work: Path) -> Iterator[str]:
    """`orchestrator up` of a mock cluster for `label` (dynamo_lite:<mode>[:<N>p]); yields the frontend's URL."""
    mode, _, procs = label.split(":", 1)[1].partition(":")
    processes = int(procs.removesuffix("p")) if procs else 1
    port = free_port()
    spec = work / f"cluster-{mode}-{processes}p.yaml"
    m = fleet.mock()
    spec.write_text(
        f"namespace: arena\nstate_dir: {work / 'state'}\n"
        f"models: [{{name: {MODEL}, path: 'builtin:mock-words', block_size: {fleet.block_size}, "
        f"max_model_len: {fleet.max_model_len}}}]\n"
        f"frontend: {{port: {port}, processes: {processes}, max_concurrent_requests: 4096, max_queued_requests: 4096, "
        f"upstream_timeout_s: 600, router: {{mode: {mode}}}}}\n"
        f"pools:\n  - {{name: workers, role: aggregated, engine: mock, model: {MODEL}, replicas: {fleet.workers}, "
        f"mock: {{speedup_ratio: {m.speedup_ratio}, num_gpu_blocks: {m.num_gpu_blocks}, seed: {m.seed}}}}}\n")
    with orchestrator_up(spec, work / f"up-{mode}-{processes}p.log") as url:
        yield url


@contextlib.contextmanager
def peer(label: str, fleet: FleetParams, env: peers.PeerEnv, work: Path) -> Iterator[str]:
    """`fleet.workers` mock engines started directly, `label`'s router in front; yields its URL."""
    router = peers.find_peer(label)
    procs: list[subprocess.Popen] = []
    urls, events, replays, logs = [], [], [], []
    try:
        for i in range(fleet.workers):
            port, pub, replay = free_port(), free_port(), free_port()
            args = mock_engine_args(fleet.mock(), MODEL, fleet.block_size, fleet.max_model_len, port,
                                    f"tcp://*:{pub}", f"tcp://*:{replay}", topic=peers.KV_EVENTS_TOPIC)
            logs.append(work / f"{router.name}-engine{i}.log")
            with open(logs[-1], "wb") as out:
                procs.append(subprocess.Popen(engine_command(args), stdout=out, stderr=subprocess.STDOUT))
            urls.append(f"http://127.0.0.1:{port}")
            events.append(f"tcp://127.0.0.1:{pub}")
            replays.append(f"tcp://127.0.0.1:{replay}")
        for url, proc, log_path in zip(urls, procs, logs, strict=True):
            wait_for(lambda u=url: urllib.request.urlopen(f"{u}/health", timeout=2).status == 200, 120,
                     f"mock engine {url}", proc, log_path)
        port = free_port()
        argv = peers.router_command(router, env, "127.0.0.1", port, urls,
                                    events if router.needs_kv_events else (),
                                    kv_replay_endpoints=replays if router.needs_kv_events else (),
                                    model=MODEL, block_size=fleet.block_size)
        with open(work / f"{router.name}-{router.policy}.log", "wb") as out:
            procs.append(subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT))
        url = f"http://127.0.0.1:{port}"
        peers.wait_ready(url, fleet.workers, timeout_s=120, proc=procs[-1])
        yield url
    finally:
        stop(procs[::-1])


@dataclass
class Entry:
    router: str
    startup_s: float
    summary: dict
    error_samples: list[str]  # a few distinct error messages, to say why requests failed
    routed_per_worker: dict[str, float] | None = None  # ours: requests routed per worker, over every process
    routed_per_process: list[float] | None = None  # ours: requests each frontend process routed


def balance(per_worker: dict[str, float] | None, workers: int) -> tuple[float, float] | None:
    """(max/mean, coefficient of variation) of the requests per worker; a worker given none counts 0."""
    if not per_worker:
        return None
    counts = [*per_worker.values(), *[0.0] * max(0, workers - len(per_worker))]
    mean = sum(counts) / len(counts)
    sd = (sum((c - mean) ** 2 for c in counts) / len(counts)) ** 0.5
    return (max(counts) / mean, sd / mean) if mean else None


def run_one(label: str, fleet: FleetParams, requests: list, args: argparse.Namespace, env: peers.PeerEnv | None,
            work: Path) -> Entry:  # fmt: skip
    for attempt in (1, 2):  # a fleet that fails to start (a port taken meanwhile) gets one more try
        started = time.monotonic()
        stack = contextlib.ExitStack()
        try:
            if label in OURS:
                url = stack.enter_context(ours(label, fleet, work))
            else:
                assert env is not None
                url = stack.enter_context(peer(label, fleet, env, work))
            break
        except (RuntimeError, TimeoutError) as e:
            stack.close()
            if attempt == 2:
                raise
            log(f"{label}: start-up failed ({e}); trying again")
    with stack:
        startup = time.monotonic() - started
        log(f"{label}: ready in {startup:.0f} s; replaying {len(requests)} requests")

        def progress(p: trace_replay.Progress) -> None:
            log(f"{label}: {p.elapsed_s:5.0f} s  sent {p.sent}/{p.total}  done {p.finished}  errors {p.errors}")

        result = asyncio.run(asyncio.wait_for(
            trace_replay.replay(url, MODEL, requests, time_scale=args.time_scale, timeout_s=args.timeout,
                                progress=progress, progress_every_s=15),
            timeout=args.time_scale * requests[-1].at_s + args.timeout + 60))  # fmt: skip
        routed, per_process = None, None
        if label in OURS:
            urls = [p.metrics_url or p.url for p in frontend_processes(work / "state") if p.metrics_url or p.url]
            each = [counter_by_label([u], "dynamo_lite_frontend_routing_decisions", "worker") for u in urls]
            routed = {w: sum(c.get(w, 0.0) for c in each) for w in sorted({w for c in each for w in c})}
            per_process = [sum(c.values()) for c in each]
            log(f"{label}: requests per worker over {len(urls)} frontend process(es): "
                f"{', '.join(f'{v:.0f}' for v in sorted(routed.values()))}; per process: {per_process}")
    summary = trace_replay.summarize(result.records, result.wall_s, slo_ttft_ms=args.slo_ttft_ms,
                                     slo_itl_ms=args.slo_itl_ms)
    log(f"{label}: {summary.completed}/{summary.sent} completed, hits {summary.prefix_hit_ratio}, "
        f"TTFT p50 {summary.ttft_ms.p50 if summary.ttft_ms else None} ms")
    samples = sorted({r.error for r in result.records if r.error})[:5]
    for sample in samples:
        log(f"{label}: error: {sample[:300]}")
    return Entry(label, round(startup, 1), asdict(summary), samples, routed, per_process)


def table(entries: list[Entry], ceiling: float, workers: int) -> str:
    base = next((e for e in entries if e.router == "dynamo_lite:kv"), entries[0]).summary

    def ratio(value: float | None, ref: float | None) -> str:
        return f"{value / ref:.2f}x" if value is not None and ref else "-"

    lines = [f"| router | completed | prefix hits (ceiling {ceiling:.1%}) | TTFT p50 ms | TTFT p99 ms | "
             f"goodput req/s | hits vs kv | TTFT p50 vs kv | goodput vs kv | requests/worker max/mean | CV |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for e in entries:
        s = e.summary
        ttft = s["ttft_ms"] or {}
        hits = s["prefix_hit_ratio"]
        spread = balance(e.routed_per_worker, workers)
        lines.append(
            f"| {e.router} | {s['completed']}/{s['sent']} | {hits:.1%} | {ttft.get('p50', float('nan')):.0f} | "
            f"{ttft.get('p99', float('nan')):.0f} | {s['goodput_rps']:.2f} | {ratio(hits, base['prefix_hit_ratio'])} | "
            f"{ratio(ttft.get('p50'), (base['ttft_ms'] or {}).get('p50'))} | "
            f"{ratio(s['goodput_rps'], base['goodput_rps'])} | "
            f"{f'{spread[0]:.2f} | {spread[1]:.2f}' if spread else '- | -'} |")  # fmt: skip
    return "\n".join(lines)


def plot(entries: list[Entry], ceiling: float, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [e.router if [x.router for x in entries].count(e.router) == 1
             else f"{e.router} #{[x.router for x in entries[:i]].count(e.router) + 1}"
             for i, e in enumerate(entries)]  # a router run twice gets two bars  # fmt: skip
    fig, axes = plt.subplots(1, 3, figsize=(16, 5))
    hits = [100 * (e.summary["prefix_hit_ratio"] or 0) for e in entries]
    axes[0].barh(names, hits, color="tab:green")
    axes[0].axvline(100 * ceiling, color="k", linestyle="--", label=f"ceiling {ceiling:.1%}")
    axes[0].set_xlabel("prefix hits (% of prompt tokens)")
    axes[0].legend()
    p50 = [(e.summary["ttft_ms"] or {}).get("p50", 0) for e in entries]
    p99 = [(e.summary["ttft_ms"] or {}).get("p99", 0) for e in entries]
    y = range(len(names))
    axes[1].barh([i + 0.2 for i in y], p99, height=0.4, label="p99", color="tab:red")
    axes[1].barh([i - 0.2 for i in y], p50, height=0.4, label="p50", color="tab:blue")
    axes[1].set_yticks(list(y), names)
    axes[1].set_xlabel("TTFT (ms)")
    axes[1].legend()
    axes[2].barh(names, [e.summary["goodput_rps"] for e in entries], color="tab:purple")
    axes[2].set_xlabel("goodput (req/s within SLOs)")
    for ax in axes[1:]:
        ax.tick_params(labelleft=False)
    fig.suptitle("Router arena: same mock fleet, same Mooncake trace slice")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--routers", default=",".join(ROUTERS), help=f"comma-separated, from: {', '.join(ROUTERS)}")
    add_trace_option(p)
    p.add_argument("--requests", type=int, default=1000,
                   help="trace requests replayed per router (prefix sharing grows with the slice: the ceiling is "
                        "17%% for 1,000, 34%% for 2,000, 65%% for all 3,993)")
    p.add_argument("--workers", type=int, default=8, help="mock engines in the fleet")
    p.add_argument("--time-scale", type=float, default=0.1, help="wall seconds per trace second")
    p.add_argument("--tokens-per-hash", type=int, default=64, help="prompt tokens per 512-token trace block")
    p.add_argument("--max-output", type=int, default=32, help="cap on output tokens per request")
    p.add_argument("--num-gpu-blocks", type=int, default=16384,
                   help="KV cache blocks per engine (16,384 x 16 tokens: about 140 of the 8x-reduced prompts)")
    p.add_argument("--block-size", type=int, default=16)
    p.add_argument("--speedup", type=float, default=None, help="mock speed-up (default: 1 / time-scale)")
    p.add_argument("--timeout", type=float, default=300.0, help="seconds per request")
    p.add_argument("--slo-ttft-ms", type=float, default=1000.0)
    p.add_argument("--slo-itl-ms", type=float, default=50.0)
    p.add_argument("--out", type=Path, default=RESULTS / "arena.json")
    args = p.parse_args(argv)
    labels = [r.strip() for r in args.routers.split(",") if r.strip()]
    unknown = sorted(set(labels) - set(ROUTERS))
    if unknown:
        p.error(f"unknown router(s) {', '.join(unknown)}; choose from {', '.join(ROUTERS)}")

    requests = trace_replay.load_trace(args.trace, args.requests, args.tokens_per_hash, max_output=args.max_output)
    longest = max(r.input_tokens + r.output_tokens for r in requests)
    fleet = FleetParams(args.workers, args.block_size, args.num_gpu_blocks, args.speedup or 1 / args.time_scale,
                        max_model_len=max(4096, longest + 1))
    ceiling = trace_replay.prefix_hit_ceiling(requests)
    log(f"{len(requests)} requests over {requests[-1].at_s * args.time_scale:.0f} s wall, {fleet.workers} workers, "
        f"ceiling {ceiling:.1%}; routers: {', '.join(labels)}")
    env = peers.ensure_installed(progress=lambda line: log(line)) if set(labels) - set(OURS) else None

    entries: list[Entry] = []
    with tempfile.TemporaryDirectory(prefix="arena-") as tmp:
        work = Path(tmp)
        for label in labels:
            entries.append(run_one(label, fleet, requests, args, env, work))
    text = table(entries, ceiling, fleet.workers)
    print(text)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    result = {"command": " ".join([Path(sys.argv[0]).name, *(argv if argv is not None else sys.argv[1:])]),
              "machine": f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}",
              "fleet": asdict(fleet), "args": {k: str(v) for k, v in recorded_args(args).items()}, "ceiling": ceiling,
              "peers": peers.PINS, "routers": [asdict(e) for e in entries], "table": text}
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    plot(entries, ceiling, args.out.with_suffix(".png"))
    log(f"wrote {args.out} and {args.out.with_suffix('.png')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
