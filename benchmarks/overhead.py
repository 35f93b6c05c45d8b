"""What each router adds in front of one fast mock worker: latency and requests/s against the worker directly.

Targets, in turn, all in front of the SAME mock engine (speed-up 10000, so its simulated compute is
negligible and what remains is HTTP, JSON and routing):

- ``dynamo_lite``: this project's frontend (router mode ``kv``) with NATS, etcd and a worker agent
  attached to the engine (``--engine-url``); it tokenizes with ``builtin:mock-words``, so it sends the
  engine the token ids the engine would compute from the text itself; ``dynamo_lite:2-processes``: two
  frontend processes on one port (SO_REUSEPORT), as ``frontend.processes: 2`` runs them;
- ``aiohttp-floor``: benchmarks/floor_proxy.py, an aiohttp server that forwards each request's bytes to the
  engine with an aiohttp client and does nothing else: what aiohttp alone costs, the floor under this
  project's frontend (a reference, not a router);
- ``vllm-router:round_robin``, ``vllm-router:cache_aware``, ``vllm-router:kv_aware`` and
  ``sglang-router:cache_aware`` (benchmarks/peers.py, in benchmarks/.peers-venv), one at a time.

One engine serves every target, so "direct" is one baseline. Its KV events must reach both the agent
(whose relay binds a SUB socket that the engine's PUB connects to) and vllm-router kv_aware (whose SUB
always connects, and applies only the empty topic). A ZMQ forwarder in this process joins them: its SUB
binds where the engine's PUB connects, and its PUB binds for the router and connects to the agent. The
agent's relay ignores the topic, so the engine publishes on "" for both; both may replay from the engine's
ROUTER. With a single worker every policy picks that worker: the figures are each router's per-request
cost (vllm-router's cache_aware and kv_aware also POST /tokenize to the engine for every request).

CPU per request: the CPU seconds (user + system, from /proc/<pid>/stat) that each target's own processes
used over its measured requests, divided by their number. For this project those are the frontend
process(es), the worker agent and nats-server (KV events and load travel through it); etcd is idle
while serving and is left out. For a peer, its one router process. The engine's CPU per request is
given for both paths too. On a shared 2-core machine this is the figure that holds: wall-clock
figures include whatever else ran.

Requests: POST /v1/completions, non-streaming, a 64-word text prompt ``t<N> ...`` (32 words from one of
4 shared prefixes, then 32 unique to the request, so that cache-aware routers both insert and match),
16 output tokens. The engine's prefix cache is emptied before each target. For each target and
concurrency (1 and 32): a warm-up, then ``--rounds`` alternations of direct and target, ``--requests /
--rounds`` requests each, so that drift on a shared machine hits both alike; "added" is the target's
percentile minus direct's over the same alternations. At concurrency 1, streaming TTFT (to the first
chunk with text) likewise. Client, routers and engine share the machine's cores: on 2 cores the
absolute figures include that contention.

    .venv/bin/python benchmarks/overhead.py                    # ~2 min on 2 cores
    .venv/bin/python benchmarks/overhead.py --requests 400 --targets dynamo_lite vllm-router:round_robin

Writes benchmarks/results/overhead.json and overhead.png (added p50, req/s ratio); prints a markdown table
(benchmarks/overhead_report.py).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import json
import os
import platform
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import zmq

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks import peers
from benchmarks.cluster import stop, wait_for
from benchmarks.overhead_load import MODEL, Prompts, Target, cpu_seconds, drive, stats
from benchmarks.overhead_report import plot, table
from dynamo_lite.config import MockEngineSpec
from dynamo_lite.engines.mock import engine_command
from dynamo_lite.infra import EmbeddedEtcd, EmbeddedNats, free_port
from dynamo_lite.worker.engine import mock_engine_args

OURS = "dynamo_lite"
OURS_2 = "dynamo_lite:2-processes"
FLOOR = "aiohttp-floor"
TARGETS = (OURS, OURS_2, FLOOR, "vllm-router:round_robin", "vllm-router:cache_aware", "vllm-router:kv_aware",
           "sglang-router:cache_aware")
HOST = "127.0.0.1"


def log(line: str) -> None:
    print(f"[overhead {time.strftime('%H:%M:%S')}] {line}", flush=True)


# --- processes ----------------------------------------------------------------------------------------------
def get_json(url: str) -> dict[str, object]:
    return json.loads(urllib.request.urlopen(url, timeout=2).read())


def reset_prefix_cache(engine_url: str) -> None:
    """Empty the engine's cache: each target starts alike, and a router that joined late (kv_aware) hears
    every block stored from now on (older ones may be past the engine's replay buffer)."""
    urllib.request.urlopen(urllib.request.Request(f"{engine_url}/reset_prefix_cache", b"", method="POST"), timeout=5)


def serves_one_worker(frontend_url: str) -> bool:
    health = get_json(f"{frontend_url}/health")
    return health["models"][MODEL].get("aggregated") == 1  # type: ignore[index]


class Processes:
    """Child processes, each logging to a file; `stop_all()` ends them in reverse order."""

    def __init__(self, log_dir: Path) -> None:
        self.log_dir = log_dir
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(self, name: str, argv: list[str]) -> subprocess.Popen[bytes]:
        with open(self.log_dir / f"{name}.log", "wb") as out:
            proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)
        self.procs.append(proc)
        return proc

    def stop_all(self) -> None:
        stop(self.procs[::-1], grace_s=15.0)
        self.procs.clear()


@contextlib.contextmanager
def kv_event_fanout(engine_side: str, router_side: str, agent_side: str) -> Iterator[None]:
    """Forward the engine's KV events: SUB bound at `engine_side` (the engine's PUB connects), PUB bound
    at `router_side` (vllm-router's SUB connects) and connected to `agent_side` (the agent's bound SUB)."""
    ctx = zmq.Context()
    sub, pub = ctx.socket(zmq.SUB), ctx.socket(zmq.PUB)
    ctl_in, ctl_out = ctx.socket(zmq.PAIR), ctx.socket(zmq.PAIR)
    sub.setsockopt(zmq.SUBSCRIBE, b"")
    sub.bind(engine_side)
    pub.bind(router_side)
    pub.connect(agent_side)
    ctl_in.bind("inproc://overhead-ctl")
    ctl_out.connect("inproc://overhead-ctl")
    thread = threading.Thread(target=zmq.proxy_steerable, args=(sub, pub, None, ctl_in), daemon=True)
    thread.start()
    try:
        yield
    finally:
        ctl_out.send(b"TERMINATE")
        thread.join(5)
        ctx.destroy(linger=0)


@contextlib.contextmanager
def dynamo_lite(tmp: Path, engine_url: str, agent_events: int, replay: str, processes: int = 1) -> Iterator[Target]:
    """NATS, etcd, one agent attached to the engine, `processes` frontend processes (router mode kv) on one
    port (with several: SO_REUSEPORT, each also serving /health and /metrics on a port of its own)."""
    nats, etcd = EmbeddedNats(tmp / "nats"), EmbeddedEtcd(tmp / "etcd")
    procs = Processes(tmp / "logs")
    try:
        for server in (nats, etcd):
            asyncio.run(server.start())
        spec = tmp / "cluster.yaml"
        spec.write_text(
            f"namespace: overhead\nstate_dir: {tmp / 'state'}\n"
            f"models: [{{name: {MODEL}, path: 'builtin:mock-words', block_size: 16, max_model_len: 4096}}]\n"
            f"frontend: {{host: {HOST}, router: {{mode: kv}}}}\n"
            "pools: [{name: w, role: aggregated, engine: mock}]\n")
        cluster = ["-f", str(spec), "--nats-url", nats.url, "--etcd-url", etcd.url, "--log-level", "warning"]
        agent = procs.start("agent", [sys.executable, "-m", "dynamo_lite.worker", *cluster, "--pool", "w", "--worker-id",
                              "w0", "--engine-url", engine_url, "--kv-events-port", str(agent_events),
                              "--kv-events-replay", replay])
        for attempt in (1, 2, 3):  # a free port may be taken before the frontend binds it (busy machine)
            url = f"http://{HOST}:{(port := free_port())}"
            frontends = []
            for i in range(processes):
                extra = ["--reuse-port", "--process-index", str(i), "--metrics-port", str(free_port())] \
                    if processes > 1 else []
                frontends.append(procs.start(f"frontend{i}", [sys.executable, "-m", "dynamo_lite.frontend", *cluster,
                                                              "--port", str(port), *extra]))
            try:
                for i, frontend in enumerate(frontends):
                    own = f"http://{HOST}:{frontend.args[-1]}" if processes > 1 else url
                    wait_for(functools.partial(serves_one_worker, own), 120, f"frontend {i} with one worker", frontend)
                break
            except RuntimeError:
                if attempt == 3 or not any(b"address already in use" in f.read_bytes()
                                           for f in (tmp / "logs").glob("frontend*.log")):
                    raise
                stop(frontends, grace_s=5.0)
                procs.procs = [p for p in procs.procs if p not in frontends]
                log(f"frontend: port {port} was taken meanwhile; again on another")
        assert nats.process is not None
        pids = {f"frontend{i}" if processes > 1 else "frontend": f.pid for i, f in enumerate(frontends)}
        yield Target(url, f"{url}/metrics", {**pids, "agent": agent.pid, "nats-server": nats.process.pid})
    finally:
        procs.stop_all()
        for server in (etcd, nats):
            asyncio.run(server.stop())


async def paired(direct_url: str, target: Target, engine_pid: int, prompts: Prompts, args: argparse.Namespace,
                 concurrency: int, stream: bool, n: int) -> dict[str, object]:  # fmt: skip
    """Warm-up, then `args.rounds` alternations of direct and the target; stats of each, the differences
    and CPU per request (the target's processes; the engine's on both paths)."""
    timeout = aiohttp.ClientTimeout(total=args.timeout)
    lat: dict[str, list[float]] = {"direct": [], "via": []}
    wall = {"direct": 0.0, "via": 0.0}
    engine_cpu = {"direct": 0.0, "via": 0.0}
    own_cpu = dict.fromkeys(target.pids, 0.0)
    async with (aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0), timeout=timeout) as ds,
                aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0), timeout=timeout) as vs):
        paths = (("direct", ds, direct_url), ("via", vs, target.url))
        for _, session, u in paths:
            await drive(session, u, prompts, max(args.warmup, 2 * concurrency), concurrency, args.max_tokens, stream)
        for _ in range(args.rounds):
            for name, session, u in paths:
                before = {k: cpu_seconds([pid]) for k, pid in target.pids.items()}
                engine_before = cpu_seconds([engine_pid])
                got, seconds = await drive(session, u, prompts, n // args.rounds, concurrency, args.max_tokens, stream)
                engine_cpu[name] += cpu_seconds([engine_pid]) - engine_before
                if name == "via":
                    for k, pid in target.pids.items():
                        own_cpu[k] += cpu_seconds([pid]) - before[k]
                lat[name] += got
                wall[name] += seconds
    d, v = stats(lat["direct"], wall["direct"]), stats(lat["via"], wall["via"])
    per_ms = {k: round(1000 * c / len(lat["via"]), 4) for k, c in own_cpu.items()}
    return {"direct": d, "via": v, "added_p50_ms": round(v["p50_ms"] - d["p50_ms"], 3),
            "added_p99_ms": round(v["p99_ms"] - d["p99_ms"], 3),
            "rps_ratio": round(v["requests_per_s"] / d["requests_per_s"], 3),
            "cpu_ms_per_request": {"target": round(sum(per_ms.values()), 4), "by_process": per_ms,
                                   "engine_direct": round(1000 * engine_cpu["direct"] / len(lat["direct"]), 4),
                                   "engine_via": round(1000 * engine_cpu["via"] / len(lat["via"]), 4)}}


# --- one target ---------------------------------------------------------------------------------------------
@contextlib.contextmanager
def floor(tmp: Path, engine_url: str) -> Iterator[Target]:
    """benchmarks/floor_proxy.py in front of the engine: aiohttp's own cost, before any of the frontend's work."""
    port = free_port()
    procs = Processes(tmp / "logs")
    try:
        proc = procs.start(FLOOR, [sys.executable, str(Path(__file__).parent / "floor_proxy.py"), "--host", HOST,
                                   "--port", str(port), "--engine-url", engine_url])
        url = f"http://{HOST}:{port}"
        wait_for(lambda: urllib.request.urlopen(f"{url}/health", timeout=2).status == 200, 60, FLOOR, proc)
        yield Target(url, "", {FLOOR: proc.pid})
    finally:
        procs.stop_all()


@contextlib.contextmanager
def peer(tmp: Path, env: peers.PeerEnv, label: str, engine_url: str, events: str, replay: str
         ) -> Iterator[Target]:  # fmt: skip
    """`label`'s router in front of the engine."""
    router = peers.find_peer(label)
    port, metrics = free_port(), free_port()
    kv = router.needs_kv_events
    argv = peers.router_command(router, env, HOST, port, [engine_url], [events] if kv else (),
                                kv_replay_endpoints=[replay] if kv else (), model=MODEL, metrics_port=metrics)
    procs = Processes(tmp / "logs")
    try:
        proc = procs.start(label.replace(":", "-"), argv)
        url = f"http://{HOST}:{port}"
        peers.wait_ready(url, 1, timeout_s=60, proc=proc)
        yield Target(url, f"http://{HOST}:{metrics}/metrics", {label: proc.pid})
    finally:
        procs.stop_all()


COUNTERS = ("vllm_router_kv_routing_inputs_total", "vllm_router_kv_placement_lookups_total",
            "dynamo_lite_frontend_routed_overlap_tokens_total")


def counters(metrics_url: str) -> dict[str, float]:
    """Counters that show the routers' inputs: vllm-router's /tokenize calls and KV index lookups, the
    frontend's expected-cached tokens (KV index hits: proof that the engine's KV events arrive)."""
    if not metrics_url:
        return {}
    try:
        text = urllib.request.urlopen(metrics_url, timeout=5).read().decode()
    except OSError:
        return {}
    return {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
            if line.startswith(COUNTERS)}


def measure(label: str, target: Target, direct_url: str, engine_pid: int, prompts: Prompts,
            args: argparse.Namespace) -> list[dict]:  # fmt: skip
    rows: list[dict] = []
    for concurrency in args.concurrency:
        row = asyncio.run(asyncio.wait_for(
            paired(direct_url, target, engine_pid, prompts, args, concurrency, False, args.requests), args.deadline))
        row = {"target": label, "concurrency": concurrency, **row}
        if concurrency == 1 and args.ttft_requests:
            ttft = asyncio.run(asyncio.wait_for(
                paired(direct_url, target, engine_pid, prompts, args, 1, True, args.ttft_requests), args.deadline))
            row["ttft"] = ttft
        log(f"{label:<26} c={concurrency:<3} p50 {row['via']['p50_ms']:7.2f} ms (direct {row['direct']['p50_ms']:.2f})"
            f"  {row['via']['requests_per_s']:7.1f} req/s (direct {row['direct']['requests_per_s']:.1f})"
            f"  CPU {row['cpu_ms_per_request']['target']:.3f} ms/request")
        rows.append(row)
    return rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--targets", nargs="+", default=list(TARGETS), choices=TARGETS)
    p.add_argument("--concurrency", type=int, nargs="+", default=[1, 32])
    p.add_argument("--requests", type=int, default=2500, help="measured requests per path, target and concurrency")
    p.add_argument("--ttft-requests", type=int, default=200, help="streaming requests per path at c=1; 0: skip")
    p.add_argument("--rounds", type=int, default=5, help="alternations of direct and target")
    p.add_argument("--warmup", type=int, default=30, help="requests per path before measuring (at least 2x conc)")
    p.add_argument("--max-tokens", type=int, default=16)
    p.add_argument("--speedup", type=float, default=10000.0, help="mock speed-up: large = negligible engine time")
    p.add_argument("--timeout", type=float, default=30.0, help="seconds per request")
    p.add_argument("--deadline", type=float, default=180.0, help="seconds per target and concurrency")
    p.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "overhead.json")
    args = p.parse_args()

    started, load_start = time.monotonic(), os.getloadavg()
    env = peers.ensure_installed(progress=log) if any(t not in (OURS, OURS_2, FLOOR) for t in args.targets) else None
    prompts = Prompts()
    rows: list[dict] = []
    inputs: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory(prefix="overhead-") as tmp_dir:
        tmp = Path(tmp_dir)
        (tmp / "logs").mkdir()
        procs = Processes(tmp / "logs")
        port, fwd_in, fwd_out, agent_events, replay_port = (free_port() for _ in range(5))
        engine_url, replay = f"http://{HOST}:{port}", f"tcp://{HOST}:{replay_port}"
        engine_args = mock_engine_args(MockEngineSpec(speedup_ratio=args.speedup), MODEL, 16, 4096, port,
                                       f"tcp://{HOST}:{fwd_in}", replay, topic=peers.KV_EVENTS_TOPIC)
        try:
            with kv_event_fanout(f"tcp://{HOST}:{fwd_in}", f"tcp://{HOST}:{fwd_out}", f"tcp://{HOST}:{agent_events}"):
                engine = procs.start("engine", engine_command(engine_args))
                wait_for(lambda: urllib.request.urlopen(f"{engine_url}/health", timeout=2).status == 200, 60,
                         "mock engine", engine)
                log(f"mock engine at {engine_url} (speed-up {args.speedup:g})")
                for target in args.targets:
                    t0 = time.monotonic()
                    if target in (OURS, OURS_2):
                        running = dynamo_lite(tmp, engine_url, agent_events, replay, 2 if target == OURS_2 else 1)
                    elif target == FLOOR:
                        running = floor(tmp, engine_url)
                    else:
                        assert env is not None
                        running = peer(tmp, env, target, engine_url, f"tcp://{HOST}:{fwd_out}", replay)
                    with running as running_target:
                        log(f"{target}: ready in {time.monotonic() - t0:.1f} s")
                        reset_prefix_cache(engine_url)
                        rows += measure(target, running_target, engine_url, engine.pid, prompts, args)
                        inputs[target] = counters(running_target.metrics_url)
                        log(f"{target}: {inputs[target]}")
        except BaseException:
            for f in sorted((tmp / "logs").glob("*.log")):
                log(f"--- {f.name} (tail)\n{f.read_text(errors='replace')[-1500:]}")
            raise
        finally:
            procs.stop_all()

    elapsed = time.monotonic() - started
    result = {
        "benchmark": "overhead",
        "command": "python benchmarks/overhead.py " + " ".join(sys.argv[1:]),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "load_avg_start": load_start,
                    "load_avg_end": os.getloadavg()},
        "peers": peers.PINS,
        "workload": {"endpoint": "/v1/completions", "prompt": "64 words t<N> (32 from 4 shared prefixes)",
                     "max_tokens": args.max_tokens, "mock_speedup": args.speedup, "requests": args.requests,
                     "ttft_requests": args.ttft_requests, "rounds": args.rounds},
        "results": rows,
        "router_counters": inputs,
        "elapsed_s": round(elapsed, 1),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    plot(rows, args.out.with_suffix(".png"))
    print(table(rows))
    log(f"done in {elapsed:.0f} s; written {args.out} and {args.out.with_suffix('.png').name}")


if __name__ == "__main__":
    main()
