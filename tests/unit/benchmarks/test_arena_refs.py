"""benchmarks/arena_refs.py and lru_sim.py: the arena's references on a hand-made trace, hits computed by hand;
the TTFT floor against every way of cutting a prompt into passes."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from benchmarks.arena_refs import (  # noqa: E402
    BlockNames,
    distinct_blocks,
    hit_blocks,
    least_prefill_ms,
    references,
    simulate,
    ttft_floor,
)
from benchmarks.lru_sim import LruCache  # noqa: E402
from benchmarks.trace_replay import ReplayRequest  # noqa: E402
from dynamo_lite.engines.mock.timing import DynamoTiming  # noqa: E402

# engine blocks of 4 tokens, 8 tokens per hash id: id 1 = blocks A1 A2, id 2 = B1 B2, id 3 = C1 C2
TRACE = [
    ReplayRequest(0, 0.0, ((1, 8), (2, 8)), 1),  # A1 A2 B1 B2
    ReplayRequest(1, 1.0, ((1, 8), (3, 8)), 1),  # A1 A2 C1 C2
    ReplayRequest(2, 2.0, ((1, 8), (2, 8)), 1),  # A1 A2 B1 B2 again
    ReplayRequest(3, 3.0, ((1, 8), (2, 5)), 1),  # A1 A2 B1 + a partial block (13 tokens)
]
TOKENS = 16 + 16 + 16 + 13


def test_block_names_follow_content() -> None:
    names = BlockNames(4)
    a1, a2, b1, b2 = names.of(TRACE[0])
    assert names.of(TRACE[1])[:2] == [a1, a2] and len(set(names.of(TRACE[1])) | {a1, a2, b1, b2}) == 6
    assert names.of(TRACE[3]) == [a1, a2, b1]  # the partial id's first 4 tokens are id 2's first 4
    assert names.of(ReplayRequest(4, 0.0, ((2, 8),), 1))[0] != b1  # same id, other parent: other content
    assert distinct_blocks(TRACE, 4) == 6


def test_hits_leave_one_token_to_compute() -> None:
    assert hit_blocks(16, 4, 4) == 3  # a prompt cached whole computes its last block again, as vLLM does
    assert hit_blocks(13, 3, 4) == 3
    assert hit_blocks(16, 2, 4) == 2


def test_shared_cache() -> None:
    # r0: 0; r1: A1 A2 = 8; r2: all cached, 3 blocks = 12; r3: A1 A2 B1 = 12
    assert simulate(TRACE, 4, 1, None, "round_robin") == pytest.approx(32 / TOKENS)


def test_round_robin_over_lru() -> None:
    # w0 gets r0, r2 (12 tokens); w1 gets r1, r3: only A1 A2 of r3 (8 tokens)
    assert simulate(TRACE, 4, 2, 4, "round_robin") == pytest.approx(20 / TOKENS)


def test_sticky_over_lru() -> None:
    # everything goes to w0, which holds the longest prefix each time: r1 hits A1 A2 (8) and evicts B1 B2;
    # r2 hits A1 A2 (8) and evicts C1 C2; r3 hits A1 A2 B1 (12)
    assert simulate(TRACE, 4, 2, 4, "sticky") == pytest.approx(28 / TOKENS)
    refs = {r.name: r.prefix_hit_ratio for r in references(TRACE, 4, 2, 4)}
    assert refs == pytest.approx({"shared": 32 / TOKENS, "sticky": 28 / TOKENS, "round_robin": 20 / TOKENS})


def test_sticky_sends_a_prefix_cached_nowhere_round_robin() -> None:
    cold = [ReplayRequest(i, float(i), ((10 + i, 8),), 1) for i in range(4)]
    assert simulate([*cold, *cold], 4, 2, 100, "sticky") == pytest.approx(4 * 4 / 64)  # each repeat hits 1 block


def test_lru_evicts_tails_first() -> None:
    cache = LruCache(4)
    assert cache.admit(["a", "b", "c"]).stored == [0, 1, 2]
    admission = cache.admit(["x", "y", "z"])  # c, the first prompt's tail, goes first, then b
    assert admission.evicted == ["c", "b"] and admission.hits == 0
    assert cache.admit(["a", "b"]).hits == 1
    assert LruCache(None).admit(list(range(1000))).evicted == []


def _fastest_cut_ms(tokens: int, budget: int, step: int) -> float:
    """The least prefill time over every way of cutting ``tokens`` into passes of at most ``budget``, in
    parts of ``step`` tokens (a dynamic programme over the tokens left)."""
    timing = DynamoTiming()
    best = [0.0] + [float("inf")] * (tokens // step)
    for left in range(1, tokens // step + 1):
        best[left] = min(best[left - k] + timing.prefill_ms(k * step) for k in range(1, min(left, budget // step) + 1))
    return best[-1]


@pytest.mark.parametrize("tokens", [256, 8192, 12288, 16384, 24576, 40960, 131072])
def test_the_floor_is_below_every_cut_of_a_prompt_into_passes(tokens: int) -> None:
    timing, budget = DynamoTiming(), 8192
    first = timing.decode_ms(0, 1)  # the decode term of the pass that samples, at its least
    fastest = _fastest_cut_ms(tokens, budget, 256) + first
    floor = least_prefill_ms(tokens, budget)
    assert 0.99 * fastest <= floor <= fastest + 1e-9  # equal fractional parts: at most the best whole cut
    greedy = sum(timing.prefill_ms(min(budget, tokens - i)) for i in range(0, tokens, budget)) + first
    assert floor <= greedy  # the engine's own chunks (full budgets first) are never faster
    if tokens == 16384:  # three passes of 5461 beat two of 8192: the quadratic term outweighs a pass
        assert floor < 2 * timing.prefill_ms(8192) + first


def test_the_floor_counts_what_the_shared_cache_holds() -> None:
    timing = DynamoTiming()
    p50, p99 = ttft_floor(TRACE, 4)
    # uncached: 16 (cold), 8 (A cached), 4 (A B cached, the last block computed again), 1 (A B1 cached)
    alone = sorted(timing.prefill_ms(t) + timing.decode_ms(0, 1) for t in (16, 8, 4, 1))
    assert p50 == pytest.approx((alone[1] + alone[2]) / 2)
    assert p99 == pytest.approx(alone[2] + 0.97 * (alone[3] - alone[2]))  # numpy's interpolation of 4 values
    shared = references(TRACE, 4, 2, 4, timing="dynamo")[0]
    assert shared.name == "shared" and shared.ttft_floor_ms == (p50, p99)
    assert references(TRACE, 4, 2, 4)[0].ttft_floor_ms is None  # roofline: no floor claimed
