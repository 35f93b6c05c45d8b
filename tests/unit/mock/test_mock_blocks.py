"""Block pool: prefix hits, LRU eviction order, KV events."""

from __future__ import annotations

import pytest

from dynamo_lite.engines.mock.blocks import BlockPool, hash_blocks
from dynamo_lite.protocol import AllBlocksCleared, BlockRemoved, BlockStored

BS = 4


def store(pool: BlockPool, tokens: list[int]) -> list:
    """Allocate and cache the full blocks of `tokens` for one sequence; returns its blocks."""
    hashes = hash_blocks(tokens, BS)
    hits = pool.lookup_prefix(hashes)
    pool.touch(hits)
    blocks = hits + (pool.allocate(len(hashes) - len(hits)) or [])
    parent = hashes[len(hits) - 1] if hits else None
    pool.cache_blocks(blocks[len(hits) :], hashes[len(hits) :], parent, tokens[len(hits) * BS : len(hashes) * BS])
    return blocks


def test_hashes_are_chained_and_deterministic() -> None:
    a = hash_blocks(list(range(12)), BS)
    assert len(a) == 3 and a == hash_blocks(list(range(12)), BS)
    b = hash_blocks([99, 1, 2, 3, 4, 5, 6, 7], BS)
    assert b[1] != a[1]  # same tokens in block 1, different parent


def test_prefix_hit_after_free_and_event_shape() -> None:
    pool = BlockPool(num_blocks=8, block_size=BS)
    tokens = list(range(10))  # two full blocks and a partial one
    blocks = store(pool, tokens)
    [event] = pool.take_events()
    assert isinstance(event, BlockStored)
    assert event.block_hashes == hash_blocks(tokens, BS) and event.parent_block_hash is None
    assert event.token_ids == tokens[:8] and event.block_size == BS
    pool.free(blocks)
    assert pool.usage == 0 and pool.num_free_blocks == 8
    hits = pool.lookup_prefix(hash_blocks(tokens[:8] + [77, 78, 79, 80], BS))
    assert [b.block_id for b in hits] == [b.block_id for b in blocks]


def test_second_sequence_extends_the_chain_with_its_parent() -> None:
    pool = BlockPool(num_blocks=8, block_size=BS)
    first = store(pool, list(range(8)))
    pool.take_events()
    store(pool, list(range(8)) + [50, 51, 52, 53])
    [event] = pool.take_events()
    assert isinstance(event, BlockStored)
    assert event.parent_block_hash == hash_blocks(list(range(8)), BS)[-1]
    assert first[0].ref_count == 2


def test_lru_eviction_order_and_removed_events() -> None:
    pool = BlockPool(num_blocks=4, block_size=BS)
    a = store(pool, [1] * 8)  # blocks a0, a1
    b = store(pool, [2] * 8)  # blocks b0, b1
    pool.free(a)  # freed first: a1 then a0 (the tail of a sequence goes first)
    pool.free(b)
    pool.take_events()
    got = pool.allocate(3)
    assert got is not None
    removed = [e.block_hashes[0] for e in pool.take_events() if isinstance(e, BlockRemoved)]
    ha, hb = hash_blocks([1] * 8, BS), hash_blocks([2] * 8, BS)
    assert removed == [ha[1], ha[0], hb[1]]
    assert [b.block_hash for b in pool.lookup_prefix(hb)] == hb[:1]  # only b's head survives
    assert not pool.is_cached(ha[0])


def test_uncached_free_blocks_are_used_before_evicting() -> None:
    pool = BlockPool(num_blocks=3, block_size=BS)
    cached = store(pool, [1] * 4)
    scratch = pool.allocate(2)
    assert scratch is not None
    pool.free(cached)
    pool.free(scratch)
    pool.allocate(2)
    assert not [e for e in pool.take_events() if isinstance(e, BlockRemoved)]
    assert pool.is_cached(hash_blocks([1] * 4, BS)[0])


def test_allocate_fails_without_taking_anything() -> None:
    pool = BlockPool(num_blocks=2, block_size=BS)
    assert pool.allocate(3) is None
    assert pool.num_free_blocks == 2


def test_touch_protects_a_hit_from_eviction() -> None:
    pool = BlockPool(num_blocks=2, block_size=BS)
    blocks = store(pool, [1] * 8)
    pool.free(blocks)
    pool.touch(blocks[:1])
    assert pool.num_free_blocks == 1
    pool.allocate(1)
    assert pool.is_cached(hash_blocks([1] * 8, BS)[0])


def test_reset_prefix_cache_emits_all_cleared() -> None:
    pool = BlockPool(num_blocks=4, block_size=BS)
    blocks = store(pool, [3] * 8)
    assert not pool.reset_prefix_cache()  # blocks are referenced
    pool.free(blocks)
    pool.take_events()
    assert pool.reset_prefix_cache()
    assert pool.take_events() == [AllBlocksCleared()]
    assert pool.num_cached_blocks == 0


def test_duplicate_block_is_not_stored_twice() -> None:
    pool = BlockPool(num_blocks=8, block_size=BS)
    tokens = [5] * 8
    store(pool, tokens)
    pool.take_events()
    other = pool.allocate(2)
    assert other is not None
    pool.cache_blocks(other, hash_blocks(tokens, BS), None, tokens)  # computed concurrently
    assert pool.take_events() == []


@pytest.mark.parametrize("num_blocks,block_size", [(0, 16), (4, 0)])
def test_rejects_empty_pool(num_blocks: int, block_size: int) -> None:
    with pytest.raises(ValueError):
        BlockPool(num_blocks, block_size)
