"""Ingestion of events built the way vLLM builds them (see conftest.FakeEngine)."""

import random

import msgspec
import pytest

from dynamo_lite.protocol import BlockStored, KvEventBatch, RelayedKvEvents, WorkerId
from router.events import KvEventIngestor, SeqStatus
from router.hashing import hash_blocks
from router.index import KvIndex

BS = 16
A, B = WorkerId("a"), WorkerId("b")


def random_prompt(rng: random.Random, n: int) -> list[int]:
    return [rng.randrange(50_000) for _ in range(n)]


@pytest.fixture
def setup(engine_factory):
    idx = KvIndex()
    idx.add_worker(A)
    idx.add_worker(B)
    return idx, KvEventIngestor(idx, BS), engine_factory(BS, salt=1), engine_factory(BS, salt=2)


def feed(ing, w, engine, events):
    seq, batch = engine.batch(events)
    return ing.apply(w, seq, batch)


def test_router_hashes_match_blocks_stored_by_engines_with_different_seeds(setup):
    idx, ing, ea, eb = setup
    rng = random.Random(0)
    prompt = random_prompt(rng, 100)  # 6 full blocks + 4 tokens
    feed(ing, A, ea, ea.prefill(prompt))
    feed(ing, B, eb, eb.prefill(prompt[:50]))  # 3 full blocks
    assert ea.engine_hashes(prompt) != eb.engine_hashes(prompt)
    assert idx.find_matches(hash_blocks(prompt, BS)) == {A: 6, B: 3}


def test_store_extending_a_cached_prefix_uses_the_parent_hash(setup):
    idx, ing, ea, _ = setup
    rng = random.Random(1)
    system = random_prompt(rng, 64)
    turn1 = system + random_prompt(rng, 40)
    turn2 = turn1 + random_prompt(rng, 60)
    feed(ing, A, ea, ea.prefill(turn1))
    events = ea.prefill(turn2)
    stored = events[0]
    assert isinstance(stored, BlockStored) and stored.parent_block_hash is not None
    out = feed(ing, A, ea, events)
    assert out.stored == len(stored.block_hashes) and out.orphaned == 0
    assert idx.find_matches(hash_blocks(turn2, BS)) == {A: len(turn2) // BS}


def test_a_fully_cached_prompt_emits_nothing(setup):
    _, _, ea, _ = setup
    prompt = list(range(64))
    ea.prefill(prompt)
    assert ea.prefill(prompt) == []


def test_removed_and_cleared(setup):
    idx, ing, ea, _ = setup
    prompt = list(range(80))
    feed(ing, A, ea, ea.prefill(prompt))
    hashes = hash_blocks(prompt, BS)
    last_two = ea.engine_hashes(prompt)[-2:]
    out = feed(ing, A, ea, ea.evict(last_two))
    assert out.removed == 2
    assert idx.find_matches(hashes) == {A: 3}
    feed(ing, A, ea, ea.clear())
    assert idx.find_matches(hashes) == {}


def test_gap_clears_the_worker_and_asks_for_resync(setup):
    idx, ing, ea, eb = setup
    p1, p2 = list(range(32)), list(range(1000, 1032))
    feed(ing, A, ea, ea.prefill(p1))
    feed(ing, B, eb, eb.prefill(p1))
    ea.batch([])  # a lost batch: seq 1 never arrives
    out = feed(ing, A, ea, ea.prefill(p2))
    assert out.status is SeqStatus.GAP and out.needs_resync and out.missed_from == 1
    assert idx.find_matches(hash_blocks(p1, BS)) == {B: 2}  # A's old blocks forgotten, B untouched
    assert idx.find_matches(hash_blocks(p2, BS)) == {A: 2}  # the batch itself is the new baseline
    assert feed(ing, A, ea, []).status is SeqStatus.APPLIED


def test_duplicates_and_unknown_workers_are_ignored(setup):
    idx, ing, ea, _ = setup
    seq, batch = ea.batch(ea.prefill(list(range(32))))
    assert ing.apply(A, seq, batch).status is SeqStatus.APPLIED
    assert ing.apply(A, seq, batch).status is SeqStatus.DUPLICATE
    assert ing.apply(WorkerId("ghost"), 0, batch).status is SeqStatus.UNKNOWN_WORKER
    assert not idx.has_worker(WorkerId("ghost"))


def test_resync_accepts_any_next_sequence(setup):
    idx, ing, ea, _ = setup
    feed(ing, A, ea, ea.prefill(list(range(32))))
    ing.resync(A)
    assert idx.num_blocks(A) == 0
    seq, batch = ea.batch(ea.prefill(list(range(500, 532))))
    assert ing.apply(A, seq + 10, batch).status is SeqStatus.APPLIED


def test_orphaned_and_rejected_stores(setup):
    idx, ing, ea, _ = setup
    orphan = BlockStored(block_hashes=[5], parent_block_hash=77, token_ids=list(range(BS)), block_size=BS)
    wrong_size = BlockStored(block_hashes=[6], parent_block_hash=None, token_ids=list(range(32)), block_size=32)
    short = BlockStored(block_hashes=[7, 8], parent_block_hash=None, token_ids=list(range(BS)), block_size=BS)
    out = ing.apply(A, 0, KvEventBatch(ts=0.0, events=[orphan, wrong_size, short]))
    assert (out.orphaned, out.rejected, out.stored) == (1, 3, 0)
    assert idx.num_nodes == 0


def test_decodes_vllm_wire_payload_and_relayed_envelope(setup):
    idx, ing, _, _ = setup
    tokens = list(range(2000, 2032))
    # vLLM's msgpack payload: [ts, [event...], dp_rank], events tagged by type name.
    wire = msgspec.msgpack.encode(
        [
            1.5,
            [
                {
                    "type": "BlockStored",
                    "block_hashes": [3734262876719895628, 11028736105599996193],
                    "parent_block_hash": None,
                    "token_ids": tokens,
                    "block_size": BS,
                    "lora_id": None,
                    "medium": "GPU",
                }
            ],
            0,
        ]
    )
    batch = msgspec.msgpack.decode(wire, type=KvEventBatch)
    relayed = msgspec.json.decode(
        msgspec.json.encode(RelayedKvEvents(worker_id=A, seq=7, batch=batch)), type=RelayedKvEvents
    )
    out = ing.apply(relayed.worker_id, relayed.seq, relayed.batch)
    assert out.stored == 2
    assert idx.find_matches(hash_blocks(tokens, BS)) == {A: 2}
