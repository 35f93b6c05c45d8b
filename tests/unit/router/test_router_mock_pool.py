"""Cross-check: the index fed by the mock engine's block pool equals that pool's prefix cache.

The mock engine (dynamo_lite/engines/mock) emits vLLM's events from a real paged
pool with LRU eviction, under its own hash function; after every request the
router's overlap must equal the pool's own prefix lookup.
"""

import random

import pytest

from dynamo_lite.protocol import KvEventBatch, WorkerId
from router import Router, RouterConfig

blocks = pytest.importorskip("dynamo_lite.engines.mock.blocks")

BS = 4
W = WorkerId("mock")


def serve(pool, tokens: list[int]) -> None:
    """What the mock scheduler does for one prompt: reuse hits, compute and cache the rest, free."""
    n = len(tokens) // BS
    hashes = blocks.hash_blocks(tokens, BS)
    hits = pool.lookup_prefix(hashes)
    pool.touch(hits)
    new = pool.allocate(n - len(hits)) or []
    parent = hashes[len(hits) - 1] if hits else None
    lo, hi = len(hits), len(hits) + len(new)
    pool.cache_blocks(new, hashes[lo:hi], parent, tokens[lo * BS : hi * BS])
    pool.free(hits + new)


@pytest.mark.parametrize("seed", range(5))
def test_index_tracks_the_mock_pool_under_eviction(seed):
    rng = random.Random(seed)
    pool = blocks.BlockPool(num_blocks=24, block_size=BS)
    router = Router(RouterConfig(block_size=BS), rng=random.Random(0))
    router.add_worker(W)
    stems = [[rng.randrange(100) for _ in range(BS * rng.randrange(1, 4))] for _ in range(4)]
    for seq in range(200):
        tokens = rng.choice(stems) + [rng.randrange(100) for _ in range(BS * rng.randrange(0, 5) + rng.randrange(BS))]
        serve(pool, tokens)
        outcome = router.apply_events(W, seq, KvEventBatch(ts=float(seq), events=pool.take_events()))
        assert outcome.orphaned == outcome.rejected == outcome.unknown_removed == 0
        probe = rng.choice(stems) + tokens[: rng.randrange(len(tokens) + 1)]
        expected = len(pool.lookup_prefix(blocks.hash_blocks(probe, BS)))
        assert router.route(probe, [W]).overlap_blocks == expected
