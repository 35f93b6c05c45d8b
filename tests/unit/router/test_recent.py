"""router.recent.RecentSends: the claims of prompts just sent, looked up by binary search over a prompt's
chained block hashes; checked against a plain walk, through expiry and refresh."""

from __future__ import annotations

import random

from router.hashing import hash_blocks
from router.recent import RecentSends
from router.types import BlockHash, WorkerId

A, B = WorkerId("a"), WorkerId("b")
BS = 4


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def hashes(tokens: list[int]) -> list[int]:
    return list(hash_blocks(tokens, BS, BlockHash(0)))


def walk(live: dict[WorkerId, dict[int, float]], prompt: list[int], now: float) -> dict[WorkerId, int]:
    """The reference: each worker's leading blocks of ``prompt`` with a live claim, counted one by one."""
    out = {}
    for w, claims in live.items():
        n = 0
        while n < len(prompt) and claims.get(prompt[n], 0.0) > now:
            n += 1
        if n:
            out[w] = n
    return out


def test_the_binary_search_finds_what_a_walk_finds_through_sends_and_expiry() -> None:
    rng = random.Random(7)
    clock = Clock()
    sends = RecentSends(clock, ttl_s=1.0)
    live: dict[WorkerId, dict[int, float]] = {}
    families = [[rng.randrange(1000) for _ in range(BS * 8)] for _ in range(5)]  # shared heads of 8 blocks

    def prompt() -> list[int]:
        head = rng.choice(families)[: BS * rng.randint(0, 8)]
        return hashes(head + [rng.randrange(1000) for _ in range(BS * rng.randint(1, 6))])

    for _ in range(400):
        clock.now += rng.choice((0.01, 0.05, 0.3))
        p = prompt()
        assert sends.find_matches(p) == walk(live, p, clock.now)
        w = rng.choice((A, B))
        sends.sent(w, p)
        for h in p:
            live.setdefault(w, {})[h] = clock.now + 1.0


def test_a_claim_ends_with_its_ttl_unless_a_later_prompt_renews_its_prefix() -> None:
    clock = Clock()
    sends = RecentSends(clock, ttl_s=1.0)
    first = hashes(list(range(40)))  # 10 blocks
    second = hashes(list(range(20)) + [99] * 8)  # its first 5 blocks, then its own 2
    sends.sent(A, first)
    clock.now = 0.6
    sends.sent(A, second)
    assert sends.find_matches(first) == {A: 10}
    clock.now = 1.2  # the first prompt's claim is over; the shared head was renewed at 0.6
    assert sends.find_matches(first) == {A: 5}
    assert sends.find_matches(second) == {A: 7}
    sends.sent(B, hashes([7] * 4))  # a later send deletes the expired claims
    assert len(sends._claims[A]) == 7
    clock.now = 1.7
    assert sends.find_matches(second) == {}
    sends.remove_worker(B)
    assert sends.find_matches(hashes([7] * 4)) == {}
