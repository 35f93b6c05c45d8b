"""The agent's `KvView`: a snapshot of it, loaded into a fresh router, matches what a router
that saw every KV event holds; chunks stay small; the sequencing rules are the router's."""

from __future__ import annotations

import random

import msgspec

from dynamo_lite.protocol import (
    BlockStored,
    KvEventBatch,
    KvSnapshotChunk,
    RelayedKvEvents,
    WorkerId,
)
from dynamo_lite.worker.kv_view import KvView
from router import Router, RouterConfig
from tests.unit.router.conftest import FakeEngine

BS = 16
W = WorkerId("w")


def router() -> Router:
    r = Router(RouterConfig(block_size=BS))
    r.add_worker(W)
    return r


class Pair:
    """One engine's events fed to a live router and to a view."""

    def __init__(self, salt: int = 7) -> None:
        self.engine = FakeEngine(BS, salt)
        self.live = router()
        self.view = KvView()
        self.relayed: list[RelayedKvEvents] = []

    def feed(self, events: list) -> RelayedKvEvents:
        seq, batch = self.engine.batch(events)
        message = RelayedKvEvents(worker_id=W, seq=seq, batch=batch)
        self.live.apply_events(W, seq, batch)
        self.view.apply(message)
        self.relayed.append(message)
        return message

    def restored(self, max_bytes: int | None = None) -> Router:
        fresh = router()
        batches = self.view.snapshot() if max_bytes is None else self.view.snapshot(max_bytes)
        fresh.load_snapshot(W, self.view.seq if self.view.seq is not None else -1, batches)
        return fresh


def prompts(rng: random.Random, n: int) -> list[list[int]]:
    """Prompts sharing prefixes (a few system prompts, then distinct parts)."""
    systems = [[rng.randrange(50_000) for _ in range(rng.choice((16, 48, 100)))] for _ in range(4)]
    return [rng.choice(systems) + [rng.randrange(50_000) for _ in range(rng.randrange(0, 120))] for _ in range(n)]


def matches(r: Router, ps: list[list[int]]) -> list[int]:
    return [r.route(p, [W]).overlap_blocks for p in ps]


def test_snapshot_restores_what_a_live_router_holds_through_stores_evictions_copies_and_clears():
    rng = random.Random(1)
    pair = Pair()
    ps = prompts(rng, 60)
    for step in range(300):
        roll = rng.random()
        if roll < 0.6:
            pair.feed(pair.engine.prefill(rng.choice(ps)))
        elif roll < 0.95:
            held = list(pair.engine.copies)
            pair.feed(pair.engine.evict(rng.sample(held, min(len(held), rng.randrange(1, 6)))))
        elif roll < 0.97:
            pair.feed(pair.engine.clear())
        else:  # a block recomputed after a miss: a second physical copy of a cached hash
            p = rng.choice(ps)
            hashes = pair.engine.engine_hashes(p)
            if len(hashes) >= 2:
                h = hashes[1]
                pair.engine.copies[h] = pair.engine.copies.get(h, 0) + 1
                pair.feed([BlockStored(block_hashes=[h], parent_block_hash=hashes[0], token_ids=p[BS:2 * BS],
                                       block_size=BS)])
        if step % 50 == 49:
            fresh = pair.restored()
            assert matches(fresh, ps) == matches(pair.live, ps)
    assert any(matches(pair.live, ps)), "the workload should leave blocks cached"
    # Copies are restored too: evicting one copy everywhere leaves the same blocks matched.
    fresh = pair.restored()
    evict = pair.feed(pair.engine.evict(list(pair.engine.copies)))
    fresh.apply_events(W, evict.seq, evict.batch)
    assert matches(fresh, ps) == matches(pair.live, ps)


def test_snapshot_then_live_batches_after_its_seq_equal_the_live_router_and_older_ones_are_duplicates():
    rng = random.Random(2)
    pair = Pair()
    ps = prompts(rng, 30)
    for p in ps[:15]:
        pair.feed(pair.engine.prefill(p))
    taken_at = pair.view.seq
    batches = pair.view.snapshot()
    later = [pair.feed(pair.engine.prefill(p)) for p in ps[15:]]
    later.append(pair.feed(pair.engine.evict(pair.engine.engine_hashes(ps[0])[-2:])))
    fresh = router()
    fresh.load_snapshot(W, taken_at, batches)
    for message in pair.relayed[-20:]:  # a buffer of live batches overlapping the snapshot
        fresh.apply_events(W, message.seq, message.batch)
    assert matches(fresh, ps) == matches(pair.live, ps)
    assert fresh.apply_events(W, taken_at, batches[0]).status == "duplicate"


def test_a_gap_clears_the_view_as_it_clears_the_router_and_duplicates_are_ignored():
    pair = Pair()
    pair.feed(pair.engine.prefill(list(range(64))))
    assert len(pair.view) == 4
    pair.view.apply(pair.relayed[0])  # a duplicate
    assert len(pair.view) == 4 and pair.view.seq == 0
    pair.engine.seq += 3  # three batches lost
    pair.feed(pair.engine.prefill(list(range(1000, 1032))))
    assert len(pair.view) == 2 and pair.view.seq == 4
    assert matches(pair.restored(), [list(range(64)), list(range(1000, 1032))]) == [0, 2]


def test_blocks_whose_parent_was_evicted_are_left_out():
    pair = Pair()
    prompt = list(range(64))
    pair.feed(pair.engine.prefill(prompt))
    pair.feed(pair.engine.evict(pair.engine.engine_hashes(prompt)[:1]))
    batches = pair.view.snapshot()
    assert batches == [] and matches(pair.live, [prompt]) == [0]


def test_chunks_stay_under_the_byte_limit_and_a_big_view_fits_nats_messages():
    rng = random.Random(3)
    pair = Pair()
    for _ in range(400):  # 400 prompts of 50 blocks: 20k blocks, ~3 MB of token ids as JSON
        pair.feed(pair.engine.prefill([rng.randrange(200_000) for _ in range(50 * BS)]))
    assert len(pair.view) == 20_000
    for limit in (4096, 64 * 1024, None):
        batches = pair.view.snapshot() if limit is None else pair.view.snapshot(limit)
        sizes = [len(msgspec.json.encode(b)) for b in batches]
        assert max(sizes) <= (limit or 256 * 1024)
        assert sum(len(e.block_hashes) for b in batches for e in b.events) == 20_000
    chunk = KvSnapshotChunk(worker_id=W, seq=399, index=0, last=False, batch=batches[0])
    assert len(msgspec.json.encode(chunk)) < 300 * 1024  # NATS's default max_payload is 1 MB
    assert len(batches) >= 8
    ps = [[t for e in b.events for t in e.token_ids[:BS * 3]] for b in batches[:3]]
    assert matches(pair.restored(), ps) == matches(pair.live, ps)


def test_empty_view_renders_no_batches():
    view = KvView()
    assert view.snapshot() == [] and view.seq is None
    view.apply(RelayedKvEvents(worker_id=W, seq=5, batch=KvEventBatch(ts=0.0, events=[])))
    assert view.seq == 5 and view.snapshot() == []


def test_a_snapshot_is_rendered_once_until_the_view_changes():
    pair = Pair()
    pair.feed(pair.engine.prefill(list(range(64))))
    first = pair.view.snapshot()
    assert pair.view.snapshot() is first
    assert pair.view.snapshot(4096) is not first
    pair.feed(pair.engine.prefill(list(range(100, 132))))
    assert sum(len(e.block_hashes) for b in pair.view.snapshot() for e in b.events) == 6
