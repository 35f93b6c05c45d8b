"""Offline replay of the Mooncake synthetic trace over a simulated fleet, per routing mode.

What it measures: the prefix-hit ratio each router mode achieves on a fleet of
``--workers`` simulated engines with a finite LRU prefix cache each, against the
64.0% ceiling of one infinite cache shared by all (computed here from the trace
too), plus a simulated TTFT so that load matters.

The simulation (virtual time; the trace is described in benchmarks/data/README.md):
- each 512-token hash id expands to 512 deterministic token ids (equal ids, equal
  tokens); a block is ``--block-size`` tokens (default 512: one id per block);
- a worker's cache is an LRU of ``capacity_tokens / block_size`` blocks. On
  arrival the leading cached blocks are hits; the rest are computed and cached,
  evicting least recently used blocks; the request's blocks are then touched
  tail first, so heads outlive tails (vLLM frees a request's blocks in reverse);
- workers emit what vLLM would: ``BlockRemoved`` for evictions and
  ``BlockStored`` (token ids, engine hashes from a per-worker salt, parent
  chaining) for new blocks, delivered to the router when the prefill ends;
  every mode but ``approx`` ingests them (the cache-blind modes use them only
  to report overlap, as a real deployment with events would);
- load: each worker prefills FIFO at ``--prefill-tps`` tokens/s, then decodes
  for ``output_length * --tpot-s``. The router hears `on_prefill_done` and
  `on_request_finish` at those times. TTFT = queueing + prefill.
Columns: prefix hits (hit blocks / prompt blocks, from the workers' caches),
that as a share of the ceiling, "router exact" (decisions whose believed
overlap on the chosen worker equals its real hits), simulated TTFT, and the
router's own time per decision (hashing included).
Simplifications: blocks in use are not pinned, a request's blocks are cached at
arrival (hits for a request arriving during another's prefill), no preemption.

Usage:
    .venv/bin/python benchmarks/router_replay.py                # all modes, defaults
    .venv/bin/python benchmarks/router_replay.py --capacity-tokens 1024000 --modes kv,approx
    .venv/bin/python benchmarks/router_replay.py --block-size 64 --limit 1000
Writes JSON to benchmarks/results/router_replay.json.
"""

from __future__ import annotations

import argparse
import heapq
import json
import random
import statistics
import struct
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import xxhash

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.lru_sim import LruCache  # noqa: E402
from benchmarks.paths import add_trace_option  # noqa: E402
from benchmarks.trace_formats import read_trace  # noqa: E402
from dynamo_lite.protocol import BlockRemoved, BlockStored, KvEvent, KvEventBatch, RequestId, WorkerId  # noqa: E402
from router import Router, RouterConfig, RouterMode, tokens_to_bytes  # noqa: E402
from router.hashing import hash_bytes_blocks  # noqa: E402

ID_TOKENS = 512  # tokens per trace hash id
VOCAB = 151_936


@dataclass(frozen=True)
class Request:
    arrival_s: float
    hash_ids: tuple[int, ...]
    output_tokens: int


def load_trace(path: Path, limit: int | None) -> list[Request]:
    out = []
    for r in read_trace(path):
        out.append(Request(r.timestamp_ms / 1000.0, r.hash_ids, r.output_length))
        if limit and len(out) >= limit:
            break
    return out


def shared_cache_ceiling(reqs: list[Request]) -> float:
    """Prefix-hit ratio of one infinite cache shared by every worker."""
    seen: set[int] = set()
    hits = total = 0
    for r in reqs:
        k = 0
        while k < len(r.hash_ids) and r.hash_ids[k] in seen:
            k += 1
        hits, total = hits + k, total + len(r.hash_ids)
        seen.update(r.hash_ids)
    return hits / total


class TokenBook:
    """Deterministic token ids per trace hash id, cached as list and bytes."""

    def __init__(self) -> None:
        self._tokens: dict[int, list[int]] = {}
        self._bytes: dict[int, bytes] = {}

    def tokens(self, hid: int) -> list[int]:
        t = self._tokens.get(hid)
        if t is None:
            t = self._tokens[hid] = random.Random(hid).choices(range(VOCAB), k=ID_TOKENS)
        return t

    def data(self, hid: int) -> bytes:
        b = self._bytes.get(hid)
        if b is None:
            b = self._bytes[hid] = tokens_to_bytes(self.tokens(hid))
        return b


@dataclass
class SimWorker:
    """One engine: LRU prefix cache (`lru_sim.LruCache`), FIFO prefill, vLLM-style KV events."""

    worker_id: WorkerId
    salt: int
    capacity: int  # blocks
    block_size: int
    book: TokenBook
    cache: LruCache = field(init=False)  # engine hashes
    seq: int = 0
    prefill_free_at: float = 0.0

    def __post_init__(self) -> None:
        self.cache = LruCache(self.capacity)

    def engine_hashes(self, keys: list[tuple[int, int]]) -> list[int]:
        out, parent = [], self.salt
        for hid, sub in keys:
            parent = xxhash.xxh3_64_intdigest(struct.pack("<QQQ", hid, sub, parent), seed=self.salt)
            out.append(parent)
        return out

    def admit(self, keys: list[tuple[int, int]]) -> tuple[int, list[KvEvent]]:
        """Serve a prompt of blocks ``keys``: returns (prefix-hit blocks, events emitted)."""
        hashes = self.engine_hashes(keys)
        admission = self.cache.admit(hashes)
        events: list[KvEvent] = [BlockRemoved(block_hashes=[victim]) for victim in admission.evicted]
        run: list[int] = []  # indices of a run of newly stored blocks
        for i in admission.stored:
            if run and i != run[-1] + 1:  # a block cached after a miss ends the run
                self._flush(run, keys, hashes, events)
                run = []
            run.append(i)
        self._flush(run, keys, hashes, events)
        return admission.hits, events

    def _flush(self, run: list[int], keys, hashes: list[int], events: list[KvEvent]) -> None:
        if not run:
            return
        bs = self.block_size
        tokens: list[int] = []
        for i in run:
            hid, sub = keys[i]
            tokens.extend(self.book.tokens(hid)[sub * bs : (sub + 1) * bs])
        parent = hashes[run[0] - 1] if run[0] > 0 else None
        stored = [hashes[i] for i in run]
        events.append(BlockStored(block_hashes=stored, parent_block_hash=parent, token_ids=tokens, block_size=bs))

    def next_batch(self, events: list[KvEvent], ts: float) -> tuple[int, KvEventBatch]:
        self.seq += 1
        return self.seq, KvEventBatch(ts=ts, events=events)


@dataclass(frozen=True)
class SimParams:
    workers: int
    block_size: int
    capacity_tokens: int
    prefill_tps: float
    tpot_s: float
    approx_ttl_s: float
    overlap_weight: float
    seed: int


class VirtualClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def block_keys(r: Request, bs: int) -> list[tuple[int, int]]:
    per_id = ID_TOKENS // bs
    return [(hid, sub) for hid in r.hash_ids for sub in range(per_id)]


def simulate(mode: RouterMode, reqs: list[Request], p: SimParams, book: TokenBook) -> dict[str, float]:
    clock = VirtualClock()
    cap_blocks = p.capacity_tokens // p.block_size
    router = Router(
        RouterConfig(
            block_size=p.block_size,
            mode=mode,
            overlap_weight=p.overlap_weight,
            approx_ttl_s=p.approx_ttl_s,
            approx_max_blocks_per_worker=cap_blocks,
        ),
        clock=clock,
        rng=random.Random(p.seed),
    )
    salts = random.Random(p.seed + 1)
    workers = [
        SimWorker(WorkerId(f"w{i}"), salts.getrandbits(63), cap_blocks, p.block_size, book) for i in range(p.workers)
    ]
    by_id = {w.worker_id: w for w in workers}
    candidates = [w.worker_id for w in workers]
    for w in workers:
        router.add_worker(w.worker_id, kv_capacity_blocks=cap_blocks)

    pending: list[tuple[float, int, str, object]] = []  # (time, tiebreak, kind, payload)
    hits_total = blocks_total = exact = 0
    ttfts: list[float] = []
    route_s = 0.0
    for n, r in enumerate(reqs):
        while pending and pending[0][0] <= r.arrival_s:
            t, _, kind, payload = heapq.heappop(pending)
            clock.now = t
            handle(router, mode, kind, payload)
        clock.now = r.arrival_s
        keys = block_keys(r, p.block_size)
        data = b"".join(book.data(h) for h in r.hash_ids)
        t0 = time.perf_counter()
        hashes = hash_bytes_blocks(data, p.block_size)
        decision = router.route_hashes(hashes, len(keys) * p.block_size, candidates)
        route_s += time.perf_counter() - t0
        worker = by_id[decision.worker_id]
        hits, events = worker.admit(keys)
        hits_total += hits
        blocks_total += len(keys)
        exact += decision.overlap_blocks == hits
        rid = RequestId(f"r{n}")
        router.on_request_start(rid, decision)
        start = max(r.arrival_s, worker.prefill_free_at)
        prefill_end = start + (len(keys) - hits) * p.block_size / p.prefill_tps
        worker.prefill_free_at = prefill_end
        ttfts.append(prefill_end - r.arrival_s)
        batch = worker.next_batch(events, prefill_end)
        heapq.heappush(pending, (prefill_end, 2 * n, "prefill_done", (rid, worker.worker_id, batch)))
        heapq.heappush(pending, (prefill_end + r.output_tokens * p.tpot_s, 2 * n + 1, "finish", rid))
    ttfts.sort()
    return {
        "prefix_hit_ratio": hits_total / blocks_total,
        "router_overlap_exact": exact / len(reqs),
        "ttft_mean_s": statistics.fmean(ttfts),
        "ttft_p90_s": ttfts[int(0.9 * len(ttfts))],
        "route_us_mean": route_s / len(reqs) * 1e6,
    }


def handle(router: Router, mode: RouterMode, kind: str, payload: object) -> None:
    if kind == "prefill_done":
        rid, worker_id, (seq, batch) = payload  # type: ignore[misc]
        if mode is not RouterMode.APPROX:  # approx: a fleet without KV events
            outcome = router.apply_events(worker_id, seq, batch)
            assert not outcome.needs_resync and outcome.orphaned == 0, outcome
        router.on_prefill_done(rid)
    else:
        router.on_request_finish(payload)  # type: ignore[arg-type]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_trace_option(ap)
    ap.add_argument("--limit", type=int, default=None, help="replay only the first N requests")
    ap.add_argument("--modes", default=",".join(m.value for m in RouterMode))
    ap.add_argument("--workers", type=int, default=8)
    ap.add_argument("--block-size", type=int, default=512, help="tokens per block; divides 512")
    ap.add_argument("--capacity-tokens", type=int, default=4000 * 512, help="prefix cache per worker, in tokens")
    ap.add_argument("--prefill-tps", type=float, default=12_000.0, help="prefill tokens/s per worker")
    ap.add_argument("--tpot-s", type=float, default=0.03, help="seconds per output token")
    ap.add_argument("--approx-ttl-s", type=float, default=120.0)
    ap.add_argument("--overlap-weight", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "router_replay.json")
    a = ap.parse_args()
    if ID_TOKENS % a.block_size:
        ap.error("--block-size must divide 512")
    reqs = load_trace(a.trace, a.limit)
    longest = max(len(r.hash_ids) for r in reqs) * ID_TOKENS
    if a.capacity_tokens < longest:
        ap.error(f"--capacity-tokens must hold the longest prompt ({longest} tokens)")
    p = SimParams(a.workers, a.block_size, a.capacity_tokens, a.prefill_tps, a.tpot_s, a.approx_ttl_s,
                  a.overlap_weight, a.seed)
    ceiling = shared_cache_ceiling(reqs)
    print(f"replaying {len(reqs):,} requests over {p.workers} workers, block {p.block_size} tokens, "
          f"cache {p.capacity_tokens:,} tokens/worker; shared-cache ceiling {ceiling:.1%}", file=sys.stderr)
    book = TokenBook()
    results = {}
    for mode in [RouterMode(m) for m in a.modes.split(",")]:
        t0 = time.perf_counter()
        results[mode.value] = simulate(mode, reqs, p, book)
        results[mode.value]["wall_s"] = time.perf_counter() - t0
        print(f"  {mode.value:<13} done in {results[mode.value]['wall_s']:.1f}s", file=sys.stderr)
    print_table(results, ceiling)
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps({"params": p.__dict__, "requests": len(reqs), "ceiling": ceiling, "modes": results},
                                indent=2) + "\n")
    print(f"wrote {a.out}")


def _share(hits: float, ceiling: float) -> str:
    """Hits as a share of the ceiling; "-" when there is none (a trace that shares no prefix)."""
    return f"{hits / ceiling:.1%}" if ceiling else "-"


def print_table(results: dict[str, dict[str, float]], ceiling: float) -> None:
    head = ("mode", "prefix hits", "of ceiling", "router exact", "TTFT mean", "TTFT p90", "route")
    print(f"{head[0]:<13} {head[1]:>11} {head[2]:>10} {head[3]:>12} {head[4]:>9} {head[5]:>9} {head[6]:>8}")
    for mode, r in results.items():
        print(
            f"{mode:<13} {r['prefix_hit_ratio']:>11.1%} {_share(r['prefix_hit_ratio'], ceiling):>10} "
            f"{r['router_overlap_exact']:>12.1%} {r['ttft_mean_s']:>8.2f}s {r['ttft_p90_s']:>8.2f}s "
            f"{r['route_us_mean']:>6.0f}us"
        )
    print(f"{'ceiling':<13} {ceiling:>11.1%}  (one infinite cache shared by all workers)")


if __name__ == "__main__":
    main()
