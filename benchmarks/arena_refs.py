"""The arena's references: prefix hits that placement alone reaches on a trace slice, simulated offline.

No engines, no load, no time: each request in trace order is placed on a worker whose prefix cache is an
LRU of engine blocks (`lru_sim.LruCache`), and its hits are counted as the engine reports them: cached
prompt tokens / prompt tokens, in full blocks of ``block_size``, at most (prompt - 1) tokens (one is
always computed). Engine blocks are named by their content: block j of a prompt is the chain of hash ids
up to the one holding its last token, plus that token's offset in it (a partial last id's tokens are a
prefix of its full expansion, see trace_replay.block_tokens).

- ``shared``: one cache of unlimited size shared by every worker: no router can beat it.
- ``sticky``: per-worker LRU of ``capacity`` blocks; each request goes to the worker holding its longest
  cached prefix; ties (a prefix cached nowhere, or one every worker holds, such as a common system
  prompt) go round robin among the tied workers. Load is ignored: this is the placement that keeps each
  prefix home and spreads the rest.
- ``round_robin``: per-worker LRU of ``capacity`` blocks, requests dealt round robin.

Under the mock's Dynamo timing, ``shared`` also carries a TTFT floor: each request alone on an idle
engine, with what the shared cache holds of its prompt, in the fewest milliseconds the timing allows
(`least_prefill_ms`). No router on that fleet can give a request a shorter TTFT, so no router's TTFT
percentile can be below the floor's.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from benchmarks.lru_sim import LruCache
from benchmarks.replay_stats import percentile
from benchmarks.trace_replay import ReplayRequest
from dynamo_lite.engines.mock.timing import DYNAMO_DEFAULTS, DynamoTiming

REFERENCES = ("shared", "sticky", "round_robin")


@dataclass(frozen=True, slots=True)
class Reference:
    name: str  # one of REFERENCES
    prefix_hit_ratio: float  # cached / prompt tokens
    ttft_floor_ms: tuple[float, float] | None = None  # shared, Dynamo timing: the floor's (p50, p99)


class BlockNames:
    """Interned engine-block names: equal content, equal int, across requests."""

    def __init__(self, block_size: int) -> None:
        self.block_size = block_size
        self._chains: dict[tuple[int, int], int] = {}  # (parent chain, hash id) -> chain
        self._blocks: dict[tuple[int, int], int] = {}  # (chain, end offset) -> block name

    def of(self, r: ReplayRequest) -> list[int]:
        """The names of the full engine blocks of ``r``'s prompt, in order."""
        bs = self.block_size
        out: list[int] = []
        chain, start = -1, 0  # token position where the current hash id starts
        end = bs  # end (exclusive) of the next engine block
        for hid, n in r.blocks:
            chain = self._chains.setdefault((chain, hid), len(self._chains))
            while end <= start + n:
                out.append(self._blocks.setdefault((chain, end - start), len(self._blocks)))
                end += bs
            start += n
        return out


def hit_blocks(prompt_tokens: int, cached_prefix: int, block_size: int) -> int:
    """Cached blocks the engine reports for a prompt whose first ``cached_prefix`` blocks are cached."""
    return min(cached_prefix, (prompt_tokens - 1) // block_size)


def distinct_blocks(requests: Sequence[ReplayRequest], block_size: int) -> int:
    """Distinct full engine blocks over the slice's prompts."""
    names = BlockNames(block_size)
    return len({b for r in requests for b in names.of(r)})


def simulate(requests: Sequence[ReplayRequest], block_size: int, workers: int, capacity: int | None,
             placement: str) -> float:  # fmt: skip
    """Prefix-hit ratio (cached / prompt tokens) of ``placement`` ("sticky" or "round_robin") over
    ``workers`` LRU caches of ``capacity`` blocks each."""
    names = BlockNames(block_size)
    caches = [LruCache(capacity) for _ in range(workers)]
    turn = 0
    hit = total = 0
    for r in requests:
        keys = names.of(r)
        if placement == "sticky":  # the first worker from `turn` on that holds the longest prefix
            cached = [c.prefix(keys) for c in caches]
            best = max(cached)
            w = next(i % workers for i in range(turn, turn + workers) if cached[i % workers] == best)
            turn = (w + 1) % workers
        elif placement == "round_robin":
            w, turn = turn, (turn + 1) % workers
        else:
            raise ValueError(f"unknown placement {placement!r}")
        admission = caches[w].admit(keys)
        hit += hit_blocks(r.input_tokens, admission.hits, block_size) * block_size
        total += r.input_tokens
    return hit / total if total else 0.0


def ttft_floor(requests: Sequence[ReplayRequest], block_size: int,
               budget: int = DYNAMO_DEFAULTS["max_num_batched_tokens"]) -> tuple[float, float]:  # fmt: skip
    """(p50, p99) in ms of each request's least TTFT on the mock's Dynamo timing (`least_prefill_ms` of
    its prompt less the shared cache's prefix), in trace order."""
    names, cache = BlockNames(block_size), LruCache(None)
    floors = sorted(least_prefill_ms(r.input_tokens - block_size * hit_blocks(
        r.input_tokens, cache.admit(names.of(r)).hits, block_size), budget) for r in requests)  # fmt: skip
    return percentile(floors, 50), percentile(floors, 99)


def least_prefill_ms(tokens: int, budget: int) -> float:
    """The least time Dynamo's timing gives for computing ``tokens`` prompt tokens and sampling one.

    A pass takes P(T) = a T^2 + b T + c for its T prefill tokens (T <= ``budget``), plus a decode term
    when it samples, at least its value for an empty cache. Other requests' tokens in a pass only
    lengthen it. Over n passes, a T^2 summed is least with equal parts: a tokens^2 / n + b tokens + n c,
    for the n >= ceil(tokens / budget) that makes it least (convex in n). The engine's own chunks (full
    budgets first) are never faster, and a worker never holds more than the shared cache: so no
    router gives a request a shorter TTFT on that fleet; queueing, the frontend and the network add."""
    t = DynamoTiming()
    n = max(1, -(-tokens // budget))
    least = n * t.prefill_ms(tokens / n)  # type: ignore[arg-type]  # n equal parts of a pass each
    while (more := (n + 1) * t.prefill_ms(tokens / (n + 1))) < least:  # type: ignore[arg-type]
        n, least = n + 1, more
    return least + t.decode_ms(0, 1)


def references(requests: Sequence[ReplayRequest], block_size: int, workers: int, capacity: int,
               timing: str = "roofline") -> list[Reference]:  # fmt: skip
    """The three references of one slice, block size and per-worker capacity (with the TTFT floor on
    ``shared`` for the mock's ``dynamo`` timing)."""
    floor = ttft_floor(requests, block_size) if timing == "dynamo" else None
    return [
        Reference("shared", simulate(requests, block_size, 1, None, "round_robin"), floor),
        Reference("sticky", simulate(requests, block_size, workers, capacity, "sticky")),
        Reference("round_robin", simulate(requests, block_size, workers, capacity, "round_robin")),
    ]
