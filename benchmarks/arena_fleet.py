"""The arena's fleets: the same engines behind this project's cluster or behind a peer router.

    with ours("dynamo_lite:blocks", fleet, work) as f:    # orchestrator up of a generated cluster.yaml
        f.url, f.engine_urls
    with peer("sglang-router:cache_aware", fleet, env, work) as f:   # engines started here, the router in front
        ...
    engine_counters(f.engine_urls)   # each engine's mock:busy_seconds_total, finished and preempted requests

Both kinds of engine are built by one function (`mock_engine_args`, or the pool's `mock:` section that
feeds it), so they are equal but for where their KV events go. With ``engine="vllm"`` they are real vLLM
engines instead (`VllmEngineConfig`, as a pool's workers run it), serving ``builtin:tiny-words``: a tiny
random-weight Llama whose tokenizer is the mock's words, so the prompts are the same token ids, block for
block, and each engine's KV cache is cut to ``num_gpu_blocks`` (``--num-gpu-blocks-override``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import subprocess
import threading
import time
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from benchmarks import peers
from benchmarks.cluster import orchestrator_up, stop, wait_for
from dynamo_lite.config import MockEngineSpec, load_cluster_spec
from dynamo_lite.engines.mock import engine_command
from dynamo_lite.engines.models import resolve_model
from dynamo_lite.engines.vllm import VllmEngineConfig
from dynamo_lite.infra import free_port
from dynamo_lite.orchestrator.status import cluster_status
from dynamo_lite.worker.engine import mock_engine_args

MODEL = "bench"
VLLM_MODEL = "builtin:tiny-words"  # the real engines' model: the mock's tokenizer, random weights
BUSY = "mock:busy_seconds"  # simulated seconds in engine steps (dynamo_lite/engines/mock/metrics.py)
DONE = "vllm:request_success"  # requests finished, by finish reason
PREEMPTED = "vllm:num_preemptions"  # requests the engine preempted for KV space (vLLM and the mock)
GAUGES = {"running": "vllm:num_requests_running", "waiting": "vllm:num_requests_waiting",
          "kv_usage": "vllm:kv_cache_usage_perc"}  # an engine's timeline: vLLM's names, the mock's too


@dataclass(frozen=True)
class FleetParams:
    workers: int
    block_size: int
    num_gpu_blocks: int
    speedup: float
    max_model_len: int
    timing: str = "roofline"  # MockEngineSpec.timing
    seed: int = 0
    engine: str = "mock"  # or vllm: real engines serving `model`; timing, speedup and seed are the mock's only
    model: str = VLLM_MODEL  # the real engines' model (a cluster.yaml model path)

    def mock(self) -> MockEngineSpec:
        return MockEngineSpec(timing=self.timing, speedup_ratio=self.speedup,  # type: ignore[arg-type]
                              num_gpu_blocks=self.num_gpu_blocks, seed=self.seed)


@dataclass(frozen=True)
class Fleet:
    url: str  # the router's base URL
    engine_urls: list[str]  # every engine's base URL (its /metrics)


@contextlib.contextmanager
def ours(label: str, fleet: FleetParams, work: Path) -> Iterator[Fleet]:
    """`orchestrator up` of a mock cluster for `label`: dynamo_lite:<mode>[+<router key>=<value>...][:<N>p],
    e.g. dynamo_lite:ttft+itl_guard=false+copy_weight=2:2p (keys of cluster.yaml's frontend.router)."""
    mode, _, procs = label.split(":", 1)[1].partition(":")
    processes = int(procs.removesuffix("p")) if procs else 1
    mode, *options = mode.split("+")
    router = ", ".join([f"mode: {mode}", *(o.replace("=", ": ", 1) for o in options)])
    port = free_port()
    spec = work / f"cluster-{mode}-{len(options)}-{processes}p.yaml"
    if fleet.engine == "vllm":
        path = fleet.model
        engine = f"engine: vllm, vllm: {{extra_args: ['--num-gpu-blocks-override', '{fleet.num_gpu_blocks}']}}"
    else:
        m = fleet.mock()
        path = "builtin:mock-words"
        engine = (f"engine: mock, mock: {{timing: {m.timing}, speedup_ratio: {m.speedup_ratio}, "
                  f"num_gpu_blocks: {m.num_gpu_blocks}, seed: {m.seed}}}")
    spec.write_text(
        f"namespace: arena\nstate_dir: {work / 'state'}\n"
        f"models: [{{name: {MODEL}, path: '{path}', block_size: {fleet.block_size}, "
        f"max_model_len: {fleet.max_model_len}}}]\n"
        f"frontend: {{port: {port}, processes: {processes}, max_concurrent_requests: 4096, max_queued_requests: 4096, "
        f"upstream_timeout_s: 600, router: {{{router}}}}}\n"
        f"pools:\n  - {{name: workers, role: aggregated, {engine}, model: {MODEL}, replicas: {fleet.workers}}}\n")
    with orchestrator_up(spec, spec.with_suffix(".log")) as url:
        status = asyncio.run(cluster_status(load_cluster_spec(spec)))
        yield Fleet(url, sorted(w.engine_url for w in status.workers))


@contextlib.contextmanager
def peer(label: str, fleet: FleetParams, env: peers.PeerEnv, work: Path) -> Iterator[Fleet]:
    """`fleet.workers` mock engines started directly, `label`'s router in front."""
    router = peers.find_peer(label)
    procs: list[subprocess.Popen] = []
    urls, events, replays, logs = [], [], [], []
    try:
        for i in range(fleet.workers):
            port, pub, replay = free_port(), free_port(), free_port()
            argv, engine_env = _engine(fleet, i, port, f"tcp://*:{pub}", f"tcp://*:{replay}", work)
            logs.append(work / f"{router.name}-engine{i}.log")
            with open(logs[-1], "wb") as out:
                procs.append(subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=engine_env))
            urls.append(f"http://127.0.0.1:{port}")
            events.append(f"tcp://127.0.0.1:{pub}")
            replays.append(f"tcp://127.0.0.1:{replay}")
        for url, proc, log_path in zip(urls, procs, logs, strict=True):
            wait_for(lambda u=url: urllib.request.urlopen(f"{u}/health", timeout=2).status == 200,
                     600 if fleet.engine == "vllm" else 120, f"{fleet.engine} engine {url}", proc, log_path)
        port = free_port()
        argv = peers.router_command(router, env, "127.0.0.1", port, urls,
                                    events if router.needs_kv_events else (),
                                    kv_replay_endpoints=replays if router.needs_kv_events else (),
                                    model=MODEL, block_size=fleet.block_size)
        with open(work / f"{router.name}-{router.policy}.log", "wb") as out:
            procs.append(subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT))
        url = f"http://127.0.0.1:{port}"
        peers.wait_ready(url, fleet.workers, timeout_s=120, proc=procs[-1])
        yield Fleet(url, urls)
    finally:
        stop(procs[::-1])


def _engine(fleet: FleetParams, i: int, port: int, events: str, replay: str,
            work: Path) -> tuple[list[str], dict[str, str] | None]:  # fmt: skip
    """The command and environment of a peer's engine ``i``: as a pool's worker runs it, events to ``events``."""
    if fleet.engine != "vllm":
        args = mock_engine_args(fleet.mock(), MODEL, fleet.block_size, fleet.max_model_len, port, events, replay,
                                topic=peers.KV_EVENTS_TOPIC)  # fmt: skip
        return engine_command(args), None
    config = VllmEngineConfig(
        model_dir=resolve_model(fleet.model, work / "models"), served_model_name=MODEL, port=port,
        max_model_len=fleet.max_model_len, block_size=fleet.block_size, kv_events_endpoint=events,
        kv_events_replay_endpoint=replay, kv_events_topic=peers.KV_EVENTS_TOPIC,
        env={"VLLM_CPU_OMP_THREADS_BIND": str(i % (os.cpu_count() or 1))},  # one core each, as a pool's workers
        extra_args=("--num-gpu-blocks-override", str(fleet.num_gpu_blocks)),
    )
    return config.argv(), {**os.environ, **config.environ()}


@dataclass(frozen=True)
class EngineCounters:
    """One engine's cumulative counters, scraped from its /metrics."""

    busy_s: float  # simulated seconds in engine steps (mock:busy_seconds_total)
    requests: float  # requests finished (vllm:request_success_total, every finish reason)
    preemptions: float  # requests preempted for KV space, to be recomputed (vllm:num_preemptions_total)


def engine_counters(engine_urls: Sequence[str]) -> list[EngineCounters]:
    out = []
    for url in engine_urls:
        total = _summed(url, {name: f"{name}_total" for name in (BUSY, DONE, PREEMPTED)}, timeout_s=5)
        out.append(EngineCounters(total[BUSY], total[DONE], total[PREEMPTED]))
    return out


def _summed(engine_url: str, names: dict[str, str], timeout_s: float) -> dict[str, float]:
    """For each key of `names`, the engine's samples of that metric name summed over their label sets."""
    text = urllib.request.urlopen(f"{engine_url}/metrics", timeout=timeout_s).read().decode()
    samples = [s for f in text_string_to_metric_families(text) for s in f.samples]
    return {key: sum(s.value for s in samples if s.name == name) for key, name in names.items()}


def busy_shares(before: Sequence[float], after: Sequence[float], wall_s: float, speedup: float) -> list[float]:
    """Per engine, the share of the simulated interval spent in engine steps."""
    span = max(wall_s * speedup, 1e-9)
    return [(a - b) / span for b, a in zip(before, after, strict=True)]


@contextlib.contextmanager
def engine_timeline(engine_urls: Sequence[str], path: Path, period_s: float = 0.25) -> Iterator[None]:
    """While open, every `period_s`, each engine's running and waiting requests and KV use, one JSON line
    per engine and sample in `path`: {"t_s": seconds since entering, "engine": index in `engine_urls`,
    "running", "waiting", "kv_usage"}. Read by a thread of its own (not the replay's event loop), which is
    stopped and joined on exit."""
    done = threading.Event()
    t0 = time.monotonic()

    def sample() -> None:
        with path.open("w") as f:
            while not done.wait(period_s):
                for i, url in enumerate(engine_urls):
                    t = time.monotonic() - t0
                    try:
                        values = _summed(url, GAUGES, timeout_s=2)
                    except OSError:
                        continue  # a missed sample; the engine may be stopping
                    f.write(json.dumps({"t_s": round(t, 3), "engine": i, **values}) + "\n")

    path.parent.mkdir(parents=True, exist_ok=True)
    thread = threading.Thread(target=sample, name="engine-timeline")
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()


def move_logs(work: Path, dest: Path) -> None:
    """Every log a stopped fleet left under `work` (the cluster's, its processes', a peer's engines'),
    moved to `dest`, so that the next fleet's logs are its own."""
    dest.mkdir(parents=True, exist_ok=True)
    for log in sorted(work.rglob("*.log")):
        shutil.move(log, dest / log.name)
