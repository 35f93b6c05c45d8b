"""Router micro-benchmark: decision latency, event ingestion rate and index memory.

Builds an index of ``--blocks`` distinct blocks over ``--workers`` workers by
feeding the `Router` the KV events vLLM would emit (``BlockStored`` with token
ids and parent chaining, engine hashes as arbitrary 64-bit ints, ``--event-blocks``
blocks per event), then times ``Router.route`` on 8k-token prompts.

Corpus: 8k-token documents; each starts with one of 64 shared "system" prefixes
(64 blocks) and continues with unique blocks; each document is cached on one
worker, every tenth also on a second. Prompts mix three shapes, a third each:
an indexed document (the whole prefix walk, the worst case), a shared system
prefix with a new continuation (64-block overlap on many workers), and a novel
prompt (miss on the first block).

Usage:
    .venv/bin/python benchmarks/router_bench.py            # 32 workers, 500k blocks
    .venv/bin/python benchmarks/router_bench.py --quick    # 32 workers, 50k blocks
Prints a table and writes JSON to benchmarks/results/router_bench[_quick].json.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import random
import statistics
import sys
import time
import tracemalloc
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dynamo_lite.protocol import BlockStored, KvEventBatch, WorkerId  # noqa: E402
from router import Router, RouterConfig, hash_blocks  # noqa: E402

SYSTEM_PREFIXES = 64
SYSTEM_BLOCKS = 64
VOCAB = 151_936  # a real tokenizer's size (Qwen2); token ids stay in range like real prompts


@dataclass(frozen=True)
class Params:
    workers: int
    blocks: int
    block_size: int
    prompt_tokens: int
    event_blocks: int
    decisions: int
    seed: int
    mode: str = "ttft"  # the router mode timed (cluster.yaml's default)


def progress(label: str, done: int, total: int, started: float) -> None:
    """One line on stderr; rewritten in place on a terminal, a new line otherwise."""
    pct = 100.0 * done / total if total else 100.0
    line = f"  {label}: {done:,}/{total:,} ({pct:5.1f}%) {time.perf_counter() - started:6.1f}s"
    if sys.stderr.isatty():
        print("\r" + line, end="\n" if done >= total else "", file=sys.stderr, flush=True)
    else:
        print(line, file=sys.stderr, flush=True)


def pseudo_tokens(stream: int, n: int) -> list[int]:
    """``n`` deterministic in-vocabulary token ids; different streams differ at the first token."""
    return [(stream * 7919 + i * 104_729 + (i * i) % 9973) % VOCAB for i in range(n)]


def system_tokens(k: int, p: Params) -> list[int]:
    return pseudo_tokens(1_000_000 + k, SYSTEM_BLOCKS * p.block_size)


def doc_tail_tokens(doc: int, p: Params) -> list[int]:
    return pseudo_tokens(doc, p.prompt_tokens - SYSTEM_BLOCKS * p.block_size)


def num_docs(p: Params) -> int:
    unique_per_doc = p.prompt_tokens // p.block_size - SYSTEM_BLOCKS
    return max(1, (p.blocks - SYSTEM_PREFIXES * SYSTEM_BLOCKS) // unique_per_doc)


def doc_placement(doc: int, p: Params) -> list[int]:
    first = doc % p.workers
    return [first, (first + 7) % p.workers] if doc % 10 == 0 else [first]


class EngineEmitter:
    """One simulated engine's event stream: random 64-bit engine hashes, vLLM-style chaining."""

    def __init__(self, rng: random.Random, p: Params) -> None:
        self.rng, self.p = rng, p
        self.seq = 0
        self.system_last: dict[int, int] = {}  # system prefix -> engine hash of its last block

    def store(self, tokens: list[int], parent: int | None) -> Iterator[tuple[int, KvEventBatch, int]]:
        """Batches of ``event_blocks`` blocks covering ``tokens``; yields (seq, batch, last engine hash)."""
        bs, step = self.p.block_size, self.p.event_blocks * self.p.block_size
        for start in range(0, len(tokens), step):
            chunk = tokens[start : start + step]
            hashes = [self.rng.getrandbits(64) for _ in range(len(chunk) // bs)]
            ev = BlockStored(block_hashes=hashes, parent_block_hash=parent, token_ids=chunk, block_size=bs)
            parent = hashes[-1]
            self.seq += 1
            yield self.seq, KvEventBatch(ts=0.0, events=[ev]), parent


def event_stream(p: Params) -> Iterator[tuple[WorkerId, int, KvEventBatch]]:
    """Every batch of the corpus, in order."""
    rng = random.Random(p.seed)
    emitters = [EngineEmitter(rng, p) for _ in range(p.workers)]
    for doc in range(num_docs(p)):
        sys_id = doc % SYSTEM_PREFIXES
        for w in doc_placement(doc, p):
            em = emitters[w]
            if sys_id not in em.system_last:
                for seq, batch, last in em.store(system_tokens(sys_id, p), None):
                    yield WorkerId(f"w{w}"), seq, batch
                em.system_last[sys_id] = last
            parent = em.system_last[sys_id]
            for seq, batch, _ in em.store(doc_tail_tokens(doc, p), parent):
                yield WorkerId(f"w{w}"), seq, batch


def count_batches(p: Params) -> int:
    per_doc = -(-(p.prompt_tokens // p.block_size - SYSTEM_BLOCKS) // p.event_blocks)
    per_sys = -(-SYSTEM_BLOCKS // p.event_blocks)
    placements = sum(len(doc_placement(d, p)) for d in range(num_docs(p)))
    return placements * per_doc + p.workers * per_sys  # upper bound on system prefix stores


def new_router(p: Params) -> Router:
    r = Router(RouterConfig(block_size=p.block_size, mode=p.mode), rng=random.Random(p.seed))
    for w in range(p.workers):  # each worker's KV capacity: twice its share of the index (ttft reads it)
        r.add_worker(WorkerId(f"w{w}"), 2 * p.blocks // p.workers)
    return r


def ingest(p: Params, router: Router, label: str) -> tuple[float, int]:
    """Feed every batch; returns (seconds inside apply_events, blocks applied)."""
    total, blocks, spent, n = count_batches(p), 0, 0.0, 0
    started = time.perf_counter()
    for worker_id, seq, batch in event_stream(p):
        t0 = time.perf_counter()
        out = router.apply_events(worker_id, seq, batch)
        spent += time.perf_counter() - t0
        blocks += out.stored
        n += 1
        if n % max(1, total // 10) == 0:
            progress(label, n, total, started)
    progress(label, total, total, started)
    return spent, blocks


def make_prompts(p: Params) -> list[tuple[str, list[int]]]:
    rng = random.Random(p.seed + 1)
    docs = num_docs(p)
    out: list[tuple[str, list[int]]] = []
    for i in range(p.decisions):
        kind = ("indexed", "shared_prefix", "novel")[i % 3]
        if kind == "indexed":
            doc = rng.randrange(docs)
            tokens = system_tokens(doc % SYSTEM_PREFIXES, p) + doc_tail_tokens(doc, p)
        elif kind == "shared_prefix":
            tail = rng.choices(range(VOCAB), k=p.prompt_tokens - SYSTEM_BLOCKS * p.block_size)
            tokens = system_tokens(rng.randrange(SYSTEM_PREFIXES), p) + tail
        else:
            tokens = rng.choices(range(VOCAB), k=p.prompt_tokens)
        out.append((kind, tokens))
    return out


def percentile(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def time_decisions(p: Params, router: Router) -> dict[str, object]:
    prompts = make_prompts(p)
    candidates = [WorkerId(f"w{w}") for w in range(p.workers)]
    # The benchmark's own prompt set (millions of token ids in lists) would be rescanned by
    # every gen-2 collection, an artifact a frontend does not carry: park it in the permanent
    # generation, as long-lived services do with gc.freeze() after start-up.
    gc.collect()
    gc.freeze()
    for _, tokens in prompts[:50]:  # warm-up
        router.route(tokens, candidates)
    lat: dict[str, list[float]] = {"indexed": [], "shared_prefix": [], "novel": []}
    cpu: list[float] = []  # thread CPU time: what a decision costs when the OS does not preempt us
    overlap: dict[str, list[int]] = {k: [] for k in lat}
    started = time.perf_counter()
    for i, (kind, tokens) in enumerate(prompts):
        c0, t0 = time.thread_time_ns(), time.perf_counter_ns()
        d = router.route(tokens, candidates)
        t1, c1 = time.perf_counter_ns(), time.thread_time_ns()
        lat[kind].append((t1 - t0) / 1e6)
        cpu.append((c1 - c0) / 1e6)
        overlap[kind].append(d.overlap_blocks)
        if (i + 1) % max(1, len(prompts) // 4) == 0:
            progress("decisions", i + 1, len(prompts), started)
    all_ms = [x for v in lat.values() for x in v]
    parts = time_parts(p, router, prompts, candidates)
    gc.unfreeze()
    return {
        "decisions_per_s": len(all_ms) / (sum(all_ms) / 1e3),
        "p50_ms": percentile(all_ms, 0.50),
        "p99_ms": percentile(all_ms, 0.99),
        "p999_ms": percentile(all_ms, 0.999),
        "cpu_p50_ms": percentile(cpu, 0.50),
        "cpu_p99_ms": percentile(cpu, 0.99),
        "max_ms": max(all_ms),
        "by_shape": {
            k: {
                "p50_ms": percentile(v, 0.5),
                "p99_ms": percentile(v, 0.99),
                "mean_overlap_blocks": statistics.mean(overlap[k]),
            }
            for k, v in lat.items()
        },
        "parts_mean_ms": parts,
    }


def time_parts(p: Params, router: Router, prompts, candidates) -> dict[str, float]:
    """Mean time of hashing and of the index walk alone, to show where a decision goes."""
    t_hash = t_walk = 0.0
    for _, tokens in prompts:
        t0 = time.perf_counter()
        hashes = hash_blocks(tokens, p.block_size)
        t1 = time.perf_counter()
        router.index.find_matches(hashes)
        t_walk += time.perf_counter() - t1
        t_hash += t1 - t0
    n = len(prompts)
    return {"hash_ms": t_hash / n * 1e3, "find_matches_ms": t_walk / n * 1e3}


def rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def measure_memory(p: Params) -> float:
    """MiB the router's structures hold after ingesting the corpus (tracemalloc, separate build)."""
    gc.collect()
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    router = new_router(p)
    ingest(p, router, "memory build (tracemalloc)")
    gc.collect()
    used = tracemalloc.get_traced_memory()[0] - base
    tracemalloc.stop()
    del router
    return used / 2**20


def run(p: Params, with_tracemalloc: bool) -> dict[str, object]:
    loadavg_start = os.getloadavg()
    print(f"router_bench: {p.workers} workers, {num_docs(p):,} documents, target {p.blocks:,} blocks", file=sys.stderr)
    rss0 = rss_mib()
    router = new_router(p)
    gc.collect()
    spent, blocks = ingest(p, router, "ingest")
    gc.collect()
    result: dict[str, object] = {
        "params": p.__dict__,
        "index": {"distinct_blocks": router.index.num_nodes, "runs": router.index.num_runs, "worker_blocks": blocks},
        "ingest": {"blocks": blocks, "seconds": spent, "blocks_per_s": blocks / spent},
        "rss_mib_after_build": rss_mib(),
        "rss_mib_delta_build": rss_mib() - rss0,
        "decide": time_decisions(p, router),
    }
    del router
    gc.collect()
    if with_tracemalloc:
        mem = measure_memory(p)
        result["tracemalloc_mib"] = mem
        result["bytes_per_worker_block"] = mem * 2**20 / blocks
    result["machine"] = {
        "loadavg_at_start": loadavg_start,
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "loadavg_at_end": os.getloadavg(),
        "platform": platform.platform(),
    }
    return result


def print_table(r: dict) -> None:
    d, i, m = r["decide"], r["ingest"], r["machine"]
    rows = [
        ("workers", f"{r['params']['workers']}"),
        ("distinct blocks indexed", f"{r['index']['distinct_blocks']:,} in {r['index']['runs']:,} runs"),
        ("worker-block entries", f"{r['index']['worker_blocks']:,}"),
        ("prompt tokens / block size", f"{r['params']['prompt_tokens']} / {r['params']['block_size']}"),
        ("decisions per second", f"{d['decisions_per_s']:,.0f}"),
        ("decision latency p50", f"{d['p50_ms']:.3f} ms"),
        ("decision latency p99", f"{d['p99_ms']:.3f} ms  (goal < 0.5 ms)"),
        ("decision latency p99.9 / max", f"{d['p999_ms']:.3f} / {d['max_ms']:.3f} ms"),
        ("decision CPU time p50 / p99", f"{d['cpu_p50_ms']:.3f} / {d['cpu_p99_ms']:.3f} ms  (thread time)"),
        ("  of which hashing (mean)", f"{d['parts_mean_ms']['hash_ms']:.3f} ms"),
        ("  of which index walk (mean)", f"{d['parts_mean_ms']['find_matches_ms']:.3f} ms"),
    ]
    for shape, s in d["by_shape"].items():
        figures = f"{s['p50_ms']:.3f} / {s['p99_ms']:.3f} ms, overlap {s['mean_overlap_blocks']:.0f} blocks"
        rows.append((f"  p50/p99 {shape}", figures))
    rows += [
        ("event ingestion", f"{i['blocks_per_s']:,.0f} blocks/s  (goal > 200k)"),
        ("load average start / end", f"{m['loadavg_at_start'][0]:.2f} / {m['loadavg_at_end'][0]:.2f}, {m['cpus']} CPUs"),
        ("RSS after build (delta)", f"{r['rss_mib_after_build']:.0f} MiB ({r['rss_mib_delta_build']:+.0f})"),
    ]
    if "tracemalloc_mib" in r:
        mem = f"{r['tracemalloc_mib']:.1f} MiB, {r['bytes_per_worker_block']:.0f} B per worker-block entry"
        rows.append(("router memory (tracemalloc)", mem))
    width = max(len(k) for k, _ in rows)
    for k, v in rows:
        print(f"{k:<{width}}  {v}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="50k blocks and 600 decisions")
    ap.add_argument("--workers", type=int, default=32)
    ap.add_argument("--blocks", type=int, default=None, help="distinct blocks to index (default 500k, quick 50k)")
    ap.add_argument("--block-size", type=int, default=16)
    ap.add_argument("--prompt-tokens", type=int, default=8192)
    ap.add_argument("--event-blocks", type=int, default=32, help="blocks per BlockStored event")
    ap.add_argument("--decisions", type=int, default=None, help="default 3000, quick 600")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--mode", default="ttft", help="router mode (ttft, blocks, approx, ...; default %(default)s)")
    ap.add_argument("--no-tracemalloc", action="store_true", help="skip the second build that measures memory")
    ap.add_argument("--out", type=Path, default=None)
    a = ap.parse_args()
    p = Params(
        workers=a.workers,
        blocks=a.blocks or (50_000 if a.quick else 500_000),
        block_size=a.block_size,
        prompt_tokens=a.prompt_tokens,
        event_blocks=a.event_blocks,
        decisions=a.decisions or (600 if a.quick else 3000),
        seed=a.seed,
        mode=a.mode,
    )
    result = run(p, with_tracemalloc=not a.no_tracemalloc)
    print_table(result)
    out = a.out or Path(__file__).parent / "results" / ("router_bench_quick.json" if a.quick else "router_bench.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
